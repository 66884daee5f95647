"""The accelerator's RTL, generated from a hardware config (Amaranth), and its cycle-by-cycle simulation
(Verilator, through cffi). Imports hw_config only; the toolchain is the optional extra ``[hw]``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hardware.toolchain import ToolchainMissing

if TYPE_CHECKING:
    from hw_config import HwConfig

__all__ = ["RtlDevice", "RtlError", "ToolchainMissing", "generate", "manifest"]


def generate(cfg: HwConfig | str, max_products: int | None = None, dsp_packing: bool | None = None) -> str:
    """Verilog of the accelerator for ``cfg``; a GEMM core of more than ``max_products`` int8 products (default
    8,192: larger ones take minutes and gigabytes) is refused first. ``dsp_packing``: two int8 products per DSP
    multiplier (hardware/dsp_packing.py); None: the config's default, on for the Xilinx boards' TARGETs."""
    from hardware.generator import DEFAULT_MAX_PRODUCTS
    from hardware.generator import generate as _generate
    return _generate(cfg, DEFAULT_MAX_PRODUCTS if max_products is None else max_products, dsp_packing)


def manifest(cfg: HwConfig | str, dsp_packing: bool | None = None) -> dict:
    """The generated design's description: config, ports, register map, SRAM shapes, GEMM core (with
    ``dsp_packing``: None, the config's default)."""
    from hardware.generator import manifest as _manifest
    return _manifest(cfg, dsp_packing)


def __getattr__(name: str):
    if name in ("RtlDevice", "RtlError"):
        from hardware import device
        return getattr(device, name)
    raise AttributeError(f"module 'hardware' has no attribute {name!r}")
