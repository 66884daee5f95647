"""Export a traced run as Chrome/Perfetto trace JSON (open in ui.perfetto.dev or chrome://tracing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from hw_config import HwConfig
from hw_config.layout import MEM_TYPES, OPCODES
from simulator.files import write_atomic
from simulator.stats import MODULES, RunStats

_OP_NAMES = {v: k for k, v in OPCODES.items()}
_MEM_NAMES = {v: k for k, v in MEM_TYPES.items()}


def _label(raw: np.ndarray, cfg: HwConfig) -> str:
    fields = cfg.insn_formats["mem"].decode(int.from_bytes(raw.tobytes(), "little"))
    op = _OP_NAMES.get(fields["opcode"], "?")
    if op in ("LOAD", "STORE"):
        nop = " NOP" if fields["x_size"] == 0 else ""
        return f"{op} {_MEM_NAMES.get(fields['memory_type'], '?')}{nop}"
    return op


def chrome_trace(stats: RunStats, insns: np.ndarray, cfg: HwConfig) -> dict[str, Any]:
    """One complete event per instruction on its module's track; times in microseconds at the clock."""
    if stats.trace is None:
        raise ValueError("the run was not traced: run with trace=True")
    us_per_cycle = 1.0 / cfg.CLOCK_MHZ
    rows = np.asarray(insns, dtype=np.uint8).reshape(-1, 16)
    events: list[dict[str, Any]] = [
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": m}} for i, m in enumerate(MODULES)]
    events.append({"name": "process_name", "ph": "M", "pid": 0, "args": {"name": f"VTA {cfg.model}"}})
    for index, (module, start, end) in enumerate(stats.trace):
        events.append({"name": _label(rows[index], cfg), "cat": module, "ph": "X", "pid": 0,
                       "tid": MODULES.index(module), "ts": start * us_per_cycle, "dur": (end - start) * us_per_cycle,
                       "args": {"index": index, "start_cycle": start, "end_cycle": end}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"model": cfg.model, "clock_mhz": cfg.CLOCK_MHZ, "cycles": stats.cycles}}


def write_json_atomic(path: str | Path, payload: Any) -> None:
    """Write JSON atomically (no half-written file is ever left)."""
    write_atomic(path, lambda f: f.write(json.dumps(payload).encode()))
