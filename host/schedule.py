"""Schedules of a ComputeDag: which stages are inlined or rfactored, and for each stage computed at the root its
loop structure, tile sizes, loop order and annotations (Ansor's "state" after its transform steps, kept as data).

A stage's ``structure`` names its loop levels outer to inner, ``S`` for a level of every space axis and ``R`` for
a level of every reduction axis: ``SSRSRS`` is Ansor's multi-level tiling for CPUs, ``SR`` the plain nest,
``SRS`` a space tile around the reduction (pooling), ``SS`` an elementwise stage split once. ``tiles[i]`` splits
axis i (space axes, then reduction axes) into one factor per level of its kind, outer first. Within each space
level the space axes run in ``order``; reduction axes always run in their own order, and a schedule whose
reduction levels would visit a reduction out of its lexicographic order is refused (the result would not be
bit-exact), as is one whose factors do not multiply to the extents.

``lower(dag, schedule)`` returns the loop nests (``Nest``) that code generation and the cost model's features read.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

from host.loop_ir import Affine, ComputeDag, Stage, fusable_consumer, inline, rfactor

UNROLL_STEPS = (0, 16, 64, 512)   # Ansor's auto_unroll_max_step choices on CPUs
MAX_LANES = 64
# unrolled statements, and statements x vector lanes: past these the IR (and LLVM's time) explodes
MAX_UNROLLED, MAX_UNROLLED_LANES = 256, 512


@dataclass(frozen=True)
class StageSchedule:
    stage: str
    structure: str
    tiles: tuple[tuple[int, ...], ...]
    order: tuple[int, ...]
    fused: tuple[str, ...] = ()       # elementwise consumers computed in this stage's tile, in order
    cache_write: bool = True          # accumulate in a local tile (else in the stage's own buffer)
    parallel: int = 0                 # how many outermost loops are fused into the parallel loop
    vectorize: bool = False           # the innermost loop (a space loop) in vector lanes
    unroll: int = 0                   # unroll the innermost loops while the product of their extents <= this


@dataclass(frozen=True)
class Schedule:
    sketch: str
    stages: tuple[StageSchedule, ...]
    inlined: tuple[str, ...] = ()
    rfactors: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str | dict) -> Schedule:
        d = json.loads(text) if isinstance(text, str) else text
        try:
            stages = tuple(StageSchedule(**{**s, "tiles": tuple(tuple(t) for t in s["tiles"]),
                                            "order": tuple(s["order"]), "fused": tuple(s["fused"])})
                           for s in d["stages"])
            return Schedule(d["sketch"], stages, tuple(d["inlined"]), tuple(tuple(r) for r in d["rfactors"]))
        except (KeyError, TypeError) as e:
            raise ValueError(f"not a host schedule (keys sketch, stages, inlined, rfactors): {e}") from e

    def stage(self, name: str) -> StageSchedule:
        for s in self.stages:
            if s.stage == name:
                return s
        raise KeyError(name)

    def replace_stage(self, new: StageSchedule) -> Schedule:
        return Schedule(self.sketch, tuple(new if s.stage == new.stage else s for s in self.stages), self.inlined,
                        self.rfactors)


def transformed(dag: ComputeDag, schedule: Schedule) -> ComputeDag:
    """``dag`` after the schedule's inlining and rfactors: the DAG its stage schedules refer to."""
    for name in schedule.inlined:
        dag = inline(dag, name)
    for name, factor in schedule.rfactors:
        dag = rfactor(dag, name, factor)
    return dag


def level_counts(structure: str) -> tuple[int, int]:
    return structure.count("S"), structure.count("R")


def default_stage(st: Stage) -> StageSchedule:
    """The untuned nest: space axes in order, then the reduction; an elementwise stage's innermost loop in
    vector lanes when it is short enough."""
    if st.reduce:
        return StageSchedule(st.name, "SR", tuple((a.extent,) for a in (*st.axes, *st.reduce)),
                             tuple(range(len(st.axes))))
    tiles = tuple((a.extent,) for a in st.axes)
    vec = 1 < st.axes[-1].extent <= 16
    return StageSchedule(st.name, "S", tiles, tuple(range(len(st.axes))), vectorize=vec)


def default_schedule(dag: ComputeDag) -> Schedule:
    """Every stage at the root in its plain nest: the untuned kernel a search must beat (and is measured first)."""
    return Schedule("default", tuple(default_stage(s) for s in dag.stages))


# ---- lowering to loop nests ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Loop:
    var: str
    extent: int
    kind: str        # "S" or "R"
    axis: str
    stride: int      # what one step of var adds to its axis


@dataclass
class Nest:
    """One stage's loop nest (with its fused consumers), in nest order, unit loops dropped."""

    stage: Stage
    fused: list[Stage]
    loops: list[Loop]
    parallel: int
    vector: Loop | None
    unrolled: set[str]
    cache_write: bool
    axis_value: dict[str, Affine] = field(default_factory=dict)

    @property
    def first_reduce(self) -> int:
        """Index of the first reduction loop (len(loops) when none): loops from here on form the tile."""
        for i, lp in enumerate(self.loops):
            if lp.kind == "R":
                return i
        if self.stage.reduce and self.vector is not None:   # every reduction extent is 1: the tile is the vector
            return len(self.loops) - 1
        return len(self.loops)

    @property
    def tile_loops(self) -> list[Loop]:
        return [lp for lp in self.loops[self.first_reduce:] if lp.kind == "S"]

    @property
    def out(self) -> str:
        return self.fused[-1].name if self.fused else self.stage.name

    @property
    def parallel_extent(self) -> int:
        return math.prod(lp.extent for lp in self.loops[:self.parallel])


def _loops(st: Stage, ss: StageSchedule) -> tuple[list[Loop], dict[str, Affine]]:
    ns, nr = level_counts(ss.structure)
    space, red = st.axes, st.reduce
    s_level = r_level = 0
    loops: list[Loop] = []
    value = {a.name: Affine() for a in (*space, *red)}
    for kind in ss.structure:
        if kind == "S":
            group = [(space[i], ss.tiles[i], s_level) for i in ss.order]
            s_level += 1
        else:
            group = [(red[i], ss.tiles[len(space) + i], r_level) for i in range(len(red))]
            r_level += 1
        for axis, factors, lvl in group:
            stride = math.prod(factors[lvl + 1:])
            if factors[lvl] > 1:
                var = f"{axis.name}.{lvl}"
                loops.append(Loop(var, factors[lvl], kind, axis.name, stride))
                value[axis.name] = value[axis.name] + Affine.of(var) * stride
    del ns, nr
    return loops, value


def check(dag: ComputeDag, schedule: Schedule) -> str | None:
    """Why ``schedule`` cannot compute ``dag`` (a sentence), or None when it can."""
    try:
        tdag = transformed(dag, schedule)
    except (ValueError, KeyError) as e:
        return str(e)
    roots = {s.stage for s in schedule.stages}
    fused = [f for s in schedule.stages for f in s.fused]
    names = [s.name for s in tdag.stages]
    if sorted([*roots, *fused]) != sorted(names) or len(roots) + len(fused) != len(names):
        return f"the schedule's stages {sorted(roots)} and fused {fused} do not cover the stages {names} once each"
    for ss in schedule.stages:
        st = tdag.stage(ss.stage)
        why = _check_stage(tdag, st, ss)
        if why:
            return f"stage {st.name}: {why}"
    return None


def _check_stage(dag: ComputeDag, st: Stage, ss: StageSchedule) -> str | None:
    ns, nr = level_counts(ss.structure)
    if set(ss.structure) - {"S", "R"} or ns < 1 or (nr > 0) != bool(st.reduce):
        return f"structure {ss.structure!r} does not fit (S levels, and R levels exactly when it reduces)"
    axes = (*st.axes, *st.reduce)
    if len(ss.tiles) != len(axes):
        return f"{len(ss.tiles)} tilings for {len(axes)} axes"
    for a, t in zip(axes, ss.tiles, strict=True):
        want = ns if a in st.axes else nr
        if len(t) != want or math.prod(t) != a.extent or min(t) < 1:
            return f"axis {a.name} ({a.extent}) split as {t}: needs {want} factors whose product is the extent"
    if sorted(ss.order) != list(range(len(st.axes))):
        return f"order {ss.order} is not a permutation of the {len(st.axes)} space axes"
    prev = st
    for name in ss.fused:
        nxt = fusable_consumer(dag, prev.name)
        if nxt is None or nxt.name != name:
            return f"{name} is not the fusable consumer of {prev.name}"
        prev = nxt
    loops, _ = _loops(st, ss)
    red_axes = [a.name for a in st.reduce]
    seq = [red_axes.index(lp.axis) for lp in loops if lp.kind == "R"]
    if seq != sorted(seq):
        return "its reduction levels visit the reduction out of order (not bit-exact)"
    if ss.parallel < 0 or ss.parallel > len(loops) or any(lp.kind == "R" for lp in loops[:ss.parallel]):
        return f"parallel {ss.parallel}: only outer space loops can be fused into the parallel loop"
    if ss.vectorize and (not loops or loops[-1].kind != "S" or loops[-1].extent > MAX_LANES):
        return f"vectorize needs an innermost space loop of at most {MAX_LANES}"
    if ss.vectorize and ss.parallel == len(loops):
        return "the vector loop cannot also be the parallel loop"
    if ss.unroll < 0:
        return "unroll must be >= 0"
    return None


def lower(dag: ComputeDag, schedule: Schedule) -> tuple[ComputeDag, list[Nest]]:
    """The transformed DAG and one loop nest per root stage, in the DAG's order (ValueError when invalid)."""
    why = check(dag, schedule)
    if why:
        raise ValueError(f"{dag.name}: invalid schedule: {why}")
    tdag = transformed(dag, schedule)
    by_stage = {s.stage: s for s in schedule.stages}
    nests = []
    for st in tdag.stages:
        ss = by_stage.get(st.name)
        if ss is None:
            continue
        loops, value = _loops(st, ss)
        vector = loops[-1] if ss.vectorize else None
        unrolled: set[str] = set()
        product, lanes = 1, vector.extent if vector else 1
        for lp in reversed(loops[ss.parallel:]):
            product *= 1 if lp is vector else lp.extent
            if product > min(ss.unroll, MAX_UNROLLED) or product * lanes > MAX_UNROLLED_LANES:
                break
            unrolled.add(lp.var)
        nests.append(Nest(st, [tdag.stage(f) for f in ss.fused], loops, ss.parallel, vector, unrolled,
                          ss.cache_write, value))
    return tdag, nests
