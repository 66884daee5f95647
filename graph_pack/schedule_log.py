"""A tuning log applied at build: the best record per task, as AutoTVM's ``apply_history_best`` (``vta run
MODEL --log FILE``).

The tuning layer writes the log and holds its full reader (``tuning.records``, whose ``load_best`` gives the same
schedules; a test checks that they agree). This layer sits below tuning and reads only what build needs from the
JSON-lines format: per workload key, the fastest successful record (board latency, else cycles) made for this
hardware config and template version whose config the workload's template accepts. ``LoggedSchedules`` is the
``schedules`` argument of ``build`` (a function of the workload) and remembers which workloads build asked for,
so the ones without a record can be named.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graph_pack.build import workload_key
from graph_pack.untuned import is_untuned
from host.templates import HOST_TEMPLATE_VERSION, CpuTarget, host_template_of
from hw_config import HwConfig, load_config, presets
from hw_config.checks import is_whole
from hw_config.reading import bounded_lines, regular_file
from vta.templates import TEMPLATE_VERSION, template_of

MAX_LINE_BYTES = 64 << 10   # as tuning.records: a record is a few hundred bytes
MAX_NAMED = 3               # tasks without a record named in the summary line; the rest are counted


def workload_name(workload: dict[str, Any]) -> str:
    """A task's short name, e.g. ``conv2d_1x64x56x56_64x64x3x3_s1x1_p1x1`` (tuning's task names), with what
    else sets tasks of one shape apart: ``_g4`` (groups), ``_res`` (a residual add fused), ``_nobias``."""
    w = workload
    shape = "x".join(map(str, w["data_shape"]))
    if "kernel_shape" in w:
        kernel = "x".join(map(str, w["kernel_shape"]))
        extra = "".join(f"_{k[0]}{'x'.join(map(str, w[k])) if isinstance(w[k], (list, tuple)) else w[k]}"
                        for k in ("strides", "padding") if k in w)
        extra += f"_g{w['groups']}" if w.get("groups", 1) != 1 else ""
        extra += ("_res" if w.get("residual") else "") + ("_nobias" if w.get("bias") is False else "")
        return f"{w['op']}_{shape}_{kernel}{extra}"
    return f"{w['op']}_{shape}{'_tensor' if w.get('tensor_rhs') else ''}"


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def record_rank(result: dict[str, Any]) -> tuple[int, float] | None:
    """The objective of a record's result for ordering, lower first: board latency where the record has one (every
    runner of this stack writes it), else cycles; None for a failed or malformed result. The one ranking rule:
    ``build``'s log reader here and tuning's ``Record.rank`` (best records, ``load_best``, ``pick-best``) use it."""
    cycles, latency = result.get("cycles", 0), result.get("latency_s", 0.0)
    if result.get("error") is not None or not is_whole(cycles) or cycles <= 0:
        return None
    if not _number(latency) or latency < 0:
        return None
    return (0, float(latency)) if latency > 0 else (1, float(cycles))


@dataclass
class LoggedSchedules:
    """The schedules of a log for one hardware config; call it with a workload (``build(..., schedules=it)``)."""

    path: str
    cfg: HwConfig | CpuTarget
    candidates: dict[str, list[dict]] = field(default_factory=dict)   # key -> configs, fastest first
    records: int = 0       # successful records of this config and template version
    foreign: int = 0       # records of another hardware config or template version
    unreadable: int = 0    # lines that are not records
    refused: int = 0       # records whose config the template refuses (a later one is taken)
    lines: int = 0         # non-empty lines
    failed: int = 0        # records of this config and template version whose measurement failed
    other_kind: int = 0    # records of the other kind: the host CPU's in an accelerator's read, and the reverse
    other_template: int = 0   # of ``foreign``: records of this config made by another template version
    configs: Counter[str] = field(default_factory=Counter)   # of ``foreign``: other config (or CPU) -> records
    asked: dict[str, dict] = field(default_factory=dict)      # every workload build asked about
    applied: dict[str, dict] = field(default_factory=dict)    # key -> the config used
    untuned: dict[str, tuple[int, float]] = field(default_factory=dict)   # key -> the untuned kernel's best rank
    untuned_won: set[str] = field(default_factory=set)   # keys whose every logged config lost to the untuned kernel
    kept_untuned: set[str] = field(default_factory=set)  # of those, the ones build asked about (they keep it)

    def __call__(self, workload: dict[str, Any]) -> dict | None:
        key = workload_key(workload)
        self.asked.setdefault(key, workload)
        if key in self.untuned_won:
            self.kept_untuned.add(key)
        if key not in self.applied:
            for config in self.candidates.get(key, []):
                normal = _accepted(workload, config, self.cfg)
                if normal is not None:
                    self.applied[key] = normal
                    break
                self.refused += 1
            else:
                return None
        return self.applied[key]

    def missing(self) -> list[str]:
        """The names of the workloads build asked about that the log has no usable record for."""
        return [workload_name(w) for k, w in self.asked.items() if k not in self.applied and k not in self.kept_untuned]

    def summary(self) -> str:
        """One line: how many tasks got a schedule from the log, and which kept their default."""
        missing = self.missing()
        line = (f"schedules: {len(self.applied)} of {len(self.asked)} task(s) from {self.path} (the best of "
                f"{self.records} record(s) for {self.cfg.model})")
        other = ("of another CPU (or feature set: VTA_HOST_ISA) or template version" if isinstance(self.cfg, CpuTarget)
                 else "of another config or template version")
        skipped = [f"{n} {what}" for n, what in ((self.foreign, other),
                                                  (self.unreadable, "unreadable"),
                                                  (self.refused, "refused by the template")) if n]
        if skipped:
            line += "; records skipped: " + ", ".join(skipped)
        if not self.applied and not self.records and self.other_kind and not isinstance(self.cfg, CpuTarget):
            line += (f"; the log's {self.other_kind} record(s) are the host CPU's (vta tune --target cpu), for the "
                     "layers on the CPU (--target cpu runs the whole network there)")
        if self.kept_untuned:
            line += (f"; {len(self.kept_untuned)} task(s) keep the untuned kernel, faster than every logged config "
                     "in the same tuning run")
        if missing:
            kept = "host.jit's fixed kernel" if isinstance(self.cfg, CpuTarget) else "the template's default"
            shown = ", ".join(missing[:MAX_NAMED]) + (f" and {len(missing) - MAX_NAMED} more" if len(missing) > MAX_NAMED
                                                      else "")
            line += f"; no record for {len(missing)}, which keep {kept}: {shown}"
        return line


def _accepted(workload: dict[str, Any], config: dict, cfg: HwConfig | CpuTarget) -> dict | None:
    """``config`` as the workload's template normalises it (splits as [outer, inner] lists of ints), or None when
    the template refuses it (checked without emitting anything): what is applied is what was checked."""
    try:
        of = host_template_of if isinstance(cfg, CpuTarget) else template_of
        template = of(workload["op"]).from_task_workload(workload, cfg)
        normal = template.space().normalize(config)
        if template.check(normal) is not None:
            return None
    except (ValueError, TypeError, KeyError):   # KnobError and ScheduleError are ValueErrors
        return None
    return {k: list(v) if isinstance(v, tuple) else v for k, v in normal.items()}


def read_schedules(path: str | os.PathLike, cfg: HwConfig | CpuTarget, version: str | None = None) -> LoggedSchedules:
    """The best schedules of the log at ``path`` for ``cfg`` (FileNotFoundError naming it when absent, ValueError
    when it is not a regular file: a directory, /dev/zero); for a
    ``CpuTarget``, the host templates' records made on that CPU (``build``'s ``host_schedules``). Records of the other
    kind (the accelerator's beside the CPU's in one log) are passed over without being counted. ``version``: the
    records of another generator of schedules (the auto-scheduler's, ``host.knobs.AUTO_VERSION``) instead of the
    templates'."""
    cpu = isinstance(cfg, CpuTarget)
    version = version or (HOST_TEMPLATE_VERSION if cpu else TEMPLATE_VERSION)
    p = Path(path)
    if not regular_file(p, "--log", missing_ok=True):
        raise FileNotFoundError(f"--log {path}: no such tuning log")
    out = LoggedSchedules(str(path), cfg)
    ranked: dict[str, list[tuple[tuple[int, float], dict]]] = {}
    with open(p, encoding="utf-8", errors="replace") as f:
        for _, line in bounded_lines(f, MAX_LINE_BYTES):
            if line is None:   # a line past MAX_LINE_BYTES, passed over in bounded pieces
                out.unreadable += 1
                continue
            if not line.strip():
                continue
            out.lines += 1
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                out.unreadable += 1
                continue
            if not (isinstance(rec, dict) and isinstance(rec.get("workload"), str) and isinstance(rec.get("config"), dict)
                    and isinstance(rec.get("result"), dict)):
                out.unreadable += 1
                continue
            if rec.get("hw") != cfg.fingerprint or rec.get("template") != version:
                if str(rec.get("hw")).startswith("cpu:") != cpu:
                    out.other_kind += 1
                elif rec.get("hw") == cfg.fingerprint:
                    out.other_template += 1
                else:
                    out.configs[str(rec.get("hw"))] += 1
                out.foreign += str(rec.get("hw")).startswith("cpu:") == cpu
                continue
            rank = record_rank(rec["result"])
            out.failed += rank is None
            if rank is not None:
                out.records += 1
                ranked.setdefault(rec["workload"], []).append((rank, rec["config"]))
    for key, rs in ranked.items():
        untuned = [r for r, c in rs if is_untuned(c)]
        if untuned:
            out.untuned[key] = min(untuned)
        won = [(r, c) for r, c in rs if not is_untuned(c) and beats_untuned(r, out.untuned.get(key))]
        if won:
            out.candidates[key] = [c for _, c in sorted(won, key=lambda rc: rc[0])]
        elif key in out.untuned:
            out.untuned_won.add(key)
    return out


def beats_untuned(rank: tuple[int, float], untuned: tuple[int, float] | None) -> bool:
    """Whether a record ranked ``rank`` was faster than the untuned build's kernel in the same tuning run (its
    record's rank; None: the log has none, as logs tuned before it was measured, and the record applies)."""
    return untuned is None or rank < untuned


def refuse_unused(model: str, logged: LoggedSchedules, host: LoggedSchedules | None = None, *,
                  built: bool = False, auto: LoggedSchedules | None = None) -> None:
    """A ValueError saying why, when a log gives the network nothing: no record of it is for this config and kind
    (``built=False``, before the work), or (``built=True``) none of those fits a task build asked about. ``logged``
    is the read for the run's target (the accelerator's config, or the CPU for ``vta run --target cpu``); ``host``
    the host CPU's read beside an accelerator's (its layers on the CPU take their kernels from the same log). A log
    that gives some task a record is used, and its summary line says what it did not give."""
    reads = [r for r in (logged, host, auto) if r is not None]   # auto: the auto-scheduler's records of the log
    if any(r.applied or r.kept_untuned for r in reads) or (not built and any(r.records for r in reads)):
        return
    target = logged.cfg.model if not isinstance(logged.cfg, CpuTarget) else f"this CPU, {logged.cfg.model}"
    lines = [f"--log {logged.path}: no record in it applies to {model} on {target}; the run would be untuned:"]
    if not logged.lines:
        lines.append("it holds no record (a tuning run stopped before its first one?)")
    if logged.unreadable:
        lines.append(f"{logged.unreadable} line(s) are not tuning records (is it a vta tune --log?)")
    lines += _why_not(logged)
    if isinstance(logged.cfg, CpuTarget):
        if logged.other_kind:
            lines.append(f"{logged.other_kind} record(s) are the accelerator's (vta tune without --target cpu): run "
                         "without --target cpu to use them")
    else:
        cpu = logged.other_kind
        if cpu and host is None:
            lines.append(f"{cpu} record(s) are the host CPU's (vta tune --target cpu), and this machine builds no "
                         "host kernels (llvmlite is missing)")
        elif cpu and not host.records:   # none made here, by these templates, and measured
            lines.append(f"{cpu} record(s) are the host CPU's (vta tune --target cpu), none usable here: "
                         + "; ".join(_why_not(host)))
        elif cpu:
            lines.append(f"{cpu} record(s) are the host CPU's (vta tune --target cpu)"
                         + (", none for a layer this build keeps on the CPU" if built and host.records else "")
                         + ": run with --target cpu to use them")
    raise ValueError("\n  ".join(lines))


def _why_not(logged: LoggedSchedules) -> list[str]:
    """Why the records of the run's kind gave nothing: another config (or CPU), another template version, no task of
    the network, configs the template refuses."""
    lines = []
    cpu = isinstance(logged.cfg, CpuTarget)
    if logged.configs:
        n = sum(logged.configs.values())
        if cpu:
            lines.append(f"{n} record(s) were made on another CPU (or with another feature set: VTA_HOST_ISA)")
        else:
            known = _preset_names(logged.configs)
            lines.append(f"{n} record(s) are for another hardware config ({', '.join(known)}): run with the "
                         "--config / --set it was tuned with")
    if logged.failed:
        lines.append(f"{logged.failed} record(s) for this config are failed measurements (no time to rank them by)")
    if logged.other_template:
        lines.append(f"{logged.other_template} record(s) are of another template version (tuned before the templates "
                     "changed): tune again")
    if logged.records and logged.asked and not logged.applied:
        if logged.refused:
            lines.append(f"{logged.refused} record(s) have a config the template refuses (an edited log?)")
        else:
            lines.append(f"its {logged.records} record(s) for this config are of {len(logged.candidates)} task(s), "
                         f"none of the network's {len(logged.asked)} (tuned with another model, --image-size, --batch "
                         "or --start / --stop?)")
    return lines


def _preset_names(fingerprints: Counter[str]) -> list[str]:
    """The presets whose fingerprints these are, by count, else "a config that is no preset"."""
    by_fingerprint = {}
    for name in presets():
        try:
            by_fingerprint.setdefault(load_config(name).fingerprint, name)
        except ValueError:   # (a preset that does not load is another test's failure)
            continue
    names = [by_fingerprint.get(f, "") for f, _ in fingerprints.most_common()]
    shown = list(dict.fromkeys(n for n in names if n))
    return shown + (["a config that is no preset"] if "" in names else [])
