"""A first-in first-out queue whose head is a register, for the FIFOs whose head feeds a decision that reads them
(the modules' command queues, fetch's prefetch buffer: issue 38's critical path).

Amaranth's ``SyncFIFOBuffered`` presents its head straight from the block RAM's read register, so everything
decided from the head (which module, which engine, are its tokens there) starts at the block RAM's clock-to-out
(2.45 ns on a RAMB36E1, 5.61 ns on an ECP5 DP16KD) and ends at the same block RAM's read enable and the level
counter. Here the head is a bank of flip-flops, filled from three places in priority order:

- the block RAM's read register, when it holds the next entry;
- the entry being written, when the queue holds nothing else (the bypass): an entry written into an empty queue
  is at the head the next cycle, a cycle earlier than ``SyncFIFOBuffered``'s two, so the head register costs no
  cycle (a plain register slice in front of the FIFO did: +1 cycle per instruction reaching an empty queue);
- else the head keeps its entry.

Behind the head, entries wait in the block RAM (written when the head or the read register is taken) and move
to the read register as soon as it is free or being emptied into the head: a queue that holds entries hands out
one a cycle. The block RAM's output therefore feeds only the head register (a 2:1 mux), ``r_data``/``r_rdy``
and ``w_rdy`` are flip-flops, and ``level`` is a counter register.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out


class HeadRegisterFIFO(wiring.Component):
    """``depth`` entries of ``width`` bits. Writes: ``w_data`` is taken when ``w_en & w_rdy``; reads: ``r_data``
    is the head while ``r_rdy``, removed when ``r_en & r_rdy``. A write to a full queue waits even in a cycle
    that reads (``w_rdy`` is a register, so no read decision reaches the writer combinationally)."""

    def __init__(self, width: int, depth: int):
        if depth < 1:
            raise ValueError(f"HeadRegisterFIFO depth {depth} is not allowed: at least 1")
        self.width, self.depth = width, depth
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1),
            "level": Out(range(depth + 1)),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        depth = self.depth
        full = Signal()
        m.d.comb += self.w_rdy.eq(~full)
        write = self.w_en & ~full
        read = self.r_en & self.r_rdy
        head_free = ~self.r_rdy | self.r_en          # the head register is empty after this cycle unless filled

        # the occupancy (every entry: head, read register, block RAM) and the full flag, both registers
        with m.If(write & ~read):
            m.d.sync += [self.level.eq(self.level + 1), full.eq(self.level == depth - 1)]
        with m.Elif(read & ~write):
            m.d.sync += [self.level.eq(self.level - 1), full.eq(0)]

        if depth == 1:      # the head is the whole queue: a write always finds it empty
            with m.If(write):
                m.d.sync += [self.r_data.eq(self.w_data), self.r_rdy.eq(1)]
            with m.Elif(read):
                m.d.sync += self.r_rdy.eq(0)
            return m

        m.submodules.storage = storage = Memory(shape=self.width, depth=depth, init=[])
        w_port = storage.write_port()
        r_port = storage.read_port(domain="sync")
        produce, consume = Signal(range(depth)), Signal(range(depth))
        stored = Signal(range(depth + 1))              # entries in the block RAM, not yet in its read register
        staged = Signal()                              # the read register holds the next entry
        stored_none = Signal(init=1)                   # stored == 0, kept as a register

        staged_to_head = staged & head_free
        fetch = ~stored_none & (~staged | staged_to_head)      # read the block RAM into its read register
        bypass = write & head_free & ~staged & stored_none       # nothing queued: straight to the head
        store = write & ~bypass

        def wrap(v: Signal) -> object:
            return Mux(v == depth - 1, 0, v + 1)

        m.d.comb += [w_port.addr.eq(produce), w_port.data.eq(self.w_data), w_port.en.eq(store),
                     r_port.addr.eq(consume), r_port.en.eq(fetch)]
        with m.If(store):
            m.d.sync += produce.eq(wrap(produce))
        with m.If(fetch):
            m.d.sync += consume.eq(wrap(consume))
        with m.If(store & ~fetch):
            m.d.sync += [stored.eq(stored + 1), stored_none.eq(0)]
        with m.Elif(fetch & ~store):
            m.d.sync += [stored.eq(stored - 1), stored_none.eq(stored == 1)]
        with m.If(fetch):
            m.d.sync += staged.eq(1)
        with m.Elif(staged_to_head):
            m.d.sync += staged.eq(0)

        with m.If(staged_to_head):
            m.d.sync += [self.r_data.eq(r_port.data), self.r_rdy.eq(1)]
        with m.Elif(bypass):
            m.d.sync += [self.r_data.eq(self.w_data), self.r_rdy.eq(1)]
        with m.Elif(read):
            m.d.sync += self.r_rdy.eq(0)
        return m
