"""Property tests of single instructions on the C simulator against numpy models of docs/simulator.md.

Each example runs ``[INSN, FINISH]`` on a simulator whose SRAMs and DRAM were filled with random data, then
compares the SRAM (``read_sram``) or DRAM (``read``) it touched with a model written here from the spec's
index arithmetic, together with VTA's counters and the timing model's start/end times for such a program.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from programs import wrap32

from hw_config import ALU_OPCODES, MEM_TYPES, HwConfig, load_config
from simulator.core import Simulator
from simulator.errors import InvalidInstruction, MemoryAccessError
from simulator.stats import MODULES, STALL_CAUSES, VTA_COUNTERS, RunStats
from vta.isa import AluInsn, FinishInsn, GemmInsn, Insn, MemInsn, Uop, assemble, encode_uop

SETTINGS = {"deadline": None, "derandomize": True, "suppress_health_check": [HealthCheck.too_slow]}
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
EXTREMES = np.array([INT32_MIN, INT32_MIN + 1, -(1 << 16), -2, -1, 0, 1, 2, 1 << 16, INT32_MAX - 1, INT32_MAX],
                    dtype=np.int64)
REGION = 1 << 24  # where examples map their exact-size DRAM region (aligned to every element size)

_SIMULATORS: dict[str, Simulator] = {}


def simulator(preset: str) -> Simulator:
    """One simulator per preset, reused by every example (each example sets up the state it reads)."""
    if preset not in _SIMULATORS:
        _SIMULATORS[preset] = Simulator(load_config(preset))
    sim = _SIMULATORS[preset]
    assert sim.regions() == [], "a previous example left DRAM mapped"
    return sim


def int32_data(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random int32 lanes, a quarter of them taken from the extremes (wrap-around cases)."""
    full = rng.integers(INT32_MIN, INT32_MAX, shape, endpoint=True)
    special = rng.choice(EXTREMES, shape)
    return np.where(rng.random(shape) < 0.25, special, full).astype(np.int32)


# ---------------------------------------------------------------------------------------------------------
# the timing of [INSN, FINISH] (docs/simulator.md, "Timing model") and the run check shared by all tests

def module_of(insn: Insn) -> str:
    if isinstance(insn, MemInsn):
        if insn.opcode == 1:
            return "store"
        return "load" if insn.memory_type in (MEM_TYPES["INP"], MEM_TYPES["WGT"]) else "compute"
    return "compute"


def duration(cfg: HwConfig, insn: Insn) -> int:
    if isinstance(insn, (GemmInsn, AluInsn)):
        n = insn.iter_out * insn.iter_in * (insn.uop_end - insn.uop_bgn)
        ii = cfg.GEMM_II if isinstance(insn, GemmInsn) else cfg.ALU_II
        return max(1, cfg.COMPUTE_LATENCY + n * ii)
    if isinstance(insn, FinishInsn) or insn.x_size == 0:
        return 1
    e = cfg.elem_bytes(insn.memory_type)
    one_row = insn.y_size == 1 or insn.x_stride == insn.x_size
    rows = 1 if one_row else insn.y_size
    row_bytes = insn.x_size * e * (insn.y_size if one_row else 1)
    beats = math.ceil(row_bytes / cfg.BUS_BYTES)
    bursts = math.ceil(beats / cfg.DMA_BURST_BEATS)
    cycles = cfg.DRAM_LATENCY + rows * (beats + bursts * cfg.DMA_BURST_GAP)
    if insn.opcode == 0:  # a LOAD spends one cycle per padded element
        xt = insn.x_pad_0 + insn.x_size + insn.x_pad_1
        yt = insn.y_pad_0 + insn.y_size + insn.y_pad_1
        cycles += xt * yt - insn.x_size * insn.y_size
    return cycles


def check_timing(cfg: HwConfig, insn: Insn, stats: RunStats) -> None:
    """[insn, FINISH] has no tokens: each starts when dispatched and its module is free."""
    fetch = math.ceil(16 / cfg.BUS_BYTES)
    free = dict.fromkeys(MODULES, 0)
    stalls = {m: dict.fromkeys(STALL_CAUSES, 0) for m in MODULES}
    expect = []
    for k, item in enumerate((insn, FinishInsn())):
        m = module_of(item)
        dispatched = cfg.DRAM_LATENCY + (k + 1) * fetch
        start = max(free[m], dispatched)
        stalls[m]["dispatch"] += start - free[m]
        free[m] = start + duration(cfg, item)
        expect.append((m, start, free[m]))
    assert stats.trace == expect
    assert stats.cycles == max(e for _, _, e in expect)
    assert stats.finish_cycle == expect[1][2]
    assert stats.stalls == stalls
    assert stats.busy == {m: sum(e - s for mm, s, e in expect if mm == m) for m in MODULES}


def run_one(sim: Simulator, insn: Insn, compute: bool = True) -> RunStats:
    stats = sim.run(assemble([insn, FinishInsn()], sim.cfg), compute=compute, trace=True)
    check_timing(sim.cfg, insn, stats)
    return stats


def run_or_fault(sim, cfg, insn, t):
    """Run one instruction; with an injected fault, check the error names instruction 0 and return None."""
    if not t.fault:
        return run_one(sim, insn, t.compute)
    error = MemoryAccessError if t.fault == "dram" else InvalidInstruction
    with pytest.raises(error, match=r"instruction 0\b") as info:
        sim.run(assemble([insn, FinishInsn()], cfg), compute=t.compute)
    assert info.value.index == 0
    return None


def only(**nonzero: int) -> dict[str, int]:
    return {k: nonzero.get(k, 0) for k in VTA_COUNTERS}


# ---------------------------------------------------------------------------------------------------------
# LOAD

# memory type -> (SRAM it loads, dtype of its DRAM lanes)
LOAD_KINDS = {"INP": ("inp", np.int8), "WGT": ("wgt", np.int8), "ACC": ("acc", np.int32),
              "ACC_8BIT": ("acc", np.int8), "UOP": ("uop", np.uint32)}


def sram_shape(cfg: HwConfig, sram: str) -> tuple[int, ...]:
    return {"inp": (cfg.BATCH, cfg.BLOCK_IN), "wgt": (cfg.BLOCK_OUT, cfg.BLOCK_IN),
            "acc": (cfg.BATCH, cfg.BLOCK_OUT), "uop": ()}[sram]


def sram_depth(cfg: HwConfig, sram: str) -> int:
    return {"inp": cfg.INP_BUFF_DEPTH, "wgt": cfg.WGT_BUFF_DEPTH, "acc": cfg.ACC_BUFF_DEPTH,
            "uop": cfg.UOP_BUFF_DEPTH}[sram]


def random_sram(rng: np.random.Generator, cfg: HwConfig, sram: str, count: int) -> np.ndarray:
    shape = (count, *sram_shape(cfg, sram))
    if sram == "acc":
        return int32_data(rng, shape)
    if sram == "uop":
        return rng.integers(0, 1 << 32, shape, dtype=np.uint64).astype(np.uint32)
    return rng.integers(-128, 128, shape).astype(np.int8)


@dataclass
class Tile:
    """A 2D DMA: sizes, stride, pads, SRAM base, element offset in its region, and an injected fault."""

    y: int
    x: int
    stride: int
    pads: tuple[int, int, int, int]
    offset: int
    sram_base: int
    fault: str | None  # None, "dram" (region one byte short) or "sram" (one entry past the buffer)
    compute: bool
    seed: int

    @property
    def total(self) -> int:
        y0, y1, x0, x1 = self.pads
        return (y0 + self.y + y1) * (x0 + self.x + x1)

    @property
    def dram_elems(self) -> int:
        return self.offset + (self.y - 1) * self.stride + self.x


@st.composite
def tiles(draw: st.DrawFn, depth: int, padded: bool) -> Tile:
    y = draw(st.integers(1, 4))
    x = draw(st.integers(1, 5))
    stride = draw(st.one_of(st.just(x), st.integers(0, x + 3)))
    pad = st.one_of(st.integers(0, 3), st.just(15)) if padded else st.just(0)
    pads = (draw(pad), draw(pad), draw(pad), draw(pad))
    y0, y1, x0, x1 = pads
    total = (y0 + y + y1) * (x0 + x + x1)
    assume(total <= depth)
    fault = draw(st.sampled_from([None, None, None, None, "dram", "sram"]))
    if fault == "sram":
        base = depth - total + 1
    else:
        base = draw(st.one_of(st.integers(0, depth - total), st.just(depth - total)))
    return Tile(y, x, stride, pads, draw(st.integers(0, 3)), base, fault, draw(st.booleans()),
                draw(st.integers(0, 2**32 - 1)))


def model_load(cfg: HwConfig, mem: str, t: Tile, dram: np.ndarray, before: np.ndarray) -> np.ndarray:
    """SRAM entries [sram_base, sram_base + total) after the LOAD (``before``: the same entries before)."""
    sram, lane = LOAD_KINDS[mem]
    elems = dram.view(lane).reshape(-1, *sram_shape(cfg, sram))
    after = before.copy()
    y0, y1, x0, x1 = t.pads
    xt, yt = x0 + t.x + x1, y0 + t.y + y1
    for yy in range(yt):
        for xx in range(xt):
            inside = y0 <= yy < y0 + t.y and x0 <= xx < x0 + t.x
            value = elems[t.offset + (yy - y0) * t.stride + (xx - x0)] if inside else 0
            after[yy * xt + xx] = value  # int8 DRAM lanes of ACC_8BIT sign-extend into int32
    return after


def mem_insn(cfg: HwConfig, opcode: int, mem: str, t: Tile) -> MemInsn:
    y0, y1, x0, x1 = t.pads
    return MemInsn(opcode=opcode, memory_type=MEM_TYPES[mem], sram_base=t.sram_base,
                   dram_base=REGION // cfg.elem_bytes(mem) + t.offset, y_size=t.y, x_size=t.x, x_stride=t.stride,
                   y_pad_0=y0, y_pad_1=y1, x_pad_0=x0, x_pad_1=x1)


@pytest.mark.parametrize("mem", list(LOAD_KINDS))
@pytest.mark.parametrize("preset", ["pynq", "batch4"])
@settings(max_examples=50, **SETTINGS)
@given(data=st.data())
def test_load(preset: str, mem: str, data: st.DataObject):
    sim = simulator(preset)
    cfg = sim.cfg
    sram, _ = LOAD_KINDS[mem]
    depth = sram_depth(cfg, sram)
    t = data.draw(tiles(depth, padded=True))
    rng = np.random.default_rng(t.seed)
    e = cfg.elem_bytes(mem)
    dram = rng.integers(0, 256, t.dram_elems * e, dtype=np.uint8)
    # the target entries plus two neighbours on each side, which must keep their contents
    lo, hi = max(0, t.sram_base - 2), min(depth, t.sram_base + t.total + 2)
    before = random_sram(rng, cfg, sram, hi - lo)
    sim.write_sram(sram, lo, before)
    insn = mem_insn(cfg, 0, mem, t)
    region = dram[:-1] if t.fault == "dram" else dram
    sim.map(REGION, region)
    try:
        stats = run_or_fault(sim, cfg, insn, t)
        if stats is None:
            expect = before
        else:
            counted = cfg.ACC_ELEM_BYTES if mem == "ACC_8BIT" else e
            key = {"ACC_8BIT": "acc"}.get(mem, mem.lower())
            assert stats.vta_counters() == only(**{f"{key}_load_nbytes": t.x * t.y * counted})
            expect = before.copy()
            first = t.sram_base - lo
            if t.compute or mem == "UOP":  # micro-op loads run even in timing-only runs
                expect[first:first + t.total] = model_load(cfg, mem, t, dram, before[first:first + t.total])
        np.testing.assert_array_equal(sim.read_sram(sram, lo, hi - lo), expect)
        assert sim.read(REGION, region.size).tobytes() == region.tobytes()  # LOAD only reads DRAM
    finally:
        sim.free(REGION)


@pytest.mark.parametrize("preset", ["pynq", "batch4"])
@settings(max_examples=40, **SETTINGS)
@given(data=st.data())
def test_nop_ignores_every_other_field(preset: str, data: st.DataObject):
    """x_size == 0: a NOP whatever its other fields say (nothing mapped, out-of-range bases, store pads)."""
    sim = simulator(preset)
    mem = data.draw(st.sampled_from([*LOAD_KINDS, "OUT"]))
    field = st.integers(0, (1 << 16) - 1)
    pad = st.integers(0, 15)
    insn = MemInsn(opcode=1 if mem == "OUT" else 0, memory_type=MEM_TYPES[mem], sram_base=data.draw(field),
                   dram_base=data.draw(st.integers(0, (1 << 32) - 1)), y_size=data.draw(field), x_size=0,
                   x_stride=data.draw(field), y_pad_0=data.draw(pad), y_pad_1=data.draw(pad),
                   x_pad_0=data.draw(pad), x_pad_1=data.draw(pad))
    before = {m: sim.read_sram(m, 0, 8) for m in ("uop", "inp", "wgt", "acc")}
    stats = run_one(sim, insn, data.draw(st.booleans()))
    assert stats.vta_counters() == only()
    for m, value in before.items():
        np.testing.assert_array_equal(sim.read_sram(m, 0, 8), value)


# ---------------------------------------------------------------------------------------------------------
# STORE

def model_store(cfg: HwConfig, t: Tile, acc: np.ndarray, dram: np.ndarray) -> np.ndarray:
    """DRAM bytes after the STORE: OUT element offset + y*stride + x = low 8 bits of acc[y*x_size + x]."""
    e = cfg.OUT_ELEM_BYTES
    out = dram.copy()
    for yy in range(t.y):
        for xx in range(t.x):
            lanes = acc[yy * t.x + xx].reshape(-1).astype(np.int64) & 0xFF
            at = (t.offset + yy * t.stride + xx) * e
            out[at:at + e] = lanes.astype(np.uint8)
    return out


@pytest.mark.parametrize("preset", ["pynq", "batch4"])
@settings(max_examples=80, **SETTINGS)
@given(data=st.data())
def test_store(preset: str, data: st.DataObject):
    sim = simulator(preset)
    cfg = sim.cfg
    t = data.draw(tiles(cfg.ACC_BUFF_DEPTH, padded=False))
    rng = np.random.default_rng(t.seed)
    dram = rng.integers(0, 256, t.dram_elems * cfg.OUT_ELEM_BYTES, dtype=np.uint8)
    count = min(t.total, cfg.ACC_BUFF_DEPTH - t.sram_base)
    acc = random_sram(rng, cfg, "acc", count)
    sim.write_sram("acc", t.sram_base, acc)
    insn = mem_insn(cfg, 1, "OUT", t)
    region = dram[:-1] if t.fault == "dram" else dram
    sim.map(REGION, region)
    try:
        stats = run_or_fault(sim, cfg, insn, t)
        if stats is None:
            expect = region
        else:
            assert stats.vta_counters() == only(out_store_nbytes=t.x * t.y * cfg.OUT_ELEM_BYTES)
            expect = model_store(cfg, t, acc, dram) if t.compute else dram
        assert sim.read(REGION, region.size).tobytes() == expect.tobytes()
        np.testing.assert_array_equal(sim.read_sram("acc", t.sram_base, count), acc)  # STORE only reads
    finally:
        sim.free(REGION)


# ---------------------------------------------------------------------------------------------------------
# GEMM and ALU

WINDOW = {"acc": 40, "inp": 24, "wgt": 20}  # SRAM entries an example uses, at the start or end of the buffer


@dataclass
class Loops:
    """Micro-ops at [bgn, bgn + len(uops)) and the two affine loops of a GEMM or ALU instruction."""

    uops: list[Uop]
    bgn: int
    iter_out: int
    iter_in: int
    dst: tuple[int, int]
    src: tuple[int, int]
    wgt: tuple[int, int]
    base: dict[str, int]  # first SRAM entry of each window

    def indices(self):
        """(dst, src, wgt) SRAM indices in execution order (docs/simulator.md)."""
        for i in range(self.iter_out):
            for j in range(self.iter_in):
                for u in self.uops:
                    yield (u.dst_idx + i * self.dst[0] + j * self.dst[1],
                           u.src_idx + i * self.src[0] + j * self.src[1],
                           u.wgt_idx + i * self.wgt[0] + j * self.wgt[1])

    @property
    def iterations(self) -> int:
        return self.iter_out * self.iter_in * len(self.uops)


@st.composite
def loops(draw: st.DrawFn, cfg: HwConfig, src_sram: str, same_src: bool = False) -> Loops:
    """Random loops whose every index stays inside the windows (placed at index 0 or at the buffer's end)."""
    iter_out, iter_in = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    factor = st.integers(0, 4)
    dst = (draw(factor), draw(factor))
    src = dst if same_src else (draw(factor), draw(factor))
    wgt = (draw(factor), draw(factor))
    at_end = draw(st.booleans())
    base = {m: sram_depth(cfg, m) - w if at_end else 0 for m, w in WINDOW.items()}

    def first(window: str, factors: tuple[int, int]) -> st.SearchStrategy[int]:
        reach = max(iter_out - 1, 0) * factors[0] + max(iter_in - 1, 0) * factors[1]
        return st.integers(base[window], base[window] + WINDOW[window] - 1 - reach)

    uops = []
    for _ in range(draw(st.integers(0, 4))):
        d = draw(first("acc", dst))
        s = d if same_src else draw(first(src_sram, src))
        uops.append(Uop(dst_idx=d, src_idx=s, wgt_idx=draw(first("wgt", wgt))))
    last = min(cfg.UOP_BUFF_DEPTH - len(uops), cfg.UOP_BUFF_DEPTH - 1)  # uop_bgn has LOG_UOP_DEPTH bits
    bgn = draw(st.one_of(st.just(0), st.integers(0, last), st.just(last)))
    return Loops(uops, bgn, iter_out, iter_in, dst, src, wgt, base)


def put_uops(sim: Simulator, lp: Loops) -> None:
    if lp.uops:
        sim.write_sram("uop", lp.bgn, np.array([encode_uop(u, sim.cfg) for u in lp.uops], dtype=np.uint32))


def loop_fields(lp: Loops) -> dict[str, int]:
    return {"uop_bgn": lp.bgn, "uop_end": lp.bgn + len(lp.uops), "iter_out": lp.iter_out, "iter_in": lp.iter_in,
            "dst_factor_out": lp.dst[0], "dst_factor_in": lp.dst[1], "src_factor_out": lp.src[0],
            "src_factor_in": lp.src[1]}


def fill_windows(sim: Simulator, lp: Loops, rng: np.random.Generator, names: tuple[str, ...]) -> dict:
    state = {}
    for m in names:
        state[m] = random_sram(rng, sim.cfg, m, WINDOW[m])
        sim.write_sram(m, lp.base[m], state[m])
    return state


def model_gemm(lp: Loops, reset: bool, state: dict[str, np.ndarray]) -> np.ndarray:
    acc = state["acc"].astype(np.int64)
    inp, wgt = state["inp"].astype(np.int64), state["wgt"].astype(np.int64)
    b = lp.base
    for d, s, w in lp.indices():
        if reset:
            acc[d - b["acc"]] = 0
        else:
            acc[d - b["acc"]] = wrap32(acc[d - b["acc"]] + inp[s - b["inp"]] @ wgt[w - b["wgt"]].T)
    return acc.astype(np.int32)


@pytest.mark.parametrize("preset", ["pynq", "batch4", "block32"])
@settings(max_examples=80, **SETTINGS)
@given(data=st.data())
def test_gemm(preset: str, data: st.DataObject):
    sim = simulator(preset)
    cfg = sim.cfg
    lp = data.draw(loops(cfg, "inp"))
    reset, compute = data.draw(st.booleans()), data.draw(st.booleans())
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    state = fill_windows(sim, lp, rng, ("acc", "inp", "wgt"))
    put_uops(sim, lp)
    insn = GemmInsn(reset_reg=int(reset), wgt_factor_out=lp.wgt[0], wgt_factor_in=lp.wgt[1], **loop_fields(lp))
    stats = run_one(sim, insn, compute)
    assert stats.vta_counters() == only(gemm_counter=0 if reset else lp.iterations)
    expect = model_gemm(lp, reset, state) if compute else state["acc"]
    np.testing.assert_array_equal(sim.read_sram("acc", lp.base["acc"], WINDOW["acc"]), expect)
    for m in ("inp", "wgt"):  # GEMM only reads them
        np.testing.assert_array_equal(sim.read_sram(m, lp.base[m], WINDOW[m]), state[m])


def alu_op(op: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One ALU op on int64 copies of int32 lanes (docs/simulator.md, "ALU")."""
    if op == ALU_OPCODES["MIN"]:
        return np.minimum(a, b)
    if op == ALU_OPCODES["MAX"]:
        return np.maximum(a, b)
    if op == ALU_OPCODES["ADD"]:
        return wrap32(a + b).astype(np.int64)
    if op == ALU_OPCODES["MUL"]:
        return wrap32(a * b).astype(np.int64)
    right = a >> np.clip(b, 0, 31)                     # arithmetic shift, amount clamped to 31
    left = wrap32(a << np.clip(-b, 0, 31)).astype(np.int64)
    return np.where(b >= 0, right, left)


def model_alu(lp: Loops, op: int, imm: int | None, acc0: np.ndarray) -> np.ndarray:
    acc = acc0.astype(np.int64)
    base = lp.base["acc"]
    for d, s, _ in lp.indices():
        b = np.full_like(acc[0], imm) if imm is not None else acc[s - base].copy()  # read before the write
        acc[d - base] = alu_op(op, acc[d - base], b)
    return acc.astype(np.int32)


IMMEDIATES = st.one_of(st.integers(-(1 << 15), (1 << 15) - 1),
                       st.sampled_from([-(1 << 15), -33, -32, -31, -1, 0, 1, 31, 32, 33, (1 << 15) - 1]))


@pytest.mark.parametrize("op", list(ALU_OPCODES))
@pytest.mark.parametrize("preset", ["pynq", "batch4"])
@settings(max_examples=50, **SETTINGS)
@given(data=st.data())
def test_alu(preset: str, op: str, data: st.DataObject):
    sim = simulator(preset)
    cfg = sim.cfg
    same_src = data.draw(st.booleans())  # src == dst, index for index
    lp = data.draw(loops(cfg, "acc", same_src=same_src))
    imm = data.draw(st.one_of(st.none(), IMMEDIATES))
    compute = data.draw(st.booleans())
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    state = fill_windows(sim, lp, rng, ("acc",))
    put_uops(sim, lp)
    insn = AluInsn(reset_reg=data.draw(st.integers(0, 1)), alu_opcode=ALU_OPCODES[op], use_imm=int(imm is not None),
                   imm=imm or 0, **loop_fields(lp))
    stats = run_one(sim, insn, compute)
    assert stats.vta_counters() == only(alu_counter=lp.iterations)
    expect = model_alu(lp, ALU_OPCODES[op], imm, state["acc"]) if compute else state["acc"]
    np.testing.assert_array_equal(sim.read_sram("acc", lp.base["acc"], WINDOW["acc"]), expect)


# ---------------------------------------------------------------------------------------------------------
# micro-op indices past a buffer: refused before anything is written, except where the spec skips the check

@pytest.mark.parametrize("preset", ["pynq", "batch4", "block32"])
@settings(max_examples=40, **SETTINGS)
@given(data=st.data())
def test_index_past_the_buffer(preset: str, data: st.DataObject):
    sim = simulator(preset)
    cfg = sim.cfg
    kind = data.draw(st.sampled_from(["gemm", "alu"]))
    field = data.draw(st.sampled_from(["dst", "src", "wgt"] if kind == "gemm" else ["dst", "src"]))
    flag = data.draw(st.booleans())  # GEMM: reset_reg, ALU: use_imm
    outer = data.draw(st.booleans())  # reach past the end through the outer or the inner loop
    factor = data.draw(st.integers(1, 4))
    depth = {"dst": cfg.ACC_BUFF_DEPTH, "src": cfg.INP_BUFF_DEPTH if kind == "gemm" else cfg.ACC_BUFF_DEPTH,
             "wgt": cfg.WGT_BUFF_DEPTH}[field]
    idx = {"dst": 0, "src": 0, "wgt": 0, field: depth - factor}  # the second iteration reaches index == depth
    sim.write_sram("uop", 0, np.array([encode_uop(Uop(idx["dst"], idx["src"], idx["wgt"]), cfg)], dtype=np.uint32))
    fields = {"uop_bgn": 0, "uop_end": 1, "iter_out": 2 if outer else 1, "iter_in": 1 if outer else 2,
              f"{field}_factor_{'out' if outer else 'in'}": factor}
    if kind == "gemm":
        insn: Insn = GemmInsn(reset_reg=int(flag), **fields)
        checked = field == "dst" or not flag  # a reset GEMM checks dst only
    else:
        insn = AluInsn(alu_opcode=ALU_OPCODES["ADD"], use_imm=int(flag), imm=1, **fields)
        checked = field == "dst" or not flag  # with an immediate the ALU reads no src
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    acc = random_sram(rng, cfg, "acc", 4)
    sim.write_sram("acc", 0, acc)
    if checked:
        with pytest.raises(InvalidInstruction, match=r"instruction 0\b.*micro-op 0") as info:
            sim.run(assemble([insn, FinishInsn()], cfg))
        assert info.value.index == 0
        np.testing.assert_array_equal(sim.read_sram("acc", 0, 4), acc)  # nothing written
    else:
        stats = run_one(sim, insn, True)
        assert stats.vta_counters() == only(**({"alu_counter": 2} if kind == "alu" else {}))
