"""Auto-scheduler trials as records of the tuning log (tuning/records.py's JSON lines, unchanged format), so a search
resumes from its log like a template's tuner does.

A schedule is written as a config of integer knobs, as a template's is: ``sketch`` (the index of its sketch in
``generate_sketches(dag, exact=False)``, -1 for the default schedule), and per root stage ``<stage>.tiles`` (every
axis's factors, outer first, flattened), ``<stage>.order``, ``<stage>.cache_write``, ``<stage>.parallel``,
``<stage>.vectorize`` and ``<stage>.unroll``; what the sketch fixes (inlining, rfactor, structure, fusion) is not
repeated. A record's ``op`` is ``auto.<dag name>``, its workload the DAG's key, its template ``AUTO_VERSION``, its
hardware this CPU's fingerprint, so records are never applied to another CPU or another version of the rules.
"""

from __future__ import annotations

import time
from dataclasses import replace

from graph_pack.host_templates import host
from host.loop_ir import ComputeDag
from host.schedule import Schedule, StageSchedule, check, default_schedule, level_counts
from host.sketch import generate_sketches, sketch_dag
from tuning.records import Record, RecordLog, load_records

AUTO_VERSION = "auto-1"   # bump when sketch rules or knob meanings change: old records then stop applying


def schedule_config(dag: ComputeDag, schedule: Schedule) -> dict[str, int | list[int]]:
    """``schedule`` as the integer knobs of a record's config."""
    if schedule.sketch == "default":
        return {"sketch": -1}
    names = [s.name for s in generate_sketches(dag, exact=False)]
    config: dict[str, int | list[int]] = {"sketch": names.index(schedule.sketch)}
    for ss in schedule.stages:
        config[f"{ss.stage}.tiles"] = [f for t in ss.tiles for f in t]
        config[f"{ss.stage}.order"] = list(ss.order)
        for knob in ("cache_write", "parallel", "vectorize", "unroll"):
            config[f"{ss.stage}.{knob}"] = int(getattr(ss, knob))
    return config


def config_schedule(dag: ComputeDag, config: dict) -> Schedule:
    """The schedule a record's config describes (ValueError when it does not fit ``dag``)."""
    sketches = generate_sketches(dag, exact=False)
    index = config.get("sketch")
    if index == -1:
        return default_schedule(dag)
    if not isinstance(index, int) or not 0 <= index < len(sketches):
        raise ValueError(f"sketch {index!r} is not one of {dag.name}'s {len(sketches)} sketches (or -1: default)")
    sketch = sketches[index]
    tdag = sketch_dag(dag, sketch)
    stages = []
    try:
        for plan in sketch.plans:
            st = tdag.stage(plan.stage)
            ns, nr = level_counts(plan.structure)
            flat = list(config[f"{plan.stage}.tiles"])
            tiles, k = [], 0
            for axis in (*st.axes, *st.reduce):
                n = ns if axis in st.axes else nr
                tiles.append(tuple(flat[k:k + n]))
                k += n
            if k != len(flat):
                raise ValueError(f"{plan.stage}.tiles has {len(flat)} factors, the sketch needs {k}")
            ss = StageSchedule(plan.stage, plan.structure, tuple(tiles), tuple(config[f"{plan.stage}.order"]),
                               plan.fused)
            stages.append(replace(ss, **{knob: type(getattr(ss, knob))(config[f"{plan.stage}.{knob}"])
                                         for knob in ("cache_write", "parallel", "vectorize", "unroll")}))
    except KeyError as e:
        raise ValueError(f"the config has no knob {e} for sketch {sketch.name}") from None
    schedule = Schedule(sketch.name, tuple(stages), sketch.inlined, sketch.rfactors)
    why = check(dag, schedule)
    if why:
        raise ValueError(f"the config does not describe a valid schedule of {dag.name}: {why}")
    return schedule


def make_record(dag: ComputeDag, schedule: Schedule, seconds: float | None, error: str | None,
                wall_s: float = 0.0) -> Record:
    result = {"cycles": max(1, round(seconds * 1e9)) if seconds else 0, "latency_s": seconds or 0.0,
              "error": error, "checked": seconds is not None, "wall_s": wall_s, "device": "cpu", "std_s": 0.0}
    return Record(dag.key, f"auto.{dag.name}", schedule_config(dag, schedule), result, host().fingerprint,
                  AUTO_VERSION, time.time(), tuner="auto")


def load_trials(path, dag: ComputeDag) -> list[tuple[Schedule, float | None, str | None]]:
    """(schedule, seconds or None, error) of every record of ``dag`` made on this CPU with these rules."""
    out = []
    for rec in load_records(path, cfg=host(), template=AUTO_VERSION):
        if rec.workload != dag.key:
            continue
        try:
            schedule = config_schedule(dag, rec.config)
        except ValueError:
            continue
        out.append((schedule, rec.result.get("latency_s") if rec.ok else None, rec.result.get("error")))
    return out


def append(path, records: list[Record]) -> None:
    RecordLog(path).append(records)
