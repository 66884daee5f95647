"""Tuning targets by name: how a target's tasks are extracted from a graph and which workloads are its, so the
generic tuning code (``extract_tasks``, ``task_of``, ``load_best``) never names a target. A target is added by the
module that defines its tasks registering itself: ``tuning.task`` registers the accelerator ("vta"), ``tuning.cpu``
the host CPU's templates ("cpu"; ``tuning/__init__`` imports it, so every ``import tuning...`` has both). Adding a
target is adding a module, not editing dispatch code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TuningTarget:
    name: str
    extract: Callable[..., list]              # (graph, env, ops) -> the graph's tasks for this target
    owns: Callable[[dict], bool]              # whether a workload (a record's) is one of this target's
    task: Callable[[dict, Any], Any]          # (workload, config or CPU) -> its Task
    describe: str = ""                        # what its tasks are, for the error that lists the targets


_TARGETS: dict[str, TuningTarget] = {}


def register_target(target: TuningTarget) -> None:
    _TARGETS[target.name] = target


def target_named(name: str) -> TuningTarget:
    if name not in _TARGETS:
        raise ValueError(f"target={name!r}; allowed: " + ", ".join(f"{t.name!r} ({t.describe})" for t in _TARGETS.values()))
    return _TARGETS[name]


def owner_of(workload: dict) -> TuningTarget:
    """The target whose workload this is (ValueError naming the op when none claims it)."""
    for target in _TARGETS.values():
        if target.owns(workload):
            return target
    raise ValueError(f"no tuning target takes a workload of op {workload.get('op')!r} (targets: {', '.join(_TARGETS)})")
