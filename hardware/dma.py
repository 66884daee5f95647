"""The 2-D DMA engines of LOAD and STORE, with VTA's field semantics (simulator/reference.py) and its timing.

LOAD: an SRAM tile of (y_pad_0 + y_size + y_pad_1) x (x_pad_0 + x_size + x_pad_1) entries from ``sram_base``,
zero in the padding, DRAM element ``dram_base + (y - y_pad_0) * x_stride + (x - x_pad_0)`` elsewhere (addresses
and strides in elements of the memory type). STORE: accumulator entry ``sram_base + y * x_size + x`` narrowed
to OUT_WIDTH bits per lane goes to OUT element ``dram_base + y * x_stride + x``.

Timing: the DRAM reads are pipelined (the DRAM latency is paid once per transfer), in bursts of at most
DMA_BURST_BEATS beats with no idle cycles of the engine's own between them (what a burst costs beyond its beats
is the DRAM port's, hardware/csrc/harness.cpp), and a LOAD spends one cycle per padding entry on top (as VTA's
HLS ``load_pad_2d`` zeroes padding in loops of its own, around each row's ``memcpy``). A STORE is done when DRAM
has acknowledged its last write.
"""

from __future__ import annotations

from collections.abc import Callable

from amaranth import Const, Module, Mux, Signal, Value, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hardware.decode import field_values
from hardware.dram import ElemReader, ElemWriter, block_beats
from hardware.interfaces import dram_port, sram_read, sram_write
from hardware.params import DRAM_ADDR_BITS, Burst, Sram, log2
from hardware.shallow import sign_counter
from hw_config.layout import INSN_BITS, Format


class Load2D(wiring.Component):
    """Executes one LOAD into one SRAM: ``cmd`` takes the instruction, ``done`` pulses when the tile is written.

    ``padded`` and ``rows`` say what the config's capability set executes for this memory type (``fields``).
    Two walkers go over the padded tile in order. The address walker spends a cycle on each padding entry and
    sends each data element's DRAM address to an ``ElemReader`` (one cycle per beat, in bursts); the fill
    walker writes each entry, a zero for padding and the element read (after ``widen``) for data, one entry per
    cycle when its data is there. An instruction with ``x_size`` 0 never reaches the engine (hardware/modules.py
    completes it without one).

    For timing (issue 38: at most 8 LUT levels between registers), nothing the walkers or the reader decide in a
    cycle runs through the instruction's adders: the tile's bounds are registered in the cycle after the
    instruction is taken (``_TileBounds``; the walkers start a cycle later, as before, so no cycle is added), the
    walkers' flags are counters' sign bits, and the element's DRAM byte address and the elements of its row left
    are registers stepped by one element or one stride.
    """

    def __init__(self, fmt: Format, elem_bits: int, sram: Sram, bus_bits: int, burst: Burst, outstanding: int,
                 widen: Callable[[Value], Value] | None = None, padded: bool = True, rows: bool = True):
        self.fmt, self.elem_bits, self.sram, self.bus_bits = fmt, elem_bits, sram, bus_bits
        self.burst, self.outstanding = burst, outstanding
        self.widen = widen or (lambda v: v)
        self.padded, self.rows = padded, rows
        super().__init__({"cmd": In(stream.Signature(INSN_BITS)), "done": Out(1),
                          "mem": Out(dram_port(bus_bits)), "wr": Out(sram_write(sram.addr_bits, sram.width))})

    def fields(self, insn: Value) -> dict[str, Value]:
        """The instruction's fields as this engine executes them: without ``padded`` the four pads read as 0
        (VTA's HLS ``load_2d``: rows of x_size entries from sram_base, pads ignored); without ``rows`` also
        y_size reads as 1 (HLS's micro-op load: one ``memcpy`` of x_size micro-ops)."""
        v = field_values(self.fmt, insn)
        if not self.padded or not self.rows:
            for name in ("y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1"):
                v[name] = Const(0, self.fmt.field(name).width)
        if not self.rows:
            v["y_size"] = Const(1, self.fmt.field("y_size").width)
        return v

    def elaborate(self, platform) -> Module:
        m = Module()
        block = block_beats(self.bus_bits // 8, self.burst.beats, self.outstanding)
        m.submodules.reader = reader = ElemReader(self.elem_bits, self.bus_bits, self.outstanding, block)
        wiring.connect(m, wiring.flipped(self.mem), reader.mem)
        f = self.fmt
        w = {name: f.field(name).width for name in f.names}
        insn = Signal(INSN_BITS)
        v = self.fields(insn)

        issuing, filling, started = Signal(), Signal(), Signal()
        m.d.comb += self.cmd.ready.eq(~issuing & ~filling & ~started)
        m.d.sync += started.eq(0)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [insn.eq(self.cmd.payload), started.eq(1)]
        tile = _TileBounds(m, v, started)

        # address walker over the padded tile: the next data element's DRAM byte address and the elements of its
        # row left (for the burst's length) are registers, stepped by one element or one row's stride
        here, last, step = tile.walker(m, "a")
        m.d.comb += step.eq(issuing & (~here | reader.addr.ready))
        elem_shift = log2(self.elem_bits // 8)
        row, addr = Signal(DRAM_ADDR_BITS), Signal(DRAM_ADDR_BITS)
        left = Signal(w["x_size"])                                # elements of the row left, including addr's
        left_2 = sign_counter("left_2", w["x_size"] + 1)       # left - 2: negative on the row's last element
        m.d.comb += [reader.addr.valid.eq(issuing & here), reader.addr.payload.eq(addr),
                     reader.elems_left.eq(left), reader.restart.eq(started)]
        with m.If(started):
            m.d.sync += [issuing.eq(~tile.empty), row.eq(v["dram_base"]), addr.eq(v["dram_base"] << elem_shift),
                         left.eq(v["x_size"]), left_2.eq(v["x_size"] - 2)]
        with m.If(step & last):
            m.d.sync += issuing.eq(0)
        with m.If(reader.addr.valid & reader.addr.ready):
            with m.If(left_2[-1]):         # the row's last element: the next row starts a stride further on
                next_row = (row + v["x_stride"])[:DRAM_ADDR_BITS]
                m.d.sync += [row.eq(next_row), addr.eq(next_row << elem_shift), left.eq(v["x_size"]),
                             left_2.eq(v["x_size"] - 2)]
            with m.Else():
                m.d.sync += [addr.eq(addr + (1 << elem_shift)), left.eq(left - 1), left_2.eq(left_2 - 1)]

        # fill walker over the whole padded tile
        is_data, fill_last, write = tile.walker(m, "f")
        sram_addr = Signal(self.sram.addr_bits)
        with m.If(started):
            m.d.sync += [filling.eq(~tile.empty), sram_addr.eq(v["sram_base"])]
        m.d.comb += write.eq(filling & (~is_data | reader.data.valid))
        m.d.comb += [reader.data.ready.eq(filling & is_data),
                     self.wr.en.eq(write), self.wr.addr.eq(sram_addr),
                     self.wr.data.eq(Mux(is_data, self.widen(reader.data.payload), 0))]
        with m.If(write):
            m.d.sync += sram_addr.eq(sram_addr + 1)
            with m.If(fill_last):
                m.d.sync += filling.eq(0)
        # done: the last entry is written (or, for an empty tile, right after the start)
        m.d.comb += self.done.eq((write & fill_last) | (started & tile.empty))
        return m


class _TileBounds:
    """A LOAD's padded tile as its walkers need it. Each walker keeps, per dimension, three signed counters whose
    sign bits are its flags (hardware/shallow.py): ``rest`` (total - 2 - pos: negative at the last position),
    ``before`` (pad_0 - 1 - pos: negative once past the leading pad) and ``after`` (pos - pad_0 - size: negative
    while before the trailing pad), so "data here" and "last entry" are two LUTs over flip-flops. The values they
    restart from at each row are registered in the cycle after the instruction is taken (``start``; the walkers
    start a cycle later), so no step runs through the instruction's adders."""

    def __init__(self, m: Module, v: dict[str, Value], start: Value):
        self.start = start
        self.width = max(len(v["y_size"]), len(v["x_size"])) + 3      # a size plus two pads, and a sign
        self.reload: dict[str, dict[str, Signal]] = {}
        self.at_start: dict[str, dict[str, Value]] = {}
        for d in ("x", "y"):
            pad0, size, pad1 = v[f"{d}_pad_0"], v[f"{d}_size"], v[f"{d}_pad_1"]
            comb = {"rest": pad0 + size + pad1 - 2, "before": pad0 - 1, "after": -(pad0 + size)}
            regs = {k: Signal(signed(self.width), name=f"tile_{d}_{k}") for k in comb}
            with m.If(start):
                m.d.sync += [regs[k].eq(comb[k]) for k in regs]
            self.reload[d], self.at_start[d] = regs, comb
        # no entries: no rows (a LOAD with x_size 0 never reaches the engine, hardware/modules.py)
        self.empty = (v["y_pad_0"] == 0) & (v["y_size"] == 0) & (v["y_pad_1"] == 0)

    def walker(self, m: Module, name: str) -> tuple[Signal, Value, Signal]:
        """A walk over the tile: whether its entry is data, whether it is the tile's last, and the signal the
        caller drives to step to the next entry."""
        step = Signal(name=f"{name}_step")
        c = {d: {k: sign_counter(f"{name}{d}_{k}", self.width) for k in ("rest", "before", "after")}
             for d in ("x", "y")}

        def advance(d: str) -> list:
            return [c[d]["rest"].eq(c[d]["rest"] - 1), c[d]["before"].eq(c[d]["before"] - 1),
                    c[d]["after"].eq(c[d]["after"] + 1)]

        with m.If(self.start):
            m.d.sync += [c[d][k].eq(self.at_start[d][k]) for d in c for k in c[d]]
        with m.Elif(step):
            with m.If(c["x"]["rest"][-1]):          # the row's last entry: the next row
                m.d.sync += [c["x"][k].eq(self.reload["x"][k]) for k in c["x"]] + advance("y")
            with m.Else():
                m.d.sync += advance("x")
        here = Signal(name=f"{name}_here")
        m.d.comb += here.eq(c["x"]["before"][-1] & c["x"]["after"][-1] & c["y"]["before"][-1] & c["y"]["after"][-1])
        return here, c["x"]["rest"][-1] & c["y"]["rest"][-1], step


class Store2D(wiring.Component):
    """Executes one STORE: reads output buffer entries (``out``: OUT_WIDTH bits a lane, as compute narrowed them)
    in order and writes them to DRAM as OUT elements, in bursts with at most ``outstanding`` write bursts
    unacknowledged. ``done`` pulses when the last burst is acknowledged."""

    def __init__(self, fmt: Format, out: Sram, bus_bits: int, burst: Burst, outstanding: int):
        self.fmt, self.out, self.bus_bits = fmt, out, bus_bits
        self.burst, self.outstanding = burst, outstanding
        self.out_bits = out.width
        super().__init__({"cmd": In(stream.Signature(INSN_BITS)), "done": Out(1),
                          "mem": Out(dram_port(bus_bits)), "rd": Out(sram_read(out.addr_bits, out.width))})

    def elaborate(self, platform) -> Module:
        m = Module()
        unit = min(self.out_bits, self.bus_bits) // 8
        m.submodules.writer = writer = ElemWriter(self.out_bits, self.bus_bits, block_beats(unit, self.burst.beats))
        wiring.connect(m, wiring.flipped(self.mem), writer.mem)
        f = self.fmt
        w = {name: f.field(name).width for name in f.names}
        insn = Signal(INSN_BITS)
        v = field_values(f, insn)
        # the element's DRAM byte address, the elements of its row left and the rows left are registers, stepped
        # by one element or one row's stride, so nothing on the way to the writer adds instruction fields
        elem_shift = log2(self.out_bits // 8)
        row, dram_addr = Signal(DRAM_ADDR_BITS), Signal(DRAM_ADDR_BITS)
        left = Signal(w["x_size"])                                   # elements of the row left
        left_2 = sign_counter("left_2", w["x_size"] + 1)          # left - 2 and rows left - 2: negative on
        rows_2 = sign_counter("rows_2", w["y_size"] + 1)          # the row's last element, on the last row
        row_done, last_row = left_2[-1], rows_2[-1]
        addr = Signal(self.out.addr_bits)
        m.d.comb += [writer.req.payload.addr.eq(dram_addr), writer.req.payload.data.eq(self.rd.data)]

        wrote = self.mem.cmd_valid & self.mem.cmd_ready
        pending = Signal(range(self.outstanding + 1))          # write bursts not yet acknowledged
        m.d.sync += pending.eq(pending + (wrote & self.mem.cmd_first) - self.mem.wack)
        m.d.comb += writer.elems_left.eq(left)
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.sync += insn.eq(self.cmd.payload)
                    m.next = "START"
            with m.State("START"):
                m.d.sync += [row.eq(v["dram_base"]), dram_addr.eq(v["dram_base"] << elem_shift),
                             left.eq(v["x_size"]), left_2.eq(v["x_size"] - 2), rows_2.eq(v["y_size"] - 2),
                             addr.eq(v["sram_base"])]
                with m.If((v["x_size"] == 0) | (v["y_size"] == 0)):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
                with m.Else():
                    m.next = "READ"
            with m.State("READ"):
                m.d.comb += [self.rd.addr.eq(addr), self.rd.en.eq(1)]
                m.next = "SEND"
            with m.State("SEND"):
                m.d.comb += writer.req.valid.eq(pending < self.outstanding)
                with m.If(writer.req.valid & writer.req.ready):
                    m.d.comb += [self.rd.addr.eq(addr + 1), self.rd.en.eq(1)]
                    m.d.sync += addr.eq(addr + 1)
                    with m.If(row_done):
                        next_row = (row + v["x_stride"])[:DRAM_ADDR_BITS]
                        m.d.sync += [row.eq(next_row), dram_addr.eq(next_row << elem_shift), left.eq(v["x_size"]),
                                     left_2.eq(v["x_size"] - 2), rows_2.eq(rows_2 - 1)]
                        with m.If(last_row):
                            m.next = "DRAIN"
                    with m.Else():
                        m.d.sync += [dram_addr.eq(dram_addr + (1 << elem_shift)), left.eq(left - 1),
                                     left_2.eq(left_2 - 1)]
            with m.State("DRAIN"), m.If((pending == 0) | ((pending == 1) & self.mem.wack)):
                m.d.comb += self.done.eq(1)
                m.next = "IDLE"
        return m
