"""The memory-packing model (hardware/fpga/memory.py) against Yosys's own memory_libmap, on memory shapes.

Every shape becomes one Verilog module holding one memory with the generator's port structure (one write port,
``reads`` synchronous read ports, ``transparent`` of them transparent to the write port); Yosys ``synth_xilinx``
maps them per family, in runs of at most 4 Mbit of memory each (Yosys's early passes slow down on many megabits),
and each module's block RAMs, distributed-RAM LUTs and flip-flops are compared with the model's. Prints one line
per shape and the count of mismatches (0 is the claim docs/co-design.md makes).

``--shapes`` picks the shapes: ``vta`` (the default) the 140 shapes the configs' SRAMs, queues and FIFOs take,
39 Mbit in 12 Yosys runs per family: slow, more than 5 minutes per family on a 2-core machine at load 2 (8 of
xc7's 12 runs took 5 minutes, one of them 82 s; not timed to the end), so count on 15 minutes or more for the
two default families; ``grid`` 80 random shapes and ``edge`` 10 shapes where the model's finer points decide,
one Yosys run per family each (edge: 8 s for xc7).

    python bench/fpga_memory_check.py [--family xc7 xcup] [--shapes vta|grid|edge] [--keep DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

from _host import run_main

from hardware.fpga.memory import MemShape, map_memory
from hardware.fpga.resources import Resources
from hardware.fpga.synth import parse_stat, run_script


def memory_verilog(shapes: list[MemShape]) -> str:
    """One module per shape, in the style Amaranth's Verilog backend writes the generator's SRAMs (a ``reg``
    array, one write ``always`` block, each read port a register loaded under its enable, a transparent one
    taking the write data on an address match), and a top module ``mems`` instantiating them all. Written here
    rather than through Amaranth, whose Verilog spells out every entry's zero initial value (minutes for a
    megabit memory)."""
    out = []
    for i, s in enumerate(shapes):
        a = max(1, (s.depth - 1).bit_length())
        ports = ["clk", "wen", "waddr", "wdata"] + [f"{n}{r}" for r in range(s.reads) for n in ("ren", "raddr", "rdata")]
        lines = [f"module m{i}({', '.join(ports)});", "  input clk, wen;", f"  input [{a - 1}:0] waddr;",
                 f"  input [{s.width - 1}:0] wdata;"]
        for r in range(s.reads):
            lines += [f"  input ren{r};", f"  input [{a - 1}:0] raddr{r};", f"  output reg [{s.width - 1}:0] rdata{r};"]
        lines += [f"  reg [{s.width - 1}:0] mem [{s.depth - 1}:0];",
                  "  always @(posedge clk) begin", "    if (wen)", "      mem[waddr] <= wdata;", "  end"]
        if s.sync:
            lines += ["  always @(posedge clk) begin"]
            for r in range(s.reads):
                lines += [f"    if (ren{r}) begin", f"      rdata{r} <= mem[raddr{r}];"]
                if r < s.transparent:
                    lines += [f"      if (wen && raddr{r} == waddr)", f"        rdata{r} <= wdata;"]
                lines += ["    end"]
            lines += ["  end"]
        else:       # asynchronous reads (Amaranth's SyncFIFO); ``ren`` unused
            lines = [x.replace("output reg", "output") for x in lines]
            lines += [f"  assign rdata{r} = mem[raddr{r}];" for r in range(s.reads)]
        lines += ["endmodule", ""]
        out += lines
    # the top: every instance input is a slice of one wide input port (a shift register feeding them would be a
    # chain long enough to exhaust the WebAssembly Yosys's stack), every output xor-reduced into one bit
    width = sum(1 + max(1, (s.depth - 1).bit_length()) * (1 + s.reads) + s.width + s.reads for s in shapes)
    top = ["module mems(clk, d, q);", "  input clk;", f"  input [{width - 1}:0] d;", "  output q;"]
    xors = []
    base = 0
    for i, s in enumerate(shapes):
        a = max(1, (s.depth - 1).bit_length())
        conns = [".clk(clk)", f".wen(d[{base}])", f".waddr(d[{base + a}:{base + 1}])",
                 f".wdata(d[{base + a + s.width}:{base + a + 1}])"]
        pos = base + a + s.width + 1
        for r in range(s.reads):
            top += [f"  wire [{s.width - 1}:0] out{i}_{r};"]
            conns += [f".ren{r}(d[{pos}])", f".raddr{r}(d[{pos + a}:{pos + 1}])", f".rdata{r}(out{i}_{r})"]
            pos += 1 + a
            xors.append(f"^out{i}_{r}")
        base = pos
        top += [f"  m{i} u{i}({', '.join(conns)});"]
    top += [f"  assign q = {' ^ '.join(xors)};", "endmodule", ""]
    return "\n".join(out + top)


def vta_shapes() -> list[MemShape]:
    """Shapes the accelerator's SRAMs and queues take over the configs hw_config accepts (int8/int32)."""
    out = []
    for depth in (2, 4, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384):
        out.append(MemShape(f"uop_{depth}", depth, 32))
    for width, depth in itertools.product((64, 128, 256, 512, 1024, 2048), (2, 16, 64, 256, 1024, 2048)):
        out.append(MemShape(f"inp_{width}x{depth}", depth, width))
        out.append(MemShape(f"acc3_{width}x{depth}", depth, width * 4, 3, 2))
        out.append(MemShape(f"acc2_{width}x{depth}", depth, width * 4, 2, 1))
    for width, depth in itertools.product((512, 2048, 8192), (2, 64, 256, 1024)):
        out.append(MemShape(f"wgt_{width}x{depth}", depth, width))
    for depth in (1, 3, 7, 15, 31, 63, 127, 255, 511, 1023):
        out.append(MemShape(f"queue_{depth}", depth, 128))
    for depth in (64, 128, 256, 512, 1024, 8192):       # the arbiter's tag FIFOs (asynchronous reads)
        out.append(MemShape(f"tags_{depth}", depth, 3, sync=False))
    for width, depth in itertools.product((2, 3, 5), (31, 63, 127, 255)):    # element readers' lane FIFOs
        out.append(MemShape(f"lanes_{width}x{depth}", depth, width))
    return [s for s in out if s.depth * s.width * s.reads <= 2 * 1024 * 1024]


def edge_shapes() -> list[MemShape]:
    """Shapes where the model's finer points decide: several rows of cells sharing 9-bit bytes (non-power-of-two
    depths), asynchronous reads, transparency, one-entry memories."""
    return [MemShape("e3000x27", 3000, 27), MemShape("e3000x37", 3000, 37), MemShape("e3000x37r2", 3000, 37, 2, 1),
            MemShape("e3000x27r2", 3000, 27, 2, 0), MemShape("e5000x19", 5000, 19), MemShape("e600x100", 600, 100),
            MemShape("e128x3a", 128, 3, 1, 0, False), MemShape("e1024x3a", 1024, 3, 2, 0, False),
            MemShape("e1x128", 1, 128), MemShape("e2x9r2t1", 2, 9, 2, 1)]


def grid_shapes(n: int = 80, seed: int = 0) -> list[MemShape]:
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        width = rng.choice([1, 2, 3, 5, 8, 9, 16, 18, 24, 32, 36, 48, 64, 72, 100, 128, 200, 256, 512])
        depth = rng.choice([1, 2, 3, 5, 16, 31, 32, 33, 64, 100, 128, 255, 256, 512, 1000, 1024, 2048, 4096, 8192])
        reads = rng.choice([1, 1, 2, 3])
        sync = rng.random() < 0.8
        s = MemShape(f"g{len(out)}_{width}x{depth}r{reads}{'' if sync else 'a'}", depth, width, reads,
                     rng.randint(0, reads) if sync else 0, sync)
        if s.depth * s.width * s.reads <= 1024 * 1024:
            out.append(s)
    return out


def chunks(shapes: list[MemShape], bits: int = 4 * 1024 * 1024) -> list[list[MemShape]]:
    """Shapes in groups of at most ``bits`` memory bits: Yosys's early passes slow down on many megabits."""
    out: list[list[MemShape]] = [[]]
    held = 0
    for s in shapes:
        size = s.depth * s.width * s.reads
        if out[-1] and held + size > bits:
            out.append([])
            held = 0
        out[-1].append(s)
        held += size
    return out


def measure(shapes: list[MemShape], family: str, work: Path) -> dict[str, Resources]:
    work.mkdir(parents=True, exist_ok=True)
    (work / "mems.v").write_text(memory_verilog(shapes))
    synth = f"synth_xilinx -family {family} -top mems -noiopad -noclkbuf -run begin:map_luts"
    script = f"read_verilog mems.v\n{synth}\ntee -q -o stat.json stat -json\n"
    seconds = run_script(work, script, progress=lambda t: print(f"  {t}", file=sys.stderr), what="Yosys")
    print(f"  {family}: {len(shapes)} memories mapped in {seconds:.0f} s", file=sys.stderr)
    modules = parse_stat(json.loads((work / "stat.json").read_text()))
    out = {}
    for i, s in enumerate(shapes):
        cells: dict[str, int] = {}
        for name, c in modules.items():
            if name == f"m{i}":
                for t, n in c.items():
                    cells[t] = cells.get(t, 0) + n
        out[s.name] = Resources.from_cells(cells)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", nargs="+", default=["xc7", "xcup"], help="FPGA families (default: xc7 xcup)")
    ap.add_argument("--shapes", choices=["vta", "grid", "edge"], default="vta",
                    help="vta: the configs' memory shapes, 12 Yosys runs per family, slow (the default); grid: 80 "
                         "random shapes; edge: 10 edge cases (one run per family each)")
    ap.add_argument("--keep", default=None, help="keep Yosys's work files in this directory")
    args = ap.parse_args(argv)
    shapes = {"vta": vta_shapes, "grid": grid_shapes, "edge": edge_shapes}[args.shapes]()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="vta-memcheck-"))
    bad = 0
    try:
        for family in args.family:
            got = {}
            for i, chunk in enumerate(chunks(shapes)):
                got.update(measure(chunk, family, root / family / str(i)))
            for s in shapes:
                model = map_memory(s, family)
                y = got[s.name]
                # Yosys's memory_map leaves a logic-mapped memory as flip-flops plus a read mux; compare its FFs
                same = (model.bram36, model.bram18) == (y.bram36, y.bram18) and model.lut == y.lutram and \
                    (model.kind != "logic" or y.ff >= model.ff)
                bad += not same
                print(f"{family:5} {s.name:22} {s.depth:6} x {s.width:5} r{s.reads}t{s.transparent}{' ' if s.sync else 'a'}  model "
                      f"{model.option:14} 36:{model.bram36:4} 18:{model.bram18:4} lutram:{model.lut:5}  yosys "
                      f"36:{y.bram36:4} 18:{y.bram18:4} lutram:{y.lutram:5.0f} ff:{y.ff:6.0f}"
                      f"{'' if same else '   <-- differs'}")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{bad} of {len(shapes) * len(args.family)} shapes differ from Yosys")
    return 1 if bad else 0


if __name__ == "__main__":
    run_main(main)
