"""The RTL's pipelined GEMM/ALU datapath (hardware/loop_engine.py; COMPUTE_LATENCY is its depth): micro-ops that
read an accumulator row a micro-op still in the pipeline writes give the sequential result at every distance from
back to back to the pipeline's depth, against the C simulator's DRAM, at every depth from 4 to 9 with DSP packing on; and each instruction still takes the timing
model's COMPUTE_LATENCY + n x II cycles.

The RTL tests build a Verilator model per config (about a minute each; cached under VTA_RTL_CACHE).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from extras import need
from programs import alu, finish_sync, gemm, load, store
from test_hardware import SMALL

from hw_config import HwConfig, load_config
from simulator.image import ProgramImage
from simulator.replay import replay
from vta.isa import Uop, assemble, uops_to_bytes

DEVICES: dict[tuple, object] = {}


def test_the_pipelines_registers_follow_compute_latency():
    from hardware.params import MIN_COMPUTE_LATENCY, compute_pipeline

    assert compute_pipeline(4, 16) == compute_pipeline(4, 16).__class__(4, 0, 0, 0, 0, 4, 0)   # combinational
    full = compute_pipeline(9, 16)
    assert (full.sram, full.product, full.result, full.tree, full.pad) == (1, 1, 1, 2, 0)
    assert full.tree_cuts() == [2, 4] and full.consume == 6 and full.acc_out == 1 and full.acc_read == 4
    assert compute_pipeline(13, 16).tree == 4 and compute_pipeline(13, 16).pad == 2
    for depth in range(MIN_COMPUTE_LATENCY, 20):
        for block in (2, 8, 16, 32):
            pl = compute_pipeline(depth, block)
            # every register but acc_out is one cycle of an instruction, pad included
            assert MIN_COMPUTE_LATENCY + pl.sram + pl.product + pl.result + pl.tree + pl.pad == depth
            assert len(pl.tree_cuts()) == pl.tree and all(1 <= c <= pl.levels for c in pl.tree_cuts())
            assert pl.acc_read >= 1
    with pytest.raises(ValueError, match="COMPUTE_LATENCY=3.*at least 4"):
        compute_pipeline(3, 16)


def device(cfg: HwConfig):
    need("amaranth")
    need("verilator")
    from hardware import RtlDevice

    key = (cfg.fingerprint, cfg.CAPABILITIES)
    if key not in DEVICES:
        DEVICES[key] = RtlDevice(cfg)
    return DEVICES[key]


INP, WGT, ACC, UOPS, OUT = (0x10000 + i * 0x4000 for i in range(5))
INSN_ADDR = 0x40000
ROWS = 48            # accumulator rows the programs touch (and store)


def dependent_program(cfg: HwConfig, distance: int, seed: int) -> ProgramImage:
    """Micro-ops that write an accumulator row ``distance`` micro-ops after another wrote it (0: back to back):
    a GEMM kernel of distance+1 micro-ops on rows 0..distance run three times (each row accumulated three times),
    the same with an ALU ADD of a tensor row and of an immediate (acc[dst] in flight), an ALU whose micro-op j
    reads the row micro-op j-distance-1 wrote (acc[src] in flight), a GEMM reset and a GEMM on those rows, then
    everything stored."""
    rng = np.random.default_rng(seed)
    n = distance + 1
    kernel = [Uop(dst_idx=k, src_idx=int(rng.integers(0, 8)), wgt_idx=int(rng.integers(0, 8))) for k in range(n)]
    chain = [Uop(dst_idx=ROWS // 2 + n, src_idx=ROWS // 2, wgt_idx=0)]        # row 24+n+j <- row 24+j
    alu_src = [Uop(dst_idx=k, src_idx=ROWS - 1 - k, wgt_idx=0) for k in range(n)]
    table = kernel + chain + alu_src
    k0, c0, a0 = 0, n, n + 1
    iters = 3
    program = [
        load(cfg, "INP", 0, INP, 16), load(cfg, "WGT", 0, WGT, 16, push_next_dep=1),
        load(cfg, "UOP", 0, UOPS, len(table), pop_prev_dep=1),
        load(cfg, "ACC", 0, ACC, ROWS),
        gemm((k0, k0 + n), (1, iters)),                                         # rows 0..d, three times each
        alu("ADD", (a0, a0 + n), (1, iters)),                                   # acc[k] += acc[47-k], thrice
        alu("ADD", (k0, k0 + n), (iters, 1), imm=int(rng.integers(-2**15, 2**15))),
        alu("MAX", (c0, c0 + 1), (1, ROWS // 2 - n), dst=(0, 1), src=(0, 1)),  # acc[24+n+j] = max(., acc[24+j])
        alu("ADD", (c0, c0 + 1), (1, ROWS // 2 - n), dst=(0, 1), src=(0, 1)),
        alu("SHR", (k0, k0 + n), (1, iters), imm=int(rng.integers(1, 9))),
        gemm((k0, k0 + n), (iters, 1), src=(1, 0), wgt=(1, 0)),
        gemm((c0, c0 + 1), (1, 4), dst=(0, 1), reset=True),
        gemm((k0, k0 + n), (2, 2), src=(1, 2), wgt=(2, 1), push_next_dep=1),
        store(cfg, 0, OUT, ROWS, pop_prev_dep=1, push_prev_dep=1),
    ]
    insns = assemble(finish_sync(program), cfg)
    segments = [(INP, rng.integers(-128, 128, 0x4000).astype(np.int8).view(np.uint8)),
                (WGT, rng.integers(-128, 128, 0x4000).astype(np.int8).view(np.uint8)),
                (ACC, rng.integers(-2**31, 2**31, 0x1000).astype(np.int32).view(np.uint8)),
                (UOPS, np.frombuffer(uops_to_bytes(table, cfg), np.uint8).copy()),
                (OUT, np.zeros(0x4000, np.uint8))]
    return ProgramImage(cfg, np.frombuffer(insns, np.uint8).reshape(-1, 16).copy(), INSN_ADDR, segments)


# every depth from 4 to 9 (the products registered from 6 on, the SRAMs' outputs from 5), all with DSP packing
# (the default of pynq's TARGET: hardware/dsp_packing.py)
CONFIGS = {"pynq-9": ("pynq", {}), "pynq-4": ("pynq", {"COMPUTE_LATENCY": 4}),
           "small-5": ("pynq", {**SMALL, "COMPUTE_LATENCY": 5}), "small-6": ("pynq", {**SMALL, "COMPUTE_LATENCY": 6}),
           "small-7": ("pynq", {**SMALL, "COMPUTE_LATENCY": 7}), "small-8": ("pynq", {**SMALL, "COMPUTE_LATENCY": 8})}


@pytest.mark.slow
@pytest.mark.parametrize("config", list(CONFIGS))
def test_dependent_micro_ops_at_every_distance_give_the_sequential_result(config: str):
    name, overrides = CONFIGS[config]
    cfg = load_config(name, **overrides)
    dev = device(cfg)
    assert json.loads((dev.library.parent / "manifest.json").read_text())["gemm"]["dsp_packing"] is True
    for distance in range(cfg.COMPUTE_LATENCY + 1):
        image = dependent_program(cfg, distance, seed=distance)
        expected = replay(image)
        dev.reprogram()
        segments, _ = dev.replay(image)
        np.testing.assert_array_equal(segments[-1][1], expected.segments[-1][1],
                                      err_msg=f"{config}: distance {distance}")


@pytest.mark.slow
@pytest.mark.parametrize("config", ["pynq-9", "small-6"])
def test_each_compute_instruction_takes_compute_latency_plus_n_times_ii(config: str):
    """Traced on the RTL and on the timing model: every GEMM and ALU takes exactly the model's cycles."""
    from test_hardware_rtl import traced_on_both

    from hw_config.layout import OPCODES

    name, overrides = CONFIGS[config]
    cfg = load_config(name, **overrides)
    dev = device(cfg)
    image = dependent_program(cfg, 2, seed=7)
    model, stats = traced_on_both(dev, image)
    opcodes = cfg.insn_formats["mem"].decode_rows(image.insns)["opcode"]
    checked = 0
    for i, ((_, s0, e0), (_, s1, e1)) in enumerate(zip(model.trace, stats.trace, strict=True)):
        if opcodes[i] in (OPCODES["GEMM"], OPCODES["ALU"]):
            assert e1 - s1 == e0 - s0, (i, (s0, e0), (s1, e1))
            checked += 1
    assert checked == 9
