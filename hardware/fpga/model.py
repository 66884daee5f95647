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
  path, bits of a mux times its fan-in, address bits, the compute pipeline's registers by structure, a
  constant), with coefficients fitted by least squares to Yosys's per-module figures over a sample of configs
  (bench/fpga_fit.py, which writes coefficients.py and reports the accuracy on held-out configs);
- DSP packing adds a fitted number of LUTs and FFs per packed multiplier, per compute pipeline depth
  (``packing_per_pair``);
- a family fitted to an older RTL (LEGACY: xcup's fit of 2026-11-25) is completed by the current family's
  figures for what changed since (``DESIGN``).

When a part has fewer DSP slices than the design's multipliers, a vendor flow would have to build the rest from
LUTs (Vivado's ``-max_dsp``); ``fit_part`` moves GEMM multipliers first (about 200 LUTs each; an ALU lane's
32-bit multiplier costs about 1,100 for the 3 DSPs it frees), then ALU lanes, at the per-multiplier LUT costs
measured with ``synth_xilinx -nodsp``, and says so.

The split of the GEMM/ALU loop's row into the GEMM core, the lanes and the micro-op loop is read off the fitted
terms (Yosys synthesises the loop as one module). The ``alu_lane`` figures in coefficients.py (one AluLane
synthesised alone) are a cross-check of the per-lane term, not used here.
"""

from __future__ import annotations

import itertools
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
            "alu_mul": "MUL" in caps.alu_opcodes, "skids": True}


# The generator of a LEGACY family's samples (2026-11-25; see DESIGN): before STORE got its output buffer (the
# accumulator read by compute, transparent to the write port, and by STORE), before the arbiters' register
# slices and before the pipelined datapath (``since_fit``: LEGACY_CURRENT_FAMILY's corrections left out).
# tests/data/fpga_yosys_samples.json keeps that family's samples, so the held-out test holds the model to them
# with this structure (``estimate(..., structure=...)``).
BEFORE_OUTPUT_BUFFER = {"acc_reads": 2, "acc_transparent": 1, "out_buffer": False, "skids": False,
                        "since_fit": False}


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

    def fifo(module: str, width: int, depth: int, cls: str = "fifo", buffered: bool = True,
             head: bool = False) -> None:
        """amaranth.lib.fifo: SyncFIFOBuffered keeps depth - 1 entries in a memory read synchronously (plus an
        output register); SyncFIFO keeps depth entries read asynchronously; hardware/fifo.py's HeadRegisterFIFO
        (``head``: the command queues, fetch's buffer) keeps depth entries in a memory read synchronously, its
        head a register beside it."""
        entries = depth - 1 if buffered and not head else depth
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
    clients = ARBITER_CLIENTS - sum(k not in rtl["compute_loads"] for k in ("UOP", "ACC", "ACC_8BIT"))
    # the arbiters' register slices (hardware/dram.py Skid): two registers of the bits that reach them unconstant
    # (Amaranth's netlist drops the rest; Yosys merges copies): a reader's command carries no write flag, data or
    # strobes and a constant size; the store's a constant write flag and size, constant strobes when its elements
    # fill whole beats, else one copy of an element repeated across the beat; the write side's response slice
    # carries nothing (a write has no response data)
    from hardware.params import DRAM_CLIENTS
    cmd_bits = 64 + 1 + bus + bus // 8 + 1 + 8 + 3                  # hardware/dram.py CMD_FIELDS
    out_bits = p.batch * p.block_out * p.out_width
    optional = {"compute.uop": "UOP", "compute.acc": "ACC", "compute.acc8": "ACC_8BIT"}   # a compute load each
    readers = [c for c in DRAM_CLIENTS if c != "store"]           # hardware/core.py DRAM_READERS, in order
    live_in = {"rd": [c not in optional or optional[c] in rtl["compute_loads"] for c in readers], "wr": [True]}
    in_bits = {"rd": cmd_bits - bus - bus // 8 - 1 - 3,
               "wr": cmd_bits - 1 - 3 - (bus // 8 if out_bits >= bus else bus - out_bits)}
    for side in ("rd", "wr"):
        # the readers' arbiter chooses among six clients; the writer's has one (no choice to make)
        out.append(Instance(f"vta_core.arbiter_{side}", "arbiter", {"bus": bus, "clients": clients}) if side == "rd"
                   else Instance(f"vta_core.arbiter_{side}", "write_arbiter"))
        if not rtl["skids"]:
            continue
        for i, live in enumerate(live_in[side]):
            out.append(Instance(f"vta_core.arbiter_{side}.in{i}", "skid",
                                {"width": in_bits[side] * live, "live": float(live)}))
        out.append(Instance(f"vta_core.arbiter_{side}.out", "skid", {"width": cmd_bits + 3, "live": 1.0}))
        out.append(Instance(f"vta_core.arbiter_{side}.rsp", "skid",
                            {"width": bus + 1 + 3, "live": 1.0} if side == "rd" else {"width": 0, "live": 0.0}))
    # the bus interfaces (hardware/axi.py): the AXI4 master and the four AXI4-Lite register slaves
    out.append(Instance("vta_core.axi", "axi_master", {"bus": bus}))
    out.append(Instance("vta_core.axi_lite", "axi_lite", {"ports": 4}))
    out.append(Instance("vta_core.counters", "counters", {"uop_bits": s["uop"].addr_bits + 1}))
    out.append(Instance("vta_core.fetch", "fetch", {"bus": bus, "log_prefetch": _log2(outstanding + 1)}))
    fifo("vta_core.fetch.buffer", INSN_BITS, outstanding, head=True)
    reader("vta_core.fetch.reader", INSN_BITS)
    # each queued instruction carries its decoded engine choice (hardware/modules.py `_queue`): one bit per engine,
    # one for a NOP, and compute's FINISH
    decoded = {"load": 3, "compute": len(rtl["compute_loads"]) + 3, "store": 2}
    for module in ("load", "compute", "store"):
        fifo(f"vta_core.{module}.queue", INSN_BITS + decoded[module], cfg.INSN_QUEUE_DEPTH, head=True)
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
        "idx_bits": s["acc"].addr_bits + s["inp"].addr_bits + s["wgt"].addr_bits + s["uop"].addr_bits,
        **_pipeline_params(p)}))
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


def _pipeline_params(p) -> dict[str, float]:
    """What the compute pipeline's registers beyond the shortest one (COMPUTE_LATENCY 4; hardware/params.py
    ComputePipeline, hardware/loop_engine.py) add to the GEMM/ALU loop, by structure: ``pipe_bits``, the bits of
    the registers it places (the SRAM outputs, the adder tree's cuts, the extra forwarded results and the
    accumulator row's registers, the indices that travel one stage further per register; the products' register
    is a DSP's M register, no flip-flop); ``fwd_bits``, the accumulator bits each extra forwarded result muxes in;
    ``tree_regs``, the int8 products whose adder tree is cut by a register (Yosys then builds it in the fabric
    rather than in the DSPs' post-adders)."""
    pl = p.compute
    lanes = p.batch * p.block_out
    acc_bits = lanes * p.acc_width
    product = p.inp_width + p.wgt_width
    sram = pl.sram * (p.batch * p.block_in * p.inp_width + p.block_out * p.block_in * p.wgt_width)
    tree = sum(lanes * (p.block_in >> level) * (product + level) for level in pl.tree_cuts())
    extra_fwd = pl.forward - 2
    stages = (pl.sram + pl.product + pl.tree + pl.result) * (2 + 2 * p.srams["acc"].addr_bits)
    return {"pipe_bits": float(sram + tree + (extra_fwd + 3 * pl.acc_out) * acc_bits + stages),
            "fwd_bits": float((extra_fwd + pl.acc_out) * acc_bits),
            "tree_regs": float(lanes * p.block_in * min(1, pl.tree))}


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
            return ({**one, "lanes": q["lanes"], "mul_lanes": q["lanes"] * q["alu_mul"], "macs": q["macs"],
                     "fwd_bits": q["fwd_bits"], "tree_regs": q["tree_regs"]},
                    {**one, "acc_bits": q["acc_bits"], "idx_bits": q["idx_bits"], "pipe_bits": q["pipe_bits"]})
        case "token":
            return {**one, "count_bits": q["count_bits"]}, {"count_bits": q["count_bits"]}
        case "axi_master" | "axi_lite" | "write_arbiter":
            return one, one
        case "counters":
            return {**one, "uop_bits": q["uop_bits"]}, {**one, "uop_bits": q["uop_bits"]}
        case "skid":
            return {"1": q["live"], "width": q["width"]}, {"1": q["live"], "width": q["width"]}
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


def packing_per_pair(coef_family: dict, depth: int) -> Resources:
    """The LUTs and FFs DSP packing adds per packed multiplier (two products) at compute pipeline ``depth``:
    Yosys's gemm_alu module packed minus unpacked per pair, fitted per depth by bench/fpga_fit.py (``packing``
    in coefficients.py), linear between the depths measured and the nearest one's outside them. The LUTs are
    the adder tree, which Yosys folds into the DSPs' post-adders without packing and builds in the fabric with
    it, less so once the pipeline cuts the tree with registers (docs/hardware.md, "INT8 packing")."""
    def at(per_depth: dict[str, float]) -> float:
        points = sorted((int(d), v) for d, v in per_depth.items())
        if depth <= points[0][0]:
            return points[0][1]
        for (d0, v0), (d1, v1) in itertools.pairwise(points):
            if depth <= d1:
                return v0 + (v1 - v0) * (depth - d0) / (d1 - d0)
        return points[-1][1]
    fitted = coef_family["packing"]
    return Resources(lut=at(fitted["lut_per_pair"]), ff=at(fitted["ff_per_pair"]))


def packing_logic(cfg: HwConfig, dsp_packing: bool | None = None, coefficients: dict | None = None,
                  family: str = "xc7") -> Resources:
    """The logic DSP packing adds to the GEMM/ALU loop (``packing_per_pair`` per packed multiplier), or nothing.
    A LEGACY family (fitted before packing was measured on it) takes the current family's figures."""
    if not packing_logic_on(cfg, dsp_packing):
        return Resources()
    per_pair = packing_per_pair(_current(coefficients or _coefficients(), family), cfg.COMPUTE_LATENCY)
    pairs = cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT // 2
    return Resources(lut=per_pair.lut * pairs, ff=per_pair.ff * pairs)


# The RTL the coefficients of a family must be fitted to: 2 since the output buffer, the performance counters,
# the arbiters' register slices and the pipelined datapath (2026-12-07; bench/fpga_fit.py writes it). A family
# fitted to an older design (``design`` absent: the 2026-11-25 samples, before all of these) is LEGACY: the
# model keeps its fit for what that design had and adds what came since from the figures below and, for what
# only a current fit knows (the register slices, the pipeline's registers, DSP packing), from the current
# family's fit (CURRENT_FAMILY), as both families' fabrics build flip-flops and LUT6s alike.
DESIGN = 2
CURRENT_FAMILY = "xc7"
# Classes whose RTL changed since the legacy samples (the GEMM/ALU loop became the pipelined datapath with
# forwarding; the arbiter was split into a readers' and a writer's): a LEGACY family's figure for one is its own
# fit plus what the change added on the current family, the current fit less the current family's own legacy
# fit, term by term (LEGACY_CURRENT_FAMILY: xc7's coefficients of 2026-11-25 for these classes).
LEGACY_CURRENT_FAMILY = {
    "loop": {"lut": {"1": 182.9813, "lanes": 447.0698, "mul_lanes": 62.5444},
             "ff": {"1": 85.3709, "acc_bits": 0.9983, "idx_bits": 4.5122}},
    "arbiter": {"lut": {"1": 286.7167, "bus_x_extra": 0.6905, "clients": 9.1472}, "ff": {"1": 3.0}},
}


def is_legacy(coef_family: dict) -> bool:
    return coef_family.get("design", 1) < DESIGN


def _current(coefficients: dict, family: str) -> dict:
    """``family``'s coefficients when they are of the current design, else CURRENT_FAMILY's."""
    return coefficients[CURRENT_FAMILY] if is_legacy(coefficients[family]) else coefficients[family]


# For a LEGACY family: classes newer than its samples, with Yosys's figures for the module synthesised on its own
# (synth_xilinx, hierarchy kept, both families alike): the AXI4 master is the same for a 64- and a 512-bit bus
# (its data passes through; 8 + 2 flip-flops of write bookkeeping), the AXI4-Lite slaves hold one read-data
# register and a response flag per port.
MEASURED_CLASSES = {
    "axi_master": {"lut": {"1": 24.0}, "ff": {"1": 10.0}},
    "axi_lite": {"lut": {"1": 150.0}, "ff": {"1": 40.0}},
    # the performance counters (hardware/counters.py): seven 64-bit counters and their shift-and-add products (no
    # DSP); Yosys gave 2,266 LUT / 1,211 FF with 14-bit micro-op counts (pynq, both families) and 1,950 / 1,154
    # with 9-bit ones (tests/test_fpga_estimate.py's tiny config): the last product grows with that width
    "counters": {"lut": {"1": 1381.2, "uop_bits": 63.2}, "ff": {"1": 1051.4, "uop_bits": 11.4}},
}
# ... and classes it takes from the current family's fit: the arbiters' register slices and the writers' arbiter
BORROWED_CLASSES = ("skid", "write_arbiter")


# For a LEGACY family: the burst bookkeeping the element readers and writers gained with the AXI4 master
# (hardware/dram.py: a burst's length at its first beat, the beats left, a reader's reservation of room), on top
# of what it was fitted to: Yosys's figures for the tiny config of tests/test_fpga_estimate.py against the fitted
# terms (LUT, FF). A reader of elements at least a beat wide reserves room for its bursts; one of narrower
# elements does not (its lane FIFO bounds what is in flight).
BURST_LOGIC = {("reader", False): (40.0, 4.0), ("reader", True): (4.0, 4.0), ("writer", False): (21.0, 4.0),
               ("writer", True): (21.0, 4.0)}


# For a LEGACY family: the register file's HLS block control and the counters' read-back (hardware/core.py
# ``_registers``): Yosys's top module for the tiny config before and after them (LUT, FF: the read multiplexer
# grew by 14 counter words and 12 interrupt registers; the modules' control registers now keep the two bits they
# read back, not 32).
REGISTER_LOGIC = (247.0, -62.0)


def _logic_since_fit(inst: Instance, legacy: bool) -> tuple[float, float]:
    """(LUT, FF) of logic added to a module since a LEGACY family was fitted (BURST_LOGIC, REGISTER_LOGIC)."""
    if not legacy:
        return 0.0, 0.0
    if inst.cls == "top":
        return REGISTER_LOGIC
    if inst.cls not in ("reader", "writer"):
        return 0.0, 0.0
    return BURST_LOGIC[(inst.cls, inst.params["elem"] < inst.params["bus"])]


def _class(coefficients: dict, family: str, cls: str, since_fit: bool = True) -> dict:
    """A class's coefficients for ``family``; a LEGACY family's completed as DESIGN says (``since_fit`` False:
    its own fit of the changed classes alone, the design of its samples)."""
    own = coefficients[family]
    if not is_legacy(own):
        return own["classes"][cls]
    current = coefficients[CURRENT_FAMILY]["classes"]
    if cls in BORROWED_CLASSES:
        return current[cls]
    if cls in MEASURED_CLASSES:
        return MEASURED_CLASSES[cls]
    c = own["classes"][cls]
    if cls not in LEGACY_CURRENT_FAMILY or not since_fit:
        return c
    before = LEGACY_CURRENT_FAMILY[cls]
    return {what: {k: c[what].get(k, 0.0) + current[cls][what].get(k, 0.0) - before[what].get(k, 0.0)
                   for k in {*c[what], *current[cls][what], *before[what]}} for what in ("lut", "ff")}


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
    legacy = is_legacy(coef[family])
    since_fit = (structure or {}).get("since_fit", True)
    rows: dict[str, Resources] = {}
    mappings: list[MemMapping] = []
    for inst in instances(cfg, structure):
        lut_f, ff_f = features(inst)
        c = _class(coef, family, inst.cls, since_fit)
        extra_lut, extra_ff = _logic_since_fit(inst, legacy)
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
    packing = packing_logic(cfg, dsp_packing, coef, family)
    rows["gemm_alu"] = rows["gemm_alu"] + Resources(dsp=gemm_dsp + alu_dsp) + packing
    split = _loop_split(cfg, _class(coef, family, "loop", since_fit), gemm_dsp, alu_dsp)
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
