"""Per-statement features of a scheduled DAG, what the auto-scheduler's learned cost model reads (Ansor's
feature extraction, cut down): for each loop nest's innermost statement its arithmetic (by kind, times how often
it runs), its loops (count, extents of the parallel, vector and unrolled loops, the accumulator tile), and for
each buffer it touches the stride of its innermost loop, whether the vector lanes read it contiguously, how
many times each element is reused and how many distinct bytes the tile touches per outer iteration.

A kernel's vector is its two heaviest nests' features side by side (zeros when it has one) and totals over all
nests, so kernels of one DAG with different sketches have vectors of one length.
"""

from __future__ import annotations

import math

import numpy as np

from host.loop_ir import ComputeDag, flat_index, loads, op_counts
from host.schedule import Nest, Schedule, lower

BUFFER_SLOTS = 4          # the statement's store and its three busiest loads
_OPS = (("add", "sub"), ("mul",), ("div",), ("max", "min"), ("sqrt",), ("exp", "erf", "tanh"))
_NEST_NAMES = (
    [f"ops_{'_'.join(g)}" for g in _OPS]
    + ["iterations", "loops", "parallel_extent", "vector_lanes", "unrolled_product", "tile_size",
       "cache_write", "fused", "reduce_loops_inside_tile", "innermost_extent"]
    + [f"buf{k}_{f}" for k in range(BUFFER_SLOTS)
       for f in ("stride", "contiguous", "gathered", "padded", "reuse", "tile_bytes", "accesses")]
)
NAMES = (*(f"a_{n}" for n in _NEST_NAMES), *(f"b_{n}" for n in _NEST_NAMES), "nests", "total_iterations",
         "total_ops")


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


def _nest_features(dag: ComputeDag, nest: Nest) -> tuple[list[float], float]:
    st = nest.stage
    iters = math.prod(lp.extent for lp in nest.loops)
    counts: dict[str, int] = dict(op_counts(st.body))
    if st.reduce:
        counts["add" if st.combiner == "sum" else "max"] = counts.get("add", 0) + 1
    tile_elems = math.prod(lp.extent for lp in nest.tile_loops) if st.reduce else 1
    outer = iters // max(1, math.prod(lp.extent for lp in nest.loops[nest.first_reduce:])) if st.reduce else iters
    fused_per_elem: dict[str, int] = {}
    for c in nest.fused:
        for k, v in op_counts(c.body).items():
            fused_per_elem[k] = fused_per_elem.get(k, 0) + v
    feats = []
    total_ops = 0.0
    for group in _OPS:
        n = sum(counts.get(k, 0) for k in group) * iters + sum(fused_per_elem.get(k, 0) for k in group) * (
            outer * tile_elems if st.reduce else iters)
        total_ops += n
        feats.append(_log(n))
    vec = nest.vector.extent if nest.vector else 1
    unrolled = math.prod(lp.extent for lp in nest.loops if lp.var in nest.unrolled and lp is not nest.vector)
    inside = nest.loops[nest.first_reduce:]
    feats += [_log(iters), len(nest.loops), _log(nest.parallel_extent), vec, _log(unrolled), _log(tile_elems),
              float(nest.cache_write and bool(st.reduce)), len(nest.fused),
              sum(1 for lp in inside if lp.kind == "R"), _log(nest.loops[-1].extent if nest.loops else 1)]
    innermost = nest.loops[-1].var if nest.loops else None
    extents = {lp.var: lp.extent for lp in nest.loops}
    inner_vars = {lp.var for lp in inside} if st.reduce else {lp.var for lp in nest.loops[nest.parallel:]}
    refs = []
    out_flat = flat_index([i.subst(nest.axis_value) for i in st.identity_index], st.shape)
    refs.append((out_flat, False, iters if not st.reduce else outer * tile_elems))
    for ld in loads(st.body):
        shape = dag.shape_of(ld.tensor)
        refs.append((flat_index([i.subst(nest.axis_value) for i in ld.index], shape), ld.fill is not None, iters))
    refs = refs[:1] + sorted(refs[1:], key=lambda r: -r[2])
    for k in range(BUFFER_SLOTS):
        if k >= len(refs):
            feats += [0.0] * 7
            continue
        flat, padded, accesses = refs[k]
        stride = abs(flat.coef(innermost)) if innermost else 0
        used = set(flat.vars)
        reuse = math.prod(e for v, e in extents.items() if v not in used)
        lo, hi = flat.subst({v: 0 for v in extents if v not in inner_vars}).bounds(
            {v: e for v, e in extents.items()})
        span = min(hi - lo + 1, math.prod(e for v, e in extents.items() if v in inner_vars and v in used) or 1)
        feats += [_log(stride), float(stride == 1 and vec > 1), float(stride not in (0, 1) and vec > 1),
                  float(padded), _log(reuse), _log(4 * span), _log(accesses)]
    return feats, total_ops


def features(dag: ComputeDag, schedule: Schedule) -> np.ndarray:
    """The cost model's input for ``schedule`` of ``dag`` (length ``len(NAMES)``)."""
    tdag, nests = lower(dag, schedule)
    per = [_nest_features(tdag, n) for n in nests]
    ranked = sorted(per, key=lambda p: -p[1])   # the nest doing the most arithmetic first
    width = len(_NEST_NAMES)
    a = ranked[0][0]
    b = ranked[1][0] if len(ranked) > 1 else [0.0] * width
    totals = [len(nests), _log(sum(math.prod(lp.extent for lp in n.loops) for n in nests)),
              _log(sum(t for _, t in per))]
    return np.array([*a, *b, *totals], np.float32)
