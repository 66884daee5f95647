"""The loop-nest IR: an operator as stages of compute definitions, as TVM's tensor expressions write them.

A ``Stage`` computes one tensor: for every point of its space ``axes`` it evaluates ``body`` (an expression over
loads of other tensors at affine indices) and, when it has ``reduce`` axes, combines the body's values over them
(``sum`` or ``max``) in the reduction axes' lexicographic order. A ``ComputeDag`` is the stages of one host
subgraph in topological order: the inputs it is called with, constants bound when it is built (pooling counts),
the intermediate tensors and the output (the last stage's tensor, reshaped to ``output_shape``).

Every float operation is IEEE float32 as written (no reassociation, no fused multiply-add); exp is
``host.numerics.exp`` (float32 operations that vectorise, within 1 ulp), erf and tanh are libm's double functions
rounded to float32. A schedule may therefore reorder loops freely but must keep each
output's reduction order, which ``host.schedule`` checks; only ``rfactor`` (offered when a search allows
reassociation) changes it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

# ---- affine index expressions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Affine:
    """const + sum(coef * var): an index over loop variables (axis names)."""

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    @staticmethod
    def of(x: Affine | int | str) -> Affine:
        if isinstance(x, Affine):
            return x
        if isinstance(x, str):
            return Affine(((x, 1),))
        return Affine((), int(x))

    def __add__(self, other: Affine | int | str) -> Affine:
        o = Affine.of(other)
        coefs = dict(self.terms)
        for var, c in o.terms:
            coefs[var] = coefs.get(var, 0) + c
        return Affine(tuple((v, c) for v, c in coefs.items() if c), self.const + o.const)

    __radd__ = __add__

    def __sub__(self, other: Affine | int | str) -> Affine:
        return self + Affine.of(other) * -1

    def __mul__(self, k: int) -> Affine:
        return Affine(tuple((v, c * k) for v, c in self.terms if c * k), self.const * k)

    __rmul__ = __mul__

    def coef(self, var: str) -> int:
        return dict(self.terms).get(var, 0)

    @property
    def vars(self) -> tuple[str, ...]:
        return tuple(v for v, _ in self.terms)

    def subst(self, mapping: Mapping[str, Affine]) -> Affine:
        out = Affine((), self.const)
        for var, c in self.terms:
            out = out + (mapping[var] * c if var in mapping else Affine(((var, c),)))
        return out

    def bounds(self, extents: Mapping[str, int]) -> tuple[int, int]:
        """The least and greatest value over vars in [0, extent)."""
        lo = hi = self.const
        for var, c in self.terms:
            span = c * (extents[var] - 1)
            lo, hi = lo + min(0, span), hi + max(0, span)
        return lo, hi


def flat_index(index: Iterable[Affine], shape: tuple[int, ...]) -> Affine:
    """The row-major element offset of ``index`` into a tensor of ``shape``."""
    out = Affine()
    stride = 1
    for idx, n in reversed(list(zip(index, shape, strict=True))):
        out = out + idx * stride
        stride *= n
    return out


# ---- expressions ---------------------------------------------------------------------------------------------

BINARY_OPS = ("add", "sub", "mul", "div", "max", "min")
UNARY_OPS = ("neg", "sqrt", "exp", "erf", "tanh")   # exp: host.numerics.exp; erf/tanh: libm's, rounded to float32


class Expr:
    """A float32 expression; ``+ - * /`` build ``Binary`` nodes (numbers become ``Const``)."""

    def __add__(self, o):
        return Binary("add", self, const(o))

    def __radd__(self, o):
        return Binary("add", const(o), self)

    def __sub__(self, o):
        return Binary("sub", self, const(o))

    def __rsub__(self, o):
        return Binary("sub", const(o), self)

    def __mul__(self, o):
        return Binary("mul", self, const(o))

    def __rmul__(self, o):
        return Binary("mul", const(o), self)

    def __truediv__(self, o):
        return Binary("div", self, const(o))

    def __rtruediv__(self, o):
        return Binary("div", const(o), self)

    def __neg__(self):
        return Unary("neg", self)


@dataclass(frozen=True, eq=True)
class Const(Expr):
    value: float


@dataclass(frozen=True, eq=True)
class Load(Expr):
    """tensor[index]; with ``fill`` set, an index outside the tensor reads ``fill`` (padding)."""

    tensor: str
    index: tuple[Affine, ...]
    fill: float | None = None


@dataclass(frozen=True, eq=True)
class Binary(Expr):
    op: str
    a: Expr
    b: Expr

    def __post_init__(self) -> None:
        if self.op not in BINARY_OPS:
            raise ValueError(f"binary op {self.op!r} is not one of {', '.join(BINARY_OPS)}")


@dataclass(frozen=True, eq=True)
class Unary(Expr):
    op: str
    a: Expr

    def __post_init__(self) -> None:
        if self.op not in UNARY_OPS:
            raise ValueError(f"unary op {self.op!r} is not one of {', '.join(UNARY_OPS)}")


def const(x: Expr | float) -> Expr:
    return x if isinstance(x, Expr) else Const(float(np.float32(x)))


def maximum(a: Expr | float, b: Expr | float) -> Expr:
    return Binary("max", const(a), const(b))


def minimum(a: Expr | float, b: Expr | float) -> Expr:
    return Binary("min", const(a), const(b))


def call(op: str, a: Expr) -> Expr:
    return Unary(op, a)


def loads(e: Expr) -> list[Load]:
    """Every load in ``e``, in evaluation order."""
    if isinstance(e, Load):
        return [e]
    if isinstance(e, Binary):
        return loads(e.a) + loads(e.b)
    if isinstance(e, Unary):
        return loads(e.a)
    return []


def op_counts(e: Expr) -> dict[str, int]:
    """How many of each operation one evaluation of ``e`` does (the cost model's arithmetic features)."""
    counts: dict[str, int] = {}

    def walk(x: Expr) -> None:
        if isinstance(x, (Binary, Unary)):
            counts[x.op] = counts.get(x.op, 0) + 1
            for child in (x.a, x.b) if isinstance(x, Binary) else (x.a,):
                walk(child)
    walk(e)
    return counts


def rewrite(e: Expr, fn) -> Expr:
    """``e`` with every load replaced by ``fn(load)`` (an Expr, or None to keep it)."""
    if isinstance(e, Load):
        return fn(e) or e
    if isinstance(e, Binary):
        return Binary(e.op, rewrite(e.a, fn), rewrite(e.b, fn))
    if isinstance(e, Unary):
        return Unary(e.op, rewrite(e.a, fn))
    return e


# ---- stages and DAGs -----------------------------------------------------------------------------------------

COMBINERS = {"sum": 0.0, "max": -math.inf}   # combiner -> its identity (the accumulator's initial value)


@dataclass(frozen=True)
class Axis:
    name: str
    extent: int


@dataclass(frozen=True)
class Stage:
    """tensor ``name`` of shape (axis extents), stored row-major: name[axes] = combine_{reduce} body."""

    name: str
    axes: tuple[Axis, ...]
    body: Expr
    reduce: tuple[Axis, ...] = ()
    combiner: str | None = None

    def __post_init__(self) -> None:
        if bool(self.reduce) != (self.combiner is not None):
            raise ValueError(f"stage {self.name}: reduce axes and a combiner go together")
        if self.combiner is not None and self.combiner not in COMBINERS:
            raise ValueError(f"stage {self.name}: combiner {self.combiner!r} is not one of {', '.join(COMBINERS)}")
        names = [a.name for a in (*self.axes, *self.reduce)]
        if len(set(names)) != len(names):
            raise ValueError(f"stage {self.name}: axis names repeat: {names}")

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(a.extent for a in self.axes)

    @property
    def extents(self) -> dict[str, int]:
        return {a.name: a.extent for a in (*self.axes, *self.reduce)}

    @property
    def identity_index(self) -> tuple[Affine, ...]:
        return tuple(Affine.of(a.name) for a in self.axes)

    @property
    def is_elementwise(self) -> bool:
        return not self.reduce

    def flop(self) -> int:
        per = sum(op_counts(self.body).values()) + (1 if self.reduce else 0)
        return per * math.prod(self.shape) * math.prod(a.extent for a in self.reduce)


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class ComputeDag:
    """One host subgraph: called with ``inputs`` (in order), returns the last stage's tensor as ``output_shape``."""

    name: str
    inputs: tuple[Tensor, ...]
    stages: tuple[Stage, ...]
    output_shape: tuple[int, ...]
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)   # the op's parameters, for the workload key

    def __post_init__(self) -> None:
        known = {t.name: t.shape for t in self.inputs} | {k: v.shape for k, v in self.constants.items()}
        for st in self.stages:
            if st.name in known:
                raise ValueError(f"{self.name}: tensor {st.name} is defined twice")
            for ld in loads(st.body):
                if ld.tensor not in known:
                    raise ValueError(f"{self.name}: stage {st.name} reads {ld.tensor}, which no earlier stage or input defines")
                if len(ld.index) != len(known[ld.tensor]):
                    raise ValueError(f"{self.name}: stage {st.name} indexes {ld.tensor} {known[ld.tensor]} with "
                                     f"{len(ld.index)} indices")
                if ld.fill is None:
                    for idx, n in zip(ld.index, known[ld.tensor], strict=True):
                        lo, hi = idx.bounds(st.extents)
                        if lo < 0 or hi >= n:
                            raise ValueError(f"{self.name}: stage {st.name} reads {ld.tensor} out of bounds "
                                             f"({lo}..{hi} of {n}) without a fill value")
            known[st.name] = st.shape
        if math.prod(self.output.shape) != math.prod(self.output_shape):
            raise ValueError(f"{self.name}: output shape {self.output_shape} does not hold stage {self.output.name}")

    @property
    def output(self) -> Stage:
        return self.stages[-1]

    def stage(self, name: str) -> Stage:
        for st in self.stages:
            if st.name == name:
                return st
        raise KeyError(f"{self.name} has no stage {name!r} (stages: {', '.join(s.name for s in self.stages)})")

    def shape_of(self, name: str) -> tuple[int, ...]:
        for t in self.inputs:
            if t.name == name:
                return t.shape
        if name in self.constants:
            return self.constants[name].shape
        return self.stage(name).shape

    @property
    def buffers(self) -> tuple[str, ...]:
        """Every tensor a compiled kernel passes its loop nests: inputs, constants, then the stages' tensors."""
        return (*(t.name for t in self.inputs), *self.constants, *(s.name for s in self.stages))

    def consumers(self, name: str) -> list[Stage]:
        return [s for s in self.stages if any(ld.tensor == name for ld in loads(s.body))]

    def flop(self) -> int:
        return sum(s.flop() for s in self.stages)

    @property
    def key(self) -> str:
        """The workload: what records and caches are keyed by."""
        return json.dumps({"op": self.name, "inputs": [list(t.shape) for t in self.inputs], **self.attrs},
                          sort_keys=True)

    def with_stages(self, stages: Iterable[Stage]) -> ComputeDag:
        return replace(self, stages=tuple(stages))


# ---- transformations a sketch applies ------------------------------------------------------------------------

def can_inline(dag: ComputeDag, name: str) -> bool:
    """An elementwise stage that is not the output can be substituted into its consumers."""
    st = dag.stage(name)
    return st.is_elementwise and st is not dag.output and bool(dag.consumers(name))


def inline(dag: ComputeDag, name: str) -> ComputeDag:
    """``dag`` with stage ``name`` computed inside every consumer's body (TVM's compute_inline). A stage read with
    a fill value (through padding) is refused: outside its shape the reader wants the fill, not the body's value
    there (sigmoid(0) is not 0)."""
    if not can_inline(dag, name):
        raise ValueError(f"{dag.name}: stage {name} is not an elementwise intermediate: it cannot be inlined")
    st = dag.stage(name)

    def substitute(ld: Load) -> Expr | None:
        if ld.tensor != name:
            return None
        mapping = {a.name: idx for a, idx in zip(st.axes, ld.index, strict=True)}
        body = rewrite(st.body, lambda inner: Load(inner.tensor, tuple(i.subst(mapping) for i in inner.index),
                                                    inner.fill))
        if ld.fill is not None:
            raise ValueError(f"{dag.name}: stage {name} is read with a fill value: inline its reader into it instead")
        return body
    return dag.with_stages(replace(s, body=rewrite(s.body, substitute)) for s in dag.stages if s is not st)


def fusable_consumer(dag: ComputeDag, name: str) -> Stage | None:
    """The elementwise stage that reads tensor ``name`` at its own point and is its only reader, so it can be
    computed in ``name``'s tile as each value is final (Ansor's consumer fusion), or None."""
    readers = dag.consumers(name)
    if len(readers) != 1 or name == dag.output.name:
        return None
    st, reader = dag.stage(name), readers[0]
    if not reader.is_elementwise or reader.shape != st.shape:
        return None
    for ld in loads(reader.body):
        if ld.tensor == name and (ld.fill is not None or ld.index != reader.identity_index):
            return None
    return reader


def rfactor(dag: ComputeDag, name: str, factor: int) -> ComputeDag:
    """Stage ``name``'s single reduction axis k split as k = ko * factor + ki, with the partial results over ko
    kept for each ki in a new stage ``name.rf`` (a space axis there, to parallelise or vectorise) and combined
    over ki by ``name``. This reassociates the reduction: not bit-exact against the sequential order."""
    st = dag.stage(name)
    if len(st.reduce) != 1:
        raise ValueError(f"rfactor needs one reduction axis; stage {name} has {len(st.reduce)}")
    k = st.reduce[0]
    if factor < 2 or k.extent % factor:
        raise ValueError(f"rfactor factor {factor} must be >= 2 and divide the reduction extent {k.extent}")
    ko, ki = Axis(f"{k.name}_o", k.extent // factor), Axis(f"{k.name}_i", factor)
    sub = {k.name: Affine.of(ko.name) * factor + ki.name}
    body = rewrite(st.body, lambda ld: Load(ld.tensor, tuple(i.subst(sub) for i in ld.index), ld.fill))
    rf = Stage(f"{name}_rf", (*st.axes, ki), body, (ko,), st.combiner)
    final = Stage(name, st.axes, Load(rf.name, (*st.identity_index, Affine.of(ki.name))), (ki,), st.combiner)
    stages: list[Stage] = []
    for s in dag.stages:
        stages += [rf, final] if s is st else [s]
    return dag.with_stages(stages)
