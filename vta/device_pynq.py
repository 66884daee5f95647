"""The Pynq device: VTA bitstreams on a Pynq board (or the simulated one), through the real ``pynq`` package.

The surface is ``vta.device.SimDevice``'s (``alloc/free/copy_in/copy_out/run -> RunStats``, ``last_stats``,
``cfg``), so operators, programs and graphs run on a board unchanged::

    dev = PynqDevice(load_config("pynq"))                 # finds, checks and downloads the bitstream
    op = vta.compile_op("conv2d", env, ..., device=dev)  # buffers from pynq.allocate, runs on the board

Where it runs: on the board itself, ``pynq`` finds the local device. From another machine, pynq's remote
mode (``PYNQ_REMOTE_DEVICES=<board ip>``, port 7967) or ``board="host:port"`` (also ``$VTA_PYNQ_BOARD``)
reach a board running PYNQ's remote server, or ``vta board serve --simulated``.

- **Buffers** come from ``pynq.allocate(..., cacheable=True)`` (physically contiguous, CPU-cached: VTA's
  runtime allocates its CMA buffers cached too, ``kAlwaysCache``, so staging weights and activations is not
  done through uncached memory); their physical addresses go into the instructions; the device keeps
  ``address -> pynq buffer``. pynq marks cached buffers ``coherent=False``, as it cannot know the bitstream's
  masters use the Zynq's coherent ACP port; on such a platform (``cfg.COHERENT``, VTA's
  ``VTA_COHERENT_ACCESSES``) the accelerator sees the CPU caches and, as in VTA's runtime, no flush is needed.
  Where the host copy is not the memory the accelerator reads (a remote board, or a platform that is not
  ``cfg.COHERENT``) copies flush the buffer to the device after writing (``sync_to_device``) and invalidate it
  before reading after a run (``sync_from_device``).
- **Bitstreams** are looked up before anything else (``vta.board.bitstream``: VTA's cache layout, the
  config's name) and downloaded with ``pynq.Bitstream(path).download()``.
- **Programs are checked before launch**, always: ``vta.program_check.check_program`` against the buffers
  this device allocated (plus: the stream ends with FINISH and no transfer touches the instruction buffer,
  which the fetch module may still be reading). ``ProgramRejected`` names the instruction and range.
- **Launch** follows VTA's ``VTADeviceRun`` register sequence on the four blocks (``pynq.MMIO`` at
  ``cfg.mmio_address(block)``), then polls compute's ``done`` with a timeout.

**The ``done`` trap and the fix.** VTA's compute ``done`` (0x18) is a level register, not clear-on-read: the
HLS compute block writes 0 for every instruction it executes (LOAD UOP/ACC, GEMM, ALU) and 1 for FINISH, so
after a run it stays 1 until the next program's first compute instruction executes, and a host cannot clear
it (0x10 is HLS's separate ``done_i`` input;
writing it does not touch ``done_o``). VTA's driver polls right after launch and can read the previous run's
1 (apache/tvm discuss RFC 6743: wrong results on ZCU104). Here every launch runs one extra instruction
first, a GEMM with no micro-ops, no iterations and no token flags (it touches no SRAM, no DRAM, no queue), and
the poll accepts ``done == 1`` only after compute's ``ap_done`` (clear on read, raised each time compute
finishes an instruction; read once before launch to clear it) has been seen: compute executes its queue in
order, so by then that GEMM has run and set ``done`` to 0, and a 1 can only come from this program's FINISH.

**Counters.** VTA's bitstreams have no performance counters: the stats of a board run hold the latency
measured on the host (``host_seconds``: launch to ``done``) and VTA's counters and cycles computed from the
program by the simulator's timing-only run (``counters_from``/``cycles_from`` say so). ``run(compute=False)``
does not launch: it returns that model alone, as the simulator device's timing-only runs move no data.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from hw_config import HwConfig
from hw_config.buffer import alloc_size, checked_buffer
from hw_config.isa_rules import INSN_BYTES
from hw_config.locking import serialised
from simulator.core import Simulator
from simulator.errors import SimulatorError
from simulator.stats import RunStats
from vta.board.bitstream import BitstreamError, find_bitstream, is_placeholder
from vta.board.pynq_support import import_pynq, with_session
from vta.board.registers import (
    AP_DONE,
    AP_START,
    AUTO_RESTART,
    COMPUTE_BIAS_ADDR,
    COMPUTE_DONE_RD,
    COMPUTE_UOP_ADDR,
    CTRL,
    FETCH_INSN_ADDR,
    FETCH_INSN_COUNT,
    LOAD_INP_ADDR,
    LOAD_WGT_ADDR,
    STORE_OUT_ADDR,
)
from vta.board.server import SESSION_FILE, SESSION_HEADER, SIMULATED_BOARD_PREFIX, STATUS_FILE
from vta.device import Buffer
from vta.isa import GemmInsn, assemble
from vta.program_check import check_program

BLOCKS = ("fetch", "load", "compute", "store")
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_PORT = 7967
COUNTERS_FROM = "program (simulator timing model): VTA's bitstreams have no performance counters"
CYCLES_FROM = "simulator timing model, not measured on the board (host_seconds is the measured latency)"

__all__ = ["BoardError", "BoardRunStats", "BoardTimeout", "PynqDevice"]


class BoardError(OSError):
    """The board failed or could not be reached (connection, download, register access, allocation)."""


class BoardTimeout(BoardError, TimeoutError):
    """The accelerator did not raise ``done`` in time; the device reprograms the bitstream before its next run."""


@dataclass
class BoardRunStats(RunStats):
    """A board run: VTA's counters and cycles from the timing model, latency measured on the host."""

    board: str = ""
    host_seconds: float = 0.0     # launch to done, measured on the host (includes register-access latency)
    launched: bool = True         # False for run(compute=False): the model only
    counters_from: str = COUNTERS_FROM
    cycles_from: str = CYCLES_FROM


def _parse_board(text: str) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]:port`` -> (host, port)."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:
        host, port = text, ""
    try:
        number = int(port) if port else DEFAULT_PORT
    except ValueError:
        raise ValueError(f"board {text!r}: expected HOST or HOST:PORT") from None
    if not host or not 0 < number < 65536:
        raise ValueError(f"board {text!r}: expected HOST or HOST:PORT with a port in 1..65535")
    return host, number


def _details(e: BaseException) -> str:
    """A gRPC error's message (``details()``), or the exception's text."""
    details = getattr(e, "details", None)
    if callable(details):
        with contextlib.suppress(Exception):   # a half-built RpcError: fall back to its text
            return str(details())
    return str(e) or type(e).__name__


def _rows(insns) -> np.ndarray:
    if isinstance(insns, (bytes, bytearray, memoryview)):
        insns = np.frombuffer(insns, dtype=np.uint8)
    arr = np.asarray(insns)
    if arr.dtype == np.uint8 and arr.ndim == 1 and arr.size % INSN_BYTES == 0:
        arr = arr.reshape(-1, INSN_BYTES)
    return np.ascontiguousarray(arr)


class PynqDevice:
    """A VTA bitstream on a Pynq board, with ``SimDevice``'s surface (see the module docstring).

    Threads may share a device: its calls take turns (``run`` as a whole: the board has one accelerator and the
    device one instruction buffer)."""

    def __init__(self, cfg: HwConfig, bitstream: str | os.PathLike | None = None,
                 cache_dir: str | os.PathLike | None = None, timeout_s: float = DEFAULT_TIMEOUT_S, *,
                 board: str | None = None, poll_s: float = 1e-3, cli: str | None = None):
        """Find and check the bitstream, reach the board, download the bitstream, map the four blocks.

        ``bitstream``: a ``.bit`` to use instead of the cache's (its name must be ``<cfg.bitstream>.bit``);
        ``cache_dir``: the bitstream cache (default ``$VTA_CACHE_PATH`` or ``~/.vta_cache``);
        ``timeout_s``: how long a run may take before ``BoardTimeout``; ``board``: ``host[:port]`` of a
        remote board (default ``$VTA_PYNQ_BOARD``, else pynq's own choice: the local board or
        ``PYNQ_REMOTE_DEVICES``); ``poll_s``: the longest pause between two polls of ``done``; ``cli``: given by
        a command, the options that loaded its config (``vta.board.bitstream.config_options``): refusals then name
        the command's flags (``--bitstream``, ``--board``) instead of these arguments.
        """
        if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise ValueError(f"timeout_s={timeout_s!r}: need a positive number of seconds")
        self.cfg = cfg
        self.timeout_s = float(timeout_s)
        self.poll_s = float(poll_s)
        self._cli = cli
        self.bitstream: Path = find_bitstream(cfg, bitstream, cache_dir, cli=cli)   # before anything touches a board
        self.last_stats: BoardRunStats | None = None
        self._pynq = import_pynq("vta.device_pynq.PynqDevice")
        self._arrays: dict[int, object] = {}
        self._sizes: dict[int, int] = {}
        self._stale: set[int] = set()
        self._insn: tuple[object, int, int] | None = None   # (pynq buffer, address, capacity in bytes)
        self._hung = False
        self._closed = False
        self._lock = threading.RLock()   # serialised: one accelerator, one instruction buffer, one caller at a time
        self._nop = assemble([GemmInsn()], cfg)            # the done-clearing instruction (see module doc)
        self._timing = Simulator(cfg)
        self._dev, self.board = self._open(board)
        self.remote = bool(self._dev.has_capability("REMOTE"))
        if self.remote and self._simulated():
            self._dev = self._session(self._dev)
        self._sync = self.remote or not cfg.COHERENT
        self._program()
        try:
            self._mmio = {b: self._pynq.MMIO(cfg.mmio_address(b), cfg.MMIO_RANGE, device=self._dev) for b in BLOCKS}
        except Exception as e:   # pynq raises RuntimeError, grpc errors, ...: one clear message
            raise BoardError(f"{self.board}: cannot map VTA's register blocks at 0x{cfg.mmio_address('fetch'):x}: "
                             f"{_details(e)}") from e

    def __repr__(self) -> str:
        return f"PynqDevice({self.cfg.model} on {self.board}, {len(self._arrays)} buffers)"

    # ---- the board ----
    def _open(self, board: str | None):
        board = board or os.environ.get("VTA_PYNQ_BOARD") or None
        if board:
            host, port = _parse_board(board)
            try:
                from pynq.pl_server.remote_device import RemoteDevice
                dev = RemoteDevice(0, host, port=port)
            except Exception as e:   # connection failures come as RuntimeError or grpc errors
                raise BoardError(f"cannot reach a PYNQ board at {host}:{port}: {_details(e)} (is the board's PYNQ "
                                 f"remote server, or `vta board serve --simulated --port {port}`, running?)") from e
            return dev, f"{dev.name} at {host}:{port}"
        try:
            dev = self._pynq.Device.active_device
        except Exception as e:   # "No Devices Found", failed remote probes
            hint = ("PYNQ_REMOTE_DEVICES is set: is the board's PYNQ remote server (or `vta board serve "
                    "--simulated`) listening on port 7967?" if os.environ.get("PYNQ_REMOTE_DEVICES") else
                    "run on the board itself, set PYNQ_REMOTE_DEVICES=<board ip> (pynq's remote mode), or pass " +
                    ("--board HOST[:PORT]" if self._cli is not None else "board='host:port'"))
            raise BoardError(f"no PYNQ board found ({_details(e)}): {hint}") from e
        name = getattr(dev, "name", None) or dev.tag
        if getattr(dev, "ip_addr", None):
            return dev, f"{name} at {dev.ip_addr}:{getattr(dev, 'port', DEFAULT_PORT)}"
        return dev, f"local board {name}"

    def _session(self, dev):
        """The simulated board tells clients apart by a secret session token, not their address: take one (a new
        client) and send it with every call. Pynq's own client sends none; without one the board goes by the
        connection."""
        try:
            token = dev.read_file(SESSION_FILE).decode("ascii").strip()
        except Exception:  # noqa: BLE001 - a board from before sessions (no such file): it goes by the connection
            return dev
        if not re.fullmatch(r"[0-9a-f]{32,128}", token):
            raise BoardError(f"{self.board}: the simulated board's session token is malformed ({token[:40]!r})")
        return with_session(dev, token, SESSION_HEADER)

    def _simulated(self) -> bool:
        return str(getattr(self._dev, "name", "")).startswith(SIMULATED_BOARD_PREFIX)

    def _program(self) -> None:
        """Download the bitstream (which also resets VTA's registers)."""
        path = self.bitstream
        if is_placeholder(path) and not self._simulated():
            raise BitstreamError(f"{path} is a placeholder for the simulated board (vta board bitstream "
                                 f"--make-simulated), not an FPGA bitstream; refusing to download it to {self.board}")
        try:
            bit = self._pynq.Bitstream(str(path), device=self._dev)
            if self.remote:
                # pynq's remote download needs the .bin data in its parser when the .bit has no .hwh beside it,
                # and it uploads that data only when the board has no file of that name in /lib/firmware: a
                # stale or foreign file would be programmed instead. Upload ours first, always.
                from pynq.pl_server.embedded_device import DEFAULT_XCLBIN, bit2bin
                from pynq.pl_server.xclbin_parser import XclBin
                parser = XclBin(xclbin_data=DEFAULT_XCLBIN)
                parser.bin_data = bit2bin(path.read_bytes())
                self._dev.write_file(f"/lib/firmware/{path.stem}.bin", parser.bin_data)
                bit.download(parser)
            else:
                bit.download()
        except BitstreamError:
            raise
        except Exception as e:   # pynq and grpc raise many kinds: one clear message
            raise BoardError(f"downloading {path.name} to {self.board} failed: {_details(e)}") from e
        self._hung = False

    def _status_note(self) -> str:
        """The simulated board's own account of a hang (its status file), if this is one."""
        if not (self.remote and self._simulated()):
            return ""
        try:
            import json
            status = json.loads(self._dev.read_file(STATUS_FILE))
            fault = status["accelerator"].get("last_fault")
            return (f"; the simulated board reports (its instruction 0 is the done-clearing GEMM): {fault}"
                    if fault else "")
        except Exception:  # noqa: BLE001 - best effort inside an error message
            return ""

    # ---- buffers ----
    def _array(self, buf: Buffer):
        arr = self._arrays.get(checked_buffer(buf).addr)
        if arr is None:
            raise ValueError(f"buffer at 0x{buf.addr:x} is not allocated on this device ({self.board})")
        return arr

    @serialised
    def alloc(self, nbytes: int) -> Buffer:
        """A physically contiguous board buffer (``pynq.allocate``) of ``nbytes`` bytes."""
        self._check_open()
        size = alloc_size(nbytes)
        n = max(1, size)
        arr, addr = self._allocate(n)
        self._arrays[addr] = arr
        self._sizes[addr] = n
        return Buffer(addr, size)

    def _allocate(self, n: int):
        try:
            arr = self._pynq.allocate(shape=(n,), dtype=np.uint8, target=self._dev, cacheable=True)
            addr = int(arr.physical_address)
        except Exception as e:
            raise BoardError(f"{self.board}: cannot allocate {n} bytes: {_details(e)}") from e
        if addr + n > self.cfg.dma_window:
            arr.freebuffer()
            raise BoardError(f"{self.board}: buffer at 0x{addr:x} ends past 0x{self.cfg.dma_window:x}, beyond the "
                             f"DDR window VTA's AXI masters reach on a {self.cfg.TARGET} ({self.cfg.dma_window >> 20} MiB "
                             f"from address 0)")
        try:
            self._timing.map(addr, n)
        except SimulatorError as e:
            arr.freebuffer()
            raise BoardError(f"{self.board}: buffer at 0x{addr:x} overlaps one this device still holds: {e}") from e
        return arr, addr

    @serialised
    def free(self, buf: Buffer) -> None:
        arr = self._array(buf)
        del self._arrays[buf.addr], self._sizes[buf.addr]
        self._stale.discard(buf.addr)
        self._timing.free(buf.addr)
        try:
            arr.freebuffer()
        except Exception as e:
            raise BoardError(f"{self.board}: freeing the buffer at 0x{buf.addr:x} failed: {_details(e)}") from e

    @serialised
    def copy_in(self, buf: Buffer, data: np.ndarray | bytes, offset: int = 0) -> None:
        raw = np.frombuffer(data, np.uint8) if isinstance(data, (bytes, bytearray)) else \
            np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if offset < 0 or offset + raw.size > buf.nbytes:
            raise ValueError(f"copy of {raw.size} bytes at offset {offset} overruns a {buf.nbytes}-byte buffer")
        arr = self._array(buf)
        try:
            if self._sync and buf.addr in self._stale and raw.size < self._sizes[buf.addr]:
                arr.sync_from_device()     # keep what the accelerator wrote around the copied range
            self._stale.discard(buf.addr)
            arr[offset:offset + raw.size] = raw
            if self._sync:
                arr.sync_to_device()
        except Exception as e:
            raise BoardError(f"{self.board}: copy to the buffer at 0x{buf.addr:x} failed: {_details(e)}") from e

    @serialised
    def copy_out(self, buf: Buffer, nbytes: int | None = None, offset: int = 0) -> np.ndarray:
        n = buf.nbytes - offset if nbytes is None else nbytes
        if offset < 0 or n < 0 or offset + n > buf.nbytes:
            raise ValueError(f"read of {n} bytes at offset {offset} overruns a {buf.nbytes}-byte buffer")
        arr = self._array(buf)
        try:
            if self._sync and buf.addr in self._stale:
                arr.sync_from_device()
                self._stale.discard(buf.addr)
            return np.array(arr[offset:offset + n], dtype=np.uint8)
        except Exception as e:
            raise BoardError(f"{self.board}: copy from the buffer at 0x{buf.addr:x} failed: {_details(e)}") from e

    @serialised
    def regions(self) -> list[tuple[int, int]]:
        """The buffers a program may touch: (physical address, bytes) of every buffer allocated here."""
        return sorted(self._sizes.items())

    @property
    def instruction_region(self) -> tuple[int, int] | None:
        """(address, bytes) of the instruction buffer (after the first run), which no program may DMA into."""
        return None if self._insn is None else (self._insn[1], self._insn[2])

    # ---- programs ----
    def _place(self, rows: np.ndarray) -> tuple[int, int]:
        """Put [done-clearing GEMM, program] in the instruction buffer; returns (its address, capacity)."""
        need = (len(rows) + 1) * INSN_BYTES
        if self._insn is None or self._insn[2] < need:
            if self._insn is not None:
                old, addr, _ = self._insn
                self._insn = None
                self._timing.free(addr)
                old.freebuffer()
            capacity = max(4096, 1 << (need - 1).bit_length())
            arr, addr = self._allocate(capacity)
            self._insn = (arr, addr, capacity)
        return self._insn[1], self._insn[2]

    @serialised
    def check(self, insns) -> np.ndarray:
        """Refuse (``ProgramRejected``) a program that would touch memory outside this device's buffers."""
        rows = np.array(_rows(insns), copy=True)   # what is checked is what runs, whatever the caller does next
        insn_addr, capacity = self._place(rows) if rows.ndim == 2 and rows.shape[-1] == INSN_BYTES else (0, 0)
        regions = self.regions() + [(insn_addr, capacity)]
        check_program(rows, self.cfg, regions, (insn_addr + INSN_BYTES, len(rows) * INSN_BYTES),
                      protected=[(insn_addr, capacity)])
        return rows

    @serialised
    def run(self, insns: np.ndarray, *, compute: bool = True, trace: bool = False) -> BoardRunStats:
        """Check the program, launch it as VTADeviceRun does, wait for ``done``; returns the run's stats.

        ``compute=False`` does not launch (timing model only); ``trace`` attaches the model's trace.
        """
        self._check_open()
        rows = self.check(insns)
        if not compute:
            self.last_stats = self._model(rows, trace, 0.0, launched=False)
            return self.last_stats
        if self._hung:
            self._program()
        arr, insn_addr, _ = self._insn
        try:
            arr[:INSN_BYTES] = self._nop.reshape(-1)
            arr[INSN_BYTES:(len(rows) + 1) * INSN_BYTES] = rows.reshape(-1)
            if self._sync:
                arr.sync_to_device()
        except Exception as e:
            raise BoardError(f"{self.board}: writing {len(rows)} instructions failed: {_details(e)}") from e
        seconds = self._launch(insn_addr, len(rows))
        self._stale.update(self._arrays)
        self.last_stats = self._model(rows, trace, seconds, launched=True)
        return self.last_stats

    def _launch(self, insn_addr: int, count: int) -> float:
        """VTADeviceRun's register sequence (plus the done fix); returns launch-to-done seconds."""
        fetch, load, compute, store = (self._mmio[b] for b in BLOCKS)
        try:
            compute.read(CTRL)                       # clear compute's ap_done latch (clear on read)
            fetch.write(FETCH_INSN_COUNT, count + 1)  # + the done-clearing GEMM in front
            fetch.write(FETCH_INSN_ADDR, insn_addr & 0xFFFFFFFF)
            if insn_addr >> 32:
                fetch.write(FETCH_INSN_ADDR + 4, insn_addr >> 32)
            load.write(LOAD_INP_ADDR, 0)
            load.write(LOAD_WGT_ADDR, 0)
            compute.write(COMPUTE_UOP_ADDR, 0)
            compute.write(COMPUTE_BIAS_ADDR, 0)
            store.write(STORE_OUT_ADDR, 0)
            start = time.perf_counter()   # launch: from the fetch module's start (the board's clock starts there)
            fetch.write(CTRL, AP_START)
            for block in (load, compute, store):
                block.write(CTRL, AP_START | AUTO_RESTART)
            fresh = False
            pause = 0.0
            while True:
                if not fresh:
                    fresh = bool(compute.read(CTRL) & AP_DONE)
                if fresh and compute.read(COMPUTE_DONE_RD) == 1:
                    return time.perf_counter() - start
                if time.perf_counter() - start > self.timeout_s:
                    break
                time.sleep(pause)
                pause = min(max(2 * pause, 20e-6), self.poll_s)
        except Exception as e:
            self._hung = True
            raise BoardError(f"{self.board}: register access failed while running {count} instructions: "
                             f"{_details(e)}") from e
        self._hung = True
        raise BoardTimeout(self._timeout_message(insn_addr, count))

    def _timeout_message(self, insn_addr: int, count: int) -> str:
        try:
            regs = (f"fetch control 0x{self._mmio['fetch'].read(CTRL):x}, compute control "
                    f"0x{self._mmio['compute'].read(CTRL):x}, done {self._mmio['compute'].read(COMPUTE_DONE_RD)}")
        except Exception as e:  # noqa: BLE001 - best effort inside an error message
            regs = f"registers unreadable ({_details(e)})"
        bufs = self.regions()
        shown = ", ".join(f"[0x{a:x}, 0x{a + n:x})" for a, n in bufs[:4]) + (" ..." if len(bufs) > 4 else "")
        return (f"{self.board}: the accelerator did not raise done within {self.timeout_s:g} s running a program of "
                f"{count} instructions (plus the done-clearing GEMM) at 0x{insn_addr + INSN_BYTES:x} over "
                f"{len(bufs)} buffer(s) of {sum(n for _, n in bufs)} bytes ({shown}); {regs}{self._status_note()}. "
                f"A program waiting for a token that never comes hangs VTA like this. The next run downloads "
                f"{self.bitstream.name} again to reset the accelerator")

    def _model(self, rows: np.ndarray, trace: bool, seconds: float, launched: bool) -> BoardRunStats:
        """The run's counters and cycles from the simulator's timing-only run of the same program."""
        note = CYCLES_FROM
        try:
            st = self._timing.run(rows, compute=False, trace=trace)
        except SimulatorError as e:
            st = RunStats(clock_mhz=self.cfg.CLOCK_MHZ)
            note = f"the timing model refused the program ({e}): no counters or cycles"
        values = {f.name: getattr(st, f.name) for f in fields(RunStats)}
        if launched:   # on a board the latency is what was measured, not what the model predicts
            values["latency_s"] = seconds
        return BoardRunStats(**values, board=self.board, host_seconds=seconds, launched=launched,
                             counters_from=COUNTERS_FROM if note == CYCLES_FROM else note, cycles_from=note)

    # ---- lifetime ----
    def _check_open(self) -> None:
        if self._closed:
            raise BoardError(f"{self.board}: this PynqDevice is closed")

    @serialised
    def close(self) -> None:
        """Free every buffer this device allocated (idempotent)."""
        if self._closed:
            return
        self._closed = True
        arrays = list(self._arrays.values()) + ([self._insn[0]] if self._insn else [])
        self._arrays.clear()
        self._sizes.clear()
        self._insn = None
        for arr in arrays:
            with contextlib.suppress(Exception):   # best effort: the board may be gone
                arr.freebuffer()

    def __enter__(self) -> PynqDevice:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
