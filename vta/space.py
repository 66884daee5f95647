"""Knob spaces of operator templates, with AutoTVM's conventions.

A split knob over an extent takes ``[outer, inner]`` with ``outer * inner == extent`` (every exact
factorisation, as AutoTVM's ``define_split(num_outputs=2)``); a choice knob takes one of its values.
A space enumerates the product of its knobs in a fixed order, so an index names a config.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from math import isqrt, prod
from typing import Any

import numpy as np

from hw_config.checks import is_whole

Config = dict[str, Any]


class KnobError(ValueError):
    """A config that is not a point of the space: unknown knob, missing knob or value not allowed."""


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order, found in O(sqrt(n)) steps (pairs ``d``, ``n // d``)."""
    small = [d for d in range(1, isqrt(n) + 1) if n % d == 0] if n > 0 else []
    return small + [n // d for d in reversed(small) if d * d != n]


@dataclass(frozen=True)
class Knob:
    name: str
    options: tuple  # allowed values; split options are (outer, inner) tuples

    @staticmethod
    def split(name: str, extent: int) -> Knob:
        return Knob(name, tuple((extent // f, f) for f in divisors(extent)))

    @staticmethod
    def choice(name: str, values: Sequence) -> Knob:
        return Knob(name, tuple(values))

    @property
    def is_split(self) -> bool:
        return bool(self.options) and isinstance(self.options[0], tuple)

    def normalize(self, value: Any) -> Any:
        """``value`` as the option it names (a split as an (outer, inner) tuple), or a KnobError naming the knob
        and the allowed values. Only integers name options (numpy's too): 2.0, "2" and True are refused, not
        coerced, so a config is applied as written or not at all."""
        if self.is_split:
            ok = isinstance(value, (list, tuple)) and all(is_whole(x) for x in value)
            v = tuple(int(x) for x in value) if ok else None
        else:   # (every template's choices are integers; a space of other values takes them as they are)
            ok = is_whole(value) or not all(is_whole(o) for o in self.options)
            v = int(value) if is_whole(value) else value
        if not ok or v not in self.options:
            shown = [list(o) for o in self.options] if self.is_split else list(self.options)
            kind = " (knob values are integers)" if not ok else ""
            raise KnobError(f"knob {self.name}={_short(value)} is not allowed{kind}; allowed: {shown}")
        return v


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class ConfigSpace:
    """The product of a template's knobs; ``space[i]`` is a config dict with splits as [outer, inner]."""

    def __init__(self, knobs: Sequence[Knob]):
        self.knobs = tuple(knobs)
        self._by_name = {k.name: k for k in self.knobs}

    def __len__(self) -> int:
        return prod(len(k.options) for k in self.knobs)

    def __getitem__(self, index: int) -> Config:
        if not -len(self) <= index < len(self):
            raise IndexError(f"config index {index} outside a space of {len(self)}")
        index %= len(self)
        config = {}
        for knob in reversed(self.knobs):  # the last knob varies fastest
            index, r = divmod(index, len(knob.options))
            value = knob.options[r]
            config[knob.name] = list(value) if knob.is_split else value
        return {k.name: config[k.name] for k in self.knobs}

    def __iter__(self) -> Iterator[Config]:
        return (self[i] for i in range(len(self)))

    def column(self, name: str) -> np.ndarray:
        """Knob ``name``'s value at every index of the space, in index order: shape (len,) for a choice of
        numbers, (len, 2) [outer, inner] for a split (what ``space[i][name]`` holds, for all i at once)."""
        stride = 1
        for knob in reversed(self.knobs):   # the last knob varies fastest
            if knob.name == name:
                options = np.asarray(knob.options)
                return options[np.arange(len(self)) // stride % len(options)]
            stride *= len(knob.options)
        raise KnobError(f"unknown knob {name!r}; this space's knobs: {[k.name for k in self.knobs]}")

    def index_of(self, config: Config) -> int:
        norm = self.normalize(config)
        index = 0
        for knob in self.knobs:
            index = index * len(knob.options) + knob.options.index(norm[knob.name])
        return index

    def normalize(self, config: Config) -> dict[str, Any]:
        """Check a config against the space; splits become tuples. Raises KnobError naming the knob."""
        if not isinstance(config, dict):
            raise KnobError(f"a config is a dict of knob values, got {type(config).__name__}")
        unknown = set(config) - set(self._by_name)
        if unknown:
            raise KnobError(f"unknown knob(s) {sorted(unknown)}; this template's knobs: {list(self._by_name)}")
        missing = [k for k in self._by_name if k not in config]
        if missing:
            raise KnobError(f"missing knob(s) {missing}")
        return {name: knob.normalize(config[name]) for name, knob in self._by_name.items()}

    def sample(self, rng: np.random.Generator, n: int) -> list[Config]:
        """``n`` distinct configs drawn uniformly (all of them if the space is smaller)."""
        picks = rng.choice(len(self), size=min(n, len(self)), replace=False)
        return [self[int(i)] for i in picks]

    def __repr__(self) -> str:
        return "ConfigSpace(" + ", ".join(f"{k.name}: {len(k.options)}" for k in self.knobs) + f"; {len(self)})"
