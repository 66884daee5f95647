"""The board latency model: the wall time one call of a program takes on a real board.

The simulator's cycles are the accelerator's own (docs/simulator.md). A call on a board costs more, and this
module adds it, term by term, from the instruction stream and the config's LATENCY_KEYS (docs/calibrate.md):

- **launch** ``LAUNCH_US`` per stream: VTA's runtime writes the fetch module's registers, sleeps, polls the
  compute module's done register (VTADeviceRun, vta-notes section 8) and returns.
- **host** ``HOST_INSN_NS`` per instruction and ``HOST_UOP_NS`` per micro-op: VTA's runtime builds every
  call's instruction stream on the board's CPU and copies the micro-op kernels into the micro-op DMA buffer
  (their SRAM residency is reset at every Synchronize, so each call loads them again; vta-notes section 4).
- **cache** ``CACHE_NS_PER_BYTE`` per byte of the instruction stream and of the DRAM footprint the stream
  loads and stores: the flush before the accelerator reads, the invalidate after it writes.
- **accelerator**: the simulator's schedule (same modules, queues, tokens and dispatch) re-timed with board
  durations: each DMA costs ``1/DMA_EFFICIENCY - 1`` more cycles per bus beat (the AXI port's sustained rate)
  and ``DMA_ROW_CYCLES`` more per row (a new DRAM row and burst address for every row of a 2D transfer), each
  GEMM/ALU ``COMPUTE_LOOP_CYCLES`` more per loop iteration ``iter_out x iter_in`` (VTA's compute module
  pipelines only the micro-op loop, so every outer iteration fills and drains it).

The host, cache and launch terms are serial with the accelerator (VTA builds the whole stream, then launches
it and waits), so they add. With every key at its neutral value the model is the simulator itself:
``latency_s == cycles / clock`` exactly.

The re-timer times each transfer alone on the bus (the schedule of ``ReferenceSimulator(cfg, shared_bus=False)``;
tests check it), which the simulator's shared DRAM bus never beats: where transfers overlap, the simulator's
cycles (the count the RTL is held to) exceed the re-timed length at no extra (docs/calibrate.md gives a case). So
the board's accelerator time is the simulator's cycles plus what the board's durations add to the re-timed
schedule, ``cycles + accel_cycles(extra) - accel_cycles()``: the simulator's cycles at no extra, and never below
them (re-timing alone put a board slower than the neutral model below it, by the bus sharing).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from hw_config import HwConfig
from hw_config.config import LATENCY_KEYS, LATENCY_NEUTRAL
from hw_config.isa_rules import INSN_BYTES, MODULES, module_indices

__all__ = ["ACCEL_KEYS", "HOST_KEYS", "BoardProgram", "LatencyBreakdown", "accel_extra", "beat_extra", "board_latency"]

HOST_KEYS = ("LAUNCH_US", "HOST_INSN_NS", "HOST_UOP_NS", "CACHE_NS_PER_BYTE")   # additive, per stream
ACCEL_KEYS = ("DMA_EFFICIENCY", "DMA_ROW_CYCLES", "COMPUTE_LOOP_CYCLES")      # re-time the schedule
HOST_UNIT_S = {"LAUNCH_US": 1e-6, "HOST_INSN_NS": 1e-9, "HOST_UOP_NS": 1e-9, "CACHE_NS_PER_BYTE": 1e-9}


@dataclass(frozen=True)
class LatencyBreakdown:
    """One call's predicted wall time on the board, in seconds, by term."""

    launch_s: float = 0.0
    host_s: float = 0.0
    cache_s: float = 0.0
    accel_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.launch_s + self.host_s + self.cache_s + self.accel_s

    def __add__(self, other: LatencyBreakdown) -> LatencyBreakdown:
        return LatencyBreakdown(self.launch_s + other.launch_s, self.host_s + other.host_s,
                                self.cache_s + other.cache_s, self.accel_s + other.accel_s)


def beat_extra(efficiency: float) -> float:
    """Extra cycles per bus beat at a DMA efficiency (0 at the port's peak)."""
    return 1.0 / efficiency - 1.0


class BoardProgram:
    """One instruction stream, decoded once for the board model: what the host terms count, and the
    simulator's schedule as a dependency graph that ``accel_cycles`` re-times for any board durations.

    The stream must be one the simulator ran to completion (every pop has its push); ``cycles``, the simulator's
    count for it (its shared DRAM bus included), is the base the board's extra durations add to (``board_cycles``);
    without it the base is the re-timed schedule, each transfer alone on the bus.
    """

    def __init__(self, cfg: HwConfig, insns: np.ndarray, cycles: int | None = None):
        from simulator.core import _params, ffi, lib  # the C library, loaded with the simulator

        rows = np.ascontiguousarray(insns, dtype=np.uint8).reshape(-1, INSN_BYTES)
        self.cfg = cfg
        self.cycles = cycles
        n = self.n = rows.shape[0]
        # durations (the simulator's, docs/simulator.md "Timing model"), features, host counts and the schedule's
        # dependencies (the equations of docs/simulator.md), read from the stream in C (vta_board_program;
        # tests/test_latency_model.py holds the same definition in numpy)
        self.duration = np.empty(n, dtype=np.float64)
        self.features = np.empty((n, 3), dtype=np.float64)   # bus beats and rows of a DMA, loop iterations
        refs = np.empty((6, n), dtype=np.int64)
        first, end = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        dma = np.empty(n, dtype=np.uint8)
        words = ffi.new("uint64_t *")
        err = ffi.new("char[]", 256)
        elem = np.ascontiguousarray(cfg.elem_bytes_by_type, dtype=np.int64)
        status = lib.vta_board_program(
            _params(cfg), ffi.from_buffer(rows), n, ffi.from_buffer("int64_t[]", elem),
            ffi.from_buffer("double[]", self.duration),
            ffi.from_buffer("double[]", self.features), *(ffi.from_buffer("int64_t[]", r) for r in refs),
            ffi.from_buffer("int64_t[]", first), ffi.from_buffer("int64_t[]", end), ffi.from_buffer("uint8_t[]", dma),
            words, err, 256)
        if status:
            raise ValueError(ffi.string(err).decode())
        self.uop_words = int(words[0])
        self._rows = rows   # for _event_order
        footprint = ffi.new("int64_t *")
        if lib.vta_dma_footprint(n, ffi.from_buffer("int64_t[]", first), ffi.from_buffer("int64_t[]", end),
                                 ffi.from_buffer("uint8_t[]", dma), footprint):
            raise MemoryError(f"the board model's DMA footprint of {n} instructions: out of host memory")
        self.cache_bytes = INSN_BYTES * n + int(footprint[0])   # the stream and the union of the bytes it moves
        # as the C re-timer takes them: the order, then prev, room, pop_a, pop_b, space_a, space_b (a and b: the
        # prev and the next flag's queue)
        self._refs = [np.arange(n, dtype=np.int64), *refs]
        self._in_order = bool((refs[2:6] < self._refs[0]).all())   # every pop's push, every freeing pop earlier
        if not self._in_order:   # an order found by running the modules
            self._refs[0] = np.asarray(self._event_order(), dtype=np.int64)

    def _lists(self) -> tuple[list[int], ...]:
        """prev, room, pop_a, pop_b, space_a, space_b as Python lists, for the walks done in Python."""
        if not hasattr(self, "_as_lists"):
            self._as_lists = tuple(a.tolist() for a in self._refs[1:])
        return self._as_lists

    def _event_order(self) -> list[int]:
        """An order in which every instruction comes after those its start depends on (found once, by
        running the modules as the simulator does; it serves every duration)."""
        n = self.n
        prev, room, pop_a, pop_b, space_a, space_b = self._lists()
        seq: list[list[int]] = [[] for _ in MODULES]
        fmt = self.cfg.insn_formats["mem"].decode_rows(self._rows, ("opcode", "memory_type"))
        for i, m in enumerate(module_indices(fmt["opcode"], fmt["memory_type"]).tolist()):
            seq[m].append(i)
        done = [False] * n
        order: list[int] = []
        head = [0] * len(MODULES)
        dispatched = 0
        while len(order) < n:
            while dispatched < n and (room[dispatched] < 0 or done[room[dispatched]]):
                dispatched += 1
            progress = False
            for m in range(len(MODULES)):
                while head[m] < len(seq[m]):
                    i = seq[m][head[m]]
                    needs = (prev[i], pop_a[i], pop_b[i], space_a[i], space_b[i])
                    if i >= dispatched or any(j >= 0 and not done[j] for j in needs):
                        break
                    done[i] = True
                    order.append(i)
                    head[m] += 1
                    progress = True
            if not progress:
                raise ValueError("the stream deadlocks: the board model needs a stream the simulator runs to "
                                 "completion")
        return order

    # ---- re-timing ----
    def _times(self, extra: tuple[float, float, float]) -> np.ndarray:
        """Start, end and dispatch times (rows 0-2) of every instruction with durations + features @ extra.

        In program order, d(i) = max(d(i-1), start of the instruction freeing i's queue slot) + fetch; start(i)
        = max(d(i), end of the module's previous instruction, end of the pushes it pops, start of the pops that
        free room for its pushes); end(i) = start(i) + duration(i) (C: vta_board_times)."""
        from simulator.core import ffi, lib  # the C library, loaded with the simulator

        duration = self.duration + self.features @ np.asarray(extra, dtype=np.float64) if any(extra) \
            else self.duration
        duration = np.ascontiguousarray(duration, dtype=np.float64)
        n = self.n
        times = np.empty((3, n), dtype=np.float64)
        ptr = [ffi.from_buffer("int64_t[]", a) for a in self._refs]
        out = [ffi.from_buffer("double[]", times[k]) for k in range(3)]
        fetch = float(-(-INSN_BYTES // self.cfg.BUS_BYTES))
        status = lib.vta_board_times(n, *ptr, ffi.from_buffer("double[]", duration), fetch,
                                     float(self.cfg.DRAM_LATENCY), *out)
        if status:
            raise ValueError("the board model's dependency references are out of range")
        return times

    def accel_cycles(self, extra: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> float:
        """The schedule's length in cycles with ``extra`` = (cycles per beat, per DMA row, per loop iteration)
        added to the simulator's durations; ``accel_cycles()`` is the simulator's schedule with each transfer
        alone on the bus."""
        return float(self._times(extra)[1].max()) if self.n else 0.0

    @functools.cached_property
    def sharing_cycles(self) -> float:
        """The simulator's cycles beyond the re-timed schedule at no extra: what sharing the DRAM bus among
        overlapping transfers cost the stream (0 without ``cycles``). Refused below 0: the shared bus never beats
        every transfer alone, so such a count is not this stream's."""
        if self.cycles is None:
            return 0.0
        solo = self.accel_cycles()
        if self.cycles < solo:
            raise ValueError(f"cycles={self.cycles}: fewer than this stream takes with every transfer alone on the "
                             f"bus ({solo:g}); give the simulator's cycle count for this stream")
        return float(self.cycles) - solo

    def board_cycles(self, extra: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> float:
        """The accelerator's cycles on the board: the simulator's (``cycles``) plus what the board's ``extra``
        durations add to the re-timed schedule (``accel_cycles(extra) - accel_cycles()``)."""
        if self.cycles is not None and not any(extra):
            return float(self.cycles)
        return self.accel_cycles(extra) + self.sharing_cycles

    def accel_cycles_and_path(self, extra: tuple[float, float, float]) -> tuple[float, np.ndarray]:
        """``accel_cycles(extra)`` and the beats, rows and loop iterations on its critical path: the
        derivative of the length with respect to ``extra`` (the length is piecewise linear in it)."""
        start, end, disp = self._times(extra).tolist()
        if not end:
            return 0.0, np.zeros(3)
        i = max(range(self.n), key=end.__getitem__)
        length = end[i]
        on_path: list[int] = []
        prev, room, pop_a, pop_b, space_a, space_b = self._lists()
        node, k = "end", i
        while True:
            if node == "end":
                on_path.append(k)
                node = "start"
                continue
            if node == "start":
                s = start[k]
                nxt = None
                for j in (prev[k], pop_a[k], pop_b[k]):
                    if j >= 0 and end[j] == s:
                        nxt = ("end", j)
                        break
                if nxt is None:
                    for j in (space_a[k], space_b[k]):
                        if j >= 0 and start[j] == s:
                            nxt = ("start", j)
                            break
                node, k = nxt if nxt is not None else ("dispatch", k)
                continue
            # dispatch of k: from the room-freeing start, the previous dispatch, or the first fetch
            r = room[k]
            before = disp[k - 1] if k > 0 else float(self.cfg.DRAM_LATENCY)
            if r >= 0 and start[r] >= before:
                node, k = "start", r
            elif k > 0:
                k -= 1
            else:
                break
        path = self.features[on_path].sum(axis=0) if on_path else np.zeros(3)
        return length, path

    # ---- the whole model ----
    def host_counts(self) -> dict[str, float]:
        """What each host key is multiplied by for this stream (one launch)."""
        return {"LAUNCH_US": 1.0, "HOST_INSN_NS": float(self.n), "HOST_UOP_NS": float(self.uop_words),
                "CACHE_NS_PER_BYTE": float(self.cache_bytes)}

    def latency(self, params: dict[str, float] | HwConfig | None = None) -> LatencyBreakdown:
        """Predicted seconds of one call of this stream with the board parameters ``params`` (default: the
        config's own)."""
        p = _params(params if params is not None else self.cfg)
        extra = accel_extra(p)
        cycles = self.board_cycles(extra)
        counts = self.host_counts()
        return LatencyBreakdown(
            launch_s=p["LAUNCH_US"] * HOST_UNIT_S["LAUNCH_US"],
            host_s=(p["HOST_INSN_NS"] * counts["HOST_INSN_NS"] + p["HOST_UOP_NS"] * counts["HOST_UOP_NS"]) * 1e-9,
            cache_s=p["CACHE_NS_PER_BYTE"] * counts["CACHE_NS_PER_BYTE"] * 1e-9,
            accel_s=cycles / (self.cfg.CLOCK_MHZ * 1e6))


def _params(source: dict[str, float] | HwConfig) -> dict[str, float]:
    if isinstance(source, HwConfig):
        return source.latency_params()
    return {k: float(source.get(k, LATENCY_NEUTRAL[k])) for k in LATENCY_KEYS}


def accel_extra(params: dict[str, float]) -> tuple[float, float, float]:
    """(cycles per beat, per DMA row, per loop iteration) the board adds to the simulator's durations."""
    return (beat_extra(params["DMA_EFFICIENCY"]), params["DMA_ROW_CYCLES"], params["COMPUTE_LOOP_CYCLES"])


def board_latency(cfg: HwConfig, insns: np.ndarray, cycles: int) -> LatencyBreakdown:
    """Predicted wall time of one call of a stream the simulator ran in ``cycles`` (its count: the base of the
    accelerator's time; without a board model, the whole of it at the clock)."""
    clock = cfg.CLOCK_MHZ * 1e6
    if not cfg.board_model:
        return LatencyBreakdown(accel_s=cycles / clock)
    return BoardProgram(cfg, insns, cycles).latency(cfg)
