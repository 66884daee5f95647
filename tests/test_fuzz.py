"""Differential fuzzing: >= 10,000 random instruction streams on the C simulator and the reference executor.

Each stream either completes on both with identical DRAM, SRAMs, counters, cycles and per-instruction
trace, or fails on both with the same exception class and instruction index. Half the streams draw
dependency flags at random (deadlocks, bad flags), half keep pops balanced by earlier pushes so that
most run to completion. Streams mix valid and out-of-range fields, garbage words and missing FINISH.
"""

from __future__ import annotations

import numpy as np
import pytest

from hw_config import MEM_TYPES, load_config
from simulator import Simulator, SimulatorError
from simulator.reference import ReferenceSimulator
from vta.isa import AluInsn, FinishInsn, GemmInsn, MemInsn, encode, module_of

DRAM_BASE, DRAM_BYTES = 0x10000, 0x10000
UOP_BASE, UOP_WORDS = 0x30000, 64
STREAMS_PER_CONFIG = 2000
CONFIGS = {
    "pynq": load_config("pynq"),
    "pynq-tight-queues": load_config("pynq", TOKEN_QUEUE_DEPTH=1, INSN_QUEUE_DEPTH=2),
    "batch4": load_config("batch4"),
    "block32": load_config("block32"),
    "ultra96": load_config("ultra96"),
}
QUEUE_OF_FLAG = {  # (module, flag) -> (queue, is_pop); flags absent here are invalid on that module
    ("load", "pop_next_dep"): ("g2l", True), ("load", "push_next_dep"): ("l2g", False),
    ("compute", "pop_prev_dep"): ("l2g", True), ("compute", "pop_next_dep"): ("s2g", True),
    ("compute", "push_prev_dep"): ("g2l", False), ("compute", "push_next_dep"): ("g2s", False),
    ("store", "pop_prev_dep"): ("g2s", True), ("store", "push_prev_dep"): ("s2g", False),
}
FLAGS = ("pop_prev_dep", "pop_next_dep", "push_prev_dep", "push_next_dep")


def _small(rng: np.random.Generator, hi: int) -> int:
    return int(rng.integers(0, hi))


def _random_insn(cfg, rng: np.random.Generator):
    kind = rng.choice(["INP", "WGT", "UOP", "ACC", "ACC_8BIT", "STORE", "GEMM", "ALU", "NOP", "FINISH"],
                      p=[.11, .08, .08, .08, .04, .12, .17, .17, .12, .03])
    if kind == "FINISH":
        return FinishInsn()
    if kind == "NOP":
        which = rng.choice(["INP", "UOP", "STORE"])
        return MemInsn(opcode=1, memory_type=MEM_TYPES["OUT"]) if which == "STORE" else \
            MemInsn(memory_type=MEM_TYPES[which])
    if kind in ("GEMM", "ALU"):
        bgn = _small(rng, 30)
        common = {"uop_bgn": bgn, "uop_end": bgn + _small(rng, 3), "iter_out": _small(rng, 3), "iter_in": _small(rng, 4),
                      "dst_factor_out": _small(rng, 4), "dst_factor_in": _small(rng, 4),
                      "src_factor_out": _small(rng, 4), "src_factor_in": _small(rng, 4)}
        if rng.random() < 0.02:
            common["uop_end"] = bgn + 3 + cfg.UOP_BUFF_DEPTH // 2  # past the buffer
        if kind == "GEMM":
            return GemmInsn(reset_reg=int(rng.random() < 0.2), wgt_factor_out=_small(rng, 4),
                            wgt_factor_in=_small(rng, 4), **common)
        use_imm = int(rng.random() < 0.5)
        return AluInsn(alu_opcode=int(rng.integers(0, 8 if rng.random() < 0.02 else 5)), use_imm=use_imm,
                       imm=int(rng.integers(-40, 40)) if use_imm else 0, **common)
    mem = "OUT" if kind == "STORE" else kind
    elem = cfg.elem_bytes(mem)
    y, x = 1 + _small(rng, 3), 1 + _small(rng, 4)
    stride = x + _small(rng, 3)
    pads = [0, 0, 0, 0] if kind in ("STORE", "UOP") or rng.random() < 0.5 else [_small(rng, 3) for _ in range(4)]
    if kind == "STORE" and rng.random() < 0.02:
        pads[0] = 1  # padding on a store
    depth = {"INP": cfg.INP_BUFF_DEPTH, "WGT": cfg.WGT_BUFF_DEPTH, "UOP": 32, "ACC": 64, "ACC_8BIT": 64,
             "OUT": 64}[mem]
    span = (y + pads[0] + pads[1]) * (x + pads[2] + pads[3])
    sram = _small(rng, max(1, min(depth, 64) - span)) if rng.random() > 0.02 else depth - 1  # sometimes overflows
    if kind == "UOP":
        dram, y = UOP_BASE // 4 + _small(rng, UOP_WORDS - x), 1
    else:
        dram = DRAM_BASE // elem + _small(rng, max(1, DRAM_BYTES // elem - (y * stride + x)))
        if rng.random() < 0.02:
            dram += DRAM_BYTES // elem  # outside the mapped region
    return MemInsn(opcode=1 if kind == "STORE" else 0, memory_type=MEM_TYPES[mem], sram_base=sram, dram_base=dram,
                   y_size=y, x_size=x, x_stride=stride, y_pad_0=pads[0], y_pad_1=pads[1], x_pad_0=pads[2],
                   x_pad_1=pads[3])


def _with_flags(insn, rng: np.random.Generator, balanced: bool, tokens: dict[str, int]):
    """Set dependency flags: at random, or only pops that an earlier push in program order satisfies."""
    module = module_of(insn)
    flags = {}
    for flag in FLAGS:
        queue = QUEUE_OF_FLAG.get((module, flag))
        if queue is None:
            if not balanced and rng.random() < 0.005:
                flags[flag] = 1  # a flag the module does not have
            continue
        name, is_pop = queue
        if rng.random() < (0.3 if balanced else 0.2):
            if is_pop and balanced:
                if tokens[name] == 0:
                    continue
                tokens[name] -= 1
            elif not is_pop:
                tokens[name] += 1
            flags[flag] = 1
    return type(insn)(**{**insn.__dict__, **flags})


def random_stream(cfg, rng: np.random.Generator) -> bytes:
    balanced = rng.random() < 0.5
    tokens = dict.fromkeys(("l2g", "g2l", "s2g", "g2s"), 0)
    insns = [_with_flags(_random_insn(cfg, rng), rng, balanced, tokens) for _ in range(int(rng.integers(1, 25)))]
    if rng.random() < 0.97:
        insns.append(FinishInsn())
    raw = b"".join(encode(i, cfg) for i in insns)
    if rng.random() < 0.03:  # a garbage instruction word somewhere
        at = int(rng.integers(0, len(insns))) * 16
        raw = raw[:at] + rng.integers(0, 256, 16, dtype=np.uint8).tobytes() + raw[at + 16:]
    return raw


def _prepared(cls, cfg, seed: int):
    sim = cls(cfg)
    rng = np.random.default_rng(seed)
    # every third seed's data bytes are all < 128, so that loaded inputs are non-negative and GEMMs take the
    # unsigned-input kernel where the path has one (simulator/csrc/vta_sim.c, exec_gemm)
    sim.map(DRAM_BASE, rng.integers(0, 128 if seed % 3 == 2 else 256, DRAM_BYTES, dtype=np.uint8))
    fmt = cfg.insn_formats["uop"]
    uops = np.array([fmt.encode({"dst_idx": _small(rng, 50), "src_idx": _small(rng, 50), "wgt_idx": _small(rng, 50)})
                     for _ in range(UOP_WORDS)], dtype=np.uint32)
    sim.map(UOP_BASE, uops)
    sim.write_sram("uop", 0, uops[:32])
    return sim


def outcome(sim, stream: bytes, compute: bool, max_work: int | None = None):
    """What a run ends in (stats and trace, or the error and its index) and the state it leaves."""
    try:
        stats = sim.run(stream, trace=True, compute=compute, max_cycles=20_000, max_work=max_work)
        result = ("ok", stats.to_dict(), stats.trace)
    except SimulatorError as e:
        result = (type(e).__name__, e.index)
    state = [sim.read(DRAM_BASE, DRAM_BYTES).tobytes()]
    state += [sim.read_sram(m, 0, 64).tobytes() for m in ("uop", "inp", "wgt", "acc")]
    return result, state


@pytest.mark.parametrize("name", list(CONFIGS))
def test_c_simulator_agrees_with_reference_on_random_streams(name):
    cfg = CONFIGS[name]
    kinds: dict[str, int] = {}
    for seed in range(STREAMS_PER_CONFIG):
        rng = np.random.default_rng([seed, list(CONFIGS).index(name)])
        stream = random_stream(cfg, rng)
        compute = seed % 7 != 0
        ref = outcome(_prepared(ReferenceSimulator, cfg, seed), stream, compute)
        fast = outcome(_prepared(Simulator, cfg, seed), stream, compute)
        assert fast[0] == ref[0], f"seed {seed}: C {fast[0][:2]} vs reference {ref[0][:2]}"
        assert fast[1] == ref[1], f"seed {seed}: final DRAM/SRAM state differs"
        kinds[ref[0][0]] = kinds.get(ref[0][0], 0) + 1
    # The generator must reach every outcome, and complete often enough to test data paths.
    assert kinds.get("ok", 0) >= STREAMS_PER_CONFIG // 10, kinds
    for kind in ("InvalidInstruction", "MemoryAccessError", "DeadlockError"):
        assert kinds.get(kind, 0) > 0, kinds
