"""Tier 2 of the resource estimates: an analytic model of what Yosys's ``synth_xilinx`` makes of the generated
RTL, in milliseconds.

The model follows the generator's structure: ``instances(cfg)`` lists every module Amaranth writes (the names are
Yosys's, ``vta_core.load.inp.reader``), each of a class (a DMA engine, an element reader, a FIFO, the GEMM/ALU
loop, ...) with the parameters that size it (element and bus widths, SRAM address bits, depths, lanes). Then:

- memories (the four SRAMs, the FIFOs' storage) are mapped exactly as Yosys's memory_libmap maps them
  (hardware/fpga/memory.py): block RAM, distributed RAM or flip-flops;
- DSP slices are counted: one per int8 x int8 product of the GEMM core, or one per two with the generator's DSP
  packing (hardware/dsp_packing.py: the RTL itself makes the two products in one multiplier, which Yosys maps to
  one DSP48; on by default for Xilinx boards), and per ALU lane with MUL (only the fsim capability set builds it)
  what its 32 x 32 multiplier takes (3, on both families; coefficients.py has the fitted figures);
- the rest, LUTs and flip-flops of logic, is linear per class in a few features of its parameters (bits of a data
  path, bits of a mux times its fan-in, address bits, a constant), with coefficients fitted by least squares to
  Yosys's per-module figures over a sample of configs (bench/fpga_fit.py, which writes coefficients.py and
  reports the accuracy on held-out configs).

When a part has fewer DSP slices than the design's multipliers, a vendor flow would have to build the rest from
LUTs (Vivado's ``-max_dsp``); ``fit_part`` moves GEMM multipliers first (about 200 LUTs each; an ALU lane's
32-bit multiplier costs about 1,100 for the 3 DSPs it frees), then ALU lanes, at the per-multiplier LUT costs
measured with ``synth_xilinx -nodsp``, and says so.

The split of the GEMM/ALU loop's row into the GEMM core, the lanes and the micro-op loop is read off the fitted
terms (Yosys synthesises the loop as one module). The ``alu_lane`` figures in coefficients.py (one AluLane
synthesised alone) are a cross-check of the per-lane term, not used here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hardware.fpga.memory import MemMapping, MemShape, map_memory
from hardware.fpga.parts import Part
from hardware.fpga.resources import SRAMS, Resources, row_of, total
from hw_config import HwConfig

INSN_BITS = 128
ARBITER_CLIENTS = 7          # hardware/params.py's DRAM_CLIENTS


@dataclass(frozen=True)
class Instance:
    """One module of the generated RTL: its Yosys name, its class, what sizes it, the memories inside it."""

    module: str
    cls: str
    params: dict[str, float] = field(default_factory=dict)
    memories: tuple[MemShape, ...] = ()

    @property
    def row(self) -> str:
        return row_of(self.module)


def _log2(n: int) -> int:
    return max(0, (n - 1).bit_length())


def rtl_structure(cfg: HwConfig) -> dict:
    """The generator's own choices the model needs, read from hardware/params.py and the capability set (so a
    change there shows here): DMA depth in flight, the accumulator SRAM's read ports, which compute loads and
    ALU opcodes are built."""
    from hardware.params import RtlParams
    p = RtlParams(cfg)
    caps = cfg.capabilities
    return {"outstanding": p.outstanding,
            # the accumulator SRAM's read ports (hardware/core.py): compute's alone, not transparent (STORE reads
            # the output buffer)
            "acc_reads": 1, "acc_transparent": 0, "out_buffer": True,
            "compute_loads": tuple(k for k in ("UOP", "ACC", "ACC_8BIT") if k in caps.compute_loads),
            "padded_loads": frozenset(caps.padded_loads), "uop_load_rows": caps.uop_load_rows,
            "alu_mul": "MUL" in caps.alu_opcodes}


# The memories of the generator before STORE got its output buffer (2026-12-07): the accumulator read by compute
# (transparent to the write port) and by STORE. tests/data/fpga_yosys_samples.json was synthesised from it, so the
# held-out test holds the model to those samples with this structure (``estimate(..., structure=...)``).
BEFORE_OUTPUT_BUFFER = {"acc_reads": 2, "acc_transparent": 1, "out_buffer": False}


def instances(cfg: HwConfig, structure: dict | None = None) -> list[Instance]:
    """Every module of the RTL the generator writes for ``cfg`` (hardware/core.py, modules.py, dma.py, dram.py,
    fetch.py, loop_engine.py, token_queue.py), with the parameters the model's classes use."""
    from hardware.params import RtlParams
    p = RtlParams(cfg)
    rtl = {**rtl_structure(cfg), **(structure or {})}
    bus, s = p.bus_bits, p.srams
    outstanding = rtl["outstanding"]
    burst = {"burst_bits": _log2(cfg.DMA_BURST_BEATS + 1) + _log2(cfg.DMA_BURST_GAP + 1)}
    out: list[Instance] = []

    def fifo(module: str, width: int, depth: int, cls: str = "fifo", buffered: bool = True) -> None:
        """amaranth.lib.fifo: SyncFIFOBuffered keeps depth - 1 entries in a memory read synchronously (plus an
        output register); SyncFIFO keeps depth entries read asynchronously."""
        entries = depth - 1 if buffered else depth
        mems = (MemShape(module, entries, width, sync=buffered),) if entries >= 1 and depth >= 2 else ()
        out.append(Instance(module, cls, {"width": width, "depth": depth, "log_depth": _log2(depth),
                                          "reg_bits": width if depth == 1 else 0}, mems))

    def reader(module: str, elem: int) -> None:
        lanes = bus // elem if elem < bus else 1
        beats = elem // bus if elem >= bus else 1
        out.append(Instance(module, "reader", {"elem": elem, "bus": bus, "lanes": lanes, "beats": beats,
                                               "log_outstanding": _log2(outstanding + 1)}))
        if lanes > 1:
            fifo(module + ".lanes", _log2(lanes) + 1, outstanding, cls="lanes")

    def load2d(module: str, kind: str, sram: str) -> None:
        elem = p.dram_elem_bits(kind)
        padded = kind in rtl["padded_loads"] and (kind != "UOP" or rtl["uop_load_rows"])
        out.append(Instance(module, "load2d", {"elem": elem, "addr_bits": s[sram].addr_bits,
                                               "padded": float(padded), **burst}))
        reader(module + ".reader", elem)

    srams = tuple(MemShape(name, s[name].depth, s[name].width,
                           rtl["acc_reads"] if name == "acc" else 1,
                           rtl["acc_transparent"] if name == "acc" else 0) for name in SRAMS
                  if name != "out" or rtl["out_buffer"])
    out.append(Instance("vta_core", "top", {"acc_bits": s["acc"].width, "transparent": rtl["acc_transparent"],
                                            "acc_addr_bits": s["acc"].addr_bits}, srams))
    # a client whose engine the capability set leaves out is constant: Amaranth's netlist drops its logic
    # (the fit predates the split into a readers' and a writer's arbiter with register slices: the readers'
    # carries the clients' term, the slices are counted from their structure, MEASURED_CLASSES)
    clients = ARBITER_CLIENTS - sum(k not in rtl["compute_loads"] for k in ("UOP", "ACC", "ACC_8BIT"))
    cmd_bits = 64 + 1 + bus + bus // 8 + 1 + 8 + 3                  # hardware/dram.py CMD_FIELDS
    for side, n in (("rd", ARBITER_CLIENTS - 1), ("wr", 1)):
        # the single arbiter's fitted cost goes to the readers' one; the writer's (one client: no choice to
        # make, the slices around it) is counted with the slices
        out.append(Instance(f"vta_core.arbiter_{side}", "arbiter", {"bus": bus, "clients": clients}) if side == "rd"
                   else Instance(f"vta_core.arbiter_{side}", "skid", {"width": 0}))
        for i in range(n):
            out.append(Instance(f"vta_core.arbiter_{side}.in{i}", "skid", {"width": cmd_bits}))
        out.append(Instance(f"vta_core.arbiter_{side}.out", "skid", {"width": cmd_bits + 3}))
        out.append(Instance(f"vta_core.arbiter_{side}.rsp", "skid", {"width": bus + 1 + 3}))
    # the bus interfaces (hardware/axi.py): the AXI4 master and the four AXI4-Lite register slaves
    out.append(Instance("vta_core.axi", "axi_master", {"bus": bus}))
    out.append(Instance("vta_core.axi_lite", "axi_lite", {"ports": 4}))
    out.append(Instance("vta_core.counters", "counters", {"uop_bits": s["uop"].addr_bits + 1}))
    out.append(Instance("vta_core.fetch", "fetch", {"bus": bus, "log_prefetch": _log2(outstanding + 1)}))
    fifo("vta_core.fetch.buffer", INSN_BITS, outstanding)
    reader("vta_core.fetch.reader", INSN_BITS)
    for module in ("load", "compute", "store"):
        fifo(f"vta_core.{module}.queue", INSN_BITS, cfg.INSN_QUEUE_DEPTH)
    out.append(Instance("vta_core.load", "sequencer", {"engines": 2}))
    load2d("vta_core.load.inp", "INP", "inp")
    load2d("vta_core.load.wgt", "WGT", "wgt")
    loads = rtl["compute_loads"]
    acc_writers = sum(k in loads for k in ("ACC", "ACC_8BIT"))
    out.append(Instance("vta_core.compute", "compute", {"acc_bits": s["acc"].width, "acc_writers": acc_writers,
                                                        "acc_addr_bits": s["acc"].addr_bits,
                                                        "engines": len(loads) + 1}))
    for kind, sram in (("UOP", "uop"), ("ACC", "acc"), ("ACC_8BIT", "acc")):
        if kind in loads:
            load2d(f"vta_core.compute.{kind.lower()}", kind, sram)
    lanes = p.batch * p.block_out
    out.append(Instance("vta_core.compute.loop", "loop", {
        "lanes": lanes, "macs": lanes * p.block_in, "alu_mul": float(rtl["alu_mul"]),
        "acc_bits": s["acc"].width,
        "idx_bits": s["acc"].addr_bits + s["inp"].addr_bits + s["wgt"].addr_bits + s["uop"].addr_bits}))
    out.append(Instance("vta_core.store", "sequencer", {"engines": 1}))
    out_bits = lanes * p.out_width
    out.append(Instance("vta_core.store.store", "store2d", {"out_bits": out_bits, "addr_bits": s["acc"].addr_bits,
                                                           "log_outstanding": _log2(outstanding + 1), **burst}))
    out.append(Instance("vta_core.store.store.writer", "writer", {
        "elem": out_bits, "bus": bus, "lanes": bus // out_bits if out_bits < bus else 1,
        "beats": out_bits // bus if out_bits >= bus else 1}))
    for q in ("g2l", "g2s", "l2g", "s2g"):
        out.append(Instance(f"vta_core.tokens_{q}", "token", {"depth": cfg.TOKEN_QUEUE_DEPTH,
                                                              "count_bits": _log2(cfg.TOKEN_QUEUE_DEPTH + 1)}))
    return out


def _mux(fan_in: float) -> float:
    """LUT6s per output bit of a ``fan_in``:1 multiplexer as Yosys builds it without wide-mux cells (each
    LUT6 merges 3 more inputs): 1 for 2-4 inputs, 3 for 8, 5 for 16."""
    return math.ceil((fan_in - 1) / 3) if fan_in > 1 else 0


def features(inst: Instance) -> tuple[dict[str, float], dict[str, float]]:
    """(LUT features, FF features) of a module's logic, its memories aside."""
    q = inst.params
    one = {"1": 1.0}
    match inst.cls:
        case "top":
            return {**one, "bypass": q["acc_bits"] * q["transparent"]}, one
        case "arbiter":
            # readers' write data is constant 0, so the command mux carries addresses and control, not data; the
            # store's write data costs LUTs of its own only beside a seventh client (ACC_8BIT loads; measured)
            return {**one, "clients": q["clients"], "bus_x_extra": q["bus"] * (q["clients"] - 6)}, one
        case "fetch":
            return {**one, "log_prefetch": q["log_prefetch"]}, {**one, "log_prefetch": q["log_prefetch"]}
        case "sequencer":
            return {**one, "engines": q["engines"]}, {**one, "engines": q["engines"]}
        case "compute":
            return ({**one, "acc_mux": q["acc_bits"], "engines": q["engines"]}, {**one, "engines": q["engines"]})
        case "fifo" | "lanes" | "tags":
            return ({**one, "log_depth": q["log_depth"]},
                    {**one, "log_depth": q["log_depth"], "reg_bits": q["reg_bits"]})
        case "reader":
            narrow = q["elem"] < q["bus"]
            # a narrow element is a lane of the beat just received or of the one held (a variable word select:
            # Yosys spends about lanes - 1 LUTs per element bit on it)
            return ({**one, "mux": q["elem"] * (q["lanes"] - 1) if narrow else 0.0, "narrow": float(narrow)},
                    {**one, "buffer": 0.0 if narrow else q["elem"], "narrow": float(narrow),
                     "held": q["bus"] if narrow else 0.0, "log_outstanding": q["log_outstanding"]})
        case "load2d":
            return ({**one, "data": q["elem"], "addr_bits": q["addr_bits"], "padded": q["padded"],
                     "burst_bits": q["burst_bits"]},
                    {**one, "addr_bits": q["addr_bits"], "burst_bits": q["burst_bits"]})
        case "store2d":
            return ({**one, "out_bits": q["out_bits"], "addr_bits": q["addr_bits"], "burst_bits": q["burst_bits"]},
                    {**one, "addr_bits": q["addr_bits"], "log_outstanding": q["log_outstanding"],
                     "burst_bits": q["burst_bits"]})
        case "writer":
            wide = q["elem"] > q["bus"]
            return ({**one, "mux": q["bus"] * _mux(q["beats"]) if wide else 0.0, "lanes_log": _log2(int(q["lanes"]))},
                    {**one, "beats_log": _log2(int(q["beats"]))})
        case "loop":
            return ({**one, "lanes": q["lanes"], "mul_lanes": q["lanes"] * q["alu_mul"], "macs": q["macs"]},
                    {**one, "acc_bits": q["acc_bits"], "idx_bits": q["idx_bits"]})
        case "token":
            return {**one, "count_bits": q["count_bits"]}, {"count_bits": q["count_bits"]}
        case "axi_master" | "axi_lite":
            return one, one
        case "counters":
            return {**one, "uop_bits": q["uop_bits"]}, {**one, "uop_bits": q["uop_bits"]}
        case "skid":
            return {**one, "width": q["width"]}, {**one, "width": q["width"]}
    raise ValueError(f"no features for class {inst.cls!r} ({inst.module})")


def dsp_count(cfg: HwConfig, family: str, coefficients: dict | None = None,
              dsp_packing: bool | None = None) -> tuple[int, int]:
    """(GEMM core DSPs, ALU DSPs): one per int8 product (one per two with DSP packing; None: the config's
    default), and the family's DSPs per ALU lane that has MUL (the capability sets of VTA's bitstreams have none:
    only fsim's builds it)."""
    from hardware.dsp_packing import resolve_packing
    c = (coefficients or _coefficients())[family]["dsp"]
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    mul = "MUL" in cfg.capabilities.alu_opcodes
    per_multiplier = 2 if resolve_packing(cfg, dsp_packing) else 1
    return (int(c["per_mac"] * lanes * cfg.BLOCK_IN) // per_multiplier,
            int(c["per_alu_lane"] * lanes) if mul else 0)


# What DSP packing adds to the GEMM/ALU loop's logic per packed multiplier (two products), on top of the fitted
# terms (coefficients.py was fitted to the RTL without packing): Yosys's figures for the gemm_alu module of the
# 1x4x4 test config (TINY of tests/test_fpga_estimate.py) packed and not, synth_xilinx -family xc7 with the
# hierarchy kept, COMPUTE_LATENCY 4: 3,049 LUT and 2,509, 603 FF both, for 8 packed multipliers (2026-12-07;
# docs/hardware.md, "INT8 packing"). The LUTs are the packed factor's adder (w1 less w2's sign) and the adder
# tree, which Yosys builds in the fabric once the products are bit fields of a DSP's output (without packing it
# folds the tree's adders into the DSPs' post-adders and cascade).
PACKING_LOGIC = {"lut": (3049 - 2509) / 8, "ff": 0.0}


def packing_logic(cfg: HwConfig, dsp_packing: bool | None = None) -> Resources:
    """The logic DSP packing adds to the GEMM/ALU loop (PACKING_LOGIC per packed multiplier), or nothing."""
    if not packing_logic_on(cfg, dsp_packing):
        return Resources()
    pairs = cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT // 2
    return Resources(lut=PACKING_LOGIC["lut"] * pairs, ff=PACKING_LOGIC["ff"] * pairs)


# Classes newer than the samples coefficients.py was fitted to, with Yosys's figures for the module synthesised
# on its own (synth_xilinx, hierarchy kept, both families alike): the AXI4 master is the same for a 64- and a
# 512-bit bus (its data passes through; 8 + 2 flip-flops of write bookkeeping), the AXI4-Lite slaves hold
# one read-data register and a response flag per port. A fit over samples that have them (bench/fpga_fit.py)
# takes precedence.
MEASURED_CLASSES = {
    "axi_master": {"lut": {"1": 24.0}, "ff": {"1": 10.0}},
    "axi_lite": {"lut": {"1": 150.0}, "ff": {"1": 40.0}},
    # the performance counters (hardware/counters.py): seven 64-bit counters and their shift-and-add products (no
    # DSP); Yosys gave 2,266 LUT / 1,211 FF with 14-bit micro-op counts (pynq, both families) and 1,950 / 1,154
    # with 9-bit ones (tests/test_fpga_estimate.py's tiny config): the last product grows with that width
    "counters": {"lut": {"1": 1381.2, "uop_bits": 63.2}, "ff": {"1": 1051.4, "uop_bits": 11.4}},
    # the arbiters' register slices (hardware/dram.py Skid) are NOT counted yet: the Yosys samples the model is
    # fitted to and checked against (tests/test_fpga_estimate.py) predate them. By their structure they add two
    # registers of each slice's width (after Yosys trims the readers' constant write data and the addresses'
    # unused high bits: about 1.6 k flip-flops and 0.8 k LUTs on a 128-bit bus, 1.1 k and 0.5 k on 64 bits)
    # until bench/fpga_fit.py is rerun on fresh samples
    "skid": {"lut": {"1": 0.0, "width": 0.0}, "ff": {"1": 0.0, "width": 0.0}},
}


# The burst bookkeeping the element readers and writers gained with the AXI4 master (hardware/dram.py: a burst's
# length at its first beat, the beats left, a reader's reservation of room), on top of what coefficients.py was
# fitted to: Yosys's figures for the tiny config of tests/test_fpga_estimate.py against the fitted terms
# (LUT, FF). A reader of elements at least a beat wide reserves room for its bursts; one of narrower elements
# does not (its lane FIFO bounds what is in flight).
BURST_LOGIC = {("reader", False): (40.0, 4.0), ("reader", True): (4.0, 4.0), ("writer", False): (21.0, 4.0),
               ("writer", True): (21.0, 4.0)}


# The register file's HLS block control and the counters' read-back (hardware/core.py ``_registers``), on top of
# what coefficients.py was fitted to: Yosys's top module for the tiny config of tests/test_fpga_estimate.py
# before and after them (LUT, FF: the read multiplexer grew by 14 counter words and 12 interrupt registers; the
# modules' control registers now keep the two bits they read back, not 32).
REGISTER_LOGIC = (247.0, -62.0)


def _logic_since_fit(inst: Instance) -> tuple[float, float]:
    """(LUT, FF) of logic added to a module since coefficients.py was fitted (BURST_LOGIC, REGISTER_LOGIC)."""
    if inst.cls == "top":
        return REGISTER_LOGIC
    if inst.cls not in ("reader", "writer"):
        return 0.0, 0.0
    return BURST_LOGIC[(inst.cls, inst.params["elem"] < inst.params["bus"])]


def _class(classes: dict, cls: str) -> dict:
    return classes[cls] if cls in classes else MEASURED_CLASSES[cls]


def _coefficients() -> dict:
    from hardware.fpga.coefficients import COEFFICIENTS
    return COEFFICIENTS


@dataclass(frozen=True)
class Estimate:
    """Resources per row (resources.ROWS), how the memories were mapped, and what was moved to fit a part."""

    family: str
    rows: dict[str, Resources]
    memories: list[MemMapping]
    notes: list[str] = field(default_factory=list)
    split: dict[str, Resources] = field(default_factory=dict)   # the GEMM/ALU loop: "gemm", "lanes", "control"
    products_per_dsp: int = 1       # int8 products one GEMM DSP makes: 2 with DSP packing

    def total(self) -> Resources:
        return total(self.rows.values())


def estimate(cfg: HwConfig, family: str, coefficients: dict | None = None,
             dsp_packing: bool | None = None, structure: dict | None = None) -> Estimate:
    """The analytic estimate of what Yosys makes of ``cfg``'s RTL on ``family`` (xc7, xcup), built with the
    generator's ``dsp_packing`` (None: the config's default, hardware/dsp_packing.py); ``structure`` overrides
    ``rtl_structure``'s memories (``BEFORE_OUTPUT_BUFFER``: the design the fitted samples came from)."""
    coef = (coefficients or _coefficients())
    if family not in coef:
        raise ValueError(f"no fitted coefficients for family {family!r}; fitted: {', '.join(sorted(coef))}")
    classes = coef[family]["classes"]
    rows: dict[str, Resources] = {}
    mappings: list[MemMapping] = []
    for inst in instances(cfg, structure):
        lut_f, ff_f = features(inst)
        c = _class(classes, inst.cls)
        extra_lut, extra_ff = _logic_since_fit(inst)
        lut = sum(c["lut"].get(k, 0.0) * v for k, v in lut_f.items()) + extra_lut
        ff = sum(c["ff"].get(k, 0.0) * v for k, v in ff_f.items()) + extra_ff
        rows[inst.row] = rows.get(inst.row, Resources()) + Resources(lut=lut, ff=ff)
        for shape in inst.memories:
            m = map_memory(shape, family)
            mappings.append(m)
            # block RAM of the SRAMs in their own rows; their distributed RAM and registers stay with the top
            # module, as Yosys's per-module figures have them
            cells = Resources(bram36=m.bram36, bram18=m.bram18)
            logic = Resources(lut=m.lut, lutram=m.lut, ff=m.ff)
            if inst.cls == "top":
                rows[f"sram.{shape.name}"] = rows.get(f"sram.{shape.name}", Resources()) + cells
                rows["top"] = rows["top"] + logic
            else:
                rows[inst.row] = rows[inst.row] + cells + logic
    gemm_dsp, alu_dsp = dsp_count(cfg, family, coef, dsp_packing)
    packing = packing_logic(cfg, dsp_packing)
    rows["gemm_alu"] = rows["gemm_alu"] + Resources(dsp=gemm_dsp + alu_dsp) + packing
    split = _loop_split(cfg, classes["loop"], gemm_dsp, alu_dsp)
    split["gemm"] = split["gemm"] + packing
    return Estimate(family, rows, mappings, [], split, 2 if packing_logic_on(cfg, dsp_packing) else 1)


def packing_logic_on(cfg: HwConfig, dsp_packing: bool | None) -> bool:
    from hardware.dsp_packing import resolve_packing
    return resolve_packing(cfg, dsp_packing)


def _loop_split(cfg: HwConfig, c: dict, gemm_dsp: int, alu_dsp: int) -> dict[str, Resources]:
    """The GEMM/ALU loop's row read off its fitted terms: the GEMM core (its products' DSPs and the LUTs per
    product), the lanes (ALU, accumulate and write-back logic and registers per lane, the ALU's MUL DSPs) and the
    micro-op loop (the rest: counters, indices, pipeline)."""
    loop = next(i for i in instances(cfg) if i.cls == "loop")
    lut_f, ff_f = features(loop)
    lut = {k: c["lut"].get(k, 0.0) * v for k, v in lut_f.items()}
    ff = {k: c["ff"].get(k, 0.0) * v for k, v in ff_f.items()}
    return {"gemm": Resources(lut=lut.get("macs", 0.0), dsp=gemm_dsp),
            "lanes": Resources(lut=lut.get("lanes", 0.0) + lut.get("mul_lanes", 0.0), ff=ff.get("acc_bits", 0.0),
                               dsp=alu_dsp),
            "control": Resources(lut=lut.get("1", 0.0), ff=ff.get("1", 0.0) + ff.get("idx_bits", 0.0))}


def fit_part(est: Estimate, cfg: HwConfig, part: Part, coefficients: dict | None = None) -> Estimate:
    """``est`` with the multipliers beyond ``part``'s DSP slices built from LUTs (GEMM products first, then ALU
    lanes), and a note saying how many and what they cost; ``est`` itself when they fit."""
    coef = (coefficients or _coefficients())[est.family]
    need = est.total().dsp
    if need <= part.dsp:
        return est
    over = need - part.dsp
    per_lane = coef["dsp"]["per_alu_lane"]
    gemm_dsp = est.split["gemm"].dsp
    dsps_moved = min(over, gemm_dsp)             # a packed DSP's two products both move to LUTs
    macs_moved = dsps_moved * est.products_per_dsp
    lanes_moved = math.ceil((over - dsps_moved) / per_lane) if over > dsps_moved and per_lane else 0
    fallback = coef["fallback"]
    extra_lut = macs_moved * fallback["lut_per_mac"] + lanes_moved * fallback["lut_per_alu_lane"]
    freed = dsps_moved + lanes_moved * per_lane
    rows = dict(est.rows)
    rows["gemm_alu"] = rows["gemm_alu"] + Resources(lut=extra_lut, dsp=-freed)
    split = dict(est.split)
    split["gemm"] = split["gemm"] + Resources(lut=macs_moved * fallback["lut_per_mac"], dsp=-dsps_moved)
    split["lanes"] = split["lanes"] + Resources(lut=lanes_moved * fallback["lut_per_alu_lane"],
                                                dsp=-lanes_moved * per_lane)
    alu = (f"{est.split['lanes'].dsp} for the ALU lanes' 32-bit MUL" if est.split["lanes"].dsp else
           f"the ALU has no MUL in capability set {cfg.CAPABILITIES}")
    packed = " (2 per DSP: packed)" if est.products_per_dsp == 2 else ""
    note = (f"DSP: the design needs {need} DSP slices ({gemm_dsp} for the GEMM core's int8 products{packed}; {alu}) and "
            f"{part.name} has {part.dsp}: "
            f"{macs_moved} GEMM products{f' and {lanes_moved} ALU lanes' if lanes_moved else ''} are counted as "
            f"LUT logic instead (+{extra_lut:,.0f} LUT, ~{fallback['lut_per_mac']:.0f} per product, as "
            f"synth_xilinx -nodsp builds them; Vivado does this with -max_dsp {part.dsp})")
    return Estimate(est.family, rows, est.memories, est.notes + [note], split, est.products_per_dsp)
