"""Both simulators (C and the pure-Python reference) against numpy models, VTA's golden traces and timings
worked out by hand. Every test runs once per simulator through the autouse ``sim_class`` fixture."""

from __future__ import annotations

import json

import numpy as np
import pytest
from golden_files import GOLDEN_DIR, requires_golden

from hw_config import ALU_OPCODES, MEM_TYPES, OPCODES, HwConfig, config_from_dict, load_config
from simulator.core import Simulator
from simulator.errors import (
    CycleBudgetExceeded,
    DeadlockError,
    InvalidInstruction,
    MemoryAccessError,
    SimulatorError,
)
from simulator.reference import ReferenceSimulator

SIMULATORS = {"reference": ReferenceSimulator, "c": Simulator}
Sim: type = ReferenceSimulator  # the class under test; the autouse fixture below sets it for each test
GOLDEN = GOLDEN_DIR
GOLDEN_NAMES = sorted(p.name[:-4] for p in GOLDEN.glob("*.npz") if not p.name.endswith(".expect.npz"))
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
FLAG_ALIASES = {"pop_prev": "pop_prev_dep", "pop_next": "pop_next_dep",
                "push_prev": "push_prev_dep", "push_next": "push_next_dep"}


@pytest.fixture(params=list(SIMULATORS), autouse=True)
def sim_class(request, monkeypatch):
    """Run the test on each simulator: ``Sim`` names the class under test."""
    monkeypatch.setitem(globals(), "Sim", SIMULATORS[request.param])
    return SIMULATORS[request.param]


# ---- a tiny assembler (vta/isa.py is the real one; this keeps the test independent of it) ----

def encode(cfg: HwConfig, fmt: str, **values: int) -> bytes:
    f = cfg.insn_formats[fmt]
    full = dict.fromkeys(f.names, 0)
    full.update({FLAG_ALIASES.get(k, k): v for k, v in values.items()})
    return f.encode(full).to_bytes(16, "little")


def load(cfg, mem, sram=0, dram=0, y=1, x=1, stride=None, pad=(0, 0, 0, 0), **flags) -> bytes:
    """LOAD; pad = (y_pad_0, y_pad_1, x_pad_0, x_pad_1)."""
    return encode(cfg, "mem", opcode=OPCODES["LOAD"], memory_type=MEM_TYPES[mem], sram_base=sram, dram_base=dram,
                  y_size=y, x_size=x, x_stride=x if stride is None else stride, y_pad_0=pad[0], y_pad_1=pad[1],
                  x_pad_0=pad[2], x_pad_1=pad[3], **flags)


def store(cfg, sram=0, dram=0, y=1, x=1, stride=None, pad=(0, 0, 0, 0), mem="OUT", **flags) -> bytes:
    return encode(cfg, "mem", opcode=OPCODES["STORE"], memory_type=MEM_TYPES[mem], sram_base=sram, dram_base=dram,
                  y_size=y, x_size=x, x_stride=x if stride is None else stride, y_pad_0=pad[0], y_pad_1=pad[1],
                  x_pad_0=pad[2], x_pad_1=pad[3], **flags)


def nop(cfg, module: str, **flags) -> bytes:
    """A dependency-only instruction (x_size = 0) on a module, as VTA's runtime emits them."""
    if module == "store":
        return encode(cfg, "mem", opcode=OPCODES["STORE"], memory_type=MEM_TYPES["OUT"], **flags)
    mem = "INP" if module == "load" else "UOP"
    return encode(cfg, "mem", opcode=OPCODES["LOAD"], memory_type=MEM_TYPES[mem], **flags)


def gemm(cfg, bgn, end, iters=(1, 1), dst=(0, 0), src=(0, 0), wgt=(0, 0), reset=0, **flags) -> bytes:
    """GEMM; each factor pair is (factor_out, factor_in)."""
    return encode(cfg, "gemm", opcode=OPCODES["GEMM"], reset_reg=reset, uop_bgn=bgn, uop_end=end,
                  iter_out=iters[0], iter_in=iters[1], dst_factor_out=dst[0], dst_factor_in=dst[1],
                  src_factor_out=src[0], src_factor_in=src[1], wgt_factor_out=wgt[0], wgt_factor_in=wgt[1], **flags)


def alu(cfg, op, bgn, end, iters=(1, 1), dst=(0, 0), src=(0, 0), imm=None, **flags) -> bytes:
    """ALU; imm=None means the second operand is acc[src]."""
    return encode(cfg, "alu", opcode=OPCODES["ALU"], alu_opcode=ALU_OPCODES[op], uop_bgn=bgn, uop_end=end,
                  iter_out=iters[0], iter_in=iters[1], dst_factor_out=dst[0], dst_factor_in=dst[1],
                  src_factor_out=src[0], src_factor_in=src[1], use_imm=int(imm is not None),
                  imm=0 if imm is None else imm, **flags)


def finish(cfg, **flags) -> bytes:
    return encode(cfg, "finish", opcode=OPCODES["FINISH"], **flags)


def uops(cfg, *triples: tuple[int, int, int]) -> np.ndarray:
    fmt = cfg.insn_formats["uop"]
    return np.array([fmt.encode({"dst_idx": d, "src_idx": s, "wgt_idx": w}) for d, s, w in triples], dtype=np.uint32)


# ---- numpy models ----

def wrap32(x) -> np.ndarray:
    """Two's-complement wrap of integers to int32 (written independently of the simulator's helper)."""
    return (np.asarray(x, dtype=np.int64).astype(np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32)


def alu_model(op: str, a: int, b: int) -> int:
    """One lane of the ALU on Python integers, straight from docs/simulator.md."""
    if op == "MIN":
        r = min(a, b)
    elif op == "MAX":
        r = max(a, b)
    elif op == "ADD":
        r = a + b
    elif op == "MUL":
        r = a * b
    elif b >= 0:  # SHR
        r = a >> min(b, 31)
    else:
        r = a << min(-b, 31)
    return int(wrap32(r))


def rng_int8(rng, shape) -> np.ndarray:
    return rng.integers(-128, 128, size=shape, dtype=np.int64).astype(np.int8)


@pytest.fixture
def cfg() -> HwConfig:
    return load_config("pynq")


# The timing tests below work their figures out by hand from docs/simulator.md's equations with a GEMM/ALU taking
# 4 + n x II cycles: they run pynq at COMPUTE_LATENCY 4 (the preset's is its RTL pipeline's depth, 9).
HAND_TIMED = {"COMPUTE_LATENCY": 4}


# ---- VTA's golden programs ----

def replay_golden(name: str, compute: bool = True):
    image = np.load(GOLDEN / f"{name}.npz")
    expect = np.load(GOLDEN / f"{name}.expect.npz")
    sim = Sim(config_from_dict(json.loads(str(image["config"]))))
    for i, addr in enumerate(image["seg_addr"]):
        sim.map(int(addr), image[f"seg_{i}"])
    if int(image["insn_addr"]):
        sim.map(int(image["insn_addr"]), image["insns"])
    stats = sim.run(image["insns"], compute=compute)
    return sim, image, expect, stats


@requires_golden
@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_golden_replay_matches_vta(name):
    sim, _, expect, stats = replay_golden(name)
    for i, addr in enumerate(expect["seg_addr"]):
        want = expect[f"seg_{i}"]
        np.testing.assert_array_equal(sim.read(int(addr), want.size), want)
    assert stats.vta_counters() == json.loads(str(expect["stats"]))


@requires_golden
def test_golden_set_is_complete():
    assert len(GOLDEN_NAMES) == 16


@requires_golden
@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_timing_only_mode_counts_and_times_like_a_full_run(name):
    _, _, _, full = replay_golden(name)
    sim, image, _, timing = replay_golden(name, compute=False)
    assert timing.to_dict() == full.to_dict()
    # No data moved: every stored range still holds what the image had before the run.
    for i, addr in enumerate(image["seg_addr"]):
        np.testing.assert_array_equal(sim.read(int(addr), image[f"seg_{i}"].size), image[f"seg_{i}"])


@requires_golden
def test_replay_of_a_golden_image():
    from simulator.image import load_image
    image = load_image(GOLDEN / "gemm_0.npz")
    expect = np.load(GOLDEN / "gemm_0.expect.npz")
    sim = Sim(image.config)
    result = sim.replay(image)
    assert sim.regions() == []  # replay maps the image only for the run
    stored = {int(a): bytes(d) for a, d in result.segments}
    assert stored[int(expect["seg_addr"][0])] == expect["seg_0"].tobytes()
    assert {k: result.stats[k] for k in json.loads(str(expect["stats"]))} == json.loads(str(expect["stats"]))


# ---- functional programs against numpy ----

@pytest.mark.parametrize("preset", ["pynq", "batch4"])
def test_blocked_gemm_relu_store(preset):
    cfg = load_config(preset)
    B, BI, BO = cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT
    n_i, n_k, n_o = 2, 3, 2  # batch tiles, reduction tiles, output tiles
    rng = np.random.default_rng(1)
    a = rng_int8(rng, (n_i, n_k, B, BI))
    w = rng_int8(rng, (n_o, n_k, BO, BI))
    sim = Sim(cfg)
    # uop 0 serves the reset and the ALU (dst 0 walked by the loops); uop 1+k is reduction step k.
    micro = uops(cfg, (0, 0, 0), *[(0, k, k) for k in range(n_k)])
    a_addr, w_addr, u_addr = sim.alloc(a.nbytes), sim.alloc(w.nbytes), sim.alloc(micro.nbytes)
    out_addr = sim.alloc(n_i * n_o * cfg.OUT_ELEM_BYTES)
    sim.write(a_addr, a)
    sim.write(w_addr, w)
    sim.write(u_addr, micro)
    loops = {"iters": (n_i, n_o), "dst": (n_o, 1)}
    prog = b"".join([
        load(cfg, "UOP", 0, u_addr // 4, x=len(micro)),
        gemm(cfg, 0, 1, reset=1, **loops),
        load(cfg, "INP", 0, a_addr // cfg.INP_ELEM_BYTES, x=n_i * n_k),
        load(cfg, "WGT", 0, w_addr // cfg.WGT_ELEM_BYTES, x=n_o * n_k, push_next=1),
        gemm(cfg, 1, 1 + n_k, src=(n_k, 0), wgt=(0, n_k), pop_prev=1, **loops),
        alu(cfg, "MAX", 0, 1, src=(n_o, 1), imm=0, **loops),
        alu(cfg, "MIN", 0, 1, src=(n_o, 1), imm=127, push_next=1, **loops),
        store(cfg, 0, out_addr // cfg.OUT_ELEM_BYTES, x=n_i * n_o, pop_prev=1, push_prev=1),
        finish(cfg, pop_next=1),
    ])
    stats = sim.run(prog)
    acc = np.einsum("ikbc,okdc->iobd", a.astype(np.int64), w.astype(np.int64))  # (n_i, n_o, B, BO)
    relu = np.clip(acc, 0, 127)
    np.testing.assert_array_equal(sim.read_sram("acc", 0, n_i * n_o), relu.reshape(-1, B, BO))
    np.testing.assert_array_equal(sim.read(out_addr, relu.size).view(np.int8), relu.astype(np.int8).reshape(-1))
    assert stats.vta_counters() == {
        "inp_load_nbytes": n_i * n_k * cfg.INP_ELEM_BYTES, "wgt_load_nbytes": n_o * n_k * cfg.WGT_ELEM_BYTES,
        "acc_load_nbytes": 0, "uop_load_nbytes": 4 * len(micro), "out_store_nbytes": n_i * n_o * cfg.OUT_ELEM_BYTES,
        "gemm_counter": n_i * n_o * n_k, "alu_counter": 2 * n_i * n_o}
    assert stats.insns == {"load": 2, "compute": 6, "store": 1}


def test_gemm_accumulates_onto_loaded_acc_with_int32_wrap(cfg):
    rng = np.random.default_rng(2)
    n = 4
    init = np.array([INT32_MAX - 5, INT32_MIN + 5, -1, 0], dtype=np.int64)[:, None, None] \
        + rng.integers(-3, 3, size=(n, cfg.BATCH, cfg.BLOCK_OUT))
    init = init.astype(np.int32)
    x = np.full((n, cfg.BATCH, cfg.BLOCK_IN), -128, dtype=np.int8)
    x[2:] = rng_int8(rng, (2, cfg.BATCH, cfg.BLOCK_IN))
    w = rng_int8(rng, (1, cfg.BLOCK_OUT, cfg.BLOCK_IN))
    w[0, :8] = -128
    sim = Sim(cfg)
    acc_addr, out_addr = sim.alloc(init.nbytes), sim.alloc(n * cfg.OUT_ELEM_BYTES)
    sim.write(acc_addr, init)
    sim.write_sram("inp", 0, x)
    sim.write_sram("wgt", 0, w)
    sim.write_sram("uop", 0, uops(cfg, (0, 0, 0)))
    prog = b"".join([
        load(cfg, "ACC", 0, acc_addr // cfg.ACC_ELEM_BYTES, x=n),
        gemm(cfg, 0, 1, iters=(1, n), dst=(0, 1), src=(0, 1)),
        alu(cfg, "SHR", 0, 1, iters=(1, n), dst=(0, 1), src=(0, 1), imm=0, push_next=1),  # >> 0 keeps values
        store(cfg, 0, out_addr // cfg.OUT_ELEM_BYTES, x=n, pop_prev=1),
        finish(cfg),
    ])
    stats = sim.run(prog)
    want = wrap32(init.astype(np.int64) + np.einsum("nbc,oc->nbo", x.astype(np.int64), w[0].astype(np.int64)))
    assert (init.astype(np.int64) + 16 * 128 * 128 > INT32_MAX).any()  # the test really wraps
    np.testing.assert_array_equal(sim.read_sram("acc", 0, n), want)
    # STORE keeps the low 8 bits of each lane (no clamping).
    np.testing.assert_array_equal(sim.read(out_addr, want.size), (want & 0xFF).astype(np.uint8).reshape(-1))
    assert stats.acc_load_nbytes == n * cfg.ACC_ELEM_BYTES and stats.gemm_counter == n


# The five pad cases of VTA's test_padded_load (pad_before / pad_after on (3, 5, B, 16)), as
# (y_pad_0, y_pad_1, x_pad_0, x_pad_1), plus a strided sub-window with all four pads.
PAD_CASES = [(2, 0, 0, 0), (0, 0, 2, 0), (0, 2, 0, 0), (0, 0, 0, 2), (1, 1, 1, 1)]


@pytest.mark.parametrize("pad", PAD_CASES)
def test_padded_acc_load(cfg, pad):
    rows, cols = 3, 5
    rng = np.random.default_rng(3)
    src = rng.integers(INT32_MIN, INT32_MAX, size=(rows, cols, cfg.BATCH, cfg.BLOCK_OUT), dtype=np.int64)
    src = src.astype(np.int32)
    sim = Sim(cfg)
    addr = sim.alloc(src.nbytes)
    sim.write(addr, src)
    sim.write_sram("acc", 0, np.full((40, cfg.BATCH, cfg.BLOCK_OUT), 7, dtype=np.int32))
    base = 3
    stats = sim.run(load(cfg, "ACC", base, addr // cfg.ACC_ELEM_BYTES, y=rows, x=cols, pad=pad) + finish(cfg),
                    trace=True)
    y0, y1, x0, x1 = pad
    want = np.pad(src, ((y0, y1), (x0, x1), (0, 0), (0, 0)))
    total = want.shape[0] * want.shape[1]
    got = sim.read_sram("acc", 0, 40)
    np.testing.assert_array_equal(got[base:base + total], want.reshape(total, cfg.BATCH, cfg.BLOCK_OUT))
    assert (got[:base] == 7).all() and (got[base + total:] == 7).all()
    assert stats.acc_load_nbytes == rows * cols * cfg.ACC_ELEM_BYTES  # padding is not counted
    # Contiguous (x_stride == x_size): one row of 15*64 = 960 B = 120 beats of 8 B = 8 bursts of 16:
    # 32 + 120 + 8*2 = 168 cycles, plus one cycle per padded element.
    module, start, end = stats.trace[0]
    assert module == "compute" and end - start == 168 + total - rows * cols


def test_strided_padded_sub_window(cfg):
    rng = np.random.default_rng(4)
    src = rng.integers(-1000, 1000, size=(4, 7, cfg.BATCH, cfg.BLOCK_OUT)).astype(np.int32)
    sim = Sim(cfg)
    addr = sim.alloc(src.nbytes)
    sim.write(addr, src)
    # rows 1..2, columns 2..4 of the 4x7 matrix, padded (1, 2, 3, 1)
    first = addr // cfg.ACC_ELEM_BYTES + 1 * 7 + 2
    stats = sim.run(load(cfg, "ACC", 0, first, y=2, x=3, stride=7, pad=(1, 2, 3, 1)) + finish(cfg), trace=True)
    want = np.pad(src[1:3, 2:5], ((1, 2), (3, 1), (0, 0), (0, 0)))
    np.testing.assert_array_equal(sim.read_sram("acc", 0, 5 * 7), want.reshape(35, cfg.BATCH, cfg.BLOCK_OUT))
    # Strided: 2 rows of 3*64 = 192 B = 24 beats = 2 bursts each: 32 + 2*(24 + 2*2) = 88, + 35-6 pads.
    assert stats.trace[0][2] - stats.trace[0][1] == 88 + 29


def test_acc_8bit_load_sign_extends_and_counts_acc_bytes(cfg):
    n = 4
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    data = np.arange(-128, 128, 256 // (n * lanes) or 1, dtype=np.int64)[: n * lanes].astype(np.int8)
    sim = Sim(cfg)
    addr = sim.alloc(data.nbytes)
    sim.write(addr, data)
    stats = sim.run(load(cfg, "ACC_8BIT", 2, addr // lanes, x=n) + finish(cfg), trace=True)
    np.testing.assert_array_equal(sim.read_sram("acc", 2, n), data.astype(np.int32).reshape(n, cfg.BATCH, -1))
    assert (sim.read_sram("acc", 2, n) < 0).any()
    # VTA's quirk: ACC_8BIT loads are counted with ACC element bytes (64), not the 16 bytes moved.
    assert stats.acc_load_nbytes == n * cfg.ACC_ELEM_BYTES
    # The DMA moves 4*16 = 64 B = 8 beats = 1 burst: 32 + 8 + 2 = 42 cycles.
    assert stats.trace[0][2] - stats.trace[0][1] == 42


ALU_IMMEDIATES = [-32768, -40, -32, -31, -4, -1, 0, 1, 5, 31, 32, 40, 32767]


def alu_operands(cfg, op: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """dst and src tiles with the extremes in the first lanes."""
    rng = np.random.default_rng(seed)
    shape = (n, cfg.BATCH, cfg.BLOCK_OUT)
    a = rng.integers(INT32_MIN, INT32_MAX, size=shape, dtype=np.int64, endpoint=True)
    a.reshape(-1)[:6] = [INT32_MIN, INT32_MAX, -1, 0, 1, INT32_MIN + 1]
    if op == "SHR":
        b = rng.integers(-45, 45, size=shape, dtype=np.int64)
        b.reshape(-1)[:8] = [31, -31, 32, -32, 0, 100, -100, INT32_MIN]
    else:
        b = rng.integers(INT32_MIN, INT32_MAX, size=shape, dtype=np.int64, endpoint=True)
        b.reshape(-1)[:6] = [INT32_MAX, INT32_MAX, INT32_MIN, -1, INT32_MIN, -1]
    return a.astype(np.int32), b.astype(np.int32)


@pytest.mark.parametrize("op", list(ALU_OPCODES))
def test_alu_register_operand(cfg, op):
    n = 8
    a, b = alu_operands(cfg, op, n, seed=ALU_OPCODES[op])
    sim = Sim(cfg)
    sim.write_sram("acc", 0, a)
    sim.write_sram("acc", n, b)
    sim.write_sram("uop", 0, uops(cfg, (0, n, 0)))
    stats = sim.run(alu(cfg, op, 0, 1, iters=(2, n // 2), dst=(n // 2, 1), src=(n // 2, 1)) + finish(cfg))
    want = np.vectorize(lambda x, y: alu_model(op, int(x), int(y)), otypes=[np.int64])(a, b)
    np.testing.assert_array_equal(sim.read_sram("acc", 0, n), want.astype(np.int32))
    np.testing.assert_array_equal(sim.read_sram("acc", n, n), b)  # the source is untouched
    assert stats.alu_counter == n


@pytest.mark.parametrize("op", list(ALU_OPCODES))
def test_alu_immediate(cfg, op):
    n = len(ALU_IMMEDIATES)
    a, _ = alu_operands(cfg, op, n, seed=10 + ALU_OPCODES[op])
    sim = Sim(cfg)
    sim.write_sram("acc", 0, a)
    sim.write_sram("uop", 0, uops(cfg, *[(k, 0, 0) for k in range(n)]))
    # One ALU instruction per immediate (on its own tile); reset_reg=1 must be ignored on ALU.
    prog = b"".join(alu(cfg, op, k, k + 1, imm=imm) for k, imm in enumerate(ALU_IMMEDIATES))
    prog = prog[:16] + encode(cfg, "alu", opcode=OPCODES["ALU"], alu_opcode=ALU_OPCODES[op], reset_reg=1,
                              uop_bgn=1, uop_end=2, iter_out=1, iter_in=1, use_imm=1,
                              imm=ALU_IMMEDIATES[1]) + prog[32:]
    sim.run(prog + finish(cfg))
    got = sim.read_sram("acc", 0, n)
    for k, imm in enumerate(ALU_IMMEDIATES):
        want = np.array([alu_model(op, int(x), imm) for x in a[k].reshape(-1)]).reshape(a[k].shape)
        np.testing.assert_array_equal(got[k], want, err_msg=f"{op} imm={imm}")


@pytest.mark.parametrize("op", list(ALU_OPCODES))
@pytest.mark.parametrize(("src_offset", "src_in"), [(-1, 1), (1, 1), (0, 1), (7, 1), (2, 0), (-3, 0), (9, 0)])
def test_alu_rows_overlapping_their_source_follow_loop_order(cfg, op, src_offset, src_in):
    """One micro-op over contiguous destination rows whose source rows overlap them (a row read after an earlier
    iteration wrote it, or before a later one does): the result is row by row in loop order, as specified."""
    rng = np.random.default_rng([ALU_OPCODES[op], src_offset + 10, src_in])
    rows, base = 24, 6
    a = rng.integers(-2**31, 2**31, (rows, cfg.BATCH, cfg.BLOCK_OUT), dtype=np.int64)
    if op == "SHR":
        a[:, :, ::2] = rng.integers(-40, 40, (rows, cfg.BATCH, cfg.BLOCK_OUT // 2))
    sim = Sim(cfg)
    sim.write_sram("acc", 0, a.astype(np.int32))
    sim.write_sram("uop", 0, uops(cfg, (base, base + src_offset, 0)))
    sim.run(alu(cfg, op, 0, 1, iters=(2, 5), dst=(5, 1), src=(5, src_in)) + finish(cfg))
    want = a.copy()
    for i in range(2):
        for j in range(5):
            d, src = base + 5 * i + j, base + src_offset + 5 * i + src_in * j
            want[d] = np.vectorize(lambda x, y: alu_model(op, int(x), int(y)), otypes=[np.int64])(want[d], want[src])
    np.testing.assert_array_equal(sim.read_sram("acc", 0, rows), want.astype(np.int32))


def test_alu_source_equal_to_destination_reads_before_writing(cfg):
    a = np.array([[[INT32_MAX, -3, 5, INT32_MIN] * (cfg.BLOCK_OUT // 4)]] * cfg.BATCH, dtype=np.int32)
    a = a.reshape(1, cfg.BATCH, cfg.BLOCK_OUT)
    sim = Sim(cfg)
    sim.write_sram("acc", 0, a)
    sim.write_sram("uop", 0, uops(cfg, (0, 0, 0)))
    sim.run(alu(cfg, "ADD", 0, 1) + alu(cfg, "MUL", 0, 1) + finish(cfg))
    doubled = wrap32(a.astype(np.int64) * 2)
    np.testing.assert_array_equal(sim.read_sram("acc", 0, 1), wrap32(doubled.astype(np.int64) ** 2))


def test_gemm_and_alu_loop_nest_order_with_repeated_destination(cfg):
    # Two micro-ops accumulate into the same acc row inside the loops: order i, j, k must all land.
    rng = np.random.default_rng(5)
    x = rng_int8(rng, (6, cfg.BATCH, cfg.BLOCK_IN))
    w = rng_int8(rng, (3, cfg.BLOCK_OUT, cfg.BLOCK_IN))
    sim = Sim(cfg)
    sim.write_sram("inp", 0, x)
    sim.write_sram("wgt", 0, w)
    sim.write_sram("uop", 0, uops(cfg, (0, 0, 0), (0, 1, 1)))
    # iter_out 2 (dst +1, src +3), iter_in 2 (dst +0, src +1, wgt +1)
    stats = sim.run(gemm(cfg, 0, 2, iters=(2, 2), dst=(1, 0), src=(3, 1), wgt=(0, 1)) + finish(cfg))
    want = np.zeros((2, cfg.BATCH, cfg.BLOCK_OUT), dtype=np.int64)
    for i in range(2):
        for j in range(2):
            for s0, w0 in ((0, 0), (1, 1)):
                want[i] += x[s0 + 3 * i + j].astype(np.int64) @ w[w0 + j].astype(np.int64).T
    np.testing.assert_array_equal(sim.read_sram("acc", 0, 2), want)
    assert stats.gemm_counter == 8


def test_reset_gemm_zeroes_and_is_not_counted(cfg):
    sim = Sim(cfg)
    sim.write_sram("acc", 0, np.full((6, cfg.BATCH, cfg.BLOCK_OUT), 9, dtype=np.int32))
    sim.write_sram("uop", 0, uops(cfg, (1, 0, 0)))
    stats = sim.run(gemm(cfg, 0, 1, iters=(2, 2), dst=(2, 1), reset=1) + finish(cfg))
    got = sim.read_sram("acc", 0, 6)[:, 0, 0]
    np.testing.assert_array_equal(got, [9, 0, 0, 0, 0, 9])
    assert stats.gemm_counter == 0


def test_zero_iterations_are_a_valid_no_op(cfg):
    sim = Sim(cfg)
    sim.write_sram("acc", 0, np.ones((1, cfg.BATCH, cfg.BLOCK_OUT), dtype=np.int32))
    sim.write_sram("uop", 0, uops(cfg, (cfg.ACC_BUFF_DEPTH - 1, 0, 0)))  # would reach out of range if run
    prog = gemm(cfg, 0, 1, iters=(0, 5), dst=(1, 1)) + alu(cfg, "ADD", 0, 1, iters=(3, 0), dst=(1, 1), imm=1) \
        + gemm(cfg, 0, 0, iters=(4, 4)) + finish(cfg)
    stats = sim.run(prog, trace=True)
    assert stats.gemm_counter == 0 and stats.alu_counter == 0
    latency = cfg.COMPUTE_LATENCY
    assert [e - s for _, s, e in stats.trace] == [latency, latency, latency, 1]  # COMPUTE_LATENCY + 0 iterations


# ---- DRAM / SRAM API ----

def test_dram_api(cfg):
    sim = Sim(cfg)
    a = sim.alloc(100)
    assert a >= 4096 and a % 4096 == 0
    np.testing.assert_array_equal(sim.read(a, 4096), np.zeros(4096, np.uint8))
    sim.write(a + 4, np.array([1, -2], dtype=np.int32))
    assert sim.read(a + 4, 8).tobytes() == np.array([1, -2], dtype="<i4").tobytes()
    sim.write(a, b"\x01\x02")
    got = sim.read(a, 2)
    got[0] = 99  # a copy, not a view
    assert sim.read(a, 2).tolist() == [1, 2]
    sim.map(0x100000, np.arange(8, dtype=np.uint8))
    sim.map(0x200000, 16)
    assert sim.read(0x100000, 8).tolist() == list(range(8)) and not sim.read(0x200000, 16).any()
    with pytest.raises(MemoryAccessError):
        sim.read(0x100000, 9)  # past the end of the region
    with pytest.raises(MemoryAccessError):
        sim.write(0x1FFFFF, b"\x00\x00")
    with pytest.raises(MemoryAccessError):
        sim.map(0x100004, 4)  # overlaps
    with pytest.raises(MemoryAccessError):
        sim.read(3, 1)  # page 0 is never mapped
    sim.free(0x100000)
    with pytest.raises(MemoryAccessError):
        sim.read(0x100000, 1)
    assert sim.alloc(10) != a


def test_sram_api_reset_and_persistence(cfg):
    cfg = cfg.replace(CAPABILITIES="fsim")   # STORE reads the accumulator (test_output_buffer: the others)
    sim = Sim(cfg)
    assert sim.read_sram("uop", 0, 3).dtype == np.uint32 and sim.read_sram("uop", 0, 3).shape == (3,)
    assert sim.read_sram("inp", 0, 2).shape == (2, cfg.BATCH, cfg.BLOCK_IN)
    assert sim.read_sram("wgt", 0, 2).shape == (2, cfg.BLOCK_OUT, cfg.BLOCK_IN)
    assert sim.read_sram("acc", 0, 2).dtype == np.int32
    for mem, index, count in [("acc", cfg.ACC_BUFF_DEPTH - 1, 2), ("inp", -1, 1), ("uop", cfg.UOP_BUFF_DEPTH, 1)]:
        with pytest.raises(SimulatorError):
            sim.read_sram(mem, index, count)
    with pytest.raises(SimulatorError):
        sim.write_sram("out", 0, np.zeros((1, cfg.BATCH, cfg.BLOCK_OUT), np.int8))
    with pytest.raises(SimulatorError):
        sim.write_sram("wgt", cfg.WGT_BUFF_DEPTH, np.zeros((1, cfg.BLOCK_OUT, cfg.BLOCK_IN), np.int8))
    # SRAMs persist across runs: one run loads acc, the next stores it without loading.
    data = np.arange(cfg.BATCH * cfg.BLOCK_OUT, dtype=np.int32).reshape(1, cfg.BATCH, cfg.BLOCK_OUT)
    src, dst = sim.alloc(data.nbytes), sim.alloc(cfg.OUT_ELEM_BYTES)
    sim.write(src, data)
    sim.run(load(cfg, "ACC", 5, src // cfg.ACC_ELEM_BYTES) + finish(cfg))
    sim.run(store(cfg, 5, dst // cfg.OUT_ELEM_BYTES) + finish(cfg))
    np.testing.assert_array_equal(sim.read(dst, data.size), data.reshape(-1).astype(np.uint8))
    sim.reset()
    assert not sim.read_sram("acc", 5, 1).any()


def test_token_queues_start_empty_at_every_run(cfg):
    sim = Sim(cfg)
    sim.run(nop(cfg, "load", push_next=1) + finish(cfg))  # leaves a token on l2g
    with pytest.raises(DeadlockError):
        sim.run(nop(cfg, "compute", pop_prev=1) + finish(cfg))


def test_trace_is_in_program_order_and_optional(cfg):
    sim = Sim(cfg)
    prog = nop(cfg, "store") + nop(cfg, "load") + finish(cfg)
    assert sim.run(prog).trace is None
    assert [m for m, _, _ in sim.run(prog, trace=True).trace] == ["store", "load", "compute"]


# ---- timing, worked out by hand ----
# pynq: 8-byte bus, so fetching one 16-byte instruction takes f = 2 cycles and d(i) = 32 + 2*(i+1) = 34 + 2i
# while no command queue is full. LOAD INP / STORE of one 16-byte element: 2 beats, 1 burst:
# 32 + 2 + 2 = 36 cycles. GEMM of one iteration: 4 + 1 = 5. NOP and FINISH: 1.

def tile_setup(cfg, sim: ReferenceSimulator):
    """Two input tiles in DRAM, one weight tile and two micro-ops in SRAM; returns (in_base, out_base, want)."""
    rng = np.random.default_rng(6)
    x = rng_int8(rng, (2, cfg.BATCH, cfg.BLOCK_IN))
    w = rng_int8(rng, (1, cfg.BLOCK_OUT, cfg.BLOCK_IN))
    x_addr, out_addr = sim.alloc(x.nbytes), sim.alloc(2 * cfg.OUT_ELEM_BYTES)
    sim.write(x_addr, x)
    sim.write_sram("wgt", 0, w)
    sim.write_sram("uop", 0, uops(cfg, (0, 0, 0), (1, 1, 0)))
    want = (x.astype(np.int64) @ w[0].astype(np.int64).T).astype(np.int8)
    return x_addr // cfg.INP_ELEM_BYTES, out_addr // cfg.OUT_ELEM_BYTES, out_addr, want


def test_serial_chain_versus_overlapped_pipeline(cfg):
    cfg = cfg.replace(**HAND_TIMED)
    # Serial: every step waits for the previous one through tokens (store -> compute -> load closes the loop).
    #   0 LOAD INP t0 push l2g    load    s = d0 = 34                          e = 70
    #   1 GEMM t0 pop l2g push g2s compute s = max(0, 36, l2g 70) = 70         e = 75
    #   2 STORE t0 pop g2s push s2g store  s = max(0, 38, g2s 75) = 75         e = 111
    #   3 NOP pop s2g push g2l    compute s = max(75, 40, s2g 111) = 111       e = 112
    #   4 LOAD INP t1 pop g2l push l2g load s = max(70, 42, g2l 112) = 112     e = 148
    #   5 GEMM t1 pop l2g push g2s compute s = max(112, 44, l2g 148) = 148     e = 153
    #   6 STORE t1 pop g2s push s2g store  s = max(111, 46, g2s 153) = 153     e = 189
    #   7 FINISH pop s2g          compute s = max(153, 48, s2g 189) = 189      e = 190
    sim = Sim(cfg)
    x_base, out_base, out_addr, want = tile_setup(cfg, sim)
    serial = b"".join([
        load(cfg, "INP", 0, x_base, push_next=1),
        gemm(cfg, 0, 1, pop_prev=1, push_next=1),
        store(cfg, 0, out_base, pop_prev=1, push_prev=1),
        nop(cfg, "compute", pop_next=1, push_prev=1),
        load(cfg, "INP", 1, x_base + 1, pop_next=1, push_next=1),
        gemm(cfg, 1, 2, pop_prev=1, push_next=1),
        store(cfg, 1, out_base + 1, pop_prev=1, push_prev=1),
        finish(cfg, pop_next=1),
    ])
    s = sim.run(serial, trace=True)
    assert s.trace == [("load", 34, 70), ("compute", 70, 75), ("store", 75, 111), ("compute", 111, 112),
                       ("load", 112, 148), ("compute", 148, 153), ("store", 153, 189), ("compute", 189, 190)]
    assert (s.cycles, s.finish_cycle) == (190, 190)
    assert s.busy == {"load": 72, "compute": 12, "store": 72}
    assert s.insns == {"load": 2, "compute": 4, "store": 2}
    assert {m: {c: v for c, v in d.items() if v} for m, d in s.stalls.items()} == {
        "load": {"dispatch": 34, "pop_g2l": 42},          # 112 - 70
        "compute": {"pop_l2g": 70 + 36, "pop_s2g": 36 + 36},  # 148 - 112; 111 - 75 and 189 - 153
        "store": {"pop_g2s": 75 + 42},                     # 153 - 111
    }
    np.testing.assert_array_equal(sim.read(out_addr, want.size).view(np.int8), want.reshape(-1))

    # Overlapped: the second load runs while the first tile computes and stores.
    #   0 LOAD INP t0 push l2g    load    s = 34                               e = 70
    #   1 LOAD INP t1 push l2g    load    s = max(70, 36) = 70                 e = 106
    #   2 GEMM t0 pop l2g push g2s compute s = max(0, 38, l2g 70) = 70         e = 75
    #   3 GEMM t1 pop l2g push g2s compute s = max(75, 40, l2g 106) = 106      e = 111
    #   4 STORE t0 pop g2s        store   s = max(0, 42, g2s 75) = 75          e = 111
    #   5 STORE t1 pop g2s push s2g store s = max(111, 44, g2s 111) = 111      e = 147
    #   6 FINISH pop s2g          compute s = max(111, 46, s2g 147) = 147      e = 148
    sim = Sim(cfg)
    x_base, out_base, out_addr, want = tile_setup(cfg, sim)
    overlapped = b"".join([
        load(cfg, "INP", 0, x_base, push_next=1),
        load(cfg, "INP", 1, x_base + 1, push_next=1),
        gemm(cfg, 0, 1, pop_prev=1, push_next=1),
        gemm(cfg, 1, 2, pop_prev=1, push_next=1),
        store(cfg, 0, out_base, pop_prev=1),
        store(cfg, 1, out_base + 1, pop_prev=1, push_prev=1),
        finish(cfg, pop_next=1),
    ])
    o = sim.run(overlapped, trace=True)
    assert o.trace == [("load", 34, 70), ("load", 70, 106), ("compute", 70, 75), ("compute", 106, 111),
                       ("store", 75, 111), ("store", 111, 147), ("compute", 147, 148)]
    assert (o.cycles, o.finish_cycle) == (148, 148)
    assert o.busy == {"load": 72, "compute": 11, "store": 72}
    assert {m: {c: v for c, v in d.items() if v} for m, d in o.stalls.items()} == {
        "load": {"dispatch": 34},
        "compute": {"pop_l2g": 70 + 31, "pop_s2g": 36},  # 106 - 75; 147 - 111
        "store": {"pop_g2s": 75},                        # STORE t1 starts exactly when the module frees
    }
    np.testing.assert_array_equal(sim.read(out_addr, want.size).view(np.int8), want.reshape(-1))
    assert o.vta_counters() == s.vta_counters()


@pytest.mark.parametrize("preset, first, fetch", [("pynq", 34, 2), ("batch4", 33, 1)])
def test_dispatch_bound_stream(preset, first, fetch):
    # Eight 1-cycle compute NOPs and FINISH: d(i) = DRAM_LATENCY + f*(i+1). With an 8-byte bus (f = 2)
    # each instruction waits one cycle for fetch; with a 16-byte bus (f = 1) they run back to back.
    cfg = load_config(preset)
    sim = Sim(cfg)
    stats = sim.run(b"".join([nop(cfg, "compute")] * 8) + finish(cfg), trace=True)
    assert stats.trace == [("compute", first + fetch * i, first + fetch * i + 1) for i in range(9)]
    assert stats.cycles == first + fetch * 8 + 1
    assert stats.stalls["compute"]["dispatch"] == first + 8 * (fetch - 1)
    assert stats.busy["compute"] == 9


def test_full_command_queue_blocks_fetch():
    # INSN_QUEUE_DEPTH = 1: an instruction is fetched only once the previous one of its module has started.
    # Reset GEMMs of 20 iterations last 4 + 20 = 24 cycles.
    #   0 GEMM  d = 34                          s = 34   e = 58
    #   1 GEMM  d = max(34, start(0) 34) + 2 = 36  s = 58   e = 82
    #   2 GEMM  d = max(36, start(1) 58) + 2 = 60  s = 82   e = 106
    #   3 LOAD NOP (load) d = max(60, 0) + 2 = 62  s = 62   e = 63   (would be 40 with a deep queue)
    #   4 FINISH d = max(62, start(2) 82) + 2 = 84 s = 106  e = 107
    cfg = load_config("pynq", INSN_QUEUE_DEPTH=1, **HAND_TIMED)
    sim = Sim(cfg)
    sim.write_sram("uop", 0, uops(cfg, (0, 0, 0)))
    long_gemm = gemm(cfg, 0, 1, iters=(1, 20), dst=(0, 1), reset=1)
    stats = sim.run(long_gemm * 3 + nop(cfg, "load") + finish(cfg), trace=True)
    assert stats.trace == [("compute", 34, 58), ("compute", 58, 82), ("compute", 82, 106), ("load", 62, 63),
                           ("compute", 106, 107)]
    assert stats.stalls["load"]["dispatch"] == 62 and stats.stalls["compute"]["dispatch"] == 34
    deep = Sim(load_config("pynq", **HAND_TIMED))
    deep.write_sram("uop", 0, uops(cfg, (0, 0, 0)))
    assert deep.run(long_gemm * 3 + nop(cfg, "load") + finish(cfg), trace=True).trace[3] == ("load", 40, 41)


def test_token_queue_push_space_stall():
    # TOKEN_QUEUE_DEPTH = 1: the second push onto l2g may start only when the first pop from l2g has started.
    #   0 LOAD NOP push l2g         load    s = 34                                 e = 35
    #   2 GEMM pop l2g (24 cycles)  compute s = max(0, 38, l2g 35) = 38           e = 62
    #   1 LOAD NOP push l2g         load    s = max(35, 36, space: pop#0 38) = 38 e = 39  (push_l2g stall 3)
    #   3 GEMM pop l2g              compute s = max(62, 40, l2g 39) = 62          e = 86
    #   4 FINISH                    compute s = max(86, 42) = 86                  e = 87
    def program(cfg):
        g = gemm(cfg, 0, 1, iters=(1, 20), dst=(0, 1), reset=1, pop_prev=1)
        return nop(cfg, "load", push_next=1) * 2 + g * 2 + finish(cfg)

    cfg = load_config("pynq", TOKEN_QUEUE_DEPTH=1, **HAND_TIMED)
    stats = Sim(cfg).run(program(cfg), trace=True)
    assert stats.trace == [("load", 34, 35), ("load", 38, 39), ("compute", 38, 62), ("compute", 62, 86),
                           ("compute", 86, 87)]
    assert stats.stalls["load"] == {**dict.fromkeys(stats.stalls["load"], 0), "dispatch": 34, "push_l2g": 3}
    assert stats.stalls["compute"]["dispatch"] == 38 and stats.stalls["compute"]["pop_l2g"] == 0
    # With the default depth 8 the second load only waits for its fetch (d = 36).
    deep = Sim(load_config("pynq", **HAND_TIMED)).run(program(load_config("pynq", **HAND_TIMED)), trace=True)
    assert deep.trace[1] == ("load", 36, 37)
    assert deep.stalls["load"]["dispatch"] == 35 and deep.stalls["load"]["push_l2g"] == 0


def test_stall_tie_breaks_pops_in_queue_order_then_dispatch(cfg):
    # Two pops bind at the same time: charged to l2g (queue order l2g, g2l, s2g, g2s).
    #   0 LOAD INP, 1 element with x_pad_0=2 (36 + 2 cycles) push l2g   load  [34, 72]
    #   1 STORE 1 element (36 cycles) push s2g                           store [36, 72]
    #   2 NOP pop l2g + pop s2g       compute s = max(0, d 38, l2g 72, s2g 72) = 72 -> pop_l2g 72
    sim = Sim(cfg)
    x_addr, out = sim.alloc(cfg.INP_ELEM_BYTES), sim.alloc(cfg.OUT_ELEM_BYTES)
    prog = load(cfg, "INP", 0, x_addr // cfg.INP_ELEM_BYTES, pad=(0, 0, 2, 0), push_next=1) \
        + store(cfg, 0, out // cfg.OUT_ELEM_BYTES, push_prev=1) + nop(cfg, "compute", pop_prev=1, pop_next=1) \
        + finish(cfg)
    stats = sim.run(prog, trace=True)
    assert stats.trace[:3] == [("load", 34, 72), ("store", 36, 72), ("compute", 72, 73)]
    assert stats.stalls["compute"]["pop_l2g"] == 72 and stats.stalls["compute"]["pop_s2g"] == 0

    # A pop and dispatch bind at the same time: charged to the pop.
    #   0 LOAD INP (36 cycles) push l2g   load [34, 70]
    #   1..17 compute NOPs: NOP i runs [34 + 2i, 35 + 2i], each waiting 1 cycle for fetch (the first 36)
    #   18 NOP pop l2g: d = 34 + 36 = 70 = l2g 70, free 69 -> 1 cycle charged to pop_l2g
    #   19 FINISH: d = 72, free 71 -> 1 cycle dispatch
    prog = [load(cfg, "INP", 0, x_addr // cfg.INP_ELEM_BYTES, push_next=1)]
    prog += [nop(cfg, "compute")] * 17 + [nop(cfg, "compute", pop_prev=1), finish(cfg)]
    stats = sim.run(b"".join(prog), trace=True)
    assert stats.trace[17] == ("compute", 68, 69) and stats.trace[18] == ("compute", 70, 71)
    assert stats.stalls["compute"]["pop_l2g"] == 1
    assert stats.stalls["compute"]["dispatch"] == 36 + 16 + 1


def test_event_order_ties_go_load_then_compute_then_store(cfg):
    cfg = cfg.replace(**HAND_TIMED)
    # 0 GEMM with no iterations: 4 cycles, [34, 38]. 1 GEMM reading inp[0]: s = max(38, 36) = 38.
    # 2 LOAD INP writing inp[0]: s = d(2) = 38. Tie at 38: the load executes first, so the GEMM sees new data.
    rng = np.random.default_rng(7)
    old, new = rng_int8(rng, (2, 1, cfg.BATCH, cfg.BLOCK_IN))
    w = rng_int8(rng, (1, cfg.BLOCK_OUT, cfg.BLOCK_IN))
    sim = Sim(cfg)
    addr = sim.alloc(new.nbytes)
    sim.write(addr, new)
    sim.write_sram("inp", 0, old)
    sim.write_sram("wgt", 0, w)
    sim.write_sram("uop", 0, uops(cfg, (0, 0, 0)))
    prog = gemm(cfg, 0, 0) + gemm(cfg, 0, 1) + load(cfg, "INP", 0, addr // cfg.INP_ELEM_BYTES) + finish(cfg)
    stats = sim.run(prog, trace=True)
    assert stats.trace[1][1] == stats.trace[2][1] == 38
    np.testing.assert_array_equal(sim.read_sram("acc", 0, 1)[0], new[0].astype(np.int64) @ w[0].astype(np.int64).T)
    # Compute before store: an ALU at 38 and a STORE at 38 on the same acc row; the store sees the ALU's result.
    sim = Sim(cfg)
    out = sim.alloc(cfg.OUT_ELEM_BYTES)
    sim.write_sram("acc", 0, np.full((1, cfg.BATCH, cfg.BLOCK_OUT), 41, dtype=np.int32))
    sim.write_sram("uop", 0, uops(cfg, (0, 0, 0)))
    prog = gemm(cfg, 0, 0) + alu(cfg, "ADD", 0, 1, imm=1) + store(cfg, 0, out // cfg.OUT_ELEM_BYTES) + finish(cfg)
    stats = sim.run(prog, trace=True)
    assert stats.trace[1][1] == stats.trace[2][1] == 38
    assert (sim.read(out, cfg.OUT_ELEM_BYTES) == 42).all()


def test_fetch_ceil_and_burst_gaps():
    # block32 (16-byte bus, DRAM_LATENCY 64): a WGT tile is 32*32 = 1024 B = 64 beats = 4 bursts:
    # 64 + 64 + 4*2 = 136 cycles, dispatched at 64 + 1 = 65. Two strided rows of one tile each:
    # 64 + 2*(64 + 4*2) = 208.
    cfg = load_config("block32")
    sim = Sim(cfg)
    addr = sim.alloc(3 * cfg.WGT_ELEM_BYTES)
    base = addr // cfg.WGT_ELEM_BYTES
    stats = sim.run(load(cfg, "WGT", 0, base) + load(cfg, "WGT", 1, base, y=2, x=1, stride=2) + finish(cfg),
                    trace=True)
    assert stats.trace[:2] == [("load", 65, 65 + 136), ("load", 201, 201 + 208)]


# ---- errors ----

def bad_opcode(opcode: int) -> bytes:
    return opcode.to_bytes(16, "little")


def static_cases(cfg, mapped_base: int):
    inp_depth = cfg.INP_BUFF_DEPTH
    unmapped = 0x7000_0000 // cfg.INP_ELEM_BYTES
    return [
        ("opcode 5", bad_opcode(5), InvalidInstruction, ("opcode", "5")),
        ("opcode 7", bad_opcode(7), InvalidInstruction, ("opcode", "7")),
        ("LOAD of OUT", load(cfg, "OUT"), InvalidInstruction, ("memory_type", "4")),
        ("LOAD type 6", encode(cfg, "mem", opcode=0, memory_type=6, x_size=1, y_size=1), InvalidInstruction,
         ("memory_type", "6")),
        ("STORE of ACC", store(cfg, mem="ACC"), InvalidInstruction, ("memory_type", "3")),
        ("load pop_prev", load(cfg, "INP", 0, mapped_base, pop_prev=1), InvalidInstruction, ("pop_prev",)),
        ("load push_prev", load(cfg, "WGT", 0, 0, push_prev=1), InvalidInstruction, ("push_prev",)),
        ("store pop_next", store(cfg, pop_next=1), InvalidInstruction, ("pop_next", "store")),
        ("store push_next", store(cfg, push_next=1), InvalidInstruction, ("push_next",)),
        ("NOP flags are checked", nop(cfg, "load", push_prev=1), InvalidInstruction, ("push_prev",)),
        ("y_size 0", load(cfg, "INP", 0, mapped_base, y=0, x=1), InvalidInstruction, ("y_size",)),
        ("store padding", store(cfg, 0, 0, pad=(0, 0, 1, 0)), InvalidInstruction, ("pad",)),
        ("SRAM range", load(cfg, "INP", inp_depth - 8, mapped_base, x=16), InvalidInstruction,
         (f"[{inp_depth - 8}, {inp_depth + 8})", f"{inp_depth}")),
        ("SRAM range with pads", load(cfg, "ACC", cfg.ACC_BUFF_DEPTH - 3, 0, y=1, x=2, pad=(1, 0, 0, 0)),
         InvalidInstruction, (f"{cfg.ACC_BUFF_DEPTH + 1})",)),
        ("STORE SRAM range", store(cfg, cfg.ACC_BUFF_DEPTH - 1, 0, x=2), InvalidInstruction,
         (f"{cfg.ACC_BUFF_DEPTH + 1})",)),
        ("UOP SRAM range", load(cfg, "UOP", cfg.UOP_BUFF_DEPTH, 0), InvalidInstruction,
         (f"{cfg.UOP_BUFF_DEPTH}",)),
        ("DRAM unmapped", load(cfg, "INP", 0, unmapped), MemoryAccessError, ("0x70000000",)),
        ("DRAM past region end", load(cfg, "INP", 0, mapped_base, y=2, x=1, stride=4096 // cfg.INP_ELEM_BYTES),
         MemoryAccessError, ("DRAM",)),
        ("uop_bgn > uop_end", gemm(cfg, 3, 2), InvalidInstruction, ("uop_bgn", "uop_end", "3", "2")),
        ("uop_end > depth", alu(cfg, "ADD", 0, cfg.UOP_BUFF_DEPTH + 1, imm=1), InvalidInstruction,
         ("uop_end", f"{cfg.UOP_BUFF_DEPTH + 1}", f"{cfg.UOP_BUFF_DEPTH}")),
        ("alu_opcode 5", encode(cfg, "alu", opcode=4, alu_opcode=5, uop_end=1, iter_out=1, iter_in=1),
         InvalidInstruction, ("alu_opcode", "5")),
    ]


def snapshot(sim: ReferenceSimulator):
    return [sim.read(b, n) for b, n in sim.regions()] + [sim.read_sram(m, 0, 64) for m in ("uop", "inp", "acc")]


def assert_usable(sim: ReferenceSimulator, cfg) -> None:
    stats = sim.run(nop(cfg, "load", push_next=1) + nop(cfg, "compute", pop_prev=1) + finish(cfg))
    assert stats.insns == {"load": 1, "compute": 2, "store": 0}


def test_static_errors_touch_nothing_and_name_the_instruction(cfg):
    sim = Sim(cfg)
    region = sim.alloc(4096)
    src = sim.alloc(4096)
    sim.write(src, np.full(4096, 3, dtype=np.uint8))
    sim.write(region, np.full(4096, 0x5A, dtype=np.uint8))
    sim.write_sram("acc", 0, np.full((1, cfg.BATCH, cfg.BLOCK_OUT), 77, dtype=np.int32))
    prefix = [load(cfg, "ACC", 1, src // cfg.ACC_ELEM_BYTES, x=2),  # would change SRAM
              store(cfg, 0, region // cfg.OUT_ELEM_BYTES)]            # would change DRAM
    for name, bad, cls, words in static_cases(cfg, region // cfg.INP_ELEM_BYTES):
        before = snapshot(sim)
        with pytest.raises(cls) as info:
            sim.run(b"".join(prefix) + bad + finish(cfg))
        assert info.type is cls, name
        assert info.value.index == 2, name
        assert str(info.value).startswith("instruction 2 ("), name
        assert all(w in str(info.value) for w in words), (name, str(info.value))
        for a, b in zip(before, snapshot(sim)):
            np.testing.assert_array_equal(a, b, err_msg=name)
        assert_usable(sim, cfg)


def test_nop_fields_other_than_flags_are_not_checked(cfg):
    sim = Sim(cfg)
    junk = encode(cfg, "mem", opcode=OPCODES["LOAD"], memory_type=MEM_TYPES["INP"], sram_base=65535,
                  dram_base=0xFFFFFFFF, y_size=0, x_size=0, y_pad_0=15, x_pad_1=15, push_next=1)
    junk_store = encode(cfg, "mem", opcode=OPCODES["STORE"], memory_type=MEM_TYPES["OUT"], x_pad_0=3, y_size=9)
    stats = sim.run(junk + junk_store + nop(cfg, "compute", pop_prev=1) + finish(cfg), trace=True)
    assert [e - s for _, s, e in stats.trace] == [1, 1, 1, 1]


def test_missing_finish_empty_and_malformed_streams(cfg):
    sim = Sim(cfg)
    with pytest.raises(InvalidInstruction) as info:
        sim.run(finish(cfg) + nop(cfg, "compute") + nop(cfg, "load"))
    assert info.value.index == 2 and "FINISH" in str(info.value)
    with pytest.raises(InvalidInstruction) as info:
        sim.run(b"")
    assert info.value.index is None
    with pytest.raises(SimulatorError):
        sim.run(finish(cfg)[:15])
    with pytest.raises(SimulatorError):
        sim.run(np.zeros((1, 4), dtype=np.int32))
    # (N, 16) and flat uint8 arrays are both accepted
    prog = np.frombuffer(nop(cfg, "load") + finish(cfg), dtype=np.uint8)
    assert sim.run(prog.reshape(2, 16)).insns == sim.run(prog).insns == {"load": 1, "compute": 1, "store": 0}
    assert_usable(sim, cfg)


def test_index_checks_follow_micro_op_writes(cfg):
    """The simulator keeps the largest index fields of micro-op ranges it has checked; a micro-op written since,
    through the API or by a LOAD, is what the next check sees (the same instruction, in range before, fails)."""
    sim = Sim(cfg)
    prog = gemm(cfg, 0, 2, iters=(2, 1), dst=(1, 0)) + finish(cfg)
    sim.write_sram("uop", 0, uops(cfg, (0, 0, 0), (1, 1, 1)))
    sim.run(prog)
    sim.write_sram("uop", 1, uops(cfg, (cfg.ACC_BUFF_DEPTH - 1, 1, 1)))
    with pytest.raises(InvalidInstruction, match="micro-op 1 reaches accumulator index"):
        sim.run(prog)
    sim.write_sram("uop", 0, uops(cfg, (0, 0, 0), (1, 1, 1)))
    sim.run(prog)
    addr = sim.alloc(4 * 2)
    sim.write(addr, uops(cfg, (cfg.ACC_BUFF_DEPTH - 1, 0, 0), (1, 1, 1)).view(np.uint8))
    with pytest.raises(InvalidInstruction, match="micro-op 0 reaches accumulator index"):
        sim.run(load(cfg, "UOP", 0, addr // 4, 1, 2) + prog)
    assert_usable(sim, cfg)


def test_micro_op_out_of_range_is_caught_before_writing(cfg):
    sim = Sim(cfg)
    depth = cfg.ACC_BUFF_DEPTH
    out = sim.alloc(4096)
    sim.write_sram("acc", 0, np.full((2, cfg.BATCH, cfg.BLOCK_OUT), 5, dtype=np.int32))
    sim.write_sram("uop", 0, uops(cfg, (0, 0, 0), (depth - 1, 0, 0), (0, cfg.INP_BUFF_DEPTH - 1, 0),
                                  (0, 0, cfg.WGT_BUFF_DEPTH - 2)))
    cases = [
        # reset GEMM: micro-op 0 is fine and would zero acc[0..1] if it ran first; micro-op 1 reaches depth.
        (gemm(cfg, 0, 2, iters=(1, 2), dst=(0, 1), reset=1), "micro-op 1 reaches accumulator index"),
        (gemm(cfg, 2, 3, iters=(2, 1), src=(1, 0)), "reaches input index"),
        (gemm(cfg, 3, 4, iters=(1, 3), wgt=(0, 1)), "reaches weight index"),
        (alu(cfg, "ADD", 2, 3, iters=(1, 2), src=(0, 1)), "micro-op 2 reaches accumulator index 2048"),
    ]
    for bad, text in cases:
        prog = store(cfg, 0, out // cfg.OUT_ELEM_BYTES, push_prev=1) + nop(cfg, "compute", pop_next=1) + bad \
            + finish(cfg)
        with pytest.raises(InvalidInstruction) as info:
            sim.run(prog)
        assert info.value.index == 2 and text in str(info.value), str(info.value)
        assert (sim.read_sram("acc", 0, 2) == 5).all()
        # Dynamic: the STORE before it did execute.
        assert (sim.read(out, cfg.OUT_ELEM_BYTES) == 5).all()
        sim.write(out, bytes(cfg.OUT_ELEM_BYTES))
    # Not errors: a reset GEMM does not check src/wgt; an immediate ALU does not check src.
    ok = gemm(cfg, 2, 4, iters=(1, 3), src=(0, 1), wgt=(0, 1), reset=1) \
        + alu(cfg, "ADD", 0, 1, src=(0, 0), iters=(1, 1), imm=1) + finish(cfg)
    sim.write_sram("uop", 2, uops(cfg, (0, cfg.INP_BUFF_DEPTH - 1, cfg.WGT_BUFF_DEPTH - 1)))
    sim.run(ok)
    # Timing-only runs raise the same error (micro-ops still load and drive the checks).
    with pytest.raises(InvalidInstruction) as info:
        sim.run(cases[0][0] + finish(cfg), compute=False)
    assert info.value.index == 0
    assert_usable(sim, cfg)


def test_deadlock_pop_never_satisfied(cfg):
    sim = Sim(cfg)
    with pytest.raises(DeadlockError) as info:
        sim.run(nop(cfg, "load") + gemm(cfg, 0, 0, pop_prev=1) + finish(cfg))
    assert info.value.index == 1
    assert "compute at instruction 1 (GEMM) waits for a token on l2g that is never pushed" in str(info.value)
    assert_usable(sim, cfg)


def test_deadlock_full_token_queue():
    # TOKEN_QUEUE_DEPTH = 1: three pushes onto l2g but one pop; the third push never gets room.
    cfg = load_config("pynq", TOKEN_QUEUE_DEPTH=1)
    sim = Sim(cfg)
    prog = nop(cfg, "load", push_next=1) * 3 + nop(cfg, "compute", pop_prev=1) + finish(cfg)
    with pytest.raises(DeadlockError) as info:
        sim.run(prog)
    assert info.value.index == 2
    assert "load at instruction 2" in str(info.value) and "room on l2g" in str(info.value)
    assert "compute" not in str(info.value).split("deadlock:")[1]  # compute finished: not stuck
    assert_usable(sim, cfg)


def test_deadlock_lists_every_stuck_module(cfg):
    # compute waits for store (s2g) and store waits for compute (g2s): a cycle.
    sim = Sim(cfg)
    with pytest.raises(DeadlockError) as info:
        sim.run(nop(cfg, "store", pop_prev=1, push_prev=1) + nop(cfg, "compute", pop_next=1, push_next=1)
                + finish(cfg))
    msg = str(info.value)
    assert info.value.index == 0
    assert "compute at instruction 1" in msg and "token on s2g" in msg
    assert "store at instruction 0" in msg and "token on g2s" in msg


def test_deadlock_by_a_command_queue_that_never_drains():
    # INSN_QUEUE_DEPTH = 1: compute's first instruction waits for a token from the load NOP, which cannot be
    # fetched because the second compute instruction cannot enter compute's full command queue.
    cfg = load_config("pynq", INSN_QUEUE_DEPTH=1)
    sim = Sim(cfg)
    with pytest.raises(DeadlockError) as info:
        sim.run(nop(cfg, "compute", pop_prev=1) + nop(cfg, "compute") + nop(cfg, "load", push_next=1) + finish(cfg))
    msg = str(info.value)
    assert info.value.index == 0
    assert "compute at instruction 0" in msg and "load at instruction 2" in msg
    assert "fetch" in msg and "instruction 1 " in msg


def test_cycle_budget(cfg):
    cfg = cfg.replace(**HAND_TIMED)
    sim = Sim(cfg)
    x_base, out_base, out_addr, _ = tile_setup(cfg, sim)
    prog = b"".join([
        load(cfg, "INP", 0, x_base, push_next=1),
        gemm(cfg, 0, 1, pop_prev=1, push_next=1),
        store(cfg, 0, out_base, pop_prev=1, push_prev=1),
        finish(cfg, pop_next=1),
    ])
    # load [34, 70], GEMM [70, 75], STORE [75, 111], FINISH [111, 112]: the STORE is the first past 100.
    with pytest.raises(CycleBudgetExceeded) as info:
        sim.run(prog, max_cycles=100)
    assert info.value.index == 2 and "max_cycles=100" in str(info.value)
    assert not sim.read(out_addr, cfg.OUT_ELEM_BYTES).any()  # the STORE never executed
    assert sim.run(prog, max_cycles=112).cycles == 112  # ending exactly on the budget is fine
    with pytest.raises(SimulatorError):
        sim.run(prog, max_cycles=0)
