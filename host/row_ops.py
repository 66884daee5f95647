"""Softmax and layer norm as compiled kernels ``build`` runs without a tuning log: ``host.ops``' definitions (in
``host.numerics``' order, so the kernels are bit-equal to graph_pack.kernels' reference) under one fixed
schedule that vectorises every pass over a row: the lane-partial reductions keep their 16 partials in a vector
register, the elementwise passes run 16 (or 8, 4, 2: what divides the row) lanes at a time.

``host.jit.get_kernel`` hands ``nn.softmax`` and ``nn.layer_norm`` here, as it hands conv2d to its own kernels;
a tuning log's schedule for the same DAG (``graph_pack.host_auto``) computes the same bits.
"""

from __future__ import annotations

from host.loop_ir import ComputeDag, Stage, fusable_consumer
from host.numerics import LANES
from host.schedule import Schedule, StageSchedule, check, default_stage

ROW_OPS = ("softmax", "layer_norm")
VECTOR_WIDTHS = (16, 8, 4, 2)


def _row_stage(st: Stage) -> StageSchedule:
    """A (rows, K) elementwise pass: the row split into vector-wide pieces, the innermost in lanes."""
    rows, k = (a.extent for a in st.axes)
    width = next((w for w in VECTOR_WIDTHS if k % w == 0), 1)
    if width == 1:
        return default_stage(st)
    return StageSchedule(st.name, "SS", ((rows, 1), (k // width, width)), (0, 1), vectorize=True)


def _lanes_stage(st: Stage) -> StageSchedule:
    """A lane-partial reduction (rows, LANES) over chunks: per row, the LANES accumulators in one vector."""
    rows, chunks = st.axes[0].extent, st.reduce[0].extent
    return StageSchedule(st.name, "SRS", ((rows, 1), (1, LANES), (chunks,)), (0, 1), vectorize=True)


def row_schedule(dag: ComputeDag) -> Schedule:
    """The fixed vectorised schedule of a ``host.ops.softmax`` or ``host.ops.layer_norm`` DAG; a per-row scalar
    stage (the mean, 1 / sqrt(var + eps)) is computed as its reduction's tile is stored."""
    if dag.name not in ROW_OPS:
        raise ValueError(f"row_schedule: {dag.name} is not one of {', '.join(ROW_OPS)}")
    stages, fused = [], set()
    for st in dag.stages:
        if st.name in fused:
            continue
        if st.reduce and st.name.endswith("_lanes"):
            stages.append(_lanes_stage(st))
        elif st.reduce:
            nxt = fusable_consumer(dag, st.name)
            take = (nxt.name,) if nxt is not None and len(nxt.axes) == 1 else ()
            fused.update(take)
            stages.append(StageSchedule(st.name, "SR", ((st.axes[0].extent,), (LANES,)), (0,), fused=take))
        elif len(st.axes) == 2:
            stages.append(_row_stage(st))
        else:
            stages.append(default_stage(st))
    schedule = Schedule("rows", tuple(stages))
    why = check(dag, schedule)
    if why:   # a definition changed under this schedule: a bug here, not the caller's
        raise AssertionError(f"row_schedule({dag.name}): {why}")
    return schedule


def packed_dense_schedule(dag: ComputeDag) -> Schedule:
    """A schedule of ``host.ops.dense_packed``: up to 4 rows x 4 blocks of LANES output units accumulate in
    registers while k runs in order, each weight vector one contiguous load (bench/host_ops.py times it)."""
    st = dag.stages[0]
    m, blocks = st.axes[0].extent, st.axes[1].extent
    rows = next(t for t in (4, 2, 1) if m % t == 0)
    cols = next(t for t in (4, 2, 1) if blocks % t == 0)
    tiles = ((m // rows, rows), (blocks // cols, cols), (1, LANES), (st.reduce[0].extent,))
    return Schedule("packed", (StageSchedule(st.name, "SRS", tiles, (0, 1, 2), vectorize=True),))
