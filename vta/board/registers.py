"""VTA's four HLS register blocks, over the C simulator: what the simulated board's MMIO reads and writes hit.

Each block (fetch, load, compute, store at ``cfg.mmio_address(block)``) has Vivado HLS's AXI-lite map:

- ``0x00`` control: bit 0 ``ap_start`` (R/W), bit 1 ``ap_done`` (clear on read), bit 2 ``ap_idle``,
  bit 3 ``ap_ready`` (a pulse, reads 0), bit 7 ``auto_restart`` (R/W); ``0x04`` GIE, ``0x08`` IER,
  ``0x0c`` ISR (toggle on write), with ``ap_ctrl_hs``'s semantics as the generated RTL has them
  (hardware/control.py): a block's ap_done event (the same moments its clear-on-read ap_done latches) sets the ISR
  bits that IER enables at that moment (bit 0 ap_done, bit 1 ap_ready, which comes with ap_done in every VTA
  block), a write toggles the ISR bits where its data has a 1, GIE keeps bit 0 and IER bits 0-1, and the block's
  interrupt output (``SimulatedVTA.interrupts``) is GIE and (ISR bit 0 or 1). pynq's remote mode carries no
  interrupt line: a client sees the output only through the ISR it reads. The
  performance counters the generated RTL adds at 0x40 and up (hardware/registers.py ``COUNTER_REGISTERS``) are
  not here: VTA's bitstreams have none (the driver reports the simulator's counters).
- fetch: ``0x10`` instruction count, ``0x18`` instruction address (``0x1c`` its high word);
  load: ``0x10`` inputs, ``0x18`` weights; compute: ``0x10`` ``done_i`` (R/W, no effect, as in HLS),
  ``0x18`` ``done_o`` (read only), ``0x1c`` its ``ap_vld`` (clear on read), ``0x20`` uops, ``0x28`` biases;
  store: ``0x10`` outputs. The pointer registers are the m_axi base offsets, which VTA's driver sets to 0
  because instructions carry absolute addresses; the simulated board refuses to run with any other value.

A run starts when fetch gets ``ap_start`` and load, compute and store are running (``0x81``: ap_start with
auto_restart, as VTADeviceRun writes). Fetch reads the stream from board DRAM at the instruction address
and the simulator executes it. Board time follows the timing model: an event at simulated cycle ``c`` is
visible at ``t0 + c / CLOCK_MHZ * time_scale`` (never before the simulator has produced it), so a run lasts
as long as the modelled hardware would (at least as long as the simulator takes).

``done`` is VTA's level register, not clear-on-read (apache/tvm discuss RFC 6743): the HLS compute block
(``vta.cc``) writes ``done = 0`` for every instruction it executes (LOAD UOP/ACC, GEMM, ALU, a compute NOP)
and ``done = 1`` for FINISH, so after a run it stays 1 until the *next* program's first compute instruction
executes; a host that polls ``done`` right after a launch reads the previous run's 1. The
compute block runs once per instruction (auto_restart), so its ``ap_done`` latches at every compute
instruction's completion, which is what ``vta.device_pynq`` uses to tell a fresh ``done`` from a stale one.

The board is shared by clients that do not trust each other (pynq's remote protocol has no keys), so, unlike
a real board, it isolates them. A launch whose instruction fetch or whose LOAD/STORE DRAM ranges leave the
launching client's own buffers (``regions_of(peer)``) is refused before it runs, naming the instruction and
the range. Every register is each client's own (``_Regs``): the data registers (instruction count and address,
the pointer registers), every block's control register (``ap_start``'s state and ``auto_restart``: whether a
module runs, once or per instruction) and the interrupt registers. A launch uses what its client wrote and
begins once its client's load, compute and store run, so clients launching at the same time cannot mix their
launches, and one client's control writes (compute ``0x1``, a module stopped) cannot make another's run fault or
wait; a bitstream download resets its own client's registers and launches only. So is what the
status registers show of runs (fetch's ``ap_start``/``ap_idle``, every block's ``ap_done``, compute's ``done`` and
its ``ap_vld``): a client sees its own runs only, so clients polling at once each wait for their own run (on a real
board they are shared: a client would take another's FINISH for its own, and its clear-on-read of ``ap_done``
would hide the other's). Reads without a client (``peer=""``) show every run, as a real board would. A refused or faulting run (deadlock, budget, ...) hangs the accelerator *for its client only*: that
client's register reads show the hang (fetch never idle, ``done`` where the fault left it), as a real board's
would, and its status names the fault, until it launches again or a bitstream is downloaded; for everyone
else the accelerator is reset at once (the next run starts from cleared SRAMs) and queued launches go on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hw_config import OPCODES, HwConfig
from hw_config.config import MMIO_BLOCKS
from hw_config.isa_rules import MODULES, module_indices
from hw_config.layout import OPCODE_BITS
from simulator.core import Simulator
from simulator.errors import SimulatorError
from simulator.stats import RunStats
from vta.program_check import ProgramRejected, check_dma_ranges

CTRL, GIE, IER, ISR = 0x00, 0x04, 0x08, 0x0C
INT_AP_DONE, INT_AP_READY = 0x1, 0x2   # IER/ISR bits
AP_START, AP_DONE, AP_IDLE, AP_READY, AUTO_RESTART = 0x01, 0x02, 0x04, 0x08, 0x80
FETCH_INSN_COUNT, FETCH_INSN_ADDR = 0x10, 0x18
LOAD_INP_ADDR, LOAD_WGT_ADDR = 0x10, 0x18
COMPUTE_DONE_WR, COMPUTE_DONE_RD, COMPUTE_DONE_VLD = 0x10, 0x18, 0x1C
COMPUTE_UOP_ADDR, COMPUTE_BIAS_ADDR = 0x20, 0x28
STORE_OUT_ADDR = 0x10
BLOCKS = MMIO_BLOCKS
# 64-bit m_axi offset registers (low word at the offset, high word at +4)
POINTERS = {"fetch": (FETCH_INSN_ADDR,), "load": (LOAD_INP_ADDR, LOAD_WGT_ADDR),
            "compute": (COMPUTE_UOP_ADDR, COMPUTE_BIAS_ADDR), "store": (STORE_OUT_ADDR,)}
DATA_REGS = {"fetch": {FETCH_INSN_COUNT, FETCH_INSN_ADDR, FETCH_INSN_ADDR + 4},
             "load": {LOAD_INP_ADDR, LOAD_INP_ADDR + 4, LOAD_WGT_ADDR, LOAD_WGT_ADDR + 4},
             "compute": {COMPUTE_DONE_WR, COMPUTE_UOP_ADDR, COMPUTE_UOP_ADDR + 4, COMPUTE_BIAS_ADDR,
                         COMPUTE_BIAS_ADDR + 4},
             "store": {STORE_OUT_ADDR, STORE_OUT_ADDR + 4}}
TRACE_LIMIT = 1 << 16   # runs up to this many instructions get per-instruction event times
U32 = 0xFFFFFFFF
MAX_FAULTED = 1024       # clients remembered with a faulted run (the oldest are forgotten past this)


class RegisterError(ValueError):
    """A register access the board cannot perform (unprogrammed PL, bad offset)."""


@dataclass
class _Regs:
    """One client's own registers: the data registers it wrote, every block's control register (``ap_start``'s
    state and ``auto_restart``: whether load, compute and store run, and once or per instruction) and the interrupt
    registers. Another client's writes never reach them, and a client's launch runs with its own."""

    words: dict[tuple[str, int], int] = field(default_factory=dict)
    ctrl: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BLOCKS, 0))
    irq: dict[str, list[int]] = field(default_factory=lambda: {b: [0, 0, 0] for b in BLOCKS})   # GIE, IER, ISR
    irq_mark: float = -np.inf   # ap_done events up to this time are in ISR already (``SimulatedVTA._fold_irq``)
    started: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(MODULES, False))
    single_shot: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(MODULES, False))


@dataclass
class _Hang:
    """What one client sees after its run faulted: the hung accelerator of that run."""

    seq: int
    fault: str
    done: int                  # the level ``done`` the fault left
    compute_done: bool         # compute's ap_done latched once (a compute instruction ran before the fault)


class _Cor:
    """A clear-on-read status bit fed by event times: reads 1 if an event happened since the last read."""

    def __init__(self) -> None:
        self.latch = False
        self.mark = -np.inf

    def fold(self, events: np.ndarray, now: float) -> None:
        """Carry events up to ``now`` into the latch (before a new run replaces the event list)."""
        self.latch = self.latch or bool(np.any((events > self.mark) & (events <= now)))
        self.mark = max(self.mark, now)

    def read(self, events: np.ndarray, now: float) -> bool:
        value = self.latch or bool(np.any((events > self.mark) & (events <= now)))
        self.latch = False
        self.mark = now
        return value


NO_EVENTS = np.zeros(0)


@dataclass
class _Outcome:
    """What executing a run produced, in cycles; published to the registers (as wall times) in one step."""

    fault: str | None = None
    done_after_fault: int = 0
    refused: bool = False              # refused before it ran (it left its client's buffers)
    ran_compute: bool = False          # a faulting run executed a compute instruction before its fault
    stats: RunStats | None = None
    host_seconds: float = 0.0
    clear_cycle: float | None = None   # first compute-module instruction (not FINISH) starts
    compute_cycles: np.ndarray = field(default_factory=lambda: NO_EVENTS)   # compute instructions complete
    finishes: bool = True              # it executes a FINISH (which sets done = 1)


@dataclass
class _View:
    """The status registers as one client sees them (its own runs only), or the board's (every run): the run it
    last saw begin, the level ``done`` before it and after the earlier ones, and the clear-on-read bits."""

    run: Run | None = None
    done: int = 0                  # ``done`` after the runs before ``run``
    cor: dict[str, _Cor] = field(default_factory=lambda: {b: _Cor() for b in BLOCKS})
    vld: _Cor = field(default_factory=_Cor)

    def begin(self, run: Run, t: float) -> None:
        """``run`` begins at ``t``: the previous run's final values become the steady state."""
        if self.run is not None:
            self.done = self.done_at(t)
            for name in BLOCKS:
                self.cor[name].fold(self.events(name), t)
            self.vld.fold(self.events("done_vld"), t)
        self.run = run

    def events(self, name: str) -> np.ndarray:
        r = self.run
        if r is None or r.ready is None:
            return NO_EVENTS
        return r.events.get(name, NO_EVENTS)

    def done_at(self, t: float) -> int:
        r = self.run
        if r is None or r.t0 is None:
            return self.done
        if r.fault is not None:
            return r.done_after_fault
        if r.ready is None or r.end_at is None:
            return self.done
        if t >= r.end_at and r.finishes:
            return 1
        if r.clear_at is not None and t >= r.clear_at:
            return 0
        return self.done


@dataclass
class Run:
    """One launch of the fetch module and what the board shows of it over time (monotonic seconds)."""

    seq: int
    peer: str
    count: int
    insn_addr: int
    requested: float
    t0: float | None = None        # began executing: fetch started and load/compute/store running
    ready: float | None = None     # the simulator has finished it (no event is visible before this)
    clear_at: float | None = None  # first compute instruction (not FINISH): done -> 0
    end_at: float | None = None    # FINISH: done -> 1, fetch ap_done, ap_idle
    finishes: bool = True          # it has a FINISH: done rises at end_at (else it stays as it was)
    done_before: int = 0           # the level ``done`` had when the run began
    done_after_fault: int = 0
    events: dict[str, np.ndarray] = field(default_factory=dict)
    fault: str | None = None
    stats: RunStats | None = None
    host_seconds: float = 0.0
    regs: dict[tuple[str, int], int] = field(default_factory=dict)   # the m_axi pointer registers at launch
    cancelled: bool = False        # its client downloaded the bitstream meanwhile: its outcome is forgotten


class SimulatedVTA:
    """The register blocks and the run worker of one simulated board (thread safe).

    ``sim_lock`` serialises every call into ``sim`` (the board's DRAM and accelerator); the server holds it
    for buffer transfers. Register accesses never wait for a run.
    """

    def __init__(self, cfg: HwConfig, sim: Simulator, *, sim_lock: threading.Lock | None = None,
                 time_scale: float = 1.0, max_cycles: int | None = None, max_work: int | None = None,
                 log: logging.Logger | None = None,
                 regions_of: Callable[[str], list[tuple[int, int]]] | None = None):
        if not time_scale > 0:
            raise ValueError(f"time_scale={time_scale!r}: need a positive number")
        self.cfg, self.sim = cfg, sim
        self.sim_lock = sim_lock or threading.Lock()
        self.time_scale = float(time_scale)
        self.max_cycles, self.max_work = max_cycles, max_work
        self.log = log or logging.getLogger("vta.board")
        self.bases = {b: cfg.mmio_address(b) for b in BLOCKS}
        self._cond = threading.Condition()
        self._stop = False
        self.programmed: str | None = None
        self.runs_total = 0
        self.faults_total = 0
        self.last_run: dict | None = None
        self.last_fault: str | None = None
        self.regions_of = regions_of               # a client's buffers: (address, bytes); None: no isolation
        self.hangs: OrderedDict[str, _Hang] = OrderedDict()       # clients whose last run faulted
        self.peer_faults: OrderedDict[str, str] = OrderedDict()   # each client's last fault, for its status
        self._reset_state()
        self._worker = threading.Thread(target=self._work, name="vta-board-runner", daemon=True)
        self._worker.start()

    # ---- state ----
    def _reset_state(self) -> None:
        self.regs: OrderedDict[str, _Regs] = OrderedDict()   # per client: its own registers
        self.all = _View()   # what the board shows of every run (reads without a client)
        self.views: OrderedDict[str, _View] = OrderedDict()   # per client: what it sees of its own runs
        self.queue: deque[Run] = deque()
        self.generation = getattr(self, "generation", 0) + 1
        self._sram_reset = True
        self._sram_owner: str | None = None   # the client whose run last used the SRAMs

    def _regs(self, peer: str) -> _Regs:
        """``peer``'s registers as they read (reset values for a client that never wrote one)."""
        return self.regs.get(peer) or _Regs()

    def _own_regs(self, peer: str) -> _Regs:
        """``peer``'s registers, to write (the most recently written are kept: ``MAX_FAULTED`` clients; a client
        forgotten loses its queued launches, which could never start again)."""
        regs = self.regs.pop(peer, None) or _Regs(irq_mark=self.now())   # IER was 0 until now: no event counts
        self.regs[peer] = regs
        while len(self.regs) > MAX_FAULTED:
            old, _ = self.regs.popitem(last=False)
            self.queue = deque(r for r in self.queue if r.peer != old)
        return regs

    def reset(self, bitstream: str, peer: str | None = None) -> None:
        """A bitstream download by ``peer``: that client's registers back to their reset values, its queued
        launches dropped and a run of its that is executing forgotten, its hang over; the PL runs ``bitstream``.
        Other clients' registers, launches and runs are theirs and go on (``peer=None``: everyone's are reset).

        DRAM (the board's buffers) is kept, as CMA memory survives reconfiguration; SRAMs are zeroed before the
        next run.
        """
        with self._cond:
            if peer is None:
                self._reset_state()
                self.hangs.clear()
            else:
                self.regs.pop(peer, None)
                self.views.pop(peer, None)
                self.hangs.pop(peer, None)
                self.queue = deque(r for r in self.queue if r.peer != peer)
                r = self.all.run
                if r is not None and r.peer == peer and r.ready is None:
                    r.cancelled = True   # executing now: its outcome is not published (see _work)
                self._sram_reset = True
            self.programmed = bitstream
            self._cond.notify_all()
        # (debug: the board's server says it once, with the client and the size, at info)
        self.log.debug("PL programmed with %s: VTA register blocks reset for %s", bitstream,
                       "everyone" if peer is None else peer or "the local client")

    def close(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._worker.join(timeout)

    @staticmethod
    def now() -> float:
        return time.monotonic()

    def block_at(self, address: int, length: int) -> tuple[str, int] | None:
        """The block whose register range holds ``[address, address + length)``, and the offset in it."""
        for name, base in self.bases.items():
            if base <= address and address + length <= base + self.cfg.MMIO_RANGE:
                return name, address - base
        return None

    # ---- what the runs show at time t (called with the lock held) ----
    @property
    def run(self) -> Run | None:
        """The run executing or last begun (any client's)."""
        return self.all.run

    def _view(self, peer: str) -> _View:
        """What ``peer`` sees of its own runs (every run for ``peer=""``); a client without runs sees none."""
        return (self.views.get(peer) or _View()) if peer else self.all

    def _queued(self, peer: str) -> bool:
        return any(r.peer == peer for r in self.queue) if peer else bool(self.queue)

    def _in_flight(self, view: _View, peer: str, t: float) -> bool:
        r = view.run
        if self._queued(peer):
            return True
        if r is None:
            return False
        return r.t0 is None or r.fault is not None or r.end_at is None or t < r.end_at

    def _ctrl_value(self, view: _View, peer: str, name: str, t: float) -> int:
        regs = self._regs(peer)
        value = regs.ctrl[name] & AUTO_RESTART
        if name == "fetch":
            if self._queued(peer):
                value |= AP_START
            if not self._in_flight(view, peer, t):
                value |= AP_IDLE
        else:
            if regs.started[name]:
                value |= AP_START if not regs.single_shot[name] else 0
            else:
                value |= AP_IDLE
        if view.cor[name].read(view.events(name), t):
            value |= AP_DONE
        return value

    # ---- register access ----
    def read(self, name: str, offset: int, peer: str = "") -> int:
        """A 32-bit register read (offset word aligned, inside the block), as ``peer`` sees it."""
        self._check(name, offset)
        with self._cond:
            if offset in (GIE, IER, ISR):
                self._fold_irq(peer, self.now())
            hang = self.hangs.get(peer) if peer else None
            if hang is not None:
                return self._hung_value(hang, name, offset, peer)
            t = self.now()
            view = self._view(peer)
            if offset == CTRL:
                return self._ctrl_value(view, peer, name, t)
            if offset in (GIE, IER, ISR):
                return self._regs(peer).irq[name][(offset - GIE) // 4]
            if name == "compute" and offset == COMPUTE_DONE_RD:
                return view.done_at(t)
            if name == "compute" and offset == COMPUTE_DONE_VLD:
                return int(view.vld.read(view.events("done_vld"), t))
            return self._word(peer, name, offset)

    def _hung_value(self, hang: _Hang, name: str, offset: int, peer: str) -> int:
        """A register as the client whose run faulted sees it: the accelerator hung where the fault left it."""
        regs = self._regs(peer)
        if offset == CTRL:
            value = regs.ctrl[name] & AUTO_RESTART
            if name != "fetch":
                value |= (AP_START if not regs.single_shot[name] else 0) if regs.started[name] else AP_IDLE
            if name == "compute" and hang.compute_done:
                hang.compute_done = False
                value |= AP_DONE
            return value
        if offset in (GIE, IER, ISR):
            return regs.irq[name][(offset - GIE) // 4]
        if name == "compute" and offset == COMPUTE_DONE_RD:
            return hang.done
        if name == "compute" and offset == COMPUTE_DONE_VLD:
            return 0
        return self._word(peer, name, offset)

    def write(self, name: str, offset: int, value: int, peer: str = "") -> None:
        """A 32-bit register write; fetch's ap_start launches a run."""
        self._check(name, offset)
        value &= U32
        with self._cond:
            if offset == CTRL and name == "fetch" and value & AP_START:
                self.hangs.pop(peer, None)   # a new launch: its client's view of the old hang ends
            regs = self._own_regs(peer)   # each client's own: another's writes and launches never use them
            if offset in (GIE, IER, ISR):   # the events before this write meet the IER they happened under
                self._fold_irq(peer, self.now())
            if offset == CTRL:
                self._write_ctrl(name, value, peer, regs)
            elif offset == ISR:
                regs.irq[name][2] ^= value & (INT_AP_DONE | INT_AP_READY)
            elif offset == IER:
                regs.irq[name][1] = value & (INT_AP_DONE | INT_AP_READY)
            elif offset == GIE:
                regs.irq[name][0] = value & 1
            elif offset in DATA_REGS[name]:
                regs.words[(name, offset)] = value
            # read-only (done_o, its ap_vld) and reserved offsets ignore writes, as the HLS decoder does
            self._cond.notify_all()

    def interrupts(self, peer: str = "") -> dict[str, bool]:
        """Each register block's interrupt output now, as ``peer``'s registers drive it: GIE and (ISR bit 0 or 1)
        (as ``hardware.RtlDevice.interrupts``; pynq's remote protocol has no interrupt line to carry it)."""
        with self._cond:
            self._fold_irq(peer, self.now())
            regs = self._regs(peer)
            return {name: bool(regs.irq[name][0] & 1 and regs.irq[name][2]) for name in BLOCKS}

    def _fold_irq(self, peer: str, t: float) -> None:
        """Set in ``peer``'s ISR the bits its IER enables for each block's ap_done events in (last fold, ``t``]
        (lock held). Called before every GIE/IER/ISR access and before ``peer``'s view moves to a new run, so each
        event meets the IER written before it, as the RTL's ``isr <= toggled | (ier & event)`` does."""
        regs = self.regs.get(peer)
        if regs is None:   # never written: IER is 0, no event sets a bit
            return
        view = self._view(peer)
        for name in BLOCKS:
            enabled = regs.irq[name][1]
            events = view.events(name)
            if enabled and np.any((events > regs.irq_mark) & (events <= t)):
                regs.irq[name][2] |= enabled
        regs.irq_mark = max(regs.irq_mark, t)

    def _check(self, name: str, offset: int) -> None:
        if name not in self.bases:
            raise RegisterError(f"no register block {name!r}")
        if offset % 4 or not 0 <= offset < self.cfg.MMIO_RANGE:
            raise RegisterError(f"{name} register offset 0x{offset:x}: need a multiple of 4 below "
                                f"0x{self.cfg.MMIO_RANGE:x}")
        if self.programmed is None:
            raise RegisterError(f"the PL is not programmed: no VTA at 0x{self.bases[name] + offset:x} until the "
                                f"bitstream {self.cfg.bitstream}.bit is downloaded")

    def _write_ctrl(self, name: str, value: int, peer: str, regs: _Regs) -> None:
        regs.ctrl[name] = value & AUTO_RESTART
        if name == "fetch":
            if value & AUTO_RESTART:
                self.log.warning("fetch started with auto_restart (0x%x): it would re-run the program forever; "
                                 "the simulated board runs it once (VTA's driver writes 0x1)", value)
            if value & AP_START:   # the launching client's own count, address and pointer registers
                count = self._word(peer, "fetch", FETCH_INSN_COUNT)
                addr = self._pointer("fetch", FETCH_INSN_ADDR, peer)
                regs = {(b, off): self._pointer(b, off, peer) for b, offs in POINTERS.items() if b != "fetch"
                        for off in offs}
                self.runs_total += 1
                self.queue.append(Run(self.runs_total, peer, count, addr, self.now(), regs=regs))
            return
        if value & AP_START:
            regs.started[name] = True
            regs.single_shot[name] = not value & AUTO_RESTART
        elif not value & AUTO_RESTART:
            regs.started[name] = False

    def _word(self, peer: str, name: str, offset: int) -> int:
        regs = self.regs.get(peer)
        return regs.words.get((name, offset), 0) if regs is not None else 0

    def _pointer(self, name: str, offset: int, peer: str) -> int:
        return self._word(peer, name, offset) | self._word(peer, name, offset + 4) << 32

    # ---- the run worker ----
    def _work(self) -> None:
        while True:
            with self._cond:
                run, gen = self._next_run()
                if run is None:
                    return
                regs = run.regs
                single = [m for m in MODULES if self._regs(run.peer).single_shot[m]]
            try:
                outcome = self._execute(run, regs, single)
            except Exception as e:  # never let the worker die: a bug here must not take the board down
                self.log.exception("run %d: internal error", run.seq)
                outcome = _Outcome(fault=f"internal error of the simulated board: {e}", done_after_fault=run.done_before)
            with self._cond:
                if run.cancelled:   # its client downloaded the bitstream meanwhile: nothing of it is shown
                    run.ready = run.end_at = self.now()
                    run.finishes = False
                elif gen == self.generation:
                    self._finish(run, outcome)
                self._cond.notify_all()

    def _next_run(self) -> tuple[Run | None, int]:
        """Wait (lock held) until a queued launch can begin; fold the previous run into the steady state."""
        while True:
            if self._stop:
                return None, self.generation
            t = self.now()
            r = self.run
            prev_busy = r is not None and (r.fault is not None or r.end_at is None or t < r.end_at)
            ready = None if prev_busy else next(
                (q for q in self.queue if all(self._regs(q.peer).started.values())), None)
            if ready is not None:   # the first launch whose client runs load, compute and store
                break
            wait = None
            if self.queue and r is not None and r.fault is None and r.end_at is not None and t < r.end_at:
                wait = r.end_at - t
            self._cond.wait(wait)
        run = ready
        self.queue.remove(run)
        run.t0 = t
        self._fold_irq("", t)   # the previous runs' ap_done events into ISR before their views move on
        self._fold_irq(run.peer, t)
        self.all.begin(run, t)
        if run.peer:   # the client's own view: its previous run's final values become its steady state
            view = self.views.pop(run.peer, None) or _View()
            view.begin(run, t)
            self.views[run.peer] = view
            while len(self.views) > MAX_FAULTED:
                self.views.popitem(last=False)
            run.done_before = view.done
        else:
            run.done_before = self.all.done
        return run, self.generation

    def _execute(self, run: Run, regs: dict[tuple[str, int], int], single: list[str]) -> _Outcome:
        """Fetch the stream from DRAM and run it on the simulator (outside the register lock)."""
        start = time.perf_counter()
        rows = np.zeros((0, 16), dtype=np.uint8)
        with self.sim_lock:
            # the SRAMs keep what a run left (as on a board), but only for the same client's next run: another
            # client's program could STORE them into its own buffer and read what this one loaded
            if self._sram_reset or run.peer != self._sram_owner:
                self.sim.reset()
                self._sram_reset = False
            self._sram_owner = run.peer
            regions = self.regions_of(run.peer) if self.regions_of is not None else None
            fetch = (run.insn_addr, run.count * 16)
            try:
                if regions is not None:   # the fetch first: not a byte of another client's memory is read
                    check_dma_ranges(rows, self.cfg, regions, fetch)
                if run.count:
                    rows = self.sim.read(run.insn_addr, run.count * 16).reshape(-1, 16)
                if regions is not None:
                    check_dma_ranges(rows, self.cfg, regions, fetch)
            except ProgramRejected as e:
                return _Outcome(fault=f"launch refused: {e}: this board runs a program only inside the launching "
                                      f"client's own buffers", done_after_fault=run.done_before, refused=True)
            except SimulatorError as e:
                return _Outcome(fault=f"fetch of {run.count} instructions at 0x{run.insn_addr:x} reads outside the "
                                      f"board's buffers ({e})", done_after_fault=run.done_before)
            nonzero = {f"{b} 0x{off:02x}": hex(v) for (b, off), v in regs.items() if v}
            if nonzero:
                return _Outcome(fault=f"m_axi base offset registers are not 0 ({nonzero}); VTA's instructions carry "
                                      f"absolute addresses and its driver writes 0 there; the simulated board "
                                      f"supports only 0", done_after_fault=run.done_before)
            if not run.count:
                return self._timeline(run, rows, RunStats(clock_mhz=self.cfg.CLOCK_MHZ), 0.0)
            options = {k: v for k, v in (("max_cycles", self.max_cycles), ("max_work", self.max_work)) if v}
            try:
                stats = self.sim.run(rows, trace=run.count <= TRACE_LIMIT, **options)
            except SimulatorError as e:
                where = f" at instruction {e.index}" if e.index is not None else ""
                return self._fault(run, rows, e.index, f"{type(e).__name__}{where}: {e}")
        host = time.perf_counter() - start
        for m in single:
            if stats.insns[m] > 1:
                return self._fault(run, rows, None, f"the {m} module was started without auto_restart (control "
                                                    f"0x1, not 0x81): it runs one instruction and stops, and this "
                                                    f"program gives it {stats.insns[m]}")
        return self._timeline(run, rows, stats, host)

    def _fault(self, run: Run, rows: np.ndarray, index: int | None, message: str) -> _Outcome:
        """A hung accelerator: ``done`` shows 0 if a compute instruction ran before the fault, else its old value."""
        ran_compute = bool(self._clears_done(rows[: index if index is not None else len(rows)]).any())
        return _Outcome(fault=message, done_after_fault=0 if ran_compute else run.done_before,
                        ran_compute=ran_compute)

    def _clears_done(self, rows: np.ndarray) -> np.ndarray:
        """Which instructions write ``done = 0``: all the compute block executes except FINISH (vta.cc)."""
        opcode = rows[:, 0] & ((1 << OPCODE_BITS) - 1)
        field = self.cfg.insn_formats["mem"].field("memory_type")
        words = rows[:, :8].copy().view("<u8")[:, 0]
        memory_type = (words >> np.uint64(field.offset)) & np.uint64(field.mask)
        on_compute = module_indices(opcode, memory_type) == MODULES.index("compute")
        return on_compute & (opcode != OPCODES["FINISH"])

    def _timeline(self, run: Run, rows: np.ndarray, st: RunStats, host: float) -> _Outcome:
        """The cycles of the events the registers show, from the timing model."""
        compute_op = self._clears_done(rows)
        first = int(np.argmax(compute_op)) if compute_op.any() else None
        finishes = bool((rows[:, 0] & ((1 << OPCODE_BITS) - 1) == OPCODES["FINISH"]).any())
        if st.trace is not None:
            on_compute = np.array([mod == "compute" for mod, _, _ in st.trace], dtype=bool)
            ends = np.array([e for _, _, e in st.trace], dtype=np.float64)
            compute_cycles = np.sort(ends[on_compute]) if on_compute.size else NO_EVENTS
            clear = float(st.trace[first][1]) if first is not None else None
        elif first is not None or finishes:   # a long stream: the coarse view (compute events at the end, done
            compute_cycles = np.array([float(st.cycles)])   # cleared at the start)
            clear = 0.0 if first is not None else None
        else:   # nothing reached compute (a launch of 0 instructions): no event, done stays as it was
            compute_cycles, clear = NO_EVENTS, None
        return _Outcome(stats=st, host_seconds=host, clear_cycle=clear, compute_cycles=compute_cycles,
                        finishes=finishes)

    def _finish(self, run: Run, out: _Outcome) -> None:
        """Publish a run's outcome to the registers (lock held).

        Event times are ``t0 + cycles / CLOCK_MHZ * time_scale`` but never before now: a register read done
        before this point saw none of them, so none can fall behind its clear-on-read mark.
        """
        ready = run.ready = self.now()
        run.stats, run.host_seconds, run.finishes = out.stats, out.host_seconds, out.finishes
        if out.fault is not None:
            run.done_after_fault = out.done_after_fault
            run.fault = out.fault
            self.faults_total += 1
            self.last_fault = f"run {run.seq} (from {run.peer or 'unknown'}): {run.fault}"
            # the hang is its client's alone; for everyone else the accelerator is reset and goes on
            self.hangs.pop(run.peer, None)
            self.hangs[run.peer] = _Hang(run.seq, run.fault, out.done_after_fault, out.ran_compute)
            regs = self.regs.get(run.peer)
            if regs is not None and out.ran_compute:   # compute's ap_done latched before the fault: so did its ISR
                self._fold_irq(run.peer, ready)
                regs.irq["compute"][2] |= regs.irq["compute"][1]
            self.peer_faults.pop(run.peer, None)
            self.peer_faults[run.peer] = f"run {run.seq}: {run.fault}"
            for table in (self.hangs, self.peer_faults):
                while len(table) > MAX_FAULTED:
                    table.popitem(last=False)
            for view in (self.all, self.views.get(run.peer)):
                if view is not None and view.run is run:
                    view.run = None
                    view.done = out.done_after_fault
            self._sram_reset = True
            self.log.error("run %d from %s: %d instructions at 0x%x: %s; the accelerator hangs for that client "
                           "(done stays %d) and is reset for the others", run.seq, run.peer or "?", run.count,
                           run.insn_addr, run.fault, run.done_after_fault)
            return
        if not run.count and run.peer:   # never what a driver means: say why its client will wait in vain
            self.peer_faults.pop(run.peer, None)
            self.peer_faults[run.peer] = (f"run {run.seq}: a launch of 0 instructions (fetch's count register is 0): "
                                          "nothing ran and done will not rise; this client's own bitstream download "
                                          "(every PynqDevice makes one as it connects) resets its registers")
        scale = self.time_scale / (self.cfg.CLOCK_MHZ * 1e6)

        def wall(cycles):
            return np.maximum(run.t0 + np.asarray(cycles, dtype=np.float64) * scale, ready)

        st = out.stats
        run.end_at = float(wall(st.cycles))
        run.clear_at = float(wall(out.clear_cycle)) if out.clear_cycle is not None else None
        end = np.array([run.end_at])
        vld = np.array(sorted(x for x in (run.clear_at, run.end_at if run.finishes else None) if x is not None))
        run.events = {"fetch": end, "compute": wall(out.compute_cycles), "done_vld": vld,
                      **{m: end if st.insns[m] else NO_EVENTS for m in ("load", "store")}}
        st = run.stats
        simulated = st.cycles / (self.cfg.CLOCK_MHZ * 1e6)
        self.last_run = {"seq": run.seq, "peer": run.peer, "instructions": run.count,
                         "insn_addr": run.insn_addr, "cycles": st.cycles, "simulated_seconds": simulated,
                         "clock_mhz": self.cfg.CLOCK_MHZ, "time_scale": self.time_scale,
                         "host_seconds": run.host_seconds, "counters": st.vta_counters(),
                         "board_seconds": st.latency_s,
                         "latency_is": "simulated: the timing model's cycles at CLOCK_MHZ, not a measurement; "
                                       "board_seconds is the config's board model (docs/calibrate.md)"}
        self.log.info("run %d from %s: %d instructions at 0x%x: %s cycles = %.1f us SIMULATED at %g MHz "
                      "(timing model; board time x%g), %.1f us on the board predicted by its calibrated model; "
                      "simulator took %.1f ms", run.seq, run.peer or "?", run.count, run.insn_addr, f"{st.cycles:,}",
                      simulated * 1e6, self.cfg.CLOCK_MHZ, self.time_scale, st.latency_s * 1e6,
                      run.host_seconds * 1e3)

    def status(self, peer: str | None = None) -> dict:
        """The board's registers in words: programmed bitstream, the current run, totals, the last fault. With
        ``peer`` (a client asking), as that client sees them: its own last run and fault only."""
        with self._cond:
            t = self.now()
            r = self.run
            hang = self.hangs.get(peer) if peer is not None else None
            state = "idle"
            if hang is not None:
                state = "hung"
            elif self.queue and (r is None or r.t0 is not None):
                waiting = [m for m in MODULES if not self._regs(peer or "").started[m]]
                state = f"launch queued (waiting for {', '.join(waiting)} to start)" if waiting else "launch queued"
            elif r is not None and self._in_flight(self.all, "", t):
                state = "running"
            last_run, last_fault = self.last_run, self.last_fault
            if peer is not None:
                last_run = last_run if last_run is not None and last_run["peer"] == peer else None
                last_fault = self.peer_faults.get(peer)
            return {"programmed": self.programmed, "state": state,
                    "done": hang.done if hang is not None else self.all.done_at(t),
                    "runs": self.runs_total, "faults": self.faults_total, "last_run": last_run,
                    "last_fault": last_fault, "time_scale": self.time_scale,
                    "modules_started": dict(self._regs(peer or "").started)}

