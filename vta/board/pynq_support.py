"""The one import point for the optional ``pynq`` extra (pynq, and the grpc/protobuf it pins).

The core install and ``vta run`` never import this module's targets; board code calls these functions
where it needs them, so a machine without the extra gets one clear message instead of a traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

PYNQ_EXTRA = "pip install 'vta-stack[pynq]'"


def _missing(what: str, exc: ImportError) -> ImportError:
    return ImportError(f"{what} needs the optional pynq package, which is not installed or does not import "
                       f"({exc}); install it with: {PYNQ_EXTRA} (pynq 4.0.0: numpy<2, grpcio 1.64)")


def import_pynq(what: str = "the Pynq device") -> ModuleType:
    """``import pynq``, or an ImportError naming the extra to install."""
    try:
        return importlib.import_module("pynq")
    except ImportError as exc:
        raise _missing(what, exc) from exc


def import_remote(what: str = "the simulated PYNQ board") -> tuple[ModuleType, dict[str, ModuleType]]:
    """``grpc`` and pynq's remote-device protocol modules: {"remote_device"|"mmio"|"buffer": (pb2, pb2_grpc)}."""
    try:
        grpc = importlib.import_module("grpc")
        mods = {}
        for name in ("remote_device", "mmio", "buffer"):
            mods[name] = importlib.import_module(f"pynq.remote.{name}_pb2")
            mods[name + "_grpc"] = importlib.import_module(f"pynq.remote.{name}_pb2_grpc")
    except ImportError as exc:
        raise _missing(what, exc) from exc
    return grpc, mods
