"""The DRAM side: element readers and writers over the bus-wide port, and the arbiter that shares one port.

DRAM elements (a micro-op, an input or weight tile, an accumulator row, an instruction) are powers of two
bytes and aligned to their size, so an element either spans whole bus beats or sits in one lane of a beat.

Beats go out in AXI4 bursts (``dram_port``): a burst runs to the end of the contiguous run its first element
belongs to (each reader and writer is told, with each element, how many elements of the run are left
including it: ``elems_left``: the rest of a 2-D transfer's row, of an instruction stream) or to the next
boundary of ``block`` beats, whichever comes first. ``block`` is a power of two no larger than AXI's 256
beats, than 4 KiB and than the engine's DMA burst (DMA_BURST_BEATS), so no burst crosses 4 KiB and bursts
are the engine's bursts cut at aligned boundaries. A reader reserves room for a whole burst's responses when
it starts one.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hardware.interfaces import dram_port
from hardware.params import DRAM_ADDR_BITS, log2
from hardware.shallow import equal_by_carry

MAX_BURST = 256          # AXI4: beats per INCR burst, at most
PAGE_BYTES = 4096        # AXI4: no burst crosses a 4 KiB boundary
LEFT_BITS = 16           # ``elems_left``: a row's elements (x_size is 16 bits); more saturates


def block_beats(unit_bytes: int, *caps: int) -> int:
    """The aligned block of beats of ``unit_bytes`` a burst stays inside: the largest power of two no larger
    than AXI's 256 beats, 4 KiB and each of ``caps``."""
    limit = min(MAX_BURST, PAGE_BYTES // unit_bytes, *caps)
    return 1 << (max(1, limit).bit_length() - 1)


def burst_beats(m: Module, addr: Value, lane: Value, elems_left: Value, elem_bytes: int, unit_bytes: int,
                block: int) -> tuple[Value, list[Value]]:
    """Beats of ``unit_bytes`` (1 .. ``block``) of a burst whose first beat is at byte address ``addr``
    (aligned to the unit), starting with an element in lane ``lane`` of that beat (0 when elements span whole
    beats), with ``elems_left`` elements of the run left from it on: up to the run's end or the next boundary
    of ``block`` beats, whichever is first. Also the candidates the count is the least of, so a caller asking
    whether the burst fits in ``free`` beats compares each with ``free`` side by side (``fits``) instead of
    comparing the count, which is one comparison and one multiplexer deeper."""
    if block == 1:
        return Const(1, 1), [Const(1, 1)]
    unit_log, block_log = log2(unit_bytes), log2(block)
    n = Signal(block_log + 1)
    to_boundary = Signal(block_log + 1)
    m.d.comb += to_boundary.eq(block - addr[unit_log:unit_log + block_log])
    if elem_bytes >= unit_bytes:
        beats_per_elem = elem_bytes // unit_bytes
        if block <= beats_per_elem:
            whole = Const(block, block_log + 1)           # inside one element: a whole aligned block
            return whole, [whole]
        to_end = elems_left << log2(beats_per_elem)
    else:
        to_end = ((lane + elems_left - 1) >> log2(unit_bytes // elem_bytes)) + 1
    m.d.comb += n.eq(Mux(to_end < to_boundary, to_end, to_boundary))
    return n, [to_end, to_boundary]


def fits(candidates: list[Value], free: Value) -> Value:
    """Whether the least of ``candidates`` (``burst_beats``'s) is at most ``free``: any one of them is. A candidate
    wider than ``free`` is compared on ``free``'s width, its higher bits tested apart (a narrow carry chain beside
    a small OR, not a comparison as wide as a row's length)."""
    out = Const(0)
    width = len(free)
    for c in candidates:
        out = out | ((c[:width] <= free) & ~c[width:].any() if len(c) > width else c <= free)
    return out


class ElemReader(wiring.Component):
    """Reads whole elements: ``addr`` takes element byte addresses, ``data`` gives the elements in order.

    Beats go out in bursts (module docstring). The first beat of a burst waits until ``outstanding`` beats can
    take all of the burst's responses (it reserves them); a response is accepted only when it has room, so a
    reader whose consumer stalls holds the response stream meanwhile (briefly: its consumer never waits on
    another). Elements narrower than a beat that follow one another in the same beat are served by one read;
    ``restart`` (a pulse at the start of each transfer) forgets the last beat, so DRAM written since is read
    again.
    """

    def __init__(self, elem_bits: int, bus_bits: int, outstanding: int, block: int):
        self.elem_bits, self.bus_bits, self.outstanding, self.block = elem_bits, bus_bits, outstanding, block
        assert block <= outstanding
        super().__init__({"addr": In(stream.Signature(DRAM_ADDR_BITS)), "data": Out(stream.Signature(elem_bits)),
                          "restart": In(1), "elems_left": In(LEFT_BITS), "burst_start": Out(1),
                          "mem": Out(dram_port(bus_bits))})

    def elaborate(self, platform) -> Module:
        m = Module()
        bus_bytes = self.bus_bits // 8
        lb = log2(bus_bytes)
        mem = self.mem
        m.d.comb += [mem.cmd_write.eq(0), mem.cmd_strb.eq(0), mem.cmd_data.eq(0)]
        # bursts: ``left`` beats of the current one are still to come; the next beat starts one when 0. Only a
        # burst's first beat goes to the port (its AR); the others are counted here, so a reader's own beats
        # never wait behind another client's AR that DRAM is not taking yet (which, with DRAM accepting a
        # limited number of bursts, could wait on this reader's data: a deadlock)
        left = Signal(range(self.block))
        first = left == 0
        offer = Signal()                  # the next beat is ready to go
        issued = offer & (~first | mem.cmd_ready)
        m.d.comb += mem.cmd_valid.eq(offer & first)
        received = mem.rsp_valid & mem.rsp_ready
        beat_addr = Signal(DRAM_ADDR_BITS)
        narrow = self.elem_bits < self.bus_bits
        lane = self.addr.payload[log2(self.elem_bits // 8):lb] if narrow else Const(0, 1)
        # a burst starts on an element's first beat (bursts end at element boundaries), so its size is taken from
        # the element's address as the engine gives it, not from the beat's (one adder less before ``issued``)
        n, candidates = burst_beats(m, self.addr.payload, lane, self.elems_left, self.elem_bits // 8, bus_bytes,
                                    self.block)
        m.d.comb += [mem.cmd_addr.eq(beat_addr), mem.cmd_first.eq(first), mem.cmd_len.eq(n - 1),
                     mem.cmd_size.eq(lb), self.burst_start.eq(first)]
        with m.If(issued):
            m.d.sync += left.eq(Mux(first, n - 1, left - 1))
        with m.If(self.restart):
            m.d.sync += left.eq(0)
        if self.elem_bits >= self.bus_bits:
            beats = self.elem_bits // self.bus_bits
            beat = Signal(range(beats))
            # room for the responses: ``free`` counts the beats not reserved (the outstanding ones' complement,
            # so the test is one comparison per candidate, not an adder and a comparison after the count)
            free = Signal(range(self.outstanding + 1), init=self.outstanding)
            m.d.sync += free.eq(free - Mux(issued & first, n, 0) + received)
            room = ~first | fits(candidates, free)
            m.d.comb += [offer.eq(self.addr.valid & room),
                         beat_addr.eq(self.addr.payload + (beat << lb)),
                         self.addr.ready.eq(issued & (beat == beats - 1))]
            with m.If(issued):
                m.d.sync += beat.eq(0 if beats == 1 else beat + 1)
                with m.If(beat == beats - 1):
                    m.d.sync += beat.eq(0)
            buf = Signal(self.elem_bits)
            count = Signal(range(beats))
            full = Signal()
            m.d.comb += [mem.rsp_ready.eq(~full | self.data.ready), self.data.valid.eq(full),
                         self.data.payload.eq(buf)]
            with m.If(self.data.valid & self.data.ready):
                m.d.sync += full.eq(0)
            with m.If(received):
                m.d.sync += buf.eq(Cat(buf[self.bus_bits:], mem.rsp_data))   # first beat ends lowest
                with m.If(count == beats - 1):
                    m.d.sync += [count.eq(0), full.eq(1)]
                with m.Else():
                    m.d.sync += count.eq(count + 1)
        else:
            # several elements per beat: consecutive elements in one beat share its read; the lane FIFO (one
            # entry per element) bounds what is in flight, and a response waits for its element's entry
            lanes = self.bus_bits // self.elem_bits
            lo = log2(self.elem_bits // 8)
            lane_bits = log2(lanes)
            # per element: its lane, and whether it reuses the beat of the element before it
            m.submodules.lanes = lane_fifo = fifo.SyncFIFOBuffered(width=lane_bits + 1, depth=self.outstanding)
            m.d.comb += beat_addr.eq(self.addr.payload & ~Const(bus_bytes - 1, DRAM_ADDR_BITS))
            last_beat, have_last = Signal(DRAM_ADDR_BITS), Signal()
            same = have_last & equal_by_carry(beat_addr[lb:], last_beat[lb:])
            m.d.comb += [offer.eq(self.addr.valid & lane_fifo.w_rdy & ~same),
                         self.addr.ready.eq(lane_fifo.w_rdy & (same | ~first | mem.cmd_ready)),
                         lane_fifo.w_en.eq(self.addr.valid & self.addr.ready),
                         lane_fifo.w_data.eq(Cat(self.addr.payload[lo:lo + lane_bits], same))]
            with m.If(issued):
                m.d.sync += [last_beat.eq(beat_addr), have_last.eq(1)]
            with m.If(self.restart):
                m.d.sync += have_last.eq(0)
            held = Signal(self.bus_bits)
            lane, reuse = lane_fifo.r_data[:lane_bits], lane_fifo.r_data[lane_bits]
            m.d.comb += [self.data.valid.eq(lane_fifo.r_rdy & (reuse | mem.rsp_valid)),
                         self.data.payload.eq(Mux(reuse, held, mem.rsp_data).word_select(lane, self.elem_bits)),
                         mem.rsp_ready.eq(lane_fifo.r_rdy & ~reuse & self.data.ready),
                         lane_fifo.r_en.eq(self.data.valid & self.data.ready)]
            with m.If(received):
                m.d.sync += held.eq(mem.rsp_data)
        return m


def write_request(elem_bits: int) -> data.StructLayout:
    return data.StructLayout({"addr": DRAM_ADDR_BITS, "data": elem_bits})


class ElemWriter(wiring.Component):
    """Writes whole elements: ``req`` takes (element byte address, element); each becomes one or more beats, in
    bursts (module docstring). An element narrower than the bus is one narrow beat (``cmd_size`` its bytes, at
    its own address, its lanes strobed), so a run of them is one burst, as AXI4's narrow transfers have it."""

    def __init__(self, elem_bits: int, bus_bits: int, block: int):
        self.elem_bits, self.bus_bits, self.block = elem_bits, bus_bits, block
        super().__init__({"req": In(stream.Signature(write_request(elem_bits))), "elems_left": In(LEFT_BITS),
                          "mem": Out(dram_port(bus_bits))})

    def elaborate(self, platform) -> Module:
        m = Module()
        bus_bytes = self.bus_bits // 8
        lb = log2(bus_bytes)
        mem, req = self.mem, self.req
        issued = mem.cmd_valid & mem.cmd_ready
        m.d.comb += [mem.cmd_valid.eq(req.valid), mem.cmd_write.eq(1), mem.rsp_ready.eq(0)]
        unit_log = lb if self.elem_bits >= self.bus_bits else log2(self.elem_bits // 8)
        left = Signal(range(self.block))
        first = left == 0
        n, _ = burst_beats(m, mem.cmd_addr, Const(0, 1), self.elems_left, self.elem_bits // 8, 1 << unit_log,
                           self.block)
        m.d.comb += [mem.cmd_first.eq(first), mem.cmd_len.eq(n - 1), mem.cmd_size.eq(unit_log)]
        with m.If(issued):
            m.d.sync += left.eq(Mux(first, n - 1, left - 1))
        if self.elem_bits >= self.bus_bits:
            beats = self.elem_bits // self.bus_bits
            beat = Signal(range(beats))
            m.d.comb += [mem.cmd_addr.eq(req.payload.addr + (beat << lb)),
                         mem.cmd_data.eq(req.payload.data.word_select(beat, self.bus_bits)),
                         mem.cmd_strb.eq(Const((1 << bus_bytes) - 1, bus_bytes)),
                         req.ready.eq(issued & (beat == beats - 1))]
            with m.If(issued):
                m.d.sync += beat.eq(0 if beats == 1 else beat + 1)
                with m.If(beat == beats - 1):
                    m.d.sync += beat.eq(0)
        else:
            lanes = self.bus_bits // self.elem_bits
            elem_bytes = self.elem_bits // 8
            lo = log2(elem_bytes)
            lane = req.payload.addr[lo:lo + log2(lanes)]
            m.d.comb += [mem.cmd_addr.eq(req.payload.addr),
                         mem.cmd_data.eq(Cat(*[req.payload.data] * lanes)),
                         mem.cmd_strb.eq(Const((1 << elem_bytes) - 1, bus_bytes) << (lane << lo)),
                         req.ready.eq(issued)]
        return m


class Skid(wiring.Component):
    """A register slice (two-entry skid buffer) on a valid/ready stream of ``width`` bits: ``o_valid``/``o_data``
    and ``i_ready`` come straight from registers, so no valid/ready path runs through it combinationally, and a
    stream through it still moves one item a cycle."""

    def __init__(self, width: int):
        self.width = width
        super().__init__({"i_valid": In(1), "i_ready": Out(1), "i_data": In(width),
                          "o_valid": Out(1), "o_ready": In(1), "o_data": Out(width)})

    def elaborate(self, platform) -> Module:
        m = Module()
        spare_valid, spare = Signal(), Signal(self.width)       # taken while the output was stalled
        out_valid, out = Signal(), Signal(self.width)
        m.d.comb += [self.i_ready.eq(~spare_valid), self.o_valid.eq(out_valid), self.o_data.eq(out)]
        with m.If(self.o_ready | ~out_valid):
            with m.If(spare_valid):
                m.d.sync += [out.eq(spare), out_valid.eq(1), spare_valid.eq(0)]
            with m.Else():
                m.d.sync += [out.eq(self.i_data), out_valid.eq(self.i_valid)]
        with m.Elif(self.i_valid & ~spare_valid):
            m.d.sync += [spare.eq(self.i_data), spare_valid.eq(1)]
        return m


# A command beat's fields on the DRAM port, in the order a register slice packs them.
CMD_FIELDS = ("cmd_addr", "cmd_write", "cmd_data", "cmd_strb", "cmd_first", "cmd_len", "cmd_size")


class Arbiter(wiring.Component):
    """Shares one DRAM port among clients as the AXI interconnect in front of VTA's DRAM port does among its
    masters: each cycle one client's beat goes out, chosen round robin among those with one, tagged with the
    client's AXI ID (``ids``); several clients' bursts are in flight at once, and each read response or write
    acknowledgement goes to the client its ID names (a client's own come in order).

    Every path is registered at both sides (``Skid``): each client's commands enter through a register slice, the
    chosen beat leaves through one, read responses come back through one and write acknowledgements through a
    register, so no valid/ready signal of one client reaches another client, or the AXI master, in the same
    cycle. A slice holds a beat offered and not taken, unchanged, as AXI asks of a valid that is not yet ready."""

    def __init__(self, ids: tuple[int, ...], bus_bits: int):
        self.ids, self.n, self.bus_bits = tuple(ids), len(ids), bus_bits
        super().__init__({**{f"client{i}": In(dram_port(bus_bits)) for i in range(self.n)},
                          "mem": Out(dram_port(bus_bits))})

    def clients(self) -> list:
        return [getattr(self, f"client{i}") for i in range(self.n)]

    def elaborate(self, platform) -> Module:
        m = Module()
        n = self.n
        clients = self.clients()
        mem = self.mem
        widths = [len(getattr(mem, f)) for f in CMD_FIELDS]
        width = sum(widths)

        def fields(flat) -> list:
            out, at = [], 0
            for w in widths:
                out.append(flat[at:at + w])
                at += w
            return out

        ins = []
        for i, c in enumerate(clients):
            m.submodules[f"in{i}"] = skid = Skid(width)
            m.d.comb += [skid.i_valid.eq(c.cmd_valid), c.cmd_ready.eq(skid.i_ready),
                         skid.i_data.eq(Cat(*[getattr(c, f) for f in CMD_FIELDS]))]
            ins.append(skid)
        m.submodules.out = out = Skid(width + len(mem.cmd_id))
        last = Signal(range(n))
        grant = Signal(range(n))
        granted = Signal()
        with m.Switch(last):
            for prev in range(n):
                with m.Case(prev):
                    for off in reversed(range(1, n + 1)):     # the client after ``prev`` wins: assigned last
                        idx = (prev + off) % n
                        with m.If(ins[idx].o_valid):
                            m.d.comb += [grant.eq(idx), granted.eq(1)]
        with m.Switch(grant):
            for i, skid in enumerate(ins):
                with m.Case(i):
                    m.d.comb += out.i_data.eq(Cat(skid.o_data, Const(self.ids[i], len(mem.cmd_id))))
        sent = granted & out.i_ready
        m.d.comb += out.i_valid.eq(granted)
        for i, skid in enumerate(ins):
            m.d.comb += skid.o_ready.eq(sent & (grant == i))
        with m.If(sent):
            m.d.sync += last.eq(grant)
        m.d.comb += [getattr(mem, f).eq(v) for f, v in zip(CMD_FIELDS, fields(out.o_data[:width]), strict=True)]
        m.d.comb += [mem.cmd_id.eq(out.o_data[width:]), mem.cmd_valid.eq(out.o_valid), out.o_ready.eq(mem.cmd_ready)]

        # read responses through a slice, then to the client the ID names
        m.submodules.rsp = rsp = Skid(len(mem.rsp_data) + 1 + len(mem.rsp_id))
        m.d.comb += [rsp.i_valid.eq(mem.rsp_valid), mem.rsp_ready.eq(rsp.i_ready),
                     rsp.i_data.eq(Cat(mem.rsp_data, mem.rsp_last, mem.rsp_id))]
        data, rlast, rid = rsp.o_data[:len(mem.rsp_data)], rsp.o_data[len(mem.rsp_data)], \
            rsp.o_data[len(mem.rsp_data) + 1:]
        wack, wack_id = Signal(), Signal(len(mem.wack_id))
        m.d.sync += [wack.eq(mem.wack), wack_id.eq(mem.wack_id)]
        for i, c in enumerate(clients):
            mine = rid == self.ids[i]
            with m.If(mine):
                m.d.comb += rsp.o_ready.eq(c.rsp_ready)
            m.d.comb += [c.rsp_valid.eq(rsp.o_valid & mine), c.rsp_data.eq(data), c.rsp_last.eq(rlast),
                         c.wack.eq(wack & (wack_id == self.ids[i]))]
        return m
