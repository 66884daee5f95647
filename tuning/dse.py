"""Co-design search (``vta dse``): hardware configs and their schedules together, and the Pareto front of a
network's latency against what each config costs on an FPGA part.

For every point of a space (config keys -> values, over a base config) the search

1. builds the config (``hw_config`` refuses what VTA's ISA cannot encode: the point is recorded as invalid);
2. estimates its resources on the part with the analytic model (``hardware.fpga``, milliseconds; a point that
   does not fit is recorded and not tuned);
3. tunes each accelerator task of the network: the template's analytic estimate ranks the task's whole space
   (about a millisecond for thousands of configs), and the ``trials`` best-ranked configs, with the template's
   default, are measured exactly on the simulator (timing only);
4. builds the network with the best schedules and runs it timing-only: the accelerator's cycles (the shared-bus
   timing model) at the config's clock, plus the host part measured on this CPU (the fastest of three runs).

Records are JSON lines, one per point, appended and flushed as each point ends, so a search killed at any moment
resumes where it stopped (a torn last line is ignored). Points run in worker processes (``parallel``) or on a Dask
cluster (``dask``), the same integration as tuning's ``DaskRunner``; a lost worker's points run again.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from hw_config import ConfigError, HwConfig, describe_overrides, load_config
from hw_config.checks import is_whole
from hw_config.reading import bounded_lines, no_json_constant, read_bounded, regular_file
from simulator.files import write_lock
from tuning.measure import completed_in

# Axes a search may vary: integer config keys (the rest of a config is the base's).
AXES = ("LOG_BATCH", "LOG_BLOCK", "LOG_UOP_BUFF_SIZE", "LOG_INP_BUFF_SIZE", "LOG_WGT_BUFF_SIZE",
        "LOG_ACC_BUFF_SIZE", "LOG_BUS_WIDTH", "CLOCK_MHZ", "INSN_QUEUE_DEPTH", "TOKEN_QUEUE_DEPTH")
# The default space: 216 points around VTA's Pynq config, 140 of which VTA's ISA can encode; on an xc7z020 the 70
# with the 64-bit bus fit (the 128-bit ones are wider than its ACP port), on UltraScale+ parts all 140.
DEFAULT_SPACE: dict[str, list[int]] = {
    "LOG_BLOCK": [3, 4], "LOG_BUS_WIDTH": [6, 7], "LOG_UOP_BUFF_SIZE": [13, 15], "LOG_INP_BUFF_SIZE": [13, 14, 15],
    "LOG_WGT_BUFF_SIZE": [16, 17, 18], "LOG_ACC_BUFF_SIZE": [15, 16, 17]}
DEFAULT_TRIALS = 8          # measured configs per task beyond the default schedule
DEFAULT_MAX_POINTS = 5000   # a space larger than this is refused before any work (--max-points)
MAX_SPACE_BYTES = 1 << 20   # a space file is a few hundred bytes (read_space(max_bytes=))
MAX_RECORD_BYTES = 1 << 20  # a record is a few KB (a row per task); a longer line is not one (read_records)
HOST_REPEATS = 3            # timing-only runs of a config's network; its host part is the fastest one's
RESOURCES = ("lut", "ff", "bram36", "dsp")
RECORDS, CSV, FRONT, REPORT = "records.jsonl", "results.csv", "front.json", "report.html"   # in --out


@dataclass(frozen=True)
class Search:
    """What one search is: the network, the base config, the part and the tuning budget. Its ``key`` is in
    every record, so a directory's records of another search are never mixed in."""

    network: str
    base: str = "pynq"
    part: str = "xc7z020"
    trials: int = DEFAULT_TRIALS
    image_size: int | None = None
    seed: int = 0
    start: str | None = None   # the offload region's ops (vta run's --start / --stop); both None: the regions
    stop: str | None = None    # found automatically (vta run's default); one None: the model's own pack point
    timing: bool = False       # measure each config's logic delay (Yosys sta, minutes per config) before tuning it

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, allowed: str) -> None:
            if not ok:
                raise ValueError(f"Search {name}={getattr(self, name)!r}: {allowed}")

        for name in ("network", "base"):   # a path as a string: the key hashes it, the records store it
            if isinstance(getattr(self, name), os.PathLike):
                object.__setattr__(self, name, os.fspath(getattr(self, name)))
        need(isinstance(self.network, str) and bool(self.network), "network", "a zoo model name or an .onnx file")
        need(isinstance(self.base, str) and bool(self.base), "base", "a preset name or a config file's path")
        need(isinstance(self.part, str), "part", "an FPGA part's name, e.g. xc7z020")
        from hardware.fpga import get_part
        get_part(self.part)   # an unknown part: ValueError naming the known ones
        need(is_whole(self.trials) and self.trials >= 1, "trials", "an integer >= 1 (configs measured per task)")
        need(self.image_size is None or (is_whole(self.image_size) and 8 <= self.image_size <= 4096), "image_size",
             "None (the model's own) or an integer 8..4096")
        need(is_whole(self.seed) and self.seed >= 0, "seed", "an integer >= 0")
        need(isinstance(self.timing, bool), "timing", "True or False (measure each config's timing)")
        for name in ("start", "stop"):
            need(getattr(self, name) is None or (isinstance(getattr(self, name), str) and bool(getattr(self, name))),
                 name, "None (the model's default) or an op name or node name")
        for name in ("trials", "image_size", "seed"):   # a numpy integer as a plain one: the key and records are JSON
            if getattr(self, name) is not None:
                object.__setattr__(self, name, int(getattr(self, name)))
        _check_network(self.network)

    @cached_property
    def key(self) -> str:
        """The hash of the search's fields, the base config's content (its fingerprint: every key, wherever the
        config comes from) and an ONNX model file's content: a record made before any of them changed is another
        search's, never resumed."""
        ident: dict[str, Any] = {**asdict(self), "base_fingerprint": load_config(self.base).fingerprint}
        for name in ("start", "stop"):   # named pack points as the keys of the searches made before these fields
            if ident[name] is None:
                del ident[name]
        if self.start is None and self.stop is None:
            # the regions found automatically, no longer the model's pack points (DCGAN and ONNX files get other
            # groups): the records of a search made before are another search's
            ident["regions"] = "automatic"
        if not ident["timing"]:          # likewise a search without timing: the key it had before the field
            del ident["timing"]
        model = Path(self.network)
        if model.is_file():   # as load_model tells a file from a zoo name
            ident["model_sha256"] = _file_sha256(model)
            ident["external_data_sha256"] = {name: _file_sha256(model.parent / name)
                                             for name in _external_data_files(model)}
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _external_data_files(model: Path) -> list[str]:
    """The external data files an ONNX model's tensors name, those that exist beside it (in its directory):
    their content is the model's too. None for a file that does not parse (loading it fails later, saying why)."""
    try:
        import onnx

        from graph_pack.frontend_onnx import _all_tensors
        proto = onnx.load(str(model), load_external_data=False)
    except Exception:   # noqa: BLE001 - not an ONNX model (or no onnx package): the search's load says so
        return []
    names = {e.value for t in _all_tensors(proto.graph) if t.data_location == onnx.TensorProto.EXTERNAL
             for e in t.external_data if e.key == "location"}
    base = model.parent.resolve()
    return sorted(n for n in names if (base / n).resolve().is_relative_to(base) and (base / n).is_file())


def read_space(path: str | os.PathLike | None, max_points: int = DEFAULT_MAX_POINTS,
               max_bytes: int = MAX_SPACE_BYTES) -> dict[str, list[int]]:
    """The space of a JSON file ``{"KEY": [values...], ...}`` (default: DEFAULT_SPACE), checked by
    ``check_space``; a file of more than ``max_bytes`` is refused before it is read."""
    if path is None:
        return check_space(DEFAULT_SPACE, max_points)
    try:
        data = read_bounded(path, max_bytes, f"--space {path}",
                            f"a space file is at most {max_bytes:,} bytes (a space is a few hundred)")
        space = json.loads(data.decode())
    except FileNotFoundError:
        raise FileNotFoundError(f"--space {path}: no such file") from None
    except (OSError, ValueError, RecursionError) as e:   # ValueError: a size, UTF-8 or JSON error
        why = str(e) if str(e).startswith(f"--space {path}:") else \
            f"--space {path}: not a JSON object of config keys to value lists ({e or type(e).__name__})"
        raise ValueError(why) from None
    return check_space(space, max_points)


def check_space(space: Any, max_points: int = DEFAULT_MAX_POINTS) -> dict[str, list[int]]:
    """``space`` as a search takes it (a copy), or ValueError naming what is wrong: a non-empty dict of known
    axes (AXES) to non-empty lists of distinct integers, of at most ``max_points`` points. ``read_space`` and
    ``run_search`` both check with it."""
    if not is_whole(max_points) or max_points < 1:
        raise (ValueError if is_whole(max_points) else TypeError)(f"max_points={max_points!r}: an integer >= 1")
    if not isinstance(space, dict) or not space:
        raise ValueError("a space is a JSON object of config keys to value lists, e.g. "
                         '{"LOG_BLOCK": [3, 4], "LOG_BUS_WIDTH": [6, 7]}')
    for key, values in space.items():
        if key not in AXES:
            raise ValueError(f"space axis {str(key)[:40]!r}: not one a search varies; axes: {', '.join(AXES)}")
        if not isinstance(values, list) or not values or not all(is_whole(v) for v in values):
            raise ValueError(f"space axis {key}: give a non-empty list of integers, not {str(values)[:80]}")
        if len(set(values)) != len(values):
            raise ValueError(f"space axis {key}: {str(values)[:80]} repeats a value")
    n = math.prod(len(v) for v in space.values())
    if n > max_points:
        raise ValueError(f"the space has {n:,} points, more than --max-points {max_points:,}: narrow an axis or "
                         "raise the limit")
    return {k: [int(x) for x in v] for k, v in space.items()}   # (a numpy integer as a plain one: JSON)


def points_of(space: dict[str, list[int]]) -> list[dict[str, int]]:
    return [dict(zip(space, values, strict=True)) for values in itertools.product(*space.values())]


def point_key(point: dict[str, int]) -> str:
    return json.dumps(point, sort_keys=True)


# ---- one point ---------------------------------------------------------------------------------------------------

_NETWORKS: dict[tuple, tuple] = {}   # per process: (network, batch, image size, seed, start, stop) -> quantized graph


def _network(search: Search, batch: int):
    from graph_pack.cli import load_model, region_names
    from graph_pack.quantize import quantize

    key = (search.network, batch, search.image_size, search.seed, search.start, search.stop)
    if key not in _NETWORKS:
        graph, params, (start, stop) = load_model(search.network, batch, search.image_size, search.seed)
        points = region_names(search.start, search.stop, (start, stop))
        qgraph, qparams = quantize(graph, params)
        x = np.random.default_rng(search.seed).standard_normal(graph[graph.inputs[0]].shape).astype(np.float32)
        _NETWORKS.clear()
        _NETWORKS[key] = (graph, qgraph, qparams, points, x)
    return _NETWORKS[key]


def check_network(search: Search) -> None:
    """The search's network loaded, quantized and packed on its base config, once, before any point: a wrong model
    or a ``start`` / ``stop`` that names no op is refused here (ValueError), not as the failure of every point.
    What it loads stays for the points this process evaluates."""
    from graph_pack.pack import graph_pack

    cfg = load_config(search.base)
    _graph, qgraph, _qparams, (start, stop), _x = _network(search, cfg.BATCH)
    graph_pack(qgraph, cfg, start_name=start, stop_name=stop)


def tune_task_ranked(task, trials: int) -> tuple[dict, int, int, int]:
    """The fastest of the template's default and the ``trials`` configs its analytic estimate ranks best, each
    measured on the simulator (timing only). Returns (config, cycles, default cycles, configs measured)."""
    from tuning.features import feature_names, features_of_indices
    from tuning.measure import measure_one

    default = task.default_config
    est = features_of_indices(task, np.arange(len(task.space)))[:, feature_names().index("log_est_cycles")]
    candidates: list[dict] = []
    for i in np.argsort(est, kind="stable"):
        config = task.space[int(i)]
        if task.check(config) is None:
            candidates.append(config)
        if len(candidates) == trials:
            break
    base = measure_one(task, default, check=False, timing_only=True)
    best_config = base.config if base.ok else None
    best = base.cycles if base.ok else 0
    for config in candidates:
        r = measure_one(task, config, check=False, timing_only=True)
        if r.ok and (best_config is None or r.cycles < best):
            best_config, best = r.config, r.cycles
    if best_config is None:
        raise RuntimeError(f"task {task.name}: no config ran ({base.error})")
    return best_config, int(best), int(base.cycles if base.ok else 0), len(candidates) + 1


def screen(search: Search, point: dict[str, int]) -> tuple[dict[str, Any], HwConfig | None]:
    """A point's record as far as it goes without tuning (milliseconds): "invalid" (not a config), "does-not-fit"
    (the analytic estimate against the part), both final; or "ok" so far, with its config to tune and time."""
    t0 = time.perf_counter()
    rec: dict[str, Any] = {"search": search.key, "point": point, "status": "ok"}
    try:
        cfg = load_config(search.base, **point)
    except ConfigError as e:
        return {**rec, "status": "invalid", "reason": str(e), "wall_s": time.perf_counter() - t0}, None
    from hardware.fpga import estimate
    report = estimate(cfg, part=search.part)
    usage = report.usage()
    rec.update(model=cfg.model, name=cfg.name, fingerprint=cfg.fingerprint, clock_mhz=cfg.CLOCK_MHZ, batch=cfg.BATCH,
               resources={k: round(float(usage[k][0]), 1) for k in RESOURCES},
               usage={k: round(float(usage[k][0]) / usage[k][1], 4) for k in RESOURCES}, fits=report.fits)
    rec["cost"] = round(sum(rec["usage"].values()) / len(RESOURCES), 4)   # the mean share: one cost to rank by
    if not report.fits:   # a resource, or the bus: wider than the DRAM port the part gives the accelerator
        over = [k for k in RESOURCES if usage[k][0] > usage[k][1]]
        why = [f"needs more {', '.join(over)} than {search.part} has"] if over else []
        if not report.bus_fits:
            why.append(f"its {cfg.BUS_WIDTH}-bit bus is wider than {search.part}'s {report.part.bus_bits}-bit DRAM "
                       f"port, {report.part.bus_port}")
        return {**rec, "status": "does-not-fit", "reason": "; ".join(why), "wall_s": time.perf_counter() - t0}, None
    return rec, cfg


def evaluate(search: Search, point: dict[str, int]) -> dict[str, Any]:
    """One point of the search, as its record: screened, then (if it fits) tuned and timed; with
    ``search.timing``, its clock checked first (``clock_timing``), and a config whose logic alone misses its
    CLOCK_MHZ is recorded as "clock-not-met" without a latency: its cycles at that clock are not a time its
    hardware would reach."""
    t0 = time.perf_counter()
    rec, cfg = screen(search, point)
    if cfg is None:
        return rec
    try:
        if search.timing:
            rec["timing"] = clock_timing(search, cfg)
            if not rec["timing"]["clock_met"]:
                t = rec["timing"]
                rec.update(status="clock-not-met", reason=(
                    f"CLOCK_MHZ {cfg.CLOCK_MHZ:g} not met: the longest path's logic alone takes {t['delay_ns']:.2f} "
                    f"ns ({t['how']}), more than the {1000 / cfg.CLOCK_MHZ:.2f} ns period"))
                rec["wall_s"] = round(time.perf_counter() - t0, 3)
                return rec
        rec.update(_tune_and_time(search, cfg))
    except Exception as e:  # noqa: BLE001 - a point that fails is a result of the search, never its end
        rec.update(status="failed", reason=f"{type(e).__name__}: {e}")
    rec["wall_s"] = round(time.perf_counter() - t0, 3)
    return rec


def clock_timing(search: Search, cfg: HwConfig) -> dict[str, Any]:
    """The config's timing on the search's part family (hardware/fpga/timing.py: Yosys sta, logic delays only, no
    routing; cached per config): the longest path's delay and whether the config's CLOCK_MHZ is met."""
    from hardware.fpga import get_part
    from hardware.fpga.timing import clock_check, timing_family, xilinx_timing
    family, note = timing_family(get_part(search.part).family)
    t = xilinx_timing(cfg, family)
    met, margin = clock_check(cfg, t.delay_ns)
    return {"how": t.how + (f"; {note}" if note else ""), "delay_ns": t.delay_ns, "lut_levels": t.path.lut_levels,
            "dsps_in_series": t.path.dsps_in_series, "clock_met": met, "margin_ns": round(margin, 3)}


def _tune_and_time(search: Search, cfg: HwConfig) -> dict[str, Any]:
    from graph_pack.build import build
    from graph_pack.pack import graph_pack
    from hw_config.config import LATENCY_NEUTRAL
    from tuning.task import extract_tasks

    cfg = cfg.replace(**LATENCY_NEUTRAL)   # cycles are the objective: no board model to evaluate per trial
    graph, qgraph, qparams, (start, stop), x = _network(search, cfg.BATCH)
    packed = graph_pack(qgraph, cfg, start_name=start, stop_name=stop)
    tasks = extract_tasks(packed, cfg)
    schedules, rows, trials = {}, [], 0
    for task in tasks:
        config, cycles, default_cycles, n = tune_task_ranked(task, search.trials)
        schedules[task.key] = config
        trials += n
        rows.append({"task": task.name, "weight": task.weight, "cycles": cycles, "default_cycles": default_cycles,
                     "config": config})
    mod = build(packed, cfg, qparams, schedules, fallback="allow")
    host_s = []
    for _ in range(HOST_REPEATS):   # the host part's best of a few runs: other work on the machine only slows it
        mod.run(compute=False, **{graph.inputs[0]: x})
        host_s.append(mod.host_seconds)
    # rounded as recorded, and the latency their sum: the figures printed add up (the progress line's parts)
    accel_ms = round(mod.cycles / (cfg.CLOCK_MHZ * 1e3), 4)
    host_ms = round(min(host_s) * 1e3, 3)
    groups = sum(r.where == "accelerator" for r in mod.records)
    # the host's work depends on the packed layout and on which layers run on the CPU, not on buffers, bus or clock
    host_work = [cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT, [r.name for r in mod.records if r.where != "accelerator"]]
    return {"accel_cycles": int(mod.cycles), "accel_ms": round(accel_ms, 4), "host_ms": round(host_ms, 3),
            "latency_ms": round(accel_ms + host_ms, 4), "per_image_ms": round((accel_ms + host_ms) / cfg.BATCH, 4),
            "host_key": hashlib.sha256(json.dumps(host_work).encode()).hexdigest()[:12],
            "groups": groups, "tasks": rows, "trials": trials}


def share_host_time(records: Sequence[dict]) -> list[dict]:
    """The records with each host part timed as the fastest run of the same host work (``host_key``) in the
    search: other work on the machine only slows a run, so between configs that differ only on the accelerator
    the host time is the same and their order is their accelerator time's (one run's host time varied 3.8-13.9
    ms in a search on a busy 2-core machine). A record's own run stays in ``host_ms_measured``."""
    fastest: dict[str, float] = {}
    for r in records:
        if r.get("status") == "ok" and "host_key" in r:
            fastest[r["host_key"]] = min(fastest.get(r["host_key"], r["host_ms"]), r["host_ms"])
    out = []
    for r in records:
        host = fastest.get(r.get("host_key", ""), None) if r.get("status") == "ok" else None
        if host is not None:
            r = {**r, "host_ms_measured": r["host_ms"], "host_ms": host, "latency_ms": round(r["accel_ms"] + host, 4),
                 "per_image_ms": round((r["accel_ms"] + host) / r["batch"], 4)}
        out.append(r)
    return out


# ---- records -----------------------------------------------------------------------------------------------------

STATUSES = ("ok", "invalid", "does-not-fit", "clock-not-met", "failed")
_NUMBERS = ("cost", "latency_ms", "accel_ms", "host_ms", "host_ms_measured", "per_image_ms", "clock_mhz", "wall_s")
_COUNTS = ("accel_cycles", "trials", "groups", "batch")
_TEXTS = ("reason", "model", "name", "fingerprint", "host_key")
_OK_NEEDS = ("cost", "usage", "resources", "latency_ms", "accel_ms", "host_ms", "per_image_ms", "batch")


def _check_network(network: str) -> None:
    """Refuse, cheaply (the model is not loaded), a network that is neither an existing model file nor a zoo model
    name, as load_model tells them apart: ValueError naming it and the zoo's models."""
    from graph_pack import zoo
    path = Path(network)
    if path.suffix == ".onnx" or path.exists():
        if not path.is_file():
            raise ValueError(f"Search network={network!r}: no such ONNX file" if not path.exists() else
                             f"Search network={network!r}: not a regular file; give an .onnx file or a zoo model name")
        return
    try:
        zoo.pack_points(network)
    except (ValueError, KeyError):
        raise ValueError(f"Search network={network!r}: neither an ONNX file nor a zoo model; zoo models: "
                         f"{', '.join(zoo.list_models())}") from None


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def record_problem(rec: Any) -> str | None:
    """Why ``rec`` (a parsed line of this search) is not a record the search can use, or None: the fields the
    front, the CSV and the report read, each of its type and range (numbers finite and >= 0)."""
    if not isinstance(rec.get("point"), dict) or not all(
            k in AXES and is_whole(v) for k, v in rec["point"].items()):
        return "point is not an object of axes to integers"
    if rec.get("status") not in STATUSES:
        return f"status is not one of {', '.join(STATUSES)}"
    if rec["status"] == "ok":
        missing = [k for k in _OK_NEEDS if k not in rec]
        if missing:
            return f"a timed record without {', '.join(missing)}"
    for k in _NUMBERS:
        if k in rec and not _number(rec[k]):
            return f"{k} is not a finite number >= 0"
    for k in _COUNTS:
        least = 1 if k == "batch" else 0
        if k in rec and not (is_whole(rec[k]) and rec[k] >= least):
            return f"{k} is not an integer >= {least}"
    for k in _TEXTS:
        if k in rec and not isinstance(rec[k], str):
            return f"{k} is not a string"
    for k in ("resources", "usage"):
        if k in rec and not (isinstance(rec[k], dict) and all(_number(rec[k].get(r)) for r in RESOURCES)):
            return f"{k} is not an object of {', '.join(RESOURCES)} to numbers >= 0"
    if "fits" in rec and not isinstance(rec["fits"], bool):
        return "fits is not true or false"
    if "tasks" in rec and not isinstance(rec["tasks"], list):
        return "tasks is not a list"
    if "timing" in rec and not (isinstance(rec["timing"], dict) and _number(rec["timing"].get("delay_ns"))
                                and isinstance(rec["timing"].get("clock_met"), bool)):
        return "timing is not an object with delay_ns (a number >= 0) and clock_met (true or false)"
    return None


def _record_of(line: str | None, key: str, max_line_bytes: int) -> tuple[dict | None, str | None]:
    """(the record, None) of a usable line of search ``key``; (None, why) of a line that is not one; (None, None)
    of another search's record."""
    if line is None:
        return None, f"longer than {max_line_bytes:,} bytes"
    try:
        rec = json.loads(line, parse_constant=no_json_constant)
    except (ValueError, RecursionError):   # a torn last line, NaN, digits past Python's limit, deep nesting
        return None, "not JSON"
    if not isinstance(rec, dict):
        return None, "not a JSON object"
    if rec.get("search") != key:
        return None, None
    why = record_problem(rec)
    return (None, why) if why else (rec, None)


def read_records(path: Path, search: Search, report: Callable[[str], None] | None = None,
                 max_line_bytes: int = MAX_RECORD_BYTES) -> dict[str, dict]:
    """This search's records in a JSON-lines file, by point. A line that is not a usable record of this search
    (torn by a kill, longer than ``max_line_bytes``, not JSON, a field of the wrong type or range:
    ``record_problem``) counts as absent, so its point is measured again; ``report`` is told once how many lines
    were skipped and why, and how many records are another search's."""
    out: dict[str, dict] = {}
    if not regular_file(path, "the search's records", missing_ok=True):   # a directory or a device is refused
        return out
    skipped: dict[str, int] = {}
    foreign = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for _, line in bounded_lines(f, max_line_bytes):
            if line is not None and not line.strip():
                continue
            rec, why = _record_of(line, search.key, max_line_bytes)
            if rec is not None:
                out[point_key(rec["point"])] = rec
            elif why is None:
                foreign += 1
            else:
                skipped[why] = skipped.get(why, 0) + 1
    if report is not None and skipped:
        report(f"{path}: skipped {sum(skipped.values())} line(s) that are not usable records ("
               + "; ".join(f"{n}: {why}" for why, n in skipped.items()) + "); a point without one is measured again")
    if report is not None and foreign:
        report(f"{path}: {foreign} record(s) of another search (network, base config or its content, part, trials, "
               "image size, --start / --stop or model file changed) are kept but not used")
    return out


def append_record(path: Path, rec: dict) -> None:
    """One line, flushed and synced: a kill -9 loses at most the point being written."""
    with open(path, "a", encoding="utf-8") as f:
        if f.tell() and not _ends_with_newline(path):
            f.write("\n")   # after a torn line, start a fresh one
        f.write(json.dumps(rec, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


# ---- the front ---------------------------------------------------------------------------------------------------

def pareto_front(records: Iterable[dict], cost: str = "cost", latency: str = "latency_ms") -> list[dict]:
    """The records no other record beats on both ``latency`` and ``cost`` (a resource's share of the part, or
    ``cost``: the mean share of LUT, FF, block RAM and DSP), by increasing cost."""
    def value(r: dict) -> float:
        return r["usage"][cost] if cost in RESOURCES else r[cost]

    ok = sorted((r for r in records if r.get("status") == "ok"), key=lambda r: (value(r), r[latency]))
    front, best = [], math.inf
    for r in ok:
        if r[latency] < best:
            front.append(r)
            best = r[latency]
    return front


# ---- running -----------------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    search: Search
    space: dict[str, list[int]]
    records: list[dict]                 # one per point of the space (and the base config's own point)
    measured: int                       # points evaluated in this run (the others were in the records)
    seconds: float
    base_point: dict[str, int] = field(default_factory=dict)
    front: list[dict] = field(default_factory=list)

    def of_status(self, status: str) -> list[dict]:
        return [r for r in self.records if r.get("status") == status]


def run_search(search: Search, space: dict[str, list[int]], out: str | os.PathLike, *, parallel: int = 1,
               dask: str | None = None, progress: Callable[[str], None] | None = None,
               max_points: int = DEFAULT_MAX_POINTS) -> Outcome:
    """Evaluate every point of ``space`` (checked as ``read_space`` checks a file's: ``check_space``) not yet in
    ``out``/records.jsonl, then write the CSV, the front and the report there. ``parallel`` worker processes, or
    the Dask scheduler at ``dask``."""
    if not isinstance(search, Search):
        raise TypeError(f"search: a tuning.dse.Search, not {type(search).__name__}")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress={progress!r}: None or a callable taking a line of text")
    space = check_space(space, max_points)
    if not (is_whole(parallel) and parallel >= 1):
        raise ValueError(f"parallel={parallel!r}: an integer >= 1 (worker processes)")
    say = progress or (lambda _text: None)
    directory = Path(out)
    search.key   # noqa: B018 - the base config and the model file are read (and refused) before any work
    directory.mkdir(parents=True, exist_ok=True)
    # one search at a time per directory: a second one would measure the same points again and write its CSV, front
    # and report over the first's as it goes
    with write_lock(directory / RECORDS, "--out", f"a search into {directory} is still running (the same command "
                    "twice?); wait for it to finish (a search resumes from its records), or give another --out"):
        return _search(search, space, directory, parallel, dask, say)


def _search(search: Search, space: dict[str, list[int]], directory: Path, parallel: int, dask: str | None,
            say: Callable[[str], None]) -> Outcome:
    path = directory / RECORDS
    done = read_records(path, search, report=say)
    points = points_of(space)
    base = reference_point(search, space)
    if point_key(base) not in {point_key(p) for p in points}:
        points.append(base)   # the base design is always measured, to stand against the front
    # a failed point is not final (its cause, e.g. the environment or the pack points, may be gone): tried again
    retry = [p for p in points if done.get(point_key(p), {}).get("status") == "failed"]
    todo = [p for p in points if point_key(p) not in done or done[point_key(p)]["status"] == "failed"]
    if done:
        say(f"resuming: {len(points) - len(todo) + len(retry)} of {len(points)} points already in {path}"
            + (f"; {len(retry)} failed before, trying them again" if retry else ""))
    t0 = time.perf_counter()
    # the points that are not configs or do not fit are final in milliseconds: recorded first, so that the workers
    # get only points to tune, and the time left is estimated from those alone
    screened = [screen(search, p) for p in todo]
    to_tune = [rec["point"] for rec, cfg in screened if cfg is not None]
    final = [rec for rec, cfg in screened if cfg is None]
    if final:
        say(f"{len(final)} of {len(todo)} points are not configs or do not fit {search.part}: recorded without "
            f"tuning; tuning {len(to_tune)}")
    for rec in final:
        append_record(path, rec)
        done[point_key(rec["point"])] = rec
    t_tune, n = time.perf_counter(), 0
    # each worker's first point also builds the network (seconds): the rate is taken from the points after the
    # first round, once two of them have finished
    warm, t_warm = max(parallel, 1), 0.0
    for rec in _evaluate_all(search, to_tune, parallel, dask):
        append_record(path, rec)
        done[point_key(rec["point"])] = rec
        n += 1
        took = time.perf_counter() - t_tune
        if n == warm:
            t_warm = took
        what = (f"{latency_parts(rec)}, {rec['cost']:.0%} of {search.part}" if rec["status"] == "ok"
                else f"{rec['status']}: {short_reason(rec.get('reason', ''))}" if rec.get("reason") else rec["status"])
        if n == len(to_tune):
            left = "~0 s left"
        elif n >= warm + 2:
            left = f"~{(took - t_warm) / (n - warm) * (len(to_tune) - n):.0f} s left"
        else:
            left = "estimating the time left"
        say(f"[{n}/{len(to_tune)}] {point_key(rec['point'])}: {what} ({took:.0f} s, {left})")
    n += len(final)
    records = share_host_time([done[point_key(p)] for p in points])
    outcome = Outcome(search, space, records, n, time.perf_counter() - t0, base)
    outcome.front = pareto_front(records)
    write_outputs(outcome, directory)
    return outcome


def latency_parts(rec: dict) -> str:
    """A timed record's latency as its parts, each with its basis: the accelerator's simulated time plus the host
    part, measured: this run's in a record as evaluated (a progress line, which says that the summary differs), the
    fastest run of the same host work in one ``share_host_time`` gave (``host_ms_measured`` kept: the summary)."""
    head = f"{rec['latency_ms']:.4f} ms = accelerator {rec['accel_ms']:.4f} ms (simulated) + host {rec['host_ms']:.4f} ms"
    if "host_ms_measured" in rec:
        return head + " (the fastest measured run of its host work)"
    return head + " (measured, this run; the summary takes the fastest run of the same host work)"


def short_reason(reason: str, limit: int = 120) -> str:
    """A record's reason on one line of at most ``limit`` characters (a progress line; the record keeps it all)."""
    text = " ".join(str(reason).split())
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def _evaluate_all(search: Search, points: Sequence[dict], parallel: int, dask: str | None):
    if not points:
        return
    if dask is not None:
        yield from _on_dask(search, points, dask)
    elif parallel <= 1:
        for p in points:
            yield evaluate(search, p)
    else:
        yield from _in_processes(search, points, parallel)


def _evaluate_star(job: tuple[Search, dict]) -> dict:
    return evaluate(*job)


def _in_processes(search: Search, points: Sequence[dict], parallel: int):
    """Points in forked worker processes, each record as it finishes. A worker that dies (killed, out of memory)
    breaks the pool: the points it lost then run again each in a process of its own, as LocalRunner reruns lost
    configs, so a point that kills its worker every time fails alone."""
    jobs = [(search, p) for p in points]
    lost = []
    with ProcessPoolExecutor(parallel, mp_context=multiprocessing.get_context("fork")) as pool:
        for i, rec in completed_in(pool, _evaluate_star, jobs, range(len(jobs))):
            if rec is None:
                lost.append(i)
            else:
                yield rec
    for i in lost:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as alone:
            rec = next(r for _, r in completed_in(alone, _evaluate_star, jobs, [i]))
        yield rec or {"search": search.key, "point": points[i], "status": "failed",
                      "reason": "its worker process died twice"}


def _on_dask(search: Search, points: Sequence[dict], address: str):
    from tuning.measure import dask_client

    client = dask_client(address)
    from distributed import as_completed as dask_completed
    futures = {client.submit(evaluate, search, p, pure=False): p for p in points}
    try:
        for fut in dask_completed(futures):
            try:
                yield fut.result()   # a point whose worker died is run again by the scheduler (allowed-failures)
            except Exception as e:  # noqa: BLE001 - e.g. KilledWorker once the scheduler gives up: a failed point
                yield {"search": search.key, "point": futures[fut], "status": "failed",
                       "reason": f"failed on the Dask cluster: {type(e).__name__}: {e}"}
    finally:
        client.close()


# ---- outputs -----------------------------------------------------------------------------------------------------

CSV_COLUMNS = ("status", *AXES, "name", "model", "clock_mhz", "batch", "lut", "ff", "bram36", "dsp", "cost", "fits",
               "logic_delay_ns", "clock_met", "accel_cycles", "accel_ms", "host_ms", "host_ms_measured", "latency_ms",
               "per_image_ms", "trials", "wall_s", "reason")


def csv_rows(records: Sequence[dict]) -> list[list[str]]:
    rows = [list(CSV_COLUMNS)]
    for r in records:
        timing = r.get("timing") or {}
        flat = {**r.get("point", {}), **r.get("resources", {}), **r,
                **({"logic_delay_ns": timing["delay_ns"], "clock_met": timing["clock_met"]} if timing else {})}
        rows.append(["" if flat.get(c) is None or (c in AXES and c not in r["point"]) else str(flat.get(c, ""))
                     for c in CSV_COLUMNS])
    return rows


def write_outputs(outcome: Outcome, directory: Path) -> None:
    import csv
    import io

    from hw_config.writing import write_atomic
    from tuning.dse_report import render

    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(csv_rows(outcome.records))
    write_atomic(directory / CSV, lambda f: f.write(buf.getvalue().encode()))
    front = {"search": asdict(outcome.search), "front": outcome.front}
    write_atomic(directory / FRONT, lambda f: f.write(json.dumps(front, indent=1, sort_keys=True).encode()))
    write_atomic(directory / REPORT, lambda f: f.write(render(outcome).encode("utf-8")))
    configs = directory / "front"
    configs.mkdir(exist_ok=True)
    for stale in configs.glob("*.json"):   # an earlier front's files
        stale.unlink()
    base = load_config(outcome.search.base)
    for i, rec in enumerate(outcome.front):   # each front config as a file every vta command takes (--config)
        # its description says how it differs from the base: the base's own (its bitstream, its calibration) is not
        # this design's
        changed = {k: v for k, v in rec["point"].items() if getattr(base, k) != v}
        cfg = describe_overrides(load_config(outcome.search.base, **rec["point"]), outcome.search.base, changed)
        text = cfg.to_json()
        write_atomic(configs / f"{i:02d}.json", lambda f, text=text: f.write(text.encode()))


def reference_point(search: Search, space: dict[str, list[int]]) -> dict[str, int]:
    """The base config's own values on the space's axes (VTA's default design, where the report marks it)."""
    base = load_config(search.base)
    return {k: int(getattr(base, k)) for k in space}
