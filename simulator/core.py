"""Python face of the C simulator: builds its parameters from the config, raises typed errors."""

from __future__ import annotations

import hashlib
import os
import threading
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from hw_config import HwConfig, load_config
from hw_config.capabilities import OUT_BUFFER_MODES, violations
from hw_config.locking import serialised
from simulator.dram import AddressSpace
from simulator.errors import (
    DEFAULT_MAX_CYCLES,
    DEFAULT_MAX_WORK,
    ERROR_CLASSES,
    InvalidInstruction,
    SimulatorError,
    budget_value,
)
from simulator.latency import board_latency
from simulator.params import param_values
from simulator.stats import MODULES, STALL_CAUSES, RunStats

if TYPE_CHECKING:
    from simulator.batch import BatchStep, StreamBatch
    from simulator.image import ProgramImage, ReplayResult

try:
    from simulator._vta_sim import ffi, lib
except ImportError as exc:  # pragma: no cover - only without a build
    raise ImportError(
        "the C simulator is not built: run `pip install -e .` in the repository (it compiles "
        "simulator/csrc through cffi; needs a C compiler)") from exc

ERR_LEN = 1024
__all__ = ["DEFAULT_MAX_CYCLES", "DEFAULT_MAX_THREADS", "DEFAULT_MAX_WORK", "PARALLEL_MIN_MACS", "Simulator",
           "default_threads", "kernel_path", "kernels_supported", "usable_cpus"]
MAX_THREADS = 64  # vta_sim.c's VTA_SIM_MAX_THREADS
DEFAULT_MAX_THREADS = 8  # the default thread count never exceeds this (a ResNet-18 GEMM is 10^5-10^7 MACs)
# A GEMM instruction with fewer multiply-accumulates runs on one thread: handing a share to a waiting thread
# costs about a microsecond, waking a sleeping one tens (docs/simulator.md, "Threads"), what the AVX2 kernel
# does with about 10^5 MACs. Matches vta_sim.c's VTA_SIM_PAR_MIN_MACS.
PARALLEL_MIN_MACS = 1 << 18


def _threads_value(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= MAX_THREADS:
        raise SimulatorError(f"{what}={value!r}: the GEMM thread count must be an integer from 1 to {MAX_THREADS}")
    return int(value)


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_threads() -> int:
    """GEMM threads of a Simulator created without ``threads``: ``VTA_SIM_THREADS`` if set, else the CPUs this
    process may use, at most ``DEFAULT_MAX_THREADS`` (tuning's worker processes set the variable to their share
    of the CPUs, so that workers and threads do not oversubscribe the machine).
    Raises SimulatorError for a bad ``VTA_SIM_THREADS``."""
    env = os.environ.get("VTA_SIM_THREADS", "").strip()
    if env:
        try:
            value = int(env)
        except ValueError:
            raise SimulatorError(f"VTA_SIM_THREADS={env!r} is not an integer (allowed: 1 to {MAX_THREADS})") from None
        return _threads_value("VTA_SIM_THREADS", value)
    return max(1, min(usable_cpus(), DEFAULT_MAX_THREADS))


SRAM_IDS = {"uop": 0, "wgt": 1, "inp": 2, "acc": 3, "out": 4}   # "out": read only (what a STORE writes)
PROFILE_CLASSES = ("load", "store", "gemm", "alu", "weight_layout", "run")   # vta_sim.h's vta_sim_profile


def kernel_path() -> str:
    """The GEMM kernel path a Simulator created now runs: ``VTA_SIM_KERNEL`` if set, else the best the CPU has.

    Raises SimulatorError, as Simulator() would, when VTA_SIM_KERNEL names an unknown path or one this CPU or
    build lacks (docs/simulator.md, "Kernel paths").
    """
    err = ffi.new("char[]", ERR_LEN)
    name = lib.vta_sim_kernel_path(err, ERR_LEN)
    if name == ffi.NULL:
        raise SimulatorError(ffi.string(err).decode())
    return ffi.string(name).decode()


def kernels_supported() -> list[str]:
    """The kernel paths this CPU and build support, best last."""
    return ffi.string(lib.vta_sim_kernels_supported()).decode().split()


STATS_WORDS = 44   # vta_stats_t: 44 64-bit fields (the counters, cycles, work, insns, busy, stalls, error_index)
_STALLS = len(STALL_CAUSES)
if ffi.sizeof("vta_stats_t") != 8 * STATS_WORDS:   # pragma: no cover - a header edit without this constant's
    raise ImportError("simulator/core.py and vta_sim.h disagree on vta_stats_t; rebuild with pip install -e .")


def run_stats(words: list[int], clock_mhz: float) -> RunStats:
    """RunStats from the 64-bit words of a vta_stats_t (its fields in order)."""
    n = len(MODULES)
    stalls = words[16:16 + n * _STALLS]
    return RunStats(*words[:10], insns=dict(zip(MODULES, words[10:13])), busy=dict(zip(MODULES, words[13:16])),
                    stalls={m: dict(zip(STALL_CAUSES, stalls[i * _STALLS:(i + 1) * _STALLS]))
                            for i, m in enumerate(MODULES)},
                    clock_mhz=clock_mhz)


def stream_key(raw: np.ndarray) -> bytes:
    """A stream's key in the board model's cache (its blake2b digest)."""
    return hashlib.blake2b(raw, digest_size=16).digest()


def _as_insn_bytes(insns: bytes | bytearray | np.ndarray) -> np.ndarray:
    arr = np.frombuffer(insns, dtype=np.uint8) if isinstance(insns, (bytes, bytearray, memoryview)) \
        else np.asarray(insns)
    if arr.dtype != np.uint8:
        raise SimulatorError(f"instructions must be uint8 bytes (N x 16), got dtype {arr.dtype}")
    if arr.size % 16:
        raise SimulatorError(f"instructions must be a whole number of 16-byte instructions, got {arr.size} bytes")
    return np.ascontiguousarray(arr.reshape(-1))


def _as_bytes(data: bytes | bytearray | np.ndarray) -> np.ndarray:
    """``data``'s bytes: bytes-like, or a numpy array of numbers (its bytes in memory order). Anything else (a list, a
    str, an int) is refused rather than guessed at (numpy would turn [1, 2] into 16 bytes of int64)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return np.frombuffer(data, dtype=np.uint8)
    if not isinstance(data, np.ndarray) or data.dtype.kind not in "biuf":
        what = f"a numpy array of dtype {data.dtype}" if isinstance(data, np.ndarray) else type(data).__name__
        raise TypeError(f"data: bytes, bytearray, memoryview or a numpy array of numbers, not {what} (e.g. "
                        "np.asarray(values, dtype=np.int8))")
    return np.ascontiguousarray(data).reshape(-1).view(np.uint8)


@lru_cache(maxsize=64)
def _param_bytes(cfg: HwConfig) -> bytes:
    """The parameter struct's bytes, built once per config (equal configs, equal parameters; ~30 us)."""
    values = np.array(param_values(cfg), dtype=np.uint32)
    if ffi.sizeof("vta_params_t") != values.nbytes:
        raise SimulatorError("simulator/params.py and vta_sim.h disagree on vta_params_t; rebuild with pip install -e .")
    return values.tobytes()


def _params(cfg: HwConfig):
    raw = _param_bytes(cfg)
    p = ffi.new("vta_params_t *")
    ffi.memmove(p, raw, len(raw))
    return p


LATENCY_CACHE_STREAMS = 512   # board-model results a simulator keeps (a few hundred bytes each)


def refuse_unsupported(raw: np.ndarray, cfg: HwConfig, where: str = "") -> None:
    """Strict mode: ``InvalidInstruction`` naming the first instruction of ``raw`` (the stream's bytes) that the
    config's capability set cannot run; ``where`` prefixes the message (a batch names its step)."""
    refused = violations(raw.reshape(-1, 16), cfg)
    if refused:
        index, reason = refused[0]
        raise InvalidInstruction(f"{where}instruction {index}: {reason} (strict mode: the program is for the "
                                 f"{cfg.CAPABILITIES} hardware; {len(refused)} such instruction(s))", index)


class Simulator:
    """A simulated accelerator for one config: DRAM by physical address, SRAMs, run and replay.

    Each instance owns its state (no globals), so several configurations coexist in one process.
    ``max_cycles`` and ``max_work`` are the budgets of every run that does not pass its own
    (docs/simulator.md, "Budgets"); they bound the host time any program can take. ``threads`` splits each
    large GEMM instruction over that many host threads (default: ``default_threads()``); results, counters
    and cycles do not depend on it (docs/simulator.md, "Threads"). ``strict=True`` refuses, before it runs, any
    stream using what the config's hardware lacks (its capability set, ``cfg.CAPABILITIES``: e.g. ALU MUL or a
    padded ACC load on the Pynq's published bitstream), instead of simulating the whole ISA as fsim does, and,
    as it runs, a STORE of accumulator rows that a LOAD or a reset GEMM wrote after their last GEMM/ALU, where
    the capability set's STORE reads an output buffer that only GEMM and ALU write (docs/simulator.md, "The
    output buffer"): the board would store an older result there.

    Threads: a simulator may be shared; its methods are serialised (each call, and each ``replay`` as a whole,
    holds the simulator's lock while it runs), so concurrent calls wait for each other instead of mixing in C.
    A program's SRAM contents are the simulator's, as on the hardware: programs that rely on what an earlier run
    left in SRAM need one thread (or one simulator per thread). For parallel speed, give each thread its own.
    """

    def __init__(self, cfg: HwConfig | str | None = None, *, max_cycles: int = DEFAULT_MAX_CYCLES,
                 max_work: int = DEFAULT_MAX_WORK, threads: int | None = None, strict: bool = False):
        self.max_cycles = budget_value("max_cycles", max_cycles)
        self.max_work = budget_value("max_work", max_work)
        threads = default_threads() if threads is None else _threads_value("threads", threads)
        self.cfg = cfg if isinstance(cfg, HwConfig) else load_config(cfg)
        self.strict = bool(strict)
        self._lock = threading.RLock()   # serialised: one call into the C state at a time (RLock: replay nests)
        self._err = ffi.new("char[]", ERR_LEN)
        self._space = AddressSpace()
        handle = lib.vta_sim_create(_params(self.cfg), self._err, ERR_LEN)
        if handle == ffi.NULL:
            raise SimulatorError(ffi.string(self._err).decode())
        self._sim = ffi.gc(handle, lib.vta_sim_destroy)
        self.kernel_path = ffi.string(lib.vta_sim_kernel(handle)).decode()  # the GEMM kernel it runs
        self._set_threads(threads)
        # what STORE reads, as the config's hardware has it (hw_config/capabilities.py, ``out_buffer``)
        # (strict: a STORE of a row the board would store from an older result is refused, naming it)
        self._check(lib.vta_sim_set_out_buffer(handle, OUT_BUFFER_MODES.index(self.cfg.capabilities.out_buffer),
                                               int(self.strict), self._err, ERR_LEN))
        self._latency_cache: dict[tuple[bytes, int], float] = {}
        self._first_stream: tuple[np.ndarray, int, float] | None = None   # not yet keyed (_board_latency)

    @serialised
    def _set_threads(self, threads: int, min_macs: int = PARALLEL_MIN_MACS) -> None:
        """Set the GEMM threads, and the MAC count from which a GEMM is split (tests use 0: split every one)."""
        threads = _threads_value("threads", threads)
        self._check(lib.vta_sim_set_threads(self._sim, threads, min_macs, self._err, ERR_LEN))
        self.threads = threads

    @serialised
    def set_profile(self, on: bool = True) -> None:
        """Count the host time of every later run by class (``profile``), from zero; off by default (it reads a
        clock around each instruction). It never changes a result, counter or cycle."""
        lib.vta_sim_set_profile(self._sim, int(bool(on)))

    @serialised
    def profile(self) -> dict[str, float]:
        """Host seconds the runs since ``set_profile(True)`` spent, by class: ``load`` / ``store`` (executing LOADs
        and STOREs), ``gemm``, ``alu``, ``weight_layout`` (the GEMM kernels' layouts of weight tiles, built at a LOAD
        or at a GEMM's first read of a tile) and ``run`` (whole ``run`` calls in C: the rest of it is decoding,
        checks and the timing model)."""
        ns = ffi.new("uint64_t[6]")
        lib.vta_sim_profile(self._sim, ns)
        return {name: ns[i] * 1e-9 for i, name in enumerate(PROFILE_CLASSES)}

    @serialised
    def _weight_layout(self, tile: int) -> set[str]:
        """For tests: the GEMM layouts of weight tile ``tile`` that are up to date ("own": the kernel path's;
        "quads": the unsigned-input kernels', with "sum2" / "sum4" where their int16 sums of two / four quads are
        exact on the tile; "raw stale": SRAM bytes not yet written from it)."""
        bits = lib.vta_sim_tile_layout(self._sim, tile)
        if bits < 0:
            raise SimulatorError(f"weight tile {tile} is past the weight SRAM ({self.cfg.WGT_BUFF_DEPTH} tiles)")
        return {name for bit, name in ((1, "own"), (2, "quads"), (4, "sum2"), (8, "raw stale"), (16, "sum4"))
                if bits & bit}

    def _check(self, rc: int, index: int | None = None) -> None:
        if rc:
            raise ERROR_CLASSES.get(rc, SimulatorError)(ffi.string(self._err).decode(), index)

    # ---- DRAM ----
    @serialised
    def alloc(self, nbytes: int) -> int:
        """Map a zeroed, page-aligned region; returns its physical byte address."""
        addr = self._space.place(nbytes)
        try:
            self._check(lib.vta_sim_map(self._sim, addr, self._space.size_of(addr), self._err, ERR_LEN))
        except SimulatorError:
            self._space.release(addr)
            raise
        return addr

    @serialised
    def map(self, addr: int, data: int | bytes | np.ndarray) -> None:
        """Map a region at an exact physical address: zeroed if ``data`` is a size, else holding ``data``."""
        payload = None if isinstance(data, (int, np.integer)) else _as_bytes(data)
        size = int(data) if payload is None else payload.size
        self._space.reserve(int(addr), size)
        rc = lib.vta_sim_map(self._sim, addr, size, self._err, ERR_LEN)
        if rc:
            self._space.release(int(addr))
            self._check(rc)
        if payload is not None:
            self.write(addr, payload)

    @serialised
    def free(self, addr: int) -> None:
        self._space.release(addr)
        self._check(lib.vta_sim_unmap(self._sim, addr, self._err, ERR_LEN))

    @serialised
    def regions(self) -> list[tuple[int, int]]:
        return self._space.regions()

    @serialised
    def write(self, addr: int, data: bytes | np.ndarray) -> None:
        """Copy ``data`` (bytes-like, or a numpy array's bytes) into DRAM at ``addr``, inside one mapped region."""
        buf = _as_bytes(data)
        self._space.locate(addr, buf.size)   # inside one mapped region (MemoryAccessError otherwise)
        self._check(lib.vta_sim_write(self._sim, int(addr), ffi.from_buffer(buf), buf.size, self._err, ERR_LEN))

    @serialised
    def read(self, addr: int, nbytes: int) -> np.ndarray:
        """``nbytes`` bytes of DRAM at ``addr`` (inside one mapped region) as a new uint8 array."""
        self._space.locate(addr, nbytes)     # checked before the buffer is allocated
        out = np.empty(int(nbytes), dtype=np.uint8)
        self._check(lib.vta_sim_read(self._sim, int(addr), ffi.from_buffer(out), int(nbytes), self._err, ERR_LEN))
        return out

    # ---- SRAM (for tests and debugging) ----
    def _sram_range(self, mem: str, index: int, count: int) -> None:
        for name, v in (("index", index), ("count", count)):
            if not isinstance(v, (int, np.integer)) or v < 0 or v >= 1 << 32:
                raise SimulatorError(f"SRAM {mem}: {name}={v!r} must be an integer in [0, 2^32)")

    def _sram_shape(self, mem: str) -> tuple[np.dtype, tuple[int, ...]]:
        c = self.cfg
        shapes = {"uop": (np.uint32, ()), "inp": (np.int8, (c.BATCH, c.BLOCK_IN)),
                  "wgt": (np.int8, (c.BLOCK_OUT, c.BLOCK_IN)), "acc": (np.int32, (c.BATCH, c.BLOCK_OUT)),
                  "out": (np.int8, (c.BATCH, c.BLOCK_OUT))}
        if mem not in shapes:
            raise SimulatorError(f"unknown SRAM {mem!r}; allowed: {', '.join(shapes)}")
        return shapes[mem]

    @serialised
    def read_sram(self, mem: str, index: int, count: int) -> np.ndarray:
        dtype, shape = self._sram_shape(mem)
        self._sram_range(mem, index, count)
        out = np.zeros((count, *shape), dtype=dtype)
        self._check(lib.vta_sim_sram(self._sim, SRAM_IDS[mem], index, count, ffi.from_buffer(out), 0,
                                     self._err, ERR_LEN))
        return out

    @serialised
    def write_sram(self, mem: str, index: int, data: np.ndarray) -> None:
        dtype, shape = self._sram_shape(mem)
        arr = np.ascontiguousarray(np.asarray(data, dtype=dtype).reshape(-1, *shape))
        self._sram_range(mem, index, arr.shape[0])
        self._check(lib.vta_sim_sram(self._sim, SRAM_IDS[mem], index, arr.shape[0], ffi.from_buffer(arr), 1,
                                     self._err, ERR_LEN))

    @serialised
    def reset(self) -> None:
        """Zero every SRAM (they otherwise persist across runs, as on the hardware)."""
        lib.vta_sim_reset(self._sim)

    # ---- execution ----
    @serialised
    def run(self, insns: bytes | np.ndarray, *, compute: bool = True, trace: bool = False,
            max_cycles: int | None = None, max_work: int | None = None) -> RunStats:
        """Run an instruction stream (N x 16 bytes, ending with FINISH); returns counters and timing.

        ``compute=False`` skips data work (timing and counters only). ``max_cycles`` (simulated cycles)
        and ``max_work`` (host work units, ``stats.work``) default to the simulator's; an instruction that
        would pass either is refused before it executes (``CycleBudgetExceeded``, ``WorkBudgetExceeded``),
        so that no program can hang the host.
        """
        if not isinstance(compute, (bool, np.bool_)) or not isinstance(trace, (bool, np.bool_)):
            raise TypeError(f"compute={compute!r}, trace={trace!r}: each True or False")
        max_cycles = self.max_cycles if max_cycles is None else budget_value("max_cycles", max_cycles)
        max_work = self.max_work if max_work is None else budget_value("max_work", max_work)
        raw = _as_insn_bytes(insns)
        count = raw.size // 16
        if count >= 1 << 32:
            raise SimulatorError(f"{count} instructions: at most 2^32 - 1 per run")
        if self.strict:
            refuse_unsupported(raw, self.cfg)
        st = ffi.new("vta_stats_t *")
        events = ffi.new("vta_trace_event_t[]", count) if trace and count else ffi.NULL
        rc = lib.vta_sim_run(self._sim, ffi.from_buffer(raw), count, int(compute), max_cycles, max_work, st,
                             events, self._err, ERR_LEN)
        if rc:
            self._check(rc, None if st.error_index < 0 else int(st.error_index))
        stats = run_stats(ffi.unpack(ffi.cast("uint64_t *", st), STATS_WORDS), self.cfg.CLOCK_MHZ)
        stats.latency_s = self._board_latency(raw, stats.cycles)
        if trace:
            stats.trace = [(MODULES[events[i].module], events[i].start, events[i].end) for i in range(count)]
        return stats

    @serialised
    def batch(self, steps: list[BatchStep]) -> StreamBatch:
        """``steps`` prepared to run one after another in one call into C (``StreamBatch.run``): what a network's
        accelerator groups take instead of a ``write`` and a ``run`` each (simulator/batch.py)."""
        from simulator.batch import StreamBatch

        return StreamBatch(self, steps)

    def _stream_latency(self, key: bytes, raw: np.ndarray, cycles: int) -> float:
        """``_board_latency`` on a config with a board model, for a stream whose key (``stream_key``) the caller
        computed once."""
        seconds = self._latency_cache.get((key, cycles))
        if seconds is None:
            seconds = board_latency(self.cfg, raw, cycles).total_s
            if len(self._latency_cache) >= LATENCY_CACHE_STREAMS:
                del self._latency_cache[next(iter(self._latency_cache))]
            self._latency_cache[(key, cycles)] = seconds
        return seconds

    def _board_latency(self, raw: np.ndarray, cycles: int) -> float:
        """The board model's seconds for a stream: a function of the stream alone (timing does not depend on
        data), so a stream run again (a network's layers, every inference) reuses it; bounded, oldest out. A
        simulator's first stream is keyed (hashed) only when a second one runs: a tuning trial runs one stream on
        a fresh simulator and never pays for the hash."""
        if not self.cfg.board_model:   # cycles at the clock: nothing to cache
            return board_latency(self.cfg, raw, cycles).total_s
        if self._first_stream is not None:
            first, first_cycles, seconds = self._first_stream
            self._first_stream = None
            self._latency_cache[(stream_key(first), first_cycles)] = seconds
        elif not self._latency_cache:
            seconds = board_latency(self.cfg, raw, cycles).total_s
            self._first_stream = (raw.copy(), cycles, seconds)
            return seconds
        return self._stream_latency(stream_key(raw), raw, cycles)

    @serialised
    def replay(self, image: ProgramImage | str, **run_options) -> ReplayResult:
        """Run a program image in this simulator (whose config must match the image's).

        Only the image's segments and instruction area are mapped during the run, so any access
        outside them is an error; they are unmapped afterwards, even on failure.
        """
        from simulator.replay import replay_into

        return replay_into(self, image, **run_options)
