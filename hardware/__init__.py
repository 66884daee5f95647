"""The accelerator's RTL, generated from a hardware config (Amaranth), and its cycle-by-cycle simulation
(Verilator, through cffi). Imports hw_config only; the toolchain is the optional extra ``[hw]``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hardware.toolchain import ToolchainMissing

if TYPE_CHECKING:
    from hw_config import HwConfig

__all__ = ["RtlDevice", "RtlError", "ToolchainMissing", "generate", "manifest"]


def generate(cfg: HwConfig | str, max_products: int | None = None) -> str:
    """Verilog of the accelerator for ``cfg``; a GEMM core of more than ``max_products`` int8 products (default
    8,192: larger ones take minutes and gigabytes) is refused first."""
    from hardware.generator import DEFAULT_MAX_PRODUCTS
    from hardware.generator import generate as _generate
    return _generate(cfg, DEFAULT_MAX_PRODUCTS if max_products is None else max_products)


def manifest(cfg: HwConfig | str) -> dict:
    """The generated design's description: config, ports, register map, SRAM shapes."""
    from hardware.generator import manifest as _manifest
    return _manifest(cfg)


def __getattr__(name: str):
    if name in ("RtlDevice", "RtlError"):
        from hardware import device
        return getattr(device, name)
    raise AttributeError(f"module 'hardware' has no attribute {name!r}")
