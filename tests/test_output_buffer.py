"""What STORE reads: VTA's output buffer (docs/hardware.md, "The output buffer").

VTA's HLS and Chisel accelerators have an output buffer that only GEMM and ALU write (each micro-op the narrowed
result); STORE reads it. VTA's functional simulator has none: its STORE narrows the accumulator. So on the HLS and
Chisel capability sets a STORE of accumulator rows that were LOADed (or never computed) since their last GEMM/ALU
stores what the last GEMM/ALU left, and a GEMM with reset_reg writes the narrowed sum it computed before zeroing
(HLS, vta.cc) or nothing (Chisel, TensorGemm). The C simulator, the reference executor and the RTL all do what the
config's hardware does; the expected bytes here are numpy from a reading of vta.cc and TensorGemm.scala.
"""

from __future__ import annotations

import numpy as np
import pytest
from golden_files import requires_golden
from programs import alu, finish_sync, gemm, load, store

from hw_config import OPCODES, HwConfig, load_config
from hw_config.capabilities import violations
from simulator.core import Simulator
from simulator.image import ProgramImage
from simulator.reference import ReferenceSimulator
from simulator.replay import replay_into
from vta.isa import Uop, assemble, uops_to_bytes

REGION = 0x1000
INP, WGT, ACC, UOPS, OUT = (0x10000 + i * REGION for i in range(5))
INSN_ADDR = 0x20000
SETS = ("fsim", "vta-hls", "vta-chisel")
SIMULATORS = {"c": Simulator, "reference": ReferenceSimulator}


def stale_program(cfg: HwConfig, seed: int = 0) -> tuple[ProgramImage, dict[str, np.ndarray]]:
    """A program whose four stored rows are each one case, and the bytes each capability set stores:

    - row 0: LOADed, ALU (ADD 0), LOADed again, stored (the HLS/Chisel store what the ALU left);
    - row 1: LOADed, ALU, reset by a GEMM, stored (HLS: the narrowed acc + dot product the reset GEMM computed;
      Chisel: what the ALU left; fsim: 0);
    - row 2: LOADed only (HLS/Chisel: the output buffer's power-up 0s);
    - row 3: LOADed, then a GEMM accumulates onto it (all alike).
    """
    rng = np.random.default_rng(seed)
    lanes = (cfg.BATCH, cfg.BLOCK_OUT)
    x = rng.integers(-128, 128, (4, cfg.BATCH, cfg.BLOCK_IN)).astype(np.int8)
    w = rng.integers(-128, 128, (4, cfg.BLOCK_OUT, cfg.BLOCK_IN)).astype(np.int8)
    a = rng.integers(-2**31, 2**31, (5, *lanes)).astype(np.int32)   # rows 0..3, then row 0's second load
    micro = [Uop(0, 0, 0), Uop(1, 0, 0), Uop(1, 2, 3), Uop(3, 1, 1)]

    def dot(s: int, t: int) -> np.ndarray:
        return x[s].astype(np.int64) @ w[t].astype(np.int64).T

    def low(v: np.ndarray) -> np.ndarray:
        return (np.asarray(v, dtype=np.int64) & 0xFF).astype(np.uint8)

    computed = low(a[3] + dot(1, 1))
    zeros = np.zeros(lanes, dtype=np.uint8)
    expected = {"mirror": [low(a[4]), zeros, low(a[2]), computed],        # by Capabilities.out_buffer
                "hls": [low(a[0]), low(a[1] + dot(2, 3)), zeros, computed],
                "chisel": [low(a[0]), low(a[1]), zeros, computed]}
    program = [load(cfg, "INP", 0, INP, 4), load(cfg, "WGT", 0, WGT, 4, push_next_dep=1),
               load(cfg, "UOP", 0, UOPS, 4, pop_prev_dep=1),
               load(cfg, "ACC", 0, ACC, 4),
               alu("ADD", (0, 2), imm=0),
               load(cfg, "ACC", 0, ACC, 1, offset=4),
               gemm((2, 3), reset=True),
               gemm((3, 4), push_next_dep=1),
               store(cfg, 0, OUT, 4, pop_prev_dep=1)]
    insns = np.frombuffer(assemble(finish_sync(program), cfg), np.uint8).reshape(-1, 16).copy()
    out = np.zeros(REGION, dtype=np.uint8)
    segments = [(INP, np.resize(x.view(np.uint8).reshape(-1), REGION)),
                (WGT, np.resize(w.view(np.uint8).reshape(-1), REGION)),
                (ACC, np.resize(a.view(np.uint8).reshape(-1), REGION)),
                (UOPS, np.resize(np.frombuffer(uops_to_bytes(micro, cfg), np.uint8), REGION)), (OUT, out)]
    image = ProgramImage(cfg, insns, INSN_ADDR, segments)
    return image, {k: np.stack(v).reshape(-1) for k, v in expected.items()}


def stored(segments, cfg: HwConfig) -> np.ndarray:
    """The four OUT elements the program stores."""
    return dict(segments)[OUT][:4 * cfg.OUT_ELEM_BYTES]


@pytest.mark.parametrize("sim_class", list(SIMULATORS))
@pytest.mark.parametrize("caps", SETS)
def test_a_store_reads_what_the_capability_sets_hardware_left(caps: str, sim_class: str):
    cfg = load_config("pynq", CAPABILITIES=caps)
    image, expected = stale_program(cfg)
    result = replay_into(SIMULATORS[sim_class](cfg), image)
    np.testing.assert_array_equal(stored(result.segments, cfg), expected[cfg.capabilities.out_buffer])


@pytest.mark.parametrize("sim_class", list(SIMULATORS))
@pytest.mark.parametrize("caps", SETS)
def test_the_output_buffer_persists_across_runs_and_clears_with_the_srams(caps: str, sim_class: str):
    """Run 1 computes row 0 (ALU ADD 0 onto a load); run 2 loads other data into it and stores it: the HLS and
    Chisel store run 1's result, as their block RAM keeps it; after ``reset`` (cleared SRAMs) they store 0."""
    cfg = load_config("pynq", CAPABILITIES=caps)
    sim = SIMULATORS[sim_class](cfg)
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    first, second = np.arange(lanes, dtype=np.int32) + 7, np.arange(lanes, dtype=np.int32) * 3 - 100
    acc, uops, out = sim.alloc(2 * cfg.ACC_ELEM_BYTES), sim.alloc(4), sim.alloc(cfg.OUT_ELEM_BYTES)
    sim.write(acc, np.concatenate([first, second]).view(np.uint8))
    sim.write(uops, np.frombuffer(uops_to_bytes([Uop(0, 0, 0)], cfg), np.uint8))
    sim.run(assemble(finish_sync([load(cfg, "UOP", 0, uops, 1), load(cfg, "ACC", 0, acc, 1),
                                  alu("ADD", (0, 1), imm=0)]), cfg))
    again = assemble(finish_sync([load(cfg, "ACC", 0, acc, 1, offset=1, push_next_dep=1),
                                  store(cfg, 0, out, 1, pop_prev_dep=1)]), cfg)
    sim.run(again)
    want = second if caps == "fsim" else first
    np.testing.assert_array_equal(sim.read(out, lanes), (want & 0xFF).astype(np.uint8))
    np.testing.assert_array_equal(sim.read_sram("out", 0, 1).reshape(-1).view(np.uint8), (want & 0xFF))
    sim.reset()
    sim.run(again)
    want = second if caps == "fsim" else np.zeros(lanes, np.int32)
    np.testing.assert_array_equal(sim.read(out, lanes), (want & 0xFF).astype(np.uint8))


@pytest.mark.parametrize("caps", SETS)
def test_strict_mode_refuses_a_store_of_a_row_the_board_would_store_from_an_older_result(caps: str):
    from simulator.errors import InvalidInstruction
    cfg = load_config("pynq", CAPABILITIES=caps)
    image, expected = stale_program(cfg)
    fields = cfg.insn_formats["mem"].decode_rows(image.insns)
    index = int(np.flatnonzero((fields["opcode"] == OPCODES["STORE"]) & (fields["x_size"] == 4))[0])
    if caps == "fsim":     # STORE narrows the accumulator: nothing to refuse
        result = replay_into(Simulator(cfg, strict=True), image)
        np.testing.assert_array_equal(stored(result.segments, cfg), expected["mirror"])
        return
    with pytest.raises(InvalidInstruction, match=rf"instruction {index} \(STORE.*row 0, which a LOAD or a reset"):
        replay_into(Simulator(cfg, strict=True), image)


@requires_golden
@pytest.mark.parametrize("caps", SETS)
def test_vtas_golden_programs_leave_vtas_bytes_on_every_output_buffer(caps: str):
    """VTA's sixteen programs (its compiler's streams) store only rows an ALU or GEMM wrote last, so each set's
    output buffer leaves the bytes VTA's functional simulator traced, and strict mode finds no stale STORE."""
    import json

    from golden_files import GOLDEN_DIR

    from hw_config import config_from_dict
    names = sorted(p.name[:-4] for p in GOLDEN_DIR.glob("*.npz") if not p.name.endswith(".expect.npz"))
    assert len(names) == 16
    for name in names:
        image, expect = np.load(GOLDEN_DIR / f"{name}.npz"), np.load(GOLDEN_DIR / f"{name}.expect.npz")
        cfg = config_from_dict(json.loads(str(image["config"]))).replace(CAPABILITIES=caps)
        # strict (no stale STORE) where the set executes the whole stream; the padded-load programs pad loads some
        # sets ignore (a capability refusal of its own), so they run as fsim's loads, as VTA traced them
        sim = Simulator(cfg, strict=not violations(image["insns"], cfg))
        for i, addr in enumerate(image["seg_addr"]):
            sim.map(int(addr), image[f"seg_{i}"])
        if int(image["insn_addr"]):
            sim.map(int(image["insn_addr"]), image["insns"])
        assert sim.run(image["insns"]).cycles > 0
        for i, addr in enumerate(expect["seg_addr"]):
            want = expect[f"seg_{i}"]
            np.testing.assert_array_equal(sim.read(int(addr), want.size), want, err_msg=f"{name} on {caps}")


def reset_program(cfg: HwConfig, seed: int = 1) -> tuple[ProgramImage, np.ndarray]:
    """Three reset GEMMs on VTA's HLS, each storing what its micro-ops left in the output buffer (vta.cc: the narrowed
    acc + dot product each micro-op computes before zeroing its row, micro-op by micro-op):

    - rows 0..3 through a 2x2 loop over two micro-ops (distinct rows: the simulator's GEMM-kernel path);
    - row 4 named by two micro-ops (the second adds its dot product to the 0 the first left);
    - rows 5, 6 through a loop whose second step's input and weight indices pass the buffers' depths (reset
      indices are unchecked and wrap: input 1, weight 2; the first step reads the never-loaded last rows, 0).
    """
    rng = np.random.default_rng(seed)
    inp_depth, wgt_depth = cfg.INP_BUFF_DEPTH, cfg.WGT_BUFF_DEPTH
    x = rng.integers(-128, 128, (4, cfg.BATCH, cfg.BLOCK_IN)).astype(np.int8)
    w = rng.integers(-128, 128, (4, cfg.BLOCK_OUT, cfg.BLOCK_IN)).astype(np.int8)
    a = rng.integers(-2**31, 2**31, (7, cfg.BATCH, cfg.BLOCK_OUT)).astype(np.int32)
    micro = [Uop(0, 0, 0), Uop(1, 1, 1),                 # a 2x1 loop: rows 0, 1 then 2, 3
             Uop(4, 2, 3), Uop(4, 3, 2),                 # the same row twice
             Uop(5, inp_depth - 1, wgt_depth - 1)]       # a 2x1 loop: + (1, 2, 3) wraps to input 1, weight 2

    def dot(s: int, t: int) -> np.ndarray:
        return x[s].astype(np.int64) @ w[t].astype(np.int64).T

    def low(v: np.ndarray) -> np.ndarray:
        return (np.asarray(v, dtype=np.int64) & 0xFF).astype(np.uint8)

    expected = [low(a[0] + dot(0, 0)), low(a[1] + dot(1, 1)), low(a[2] + dot(2, 2)), low(a[3] + dot(3, 3)),
                low(dot(3, 2)), low(a[5]), low(a[6] + dot(1, 2))]
    program = [load(cfg, "INP", 0, INP, 4), load(cfg, "WGT", 0, WGT, 4, push_next_dep=1),
               load(cfg, "UOP", 0, UOPS, len(micro), pop_prev_dep=1),
               load(cfg, "ACC", 0, ACC, 7),
               gemm((0, 2), iters=(2, 1), dst=(2, 0), src=(2, 0), wgt=(2, 0), reset=True),
               gemm((2, 4), reset=True),
               gemm((4, 5), iters=(2, 1), dst=(1, 0), src=(2, 0), wgt=(3, 0), reset=True, push_next_dep=1),
               store(cfg, 0, OUT, 7, pop_prev_dep=1)]
    insns = np.frombuffer(assemble(finish_sync(program), cfg), np.uint8).reshape(-1, 16).copy()
    segments = [(INP, np.resize(x.view(np.uint8).reshape(-1), REGION)),
                (WGT, np.resize(w.view(np.uint8).reshape(-1), REGION)),
                (ACC, np.resize(a.view(np.uint8).reshape(-1), REGION)),
                (UOPS, np.resize(np.frombuffer(uops_to_bytes(micro, cfg), np.uint8), REGION)),
                (OUT, np.zeros(REGION, dtype=np.uint8))]
    return ProgramImage(cfg, insns, INSN_ADDR, segments), np.stack(expected).reshape(-1)


@pytest.mark.parametrize("sim_class", list(SIMULATORS))
def test_reset_gemms_leave_vta_hls_sums_in_every_loop_shape(sim_class: str):
    """Distinct rows (the C simulator computes them with its GEMM kernels), a repeated row and a wrapping index
    (row by row): the bytes numpy computes from vta.cc's reading, on every simulator."""
    cfg = load_config("pynq", CAPABILITIES="vta-hls")
    image, expected = reset_program(cfg)
    result = replay_into(SIMULATORS[sim_class](cfg), image)
    np.testing.assert_array_equal(dict(result.segments)[OUT][:7 * cfg.OUT_ELEM_BYTES], expected)
