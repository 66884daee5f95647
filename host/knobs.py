"""Auto-scheduler schedules as the integer knobs of a tuning record, and a record's workload back as its DAG: what
the tuning log and ``build`` share, so a schedule tuned by ``tuning.auto_schedule`` is applied below tuning.

A schedule is written as a config of integer knobs, as a template's is: ``sketch`` (the index of its sketch in
``generate_sketches(dag, exact=False)``, -1 for the default schedule), and per root stage ``<stage>.tiles`` (every
axis's factors, outer first, flattened), ``<stage>.order``, ``<stage>.cache_write``, ``<stage>.parallel``,
``<stage>.vectorize`` and ``<stage>.unroll``; what the sketch fixes (inlining, rfactor, structure, fusion) is not
repeated. A record's workload is the DAG's key (``ComputeDag.key``: the op, its input shapes and attributes), from
which ``dag_of_workload`` makes the DAG again (a CPU server measures a DAG it is sent this way).
"""

from __future__ import annotations

import json
from dataclasses import replace

from host import ops
from host.loop_ir import ComputeDag
from host.schedule import Schedule, StageSchedule, check, default_schedule, level_counts
from host.sketch import generate_sketches, sketch_dag

AUTO_VERSION = "auto-1"   # bump when sketch rules or knob meanings change: old records then stop applying
KNOBS = ("cache_write", "parallel", "vectorize", "unroll")


def schedule_config(dag: ComputeDag, schedule: Schedule) -> dict[str, int | list[int]]:
    """``schedule`` as the integer knobs of a record's config."""
    if schedule.sketch == "default":
        return {"sketch": -1}
    names = [s.name for s in generate_sketches(dag, exact=False)]
    config: dict[str, int | list[int]] = {"sketch": names.index(schedule.sketch)}
    for ss in schedule.stages:
        config[f"{ss.stage}.tiles"] = [f for t in ss.tiles for f in t]
        config[f"{ss.stage}.order"] = list(ss.order)
        for knob in KNOBS:
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
                                         for knob in KNOBS}))
    except (KeyError, TypeError) as e:
        raise ValueError(f"the config has no usable knob {e} for sketch {sketch.name}") from None
    schedule = Schedule(sketch.name, tuple(stages), sketch.inlined, sketch.rfactors)
    why = check(dag, schedule)
    if why:
        raise ValueError(f"the config does not describe a valid schedule of {dag.name}: {why}")
    return schedule


def _chain(ops_list) -> list[tuple]:
    return [tuple(op) for op in ops_list]


def dag_of_workload(workload: dict | str) -> ComputeDag:
    """The ComputeDag whose ``key`` is ``workload`` (a dict, or its JSON text); ValueError naming what does not fit."""
    w = json.loads(workload) if isinstance(workload, str) else dict(workload)
    name, shapes = w.get("op"), w.get("inputs")
    if not isinstance(shapes, list) or not shapes or not all(isinstance(s, list) for s in shapes):
        raise ValueError(f"host workload {str(w)[:80]}: 'inputs' must be a list of shapes")
    try:
        if name == "conv2d":
            dag = ops.conv2d(shapes[0], w["w"], w["strides"], w["padding"], w["dilation"], w["groups"],
                             _chain(w["producers"]), _chain(w["consumers"]))
        elif name == "dense":
            dag = ops.dense(shapes[0], w["w"], _chain(w["producers"]), _chain(w["consumers"]))
        elif name == "batch_matmul":
            dag = ops.batch_matmul(shapes[0], w["b"], w["transpose_b"], _chain(w["consumers"]))
        elif name in ("max_pool2d", "avg_pool2d"):
            dag = ops.pool2d(w["kind"], shapes[0], w["pool_size"], w["strides"], w["padding"], w["ceil_mode"],
                             w["count_include_pad"], _chain(w["consumers"]))
        elif name == "global_avg_pool2d":
            dag = ops.global_avg_pool2d(shapes[0], _chain(w["consumers"]))
        elif name == "softmax":
            dag = ops.softmax(w["shape"])
        elif name == "layer_norm":
            dag = ops.layer_norm(w["shape"], -1, w["epsilon"])
        elif name == "elementwise":
            dag = ops.elementwise(shapes[0], _chain(w["ops"]), w["channel_axis"])
        else:
            raise LookupError(f"host workload op {name!r} is not one of conv2d, dense, batch_matmul, max_pool2d, "
                              "avg_pool2d, global_avg_pool2d, softmax, layer_norm, elementwise")
    except LookupError as e:
        if type(e) is LookupError:
            raise ValueError(str(e)) from None
        raise ValueError(f"host workload {name!r}: missing or malformed attribute {e}") from None
    except (TypeError, ValueError) as e:
        raise ValueError(f"host workload {name!r}: {e}") from None
    if json.loads(dag.key) != w:
        raise ValueError(f"host workload {str(w)[:120]} does not describe one DAG (its inputs or attributes disagree)")
    return dag
