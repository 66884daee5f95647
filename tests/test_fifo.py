"""hardware/fifo.py's HeadRegisterFIFO in Amaranth's simulator against a Python deque, under random writes and
reads: every entry comes out once and in order, the head register holds what the deque's head is, ``level`` is
the deque's length, a write is refused only when full, and the cycles are never worse than Amaranth's
``SyncFIFOBuffered`` (the FIFO it replaces): an entry written into an empty queue is at the head the next cycle
(one cycle sooner), and a queue holding entries hands out one a cycle."""

from __future__ import annotations

import random
from collections import deque

import pytest
from extras import need


def _run(dut, bench) -> None:
    sim_mod = need("amaranth.sim")
    sim = sim_mod.Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def _random_traffic(fifo, depth: int, cycles: int, seed: int, p_write: float, p_read: float) -> dict:
    """Drive ``fifo`` with random w_en/r_en, check it against a deque each cycle; the counts of what moved."""
    rng = random.Random(seed)
    model: deque[int] = deque()
    seen = {"writes": 0, "reads": 0, "full": 0, "refused": 0}

    async def bench(ctx):
        nxt = 1
        for _ in range(cycles):
            rdy = ctx.get(fifo.r_rdy)
            assert ctx.get(fifo.level) == len(model)
            # the head is the oldest entry whenever there is one (a cycle's lag at most: the bypass or the read
            # register only refill it at the clock edge)
            if rdy:
                assert model and ctx.get(fifo.r_data) == model[0]
            w_en, r_en = rng.random() < p_write, rng.random() < p_read
            ctx.set(fifo.w_data, nxt)
            ctx.set(fifo.w_en, w_en)
            ctx.set(fifo.r_en, r_en)
            w_rdy = ctx.get(fifo.w_rdy)
            assert w_rdy == (len(model) < depth)
            seen["full"] += len(model) == depth
            seen["refused"] += w_en and not w_rdy
            await ctx.tick()
            if r_en and rdy:
                model.popleft()
                seen["reads"] += 1
            if w_en and w_rdy:
                model.append(nxt)
                nxt += 1
                seen["writes"] += 1

    _run(fifo, bench)
    return seen


@pytest.mark.parametrize("depth", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("p_write, p_read", [(0.7, 0.3), (0.5, 0.5), (0.3, 0.9), (0.95, 0.95)])
def test_the_head_register_fifo_is_a_fifo(depth: int, p_write: float, p_read: float):
    need("amaranth")
    from hardware.fifo import HeadRegisterFIFO

    seen = _random_traffic(HeadRegisterFIFO(16, depth), depth, 400, depth * 7 + int(p_write * 10), p_write, p_read)
    assert seen["writes"] > 50 and seen["reads"] > 50
    if p_write > p_read:
        assert seen["full"] > 0 and seen["refused"] > 0       # the full queue was exercised


def _latencies(fifo) -> tuple[int, int, int]:
    """(cycles from a write into the empty queue to its entry at the head; from a write in the cycle that reads
    the only entry to the new entry at the head; to read 8 entries written back to back into the empty queue
    with the reader always ready)."""
    out = {}

    async def at_head(ctx, value: int) -> int:
        n = 1
        while not (ctx.get(fifo.r_rdy) and ctx.get(fifo.r_data) == value):
            await ctx.tick()
            n += 1
        return n

    async def bench(ctx):
        ctx.set(fifo.w_data, 5)
        ctx.set(fifo.w_en, 1)
        await ctx.tick()
        ctx.set(fifo.w_en, 0)
        out["empty"] = await at_head(ctx, 5)
        ctx.set(fifo.w_data, 6)            # the head read and a new entry written in the same cycle
        ctx.set(fifo.w_en, 1)
        ctx.set(fifo.r_en, 1)
        await ctx.tick()
        ctx.set(fifo.w_en, 0)
        ctx.set(fifo.r_en, 0)
        out["refill"] = await at_head(ctx, 6)
        ctx.set(fifo.r_en, 1)
        await ctx.tick()
        ctx.set(fifo.r_en, 0)
        for i in range(8):              # a burst of writes, then drained by an always-ready reader
            ctx.set(fifo.w_data, i)
            ctx.set(fifo.w_en, 1)
            await ctx.tick()
        ctx.set(fifo.w_en, 0)
        ctx.set(fifo.r_en, 1)
        got, n = [], 0
        while len(got) < 8:
            if ctx.get(fifo.r_rdy):
                got.append(ctx.get(fifo.r_data))
            await ctx.tick()
            n += 1
        assert got == list(range(8))
        out["drain"] = n

    _run(fifo, bench)
    return out["empty"], out["refill"], out["drain"]


def test_the_head_register_costs_no_cycle_against_sync_fifo_buffered():
    need("amaranth")
    from amaranth.lib.fifo import SyncFIFOBuffered

    from hardware.fifo import HeadRegisterFIFO

    ours = _latencies(HeadRegisterFIFO(8, 16))
    before = _latencies(SyncFIFOBuffered(width=8, depth=16))
    assert ours == (1, 1, 8)          # the bypass: at the head the next cycle, even as the head is read; one a cycle
    assert before == (2, 2, 8)        # what the command queues and fetch's buffer had before


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_a_head_register_fifo_of_no_entries_is_refused():
    need("amaranth")
    from hardware.fifo import HeadRegisterFIFO

    with pytest.raises(ValueError, match="HeadRegisterFIFO depth 0 is not allowed: at least 1"):
        HeadRegisterFIFO(8, 0)
