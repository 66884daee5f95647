"""Streams run one after another in one call into C: a network's accelerator groups without a Python round trip
per group (issue 44, "bookkeeping in C").

``Simulator.batch(steps)`` prepares the steps once (their instructions and micro-op words stay where they are, each
stream's key for the board model's cache is computed once, strict mode checks the streams once); ``run()`` then
copies and runs them all through ``vta_sim_run_batch`` and returns one ``RunStats`` per stream, the same as a
``write`` and a ``run`` per step would give. A step's copy may be left open (``copy_data=None`` with a nonzero
``copy_bytes``): ``set_copy`` gives its bytes before each run, or skips it (a value already in place).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from simulator.core import (
    ERR_LEN,
    STATS_WORDS,
    _as_bytes,
    _as_insn_bytes,
    ffi,
    lib,
    refuse_unsupported,
    run_stats,
    stream_key,
)
from simulator.errors import SimulatorError
from simulator.latency import board_latency
from simulator.stats import RunStats

if TYPE_CHECKING:
    from simulator.core import Simulator

__all__ = ["BatchStep", "StreamBatch"]


@dataclass(frozen=True)
class BatchStep:
    """One item of a batch: ``copy_data`` (bytes-like or a numpy array's bytes) copied into DRAM at ``copy_addr``,
    then the stream ``insns`` (N x 16 bytes; None: a copy only). ``copy_data=None`` with ``copy_bytes`` > 0 is a
    copy given at each run (``StreamBatch.set_copy``), of at most ``copy_bytes`` bytes."""

    insns: np.ndarray | bytes | None = None
    copy_addr: int = 0
    copy_data: np.ndarray | bytes | None = None
    copy_bytes: int = 0


class StreamBatch:
    """Steps prepared to run in one call (``Simulator.batch``). Holds references to their arrays, so that the
    pointers C reads stay valid; a batch is its simulator's and, like it, one caller's at a time."""

    def __init__(self, sim: Simulator, steps: list[BatchStep]):
        self.sim = sim
        n = len(steps)
        self._items = ffi.new("vta_batch_item_t[]", max(n, 1))
        self._stats = ffi.new("vta_stats_t[]", max(n, 1))
        self._failed = ffi.new("uint32_t *")
        self._keep: list[object] = []          # the arrays the items point into
        self._open: dict[int, int] = {}        # item -> the most bytes set_copy may give it
        self._streams: list[tuple[int, np.ndarray, bytes]] = []   # (item, stream, board-model key) per stream
        for i, step in enumerate(steps):
            item = self._items[i]
            if step.copy_data is not None:
                data = _as_bytes(step.copy_data)
                self._keep.append(data)
                item.copy_addr, item.copy_src, item.copy_bytes = int(step.copy_addr), ffi.from_buffer(data), data.size
            elif step.copy_bytes:
                item.copy_addr = int(step.copy_addr)
                self._open[i] = int(step.copy_bytes)
            if step.insns is not None:
                raw = _as_insn_bytes(step.insns)
                count = raw.size // 16
                if not 1 <= count < 1 << 32:
                    raise SimulatorError(f"batch step {i}: {count} instructions (1 to 2^32 - 1 per stream)")
                if sim.strict:
                    refuse_unsupported(raw, sim.cfg, f"batch step {i}, ")
                self._keep.append(raw)
                item.insns, item.count = ffi.from_buffer(raw), count
                self._streams.append((i, raw, stream_key(raw)))
        self._n = n
        self._words = np.frombuffer(ffi.buffer(self._stats), dtype=np.uint64).reshape(-1, STATS_WORDS)
        self._given: dict[int, object] = {}
        self._clock = sim.cfg.CLOCK_MHZ
        self._board_model = sim.cfg.board_model

    @property
    def streams(self) -> int:
        """How many of the steps run a stream (``run`` returns one RunStats each)."""
        return len(self._streams)

    def set_copy(self, item: int, data: np.ndarray | None) -> None:
        """The bytes open step ``item`` copies at the next runs (None: no copy)."""
        if item not in self._open:
            raise SimulatorError(f"batch step {item} has no open copy (steps with one: {sorted(self._open)})")
        it = self._items[item]
        if data is None:
            it.copy_bytes = 0
            self._given.pop(item, None)
            return
        raw = _as_bytes(data)
        if raw.size > self._open[item]:
            raise SimulatorError(f"batch step {item}: a copy of {raw.size} bytes, at most {self._open[item]}")
        self._given[item] = raw
        it.copy_src, it.copy_bytes = ffi.from_buffer(raw), raw.size

    def run(self, *, compute: bool = True) -> list[RunStats]:
        """Every step in order in one call; the RunStats of each stream. A failing step raises the error its
        ``write`` or ``run`` would (the steps before it have run)."""
        sim = self.sim
        with sim._lock:
            rc = lib.vta_sim_run_batch(sim._sim, self._items, self._n, int(bool(compute)), sim.max_cycles,
                                       sim.max_work, self._stats, self._failed, sim._err, ERR_LEN)
            if rc:
                failed = self._failed[0]
                index = int(self._stats[failed].error_index) if failed < self._n else -1
                sim._check(rc, None if index < 0 else index)
            words = self._words.tolist()
            out = []
            for item, raw, key in self._streams:
                stats = run_stats(words[item], self._clock)
                cycles = stats.cycles
                if self._board_model:
                    stats.latency_s = sim._stream_latency(key, raw, cycles)
                else:
                    stats.latency_s = board_latency(sim.cfg, raw, cycles).total_s
                out.append(stats)
            return out
