"""Auto-scheduler trials as records of the tuning log (tuning/records.py's JSON lines, unchanged format), so a search
resumes from its log like a template's tuner does.

A schedule is written as a config of integer knobs (``host.knobs``). A record's ``op`` is ``auto.<dag name>``, its
workload the DAG's key, its template ``AUTO_VERSION``, its hardware this CPU's fingerprint, so records are never
applied to another CPU or another version of the rules.
"""

from __future__ import annotations

import time
from dataclasses import replace

from graph_pack.untuned import UNTUNED, UNTUNED_TUNER, is_untuned
from host.knobs import AUTO_VERSION, config_schedule, schedule_config
from host.loop_ir import ComputeDag
from host.schedule import Schedule, default_schedule
from host.templates import host
from tuning.records import Record, RecordLog, load_records


def make_record(dag: ComputeDag, schedule: Schedule, seconds: float | None, error: str | None,
                wall_s: float = 0.0) -> Record:
    result = {"cycles": max(1, round(seconds * 1e9)) if seconds else 0, "latency_s": seconds or 0.0,
              "error": error, "checked": seconds is not None, "wall_s": wall_s, "device": "cpu", "std_s": 0.0}
    return Record(dag.key, f"auto.{dag.name}", schedule_config(dag, schedule), result, host().fingerprint,
                  AUTO_VERSION, time.time(), tuner="auto")


def make_untuned_record(dag: ComputeDag, seconds: float | None, error: str | None, wall_s: float = 0.0) -> Record:
    """The record of ``dag``'s untuned kernel (the one build runs without a record: ``graph_pack.untuned``)."""
    rec = make_record(dag, default_schedule(dag), seconds, error, wall_s)
    return replace(rec, config=dict(UNTUNED), tuner=UNTUNED_TUNER)


def load_untuned(path, dag: ComputeDag) -> float | None:
    """The fastest logged time of ``dag``'s untuned kernel on this CPU, or None."""
    times = [rec.result.get("latency_s") for rec in load_records(path, cfg=host(), template=AUTO_VERSION)
             if rec.workload == dag.key and is_untuned(rec.config) and rec.ok]
    return min(times, default=None)


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
