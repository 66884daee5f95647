"""The RTL's control side: VTA's performance counters counted by the hardware (hardware/counters.py) and read
through the register map, held to the instruction stream's count (``program_counters``, which
tests/test_hardware_rtl.py holds to the C simulator) and to VTA's own counters in the golden traces; the reset
input (registers and queues start over, SRAMs keep their contents, as on a board); the HLS block control
(fetch's clear-on-read ap_done, GIE, IER, ISR toggle-on-write and the interrupt outputs).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from extras import need
from golden_files import GOLDEN_DIR, requires_golden
from programs import alu, finish_sync, load, store
from test_golden import NAMES
from test_hardware import simulate

from hardware import registers as R
from hardware.stats import COUNTERS, program_counters
from hw_config import load_config
from hw_config.isa_rules import MODULES, module_indices
from simulator.image import load_image
from vta.isa import Uop, assemble, uops_to_bytes


def test_every_counter_has_a_register_pair_at_an_offset_vta_does_not_use():
    assert set(R.COUNTER_REGISTERS) == set(COUNTERS)
    by_block: dict[str, set[int]] = {}
    for block, offset, *_ in R.REGISTERS:
        by_block.setdefault(block, set()).add(offset)
    for name, (block, offset) in R.COUNTER_REGISTERS.items():
        assert offset >= 0x30 and offset % 8 == 0, name      # VTA's HLS blocks use 0x00..0x2c
        assert {offset, offset + 4} <= by_block[block], name
    offsets = [(b, o) for b, o, *_ in R.REGISTERS]
    assert len(offsets) == len(set(offsets))


def _random_stream(cfg, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` instructions with every field random (every opcode, every memory type, sizes and loop counts up to
    their fields' limits, uop_end below uop_bgn too)."""
    rows = rng.integers(0, 256, (n, 16), dtype=np.uint8)
    # mostly LOAD/STORE/GEMM/ALU (opcode in the low 3 bits), some of the rest
    rows[:, 0] = (rows[:, 0] & ~np.uint8(7)) | rng.choice([0, 1, 2, 4, 3, 5, 6, 7], n,
                                                           p=[.25, .15, .25, .25, .04, .02, .02, .02]).astype(np.uint8)
    return rows


def test_the_counters_count_what_program_counters_counts_on_random_fields():
    """PerfCounters alone in Amaranth's simulator, fed each instruction on the module fetch routes it to (several
    modules in one cycle, back to back): its registers equal ``program_counters`` of the stream, on fields of
    every width up to their limits (products near 2^46), and a clear zeroes them."""
    need("amaranth")
    from hardware.counters import PerfCounters

    cfg = load_config("pynq")
    rng = np.random.default_rng(3)
    rows = _random_stream(cfg, rng, 300)
    mem = cfg.insn_formats["mem"].decode_rows(rows)
    mods = module_indices(mem["opcode"], mem["memory_type"])
    dut = PerfCounters(cfg)
    got = {}

    async def bench(ctx):
        pending = {m: [i for i in range(len(rows)) if mods[i] == k] for k, m in enumerate(MODULES)}
        while any(pending.values()):
            for m in MODULES:
                go = bool(pending[m]) and rng.random() < 0.7
                ctx.set(getattr(dut, f"{m}_issued"), int(go))
                if go:
                    i = pending[m].pop(0)
                    ctx.set(getattr(dut, f"{m}_insn"), int.from_bytes(rows[i].tobytes(), "little"))
            await ctx.tick()
        for m in MODULES:
            ctx.set(getattr(dut, f"{m}_issued"), 0)
        await ctx.tick().repeat(8)
        got["counts"] = {name: ctx.get(getattr(dut, name)) for name in COUNTERS}
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        got["cleared"] = {name: ctx.get(getattr(dut, name)) for name in COUNTERS}

    simulate(dut, bench)
    want = program_counters(rows, cfg)
    assert got["counts"] == want
    assert max(want.values()) > 1 << 40 and all(want.values())
    assert got["cleared"] == dict.fromkeys(COUNTERS, 0)


@requires_golden
def test_vtas_golden_streams_leave_every_token_queue_empty():
    """Why clearing the token queues at a launch (ours, the C simulator's) gives VTA's results on VTA's streams,
    where VTA's 1,024-deep FIFOs are never cleared (docs/hardware.md, "Token queues"): each golden stream pushes
    as many tokens as it pops on every queue, so it leaves them empty, and pushes at most 3 on any queue in all,
    fewer than TOKEN_QUEUE_DEPTH (8), so no push waits for room in any interleaving, at either depth."""
    from hw_config.isa_rules import DEP_FLAGS, DEP_QUEUES, QUEUES

    seen = 0
    for name in NAMES:
        image = load_image(GOLDEN_DIR / f"{name}.npz")
        mem = image.config.insn_formats["mem"].decode_rows(image.insns)
        mods = module_indices(mem["opcode"], mem["memory_type"])
        moves = {q: {"push": 0, "pop": 0} for q in QUEUES}
        for i, k in enumerate(mods):
            for flag in DEP_FLAGS:
                queue = DEP_QUEUES[MODULES[k]][flag]
                if mem[flag][i] and queue is not None:
                    moves[queue][flag.split("_")[0]] += 1
        assert all(m["push"] == m["pop"] for m in moves.values()), (name, moves)
        assert max(m["push"] for m in moves.values()) <= 3 < image.config.TOKEN_QUEUE_DEPTH, name
        seen += 1
    assert seen == 16


# ---------------------------------------------------------------------------------------------------------
# the Verilator model (one build per config, cached; the session's devices of tests/test_hardware_rtl.py)

def _device(name: str):
    from test_hardware_rtl import device
    return device(name)


@pytest.mark.slow
@requires_golden
def test_the_rtls_counters_are_vtas_on_the_golden_programs():
    """VTA's counters of each golden trace (its functional simulator's profiler) read from the RTL's registers
    after the run, and equal to the stream's count; ``run``'s stats carry the registers' values."""
    dev = _device("pynq")
    seen = 0
    for name in NAMES:
        image = load_image(GOLDEN_DIR / f"{name}.npz")
        if image.config.fingerprint != dev.cfg.fingerprint:
            continue
        with np.load(GOLDEN_DIR / f"{name}.expect.npz", allow_pickle=False) as z:
            vta = json.loads(str(z["stats"]))
        dev.reprogram()
        dev.replay(image)
        got = dev.counters()
        assert got == {k: vta[k] for k in COUNTERS} == program_counters(image.insns, dev.cfg), name
        seen += 1
    assert seen >= 10


@pytest.mark.slow
@pytest.mark.parametrize("config", ["pynq", "small"])
def test_the_rtls_counters_count_random_programs_stream(config: str):
    """Random synchronised programs (every load type the config executes, padded and strided DMA, GEMM with and
    without reset, every ALU op): ``run``'s counters, read from the RTL, are the stream's count; a second run
    counts from zero again (a launch clears them)."""
    from test_hardware_rtl import random_program

    dev = _device(config)
    for seed in (0, 1):
        image = random_program(dev.cfg, seed)
        dev.reprogram()
        dev.clear_dram()
        try:
            for addr, data in image.segments:
                dev.write(addr, data)
            for _ in range(2):
                stats = dev.run(image.insns)
                assert stats.vta_counters() == program_counters(image.insns, dev.cfg), seed
        finally:
            dev.clear_dram()
        assert stats.gemm_counter and stats.alu_counter and stats.out_store_nbytes


# ---------------------------------------------------------------------------------------------------------
# reset: through the reset input only

ACC_ADDR, OUT_ADDR, UOP_ADDR, INSN_ADDR = 0x10000, 0x20000, 0x30000, 0x40000
ROWS = 6


def _launch(dev, program, addr: int = INSN_ADDR) -> None:
    dev.run_program(np.frombuffer(assemble(finish_sync(program), dev.cfg), np.uint8), addr)


@pytest.mark.slow
def test_a_reset_keeps_the_srams_and_starts_the_registers_over():
    """A program loads accumulator rows and passes them through the ALU (acc >> 0, which writes what STORE
    reads); after the reset input, a program that only STOREs those rows gives the old data (the low byte of
    each lane), where after a reprogram (a new model, as a bitstream download) it gives zeros. The reset
    zeroed the registers: the stream's count and address, GIE/IER/ISR, done, the counters."""
    dev = _device("pynq")
    cfg = dev.cfg
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    rng = np.random.default_rng(7)
    acc = rng.integers(-2**31, 2**31, (ROWS, lanes)).astype(np.int32)
    uop = np.frombuffer(uops_to_bytes([Uop()], cfg), np.uint8)
    dev.reprogram()
    dev.clear_dram()
    try:
        dev.write(ACC_ADDR, acc.view(np.uint8).reshape(-1))
        dev.write(UOP_ADDR, uop)
        dev.write(OUT_ADDR, np.full(ROWS * lanes, 0x5A, np.uint8))
        _launch(dev, [load(cfg, "UOP", 0, UOP_ADDR, 1), load(cfg, "ACC", 0, ACC_ADDR, ROWS),
                      alu("SHR", (0, 1), (ROWS, 1), dst=(1, 0), src=(1, 0), imm=0)])
        for block in ("fetch", "compute"):
            dev.write_register(block, R.GIE, 1)
            dev.write_register(block, R.IER, 3)
        assert dev.read_register("compute", R.COMPUTE_DONE_RD) == 1
        dev.reset()
        regs = {(block, off): dev.read_register(block, off)
                for block, off in [("fetch", R.FETCH_INSN_COUNT), ("fetch", R.FETCH_INSN_ADDR),
                                   ("fetch", R.FETCH_DISPATCHED), ("compute", R.COMPUTE_DONE_RD)] +
                [(b, o) for b in R.MMIO_BLOCKS for o in (R.GIE, R.IER, R.ISR)]}
        assert regs == dict.fromkeys(regs, 0)
        assert dev.counters() == dict.fromkeys(COUNTERS, 0)
        assert dev.read_register("fetch", R.CTRL) & (R.AP_IDLE | R.AP_DONE | R.AP_START) == R.AP_IDLE
        _launch(dev, [store(cfg, 0, OUT_ADDR, ROWS)])
        out = dev.read(OUT_ADDR, ROWS * lanes).view(np.int8).reshape(ROWS, lanes)
        np.testing.assert_array_equal(out, (acc.astype(np.int64) & 0xFF).astype(np.uint8).view(np.int8))
        dev.reprogram()
        _launch(dev, [store(cfg, 0, OUT_ADDR, ROWS)])
        assert not dev.read(OUT_ADDR, ROWS * lanes).any()
    finally:
        dev.clear_dram()


# ---------------------------------------------------------------------------------------------------------
# HLS block control: ap_done clear on read, GIE / IER / ISR, the interrupt outputs

@pytest.mark.slow
def test_hls_interrupt_registers_and_fetchs_clear_on_read_ap_done():
    """Per block, as Vivado HLS's ap_ctrl_hs: with IER bit 0, ap_done sets ISR bit 0 (fetch at the end of the
    stream, compute at each instruction); the interrupt output is GIE and ISR; writing 1 to an ISR bit toggles
    it; without IER no ISR bit is set. Fetch's ap_done is set once the run's instructions are dispatched and
    cleared by reading its control register."""
    dev = _device("pynq")
    dev.reset()
    dev.clear_dram()
    try:
        dev.write_register("fetch", R.IER, R.INT_AP_DONE)
        dev.write_register("fetch", R.GIE, 1)
        dev.write_register("compute", R.IER, R.INT_AP_DONE | R.INT_AP_READY)  # GIE off: no interrupt
        dev.write_register("store", R.GIE, 1)                                   # IER off: no ISR bit
        assert dev.interrupts() == dict.fromkeys(R.MMIO_BLOCKS, False)
        assert not dev.read_register("fetch", R.CTRL) & R.AP_DONE
        _launch(dev, [])
        assert dev.read_register("fetch", R.ISR) == R.INT_AP_DONE
        assert dev.read_register("compute", R.ISR) == R.INT_AP_DONE | R.INT_AP_READY
        assert dev.read_register("store", R.ISR) == 0 and dev.read_register("load", R.ISR) == 0
        assert dev.interrupts() == {"fetch": True, "load": False, "compute": False, "store": False}
        ctrl = dev.read_register("fetch", R.CTRL)
        assert ctrl & R.AP_DONE and ctrl & R.AP_IDLE and not ctrl & R.AP_START
        assert not dev.read_register("fetch", R.CTRL) & R.AP_DONE           # cleared by the read
        dev.write_register("fetch", R.ISR, R.INT_AP_DONE)                     # toggle: clears it
        assert dev.read_register("fetch", R.ISR) == 0 and not dev.interrupts()["fetch"]
        dev.write_register("fetch", R.ISR, R.INT_AP_DONE)                     # toggle again: sets it
        assert dev.read_register("fetch", R.ISR) == R.INT_AP_DONE and dev.interrupts()["fetch"]
        dev.write_register("fetch", R.GIE, 0)
        assert not dev.interrupts()["fetch"]
        dev.write_register("compute", R.GIE, 1)
        assert dev.interrupts()["compute"]
        assert (dev.read_register("fetch", R.GIE), dev.read_register("compute", R.IER)) == (0, 3)
    finally:
        dev.clear_dram()
        dev.reset()


@pytest.mark.slow
def test_the_interrupt_script_the_simulated_board_runs():
    """The register script of tests/hls_control.py (IER written before and after runs, toggles, GIE moved):
    the RTL's observations are HLS's, which tests/test_sim_board.py holds the simulated board to as well."""
    from hls_control import EXPECTED, interrupt_script

    dev = _device("pynq")
    dev.reset()
    dev.clear_dram()
    try:
        seen = interrupt_script(dev.read_register, dev.write_register, dev.interrupts, lambda: _launch(dev, []))
        assert seen == EXPECTED
    finally:
        dev.clear_dram()
        dev.reset()
