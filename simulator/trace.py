"""Export a traced run as Chrome/Perfetto trace JSON (open in ui.perfetto.dev or chrome://tracing).

A trace has one event per instruction (~170 bytes of JSON each), so its size is known before the run:
``check_trace_events`` refuses a stream longer than ``max_events`` (default ``DEFAULT_MAX_TRACE_EVENTS``,
``vta sim replay --max-trace-events``) before anything is simulated, rather than writing a truncated
trace. ``write_chrome_trace`` streams the JSON to disk (atomically) instead of building it in memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from hw_config import HwConfig
from hw_config.isa_rules import MEM_TYPE_NAMES, OPCODE_NAMES
from hw_config.writing import write_atomic
from simulator.stats import MODULES, RunStats

DEFAULT_MAX_TRACE_EVENTS = 1 << 18  # instruction events (~45 MB of JSON); --max-trace-events
_WRITE_BATCH = 8192


class TraceLimitError(ValueError):
    """A trace would have more events than allowed (checked before the run)."""


def check_trace_events(count: int, max_events: int = DEFAULT_MAX_TRACE_EVENTS, where: str = "trace") -> None:
    """Refuse a trace of ``count`` instruction events when it exceeds ``max_events``."""
    if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < 1:
        raise ValueError(f"max_trace_events={max_events!r}: need a positive integer")
    if count > max_events:
        raise TraceLimitError(f"{where}: a trace has one event per instruction and the stream has {count:,} "
                              f"instructions; at most {max_events:,} trace events (--max-trace-events)")


def _column(words: np.ndarray, offset: int, width: int) -> np.ndarray:
    """Field ``[offset, offset + width)`` of every 128-bit instruction (``words``: uint64 (N, 2))."""
    word, shift = divmod(offset, 64)
    col = words[:, word] >> np.uint64(shift)
    if shift + width > 64:
        col |= words[:, word + 1] << np.uint64(64 - shift)
    return col & np.uint64((1 << width) - 1)


def _labels(rows: np.ndarray, cfg: HwConfig) -> tuple[list[str], np.ndarray]:
    """Each instruction's label as (distinct labels, index into them per row), computed column-wise."""
    fmt = cfg.insn_formats["mem"]
    op_f, mem_f, x_f = (fmt.field(n) for n in ("opcode", "memory_type", "x_size"))
    words = np.ascontiguousarray(rows).view("<u8").reshape(-1, 2)
    nop = (_column(words, x_f.offset, x_f.width) == 0).astype(np.uint64)
    codes = (_column(words, op_f.offset, op_f.width)
             | _column(words, mem_f.offset, mem_f.width) << np.uint64(op_f.width)
             | nop << np.uint64(op_f.width + mem_f.width))
    distinct, inverse = np.unique(codes, return_inverse=True)
    labels = []
    for code in distinct.tolist():
        opcode, mem, nop = code & op_f.mask, (code >> op_f.width) & mem_f.mask, code >> (op_f.width + mem_f.width)
        op = OPCODE_NAMES.get(opcode, "?")
        if op in ("LOAD", "STORE"):
            labels.append(f"{op} {MEM_TYPE_NAMES.get(mem, '?')}{' NOP' if nop else ''}")
        else:
            labels.append(op)
    return labels, inverse.reshape(-1)


def _instruction_events(stats: RunStats, insns: np.ndarray, cfg: HwConfig,
                        max_events: int) -> Iterator[tuple[int, str, str, int, int, int]]:
    """(index, label, module, tid, start, end) per instruction; the trace and its size are checked first."""
    if stats.trace is None:
        raise ValueError("the run was not traced: run with trace=True")
    check_trace_events(len(stats.trace), max_events)
    rows = np.asarray(insns, dtype=np.uint8).reshape(-1, 16)
    if len(rows) != len(stats.trace):
        raise ValueError(f"the trace has {len(stats.trace)} events but the stream {len(rows)} instructions")
    labels, which = _labels(rows, cfg)
    tids = {m: i for i, m in enumerate(MODULES)}
    return ((index, labels[label], module, tids[module], start, end)
            for index, ((module, start, end), label) in enumerate(zip(stats.trace, which.tolist(), strict=True)))


def _metadata(cfg: HwConfig) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": m}} for i, m in enumerate(MODULES)]
    events.append({"name": "process_name", "ph": "M", "pid": 0, "args": {"name": f"VTA {cfg.model}"}})
    return events


def _other(stats: RunStats, cfg: HwConfig) -> dict[str, Any]:
    return {"displayTimeUnit": "ns", "otherData": {"model": cfg.model, "clock_mhz": cfg.CLOCK_MHZ,
                                                   "cycles": stats.cycles}}


def chrome_trace(stats: RunStats, insns: np.ndarray, cfg: HwConfig,
                 max_events: int = DEFAULT_MAX_TRACE_EVENTS) -> dict[str, Any]:
    """One complete event per instruction on its module's track; times in microseconds at the clock.

    Built in memory (about 1 KB per event): for long runs use ``write_chrome_trace``.
    """
    us_per_cycle = 1.0 / cfg.CLOCK_MHZ
    events = _metadata(cfg)
    for index, label, module, tid, start, end in _instruction_events(stats, insns, cfg, max_events):
        events.append({"name": label, "cat": module, "ph": "X", "pid": 0,
                       "tid": tid, "ts": start * us_per_cycle, "dur": (end - start) * us_per_cycle,
                       "args": {"index": index, "start_cycle": start, "end_cycle": end}})
    return {"traceEvents": events, **_other(stats, cfg)}


def _stream(f: IO[bytes], stats: RunStats, insns: np.ndarray, cfg: HwConfig, max_events: int) -> None:
    """The bytes of ``json.dumps(chrome_trace(...))``, written in batches of events."""
    us_per_cycle = 1.0 / cfg.CLOCK_MHZ
    events = _instruction_events(stats, insns, cfg, max_events)  # checks before anything is written
    head = json.dumps({"traceEvents": _metadata(cfg)})
    f.write(head[:-2].encode())  # without the closing "]}"
    quoted: dict[str, str] = {}
    batch: list[str] = []
    for index, label, module, tid, start, end in events:
        name = quoted.get(label) or quoted.setdefault(label, json.dumps(label))
        batch.append(f', {{"name": {name}, "cat": "{module}", "ph": "X", "pid": 0, "tid": {tid}, '
                     f'"ts": {start * us_per_cycle!r}, "dur": {(end - start) * us_per_cycle!r}, '
                     f'"args": {{"index": {index}, "start_cycle": {start}, "end_cycle": {end}}}}}')
        if len(batch) >= _WRITE_BATCH:
            f.write("".join(batch).encode())
            batch.clear()
    f.write("".join(batch).encode())
    f.write(("], " + json.dumps(_other(stats, cfg))[1:]).encode())


def write_chrome_trace(path: str | Path, stats: RunStats, insns: np.ndarray, cfg: HwConfig,
                       max_events: int = DEFAULT_MAX_TRACE_EVENTS) -> None:
    """Write ``chrome_trace(stats, insns, cfg)`` as JSON to ``path``, streamed and atomically (same bytes as
    ``json.dumps`` of the dict, without holding it in memory)."""
    if stats.trace is None:
        raise ValueError("the run was not traced: run with trace=True")
    check_trace_events(len(stats.trace), max_events, f"trace {path}")
    write_atomic(path, lambda f: _stream(f, stats, insns, cfg, max_events))


def write_json_atomic(path: str | Path, payload: Any) -> None:
    """Write JSON atomically (no half-written file is ever left); NaN / Infinity are refused (not JSON)."""
    text = json.dumps(payload, allow_nan=False)    # before the file: a refused payload leaves nothing behind
    write_atomic(path, lambda f: f.write(text.encode()))
