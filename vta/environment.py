"""The hardware environment the compiler targets: ``Environment(cfg)`` and ``get_env()``.

As in VTA, an Environment is a context manager that makes itself current for the ``with`` block;
outside any block ``get_env()`` is the default preset. The current environment lives in a context
variable (not a process global), so threads and async tasks each see their own.
"""

from __future__ import annotations

import contextvars
from typing import Self

from hw_config import HwConfig, load_config

_current: contextvars.ContextVar[Environment | None] = contextvars.ContextVar("vta_env", default=None)


class Environment:
    """A hardware configuration as the compiler sees it; attributes fall through to the ``HwConfig``."""

    def __init__(self, cfg: HwConfig | str | None = None, **overrides):
        self.cfg = load_config(cfg, **overrides) if not isinstance(cfg, HwConfig) or overrides else cfg
        self._tokens: list[contextvars.Token] = []

    def __getattr__(self, name: str):
        return getattr(self.cfg, name)

    def __enter__(self) -> Self:
        self._tokens.append(_current.set(self))
        return self

    def __exit__(self, *exc) -> None:
        _current.reset(self._tokens.pop())

    def __repr__(self) -> str:
        return f"Environment({self.cfg.model})"


_default: Environment | None = None


def get_env() -> Environment:
    """The innermost ``with Environment(...)``, else the default preset's environment."""
    env = _current.get()
    if env is not None:
        return env
    global _default
    if _default is None:
        _default = Environment()
    return _default
