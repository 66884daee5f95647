"""VTA's instruction-level conformance list (vta-notes section 9) on the C simulator, for several shapes.

Each case mirrors one of VTA's ``test_vta_insn.py`` unit tests: the program is written here with
``programs.py`` in VTA's runtime style, its inputs are random (seeded), and both the stored bytes and VTA's
counters are checked against numpy and against counts derived from the program's shape.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from programs import (
    Dram,
    alu,
    counters,
    finish_sync,
    from_tiles,
    gemm,
    load,
    load_nop,
    low_byte,
    pack_inp,
    pack_wgt,
    run,
    store,
    wrap32,
)

from hw_config import HwConfig, load_config
from simulator.core import Simulator
from simulator.errors import MemoryAccessError
from simulator.stats import RunStats
from vta.isa import FinishInsn, MemInsn, Uop

PRESETS = ["pynq", "batch4", "block32"]


@dataclass
class Env:
    cfg: HwConfig
    sim: Simulator
    dram: Dram

    def tiles(self, rng: np.random.Generator, n: int, lo: int, hi: int, lanes: int | None = None) -> np.ndarray:
        """``n`` ACC-shaped tiles (n, BATCH, lanes) of int32 values in [lo, hi)."""
        lanes = self.cfg.BLOCK_OUT if lanes is None else lanes
        return rng.integers(lo, hi, (n, self.cfg.BATCH, lanes)).astype(np.int32)

    def garbage_acc(self, rng: np.random.Generator, count: int) -> None:
        """Fill ACC entries [0, count) with junk so that a test sees what the program really wrote."""
        junk = rng.integers(-(1 << 31), 1 << 31, (count, self.cfg.BATCH, self.cfg.BLOCK_OUT))
        self.sim.write_sram("acc", 0, junk.astype(np.int32))


@pytest.fixture(params=PRESETS)
def env(request: pytest.FixtureRequest) -> Iterator[Env]:
    cfg = load_config(request.param)
    sim = Simulator(cfg)
    dram = Dram(sim)
    yield Env(cfg, sim, dram)
    dram.free_all()


# ---------------------------------------------------------------------------------------------------------
# ACC in -> ALU chain -> STORE out (save/load, padded loads, ALU, ReLU, shift-and-scale)

def run_alu_chain(env: Env, a: np.ndarray, ops: list[tuple[str, int | None]], b: np.ndarray | None = None,
                  shape: tuple[int, int] | None = None, pad: tuple[int, int, int, int] = (0, 0, 0, 0),
                  ) -> tuple[np.ndarray, RunStats, int]:
    """Load ``a`` (tiles) into ACC [optionally as a padded 2D tile of ``shape`` (rows, cols)], ``b`` after it,
    apply ``ops`` in order over every ACC entry the load wrote (imm None: the operand is ``b``), store int8.

    Returns the stored tiles, the run's stats and the number of ACC entries processed.
    """
    cfg, dram = env.cfg, env.dram
    rows, cols = shape or (1, len(a))
    y0, y1, x0, x1 = pad
    n = (y0 + rows + y1) * (x0 + cols + x1)
    uops = [Uop(dst_idx=0, src_idx=n if imm is None else 0) for _, imm in ops]
    a_addr = dram.put(a)
    uop_addr = dram.put_uops(uops)
    out_addr = dram.alloc(n * cfg.OUT_ELEM_BYTES)
    program = [load(cfg, "ACC", 0, a_addr, x=cols, y=rows, pad=pad)]
    if b is not None:
        program.append(load(cfg, "ACC", n, dram.put(b), x=len(b)))
    program.append(load(cfg, "UOP", 0, uop_addr, x=len(uops)))
    for k, (op, imm) in enumerate(ops):
        last = k == len(ops) - 1
        program.append(alu(op, (k, k + 1), iters=(1, n), dst=(0, 1), src=(0, 1), imm=imm, push_next_dep=int(last)))
    program.append(store(cfg, 0, out_addr, x=n, pop_prev_dep=1))
    stats = run(env.sim, finish_sync(program))
    out = dram.get(out_addr, (n, cfg.BATCH, cfg.BLOCK_OUT), np.int8)
    return out, stats, n


def chain_counters(cfg: HwConfig, loaded: int, n: int, nops: int) -> dict[str, int]:
    """Counters of ``run_alu_chain``: ``loaded`` ACC elements read from DRAM, ``n`` entries, ``nops`` ALU ops."""
    return counters(acc_load_nbytes=loaded * cfg.ACC_ELEM_BYTES, uop_load_nbytes=4 * nops,
                    alu_counter=n * nops, out_store_nbytes=n * cfg.OUT_ELEM_BYTES)


def test_save_load_out(env: Env):
    """VTA test_save_load_out: int32 ACC DMA load -> ALU SHR 0 -> store int8."""
    rng = np.random.default_rng(1)
    a = env.tiles(rng, 36, 1, 10)  # x int32 (6, 6, BATCH, BLOCK_OUT) with values 1..9, as VTA's test
    out, stats, n = run_alu_chain(env, a, [("SHR", 0)], shape=(6, 6))
    assert n == 36
    np.testing.assert_array_equal(out, a.astype(np.int8))
    assert stats.vta_counters() == chain_counters(env.cfg, 36, 36, 1)


def test_save_load_out_keeps_the_low_byte(env: Env):
    """The same path with full-range int32: STORE keeps the low 8 bits of each lane, no saturation."""
    rng = np.random.default_rng(2)
    a = env.tiles(rng, 12, -(1 << 31), 1 << 31)
    out, stats, _ = run_alu_chain(env, a, [("SHR", 0)])
    np.testing.assert_array_equal(out, low_byte(a))
    assert stats.vta_counters() == chain_counters(env.cfg, 12, 12, 1)


# (y_pad_0, y_pad_1, x_pad_0, x_pad_1): VTA's pad_before/pad_after cases on a (3, 5) tile grid.
PADS = {"y_before_2": (2, 0, 0, 0), "y_after_2": (0, 2, 0, 0), "x_before_2": (0, 0, 2, 0),
        "x_after_2": (0, 0, 0, 2), "y_1_1_x_1_1": (1, 1, 1, 1)}


@pytest.mark.parametrize("pad", PADS.values(), ids=PADS.keys())
def test_padded_load(env: Env, pad: tuple[int, int, int, int]):
    """VTA test_padded_load: a padded ACC load of a (3, 5) tile grid, SHR 0, store: zeros in the pad region."""
    rng = np.random.default_rng(3)
    rows, cols = 3, 5
    a = env.tiles(rng, rows * cols, -128, 128)
    env.garbage_acc(rng, 64)  # the pad region must be written with zeros, not left as it was
    out, stats, n = run_alu_chain(env, a, [("SHR", 0)], shape=(rows, cols), pad=pad)
    y0, y1, x0, x1 = pad
    grid = a.reshape(rows, cols, env.cfg.BATCH, env.cfg.BLOCK_OUT)
    expect = np.pad(grid, ((y0, y1), (x0, x1), (0, 0), (0, 0))).reshape(n, env.cfg.BATCH, env.cfg.BLOCK_OUT)
    np.testing.assert_array_equal(out, expect.astype(np.int8))
    assert n == (rows + y0 + y1) * (cols + x0 + x1)
    # padding is not counted as loaded bytes (VTA's Load counts x_size * y_size elements)
    assert stats.vta_counters() == chain_counters(env.cfg, rows * cols, n, 1)


def _left_shift(a: np.ndarray, k: int) -> np.ndarray:
    return wrap32(a.astype(np.int64) << k)


# name -> (ALU op, uses an immediate, numpy model of (a, b_or_imm)); VTA's test_alu cases then MIN and MUL.
ALU_CASES = {
    "shl_imm": ("SHR", True, _left_shift),
    "max_imm": ("MAX", True, np.maximum),
    "max": ("MAX", False, np.maximum),
    "add_imm": ("ADD", True, lambda a, b: wrap32(a.astype(np.int64) + b)),
    "add": ("ADD", False, lambda a, b: wrap32(a.astype(np.int64) + b)),
    "shr_imm": ("SHR", True, lambda a, k: a >> k),
    "min_imm": ("MIN", True, np.minimum),
    "min": ("MIN", False, np.minimum),
    "mul_imm": ("MUL", True, lambda a, b: wrap32(a.astype(np.int64) * b)),
    "mul": ("MUL", False, lambda a, b: wrap32(a.astype(np.int64) * b)),
}


@pytest.mark.parametrize("case", ALU_CASES)
def test_alu(env: Env, case: str):
    """VTA test_alu: a int32 (8, 8, BATCH, BLOCK_OUT) in [-16, 16), imm in [1, 5), one ALU op, store int8."""
    op, use_imm, model = ALU_CASES[case]
    rng = np.random.default_rng(sorted(ALU_CASES).index(case))
    a = env.tiles(rng, 64, -16, 16)
    if use_imm:
        imm = int(rng.integers(1, 5))
        # SHL is SHR by a negative amount (what VTA's compiler emits for a left shift)
        out, stats, _ = run_alu_chain(env, a, [(op, -imm if case == "shl_imm" else imm)])
        expect = model(a, imm)
        loaded = 64
    else:
        b = env.tiles(rng, 64, -16, 16)
        out, stats, _ = run_alu_chain(env, a, [(op, None)], b=b)
        expect = model(a, b)
        loaded = 128
    np.testing.assert_array_equal(out, low_byte(expect))
    assert stats.vta_counters() == chain_counters(env.cfg, loaded, 64, 1)


def test_relu(env: Env):
    """VTA test_relu: a in [-256, 256) of (8, 10, BATCH, BLOCK_OUT): MAX 0 then MIN 127."""
    rng = np.random.default_rng(4)
    a = env.tiles(rng, 80, -256, 256)
    out, stats, _ = run_alu_chain(env, a, [("MAX", 0), ("MIN", 127)])
    np.testing.assert_array_equal(out, np.clip(a, 0, 127).astype(np.int8))
    assert stats.vta_counters() == chain_counters(env.cfg, 80, 80, 2)


def test_shift_and_scale(env: Env):
    """VTA test_shift_and_scale: (a + imm_shift) >> imm_scale on (2, 8, BATCH, BLOCK_OUT)."""
    rng = np.random.default_rng(5)
    a = env.tiles(rng, 16, -128, 128)
    shift, scale = int(rng.integers(0, 8)), int(rng.integers(1, 5))
    out, stats, _ = run_alu_chain(env, a, [("ADD", shift), ("SHR", scale)])
    np.testing.assert_array_equal(out, ((a + shift) >> scale).astype(np.int8))
    assert stats.vta_counters() == chain_counters(env.cfg, 16, 16, 2)


# ---------------------------------------------------------------------------------------------------------
# GEMM -> SHR 8 -> MAX 0 -> MIN 127 -> int8, single-threaded and with two virtual threads

ROW_TILES, COL_TILES = 4, 4  # x tiles (4, 1, BATCH, BLOCK_IN), w tiles (4, 1, BLOCK_OUT, BLOCK_IN): one K tile


def gemm_data(cfg: HwConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x (4 BATCH rows, BLOCK_IN) and w (4 BLOCK_OUT rows, BLOCK_IN) int8 in [-128, 128), packed into DRAM
    tiles, and the expected int8 output matrix clip((x @ w.T) >> 8, 0, 127) (numpy)."""
    rng = np.random.default_rng(6)
    x = rng.integers(-128, 128, (ROW_TILES * cfg.BATCH, cfg.BLOCK_IN)).astype(np.int8)
    w = rng.integers(-128, 128, (COL_TILES * cfg.BLOCK_OUT, cfg.BLOCK_IN)).astype(np.int8)
    expect = np.clip((x.astype(np.int64) @ w.astype(np.int64).T) >> 8, 0, 127).astype(np.int8)
    return pack_inp(x, cfg), pack_wgt(w, cfg), expect


EPILOGUE = [("SHR", 8), ("MAX", 0), ("MIN", 127)]


def gemm_single(env: Env, x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, RunStats]:
    """One thread: reset, load everything, one GEMM over 4x4 tiles, the epilogue, one store (like gemm_0)."""
    cfg, dram = env.cfg, env.dram
    n = ROW_TILES * COL_TILES
    uops = [Uop(), Uop(), Uop()]  # reset, GEMM, ALU: all start at index 0, the loops do the rest
    x_addr, w_addr, uop_addr = dram.put(x), dram.put(w), dram.put_uops(uops)
    out_addr = dram.alloc(n * cfg.OUT_ELEM_BYTES)
    tiles = {"iters": (ROW_TILES, COL_TILES), "dst": (COL_TILES, 1)}
    program = [
        load(cfg, "UOP", 0, uop_addr, x=len(uops)),
        gemm((0, 1), reset=True, push_prev_dep=1, **tiles),                      # acc free: push g2l
        load(cfg, "INP", 0, x_addr, x=ROW_TILES, pop_next_dep=1),               # pop g2l
        load(cfg, "WGT", 0, w_addr, x=COL_TILES, push_next_dep=1),              # push l2g
        gemm((1, 2), src=(1, 0), wgt=(0, 1), pop_prev_dep=1, **tiles),          # pop l2g
    ]
    for k, (op, imm) in enumerate(EPILOGUE):
        program.append(alu(op, (2, 3), iters=(1, n), dst=(0, 1), src=(0, 1), imm=imm,
                           push_next_dep=int(k == len(EPILOGUE) - 1)))
    program.append(store(cfg, 0, out_addr, x=n, pop_prev_dep=1))
    stats = run(env.sim, finish_sync(program), trace=True)
    return from_tiles(dram.get(out_addr, (ROW_TILES, COL_TILES, cfg.BATCH, cfg.BLOCK_OUT), np.int8)), stats


@dataclass
class TwoThreadProgram:
    out: np.ndarray
    stats: RunStats
    inp_load: list[int]   # instruction index of LOAD INP of chunk c
    wgt_load: list[int]   # ... LOAD WGT of chunk c
    gemm: list[int]       # ... the (non-reset) GEMM of chunk c


def gemm_two_threads(env: Env, x: np.ndarray, w: np.ndarray) -> TwoThreadProgram:
    """Two virtual threads: chunk c (input row tile c) uses SRAM half h = c % 2 (input entry h, weight tiles
    4h..4h+3), its own accumulators 4c..4c+3. Tokens as VTA's virtual threads: the two reset GEMMs push the
    initial g2l credits; each load pops g2l before overwriting a half and pushes l2g; each GEMM pops l2g and
    pushes g2l when its half will be reloaded."""
    cfg, dram = env.cfg, env.dram
    chunks = ROW_TILES
    uops = ([Uop(dst_idx=COL_TILES * t) for t in range(2)]                              # reset, thread t
            + [Uop(dst_idx=COL_TILES * c, src_idx=c % 2, wgt_idx=COL_TILES * (c % 2)) for c in range(chunks)]
            + [Uop(dst_idx=COL_TILES * c, src_idx=COL_TILES * c) for c in range(chunks)])  # epilogue
    gemm_uop, alu_uop = 2, 2 + chunks
    x_addr, w_addr, uop_addr = dram.put(x), dram.put(w), dram.put_uops(uops)
    out_addr = dram.alloc(chunks * COL_TILES * cfg.OUT_ELEM_BYTES)
    program = [load(cfg, "UOP", 0, uop_addr, x=len(uops))]
    for t in range(2):  # thread t owns chunks t, t + 2
        program.append(gemm((t, t + 1), iters=(chunks // 2, COL_TILES), dst=(2 * COL_TILES, 1), reset=True,
                            push_prev_dep=1))
    inp_load, wgt_load, gemms = [], [], []
    for c in range(chunks):
        h = c % 2
        inp_load.append(len(program))
        program.append(load(cfg, "INP", h, x_addr, x=1, offset=c, pop_next_dep=1))
        wgt_load.append(len(program))
        program.append(load(cfg, "WGT", COL_TILES * h, w_addr, x=COL_TILES, push_next_dep=1))
    for c in range(chunks):
        gemms.append(len(program))
        program.append(gemm((gemm_uop + c, gemm_uop + c + 1), iters=(1, COL_TILES), dst=(0, 1), wgt=(0, 1),
                            pop_prev_dep=1, push_prev_dep=int(c + 2 < chunks)))
        for k, (op, imm) in enumerate(EPILOGUE):
            program.append(alu(op, (alu_uop + c, alu_uop + c + 1), iters=(1, COL_TILES), dst=(0, 1), src=(0, 1),
                               imm=imm, push_next_dep=int(k == len(EPILOGUE) - 1)))
    for c in range(chunks):
        program.append(store(cfg, COL_TILES * c, out_addr, x=COL_TILES, offset=COL_TILES * c, pop_prev_dep=1))
    stats = run(env.sim, finish_sync(program), trace=True)
    out = from_tiles(dram.get(out_addr, (chunks, COL_TILES, cfg.BATCH, cfg.BLOCK_OUT), np.int8))
    return TwoThreadProgram(out, stats, inp_load, wgt_load, gemms)


def _overlaps(a: tuple[str, int, int], b: tuple[str, int, int]) -> bool:
    return max(a[1], b[1]) < min(a[2], b[2])


def test_gemm_single_thread(env: Env):
    """VTA test_gemm "default": GEMM, reset, ALU epilogue, int8 store; no load/compute overlap."""
    cfg = env.cfg
    x, w, expect = gemm_data(cfg)
    env.garbage_acc(np.random.default_rng(7), ROW_TILES * COL_TILES)  # the reset GEMM must clear it
    out, stats = gemm_single(env, x, w)
    np.testing.assert_array_equal(out, expect)
    n = ROW_TILES * COL_TILES
    assert stats.vta_counters() == counters(
        inp_load_nbytes=ROW_TILES * cfg.INP_ELEM_BYTES, wgt_load_nbytes=COL_TILES * cfg.WGT_ELEM_BYTES,
        uop_load_nbytes=3 * 4, gemm_counter=n, alu_counter=3 * n, out_store_nbytes=n * cfg.OUT_ELEM_BYTES)
    # with one thread the tokens serialise: no load overlaps a GEMM or ALU instruction
    assert stats.trace is not None
    loads = [e for e in stats.trace if e[0] == "load" and e[2] - e[1] > 1]
    busy_compute = [e for e in stats.trace if e[0] == "compute" and e[2] - e[1] > 1]
    assert not any(_overlaps(a, b) for a in loads for b in busy_compute)


def test_gemm_two_virtual_threads(env: Env):
    """VTA test_gemm "smt": the same bytes with two ping-ponging threads, and the loads overlap compute."""
    cfg = env.cfg
    x, w, expect = gemm_data(cfg)
    env.garbage_acc(np.random.default_rng(8), ROW_TILES * COL_TILES)
    single, _ = gemm_single(env, x, w)
    env.garbage_acc(np.random.default_rng(9), ROW_TILES * COL_TILES)
    two = gemm_two_threads(env, x, w)
    np.testing.assert_array_equal(two.out, expect)
    assert two.out.tobytes() == single.tobytes()
    n = ROW_TILES * COL_TILES
    assert two.stats.vta_counters() == counters(
        inp_load_nbytes=ROW_TILES * cfg.INP_ELEM_BYTES,
        wgt_load_nbytes=ROW_TILES * COL_TILES * cfg.WGT_ELEM_BYTES,  # each chunk reloads its half
        uop_load_nbytes=(2 + 2 * ROW_TILES) * 4, gemm_counter=n, alu_counter=3 * n,
        out_store_nbytes=n * cfg.OUT_ELEM_BYTES)
    trace = two.stats.trace
    assert trace is not None
    for c in range(ROW_TILES):
        # RAW: the GEMM of chunk c pops the l2g token its weight load pushed when it ended
        assert trace[two.gemm[c]][1] >= trace[two.wgt_load[c]][2]
        # WAR: a load into a half waits for the GEMM that last read that half
        if c >= 2:
            assert trace[two.inp_load[c]][1] >= trace[two.gemm[c - 2]][2]
    # the point of the second thread: chunk c+1 loads (INP then WGT) while chunk c computes (GEMM, epilogue)
    last_alu = len(EPILOGUE)
    for c in range(ROW_TILES - 1):
        computing = ("compute", trace[two.gemm[c]][1], trace[two.gemm[c] + last_alu][2])
        loading = ("load", trace[two.inp_load[c + 1]][1], trace[two.wgt_load[c + 1]][2])
        assert _overlaps(computing, loading), (c, computing, loading)


# ---------------------------------------------------------------------------------------------------------
# runtime array round trip and VTA-runtime stream details

def test_runtime_array(env: Env):
    """VTA test_runtime_array: a (100, 100, BATCH, BLOCK_OUT) int8 array through DRAM write/read."""
    cfg = env.cfg
    rng = np.random.default_rng(10)
    a = rng.integers(-128, 128, (100, 100, cfg.BATCH, cfg.BLOCK_OUT)).astype(np.int8)
    addr = env.sim.alloc(a.nbytes)
    assert addr % 4096 == 0 and addr != 0
    env.sim.write(addr, a)
    back = env.sim.read(addr, a.nbytes).view(np.int8).reshape(a.shape)
    np.testing.assert_array_equal(back, a)
    env.sim.free(addr)
    with pytest.raises(MemoryAccessError):
        env.sim.read(addr, 1)


def test_vta_runtime_store_nop_is_accepted():
    """VTA's PushNoop gives every non-load-stage NOP memory_type UOP, also on the store stage; VTA's fsim
    returns from RunStore when x_size == 0 before looking at memory_type. Such a NOP must run."""
    cfg = load_config("pynq")
    sim = Simulator(cfg)
    program = [
        MemInsn(opcode=1, memory_type=0, push_prev_dep=1),         # store NOP as VTA emits it: push s2g
        load_nop("INP", push_next_dep=1),
        load_nop("UOP", pop_prev_dep=1, pop_next_dep=1),
        FinishInsn(),
    ]
    stats = run(sim, program)
    assert stats.vta_counters() == counters()
    assert stats.insns == {"load": 1, "compute": 2, "store": 1}
