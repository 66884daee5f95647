"""The pure-Python reference executor: docs/simulator.md written as code, one small function per opcode.

It is the living definition of the semantics and of the timing model. The C ``Simulator`` is diffed against it
(counters, DRAM, SRAM, cycles, stalls and errors), so it favours plain loops that mirror the spec's sentences
over speed; numpy only vectorises the lanes of one tile.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from hw_config import ALU_OPCODES, MEM_TYPES, OPCODES, HwConfig, load_config
from hw_config.isa_rules import (
    ALU_OPCODE_NAMES,
    DEP_FLAGS,
    DEP_QUEUES,
    INSN_BYTES,
    LOAD_MEM_TYPES,
    MEM_TYPE_NAMES,
    OPCODE_NAMES,
    STORE_MEM_TYPES,
    module_of,
)
from simulator.dram import AddressSpace
from simulator.errors import (
    DEFAULT_MAX_CYCLES,
    DEFAULT_MAX_WORK,
    CycleBudgetExceeded,
    DeadlockError,
    InvalidInstruction,
    MemoryAccessError,
    SimulatorError,
    WorkBudgetExceeded,
    budget_value,
)
from simulator.latency import board_latency
from simulator.stats import MODULES, QUEUES, RunStats
from simulator.timing import dma_cycles

if TYPE_CHECKING:
    from simulator.image import ProgramImage, ReplayResult

__all__ = ["DEFAULT_MAX_CYCLES", "DEFAULT_MAX_WORK", "ReferenceSimulator"]

LOAD, STORE, GEMM, FINISH, ALU = (OPCODES[n] for n in ("LOAD", "STORE", "GEMM", "FINISH", "ALU"))
UOP, WGT, INP, ACC, OUT, ACC_8BIT = (MEM_TYPES[n] for n in ("UOP", "WGT", "INP", "ACC", "OUT", "ACC_8BIT"))
FORMAT_OF_OPCODE = {LOAD: "mem", STORE: "mem", GEMM: "gemm", ALU: "alu", FINISH: "finish"}
# Token queues per module and flag: hw_config.isa_rules.DEP_QUEUES. A flag whose queue is None is refused (VTA's
# hardware ignores it, no VTA compiler sets it, so a stream that does is buggy).

SRAM_NAMES = ("uop", "inp", "wgt", "acc", "out")   # "out": read only here (compute writes it)


def _list(names: dict[int, str]) -> str:
    return ", ".join(f"{n} {v}" for v, n in sorted(names.items()))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _wrap_int32(x: np.ndarray) -> np.ndarray:
    """Low 32 bits of int64 lanes, read as two's complement: the accumulator's wrap-around."""
    return (((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)).astype(np.int32)


def _low_bits(acc: np.ndarray) -> np.ndarray:
    """An accumulator's lanes narrowed to OUT_WIDTH (8) bits, as STORE writes them."""
    return (acc & 0xFF).astype(np.uint8)


def _as_byte_array(data: Any, what: str) -> np.ndarray:
    """The raw bytes of bytes-like data or of any numpy array (its in-memory representation)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return np.frombuffer(bytes(data), dtype=np.uint8)
    if isinstance(data, np.ndarray):
        return np.frombuffer(np.ascontiguousarray(data).tobytes(), dtype=np.uint8)
    raise MemoryAccessError(f"{what}: data must be bytes, bytearray or a numpy array, got {type(data).__name__}")


# ---- ALU lane operations: a is int64 lanes of acc[dst], b int64 lanes of acc[src] or the immediate ----

def _alu_min(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.minimum(a, b)


def _alu_max(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(a, b)


def _alu_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a + b  # wrapped to 32 bits by the caller


def _alu_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a * b  # |a*b| <= 2^62 fits int64; the caller keeps the low 32 bits


def _alu_shr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """b >= 0: arithmetic right shift by min(b, 31); b < 0: left shift by min(-b, 31) (fsim's rule)."""
    right = np.clip(b, 0, 31)
    left = np.clip(-b, 0, 31)
    return np.where(b >= 0, a >> right, a << left)


ALU_OPS: dict[int, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    ALU_OPCODES["MIN"]: _alu_min,
    ALU_OPCODES["MAX"]: _alu_max,
    ALU_OPCODES["ADD"]: _alu_add,
    ALU_OPCODES["SHR"]: _alu_shr,
    ALU_OPCODES["MUL"]: _alu_mul,
}


MORE_CYCLES = "(raise max_cycles, or --max-cycles on the command line, for longer programs)"


@dataclass
class _Insn:
    """One statically checked instruction: its fields, route, token queues and duration."""

    index: int
    opcode: int
    label: str  # e.g. "LOAD INP", "ALU SHR": how messages name it
    fields: dict[str, int]
    module: str = "compute"
    pops: tuple[str, ...] = ()
    pushes: tuple[str, ...] = ()
    duration: int = 1  # cycles with the DRAM bus to itself
    beats: int = 0  # a LOAD/STORE's bus beats, issued over ``span`` cycles when alone (0: not on the bus)
    span: int = 0
    work: int = 0  # host work units (docs/simulator.md, "Budgets")
    work_how: str = "bytes moved"  # how ``work`` is made up, for the budget's message

    @property
    def where(self) -> str:
        return f"instruction {self.index} ({self.label})"

    @property
    def is_nop(self) -> bool:
        return self.opcode in (LOAD, STORE) and self.fields["x_size"] == 0


# The shared DRAM bus (docs/simulator.md, "Timing model"): a transfer's progress counts in 2^-20 of a cycle of its
# solo timeline, so a transfer alone on the bus takes exactly its solo duration; spans of 2^40 cycles or more
# (beyond any real program) are timed alone.
BUS_SCALE = 1 << 20
BUS_MAX_SPAN = 1 << 40


@dataclass
class _Flight:
    """A running instruction: when it started, and while its transfer is on the bus, its progress and share."""

    insn: _Insn
    start: int
    end: int  # known once the transfer is done (at once for an instruction off the bus)
    on_bus: bool = False
    remaining: int = 0  # solo cycles left x BUS_SCALE
    rate: int = BUS_SCALE  # progress per cycle x BUS_SCALE

    def transfer_end(self, now: int) -> int:
        return now + _ceil_div(self.remaining, self.rate)


class _Pipeline:
    """Timing state of one run: fetch, the three in-order modules and the four token queues.

    Start and end times follow from the spec's equations alone; this class also decides which head executes
    next (the smallest start among heads whose constraints are known, ties load < compute < store), because
    that order is what the functional effects and the errors depend on.
    """

    def __init__(self, cfg: HwConfig, program: list[_Insn], shared_bus: bool = True):
        self.cfg = cfg
        self.program = program
        self.shared_bus = shared_bus
        self.fetch_cycles = _ceil_div(INSN_BYTES, cfg.BUS_BYTES)
        self.sequence: dict[str, list[int]] = {m: [] for m in MODULES}
        self.position: list[int] = []  # place of each instruction in its module's sequence
        for insn in program:
            self.position.append(len(self.sequence[insn.module]))
            self.sequence[insn.module].append(insn.index)
        self.head = dict.fromkeys(MODULES, 0)
        self.free = dict.fromkeys(MODULES, 0)
        self.dispatch: list[int] = []  # d(i) of the instructions fetched so far
        self.start: list[int | None] = [None] * len(program)
        self.end: list[int | None] = [None] * len(program)
        self.push_ends: dict[str, list[int]] = {q: [] for q in QUEUES}
        self.pop_starts: dict[str, list[int]] = {q: [] for q in QUEUES}
        self.flights: dict[str, _Flight] = {}  # the instruction each busy module runs
        self.now = 0  # the time of the last event
        self._fetch()

    def _room(self, i: int) -> int | None:
        """q(i): when the target command queue has room for instruction i (None while not yet known)."""
        insn = self.program[i]
        k = self.position[i] - self.cfg.INSN_QUEUE_DEPTH
        if k < 0:
            return 0
        return self.start[self.sequence[insn.module][k]]

    def _fetch(self) -> None:
        """d(i) = max(d(i-1), q(i)) + f, in program order, as far as the q(i) are known."""
        while len(self.dispatch) < len(self.program):
            room = self._room(len(self.dispatch))
            if room is None:
                return
            previous = self.dispatch[-1] if self.dispatch else self.cfg.DRAM_LATENCY
            self.dispatch.append(max(previous, room) + self.fetch_cycles)

    def head_insn(self, module: str) -> _Insn | None:
        seq = self.sequence[module]
        return self.program[seq[self.head[module]]] if self.head[module] < len(seq) else None

    def constraints(self, insn: _Insn) -> tuple[list[tuple[str, int]], list[str]]:
        """(cause, time) of each constraint in stall tie-break order, and what the unknown ones wait for.

        The wait texts are only reported at a deadlock, when "not yet" has become "never".
        """
        known: list[tuple[str, int]] = []
        waits: list[str] = []
        for q in QUEUES:
            if q in insn.pops:
                p = len(self.pop_starts[q])
                if p < len(self.push_ends[q]):
                    known.append((f"pop_{q}", self.push_ends[q][p]))
                else:
                    waits.append(f"a token on {q} that is never pushed")
        for q in QUEUES:
            if q in insn.pushes:
                p = len(self.push_ends[q]) - self.cfg.TOKEN_QUEUE_DEPTH
                if p < 0:
                    continue
                if p < len(self.pop_starts[q]):
                    known.append((f"push_{q}", self.pop_starts[q][p]))
                else:
                    waits.append(f"room on {q}, which holds TOKEN_QUEUE_DEPTH={self.cfg.TOKEN_QUEUE_DEPTH} "
                                 f"token(s) that are never popped")
        if insn.index < len(self.dispatch):
            known.append(("dispatch", self.dispatch[insn.index]))
        else:
            blocked = self.program[len(self.dispatch)]
            waits.append(f"dispatch, which never comes: fetch is stuck at instruction {blocked.index} because "
                         f"the {blocked.module} command queue (INSN_QUEUE_DEPTH={self.cfg.INSN_QUEUE_DEPTH}) "
                         f"never drains")
        return known, waits

    def next_start(self) -> tuple[_Insn, int, str | None] | None:
        """The idle module's head to start next, its start and its stall cause (None if it did not stall).

        Returns None when no head can start yet; raises DeadlockError when instructions remain but none can
        start and none is running, so none ever will.
        """
        best: tuple[_Insn, int, str | None] | None = None
        stuck: list[tuple[str, _Insn, list[str]]] = []
        for m in MODULES:  # iteration order = the tie-break order load, compute, store
            insn = self.head_insn(m)
            if insn is None or m in self.flights:
                continue
            known, waits = self.constraints(insn)
            if waits:
                stuck.append((m, insn, waits))
                continue
            start = max([self.free[m]] + [t for _, t in known])
            cause = None
            if start > self.free[m]:
                cause = next(c for c, t in known if t == start)  # binding constraint; ties by list order
            if best is None or start < best[1]:
                best = (insn, start, cause)
        if best is None and stuck and not self.flights:
            parts = [f"{m} at instruction {insn.index} ({insn.label}) waits for {' and '.join(waits)}"
                     for m, insn, waits in stuck]
            raise DeadlockError("deadlock: " + "; ".join(parts), min(insn.index for _, insn, _ in stuck))
        return best

    def next_end(self) -> tuple[str, int] | None:
        """The running instruction whose transfer or whole run ends first (ties by module order), and when."""
        ends = [(f.transfer_end(self.now) if f.on_bus else f.end, m) for m, f in self.flights.items()]
        if not ends:
            return None
        t, m = min(ends, key=lambda e: (e[0], MODULES.index(e[1])))
        return m, t

    def _advance(self, t: int) -> None:
        """Move the bus to time t: each transfer on it progresses at its share."""
        if t <= self.now:
            return
        for f in self.flights.values():
            if f.on_bus:
                dt = t - self.now
                f.remaining = 0 if dt >= _ceil_div(f.remaining, f.rate) else f.remaining - dt * f.rate
        self.now = t

    def _share_bus(self) -> None:
        """Max-min fair shares of one beat per cycle among the transfers on the bus (docs/simulator.md)."""
        on_bus = sorted((f for m in MODULES if (f := self.flights.get(m)) is not None and f.on_bus),
                        key=lambda f: f.insn.beats / f.insn.span)  # stable: ties by module order
        left, level = 1.0, None
        for k, f in enumerate(on_bus):
            demand = f.insn.beats / f.insn.span
            if level is None and demand <= left / (len(on_bus) - k):
                f.rate = BUS_SCALE   # asks less than an equal share: gets what it asks
                left -= demand
                continue
            if level is None:
                level = left / (len(on_bus) - k)
            f.rate = int(level / demand * BUS_SCALE) or 1

    def begin(self, insn: _Insn, start: int, cause: str | None, stats: RunStats) -> None:
        """Start an instruction: occupy its module, pop its tokens, take its share of the bus, fetch further."""
        m = insn.module
        if cause is not None:
            stats.stalls[m][cause] += start - self.free[m]
        stats.insns[m] += 1
        self.start[insn.index] = start
        self.head[m] += 1
        for q in insn.pops:
            self.pop_starts[q].append(start)
        self._advance(start)
        flight = _Flight(insn, start, end=start + insn.duration)
        if self.shared_bus and insn.beats and insn.span < BUS_MAX_SPAN:
            flight.on_bus = True
            flight.remaining = insn.span * BUS_SCALE
        self.flights[m] = flight
        if flight.on_bus:
            self._share_bus()
        self._fetch()

    def end_event(self, m: str, t: int) -> _Flight | None:
        """Module m's event at time t: its transfer's last beat (the DRAM latency follows, off the bus; None),
        or its instruction's end (returned, still running until ``finish``)."""
        self._advance(t)
        flight = self.flights[m]
        if flight.on_bus:
            flight.on_bus = False
            flight.end = t + self.cfg.DRAM_LATENCY
            self._share_bus()
            return None
        return flight

    def finish(self, flight: _Flight, stats: RunStats) -> None:
        """End an instruction: free its module and push its tokens."""
        insn, end = flight.insn, flight.end
        m = insn.module
        del self.flights[m]
        stats.busy[m] += end - flight.start
        stats.cycles = max(stats.cycles, end)
        if insn.opcode == FINISH:
            stats.finish_cycle = end
        self.end[insn.index] = end
        self.free[m] = end
        for q in insn.pushes:
            self.push_ends[q].append(end)
        self._fetch()


class ReferenceSimulator:
    """Readable executor with the C ``Simulator``'s public API (DRAM, SRAM, run), for diffing the two."""

    def __init__(self, cfg: HwConfig | str | None = None, *, max_cycles: int = DEFAULT_MAX_CYCLES,
                 max_work: int = DEFAULT_MAX_WORK, shared_bus: bool = True):
        """``shared_bus=False`` times every transfer alone, as if each engine had a DRAM port of its own: the
        schedule the board latency model re-times (simulator/latency.py); the C simulator always shares."""
        self.shared_bus = shared_bus
        self.max_cycles = budget_value("max_cycles", max_cycles)
        self.max_work = budget_value("max_work", max_work)
        self.cfg = cfg if isinstance(cfg, HwConfig) else load_config(cfg)
        self._space = AddressSpace()
        self._dram: dict[int, np.ndarray] = {}  # region base -> its bytes
        c = self.cfg
        self.uop = np.zeros(c.UOP_BUFF_DEPTH, dtype=np.uint32)
        self.inp = np.zeros((c.INP_BUFF_DEPTH, c.BATCH, c.BLOCK_IN), dtype=np.int8)
        self.wgt = np.zeros((c.WGT_BUFF_DEPTH, c.BLOCK_OUT, c.BLOCK_IN), dtype=np.int8)
        self.acc = np.zeros((c.ACC_BUFF_DEPTH, c.BATCH, c.BLOCK_OUT), dtype=np.int32)
        # what STORE reads: OUT_WIDTH bits a lane (8 for every config hw_config accepts, so a byte), written as the
        # config's hardware writes it (``out_buffer``: docs/simulator.md, "The output buffer")
        self.out = np.zeros((c.ACC_BUFF_DEPTH, c.BATCH, c.BLOCK_OUT), dtype=np.uint8)
        self.out_buffer = c.capabilities.out_buffer

    # ---- DRAM ----
    def alloc(self, nbytes: int) -> int:
        """Map a zeroed, page-aligned region; returns its physical byte address."""
        addr = self._space.place(operator.index(nbytes))
        self._dram[addr] = np.zeros(self._space.size_of(addr), dtype=np.uint8)
        return addr

    def map(self, addr: int, data: int | bytes | bytearray | np.ndarray) -> None:
        """Map a region at an exact address: zeroed if ``data`` is a size, else holding ``data``'s bytes."""
        addr = operator.index(addr)
        if isinstance(data, (int, np.integer)):
            self._space.reserve(addr, int(data))
            self._dram[addr] = np.zeros(int(data), dtype=np.uint8)
        else:
            content = _as_byte_array(data, f"map at 0x{addr:x}").copy()
            self._space.reserve(addr, content.size)
            self._dram[addr] = content

    def free(self, addr: int) -> None:
        addr = operator.index(addr)
        self._space.release(addr)
        del self._dram[addr]

    def regions(self) -> list[tuple[int, int]]:
        return self._space.regions()

    def _dram_view(self, addr: int, nbytes: int) -> np.ndarray:
        """A writable view of ``[addr, addr + nbytes)``, which must lie inside one mapped region."""
        if addr < 0 or nbytes < 0:
            raise MemoryAccessError(f"DRAM access of {nbytes} bytes at {addr}: need non-negative values")
        base, offset = self._space.locate(addr, nbytes)
        return self._dram[base][offset:offset + nbytes]

    def write(self, addr: int, data: bytes | bytearray | np.ndarray) -> None:
        """Copy the raw bytes of ``data`` to DRAM at physical address ``addr``."""
        addr = operator.index(addr)
        raw = _as_byte_array(data, f"write at 0x{max(addr, 0):x}")
        self._dram_view(addr, raw.size)[:] = raw

    def read(self, addr: int, nbytes: int) -> np.ndarray:
        """A copy of ``nbytes`` bytes of DRAM from ``addr``, as uint8."""
        return self._dram_view(operator.index(addr), operator.index(nbytes)).copy()

    # ---- SRAM (for tests and debugging) ----
    def _sram(self, mem: str) -> np.ndarray:
        if mem not in SRAM_NAMES:
            raise SimulatorError(f"unknown SRAM {mem!r}; allowed: {', '.join(SRAM_NAMES)}")
        return getattr(self, mem)

    def _sram_range(self, mem: str, index: int, count: int) -> np.ndarray:
        sram = self._sram(mem)
        if index < 0 or count < 0 or index + count > len(sram):
            raise SimulatorError(f"SRAM {mem}: range [{index}, {index + count}) is outside [0, {len(sram)})")
        return sram

    def read_sram(self, mem: str, index: int, count: int) -> np.ndarray:
        """A copy of ``count`` elements of SRAM ``mem`` ('uop', 'inp', 'wgt', 'acc') from ``index``."""
        index, count = operator.index(index), operator.index(count)
        return self._sram_range(mem, index, count)[index:index + count].copy()

    def write_sram(self, mem: str, index: int, data: np.ndarray) -> None:
        """Overwrite elements of SRAM ``mem`` from ``index`` with ``data`` (any shape of whole elements)."""
        index = operator.index(index)
        sram = self._sram(mem)
        values = np.asarray(data)
        if values.dtype.kind in "iub" and values.size:
            info = np.iinfo(sram.dtype)
            if values.min() < info.min or values.max() > info.max:
                raise SimulatorError(f"SRAM {mem}: values must fit {sram.dtype} [{info.min}, {info.max}]")
        elem = sram.shape[1:]
        elem_size = int(np.prod(elem, dtype=np.int64))
        if values.size % elem_size:
            raise SimulatorError(f"SRAM {mem}: {values.size} values are not whole elements of shape {elem}")
        if mem == "out":
            raise SimulatorError("SRAM out is read only here (compute writes it)")
        values = values.astype(sram.dtype).reshape((-1, *elem))
        self._sram_range(mem, index, len(values))[index:index + len(values)] = values
        if mem == "acc":   # a debugging write sets a row and its output copy alike
            self.out[index:index + len(values)] = _low_bits(values)

    def reset(self) -> None:
        """Zero every SRAM (they otherwise persist across runs, as on the hardware)."""
        for mem in SRAM_NAMES:
            getattr(self, mem).fill(0)

    # ---- running ----
    def run(self, insns: bytes | bytearray | np.ndarray, *, compute: bool = True, trace: bool = False,
            max_cycles: int | None = None, max_work: int | None = None) -> RunStats:
        """Check the whole stream, then execute it event by event; returns counters and timing.

        ``compute=False`` moves no data except micro-op loads (timing, counters and errors unchanged).
        ``max_cycles`` and ``max_work`` default to the simulator's budgets (docs/simulator.md, "Budgets").
        """
        max_cycles = self.max_cycles if max_cycles is None else budget_value("max_cycles", max_cycles)
        max_work = self.max_work if max_work is None else budget_value("max_work", max_work)
        program = [self._check(i, word) for i, word in enumerate(self._words(insns))]
        if not program:
            raise InvalidInstruction("the instruction stream is empty: it must end with FINISH")
        last = program[-1]
        if last.opcode != FINISH:
            raise InvalidInstruction(f"{last.where}: the stream must end with FINISH (VTA's runtime requires it), "
                                     f"but its last instruction is {last.label}", last.index)
        stats = RunStats(clock_mhz=self.cfg.CLOCK_MHZ)
        pipeline = _Pipeline(self.cfg, program, self.shared_bus)
        # Events in time order: ends (a transfer's last beat, an instruction's end) before starts at equal times.
        while (start := pipeline.next_start()) is not None or pipeline.flights:
            end = pipeline.next_end()
            if end is not None and (start is None or end[1] <= start[1]):
                flight = pipeline.end_event(*end)
                if flight is None:
                    continue
                if flight.end > max_cycles:
                    raise CycleBudgetExceeded(
                        f"{flight.insn.where}: would run from cycle {flight.start} to {flight.end}, past "
                        f"max_cycles={max_cycles} {MORE_CYCLES}", flight.insn.index)
                pipeline.finish(flight, stats)
                continue
            insn, begin, cause = start
            if begin + insn.duration > max_cycles:
                raise CycleBudgetExceeded(
                    f"{insn.where}: would run from cycle {begin} to {begin + insn.duration}, past "
                    f"max_cycles={max_cycles} {MORE_CYCLES}", insn.index)
            if stats.work + insn.work > max_work:
                raise WorkBudgetExceeded(
                    f"{insn.where}: needs {insn.work} units of host work ({insn.work_how}), and the run has done "
                    f"{stats.work} of its budget max_work={max_work} (raise max_work, or --max-work on the command "
                    f"line, to run bigger programs)", insn.index)
            self._execute(insn, stats, compute)
            stats.work += insn.work
            pipeline.begin(insn, begin, cause, stats)
        raw = np.frombuffer(bytes(insns), np.uint8) if isinstance(insns, (bytes, bytearray, memoryview)) else insns
        stats.latency_s = board_latency(self.cfg, np.asarray(raw), stats.cycles).total_s
        if trace:
            stats.trace = [(insn.module, pipeline.start[insn.index], pipeline.end[insn.index])
                           for insn in program]
        return stats

    def replay(self, image: ProgramImage | str, **run_options: Any) -> ReplayResult:
        """Run a program image with only its segments and instruction area mapped (as ``Simulator.replay``)."""
        from simulator.replay import replay_into

        return replay_into(self, image, **run_options)  # type: ignore[arg-type]

    @staticmethod
    def _words(insns: bytes | bytearray | np.ndarray) -> list[int]:
        """The stream as 128-bit little-endian integers."""
        if isinstance(insns, (bytes, bytearray, memoryview)):
            raw = np.frombuffer(bytes(insns), dtype=np.uint8)
        else:
            raw = np.asarray(insns)
        if raw.dtype != np.uint8:
            raise SimulatorError(f"instructions must be uint8 bytes (N x 16), got dtype {raw.dtype}")
        if raw.size % INSN_BYTES:
            raise SimulatorError(f"instructions must be a whole number of 16-byte instructions, "
                                 f"got {raw.size} bytes")
        rows = np.ascontiguousarray(raw).reshape(-1, INSN_BYTES)
        return [int.from_bytes(row.tobytes(), "little") for row in rows]

    # ---- static validation ----
    def _check(self, index: int, word: int) -> _Insn:
        """Decode one instruction and check everything that does not depend on micro-op contents."""
        opcode = self.cfg.insn_formats["finish"].decode(word)["opcode"]
        if opcode not in OPCODE_NAMES:
            raise InvalidInstruction(f"instruction {index} (opcode {opcode}): opcode={opcode} is not allowed: "
                                     f"allowed {_list(OPCODE_NAMES)}", index)
        fields = self.cfg.insn_formats[FORMAT_OF_OPCODE[opcode]].decode(word)
        insn = _Insn(index, opcode, OPCODE_NAMES[opcode], fields)
        if opcode in (LOAD, STORE):
            self._check_memory_insn(insn)
        elif opcode in (GEMM, ALU):
            self._check_loop_insn(insn)
        else:
            self._route(insn, module_of(opcode))
        return insn

    @staticmethod
    def _route(insn: _Insn, module: str) -> None:
        """Send the instruction to its module and turn its dependency flags into token queues."""
        insn.module = module
        pops, pushes = [], []
        for flag in DEP_FLAGS:
            if not insn.fields[flag]:
                continue
            queue = DEP_QUEUES[module][flag]
            if queue is None:
                raise InvalidInstruction(
                    f"{insn.where}: {flag}=1 is not allowed on the {module} module (allowed there: "
                    f"{', '.join(f for f, q in DEP_QUEUES[module].items() if q)}); VTA's hardware ignores it",
                    insn.index)
            (pops if flag.startswith("pop") else pushes).append(queue)
        insn.pops, insn.pushes = tuple(pops), tuple(pushes)

    def _depth(self, mem_type: int) -> tuple[int, str]:
        c = self.cfg
        return {UOP: (c.UOP_BUFF_DEPTH, "micro-op"), INP: (c.INP_BUFF_DEPTH, "input"),
                WGT: (c.WGT_BUFF_DEPTH, "weight"), ACC: (c.ACC_BUFF_DEPTH, "accumulator"),
                ACC_8BIT: (c.ACC_BUFF_DEPTH, "accumulator"), OUT: (c.ACC_BUFF_DEPTH, "accumulator")}[mem_type]

    def _check_memory_insn(self, insn: _Insn) -> None:
        f = insn.fields
        mem_type = f["memory_type"]
        insn.label = f"{insn.label} {MEM_TYPE_NAMES.get(mem_type, f'memory_type {mem_type}')}"
        allowed = {t: MEM_TYPE_NAMES[t] for t in (LOAD_MEM_TYPES if insn.opcode == LOAD else STORE_MEM_TYPES)}
        # A STORE is routed by its opcode alone, so a STORE NOP may carry any memory type (VTA's runtime
        # emits store NOPs with memory_type UOP); a LOAD NOP still needs one, to know its module.
        if mem_type not in allowed and not (insn.opcode == STORE and insn.is_nop):
            raise InvalidInstruction(f"{insn.where}: memory_type={mem_type} is not allowed on "
                                     f"{OPCODE_NAMES[insn.opcode]}: allowed {_list(allowed)}", insn.index)
        self._route(insn, module_of(insn.opcode, mem_type))
        if insn.is_nop:
            return  # x_size == 0: only the dependency flags matter
        if f["y_size"] == 0:
            raise InvalidInstruction(f"{insn.where}: y_size=0 with x_size={f['x_size']} is not allowed: a "
                                     f"transfer needs y_size >= 1 (x_size=0 makes a NOP)", insn.index)
        pads = {p: f[p] for p in ("y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1")}
        if insn.opcode == STORE and any(pads.values()):
            shown = ", ".join(f"{k}={v}" for k, v in pads.items())
            raise InvalidInstruction(f"{insn.where}: padding on a store ({shown}) is not allowed: all four "
                                     f"pads must be 0", insn.index)
        x_total = f["x_pad_0"] + f["x_size"] + f["x_pad_1"]
        y_total = f["y_pad_0"] + f["y_size"] + f["y_pad_1"]
        depth, buffer = self._depth(mem_type)
        sram_end = f["sram_base"] + y_total * x_total
        if sram_end > depth:
            raise InvalidInstruction(f"{insn.where}: SRAM range [{f['sram_base']}, {sram_end}) exceeds the "
                                     f"{buffer} buffer depth {depth}", insn.index)
        elem = self.cfg.elem_bytes(mem_type)
        first = f["dram_base"] * elem
        nbytes = ((f["y_size"] - 1) * f["x_stride"] + f["x_size"]) * elem
        try:
            self._space.locate(first, nbytes)
        except MemoryAccessError as e:
            raise MemoryAccessError(
                f"{insn.where}: dram_base={f['dram_base']}, y_size={f['y_size']}, x_size={f['x_size']}, "
                f"x_stride={f['x_stride']} (elements of {elem} bytes) reach outside mapped DRAM: {e}",
                insn.index) from None
        insn.duration = self._dma_cycles(insn, elem, x_total * y_total - f["x_size"] * f["y_size"])
        # Host work: the bytes a LOAD writes into its SRAM (padding included; ACC_8BIT widens to ACC elements)
        # or a STORE writes to DRAM.
        sram_elem = self.cfg.ACC_ELEM_BYTES if mem_type == ACC_8BIT else elem
        insn.work = x_total * y_total * sram_elem if insn.opcode == LOAD else f["x_size"] * f["y_size"] * elem

    def _dma_cycles(self, insn: _Insn, elem: int, padded: int) -> int:
        """DRAM latency plus beats and burst gaps per row; contiguous transfers count as one row. Records the
        transfer's bus demand (its beats, and the cycles it issues them over when alone) on ``insn``."""
        f = insn.fields
        c = self.cfg
        if f["y_size"] == 1 or f["x_stride"] == f["x_size"]:
            rows, row_bytes = 1, f["x_size"] * f["y_size"] * elem
        else:
            rows, row_bytes = f["y_size"], f["x_size"] * elem
        dma = int(dma_cycles(c, rows, row_bytes)) + (padded if insn.opcode == LOAD else 0)
        insn.beats = rows * _ceil_div(row_bytes, c.BUS_BYTES)
        insn.span = dma - c.DRAM_LATENCY
        return dma

    def _check_loop_insn(self, insn: _Insn) -> None:
        f = insn.fields
        c = self.cfg
        if insn.opcode == ALU:
            alu_opcode = f["alu_opcode"]
            insn.label = f"ALU {ALU_OPCODE_NAMES.get(alu_opcode, f'alu_opcode {alu_opcode}')}"
        self._route(insn, module_of(insn.opcode))
        if f["uop_bgn"] > f["uop_end"]:
            raise InvalidInstruction(f"{insn.where}: uop_bgn={f['uop_bgn']} > uop_end={f['uop_end']} is not "
                                     f"allowed: need uop_bgn <= uop_end", insn.index)
        if f["uop_end"] > c.UOP_BUFF_DEPTH:
            raise InvalidInstruction(f"{insn.where}: uop_end={f['uop_end']} exceeds the micro-op buffer depth "
                                     f"{c.UOP_BUFF_DEPTH}", insn.index)
        if insn.opcode == ALU and f["alu_opcode"] not in ALU_OPCODE_NAMES:
            raise InvalidInstruction(f"{insn.where}: alu_opcode={f['alu_opcode']} is not allowed: allowed "
                                     f"{_list(ALU_OPCODE_NAMES)}", insn.index)
        ii = c.GEMM_II if insn.opcode == GEMM else c.ALU_II
        n = self._iterations(insn)
        insn.duration = max(1, c.COMPUTE_LATENCY + n * ii)
        # Host work: a multiply-accumulate per lane and input channel of a GEMM (a reset GEMM too on an HLS
        # output buffer, which narrows the sum it computes), one per lane written by an ALU or another reset
        # GEMM, for every micro-op iteration.
        macs = insn.opcode == GEMM and (not f["reset_reg"] or self.out_buffer == "hls")
        per = c.BATCH * c.BLOCK_OUT * (c.BLOCK_IN if macs else 1)
        insn.work = n * per
        insn.work_how = (f"{n} micro-op iterations (iter_out={f['iter_out']} x iter_in={f['iter_in']} x "
                         f"{f['uop_end'] - f['uop_bgn']} micro-ops) x {per} "
                         f"{'multiply-accumulates' if macs else 'lanes'}")

    @staticmethod
    def _iterations(insn: _Insn) -> int:
        f = insn.fields
        return f["iter_out"] * f["iter_in"] * (f["uop_end"] - f["uop_bgn"])

    # ---- execution: one function per opcode ----
    def _execute(self, insn: _Insn, stats: RunStats, compute: bool) -> None:
        handler = {LOAD: self._exec_load, STORE: self._exec_store, GEMM: self._exec_gemm,
                   ALU: self._exec_alu, FINISH: self._exec_finish}[insn.opcode]
        handler(insn, stats, compute)

    def _elements(self, mem_type: int, raw: np.ndarray) -> np.ndarray:
        """DRAM bytes as SRAM elements of ``mem_type`` (ACC_8BIT int8 lanes sign-extended to int32)."""
        c = self.cfg
        if mem_type == UOP:
            return raw.view("<u4").astype(np.uint32)
        if mem_type == INP:
            return raw.view(np.int8).reshape(-1, c.BATCH, c.BLOCK_IN)
        if mem_type == WGT:
            return raw.view(np.int8).reshape(-1, c.BLOCK_OUT, c.BLOCK_IN)
        if mem_type == ACC:
            return raw.view("<i4").astype(np.int32).reshape(-1, c.BATCH, c.BLOCK_OUT)
        return raw.view(np.int8).astype(np.int32).reshape(-1, c.BATCH, c.BLOCK_OUT)  # ACC_8BIT

    def _exec_load(self, insn: _Insn, stats: RunStats, compute: bool) -> None:
        """2D DMA from DRAM into an SRAM tile of (y_pad_0+y_size+y_pad_1) x (x_pad_0+x_size+x_pad_1), pads zero."""
        if insn.is_nop:
            return
        f = insn.fields
        mem_type = f["memory_type"]
        elem = self.cfg.elem_bytes(mem_type)
        counted = self.cfg.ACC_ELEM_BYTES if mem_type == ACC_8BIT else elem  # VTA counts ACC_8BIT as ACC
        counter = {UOP: "uop_load_nbytes", INP: "inp_load_nbytes", WGT: "wgt_load_nbytes",
                   ACC: "acc_load_nbytes", ACC_8BIT: "acc_load_nbytes"}[mem_type]
        setattr(stats, counter, getattr(stats, counter) + f["x_size"] * f["y_size"] * counted)
        if not compute and mem_type != UOP:
            return  # micro-ops always load: they drive the range checks of GEMM/ALU
        sram = self.uop if mem_type == UOP else self.inp if mem_type == INP else \
            self.wgt if mem_type == WGT else self.acc
        x_total = f["x_pad_0"] + f["x_size"] + f["x_pad_1"]
        y_total = f["y_pad_0"] + f["y_size"] + f["y_pad_1"]
        tile = np.zeros((y_total, x_total, *sram.shape[1:]), dtype=sram.dtype)
        for y in range(f["y_size"]):
            row_addr = (f["dram_base"] + y * f["x_stride"]) * elem
            row = self._elements(mem_type, self._dram_view(row_addr, f["x_size"] * elem))
            tile[f["y_pad_0"] + y, f["x_pad_0"]:f["x_pad_0"] + f["x_size"]] = row
        base = f["sram_base"]
        sram[base:base + y_total * x_total] = tile.reshape(-1, *sram.shape[1:])
        if sram is self.acc and self.out_buffer == "mirror":   # else only compute writes the output buffer
            self.out[base:base + y_total * x_total] = _low_bits(self.acc[base:base + y_total * x_total])

    def _exec_store(self, insn: _Insn, stats: RunStats, compute: bool) -> None:
        """2D DMA of output buffer tiles to DRAM (each lane the low OUT_WIDTH bits of a result compute wrote)."""
        if insn.is_nop:
            return
        f = insn.fields
        c = self.cfg
        stats.out_store_nbytes += f["x_size"] * f["y_size"] * c.OUT_ELEM_BYTES
        if not compute:
            return
        out = self.out[f["sram_base"]:f["sram_base"] + f["y_size"] * f["x_size"]].reshape(f["y_size"], -1)
        for y in range(f["y_size"]):
            row_addr = (f["dram_base"] + y * f["x_stride"]) * c.OUT_ELEM_BYTES
            self._dram_view(row_addr, out.shape[1])[:] = out[y]

    def _micro_ops(self, insn: _Insn) -> list[dict[str, int]]:
        """The micro-ops uop[uop_bgn:uop_end], decoded."""
        fmt = self.cfg.insn_formats["uop"]
        return [fmt.decode(int(w)) for w in self.uop[insn.fields["uop_bgn"]:insn.fields["uop_end"]]]

    def _check_reach(self, insn: _Insn, uops: list[dict[str, int]], roles: list[tuple[str, str, int, str]]) -> None:
        """Every index a micro-op reaches, idx + (iter_out-1)*factor_out + (iter_in-1)*factor_in, fits its SRAM.

        ``roles`` lists (micro-op field, factor prefix, depth, buffer name). Runs before anything is written.
        """
        f = insn.fields
        for k, uop in enumerate(uops, start=f["uop_bgn"]):
            for idx_field, prefix, depth, buffer in roles:
                reach = (uop[idx_field] + (f["iter_out"] - 1) * f[f"{prefix}_factor_out"]
                         + (f["iter_in"] - 1) * f[f"{prefix}_factor_in"])
                if reach >= depth:
                    raise InvalidInstruction(
                        f"{insn.where}: micro-op {k} reaches {buffer} index {reach} ({idx_field}={uop[idx_field]}"
                        f" + (iter_out-1)*{prefix}_factor_out + (iter_in-1)*{prefix}_factor_in with "
                        f"iter_out={f['iter_out']}, iter_in={f['iter_in']}, {prefix}_factor_out="
                        f"{f[f'{prefix}_factor_out']}, {prefix}_factor_in={f[f'{prefix}_factor_in']}), beyond "
                        f"the {buffer} buffer depth {depth}", insn.index)

    def _loop_indices(self, insn: _Insn, uops: list[dict[str, int]]):
        """(dst, src, wgt) per iteration in execution order: for i < iter_out, j < iter_in, k in the range."""
        f = insn.fields
        wgt_out, wgt_in = f.get("wgt_factor_out", 0), f.get("wgt_factor_in", 0)
        for i in range(f["iter_out"]):
            for j in range(f["iter_in"]):
                for u in uops:
                    yield (u["dst_idx"] + i * f["dst_factor_out"] + j * f["dst_factor_in"],
                           u["src_idx"] + i * f["src_factor_out"] + j * f["src_factor_in"],
                           u["wgt_idx"] + i * wgt_out + j * wgt_in)

    def _exec_gemm(self, insn: _Insn, stats: RunStats, compute: bool) -> None:
        """acc[d] += inp[s] . wgt[w]^T per iteration (int32, wrapping), or acc[d] = 0 with reset_reg."""
        n = self._iterations(insn)
        if n == 0:
            return  # zero iterations: a valid no-op
        c = self.cfg
        f = insn.fields
        uops = self._micro_ops(insn)
        roles = [("dst_idx", "dst", c.ACC_BUFF_DEPTH, "accumulator")]
        if not f["reset_reg"]:
            roles += [("src_idx", "src", c.INP_BUFF_DEPTH, "input"), ("wgt_idx", "wgt", c.WGT_BUFF_DEPTH, "weight")]
        self._check_reach(insn, uops, roles)
        if not f["reset_reg"]:
            stats.gemm_counter += n
        if not compute:
            return
        for d, s, w in self._loop_indices(insn, uops):
            if f["reset_reg"]:
                if self.out_buffer == "hls":   # the sum it computed before the reset (indices wrap: unchecked)
                    s, w = s % c.INP_BUFF_DEPTH, w % c.WGT_BUFF_DEPTH
                    total = self.acc[d] + self.inp[s].astype(np.int32) @ self.wgt[w].astype(np.int32).T
                    self.out[d] = _low_bits(total)
                self.acc[d] = 0
                if self.out_buffer == "mirror":
                    self.out[d] = 0
            else:
                # Products fit int32 (|sum| <= 64 * 2^14), so only the accumulation can wrap.
                self.acc[d] += self.inp[s].astype(np.int32) @ self.wgt[w].astype(np.int32).T
                self.out[d] = _low_bits(self.acc[d])

    def _exec_alu(self, insn: _Insn, stats: RunStats, compute: bool) -> None:
        """acc[d] = op(acc[d], imm or acc[s]) lane-wise; reset_reg is ignored, as in VTA."""
        n = self._iterations(insn)
        if n == 0:
            return
        c = self.cfg
        f = insn.fields
        uops = self._micro_ops(insn)
        roles = [("dst_idx", "dst", c.ACC_BUFF_DEPTH, "accumulator")]
        if not f["use_imm"]:
            roles.append(("src_idx", "src", c.ACC_BUFF_DEPTH, "accumulator"))
        self._check_reach(insn, uops, roles)
        stats.alu_counter += n
        if not compute:
            return
        op = ALU_OPS[f["alu_opcode"]]
        lanes = (c.BATCH, c.BLOCK_OUT)
        for d, s, _ in self._loop_indices(insn, uops):
            a = self.acc[d].astype(np.int64)
            b = np.full(lanes, f["imm"], dtype=np.int64) if f["use_imm"] else self.acc[s].astype(np.int64)
            self.acc[d] = _wrap_int32(op(a, b))
            self.out[d] = _low_bits(self.acc[d])

    def _exec_finish(self, insn: _Insn, stats: RunStats, compute: bool) -> None:
        """FINISH only marks completion; the pipeline records its end as finish_cycle."""
