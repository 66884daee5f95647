"""The three execution modules (load, compute, store): a command queue, the dependency tokens (pops before
an instruction executes, pushes after), and the engines that execute the instructions routed to each."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from amaranth import Cat, Const, Module, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hardware.decode import field_values
from hardware.deps import Tokens, token_members
from hardware.dma import Load2D, Store2D
from hardware.fifo import HeadRegisterFIFO
from hardware.interfaces import dram_port, sram_read, sram_write
from hardware.loop_engine import LoopEngine, narrow_lanes
from hardware.params import RtlParams
from hw_config.isa_rules import DEP_FLAGS
from hw_config.layout import INSN_BITS, MEM_TYPES, OPCODES


@dataclass
class Queue:
    """A module's command queue and what its head register holds: the instruction, which engine runs it (one
    bit per engine, in priority order; none: a NOP) and the module's extra decoded bits (``extra``)."""

    fifo: HeadRegisterFIFO
    head: Value
    selected: list[Value]
    nop: Value
    extra: list[Value]


def _queue(m: Module, p: RtlParams, insn_port, conditions: Callable[[Value], list[Value]],
           extra: Callable[[Value], list[Value]] = lambda insn: []) -> Queue:
    """The module's command queue (INSN_QUEUE_DEPTH instructions), fed by fetch. Its head is a register
    (hardware/fifo.py) and each instruction is decoded as it is written (``conditions(insn)``: which engine runs
    it, in priority order, the first true one; ``extra(insn)``: more bits the module wants decoded), the decoded
    bits stored beside it: the decision to start the head reads flip-flops, with no decoding in front of it."""
    insn = insn_port.payload
    conds = conditions(insn)
    selected, taken = [], Const(0)
    for cond in conds:
        selected.append(cond & ~taken)
        taken = taken | cond
    more = extra(insn)
    decoded = [*selected, ~taken, *more]
    m.submodules.queue = q = HeadRegisterFIFO(INSN_BITS + len(decoded), p.cfg.INSN_QUEUE_DEPTH)
    m.d.comb += [q.w_data.eq(Cat(insn, *decoded)), q.w_en.eq(insn_port.valid), insn_port.ready.eq(q.w_rdy)]
    bits = [q.r_data[INSN_BITS + i] for i in range(len(decoded))]
    n = len(conds)
    return Queue(q, q.r_data[:INSN_BITS], bits[:n], bits[n], bits[n + 1:])


# Trace pulses every module drives (the top level gathers them into its ``events`` port), and the instruction
# that starts with ``issued`` (the performance counters read it: hardware/counters.py).
EVENT_MEMBERS = {"issued": Out(1), "retired": Out(1), "issued_insn": Out(INSN_BITS)}


def _sequence(m: Module, component, module: str, q: Queue, engines: list, on_issue=None) -> None:
    """The per-instruction sequence, VTA's: take the queue's head when its tokens can be popped and its engine
    is free, pop them and start the engine (or none: a NOP, whose pushes happen in the same cycle), wait for
    the engine's ``done``, push the instruction's tokens. An instruction leaves the queue when it starts (the
    engine holds a copy), so the next one waits only for its own tokens and the engine: one cycle between two
    instructions of a module.

    ``engines``: the engines (each with a ``cmd`` stream and ``done``) in the order of the queue's ``selected``
    bits; ``on_issue(enable)`` adds what the module does when an instruction starts. Everything the start
    decision reads is a register: the queue's head and its decoded bits, the token counters, the engines'
    readiness."""
    head = q.head
    flags = field_values(component.p.fmt("finish"), head)
    dep = {flag: flags[flag] for flag in DEP_FLAGS}
    held = Signal(len(DEP_FLAGS))                 # the running instruction's flags, for its pushes
    pops = Tokens(component, module, dep, "pop")
    nop_pushes = Tokens(component, module, dep, "push")
    pushes = Tokens(component, module, {flag: held[i] for i, flag in enumerate(DEP_FLAGS)}, "push")

    selected, nop = q.selected, q.nop
    engine_free = nop
    for sel, engine in zip(selected, engines, strict=True):
        engine_free = engine_free | (sel & engine.cmd.ready)
        m.d.comb += engine.cmd.payload.eq(head)
    waiting = Signal(len(engines) or 1)
    finished = Const(0)
    for n, engine in enumerate(engines):
        finished = finished | (waiting[n] & engine.done)

    m.d.comb += component.issued_insn.eq(head)     # wires: what starts when ``issued`` pulses
    with m.FSM(name=f"{module}_fsm"):
        with m.State("ISSUE"):
            go = q.fifo.r_rdy & pops.ready & engine_free & (~nop | nop_pushes.ready)
            pops.fire(m, go)
            nop_pushes.fire(m, go & nop)
            m.d.comb += [q.fifo.r_en.eq(go), component.issued.eq(go), component.retired.eq(go & nop)]
            if on_issue is not None:
                on_issue(go)
            for sel, engine in zip(selected, engines, strict=True):
                m.d.comb += engine.cmd.valid.eq(go & sel)
            with m.If(go & ~nop):
                m.d.sync += [waiting.eq(Cat(*selected)), held.eq(Cat(*dep.values()))]
                m.next = "WAIT"
        with m.State("WAIT"), m.If(finished):
            pushes.fire(m, pushes.ready)
            m.d.comb += component.retired.eq(pushes.ready)
            m.next = "ISSUE"
            with m.If(~pushes.ready):
                m.next = "PUSH"
        with m.State("PUSH"):
            pushes.fire(m, pushes.ready)
            m.d.comb += component.retired.eq(pushes.ready)
            with m.If(pushes.ready):
                m.next = "ISSUE"


class LoadModule(wiring.Component):
    """LOAD INP and LOAD WGT: 2-D DMA into the input and weight SRAMs."""

    def __init__(self, p: RtlParams):
        self.p = p
        s = p.srams
        super().__init__({
            "insn": In(stream.Signature(INSN_BITS)),
            "mem_inp": Out(dram_port(p.bus_bits)), "mem_wgt": Out(dram_port(p.bus_bits)),
            "inp_wr": Out(sram_write(s["inp"].addr_bits, s["inp"].width)),
            "wgt_wr": Out(sram_write(s["wgt"].addr_bits, s["wgt"].width)),
            **token_members("load"), **EVENT_MEMBERS,
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        p = self.p
        fmt = p.fmt("mem")
        padded = p.cfg.capabilities.padded_loads
        m.submodules.inp = inp = Load2D(fmt, p.dram_elem_bits("INP"), p.srams["inp"], p.bus_bits, p.burst,
                                        p.outstanding, padded="INP" in padded)
        m.submodules.wgt = wgt = Load2D(fmt, p.dram_elem_bits("WGT"), p.srams["wgt"], p.bus_bits, p.burst,
                                        p.outstanding, padded="WGT" in padded)
        wiring.connect(m, wiring.flipped(self.mem_inp), inp.mem)
        wiring.connect(m, wiring.flipped(self.mem_wgt), wgt.mem)
        wiring.connect(m, wiring.flipped(self.inp_wr), inp.wr)
        wiring.connect(m, wiring.flipped(self.wgt_wr), wgt.wr)
        def conditions(insn: Value) -> list[Value]:
            v = field_values(fmt, insn)
            moves = v["x_size"] != 0
            return [moves & (v["memory_type"] == MEM_TYPES["INP"]), moves & (v["memory_type"] == MEM_TYPES["WGT"])]

        _sequence(m, self, "load", _queue(m, p, self.insn, conditions), [inp, wgt])
        return m


def _sext(v: Value, width: int) -> Value:
    return Cat(v, v[-1].replicate(width - len(v)))


class ComputeModule(wiring.Component):
    """LOAD UOP / ACC / ACC_8BIT into the micro-op and accumulator SRAMs, GEMM, ALU and FINISH, as the config's
    capability set has them: a load of a type not in ``compute_loads`` is a NOP (its tokens move; VTA's HLS
    compute skips it), pads only on ``padded_loads`` types, micro-op loads of one row without
    ``uop_load_rows``, and ALU opcodes outside ``alu_opcodes`` leave the accumulator as it is. The output buffer
    (what STORE reads) is written as ``out_buffer`` says (hw_config/capabilities.py)."""

    def __init__(self, p: RtlParams):
        self.p = p
        s = p.srams
        super().__init__({
            "insn": In(stream.Signature(INSN_BITS)), "finished": Out(1),
            "mem_uop": Out(dram_port(p.bus_bits)), "mem_acc": Out(dram_port(p.bus_bits)),
            "mem_acc8": Out(dram_port(p.bus_bits)),
            "uop_wr": Out(sram_write(s["uop"].addr_bits, s["uop"].width)),
            "uop_rd": Out(sram_read(s["uop"].addr_bits, s["uop"].width)),
            "inp_rd": Out(sram_read(s["inp"].addr_bits, s["inp"].width)),
            "wgt_rd": Out(sram_read(s["wgt"].addr_bits, s["wgt"].width)),
            "acc_rd": Out(sram_read(s["acc"].addr_bits, s["acc"].width)),
            "acc_wr": Out(sram_write(s["acc"].addr_bits, s["acc"].width)),
            "out_wr": Out(sram_write(s["out"].addr_bits, s["out"].width)),
            **token_members("compute"), **EVENT_MEMBERS,
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        p = self.p
        s = p.srams
        fmt = p.fmt("mem")
        caps = p.cfg.capabilities
        # the compute module's loads, as the capability set has them (a load it lacks is a NOP: tokens only)

        def widen8(v: Value) -> Value:
            return Cat(*[_sext(v.word_select(i, p.inp_width), p.acc_width) for i in range(p.acc_lanes)])

        shapes = {"UOP": ("uop", self.mem_uop, {"rows": caps.uop_load_rows}),
                  "ACC": ("acc", self.mem_acc, {}), "ACC_8BIT": ("acc", self.mem_acc8, {"widen": widen8})}
        loaders = {}
        for kind, (sram, port, extra) in shapes.items():
            if kind in caps.compute_loads:
                eng = Load2D(fmt, p.dram_elem_bits(kind), s[sram], p.bus_bits, p.burst, p.outstanding,
                             padded=kind in caps.padded_loads, **extra)
                m.submodules[kind.lower()] = loaders[kind] = eng
                wiring.connect(m, wiring.flipped(port), eng.mem)
        m.submodules.loop = loop = LoopEngine(p)
        wiring.connect(m, wiring.flipped(self.uop_wr), loaders["UOP"].wr)
        wiring.connect(m, wiring.flipped(self.uop_rd), loop.uop)
        wiring.connect(m, wiring.flipped(self.inp_rd), loop.inp)
        wiring.connect(m, wiring.flipped(self.wgt_rd), loop.wgt)
        wiring.connect(m, wiring.flipped(self.acc_rd), loop.acc)
        # the accumulator's writers (one runs at a time): the loop engine, or an accumulator load while it writes
        enable = loop.acc_wr.en
        m.d.comb += [self.acc_wr.addr.eq(loop.acc_wr.addr), self.acc_wr.data.eq(loop.acc_wr.data)]
        for kind in ("ACC", "ACC_8BIT"):
            if kind in loaders:
                wr = loaders[kind].wr
                enable = enable | wr.en
                with m.If(wr.en):
                    m.d.comb += [self.acc_wr.addr.eq(wr.addr), self.acc_wr.data.eq(wr.data)]
        m.d.comb += self.acc_wr.en.eq(enable)
        # the output buffer: the loop engine's narrowed results; with no output buffer of its own (``mirror``)
        # the capability set's STORE narrows the accumulator, so here every accumulator write goes there too
        if caps.out_buffer == "mirror":
            m.d.comb += [self.out_wr.en.eq(enable), self.out_wr.addr.eq(self.acc_wr.addr),
                         self.out_wr.data.eq(narrow_lanes(self.acc_wr.data, p.acc_lanes, p.out_width))]
        else:
            wiring.connect(m, wiring.flipped(self.out_wr), loop.out_wr)

        def conditions(insn: Value) -> list[Value]:
            v = field_values(fmt, insn)
            opcode = v["opcode"]
            load = (opcode == OPCODES["LOAD"]) & (v["x_size"] != 0)
            return [*[load & (v["memory_type"] == MEM_TYPES[kind]) for kind in loaders],
                    (opcode == OPCODES["GEMM"]) | (opcode == OPCODES["ALU"])]

        q = _queue(m, p, self.insn, conditions, lambda insn: [field_values(fmt, insn)["opcode"] == OPCODES["FINISH"]])
        finish = q.extra[0]

        def on_issue(go: Value) -> None:
            m.d.comb += self.finished.eq(go & finish)

        _sequence(m, self, "compute", q, [*loaders.values(), loop], on_issue)
        return m


class StoreModule(wiring.Component):
    """STORE: output buffer entries (OUT_WIDTH per lane) to DRAM."""

    def __init__(self, p: RtlParams):
        self.p = p
        s = p.srams
        super().__init__({
            "insn": In(stream.Signature(INSN_BITS)), "mem": Out(dram_port(p.bus_bits)),
            "out_rd": Out(sram_read(s["out"].addr_bits, s["out"].width)),
            **token_members("store"), **EVENT_MEMBERS,
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        p = self.p
        fmt = p.fmt("mem")
        m.submodules.store = store = Store2D(fmt, p.srams["out"], p.bus_bits, p.burst, p.outstanding)
        wiring.connect(m, wiring.flipped(self.mem), store.mem)
        wiring.connect(m, wiring.flipped(self.out_rd), store.rd)
        def conditions(insn: Value) -> list[Value]:
            v = field_values(fmt, insn)
            return [(v["opcode"] == OPCODES["STORE"]) & (v["x_size"] != 0)]

        _sequence(m, self, "store", _queue(m, p, self.insn, conditions), [store])
        return m
