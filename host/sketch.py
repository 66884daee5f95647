"""Ansor's CPU sketch rules, its random annotation sampler, and the mutations and crossover its evolution uses.

A sketch fixes a schedule's structure; sampling fills in the numbers. The rules, applied to a ComputeDag:

- *always inline*: an elementwise intermediate without an expensive op (exp, erf, tanh) and without a reduction
  right before it is substituted into its readers (padding is a choice: both sketches are made);
- *fuse consumers*: the elementwise chain that alone reads a stage's output at its own point is computed in that
  stage's tile (with the accumulator tile it is Ansor's cache write + fusion);
- *multi-level tiling*: a reduction with data reuse (an input that does not depend on every space axis: conv2d,
  dense, batch_matmul) gets ``SSRSRS``; one without reuse (pooling, row sums) ``SRS``; elementwise ``SS``;
- *rfactor*: a single long reduction over a small space is split in two stages, only when the search allows
  reassociation (``exact=False``): it changes the order of a float sum.

Annotations sampled per stage: tile sizes (each prime factor of an extent put at a random level, the innermost
at most 64), loop order, cache write, how many outer loops form the parallel loop, vectorisation of the
innermost loop, and the unroll step (0, 16, 64, 512). Reduction tiles keep the reduction's order: the reduction
axes before a chosen one stay in the outer level, those after it in the inner one.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from host.loop_ir import ComputeDag, Stage, Unary, can_inline, fusable_consumer, inline, loads, rfactor
from host.schedule import (
    MAX_LANES,
    UNROLL_STEPS,
    Schedule,
    StageSchedule,
    _loops,
    check,
    level_counts,
    transformed,
)

EXPENSIVE = ("exp", "erf", "tanh")
REGISTER_TILE = 128   # the most elements a sampled innermost tile holds (Ansor caps its innermost split at 64)
RFACTOR_MIN_REDUCE = 64


@dataclass(frozen=True)
class StagePlan:
    stage: str
    structure: str
    fused: tuple[str, ...]


@dataclass(frozen=True)
class Sketch:
    name: str
    inlined: tuple[str, ...]
    rfactors: tuple[tuple[str, int], ...]
    plans: tuple[StagePlan, ...]


def _expensive(st: Stage) -> bool:
    def walk(e) -> bool:
        if isinstance(e, Unary) and e.op in EXPENSIVE:
            return True
        return any(walk(c) for c in (getattr(e, "a", None), getattr(e, "b", None)) if c is not None)
    return walk(st.body)


def _reads_with_fill(dag: ComputeDag, name: str) -> bool:
    return any(ld.tensor == name and ld.fill is not None for s in dag.stages for ld in loads(s.body))


def _after_reduction(dag: ComputeDag, st: Stage) -> bool:
    return any(s.reduce and fusable_consumer(dag, s.name) is st for s in dag.stages)


def _is_padding(st: Stage) -> bool:
    return st.is_elementwise and any(ld.fill is not None for ld in loads(st.body))


def _inline_all(dag: ComputeDag, inline_padding: bool) -> tuple[ComputeDag, tuple[str, ...]]:
    done: list[str] = []
    changed = True
    while changed:
        changed = False
        for st in dag.stages:
            if not can_inline(dag, st.name) or _expensive(st) or _reads_with_fill(dag, st.name):
                continue
            if _after_reduction(dag, st) or (_is_padding(st) and not inline_padding):
                continue
            dag = inline(dag, st.name)
            done.append(st.name)
            changed = True
            break
    return dag, tuple(done)


def has_reuse(st: Stage) -> bool:
    """Some input of the body does not depend on every space axis: tiling the space reuses its values."""
    space = {a.name for a in st.axes}
    return any(space - {v for i in ld.index for v in i.vars} for ld in loads(st.body))


def _wants_rfactor(st: Stage) -> int:
    """The rfactor factor for a single long reduction over a small space (0: none)."""
    if len(st.reduce) != 1 or st.reduce[0].extent < RFACTOR_MIN_REDUCE or math.prod(st.shape) >= st.reduce[0].extent:
        return 0
    k = st.reduce[0].extent
    return max((f for f in range(2, 17) if k % f == 0), default=0)


def _plans(dag: ComputeDag) -> tuple[StagePlan, ...]:
    fused_into: set[str] = set()
    plans = []
    for st in dag.stages:
        if st.name in fused_into:
            continue
        chain, prev = [], st
        while (nxt := fusable_consumer(dag, prev.name)) is not None:
            chain.append(nxt.name)
            prev = nxt
        fused_into.update(chain)
        if not st.reduce:
            structure = "SS"
        elif has_reuse(st):
            structure = "SSRSRS"
        else:
            structure = "SRS"
        plans.append(StagePlan(st.name, structure, tuple(chain)))
    return tuple(plans)


def generate_sketches(dag: ComputeDag, exact: bool = True) -> list[Sketch]:
    """The sketches of ``dag``: padding inlined or not (when there is padding), and with ``exact=False`` the
    rfactored variants of long reductions over small spaces."""
    sketches = []
    has_padding = any(_is_padding(s) and can_inline(dag, s.name) for s in dag.stages)
    for inline_padding in ((False, True) if has_padding else (False,)):
        tdag, inlined = _inline_all(dag, inline_padding)
        name = "tiled" + ("+inline_pad" if inline_padding else "")
        sketches.append(Sketch(name, inlined, (), _plans(tdag)))
        if not exact:
            rfs = tuple((s.name, f) for s in tdag.stages if (f := _wants_rfactor(s)))
            if rfs:
                rdag = tdag
                for n, f in rfs:
                    rdag = rfactor(rdag, n, f)
                sketches.append(Sketch(name + "+rfactor", inlined, rfs, _plans(rdag)))
    return sketches


# ---- sampling ------------------------------------------------------------------------------------------------

def _primes(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out + ([n] if n > 1 else [])


def _split(rng: random.Random, n: int, levels: int, inner_cap: int) -> tuple[int, ...]:
    """n as ``levels`` factors, each prime factor at a random level, the innermost kept <= inner_cap."""
    f = [1] * levels
    for p in _primes(n):
        lvl = rng.randrange(levels)
        if lvl == levels - 1 and f[lvl] * p > inner_cap and levels > 1:
            lvl = rng.randrange(levels - 1)
        f[lvl] *= p
    return tuple(f)


def _reduce_split(rng: random.Random, st: Stage, levels: int) -> list[tuple[int, ...]]:
    if levels == 1:
        return [(a.extent,) for a in st.reduce]
    j = rng.randrange(len(st.reduce))
    out = []
    for i, a in enumerate(st.reduce):
        if i < j:
            out.append((a.extent,) + (1,) * (levels - 1))
        elif i > j:
            out.append((1,) * (levels - 1) + (a.extent,))
        else:
            out.append(_split(rng, a.extent, levels, 1 << 30))
    return out


def _annotate(rng: random.Random, st: Stage, ss: StageSchedule) -> StageSchedule:
    """Parallel, vectorize and unroll sampled for the loops ``ss``'s tiles make."""
    loops, _ = _loops(st, ss)
    first_r = next((i for i, lp in enumerate(loops) if lp.kind == "R"), len(loops))
    ns = len(st.axes)
    can_vec = bool(loops) and loops[-1].kind == "S" and loops[-1].extent <= MAX_LANES
    vec = can_vec and rng.random() < 0.85
    limit = first_r - (1 if vec and first_r == len(loops) else 0)
    parallel = rng.randint(0, max(0, min(limit, ns)))
    unroll = rng.choice(UNROLL_STEPS)
    return replace(ss, parallel=parallel, vectorize=vec, unroll=unroll)


def _vector_friendly(rng: random.Random, extent: int, levels: int) -> tuple[int, ...]:
    """A split of the vector axis whose innermost factor fills vector registers (8 to 64 lanes) when the
    extent allows it; the other factors placed at random."""
    wide = [d for d in range(8, MAX_LANES + 1) if extent % d == 0]
    if not wide or levels == 1:
        return _split(rng, extent, levels, MAX_LANES)
    pow2 = [d for d in wide if d & (d - 1) == 0]
    inner = rng.choice(pow2 if pow2 and rng.random() < 0.8 else wide)   # whole registers, no split vectors
    return (*_split(rng, extent // inner, levels - 1, 1 << 30), inner)


def _cap_innermost(rng: random.Random, space: list[list[int]], keep: int, cap: int) -> None:
    """Move prime factors of the innermost level outward (never axis ``keep``'s) until the level's product,
    the accumulators one tile keeps in registers, is at most ``cap``."""
    while math.prod(t[-1] for t in space) > cap:
        axes = [i for i, t in enumerate(space) if t[-1] > 1 and i != keep] or [keep]
        t = space[rng.choice(axes)]
        p = rng.choice(_primes(t[-1]))
        t[-1] //= p
        t[rng.randrange(len(t) - 1)] *= p


def sample_stage(rng: random.Random, st: Stage, plan: StagePlan) -> StageSchedule:
    ns, nr = level_counts(plan.structure)
    order = list(range(len(st.axes)))
    if len(order) > 1 and rng.random() < 0.2:
        rng.shuffle(order)
    space = [list(_split(rng, a.extent, ns, MAX_LANES)) for a in st.axes]
    if ns > 1 and rng.random() < 0.8:   # most samples put whole vectors in the innermost loop
        space[order[-1]] = list(_vector_friendly(rng, st.axes[order[-1]].extent, ns))
    if ns > 1:
        _cap_innermost(rng, space, order[-1], REGISTER_TILE)
    space = tuple(tuple(t) for t in space)
    red = tuple(_reduce_split(rng, st, nr)) if st.reduce else ()
    ss = StageSchedule(st.name, plan.structure, (*space, *red), tuple(order), plan.fused,
                       cache_write=rng.random() < 0.8)
    return _annotate(rng, st, ss)


def sketch_dag(dag: ComputeDag, sketch: Sketch) -> ComputeDag:
    return transformed(dag, Schedule(sketch.name, (), sketch.inlined, sketch.rfactors))


def sample(dag: ComputeDag, sketch: Sketch, rng: random.Random) -> Schedule:
    """A complete schedule of ``sketch`` with random tile sizes and annotations (always valid)."""
    tdag = sketch_dag(dag, sketch)
    stages = tuple(sample_stage(rng, tdag.stage(p.stage), p) for p in sketch.plans)
    sched = Schedule(sketch.name, stages, sketch.inlined, sketch.rfactors)
    why = check(dag, sched)
    if why:   # a bug in the rules, not a bad draw
        raise AssertionError(f"sampled an invalid schedule of {dag.name}/{sketch.name}: {why}")
    return sched


# ---- evolution's operators -----------------------------------------------------------------------------------

def _repair(dag: ComputeDag, sched: Schedule, st: Stage, ss: StageSchedule) -> Schedule | None:
    """``ss`` made valid by dropping what no longer fits its loops (vectorize, parallel), or None."""
    loops, _ = _loops(st, ss)
    if ss.vectorize and (not loops or loops[-1].kind != "S" or loops[-1].extent > MAX_LANES):
        ss = replace(ss, vectorize=False)
    first_r = next((i for i, lp in enumerate(loops) if lp.kind == "R"), len(loops))
    limit = first_r - (1 if ss.vectorize and first_r == len(loops) else 0)
    if ss.parallel > limit:
        ss = replace(ss, parallel=max(0, limit))
    out = sched.replace_stage(ss)
    return out if check(dag, out) is None else None


def mutate(dag: ComputeDag, sched: Schedule, rng: random.Random) -> Schedule | None:
    """One random change: a prime factor moved between two tile levels, the unroll step, the parallel
    granularity, vectorisation, cache write or the loop order; None when the draw gave nothing valid."""
    tdag = transformed(dag, sched)
    ss = rng.choice(sched.stages)
    st = tdag.stage(ss.stage)
    kind = rng.choices(("tile", "unroll", "parallel", "vectorize", "cache_write", "order"),
                       (6, 1, 1, 1, 1, 1))[0]
    if kind == "tile":
        movable = [i for i, t in enumerate(ss.tiles) if len(t) > 1 and math.prod(t) > 1]
        if not movable:
            return None
        i = rng.choice(movable)
        t = list(ss.tiles[i])
        src = rng.choice([k for k, f in enumerate(t) if f > 1])
        dst = rng.choice([k for k in range(len(t)) if k != src])
        p = rng.choice(_primes(t[src]))
        t[src] //= p
        t[dst] *= p
        new = replace(ss, tiles=(*ss.tiles[:i], tuple(t), *ss.tiles[i + 1:]))
    elif kind == "unroll":
        new = replace(ss, unroll=rng.choice([u for u in UNROLL_STEPS if u != ss.unroll]))
    elif kind == "parallel":
        new = replace(ss, parallel=rng.randint(0, len(st.axes) * 2))
    elif kind == "vectorize":
        new = replace(ss, vectorize=not ss.vectorize)
    elif kind == "cache_write":
        if not st.reduce:
            return None
        new = replace(ss, cache_write=not ss.cache_write)
    else:
        if len(ss.order) < 2:
            return None
        order = list(ss.order)
        a, b = rng.sample(range(len(order)), 2)
        order[a], order[b] = order[b], order[a]
        new = replace(ss, order=tuple(order))
    return _repair(dag, sched, st, new)


def crossover(dag: ComputeDag, a: Schedule, b: Schedule, rng: random.Random) -> Schedule | None:
    """Each root stage's schedule taken from either parent: sound when both come from the same sketch (the
    stages' nests are independent of each other); None otherwise."""
    if (a.sketch, a.inlined, a.rfactors) != (b.sketch, b.inlined, b.rfactors) or len(a.stages) < 2:
        return None
    stages = tuple(x if rng.random() < 0.5 else y for x, y in zip(a.stages, b.stages, strict=True))
    child = replace(a, stages=stages)
    return child if check(dag, child) is None else None
