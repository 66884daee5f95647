"""``vta calibrate``: fit a config's board latency model (LATENCY_KEYS) to measurements from a real board.

Measurements are JSON lines in either of two formats:

- **layer records** as in ``examples/pynq_conv2d_measured.jsonl``: ``{"data": [N/B, C/BI, H, W, B, BI], "kernel": [O/BO,
  I/BI, KH, KW, BO, BI], "strides": [sh, sw], "pad": [top, left, bottom, right], "cfg": {knobs}, "ms": time}``,
  VTA's ``conv2d_packed`` tuning task (conv2d, then right shift by 8 and clip to [0, 127], int8 out);
- **tuning records** (``tuning/records.py``) written by a run whose runner measured on the board:
  ``result.latency_s`` is the measured time, the workload key and ``config`` say what ran (with the
  epilogue ``tuning.task.Task`` compiles for it).

Every record is compiled with this stack's template for the config (a schedule the template rejects is
refused, naming the record and the reason) and timed by the simulator; the fit then moves the board
parameters to make ``simulator.latency`` predict the measured times: Levenberg-Marquardt on log(predicted /
measured) with a soft-L1 loss (records off by much more than 10% weigh linearly, so one bad record cannot
drag the rest), exact derivatives (the accelerator term's critical path), a weak prior toward typical values
for the terms the records cannot tell apart, and no randomness: the same records give the same config.
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hw_config import LATENCY_KEYS, HwConfig, load_config
from hw_config.checks import is_whole
from hw_config.config import LATENCY_RANGES
from hw_config.reading import bounded_lines, no_json_constant, regular_file
from hw_config.writing import write_atomic
from simulator.files import check_output_path
from simulator.latency import HOST_KEYS, HOST_UNIT_S, BoardProgram, accel_extra, beat_extra
from vta.cli import arg, command, float_in
from vta.runtime import ScheduleError
from vta.templates import TEMPLATES, compile_op

# Typical values of a Zynq-7000 board (650 MHz Cortex-A9, VTA at 100 MHz on a 64-bit HP port): where the fit
# starts, and the centre of the weak prior that settles what the records cannot tell apart.
TYPICAL = {"LAUNCH_US": 50.0, "HOST_INSN_NS": 500.0, "HOST_UOP_NS": 10.0, "CACHE_NS_PER_BYTE": 0.5,
           "DMA_EFFICIENCY": 0.8, "DMA_ROW_CYCLES": 20.0, "COMPUTE_LOOP_CYCLES": 10.0}
PRIOR_WEIGHT = 0.05     # a parameter a factor e from typical costs as much as a 5% miss on one record
LOSS_SCALE = 0.1        # soft-L1 scale on log(pred / meas): quadratic within ~10%, linear beyond
SHARED_EPILOGUE = (("shr", 8), ("clip", 0, 127))   # VTA's conv2d_packed tuning task
MAX_LINE_BYTES = 1 << 16
MAX_RECORDS = 100_000
MEASURED_RANGE_S = (1e-6, 3600.0)   # a board call takes microseconds to seconds: outside this, not a measurement
PRIOR_WEIGHT_RANGE = (0.0, 1000.0)  # at 1000 the prior pins every parameter to typical; beyond, it overflows


class MeasurementError(ValueError):
    """A measurements file that cannot be read, naming the line and what is wrong."""


@dataclass
class Measurement:
    """One measured call: what ran (op, workload, epilogue, schedule) and its wall time on the board."""

    line: int
    op: str
    workload: dict[str, Any]
    epilogue: tuple[tuple, ...]
    config: dict[str, Any]
    seconds: float
    untagged: bool = False   # a tuning record that does not say where its time comes from (an older log)

    @property
    def label(self) -> str:
        w = self.workload
        text = f"{self.op} {'x'.join(map(str, w['data_shape']))}"
        if "kernel_shape" in w:
            text += f" k{'x'.join(map(str, w['kernel_shape']))}"
        if "strides" in w:
            text += f" s{w['strides'][0]}"
        if "padding" in w:
            text += f" p{w['padding'][0]}"
        return text


@dataclass
class Case:
    """A measurement compiled for the config: its streams, ready for the board model."""

    measurement: Measurement
    streams: list[BoardProgram]
    cycles: int = 0


@dataclass
class FitResult:
    params: dict[str, float]            # every LATENCY_KEYS value (fitted ones changed)
    fitted: tuple[str, ...]
    iterations: int
    cost: float
    history: list[float] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------------------
# reading

def _int_list(value: Any, n: int, what: str, lo: int = 0) -> list[int]:
    ok = isinstance(value, list) and len(value) == n and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= lo for v in value)
    if not ok:
        raise ValueError(f"{what} must be a list of {n} integers >= {lo}, got {json.dumps(value)[:80]}")
    return value


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a positive number, got {json.dumps(value)[:40]}")
    return float(value)


def _from_layer_record(obj: dict, line: int, cfg: HwConfig) -> Measurement:
    """The shared layer format (packed shapes, VTA's knobs, milliseconds)."""
    missing = [k for k in ("data", "kernel", "strides", "pad", "cfg", "ms") if k not in obj]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)} (a layer record has data, kernel, strides, pad, "
                         "cfg, ms)")
    data = _int_list(obj["data"], 6, "data", 1)
    kernel = _int_list(obj["kernel"], 6, "kernel", 1)
    strides = _int_list(obj["strides"], 2, "strides", 1)
    pad = _int_list(obj["pad"], 4, "pad", 0)
    if not isinstance(obj["cfg"], dict):
        raise ValueError("cfg must be a JSON object of knob values")  # noqa: TRY004 - a bad line is a ValueError
    seconds = _positive(obj["ms"], "ms") * 1e-3
    if (data[4], data[5], kernel[4], kernel[5]) != (cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT, cfg.BLOCK_IN):
        raise ValueError(f"packed for a {data[4]}x{data[5]}x{kernel[4]} core (data [..., {data[4]}, {data[5]}], "
                         f"kernel [..., {kernel[4]}, {kernel[5]}]) but the config {cfg.model} is "
                         f"{cfg.BATCH}x{cfg.BLOCK_IN}x{cfg.BLOCK_OUT}: give --config the design that was measured")
    if kernel[1] != data[1]:
        raise ValueError(f"kernel has {kernel[1]} input channel blocks, data has {data[1]}")
    if (pad[0], pad[1]) != (pad[2], pad[3]):
        raise ValueError(f"pad {pad} is not symmetric; the conv2d template pads top=bottom and left=right")
    workload = {"data_shape": (data[0] * data[4], data[1] * data[5], data[2], data[3]),
                "kernel_shape": (kernel[0] * kernel[4], kernel[1] * kernel[5], kernel[2], kernel[3]),
                "strides": tuple(strides), "padding": (pad[0], pad[1])}
    return Measurement(line, "conv2d", workload, SHARED_EPILOGUE, dict(obj["cfg"]), seconds)


def record_program(workload: dict[str, Any]) -> tuple[str, dict[str, Any], tuple[tuple, ...]]:
    """(op, compile_op workload arguments, epilogue) of a tuning record's workload, as ``tuning.task.Task``
    compiles it: the template's own ``task_program``."""
    op = workload.get("op")
    if not isinstance(op, str) or op not in TEMPLATES:
        raise ValueError(f"workload op {op!r} is not a template's; allowed: {', '.join(TEMPLATES)}")
    if "data_shape" not in workload:
        raise ValueError("workload has no data_shape")
    args, epilogue = TEMPLATES[op].task_program(workload)
    return op, args, epilogue


def _from_tuning_record(obj: dict, line: int, cfg: HwConfig) -> Measurement | str:
    """A tuning record: the Measurement, or why it is no board measurement (a string)."""
    for name in ("workload", "config", "result"):
        if name not in obj:
            raise ValueError(f"missing field {name!r} (a tuning record has workload, op, config, result, hw, ...)")
    result, config = obj["result"], obj["config"]
    if not isinstance(result, dict) or not isinstance(config, dict) or not isinstance(obj["workload"], str):
        raise ValueError("workload must be a string, config and result JSON objects")  # noqa: TRY004 - bad line
    try:
        workload = json.loads(obj["workload"])
    except (ValueError, RecursionError):
        raise ValueError("workload is not a JSON workload key") from None
    if not isinstance(workload, dict):
        raise ValueError("workload is not a JSON object")  # noqa: TRY004 - a bad line is a ValueError
    if result.get("error") is not None:
        return f"a failed measurement ({str(result['error'])[:80]})"
    device = result.get("device")
    if device is not None and not isinstance(device, str):
        raise ValueError("result device must be a string")
    if (device or "").lower() in ("sim", "simulator"):
        return SIMULATED_WHY
    seconds = _positive(result.get("latency_s"), "result latency_s")
    cycles = result.get("cycles")
    if isinstance(cycles, int) and cycles > 0 and math.isclose(seconds, cycles / (cfg.CLOCK_MHZ * 1e6),
                                                                rel_tol=1e-9):
        return "its latency_s is its simulated cycles at the clock: a simulator measurement, not a board's"
    op, args, epilogue = record_program(workload)
    return Measurement(line, op, {**args, **({k: workload[k] for k in ("bias", "residual") if k in workload})},
                       epilogue, dict(config), seconds, untagged=not device)


SIMULATED_WHY = "measured on the simulator (result.device sim): the board model's prediction, not a board's time"
PREDICTED_REL_TOL = 1e-6   # a time this close to the config's own prediction was predicted, not measured


def set_aside_predicted(cases: Sequence[Case], cfg: HwConfig) -> tuple[list[Case], list[tuple[int, str, str]]]:
    """Tuning records of older logs (no ``result.device``) whose time is exactly what ``cfg``'s board model
    predicts for their program: a simulator's run under that model, not a board's measurement. Returns the
    other cases and the set-aside lines."""
    cfg = _config(cfg)
    predicted = predict(cases, cfg)
    keep, aside = [], []
    for case, p in zip(cases, predicted, strict=True):
        m = case.measurement
        if m.untagged and math.isclose(m.seconds, float(p), rel_tol=PREDICTED_REL_TOL):
            why = (f"its latency_s is what the board model of {cfg.model} predicts for its program: a simulator "
                   "measurement, not a board's")
            aside.append((m.line, "tuning record", why))
        else:
            keep.append(case)
    return keep, aside


def _config(cfg: Any, name: str = "cfg") -> HwConfig:
    """``cfg`` as an HwConfig: one as is, a preset name or a config file's path loaded (``load_config``), anything
    else a TypeError naming the argument."""
    if isinstance(cfg, HwConfig):
        return cfg
    if isinstance(cfg, (str, os.PathLike)):
        return load_config(cfg)
    raise TypeError(f"{name}: an HwConfig, a preset name such as 'pynq' or a config file's path, "
                    f"not {type(cfg).__name__}")


def _check_params(params: Any) -> dict[str, float]:
    """Board parameters for ``predict``: LATENCY_KEYS to finite numbers in the config's ranges (LATENCY_RANGES;
    DMA_EFFICIENCY above 0), or ValueError / TypeError naming the key and what is allowed."""
    if not isinstance(params, dict):
        raise TypeError(f"params: a dict of board-model keys ({', '.join(LATENCY_KEYS)}) to numbers, "
                        f"not {type(params).__name__}")
    out = {}
    for k, v in params.items():
        if k not in LATENCY_RANGES:
            raise ValueError(f"params key {str(k)[:40]!r}: not a board-model key; allowed: {', '.join(LATENCY_KEYS)}")
        lo, hi, meaning = LATENCY_RANGES[k]
        allowed = f"a number {'in (0, 1]' if k == 'DMA_EFFICIENCY' else f'{lo:g}..{hi:g}'} ({meaning})"
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"params {k}={v!r}: {allowed}")
        if not lo <= v <= hi or (k == "DMA_EFFICIENCY" and not v > 0):   # (nan too)
            raise ValueError(f"params {k}={v!r}: {allowed}")
        out[k] = float(v)
    return out


def read_measurements(path: str | Path, cfg: HwConfig, *, max_line_bytes: int = MAX_LINE_BYTES,
                      max_records: int = MAX_RECORDS, seconds_range: tuple[float, float] = MEASURED_RANGE_S
                      ) -> tuple[list[Measurement], list[tuple[int, str, str]]]:
    """The measurements of a JSON-lines file, and the lines set aside (line, what, why): failed or simulated
    tuning records. A line that is not a valid record (one longer than ``max_line_bytes`` is refused after
    reading that much of it; a time outside ``seconds_range``, not a board's) raises MeasurementError naming it;
    so do more than ``max_records``. ``cfg``: an HwConfig, a preset name or a config file's path."""
    cfg = _config(cfg)
    path = Path(path)
    try:
        regular_file(path, "measurements")
    except (OSError, ValueError) as e:
        raise MeasurementError(str(e)) from None
    out: list[Measurement] = []
    skipped: list[tuple[int, str, str]] = []
    lo, hi = seconds_range
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, text in bounded_lines(f, max_line_bytes):
            if text is None:
                raise MeasurementError(f"{path}, line {number}: longer than {max_line_bytes:,} bytes; not a record")
            if not text.strip():
                continue
            if len(out) + len(skipped) >= max_records:
                raise MeasurementError(f"{path}: more than {max_records:,} records; split the file")
            try:
                try:
                    obj = json.loads(text, parse_constant=no_json_constant)
                except json.JSONDecodeError as e:
                    raise ValueError(f"not JSON ({e.msg})") from None
                if not isinstance(obj, dict):
                    raise ValueError("not a JSON object")  # noqa: TRY004 - a bad line is a ValueError here
                got = _from_tuning_record(obj, number, cfg) if "workload" in obj else \
                    _from_layer_record(obj, number, cfg)
                if isinstance(got, Measurement) and not lo <= got.seconds <= hi:
                    name, unit, scale = ("result latency_s", "s", 1.0) if "workload" in obj else ("ms", "ms", 1e3)
                    raise ValueError(f"{name} {got.seconds * scale:.6g} is not a board's time: a measured call "
                                     f"takes {lo * scale:g} to {hi * scale:g} {unit}")
            except RecursionError:
                raise MeasurementError(f"{path}, line {number}: nested too deeply to be a record") from None
            except ValueError as e:
                raise MeasurementError(f"{path}, line {number}: {e}") from None
            if isinstance(got, str):
                skipped.append((number, "tuning record", got))
            else:
                out.append(got)
    if not out and not skipped:
        raise MeasurementError(f"measurements {path}: no records (JSON lines, see docs/calibrate.md)")
    return out, skipped


def compile_cases(measurements: Sequence[Measurement], cfg: HwConfig
                  ) -> tuple[list[Case], list[tuple[Measurement, str]]]:
    """Each measurement compiled for ``cfg`` and run once on the simulator (timing only); the ones whose
    schedule or workload the template refuses come back separately with the reason. ``cfg``: an HwConfig, a
    preset name or a config file's path."""
    cfg = _config(cfg)
    cases, refused = [], []
    for m in measurements:
        try:
            op = compile_op(m.op, cfg, config=m.config, epilogue=m.epilogue,
                            **{k: v for k, v in m.workload.items() if k not in ("bias", "residual")})
        except ScheduleError as e:
            refused.append((m, f"the template rejects its schedule: {e}"))
            continue
        except ValueError as e:   # the workload itself (a shape past the limits, say)
            refused.append((m, f"the template refuses its workload: {e}"))
            continue
        # each stream run (it must run), its cycles the base of its board time; their sum is the 'before' figure
        runs = [s.run(op.device, op.program.uop_buffer, compute=False) for s in op.program.streams]
        cases.append(Case(m, [BoardProgram(cfg, s.insns, r.cycles) for s, r in zip(op.program.streams, runs)],
                          sum(r.cycles for r in runs)))
    return cases, refused


# ------------------------------------------------------------------------------------------------------------
# the model over many cases, and the fit

def predict(cases: Sequence[Case], cfg: HwConfig, params: dict[str, float] | None = None) -> np.ndarray:
    """Predicted seconds of each case with board parameters ``params`` (default: the config's; a dict of
    LATENCY_KEYS to numbers in the config's ranges, DMA_EFFICIENCY above 0, refused naming the key otherwise)."""
    cfg = _config(cfg)
    p = cfg.latency_params() if params is None else {**cfg.latency_params(), **_check_params(params)}
    return np.array([sum(s.latency(p).total_s for s in c.streams) for c in cases])


def _predict_with_gradient(cases: Sequence[Case], cfg: HwConfig, p: dict[str, float]
                           ) -> tuple[np.ndarray, np.ndarray]:
    """Seconds per case and d seconds / d (host keys as stored, then beat extra, row and loop cycles)."""
    extra = accel_extra(p)
    clock = cfg.CLOCK_MHZ * 1e6
    pred = np.zeros(len(cases))
    grad = np.zeros((len(cases), len(HOST_KEYS) + 3))
    for i, c in enumerate(cases):
        for s in c.streams:
            cycles, path = s.accel_cycles_and_path(extra)
            cycles += s.sharing_cycles   # the board's time starts from the simulator's (BoardProgram.board_cycles)
            counts = s.host_counts()
            host = np.array([HOST_UNIT_S[k] * counts[k] for k in HOST_KEYS])
            pred[i] += cycles / clock + sum(p[k] * h for k, h in zip(HOST_KEYS, host))
            grad[i, :len(HOST_KEYS)] += host
            grad[i, len(HOST_KEYS):] += path / clock
    return pred, grad


def _to_params(q: np.ndarray, keys: Sequence[str], base: dict[str, float]) -> dict[str, float]:
    """Fit variables (logs) -> parameters; DMA_EFFICIENCY goes through its extra cycles per beat."""
    p = dict(base)
    for k, v in zip(keys, q):
        x = math.exp(v)
        p[k] = 1.0 / (1.0 + x) if k == "DMA_EFFICIENCY" else x
    return p


def _to_vars(p: dict[str, float], keys: Sequence[str]) -> np.ndarray:
    return np.array([math.log(beat_extra(p[k])) if k == "DMA_EFFICIENCY" else math.log(p[k]) for k in keys])


_ACCEL_COLUMN = {"DMA_EFFICIENCY": 0, "DMA_ROW_CYCLES": 1, "COMPUTE_LOOP_CYCLES": 2}


def _jacobian_columns(grad: np.ndarray, p: dict[str, float], keys: Sequence[str]) -> np.ndarray:
    """d seconds / d fit variable, per case."""
    cols = []
    for k in keys:
        if k in HOST_KEYS:
            cols.append(grad[:, HOST_KEYS.index(k)] * p[k])
        else:
            value = beat_extra(p[k]) if k == "DMA_EFFICIENCY" else p[k]
            cols.append(grad[:, len(HOST_KEYS) + _ACCEL_COLUMN[k]] * value)
    return np.stack(cols, axis=1)


def _bounds(keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Log-space box: 1e-6 to 1e4 times typical, within the config's allowed ranges."""
    lo, hi = [], []
    for k in keys:
        centre = beat_extra(TYPICAL[k]) if k == "DMA_EFFICIENCY" else TYPICAL[k]
        top = centre * 1e4 if k == "DMA_EFFICIENCY" else min(centre * 1e4, LATENCY_RANGES[k][1])
        lo.append(math.log(centre * 1e-6))
        hi.append(math.log(top))
    return np.array(lo), np.array(hi)


def _not_real(v: Any) -> bool:
    return isinstance(v, bool) or not isinstance(v, numbers.Real)


def fit(cases: Sequence[Case], cfg: HwConfig, keys: Sequence[str] = LATENCY_KEYS, *,
        prior_weight: float = PRIOR_WEIGHT, loss_scale: float = LOSS_SCALE, max_iter: int = 200) -> FitResult:
    """Fit ``keys`` of the board model to the cases' measured seconds (the others keep ``cfg``'s values).
    ``cfg``: an HwConfig, a preset name or a config file's path; ``keys`` a non-empty sequence of LATENCY_KEYS;
    numpy numbers count as numbers."""
    cfg = _config(cfg)
    all_keys = ", ".join(LATENCY_KEYS)
    if isinstance(keys, (str, bytes)) or not isinstance(keys, (Sequence, set, frozenset)) or \
            not all(isinstance(k, str) for k in keys):
        raise TypeError(f"keys={keys!r}: a sequence of board-model keys ({all_keys}), e.g. ('DMA_EFFICIENCY',)")
    keys = tuple(keys)
    if not keys:
        raise ValueError(f"keys=(): give at least one board-model key to fit ({all_keys})")
    lo, hi = PRIOR_WEIGHT_RANGE
    if _not_real(prior_weight) or not lo <= prior_weight <= hi:
        raise ValueError(f"prior_weight={prior_weight!r}: a number {lo:g}..{hi:g}")
    if _not_real(loss_scale) or not 1e-6 <= loss_scale <= 1e3:
        raise ValueError(f"loss_scale={loss_scale!r}: a number 1e-06..1000 (log units)")
    if not is_whole(max_iter) or max_iter < 1:
        raise ValueError(f"max_iter={max_iter!r}: an integer >= 1")
    prior_weight, loss_scale, max_iter = float(prior_weight), float(loss_scale), int(max_iter)
    unknown = [k for k in keys if k not in LATENCY_KEYS]
    if unknown:
        raise ValueError(f"cannot fit {', '.join(unknown)}; the board model's keys are {', '.join(LATENCY_KEYS)}")
    if not cases:
        raise ValueError("no measurements to fit")
    measured = np.array([c.measurement.seconds for c in cases])
    base = cfg.latency_params()
    q0 = _to_vars(TYPICAL, keys)       # the prior's centre, and the start
    lo, hi = _bounds(keys)
    c2 = loss_scale ** 2

    def evaluate(q: np.ndarray, with_jacobian: bool):
        p = _to_params(q, keys, base)
        if with_jacobian:
            pred, grad = _predict_with_gradient(cases, cfg, p)
        else:
            pred = predict(cases, cfg, p)
            grad = None
        r = np.log(pred) - np.log(measured)
        cost = float(np.sum(c2 * (np.sqrt(1.0 + r * r / c2) - 1.0)) + 0.5 * np.sum((prior_weight * (q - q0)) ** 2))
        return r, pred, grad, p, cost

    q = q0.copy()
    r, pred, grad, p, cost = evaluate(q, True)
    mu, history, it = 1e-3, [cost], 0
    for it in range(1, max_iter + 1):
        jac = _jacobian_columns(grad, p, keys) / pred[:, None]     # d r / d q
        w = np.sqrt(1.0 / np.sqrt(1.0 + r * r / c2))               # IRLS weights of the soft-L1 loss
        a = np.vstack([w[:, None] * jac, prior_weight * np.eye(len(keys))])
        b = np.concatenate([w * r, prior_weight * (q - q0)])
        h, g = a.T @ a, a.T @ b
        improved = False
        for _ in range(30):
            step = np.linalg.solve(h + mu * np.diag(np.maximum(np.diag(h), 1e-12)), -g)
            q_new = np.clip(q + step, lo, hi)
            cost_new = evaluate(q_new, False)[4]
            if cost_new < cost:
                improved = True
                break
            mu *= 10.0
        if not improved:
            break
        done = cost - cost_new <= 1e-12 * max(cost, 1e-300) or np.max(np.abs(q_new - q)) < 1e-7
        q = q_new
        r, pred, grad, p, cost = evaluate(q, True)
        history.append(cost)
        mu = max(mu * 0.3, 1e-12)
        if done:
            break
    return FitResult(_rounded(_to_params(q, keys, base), keys), keys, it, cost, history)


def _rounded(p: dict[str, float], keys: Sequence[str]) -> dict[str, float]:
    """Fitted values to 4 significant digits; a term under a millionth of its typical value is 0."""
    out = dict(p)
    for k in keys:
        v = p[k]
        if k == "DMA_EFFICIENCY":
            out[k] = 1.0 if beat_extra(v) < 1e-6 * beat_extra(TYPICAL[k]) else float(f"{v:.4g}")
        else:
            out[k] = 0.0 if v < 1e-6 * TYPICAL[k] * 1.0001 else float(f"{v:.4g}")
    return out


# ------------------------------------------------------------------------------------------------------------
# figures of merit

def rankdata(a: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties sharing their mean rank."""
    a = np.asarray(a, dtype=np.float64)
    order = np.argsort(a, kind="stable")
    ranks = np.empty(len(a))
    ranks[order] = np.arange(1, len(a) + 1)
    for v in np.unique(a):
        tie = a == v
        if tie.sum() > 1:
            ranks[tie] = ranks[tie].mean()
    return ranks


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (nan for fewer than two points or a constant side)."""
    if len(a) < 2:
        return float("nan")
    ra, rb = rankdata(a), rankdata(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum() / den) if den else float("nan")


def agreement(pred: np.ndarray, measured: np.ndarray) -> tuple[float, float]:
    """(median |log(pred / meas)|, Spearman of pred and meas)."""
    return float(np.median(np.abs(np.log(pred / measured)))), spearman(pred, measured)


def leave_one_out(cases: Sequence[Case], cfg: HwConfig, keys: Sequence[str] = LATENCY_KEYS,
                  **options: Any) -> np.ndarray:
    """Held-out predictions: case i predicted by the model fitted to all the others."""
    cfg = _config(cfg)
    out = np.zeros(len(cases))
    for i in range(len(cases)):
        rest = [c for j, c in enumerate(cases) if j != i]
        params = fit(rest, cfg, keys, **options).params
        out[i] = predict([cases[i]], cfg, params)[0]
    return out


# ------------------------------------------------------------------------------------------------------------
# report and plot

def format_report(cases: Sequence[Case], before: np.ndarray, after: np.ndarray, cfg: HwConfig,
                  result: FitResult) -> str:
    measured = np.array([c.measurement.seconds for c in cases])
    lines = [f"{'parameter':22} {'before':>12} {'after':>12}   meaning"]
    for k in LATENCY_KEYS:
        mark = "" if k in result.fitted else "  (kept)"
        lines.append(f"  {k:20} {getattr(cfg, k):12.5g} {result.params[k]:12.5g}   "
                     f"{LATENCY_RANGES[k][2]}{mark}")
    (mb, sb), (ma, sa) = agreement(before, measured), agreement(after, measured)
    header = (f"{'line':>5}  {'workload':44} {'meas ms':>9} {'before ms':>10} {'after ms':>9} {'after/meas':>10} "
              f"{'host %':>6}")
    lines += ["", f"{'':10} {'median |log(pred/meas)|':>24} {'Spearman':>9}",
              f"  {'before':8} {mb:24.3f} {sb:9.3f}", f"  {'after':8} {ma:24.3f} {sa:9.3f}", "", header]
    p = {**cfg.latency_params(), **result.params}
    for c, b, a in zip(cases, before, after):
        host = sum(t.total_s - t.accel_s for t in (s.latency(p) for s in c.streams))
        lines.append(f"{c.measurement.line:5d}  {c.measurement.label[:44]:44} {c.measurement.seconds * 1e3:9.3f} "
                     f"{b * 1e3:10.3f} {a * 1e3:9.3f} {a / c.measurement.seconds:10.2f} {100 * host / a:6.1f}")
    return "\n".join(lines)


def _pyplot():
    """matplotlib's pyplot on the Agg backend: the one import point of the optional [plot] extra."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("--plot needs matplotlib: pip install 'vta-stack[plot]' (or pip install matplotlib)") \
            from None
    return plt


def write_plot(path: str | Path, measured: np.ndarray, series: dict[str, np.ndarray], title: str) -> None:
    """Predicted vs measured, log-log, one marker per series, the identity and a +-25% band."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 6))
    ms = measured * 1e3
    everything = np.concatenate([ms, *[v * 1e3 for v in series.values()]])
    lo, hi = everything.min() / 1.5, everything.max() * 1.5
    line = np.array([lo, hi])
    ax.plot(line, line, color="black", linewidth=1)
    ax.fill_between(line, line / 1.25, line * 1.25, color="0.9")
    for (name, pred), marker in zip(series.items(), ("x", "o", "s", "^")):
        m, s = agreement(pred, measured)
        ax.scatter(ms, pred * 1e3, marker=marker, label=f"{name}: median |log| {m:.3f}, Spearman {s:.3f}")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured ms", ylabel="predicted ms",
           title=title)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    target = Path(path)
    write_atomic(target, lambda f: fig.savefig(f, format="png", dpi=120))
    plt.close(fig)


# ------------------------------------------------------------------------------------------------------------
# the command

def _by_reason(skipped: Sequence[tuple[int, str, str]]) -> dict[str, list[int]]:
    """The set-aside lines grouped by why, in order of first line."""
    out: dict[str, list[int]] = {}
    for line, _, reason in sorted(skipped):
        out.setdefault(reason, []).append(line)
    return out


def _set_aside_summary(skipped: Sequence[tuple[int, str, str]]) -> str:
    return f"all {len(skipped)} record(s) are set aside (" + "; ".join(
        f"{len(lines)}: {reason}" for reason, lines in _by_reason(skipped).items()) + ")"


def _fit_keys(text: str) -> tuple[str, ...]:
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in keys if k not in LATENCY_KEYS]
    if unknown or not keys:
        raise argparse.ArgumentTypeError(f"unknown key(s) {', '.join(unknown) or '(none given)'}; the board model's "
                                         f"keys are {', '.join(LATENCY_KEYS)}")
    return keys


@command(None, "calibrate", "fit a config's board latency model to measurements from a board", args=[
    arg("measurements", metavar="MEASUREMENTS.jsonl",
        help="measured calls: layer records (as in examples/pynq_conv2d_measured.jsonl) or tuning records from "
             "a board"),
    arg("--config", default="pynq", metavar="NAME|PATH", help="the design that was measured (default: pynq)"),
    arg("--out", metavar="FILE.json", help="write the calibrated config here (loads like any preset)"),
    arg("--fit", type=_fit_keys, default=LATENCY_KEYS, metavar="KEY,KEY",
        help=f"the keys to fit (default: all of {', '.join(LATENCY_KEYS)}); the others keep --config's values"),
    arg("--prior-weight", type=float_in(*PRIOR_WEIGHT_RANGE, "a prior weight"), default=PRIOR_WEIGHT, metavar="W",
        help=f"weight of the pull toward typical values per parameter, {PRIOR_WEIGHT_RANGE[0]:g}.."
             f"{PRIOR_WEIGHT_RANGE[1]:g} (default {PRIOR_WEIGHT})"),
    arg("--strict", action="store_true", help="fail (status 2) when any record is refused or set aside"),
    arg("--plot", metavar="FILE.png", help="also draw predicted vs measured (needs the [plot] extra: matplotlib)"),
])
def calibrate_cmd(args: argparse.Namespace) -> int:
    """Fit the board latency model (LATENCY_KEYS: launch, host per instruction and micro-op, cache per byte,
    DMA efficiency, DMA row and compute loop cycles) of --config to measured calls, print the fit before and
    after (median |log(pred/meas)|, Spearman, per record) and write the calibrated config. See docs/calibrate.md."""
    for path, what in ((args.out, "--out"), (args.plot, "--plot")):
        if path is not None:
            check_output_path(path, what)
    cfg = load_config(args.config)
    if args.plot is not None:
        _pyplot()   # a missing extra is reported before the work
    measurements, skipped = read_measurements(args.measurements, cfg)
    cases, refused = compile_cases(measurements, cfg)
    cases, predicted = set_aside_predicted(cases, cfg)
    skipped = sorted(skipped + predicted)
    total = len(measurements) + len(skipped) - len(predicted)
    if not cases and not refused:
        raise ValueError(f"{args.measurements}: no board measurement to fit: {_set_aside_summary(skipped)}; "
                         "calibrate fits times measured on a board: layer records (as examples/pynq_conv2d_measured"
                         ".jsonl) or the tuning records of a run on boards (vta tune --rpc)")
    print(f"calibrating the board model of {cfg.model} on {len(cases)} of {total} record(s) from {args.measurements}")
    for m, reason in refused:
        print(f"  refused line {m.line} ({m.label}): {reason}")
    for reason, lines in _by_reason(skipped).items():
        shown = ", ".join(map(str, lines[:5])) + (f" and {len(lines) - 5} more" if len(lines) > 5 else "")
        print(f"  set aside {'line' if len(lines) == 1 else f'{len(lines)} lines:'} {shown} (tuning record"
              f"{'s' if len(lines) > 1 else ''}): {reason}")
    if args.strict and (refused or skipped):
        raise ValueError(f"{len(refused) + len(skipped)} record(s) refused or set aside (--strict)")
    if len(cases) < 2:
        raise ValueError(f"{len(cases)} usable record(s): the fit needs at least 2")
    if len(cases) < len(args.fit):
        print(f"  note: {len(cases)} records for {len(args.fit)} parameters: the prior settles the rest",
              file=sys.stderr)
    before = predict(cases, cfg)
    result = fit(cases, cfg, args.fit, prior_weight=args.prior_weight)
    after = predict(cases, cfg, result.params)
    print(format_report(cases, before, after, cfg, result))
    # a recalibrated config says what its board model is calibrated on now, not every time it was
    before = re.sub(r"(^|; )board model calibrated on \d+ records of [^;]*$", "", cfg.DESCRIPTION)
    said = f"board model calibrated on {len(cases)} records of {Path(args.measurements).name}"
    # fitted on this design's programs: the model applies to this design only (HwConfig.board_model)
    calibrated = cfg.replace(**result.params, CALIBRATED_FOR=cfg.design_fingerprint,
                             DESCRIPTION=f"{before}; {said}" if before else said)
    if args.out is not None:
        text = calibrated.to_json() + "\n"
        write_atomic(args.out, lambda f: f.write(text.encode()))
        if load_config(args.out) != calibrated:   # what was written loads back as what was fitted
            raise ValueError(f"--out {args.out}: the written config does not load back identically")
        print(f"wrote {args.out} (fingerprint {calibrated.fingerprint}; use it as --config {args.out})")
    if args.plot is not None:
        measured = np.array([c.measurement.seconds for c in cases])
        write_plot(args.plot, measured, {"before": before, "after": after}, f"board model of {cfg.model}")
        print(f"wrote {args.plot}")
    return 0
