"""The accelerator's AXI interfaces (hardware/axi.py) in Amaranth's simulator, against a small Python AXI model:
an AXI4 slave DRAM that stalls its ready signals and its responses at random and checks every rule a master
must keep (a valid, once raised, stays raised with its payload unchanged until ready; INCR bursts of at most
256 beats, aligned to their size, inside one 4 KiB page; WLAST on each burst's last beat and only there; write
strobes inside the beat's lanes), and an AXI4-Lite host on the four register ports.

The whole core of a tiny config runs random programs this way (DRAM equal to the C simulator's, bursts longer
than a beat seen), the adapters alone are driven beat by beat, and the registers are read and written through
AXI4-Lite (byte strobes, clear-on-read ap_done, an offset outside the map, two ports at once).
"""

from __future__ import annotations

import random
from typing import ClassVar

import numpy as np
import pytest
from extras import need
from golden_files import GOLDEN_DIR, requires_golden

from hw_config import load_config

# 1 x 4 x 4 GEMM core, 64-bit bus, small SRAMs and queues (fast in Amaranth's simulator)
TINY = {"LOG_BATCH": 0, "LOG_BLOCK": 2, "LOG_BUS_WIDTH": 6, "LOG_UOP_BUFF_SIZE": 10, "LOG_INP_BUFF_SIZE": 8,
        "LOG_WGT_BUFF_SIZE": 9, "LOG_ACC_BUFF_SIZE": 10, "INSN_QUEUE_DEPTH": 4, "TOKEN_QUEUE_DEPTH": 2,
        "DRAM_LATENCY": 6}


class ProtocolError(AssertionError):
    pass


class AxiDram:
    """An AXI4 slave over a sparse byte memory, one clock cycle per ``step``: ready signals and response valids
    stalled with probability ``stall``; beat k of a read burst ready ``latency`` + k cycles after its AR, the
    R channel taking turns among the IDs with a ready beat (each ID's bursts in order); a write response
    ``latency`` cycles after WLAST. Checks the master's side of the protocol; keeps every burst it saw."""

    CHANNELS: ClassVar[dict[str, tuple[str, ...]]] = {"ar": ("araddr", "arlen", "arsize", "arburst", "arid"),
                "aw": ("awaddr", "awlen", "awsize", "awburst", "awid"), "w": ("wdata", "wstrb", "wlast")}

    def __init__(self, bus, bus_bytes: int, latency: int, stall: float, rng: random.Random):
        self.bus, self.bus_bytes, self.latency, self.stall, self.rng = bus, bus_bytes, latency, stall, rng
        self.mem: dict[int, int] = {}
        self.reads: list[list] = []        # [addr, len, size, ready cycle, beat, id]
        self.writes: list[list] = []       # [addr, len, size, beat, id]
        self.bresps: list[tuple] = []      # (ready cycle, id)
        self.current: list | None = None   # the read burst R offers a beat of (held until RREADY)
        self.last_id = 0
        self.interleaved = False           # R carried beats of two bursts alternately
        self.offered: dict[str, tuple | None] = dict.fromkeys(self.CHANNELS)
        self.bursts: list[tuple[str, int, int, int]] = []   # (kind, addr, beats, size)
        self.cycle = 0

    def write_bytes(self, addr: int, data) -> None:
        for i, b in enumerate(bytes(data)):
            self.mem[addr + i] = b

    def read_bytes(self, addr: int, n: int) -> np.ndarray:
        return np.array([self.mem.get(addr + i, 0) for i in range(n)], np.uint8)

    def _pick(self):
        seen, best = set(), None
        for burst in self.reads:
            ident = burst[5]
            if ident in seen:
                continue
            seen.add(ident)
            if burst[3] + burst[4] <= self.cycle:
                rank = (ident - self.last_id - 1) % 256
                if best is None or rank < best[0]:
                    best = (rank, burst)
        return None if best is None else best[1]

    def _check_burst(self, kind: str, addr: int, length: int, size: int, burst: int, ident: int = 0) -> None:
        beats, nbytes = length + 1, 1 << size
        if burst != 1:
            raise ProtocolError(f"{kind}: burst type {burst}, not INCR")
        if nbytes > self.bus_bytes:
            raise ProtocolError(f"{kind}: size {nbytes} bytes on a {self.bus_bytes}-byte bus")
        if addr % nbytes:
            raise ProtocolError(f"{kind}: address 0x{addr:x} not aligned to its {nbytes}-byte beats")
        if beats > 256 or (addr % 4096) + beats * nbytes > 4096:
            raise ProtocolError(f"{kind}: {beats} beats of {nbytes} bytes at 0x{addr:x} cross a 4 KiB boundary")
        self.bursts.append((kind, addr, beats, nbytes, ident))

    async def step(self, ctx, during=None) -> None:
        """Drive this cycle's slave outputs, check and take the master's handshakes, then tick. ``during()``, if
        given, runs once the slave's outputs are set (to read what the other side makes of them)."""
        b, rng = self.bus, self.rng
        ready = {ch: int(rng.random() >= self.stall) for ch in ("ar", "aw", "w")}
        ctx.set(b.arready, ready["ar"])
        ctx.set(b.awready, ready["aw"])
        ctx.set(b.wready, ready["w"] and bool(self.writes))
        if self.current is None and rng.random() >= self.stall:
            self.current = self._pick()
        head = self.current
        rvalid = head is not None
        ctx.set(b.rvalid, rvalid)
        if rvalid:
            addr, length, size, _, beat, ident = head
            start = (addr + beat * (1 << size)) & ~(self.bus_bytes - 1)
            ctx.set(b.rdata, int.from_bytes(bytes(self.read_bytes(start, self.bus_bytes)), "little"))
            ctx.set(b.rlast, beat == length)
            ctx.set(b.rid, ident)
        bvalid = bool(self.bresps) and self.bresps[0][0] <= self.cycle and rng.random() >= self.stall
        ctx.set(b.bvalid, bvalid)
        if bvalid:
            ctx.set(b.bid, self.bresps[0][1])
        if during is not None:
            during()
        # the master's outputs, settled
        valid = {"ar": ctx.get(b.arvalid), "aw": ctx.get(b.awvalid), "w": ctx.get(b.wvalid)}
        if valid["w"] and not self.writes and ctx.get(b.wready):
            raise ProtocolError("W taken without an AW")
        for ch, names in self.CHANNELS.items():
            payload = tuple(ctx.get(getattr(b, n)) for n in names)
            before = self.offered[ch]
            if before is not None and (not valid[ch] or payload != before):
                raise ProtocolError(f"{ch.upper()}VALID dropped or its payload changed before {ch.upper()}READY "
                                    f"(cycle {self.cycle}: {before} -> {payload if valid[ch] else 'not valid'})")
            taken = valid[ch] and ctx.get(getattr(b, f"{ch}ready"))
            self.offered[ch] = payload if valid[ch] and not taken else None
            if not taken:
                continue
            if ch == "ar":
                self._check_burst("AR", *payload)
                self.reads.append([payload[0], payload[1], payload[2], self.cycle + self.latency, 0, payload[4]])
            elif ch == "aw":
                self._check_burst("AW", *payload)
                self.writes.append([payload[0], payload[1], payload[2], 0, payload[4]])
        if valid["w"] and ctx.get(b.wready):
            wdata, wstrb, wlast = (ctx.get(getattr(b, n)) for n in self.CHANNELS["w"])
            burst = self.writes[0]
            addr, length, size, beat, ident = burst
            at = addr + beat * (1 << size)
            lanes = ((1 << (1 << size)) - 1) << (at % self.bus_bytes)
            if wstrb & ~lanes:
                raise ProtocolError(f"W strobes 0x{wstrb:x} outside the lanes of a {1 << size}-byte beat at 0x{at:x}")
            if bool(wlast) != (beat == length):
                raise ProtocolError(f"WLAST {wlast} on beat {beat} of a {length + 1}-beat burst")
            base = at & ~(self.bus_bytes - 1)
            raw = wdata.to_bytes(self.bus_bytes, "little")
            for i in range(self.bus_bytes):
                if wstrb >> i & 1:
                    self.mem[base + i] = raw[i]
            burst[3] += 1
            if beat == length:
                self.writes.pop(0)
                self.bresps.append((self.cycle + self.latency, ident))
        if rvalid and ctx.get(b.rready):
            head[4] += 1
            if head[4] > head[1]:
                self.reads.remove(head)
            elif any(r is not head and r[4] > 0 for r in self.reads):
                self.interleaved = True
            self.last_id = head[5]
            self.current = None
        if bvalid and ctx.get(b.bready):
            self.bresps.pop(0)
        await ctx.tick()
        self.cycle += 1


class LitePorts:
    """An AXI4-Lite host on named ports (``ports[name]``: an object with the port's signals), stepping the
    DRAM model while it waits (the accelerator runs meanwhile)."""

    def __init__(self, ports: dict, dram: AxiDram | None, clock):
        self.ports, self.dram, self.clock = ports, dram, clock

    async def _step(self, ctx) -> None:
        if self.dram is not None:
            await self.dram.step(ctx)
        else:
            await ctx.tick()

    async def write(self, ctx, block: str, offset: int, value: int, strb: int = 0xF) -> None:
        p = self.ports[block]
        ctx.set(p.awaddr, offset)
        ctx.set(p.wdata, value)
        ctx.set(p.wstrb, strb)
        ctx.set(p.awvalid, 1)
        ctx.set(p.wvalid, 1)
        ctx.set(p.bready, 1)
        aw = w = False
        for _ in range(100):
            aw |= bool(ctx.get(p.awready))
            w |= bool(ctx.get(p.wready))
            done = ctx.get(p.bvalid)
            await self._step(ctx)
            if aw:
                ctx.set(p.awvalid, 0)
            if w:
                ctx.set(p.wvalid, 0)
            if done:
                ctx.set(p.bready, 0)
                return
        raise ProtocolError(f"no write response from {block} at 0x{offset:x}")

    async def read(self, ctx, block: str, offset: int) -> int:
        p = self.ports[block]
        ctx.set(p.araddr, offset)
        ctx.set(p.arvalid, 1)
        ctx.set(p.rready, 1)
        for _ in range(100):
            if ctx.get(p.arready):
                await self._step(ctx)
                ctx.set(p.arvalid, 0)
                break
            await self._step(ctx)
        for _ in range(100):
            if ctx.get(p.rvalid):
                value = ctx.get(p.rdata)
                await self._step(ctx)
                ctx.set(p.rready, 0)
                return value
            await self._step(ctx)
        raise ProtocolError(f"no read response from {block} at 0x{offset:x}")


class _Bus:
    """The flat ``<prefix>_<name>`` ports of the top level, as ``bus.name``."""

    def __init__(self, top, prefix: str):
        self.top, self.prefix = top, prefix

    def __getattr__(self, name: str):
        return getattr(self.top, f"{self.prefix}_{name}")


def _simulate(dut, bench) -> None:
    sim_mod = need("amaranth.sim")
    sim = sim_mod.Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


# ---------------------------------------------------------------------------------------------------------
# the whole core of a tiny config, on the AXI model with random stalls

def run_core(cfg, image, stall: float, seed: int, max_cycles: int = 200_000):
    """Run a program image on the generated core in Amaranth's simulator: DRAM and registers over AXI, VTA's
    launch sequence. Returns (segments after the run, the DRAM model, cycles)."""
    from hardware.core import VTACore
    from hardware.registers import (
        AP_START,
        AUTO_RESTART,
        COMPUTE_DONE_RD,
        CTRL,
        FETCH_INSN_ADDR,
        FETCH_INSN_COUNT,
    )

    dut = VTACore(cfg)
    dram = AxiDram(_Bus(dut, "m_axi"), cfg.BUS_BYTES, cfg.DRAM_LATENCY, stall, random.Random(seed))
    for addr, data in image.segments:
        dram.write_bytes(addr, data)
    dram.write_bytes(image.insn_addr, image.insns.reshape(-1))
    host = LitePorts({b: _Bus(dut, f"s_axi_{b}") for b in ("fetch", "load", "compute", "store")}, dram, None)
    out = {}

    async def bench(ctx):
        await host.write(ctx, "fetch", FETCH_INSN_COUNT, len(image.insns))
        await host.write(ctx, "fetch", FETCH_INSN_ADDR, image.insn_addr)
        for block in ("load", "compute", "store"):
            await host.write(ctx, block, CTRL, AP_START | AUTO_RESTART)
        await host.write(ctx, "fetch", CTRL, AP_START)
        start = dram.cycle
        while not await host.read(ctx, "compute", COMPUTE_DONE_RD):
            if dram.cycle - start > max_cycles:
                raise AssertionError("the program did not finish")
        out["cycles"] = dram.cycle - start
        for _ in range(4 * cfg.DRAM_LATENCY):             # nothing is left in flight after done
            await dram.step(ctx)
        assert not dram.reads and not dram.writes and not dram.bresps

    _simulate(dut, bench)
    return [(addr, dram.read_bytes(addr, data.size)) for addr, data in image.segments], dram, out["cycles"]


@pytest.mark.slow
@pytest.mark.parametrize("stall, seed", [(0.3, 0), (0.6, 2), (0.3, 4)])
def test_the_core_over_axi_leaves_the_c_simulators_dram_with_stalls(stall: float, seed: int):
    """Random programs (every instruction kind the capability set executes) on the tiny config's core, unstalled
    and with the DRAM's ready and response signals stalled at random: every rule of the protocol kept, bursts of
    several beats, DRAM as the C simulator leaves it (and not as it was: the stores wrote), the unstalled run's
    cycles near the C simulator's timing model (measured 1.05-1.18x on seeds 0-5: the host's polling of done
    over AXI4-Lite comes on top) and the stalled run's more."""
    need("amaranth")
    from test_hardware_rtl import random_program

    from simulator.replay import replay
    cfg = load_config("pynq", **TINY)
    image = random_program(cfg, seed)
    expected = replay(image)
    free, _, free_cycles = run_core(cfg, image, 0.0, seed)
    segments, dram, cycles = run_core(cfg, image, stall, seed)
    for got_segments in (free, segments):
        for (addr, want), (_, got) in zip(expected.segments, got_segments, strict=True):
            np.testing.assert_array_equal(got, want, err_msg=f"segment 0x{addr:x}")
    assert any(not np.array_equal(a, b) for (_, a), (_, b) in zip(image.segments, segments, strict=True))
    assert 0.95 <= free_cycles / expected.stats["cycles"] <= 1.25, (free_cycles, expected.stats["cycles"])
    assert cycles > free_cycles
    reads = [b for b in dram.bursts if b[0] == "AR"]
    writes = [b for b in dram.bursts if b[0] == "AW"]
    assert reads and writes
    assert max(b[2] for b in reads) > 1 and max(b[2] for b in writes) > 1
    # OUT elements (4 bytes) are narrower than the 8-byte bus: stores are narrow bursts of one element a beat
    assert {b[3] for b in writes} == {4}
    from hardware.core import DRAM_CLIENTS
    assert {b[4] for b in reads} >= {DRAM_CLIENTS.index(c) for c in ("fetch", "load.inp", "compute.uop")}
    assert {b[4] for b in writes} == {DRAM_CLIENTS.index("store")}


def test_a_directed_program_pads_both_sides_and_steps_the_inner_loop_by_its_own_factor():
    """One LOAD ACC padded on both sides of its row (x_pad_0 = x_pad_1 = 1: entries 0 and 3 zero, 1 and 2 data),
    and one ALU ADD over a 2 x 2 loop whose inner and outer factors differ (dst 4 + 4*i + j: entries 4, 5, 8, 9
    get the immediate, 6, 7, 10, 11 keep theirs), stored to DRAM: the bytes worked out here by hand, and the C
    simulator's too. (A right pad read as data, or the inner loop stepping by the outer factor, changes them.)"""
    need("amaranth")
    from programs import alu, finish_sync, load, low_byte, store

    from simulator.image import ProgramImage
    from simulator.replay import replay
    from vta.isa import Uop, assemble, uops_to_bytes

    cfg = load_config("pynq", **TINY, CAPABILITIES="fsim")          # fsim: ACC loads are padded
    lanes = cfg.BLOCK_OUT
    acc_at, uop_at, out_at, insn_at = 0x1000, 0x2000, 0x3000, 0x4000
    a = (10 * np.arange(10)[:, None] + np.arange(lanes)[None, :] - 30).astype(np.int32)   # 10 ACC elements
    program = finish_sync([
        load(cfg, "UOP", 0, uop_at, 1),
        load(cfg, "ACC", 0, acc_at, 2, pad=(0, 0, 1, 1)),                     # acc[0..3] = 0, a[0], a[1], 0
        load(cfg, "ACC", 4, acc_at, 8, offset=2),                              # acc[4..11] = a[2..9]
        alu("ADD", (0, 1), (2, 2), dst=(4, 1), src=(4, 1), imm=100, push_next_dep=1),
        store(cfg, 0, out_at, 12, pop_prev_dep=1),
    ])
    segments = [(acc_at, a.view(np.uint8).reshape(-1).copy()),
                (uop_at, np.frombuffer(uops_to_bytes([Uop(4, 4, 0)], cfg), np.uint8).copy()),
                (out_at, np.full(12 * lanes, 0x55, np.uint8))]
    image = ProgramImage(cfg, np.frombuffer(assemble(program, cfg), np.uint8).reshape(-1, 16).copy(), insn_at,
                         segments)
    acc = np.zeros((12, lanes), np.int64)
    acc[1:3] = a[0:2]
    acc[4:12] = a[2:10]
    acc[[4, 5, 8, 9]] += 100
    want = low_byte(acc).view(np.uint8).reshape(-1)
    got, _, _ = run_core(cfg, image, 0.0, 0, max_cycles=5_000)
    np.testing.assert_array_equal(got[2][1], want)
    np.testing.assert_array_equal(replay(image).segments[2][1], want)


def test_the_arbiter_registers_every_path_and_moves_a_beat_a_cycle():
    """No valid/ready signal crosses the arbiter in the same cycle: with the clock held, changing one client's
    cmd_valid, the port's cmd_ready, rsp_valid and wack changes nothing another client or the port sees (every
    output of the arbiter is a register). A client alone streams a beat a cycle through it; two share the beats
    round robin, each beat delivered once, in order per client, tagged with its ID."""
    need("amaranth")
    from hardware.dram import Arbiter

    dut = Arbiter((3, 5), 64)
    a, b, mem = dut.client0, dut.client1, dut.mem
    outputs = [a.cmd_ready, b.cmd_ready, mem.cmd_valid, mem.cmd_addr, mem.cmd_id, mem.rsp_ready, a.rsp_valid,
               b.rsp_valid, a.wack, b.wack]
    seen: dict[str, list] = {"beats": []}

    inputs = [a.cmd_valid, b.cmd_valid, a.cmd_addr, b.cmd_addr, mem.cmd_ready, mem.rsp_valid, mem.rsp_id,
              mem.wack, mem.wack_id, a.rsp_ready, b.rsp_ready]
    rng = random.Random(1)

    async def bench(ctx):
        for _ in range(60):                # random traffic; each cycle, the inputs changed twice before the edge
            values = []
            for _ in range(2):
                for sig in inputs:
                    ctx.set(sig, rng.randrange(1 << len(sig)) if len(sig) > 1 else rng.random() < 0.6)
                values.append([ctx.get(s) for s in outputs])
            assert values[0] == values[1]
            await ctx.tick()
        for sig in inputs:
            ctx.set(sig, 0)
        # streaming: a alone, then both; the port always ready
        ctx.set(b.cmd_valid, 0)
        ctx.set(mem.cmd_ready, 1)
        for _ in range(4):                 # drain what the slices hold
            await ctx.tick()
        sent = {0: 0, 1: 0}
        for cycle in range(40):
            both = cycle >= 20
            for i, c in enumerate((a, b)):
                ctx.set(c.cmd_valid, 1 if (i == 0 or both) else 0)
                ctx.set(c.cmd_addr, (i + 1) << 16 | sent[i])
            took = [ctx.get(a.cmd_ready), ctx.get(b.cmd_ready) and both]
            if ctx.get(mem.cmd_valid):
                seen["beats"].append((cycle, ctx.get(mem.cmd_id), ctx.get(mem.cmd_addr)))
            await ctx.tick()
            for i in (0, 1):
                sent[i] += int(took[i])

    _simulate(dut, bench)
    beats = [x for x in seen["beats"] if x[0] >= 4]
    alone = [x for x in beats if x[0] < 20]
    assert len(alone) == 16 and all(i == 3 for _, i, _ in alone)            # a beat every cycle
    shared = [x for x in beats if x[0] >= 24]
    assert len(shared) == 16 and {i for _, i, _ in shared} == {3, 5}
    assert abs(sum(i == 3 for _, i, _ in shared) - 8) <= 1                  # round robin
    for ident, tag in ((3, 1), (5, 2)):
        addrs = [addr for _, i, addr in beats if i == ident and addr >> 16 == tag]
        assert addrs == sorted(set(addrs))                                  # in order, none twice


# ---------------------------------------------------------------------------------------------------------
# the AXI4 master alone

def test_the_master_turns_bursts_into_ar_aw_and_w_with_wlast():
    """Beats offered on the DRAM read and write ports while the model stalls at random: one AR per read burst,
    one AW per write burst, a W per beat with WLAST on each burst's last, nothing offered twice or dropped,
    responses routed back with RLAST and a write acknowledgement per burst; AxPROT as asked (0b010, an
    UltraScale+ target's), AxCACHE 0b1111 and AxUSER 1 for coherent access."""
    need("amaranth")
    from hardware.axi import AxiMaster

    dut = AxiMaster(64, coherent=True, prot=0b010)
    rng = random.Random(5)
    dram = AxiDram(dut.axi, 8, 3, 0.5, rng)
    # (write, address, beats, size): reads of whole beats, writes of whole beats and narrow ones
    bursts = [(False, 0x100, 4, 3), (True, 0x200, 3, 3), (False, 0xFF8, 1, 3), (True, 0x304, 5, 2),
              (False, 0x1000, 16, 3), (True, 0x400, 1, 3)]
    for addr in range(0, 0x1100, 8):
        dram.write_bytes(addr, (addr // 8 * 0x0101010101010101 & (2**64 - 1)).to_bytes(8, "little"))
    seen = {"rsp": [], "rlast": [], "wack": 0, "attrs": set()}

    async def bench(ctx):
        ctx.set(dut.rd.rsp_ready, 1)
        beats = [(w, a + i * (1 << s), i == 0, n - 1, s, i) for w, a, n, s in bursts for i in range(n)]
        pending = list(beats)
        for _ in range(600):
            for port in (dut.rd, dut.wr):
                ctx.set(port.cmd_valid, 0)
            mem = dut.wr if pending and pending[0][0] else dut.rd
            if pending:
                w, addr, first, length, size, i = pending[0]
                ctx.set(mem.cmd_valid, 1)
                ctx.set(mem.cmd_write, w)
                ctx.set(mem.cmd_addr, addr)
                ctx.set(mem.cmd_first, first)
                ctx.set(mem.cmd_len, length)
                ctx.set(mem.cmd_size, size)
                lane = addr % 8
                ctx.set(mem.cmd_data, (0xA0 + i) * 0x0101010101010101)
                ctx.set(mem.cmd_strb, ((1 << (1 << size)) - 1) << lane)
            taken = []

            def during(taken=taken, mem=mem):
                taken.append(bool(pending) and ctx.get(mem.cmd_ready))
                if ctx.get(dut.rd.rsp_valid):
                    seen["rsp"].append(ctx.get(dut.rd.rsp_data))
                    seen["rlast"].append(ctx.get(dut.rd.rsp_last))
                seen["wack"] += ctx.get(dut.wr.wack)
                axi = dut.axi
                if ctx.get(axi.arvalid):
                    seen["attrs"].add(("ar", ctx.get(axi.arprot), ctx.get(axi.arcache), ctx.get(axi.aruser)))
                if ctx.get(axi.awvalid):
                    seen["attrs"].add(("aw", ctx.get(axi.awprot), ctx.get(axi.awcache), ctx.get(axi.awuser)))

            await dram.step(ctx, during)
            if taken[0]:
                pending.pop(0)

    _simulate(dut, bench)
    assert [b[:3] for b in dram.bursts] == [("AW" if w else "AR", a, n) for w, a, n, _ in bursts]
    assert sum(n for w, _, n, _ in bursts if not w) == len(seen["rsp"]) and seen["wack"] == 3
    assert seen["rlast"] == [int(i == n - 1) for w, _, n, _ in bursts if not w for i in range(n)]
    assert seen["rsp"][:4] == [(0x100 // 8 + i) * 0x0101010101010101 for i in range(4)]
    assert dram.read_bytes(0x200, 24).tolist() == [0xA0] * 8 + [0xA1] * 8 + [0xA2] * 8
    assert dram.read_bytes(0x304, 20).tolist() == [0xA0] * 4 + [0xA1] * 4 + [0xA2] * 4 + [0xA3] * 4 + [0xA4] * 4
    assert seen["attrs"] == {("ar", 0b010, 0b1111, 1), ("aw", 0b010, 0b1111, 1)}


# ---------------------------------------------------------------------------------------------------------
# the registers through AXI4-Lite

def test_registers_through_axi4_lite():
    """VTA's register map at each block's offsets: written and read back through each port, byte strobes,
    compute's done, ap_done raised by each finished instruction (fetch's by the end of the stream) and cleared by
    reading CTRL, 0 outside the map,
    and a write on one port with a read on another in the same cycle."""
    need("amaranth")
    from hardware.core import VTACore
    from hardware.registers import (
        AP_DONE,
        AP_IDLE,
        COMPUTE_BIAS_ADDR,
        COMPUTE_DONE_RD,
        CTRL,
        FETCH_INSN_ADDR,
        FETCH_INSN_COUNT,
        LOAD_WGT_ADDR,
        STORE_OUT_ADDR,
    )
    from vta.isa import FinishInsn, assemble

    cfg = load_config("pynq", **TINY)
    dut = VTACore(cfg)
    dram = AxiDram(_Bus(dut, "m_axi"), cfg.BUS_BYTES, cfg.DRAM_LATENCY, 0.0, random.Random(0))
    insns = np.frombuffer(assemble([FinishInsn()], cfg), np.uint8)
    dram.write_bytes(0x1000, insns)
    ports = {b: _Bus(dut, f"s_axi_{b}") for b in ("fetch", "load", "compute", "store")}
    host = LitePorts(ports, dram, None)
    got = {}

    async def bench(ctx):
        await host.write(ctx, "fetch", FETCH_INSN_COUNT, 0x12345678)
        await host.write(ctx, "load", LOAD_WGT_ADDR, 0xCAFEF00D)
        await host.write(ctx, "compute", COMPUTE_BIAS_ADDR, 0x11111111)
        await host.write(ctx, "compute", COMPUTE_BIAS_ADDR, 0xAABBCCDD, strb=0b0101)
        await host.write(ctx, "store", STORE_OUT_ADDR, 0x0BADBEEF)
        got["count"] = await host.read(ctx, "fetch", FETCH_INSN_COUNT)
        got["wgt"] = await host.read(ctx, "load", LOAD_WGT_ADDR)
        got["bias"] = await host.read(ctx, "compute", COMPUTE_BIAS_ADDR)
        got["out"] = await host.read(ctx, "store", STORE_OUT_ADDR)
        got["outside"] = await host.read(ctx, "store", 0x800)
        # two ports in one cycle: a write to load and a read of store
        pl, ps = ports["load"], ports["store"]
        for sig, v in ((pl.awaddr, LOAD_WGT_ADDR), (pl.wdata, 7), (pl.wstrb, 0xF), (pl.awvalid, 1), (pl.wvalid, 1),
                       (pl.bready, 1), (ps.araddr, STORE_OUT_ADDR), (ps.arvalid, 1), (ps.rready, 1)):
            ctx.set(sig, v)
        steps = []
        for _ in range(6):
            await dram.step(ctx, lambda: steps.append((ctx.get(pl.awready), ctx.get(ps.arready), ctx.get(pl.bvalid),
                                                       ctx.get(ps.rvalid), ctx.get(ps.rdata))))
            if steps[-1][0]:
                ctx.set(pl.awvalid, 0)
                ctx.set(pl.wvalid, 0)
            if steps[-1][1]:
                ctx.set(ps.arvalid, 0)
        ctx.set(pl.bready, 0)
        ctx.set(ps.rready, 0)
        got["both"] = steps
        got["wgt2"] = await host.read(ctx, "load", LOAD_WGT_ADDR)
        # a one-instruction run: FINISH sets done and compute's ap_done; reading CTRL clears ap_done
        got["ctrl_before"] = await host.read(ctx, "compute", CTRL)
        await host.write(ctx, "fetch", FETCH_INSN_COUNT, 1)
        await host.write(ctx, "fetch", FETCH_INSN_ADDR, 0x1000)
        await host.write(ctx, "fetch", CTRL, 1)
        for _ in range(100):
            if await host.read(ctx, "compute", COMPUTE_DONE_RD):
                break
        got["done"] = await host.read(ctx, "compute", COMPUTE_DONE_RD)
        got["ctrl_after"] = await host.read(ctx, "compute", CTRL)
        got["ctrl_again"] = await host.read(ctx, "compute", CTRL)
        got["fetch_ctrl"] = await host.read(ctx, "fetch", CTRL)
        got["fetch_ctrl_again"] = await host.read(ctx, "fetch", CTRL)

    _simulate(dut, bench)
    assert got["count"] == 0x12345678 and got["wgt"] == 0xCAFEF00D and got["out"] == 0x0BADBEEF
    assert got["bias"] == 0x11BB11DD                           # bytes 0 and 2 written, 1 and 3 kept
    assert got["outside"] == 0
    awready, arready = [s[0] for s in got["both"]], [s[1] for s in got["both"]]
    assert awready.index(1) == 0 and arready.index(1) == 1    # the write first, the read the next cycle
    assert any(s[3] and s[4] == 0x0BADBEEF for s in got["both"]) and any(s[2] for s in got["both"])
    assert got["wgt2"] == 7
    assert not got["ctrl_before"] & AP_DONE and got["ctrl_before"] & AP_IDLE
    assert got["done"] == 1 and got["ctrl_after"] & AP_DONE and not got["ctrl_again"] & AP_DONE
    assert got["fetch_ctrl"] & AP_IDLE and got["fetch_ctrl"] & AP_DONE          # fetch dispatched the stream ...
    assert not got["fetch_ctrl_again"] & AP_DONE                                 # ... and the read cleared it


def _lite_slaves_on_a_register_file(spacing: int, addr_bits: int, offsets: list[int]):
    """AxiLiteRegs over a plain register file: a 32-bit register at each of ``offsets`` in every block, written
    with its byte strobes, read through hardware/control.py ``read_mux``."""
    from amaranth import Cat, Elaboratable, Module, Mux, Signal

    from hardware.axi import AxiLiteRegs
    from hardware.control import read_mux

    blocks = ("fetch", "load", "compute", "store")

    class Top(Elaboratable):
        def __init__(self) -> None:
            self.lite = AxiLiteRegs(blocks, addr_bits, spacing, (len(blocks) * spacing - 1).bit_length())

        def elaborate(self, platform) -> Module:
            m = Module()
            m.submodules.lite = lite = self.lite
            reg, reads = lite.reg, {}
            for i in range(len(blocks)):
                for offset in offsets:
                    at = i * spacing + offset
                    stored = reads[at] = Signal(32, name=f"r{at:x}")
                    with m.If(reg.we & (reg.addr == at)):
                        m.d.sync += stored.eq(Cat(*[Mux(reg.strb[b], reg.wdata[8 * b:8 * b + 8],
                                                        stored[8 * b:8 * b + 8]) for b in range(4)]))
            m.d.comb += reg.rdata.eq(read_mux(reg.addr, reads, 32))
            return m

    return Top(), blocks


def test_the_lite_slaves_keep_axi4_lite_rules_with_four_hosts_at_random():
    """Four hosts, one per port, each writing and reading at random (AW before, with or after W; RREADY and
    BREADY held back at random; offsets inside and outside the map) on AxiLiteRegs over a plain register file:
    every rule of the slave's side holds on every cycle (BVALID only after both AW and W were taken, RVALID only
    after an AR, each held with RDATA unchanged until its ready; a port's AWREADY and WREADY together, never
    without both valids), and every read returns what a model returns that applies the accesses one at a time
    in the cycles the slave took them (0 outside the map, byte strobes)."""
    need("amaranth")
    spacing, addr_bits, offsets = 0x40, 7, [0x0, 0x4, 0x10, 0x3c]
    top, blocks = _lite_slaves_on_a_register_file(spacing, addr_bits, offsets)
    rng = random.Random(11)
    model: dict[int, int] = {}
    stats = {"reads": 0, "writes": 0, "outside": 0, "same_cycle": 0}

    async def bench(ctx):
        hosts = [{"kind": None} for _ in blocks]
        held = {}                                  # (port, "b"/"r") -> rdata offered and not yet taken
        for _cycle in range(3000):
            for i, (name, h) in enumerate(zip(blocks, hosts, strict=True)):
                p = getattr(top.lite, name)
                if h["kind"] is None and rng.random() < 0.3:
                    offset = rng.choice(offsets + [0x20, spacing, spacing + 4, (1 << addr_bits) - 4])
                    h.update(kind=rng.choice("wr"), offset=offset, data=rng.randrange(1 << 32),
                             strb=rng.randrange(16), aw_at=rng.randrange(3), w_at=rng.randrange(3), age=0,
                             aw=False, w=False, ar=False)
                age = h.get("age", 0)
                ctx.set(p.awvalid, h["kind"] == "w" and not h["aw"] and age >= h["aw_at"])
                ctx.set(p.wvalid, h["kind"] == "w" and not h["w"] and age >= h["w_at"])
                ctx.set(p.arvalid, h["kind"] == "r" and not h["ar"])
                ctx.set(p.awaddr, h.get("offset", 0) if h["kind"] == "w" else rng.randrange(1 << addr_bits))
                ctx.set(p.wdata, h.get("data", 0) if h["kind"] == "w" else rng.randrange(1 << 32))
                ctx.set(p.wstrb, h.get("strb", 0))
                ctx.set(p.araddr, h.get("offset", 0) if h["kind"] == "r" else rng.randrange(1 << addr_bits))
                ctx.set(p.bready, rng.random() < 0.6)
                ctx.set(p.rready, rng.random() < 0.6)
            taken = []
            for i, (name, h) in enumerate(zip(blocks, hosts, strict=True)):
                p = getattr(top.lite, name)
                awv, wv, arv = ctx.get(p.awvalid), ctx.get(p.wvalid), ctx.get(p.arvalid)
                awr, wr, arr = ctx.get(p.awready), ctx.get(p.wready), ctx.get(p.arready)
                bv, rv, rdata = ctx.get(p.bvalid), ctx.get(p.rvalid), ctx.get(p.rdata)
                assert awr == wr and (not awr or (awv and wv)), f"{name}: AWREADY/WREADY without both valids"
                assert not arr or arv, f"{name}: ARREADY without ARVALID"
                assert ctx.get(p.bresp) == 0 and ctx.get(p.rresp) == 0
                if (i, "b") in held:
                    assert bv, f"{name}: BVALID dropped before BREADY"
                if (i, "r") in held:
                    assert rv and rdata == held[(i, "r")], f"{name}: RVALID dropped or RDATA changed before RREADY"
                assert not bv or (h["kind"] == "w" and h["aw"] and h["w"]), f"{name}: BVALID before AW and W"
                assert not rv or (h["kind"] == "r" and h["ar"]), f"{name}: RVALID before an AR"
                if awv and awr:
                    h["aw"] = h["w"] = True
                    taken.append(("w", i, h))
                if arv and arr:
                    h["ar"] = True
                    taken.append(("r", i, h))
                held.pop((i, "b"), None)
                held.pop((i, "r"), None)
                if bv and ctx.get(p.bready):
                    h["kind"] = None
                    stats["writes"] += 1
                elif bv:
                    held[(i, "b")] = 1
                if rv and ctx.get(p.rready):
                    assert rdata == h["want"], f"{name}: read of 0x{h['offset']:x} gave 0x{rdata:x}, not 0x{h['want']:x}"
                    h["kind"] = None
                    stats["reads"] += 1
                elif rv:
                    held[(i, "r")] = rdata
                h["age"] = h.get("age", 0) + 1
            assert len(taken) <= 1, "two accesses taken in one cycle"
            stats["same_cycle"] += sum(h["kind"] is not None for h in hosts) > 1
            for kind, i, h in taken:                   # the model applies the access the slave took
                at = i * spacing + h["offset"]
                inside = h["offset"] < spacing and h["offset"] in offsets
                stats["outside"] += h["offset"] >= spacing
                if kind == "w" and inside:
                    mask = sum(0xFF << 8 * b for b in range(4) if h["strb"] >> b & 1)
                    model[at] = (model.get(at, 0) & ~mask) | (h["data"] & mask)
                elif kind == "r":
                    h["want"] = model.get(at, 0) if inside else 0
            await ctx.tick()

    _simulate(top, bench)
    assert stats["reads"] > 300 and stats["writes"] > 300 and stats["outside"] > 50 and stats["same_cycle"] > 1000


# ---------------------------------------------------------------------------------------------------------
# the Verilator model: its harness's AXI4 slave checks the same rules on every cycle of every run

@pytest.mark.slow
@pytest.mark.parametrize("config", ["pynq", "small"])
def test_random_programs_under_axi_back_pressure_on_the_verilator_model(config: str):
    """The harness's DRAM stalls AR/AW/W ready, R and B at random (40% of cycles on every channel; then each
    channel its own rate, one burst outstanding each way, a slow read and a fast write latency, idle cycles
    between bursts): random programs still leave the C simulator's DRAM and no rule is broken (a violation
    stops the run with an RtlError); the bursts are long ones, up to the config's DMA burst."""
    from test_hardware_rtl import device, random_program

    from hardware.device import DramSettings
    from simulator.replay import replay
    dev = device(config)
    before = dev.axi_stats()
    uneven = DramSettings(read_latency=57, write_latency=3, max_reads=1, max_writes=1, burst_gap=5, stall_ar=30,
                          stall_aw=70, stall_w=50, stall_r=20, stall_b=60, seed=13)
    try:
        for seed, settings in ((11, None), (12, None), (13, uneven)):
            if settings is None:
                dev.stress(40, seed)
            else:
                dev.set_dram(settings)
            image = random_program(dev.cfg, seed)
            expected = replay(image)
            dev.reprogram()
            segments, _ = dev.replay(image)
            for (addr, want), (_, got) in zip(expected.segments, segments, strict=True):
                np.testing.assert_array_equal(got, want, err_msg=f"segment 0x{addr:x}, seed {seed}")
    finally:
        dev.set_dram(DramSettings.for_config(dev.cfg))
    after = dev.axi_stats()
    assert after["read_bursts"] > before["read_bursts"] and after["write_bursts"] > before["write_bursts"]
    assert after["read_beats"] > after["read_bursts"] and 1 < after["longest_read"] <= 256


@pytest.mark.slow
def test_an_error_response_from_dram_is_a_device_error_naming_the_client_and_address():
    """DRAM answers the input region's reads SLVERR, then the output region's writes DECERR: each run raises
    DramError naming the response, the DRAM client (from the AXI master's status register) and the failing
    burst's address; with the errors gone the next run is clean (the status register clears at launch)."""
    from test_hardware_rtl import INP, OUT, REGION, device, random_program

    from hardware.device import DramError
    from simulator.replay import replay
    dev = device("pynq")
    image = random_program(dev.cfg, 3)
    try:
        dev.fail_dram(INP, REGION, "SLVERR")
        with pytest.raises(DramError, match=r"a read of load\.(inp|wgt) got SLVERR .*a read at 0x1[0-3][0-9a-f]{3} "
                                            r"\(SLVERR\)"):
            dev.replay(image)
        dev.fail_dram(OUT, REGION, "DECERR")
        with pytest.raises(DramError, match=r"a write of store got DECERR .*a write at 0x2[4-7][0-9a-f]{3} "
                                            r"\(DECERR\)"):
            dev.replay(image)
        with pytest.raises(ValueError, match="resp='OKAY': one of SLVERR, DECERR"):
            dev.fail_dram(OUT, REGION, "OKAY")
    finally:
        dev.fail_dram(0, 0)
    dev.reset()              # SRAMs as the C simulator's fresh ones: zero
    segments, _ = dev.replay(image)
    for (addr, want), (_, got) in zip(replay(image).segments, segments, strict=True):
        np.testing.assert_array_equal(got, want, err_msg=f"segment 0x{addr:x}")


@pytest.mark.slow
@requires_golden
def test_bursts_on_the_verilator_model_are_the_dma_engines_bursts():
    """gemm_1 unstalled: a read burst is never longer than the config's DMA burst (16 beats) nor than fetch's
    block of instructions, and the cycles stay those of the timing model (within 3%)."""
    from test_hardware_rtl import device

    from simulator.image import load_image
    from simulator.replay import replay
    dev = device("pynq")
    image = load_image(GOLDEN_DIR / "gemm_1.npz")
    before = dev.axi_stats()
    dev.reprogram()
    _, cycles = dev.replay(image)
    after = dev.axi_stats()
    reads = after["read_bursts"] - before["read_bursts"]
    beats = after["read_beats"] - before["read_beats"]
    assert reads and beats / reads > 2 and after["longest_read"] <= 2 * 16
    assert abs(cycles / replay(image).stats["cycles"] - 1) <= 0.03


def test_dram_settings_come_from_the_config_and_refuse_what_the_harness_cannot_do():
    """The ACP-like defaults follow the config (the model's DRAM_LATENCY less the arbiter's slices, its burst gap)
    and every field out of range is a ValueError naming it and its range."""
    from hardware.device import DramSettings
    from hardware.params import INTERCONNECT_CYCLES

    cfg = load_config("pynq")
    d = DramSettings.for_config(cfg, stall_r=30)
    assert (d.read_latency, d.write_latency) == (cfg.DRAM_LATENCY - INTERCONNECT_CYCLES,) * 2
    assert (d.burst_gap, d.max_reads, d.max_writes, d.stall_r) == (cfg.DMA_BURST_GAP, 7, 3, 30)
    assert DramSettings.for_config(load_config("pynq", DRAM_LATENCY=0)).read_latency == 1
    for field, bad, allowed in (("read_latency", 0, "1..100000"), ("max_writes", 0, "1..100000"),
                                ("stall_b", 100, "0..99"), ("burst_gap", -1, "0..10000"), ("seed", 2**64, "0..")):
        with pytest.raises(ValueError, match=rf"DramSettings\.{field}={bad}: an integer {allowed}"):
            DramSettings.for_config(cfg, **{field: bad})
