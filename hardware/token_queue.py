"""A dependency-token queue (l2g, g2l, s2g, g2s): tokens carry no data, so the queue is a counter."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from hardware.interfaces import TOKEN


class TokenQueue(wiring.Component):
    """Holds up to ``depth`` tokens (the config's TOKEN_QUEUE_DEPTH). A push waits for room, a pop for a token;
    a push and a pop in the same cycle both move (when each is allowed on its own). ``clear`` empties it."""

    def __init__(self, depth: int):
        if depth < 1:
            raise ValueError(f"token queue depth {depth}: need at least 1")
        self.depth = depth
        super().__init__({"push": In(TOKEN), "pop": In(TOKEN), "clear": In(1)})
        self.count = Signal(range(depth + 1))

    def elaborate(self, platform) -> Module:
        m = Module()
        m.d.comb += [self.push.ready.eq(self.count < self.depth), self.pop.ready.eq(self.count > 0)]
        pushed = self.push.valid & self.push.ready
        popped = self.pop.valid & self.pop.ready
        with m.If(self.clear):
            m.d.sync += self.count.eq(0)
        with m.Elif(pushed & ~popped):
            m.d.sync += self.count.eq(self.count + 1)
        with m.Elif(popped & ~pushed):
            m.d.sync += self.count.eq(self.count - 1)
        return m
