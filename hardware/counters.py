"""VTA's performance counters, counted by the hardware as the modules start instructions (``PerfCounters``).

VTA's simulator keeps seven counters (hardware/stats.py COUNTERS): bytes loaded per memory type, bytes stored,
micro-op iterations of GEMM (without reset) and of ALU instructions. VTA's bitstreams have none; this RTL counts
them as ``program_counters`` defines them, from each instruction as its module starts it (the module's
``issued`` pulse with the instruction, ``issued_insn``): a LOAD or STORE adds ``x_size * y_size`` elements of
its memory type (padding is not moved from DRAM, so not counted; a LOAD of any type but UOP, INP and WGT counts
as ACC, as VTA's simulator counts ACC_8BIT), a GEMM without ``reset_reg`` or an ALU adds ``iter_out * iter_in *
(uop_end - uop_bgn)`` (0 when uop_end <= uop_bgn).

The products are built from shifted partial products and adders, not ``*``: Yosys maps every multiplier to a DSP
slice, and the DSPs are the GEMM core's. Each product is pipelined two adder levels to a register
(``PRODUCT_STAGES`` registers for x * y, twice that for the three-factor count), so a count lands in its counter
``LATENCY`` cycles after its instruction starts: before the instruction finishes (a DMA waits at least for DRAM,
a GEMM or ALU for the compute pipeline), so before the FINISH that waits for its tokens sets ``done``.

Counters are ``COUNTER_BITS`` (64) wide and wrap modulo 2^64 (at one 64-byte beat a cycle at 1 GHz that takes
nine years). ``clear`` (a launch) zeroes them and drops the counts still in the pipeline.
"""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hardware.decode import field_values
from hardware.registers import COUNTER_BITS, COUNTER_REGISTERS
from hw_config import HwConfig
from hw_config.isa_rules import MODULES
from hw_config.layout import INSN_BITS, MEM_TYPES, OPCODES

GROUP = 4                  # partial products summed before a register (two adder levels)
PRODUCT_STAGES = 2         # registers of a product of up to 16 partial products
LATENCY = 1 + 2 * PRODUCT_STAGES + 1   # fields registered, two products, the counter's add


def _sum(values: list[Value], width: int) -> Value:
    """The sum of ``values`` as a balanced tree, truncated to ``width`` bits."""
    while len(values) > 1:
        values = [values[i] + values[i + 1] if i + 1 < len(values) else values[i] for i in range(0, len(values), 2)]
    return values[0][:width] if values else Const(0, width)


def lut_product(m: Module, a: Value, b: Value, name: str) -> Signal:
    """``a * b`` (unsigned) in a register ``PRODUCT_STAGES`` cycles after ``a`` and ``b``: the partial products
    ``a << i`` where ``b[i]`` is set, summed in groups of ``GROUP`` (a register), then the groups' sums."""
    width = len(a) + len(b)
    partial = [Mux(b[i], a << i, 0) for i in range(len(b))]
    groups = []
    for g in range(0, len(partial), GROUP):
        reg = Signal(width, name=f"{name}_g{g // GROUP}")
        m.d.sync += reg.eq(_sum(partial[g:g + GROUP], width))
        groups.append(reg)
    out = Signal(width, name=name)
    m.d.sync += out.eq(_sum(groups, width))
    return out


def _delayed(m: Module, value: Value, cycles: int, name: str, clear: Value | None = None) -> Value:
    """``value`` ``cycles`` cycles later (through registers that ``clear`` zeroes)."""
    for i in range(cycles):
        reg = Signal.like(value, name=f"{name}_d{i}")
        m.d.sync += reg.eq(value if clear is None else Mux(clear, 0, value))
        value = reg
    return value


# the memory type whose element size a byte counter counts in
UNIT = {"inp_load_nbytes": "INP", "wgt_load_nbytes": "WGT", "uop_load_nbytes": "UOP", "acc_load_nbytes": "ACC",
        "out_store_nbytes": "OUT"}


def fed_by(module: str) -> list[str]:
    """The counters a module feeds: those in its register block (fetch routes everything they count to it)."""
    return [name for name, (block, _) in COUNTER_REGISTERS.items() if block == module]


class PerfCounters(wiring.Component):
    """One ``<module>_issued`` pulse and ``<module>_insn`` per module (MODULES order) and ``clear``; a
    ``COUNTER_BITS``-wide output per counter of ``COUNTER_REGISTERS``."""

    def __init__(self, cfg: HwConfig):
        self.cfg = cfg
        members = {"clear": In(1)}
        for mod in MODULES:
            members[f"{mod}_issued"] = In(1)
            members[f"{mod}_insn"] = In(INSN_BITS)
        for name in COUNTER_REGISTERS:
            members[name] = Out(COUNTER_BITS)
        super().__init__(members)

    def elaborate(self, platform) -> Module:
        m = Module()
        cfg = self.cfg
        mem_fmt, gemm_fmt = cfg.insn_formats["mem"], cfg.insn_formats["gemm"]
        counts: dict[str, tuple[Value, Value]] = {}          # counter -> (its count lands, the count)
        for mod in MODULES:
            names = fed_by(mod)
            if not names:
                continue
            insn = getattr(self, f"{mod}_insn")
            mem, gemm = field_values(mem_fmt, insn), field_values(gemm_fmt, insn)
            opcode, kind = mem["opcode"], mem["memory_type"]
            load = opcode == OPCODES["LOAD"]
            named = {t: kind == MEM_TYPES[t] for t in ("UOP", "INP", "WGT")}
            which = {"uop_load_nbytes": load & named["UOP"], "inp_load_nbytes": load & named["INP"],
                     "wgt_load_nbytes": load & named["WGT"],
                     "acc_load_nbytes": load & ~named["UOP"] & ~named["INP"] & ~named["WGT"],
                     "out_store_nbytes": opcode == OPCODES["STORE"],
                     "gemm_counter": (opcode == OPCODES["GEMM"]) & ~gemm["reset_reg"],
                     "alu_counter": opcode == OPCODES["ALU"]}
            loops = any(not name.endswith("_nbytes") for name in names)    # it runs GEMM/ALU: three factors
            loop_op = (opcode == OPCODES["GEMM"]) | (opcode == OPCODES["ALU"]) if loops else Const(0)
            # stage 1: the factors, registered as the instruction starts
            first_a = Mux(loop_op, gemm["iter_out"], mem["x_size"]) if loops else mem["x_size"]
            first_b = Mux(loop_op, gemm["iter_in"], mem["y_size"]) if loops else mem["y_size"]
            a, b = Signal(len(first_a), name=f"{mod}_a"), Signal(len(first_b), name=f"{mod}_b")
            m.d.sync += [a.eq(first_a), b.eq(first_b)]
            # ``issued`` (the module's start decision, deep in its own logic) goes straight into a flip-flop and
            # meets its instruction's kind only after it: nothing of the counters is in series with the decision
            issued = Signal(name=f"{mod}_issued_d")
            with m.If(self.clear):
                m.d.sync += issued.eq(0)
            with m.Else():
                m.d.sync += issued.eq(getattr(self, f"{mod}_issued"))
            hits = {}
            for name in names:
                kind = Signal(name=f"{mod}_{name}_kind")
                m.d.sync += kind.eq(which[name])
                hits[name] = issued & kind       # dropped by a clear on its way (_delayed)
            # then a * b, and for GEMM/ALU (a * b) * (uop_end - uop_bgn)
            count = lut_product(m, a, b, f"{mod}_ab")
            stages = PRODUCT_STAGES
            if loops:
                end, bgn = gemm["uop_end"], gemm["uop_bgn"]
                c = Signal(len(end), name=f"{mod}_c")
                m.d.sync += c.eq(Mux(loop_op, Mux(end > bgn, end - bgn, 0), 1))
                count = lut_product(m, count, _delayed(m, c, PRODUCT_STAGES, f"{mod}_c"), f"{mod}_abc")
                stages += PRODUCT_STAGES
            for name in names:
                counts[name] = (_delayed(m, hits[name], stages, f"{name}_hit", self.clear), count)
        # the last stage: each counter adds its count (in its memory type's elements for the byte counters)
        for name, (hit, count) in counts.items():
            counter = getattr(self, name)
            shift = 0
            if name in UNIT:
                unit = cfg.elem_bytes(MEM_TYPES[UNIT[name]])
                assert unit & (unit - 1) == 0, f"{UNIT[name]} elements of {unit} bytes: not a power of two"
                shift = unit.bit_length() - 1
            with m.If(self.clear):
                m.d.sync += counter.eq(0)
            with m.Elif(hit):
                m.d.sync += counter.eq(counter + (count << shift))
        return m
