"""The hardware environment the compiler targets: ``Environment(cfg)`` and ``get_env()``.

As in VTA, an Environment is a context manager that makes itself current for the ``with`` block;
outside any block ``get_env()`` is the default preset. The current environment lives in a context
variable (not a process global), so threads and async tasks each see their own.
"""

from __future__ import annotations

import contextvars
import os

from hw_config import HwConfig, load_config

_current: contextvars.ContextVar[Environment | None] = contextvars.ContextVar("vta_env", default=None)


class Environment:
    """A hardware configuration as the compiler sees it; attributes fall through to the ``HwConfig``."""

    def __init__(self, cfg: HwConfig | str | None = None, **overrides):
        self.cfg = load_config(cfg, **overrides) if not isinstance(cfg, HwConfig) or overrides else cfg
        self._tokens: list[contextvars.Token] = []

    def __getattr__(self, name: str):
        return getattr(self.cfg, name)

    def __enter__(self) -> Environment:
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


def config_of(env: Environment | HwConfig | str | None) -> HwConfig:
    """The hardware config behind an ``env`` argument: an Environment, an HwConfig, a preset name or
    JSON path, or None for the current environment (what every public function taking ``env`` accepts)."""
    if env is None:
        return get_env().cfg
    if isinstance(env, HwConfig):
        return env
    if isinstance(env, (str, os.PathLike)):
        return load_config(env)
    cfg = getattr(env, "cfg", None)   # an Environment (or anything carrying one, as the old ``env.cfg`` callers took)
    if cfg is None:
        raise TypeError(f"env: an Environment, a HwConfig, a preset name or a config file's path (or None for the "
                        f"current one), not {type(env).__name__} {env!r:.60}")
    return cfg
