"""The conv engine (vta/templates/conv.py) over its config spaces, bit-exact against the numpy references.

Workloads are those of VTA's tests (docs: vta-notes section 6): ResNet-18 C2..C11, grouped MobileNet
D1..D9, DCGAN conv2d_transpose CT1..CT3 and dense 128x128x128. Each runs with the default config and
with up to ``N_CONFIGS`` random configs that ``check_config`` accepts; the numpy reference is computed
once per workload and preset and shared by all its configs. Further tests walk two small spaces whole,
check that refused configs say why, that two virtual threads overlap DMA with GEMMs, and the epilogue,
program reuse and argument checking of ``compile_op``'s ops.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from hw_config import MEM_TYPES, OPCODES, HwConfig, load_config
from vta.isa import GemmInsn, MemInsn, decode_program
from vta.numerics import conv2d_int, conv2d_transpose_scatter
from vta.runtime import ScheduleError
from vta.space import KnobError
from vta.templates import compile_op, conv
from vta.templates.epilogue import reference_epilogue
from vta.workloads import DCGAN, MOBILENET
from vta.workloads import RESNET18 as RESNET

EPILOGUE = (("bias",), ("shr", 8), ("clip", 0, 127))
N_CONFIGS = 20



def workload(key: str, batch: int) -> tuple[str, dict]:
    """(operator, compile_op keyword arguments) of a named workload at a batch size."""
    if key in RESNET:
        h, w, ci, co, k, pad, stride = RESNET[key]
        return "conv2d", {"data_shape": (batch, ci, h, w), "kernel_shape": (co, ci, k, k), "strides": stride,
                          "padding": pad}
    if key in MOBILENET:
        h, w, ci, co, groups, stride = MOBILENET[key]
        return "conv2d", {"data_shape": (batch, ci, h, w), "kernel_shape": (co, ci // groups, 3, 3),
                          "strides": stride, "padding": 1, "groups": groups}
    if key in DCGAN:
        h, w, ci, co = DCGAN[key]
        return "conv2d_transpose", {"data_shape": (batch, ci, h, w), "kernel_shape": (ci, co, 4, 4), "strides": 2,
                                    "padding": 1}
    if key == "dense":
        return "dense", {"data_shape": (128, 128), "kernel_shape": (128, 128)}
    raise KeyError(key)


def out_channels(name: str, kernel_shape: tuple[int, ...]) -> int:
    return kernel_shape[1] if name == "conv2d_transpose" else kernel_shape[0]


def random_inputs(seed: int, name: str, wl: dict) -> dict[str, np.ndarray]:
    """data and kernel in [-128, 128), bias in +-2^14 (INP + WGT - 2 bits, as VTA's tests draw it)."""
    rng = np.random.default_rng(seed)
    return {"data": rng.integers(-128, 128, wl["data_shape"], dtype=np.int8),
            "kernel": rng.integers(-128, 128, wl["kernel_shape"], dtype=np.int8),
            "bias": rng.integers(-(1 << 14), 1 << 14, out_channels(name, wl["kernel_shape"]), dtype=np.int32)}


def is_valid(cfg: HwConfig, op, config: dict) -> bool:
    return conv.check_config(cfg, op.geometry, conv.tiling_of(config), op.epilogue) is None


def valid_configs(cfg: HwConfig, op, n: int = N_CONFIGS, seed: int = 0) -> list[dict]:
    """Up to ``n`` distinct random configs of ``op.space`` that check_config accepts (all if fewer exist)."""
    picked = []
    for config in op.space.sample(np.random.default_rng(seed), len(op.space)):
        if is_valid(cfg, op, config):
            picked.append(config)
            if len(picked) == n:
                break
    return picked


def check_configs_bit_exact(key: str, preset: str, min_configs: int) -> None:
    """The default config and up to N_CONFIGS random valid ones, all against one numpy reference."""
    cfg = load_config(preset)
    name, wl = workload(key, cfg.BATCH)
    default = compile_op(name, cfg, epilogue=EPILOGUE, **wl)  # config=None
    assert is_valid(cfg, default, default.config)
    inputs = random_inputs(7, name, wl)
    want = default.reference(**inputs)  # the expensive part, once per workload and preset
    assert want.shape == default.shapes["out"] and want.dtype == np.int8
    configs = valid_configs(cfg, default)  # fewer than N_CONFIGS only when the space has no more
    assert len(configs) >= min_configs
    failures = []
    for config in [None, *configs]:
        op = default if config is None else compile_op(name, cfg, epilogue=EPILOGUE, config=config, **wl)
        got = op.run(**inputs)
        if not np.array_equal(got, want):
            failures.append((config or "default", int((got != want).sum())))
        assert op.stats.gemm_counter > 0
    assert not failures, f"{key} on {preset}: wrong outputs (config, #wrong elements): {failures}"


# ------------------------------------------------------------------------------------------------------------
# 1. ResNet-18 conv2d

@pytest.mark.parametrize("preset", ["pynq", "batch4"])
@pytest.mark.parametrize("key", list(RESNET))
def test_resnet_conv2d_bit_exact(key, preset):
    check_configs_bit_exact(key, preset, min_configs=N_CONFIGS)


# ------------------------------------------------------------------------------------------------------------
# 2. grouped conv2d, conv2d_transpose and dense

@pytest.mark.parametrize("preset", ["pynq", "batch4"])
@pytest.mark.parametrize("key", list(MOBILENET))
def test_mobilenet_group_conv2d_bit_exact(key, preset):
    _, wl = workload(key, 1)
    assert wl["groups"] > 1
    check_configs_bit_exact(key, preset, min_configs=3)


@pytest.mark.parametrize("key", list(MOBILENET))
def test_mobilenet_groups_of_16_run_block_diagonal_on_block32(key):
    """Groups of 16 channels are not whole 32-channel blocks: block32 runs them as 32-wide groups with a
    block-diagonal kernel (two of the operator's groups per block), executing twice the operator's MACs.
    (tests/test_conv_dilation_groups.py runs such groups bit-exactly against numpy.)"""
    name, wl = workload(key, 1)
    t = conv.ConvTemplate.parse(name, load_config("block32"), EPILOGUE, wl)
    ci = wl["data_shape"][1]
    assert t.narrow_groups and t.groups == wl["groups"] and t.geometry.groups == ci // 32
    assert t.macs == 2 * t.model_macs


def test_groups_that_neither_fill_nor_divide_a_block_are_refused():
    """24 channels per group on 16-wide blocks: neither whole blocks nor a divisor of one (a group would straddle
    two blocks), so no form runs it; the message says both rules."""
    with pytest.raises(ValueError, match=r"multiples of BLOCK=16 .* or divide BLOCK"):
        compile_op("group_conv2d", load_config("pynq"), epilogue=EPILOGUE, data_shape=(1, 48, 8, 8),
                   kernel_shape=(48, 24, 3, 3), padding=1, groups=2)


# compile_op(config=None) for CT2/CT3 takes 5-30 s: default_config runs check_config, which builds the micro-ops
# of every output tile of a transposed convolution, for each of the ~2000-3000 configs of the space
SLOW_DCGAN = {"CT2", "CT3"}


@pytest.mark.parametrize("preset", ["pynq", "block32"])
@pytest.mark.parametrize("key", [pytest.param(k, marks=pytest.mark.slow) if k in SLOW_DCGAN else k for k in DCGAN])
def test_dcgan_conv2d_transpose_bit_exact(key, preset):
    check_configs_bit_exact(key, preset, min_configs=N_CONFIGS)


@pytest.mark.parametrize("preset", ["pynq", "batch4", "block32"])
def test_dense_bit_exact(preset):
    check_configs_bit_exact("dense", preset, min_configs=N_CONFIGS)


# ------------------------------------------------------------------------------------------------------------
# 3. whole spaces

SMALL = {
    "conv2d 32x8x8 3x3": ("conv2d", {"data_shape": (1, 32, 8, 8), "kernel_shape": (32, 32, 3, 3), "padding": 1}),
    "dense 8x64x48": ("dense", {"data_shape": (8, 64), "kernel_shape": (48, 64)}),
}


def walk_space(cfg: HwConfig, name: str, wl: dict, epilogue=EPILOGUE) -> tuple[int, int, list]:
    """Every config of the space: check_config accepts it and it runs bit-exactly, or compile_op refuses it
    with check_config's reason. Returns (#valid, #refused, problems)."""
    op0 = compile_op(name, cfg, epilogue=epilogue, **wl)
    inputs = random_inputs(3, name, wl)
    want = op0.reference(**inputs)
    valid = refused = 0
    problems = []
    for config in op0.space:
        reason = conv.check_config(cfg, op0.geometry, conv.tiling_of(config), op0.epilogue)
        try:
            op = compile_op(name, cfg, epilogue=epilogue, config=config, **wl)
        except ScheduleError as e:
            refused += 1
            if reason is None or reason not in str(e):
                problems.append((config, reason, str(e)))
            continue
        valid += 1
        if reason is not None:
            problems.append((config, reason, "compiled anyway"))
        elif not np.array_equal(op.run(**inputs), want):
            problems.append((config, None, "wrong output"))
    assert valid + refused == len(op0.space)
    return valid, refused, problems


@pytest.mark.parametrize("case", list(SMALL))
def test_whole_space_runs_or_is_refused_with_its_reason(case):
    name, wl = SMALL[case]
    valid, refused, problems = walk_space(load_config("pynq"), name, wl)
    assert not problems, problems[:5]
    assert valid > 0 and refused > 0, (valid, refused)


# ------------------------------------------------------------------------------------------------------------
# 4. refusals say why

C2 = {"data_shape": (1, 64, 56, 56), "kernel_shape": (64, 64, 3, 3), "strides": 1, "padding": 1}
C2_CONFIG = {"tile_b": [1, 1], "tile_h": [14, 4], "tile_w": [2, 28], "tile_ci": [2, 2], "tile_co": [4, 1],
             "oc_nthread": 2, "h_nthread": 1}
GROUPED = {"data_shape": (1, 128, 8, 8), "kernel_shape": (128, 16, 3, 3), "padding": 1, "groups": 8}
GROUPED_CONFIG = {"tile_b": [1, 1], "tile_h": [1, 8], "tile_w": [1, 8], "tile_ci": [1, 1], "tile_co": [8, 1],
                  "oc_nthread": 1, "h_nthread": 1}
CT = {"data_shape": (1, 32, 8, 8), "kernel_shape": (32, 64, 4, 4), "strides": 2, "padding": 1}
CT_CONFIG = {"tile_b": [1, 1], "tile_h": [2, 8], "tile_w": [2, 8], "tile_ci": [2, 1], "tile_co": [4, 1],
             "oc_nthread": 1, "h_nthread": 1}
PAD16 = {"data_shape": (1, 16, 4, 4), "kernel_shape": (16, 16, 3, 3), "padding": 16}
PAD16_CONFIG = {"tile_b": [1, 1], "tile_h": [34, 1], "tile_w": [1, 34], "tile_ci": [1, 1], "tile_co": [1, 1],
                "oc_nthread": 1, "h_nthread": 1}

REFUSED = {  # name, workload, a valid config of it, changes that make it invalid, words the reason must contain
    "sram capacity": ("conv2d", C2, C2_CONFIG, {"tile_h": [1, 56], "tile_w": [1, 56], "tile_ci": [1, 4]},
                      "SRAM capacity"),
    "oc_nthread split": ("conv2d", C2, C2_CONFIG, {"tile_co": [1, 4]},
                         "oc_nthread=2 needs an even number of channel tiles"),
    "h_nthread split": ("conv2d", C2, C2_CONFIG, {"tile_h": [7, 8], "oc_nthread": 1, "h_nthread": 2},
                        "h_nthread=2 needs an even number of row tiles"),
    "group span": ("conv2d", GROUPED, GROUPED_CONFIG, {"tile_co": [4, 2]}, "never spans two groups"),
    "pipeline hazard": ("conv2d", C2, C2_CONFIG, {"tile_h": [56, 1], "tile_w": [28, 2]}, "pipeline hazard"),
    "transposed hazard": ("conv2d_transpose", CT, CT_CONFIG, {"tile_h": [16, 1], "tile_w": [16, 1]},
                          "pipeline hazard"),
    "micro-op buffer": ("conv2d_transpose", CT, CT_CONFIG, {"tile_h": [1, 16], "tile_w": [1, 16], "tile_co": [1, 4]},
                        "micro-op buffer"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_config_gives_check_configs_reason(case):
    name, wl, valid, changes, words = REFUSED[case]
    cfg = load_config("pynq")
    base = compile_op(name, cfg, epilogue=EPILOGUE, config=valid, **wl)  # lends its geometry
    config = {**valid, **changes}
    reason = conv.check_config(cfg, base.geometry, conv.tiling_of(config), base.epilogue)
    assert reason is not None and words in reason
    with pytest.raises(ScheduleError) as refusal:
        compile_op(name, cfg, epilogue=EPILOGUE, config=config, **wl)
    assert str(refusal.value) == f"{name} config refused: {reason}"


def test_padding_beyond_the_dma_limit_is_checked_per_window():
    """Padding 16 is more than one load can insert: a tiling whose window needs 16 zero columns (34 output
    columns in one tile) is refused, while small tiles, whose windows need at most 2, compile and run."""
    cfg = load_config("pynq")
    geometry = conv.ConvGeometry(nb=1, cib=1, cob=1, groups=1, height=4, width=4, kh=3, kw=3, sh=1, sw=1, ph=16,
                                 pw=16)
    reason = conv.check_config(cfg, geometry, conv.tiling_of(PAD16_CONFIG), conv.Epilogue(EPILOGUE))
    assert reason is not None and "an input window needs 16 zero rows, more than the 15" in reason
    with pytest.raises(ScheduleError) as refusal:
        compile_op("conv2d", cfg, epilogue=EPILOGUE, config=PAD16_CONFIG, **PAD16)
    assert str(refusal.value) == f"conv2d config refused: {reason}"
    op = compile_op("conv2d", cfg, epilogue=EPILOGUE, **PAD16)   # the default picks tiles that fit
    rng = np.random.default_rng(16)
    x = rng.integers(-128, 128, PAD16["data_shape"], dtype=np.int8)
    w = rng.integers(-128, 128, PAD16["kernel_shape"], dtype=np.int8)
    b = rng.integers(-3000, 3000, 16, dtype=np.int32)
    np.testing.assert_array_equal(op.run(x, w, bias=b), op.reference(x, w, bias=b))


def test_unknown_knob_is_named():
    with pytest.raises(ScheduleError, match=r"unknown knob\(s\) \['tile_k'\]") as refusal:
        compile_op("conv2d", load_config("pynq"), config={**C2_CONFIG, "tile_k": [1, 1]}, **C2)
    for knob in C2_CONFIG:  # the message lists the template's knobs
        assert f"'{knob}'" in str(refusal.value)
    with pytest.raises(ScheduleError, match=r"unknown knob\(s\) \['h_nthread'\]"):  # dense has no h_nthread
        compile_op("dense", load_config("pynq"), data_shape=(16, 64), kernel_shape=(48, 64),
                   config={"tile_b": [1, 1], "tile_ci": [1, 4], "tile_co": [1, 3], "oc_nthread": 1, "h_nthread": 1})


def test_missing_knob_is_named():
    config = {k: v for k, v in C2_CONFIG.items() if k != "tile_ci"}
    with pytest.raises(ScheduleError, match=r"missing knob\(s\) \['tile_ci'\]"):
        compile_op("conv2d", load_config("pynq"), config=config, **C2)


def test_bad_split_value_names_the_knob_and_lists_allowed_values():
    cfg = load_config("pynq")
    with pytest.raises(ScheduleError) as refusal:
        compile_op("conv2d", cfg, config={**C2_CONFIG, "tile_w": [3, 19]}, **C2)
    msg = str(refusal.value)
    assert "tile_w=[3, 19] is not allowed" in msg and "allowed:" in msg
    for outer in (56, 28, 14, 8, 7, 4, 2, 1):  # every factorisation of 56
        assert f"[{outer}, {56 // outer}]" in msg
    # the space itself raises KnobError (a ValueError), which compile_op turns into a ScheduleError
    space = compile_op("conv2d", cfg, **C2).space
    with pytest.raises(KnobError, match=r"tile_w=\[3, 19\] is not allowed"):
        space.normalize({**C2_CONFIG, "tile_w": [3, 19]})


def test_bad_choice_value_lists_allowed_values():
    with pytest.raises(ScheduleError, match=r"oc_nthread=3 is not allowed; allowed: \[1, 2\]"):
        compile_op("conv2d", load_config("pynq"), config={**C2_CONFIG, "oc_nthread": 3}, **C2)


def test_c2_space_on_pynq_has_valid_and_refused_configs():
    cfg = load_config("pynq")
    op = compile_op("conv2d", cfg, epilogue=EPILOGUE, **C2)
    valid = sum(is_valid(cfg, op, c) for c in op.space)
    assert len(op.space) == 1 * 8 * 8 * 3 * 3 * 2 * 2 == 2304  # VTA's space size for C2 (vta-notes 5.6)
    assert N_CONFIGS < valid < len(op.space)  # 1395 valid, 909 refused when written


# ------------------------------------------------------------------------------------------------------------
# 5. double buffering

C2_SINGLE = {"tile_b": [1, 1], "tile_h": [4, 14], "tile_w": [4, 14], "tile_ci": [2, 2], "tile_co": [2, 2],
             "oc_nthread": 1, "h_nthread": 1}
DENSE = {"data_shape": (128, 128), "kernel_shape": (128, 128)}
DENSE_SINGLE = {"tile_b": [8, 16], "tile_ci": [2, 4], "tile_co": [2, 4], "oc_nthread": 1}
DOUBLE_BUFFERED = {
    "conv2d C2 oc_nthread": ("conv2d", C2, C2_SINGLE, "oc_nthread"),
    "conv2d C2 h_nthread": ("conv2d", C2, C2_SINGLE, "h_nthread"),
    "dense oc_nthread": ("dense", DENSE, DENSE_SINGLE, "oc_nthread"),
}


def loads_overlapping_gemms(op) -> int:
    """INP/WGT loads whose simulated [start, end) overlaps some GEMM's, over the program's streams (traced)."""
    count = 0
    for stream in op.program.streams:
        if stream.uop_words.size:
            op.device.copy_in(op.program.uop_buffer, stream.uop_words)
        stats = op.device.sim.run(stream.insns, trace=True)
        insns = decode_program(stream.insns, op.cfg)
        assert len(insns) == len(stats.trace)
        loads = np.array([(s, e) for insn, (_, s, e) in zip(insns, stats.trace, strict=True)
                          if isinstance(insn, MemInsn) and insn.opcode == OPCODES["LOAD"] and insn.x_size > 0
                          and insn.memory_type in (MEM_TYPES["INP"], MEM_TYPES["WGT"])]).reshape(-1, 2)
        gemms = np.array([(s, e) for insn, (_, s, e) in zip(insns, stats.trace, strict=True)
                          if isinstance(insn, GemmInsn) and not insn.reset_reg]).reshape(-1, 2)
        assert len(loads) and len(gemms)
        overlap = (loads[:, None, 0] < gemms[None, :, 1]) & (gemms[None, :, 0] < loads[:, None, 1])
        count += int(overlap.any(axis=1).sum())
    return count


@pytest.mark.parametrize("case", list(DOUBLE_BUFFERED))
def test_two_threads_overlap_loads_with_gemms(case):
    name, wl, single, knob = DOUBLE_BUFFERED[case]
    cfg = load_config("pynq")
    double = {**single, knob: 2}
    one = compile_op(name, cfg, epilogue=EPILOGUE, config=single, **wl)
    two = compile_op(name, cfg, epilogue=EPILOGUE, config=double, **wl)
    assert conv.tiling_of(two.config).threads == 2 and conv.tiling_of(one.config).threads == 1
    inputs = random_inputs(5, name, wl)
    want = one.reference(**inputs)
    np.testing.assert_array_equal(one.run(**inputs), want)
    np.testing.assert_array_equal(two.run(**inputs), want)
    assert one.stats.gemm_counter == two.stats.gemm_counter  # the same work ...
    assert two.cycles < one.cycles  # ... in fewer cycles
    # with one thread a load waits for the GEMM that frees its buffer; with two, the other thread's runs
    assert loads_overlapping_gemms(one) == 0
    assert loads_overlapping_gemms(two) > 0


# ------------------------------------------------------------------------------------------------------------
# 6. running, epilogues and arguments

DENSE_SMALL = {"data_shape": (16, 64), "kernel_shape": (48, 64)}


def test_program_runs_again_with_new_inputs():
    cfg = load_config("pynq")
    name, wl = SMALL["conv2d 32x8x8 3x3"]
    two_threads = {"tile_b": [1, 1], "tile_h": [2, 4], "tile_w": [1, 8], "tile_ci": [2, 1], "tile_co": [1, 2],
                   "oc_nthread": 1, "h_nthread": 2}
    for config in (None, two_threads):
        op = compile_op(name, cfg, epilogue=EPILOGUE, config=config, **wl)
        program = op.program
        for seed in (11, 12, 11):
            inputs = random_inputs(seed, name, wl)
            np.testing.assert_array_equal(op.run(**inputs), op.reference(**inputs))
            assert op.program is program
    dense = compile_op("dense", cfg, epilogue=EPILOGUE, **DENSE_SMALL)
    first, second = random_inputs(1, "dense", DENSE_SMALL), random_inputs(2, "dense", DENSE_SMALL)
    out1 = dense.run(**first)
    out2 = dense.run(**second)
    np.testing.assert_array_equal(out1, dense.reference(**first))
    np.testing.assert_array_equal(out2, dense.reference(**second))
    assert not np.array_equal(out1, out2)


EPILOGUE_CASES = {
    "conv2d": ("conv2d", {"data_shape": (1, 32, 8, 8), "kernel_shape": (32, 32, 3, 3), "padding": 1}),
    "group_conv2d": ("conv2d", {"data_shape": (1, 64, 6, 6), "kernel_shape": (64, 16, 3, 3), "padding": 1,
                                "groups": 4}),
    "conv2d_transpose": ("conv2d_transpose", {"data_shape": (1, 32, 4, 4), "kernel_shape": (32, 16, 4, 4),
                                              "strides": 2, "padding": 1}),
    "dense": ("dense", DENSE_SMALL),
}


def expected(name: str, wl: dict, ops, inputs: dict, residual=None) -> np.ndarray:
    """numpy: the int32 accumulator (vta.numerics conv2d_int / conv2d_transpose_scatter), then reference_epilogue."""
    x, w = inputs["data"].astype(np.int64), inputs["kernel"].astype(np.int64)
    if name == "dense":
        acc = x @ w.T
        res = None if residual is None else residual[:, :, None, None]
        return reference_epilogue(acc[:, :, None, None], ops, inputs["bias"], res)[:, :, 0, 0]
    strides, padding = (wl.get("strides", 1),) * 2, (wl.get("padding", 0),) * 2
    if name == "conv2d_transpose":
        acc = conv2d_transpose_scatter(x, w, strides, padding * 2)
    else:
        acc = conv2d_int(x, w, strides, padding * 2, groups=wl.get("groups", 1))
    return reference_epilogue(acc, ops, inputs["bias"], residual)


@pytest.mark.parametrize("residual_dtype", ["int8", "int32"])
@pytest.mark.parametrize("ops", [(("residual",), ("relu",), ("clip", 0, 127)),
                                 (("bias",), ("residual",), ("shr", 6), ("relu",), ("clip", 0, 127))],
                         ids=["residual-relu-clip", "bias-residual-shr-relu-clip"])
@pytest.mark.parametrize("case", list(EPILOGUE_CASES))
def test_residual_epilogue(case, ops, residual_dtype):
    name, wl = EPILOGUE_CASES[case]
    op = compile_op(name, load_config("pynq"), epilogue=ops, **wl)
    inputs = random_inputs(21, name, wl)
    rng = np.random.default_rng(22)
    residual = (rng.integers(-128, 128, op.shapes["out"], dtype=np.int8) if residual_dtype == "int8" else
                rng.integers(-(1 << 20), 1 << 20, op.shapes["out"], dtype=np.int32))
    bias = {"bias": inputs["bias"]} if op.epilogue.bias else {}
    got = op.run(inputs["data"], inputs["kernel"], residual=residual, **bias)
    np.testing.assert_array_equal(got, expected(name, wl, ops, inputs, residual))
    np.testing.assert_array_equal(got, op.reference(inputs["data"], inputs["kernel"], residual=residual, **bias))


ALU_EPILOGUES = {
    "shl-shr-clip": (("shl", 3), ("shr", 11), ("clip", -100, 100)),
    "min-max": (("min", 20000), ("max", -20000), ("shr", 8)),
    "add-mul": (("add", 12345), ("mul", 3), ("shr", 10)),
    "negative imm": (("mul", -7), ("add", -32768), ("shr", 12), ("relu",)),
    "int32 wraps": (("bias",), ("mul", 32767), ("mul", 32767), ("add", 32767)),
    "shl wraps": (("shl", 31),),
    "largest shifts": (("shl", 5), ("shr", 31)),
    "no epilogue": (),
}


@pytest.mark.parametrize("ops", list(ALU_EPILOGUES))
@pytest.mark.parametrize("case", ["conv2d", "dense"])
def test_alu_epilogue_ops(case, ops):
    name, wl = EPILOGUE_CASES[case]
    epilogue = ALU_EPILOGUES[ops]
    fsim = any(e[0] == "mul" for e in epilogue)   # ALU MUL: fsim's ISA, not the HLS bitstream's
    op = compile_op(name, load_config("pynq", **({"CAPABILITIES": "fsim"} if fsim else {})), epilogue=epilogue, **wl)
    inputs = random_inputs(31, name, wl)
    if not op.epilogue.bias:
        del inputs["bias"]
    got = op.run(**inputs)
    np.testing.assert_array_equal(got, expected(name, wl, epilogue, {"bias": None, **inputs}))


@pytest.mark.parametrize("op", [("shr", -3), ("shl", -3), ("shr", 32), ("shl", 40), ("shr", 8.0)], ids=str)
def test_shift_counts_outside_0_31_are_refused(op):
    """A negative count would be emitted as the opposite shift, which reference_epilogue does not model."""
    name, wl = EPILOGUE_CASES["conv2d"]
    with pytest.raises(ScheduleError, match=r"the shift count must be an integer in \[0, 31\]") as refusal:
        compile_op(name, load_config("pynq"), epilogue=(op,), **wl)
    assert repr(op) in str(refusal.value)


BAD_INPUTS = {  # change to the good arguments, expected start of the ValueError's message
    "data shape": ({"data": np.zeros((1, 32, 8, 7), np.int8)}, "data"),
    "data dtype": ({"data": np.zeros((1, 32, 8, 8), np.int16)}, "data"),
    "data list": ({"data": np.zeros((1, 32, 8, 8), np.int8).tolist()}, "data"),
    "kernel shape": ({"kernel": np.zeros((32, 32, 1, 1), np.int8)}, "kernel"),
    "kernel dtype": ({"kernel": np.zeros((32, 32, 3, 3), np.uint8)}, "kernel"),
    "missing bias": ({"bias": None}, "bias: this conv2d has an epilogue with ('bias',): pass bias="),
    "bias shape": ({"bias": np.zeros(16, np.int32)}, "bias"),
    "bias dtype": ({"bias": np.zeros(32, np.int64)}, "bias"),
    "missing residual": ({"residual": None}, ("residual: this conv2d has an epilogue with ('residual',): pass "
                                              "residual=")),
    "residual shape": ({"residual": np.zeros((1, 32, 8), np.int8)}, "residual"),
    "residual dtype": ({"residual": np.zeros((1, 32, 8, 8), np.float32)}, "residual"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_inputs_raise_value_error_naming_the_argument(case):
    change, start = BAD_INPUTS[case]
    name, wl = EPILOGUE_CASES["conv2d"]
    op = compile_op(name, load_config("pynq"), epilogue=(("bias",), ("residual",), ("clip", -128, 127)), **wl)
    args = {"data": np.zeros((1, 32, 8, 8), np.int8), "kernel": np.zeros((32, 32, 3, 3), np.int8),
            "bias": np.zeros(32, np.int32), "residual": np.zeros((1, 32, 8, 8), np.int8), **change}
    for method in (op.run, op.reference):
        with pytest.raises(ValueError) as error:
            method(**args)
        assert str(error.value).startswith(start), str(error.value)
    assert op.stats is None  # nothing ran


# ------------------------------------------------------------------------------------------------------------
# regressions: bugs found while writing these tests

def test_padding_only_tiles_are_refused_up_front_or_run():
    _, _, problems = walk_space(load_config("pynq"), "conv2d",
                                {"data_shape": (1, 16, 4, 4), "kernel_shape": (16, 16, 1, 1),
                                 "padding": 1})
    assert not problems, problems[:3]


def test_default_config_of_a_workload_with_padding_only_rows_compiles():
    cfg = load_config("de10nano")
    wl = {"data_shape": (5, 39, 9, 13), "kernel_shape": (8, 39, 2, 1), "strides": (2, 1), "padding": (2, 1)}
    op = compile_op("conv2d", cfg, epilogue=EPILOGUE, **wl)
    inputs = random_inputs(51, "conv2d", wl)
    np.testing.assert_array_equal(op.run(**inputs), op.reference(**inputs))


BAD_WORKLOADS = {  # changes to a good conv2d workload that compile_op should refuse with a ValueError
    "strides of one value": {"strides": (1,)},  # IndexError today
    "strides None": {"strides": None},  # TypeError
    "data_shape None": {"data_shape": None},  # TypeError
    "empty epilogue op": {"epilogue": [()]},  # IndexError
}
SILENT_WORKLOADS = {  # accepted today, silently reinterpreted
    "padding of four values": {"padding": (0, 1, 2, 3)},  # only (0, 1) is used
    "fractional groups": {"groups": 1.5},  # becomes 1
    "fractional kernel size": {"kernel_shape": (16, 16, 2.5, 3)},  # becomes 2
}


@pytest.mark.parametrize("case", list(BAD_WORKLOADS))
def test_malformed_workload_arguments_raise_value_error(case):
    args = {"data_shape": (1, 16, 4, 4), "kernel_shape": (16, 16, 3, 3), "padding": 1, **BAD_WORKLOADS[case]}
    with pytest.raises(ValueError):
        compile_op("conv2d", load_config("pynq"), **args)


@pytest.mark.parametrize("case", list(SILENT_WORKLOADS))
def test_ambiguous_workload_arguments_are_refused(case):
    args = {"data_shape": (1, 16, 4, 4), "kernel_shape": (16, 16, 3, 3), "padding": 1, **SILENT_WORKLOADS[case]}
    with pytest.raises(ValueError):
        compile_op("conv2d", load_config("pynq"), **args)


def test_divisors_are_the_definitions_in_its_order():
    """``divisors`` finds the pairs (d, n // d) up to sqrt(n): the same list, in the same increasing order, as
    the O(n) definition it replaced (which hung on a workload of height 10^30)."""
    from vta.space import divisors

    def definition(n):
        return [d for d in range(1, n + 1) if n % d == 0]

    rng = np.random.default_rng(7)
    for n in [*range(-2, 2000), 4096, 65536, 720720, 999983, 1 << 20, *rng.integers(2000, 300_000, 40).tolist()]:
        assert divisors(n) == definition(n), n
    import signal

    def too_slow(*_):
        raise TimeoutError("divisors(2^40) took over 5 s: not O(sqrt(n))")

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(5)
    try:
        assert len(divisors(1 << 40)) == 41 and divisors((1 << 32) - 1)[-1] == (1 << 32) - 1   # milliseconds
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


HUGE_WORKLOADS = {   # (op, workload, what the one-line refusal names)
    "conv2d height 10^30": ("conv2d", {"data_shape": (1, 64, 10**30, 8), "kernel_shape": (64, 64, 3, 3)},
                            "data_shape H=1000000000000000000000000000000 is above the limit 4294967295"),
    "conv2d width 2^32": ("conv2d", {"data_shape": (1, 16, 8, 1 << 32), "kernel_shape": (16, 16, 1, 1)},
                          "data_shape W=4294967296 is above the limit 4294967295"),
    "conv2d kernel height": ("conv2d", {"data_shape": (1, 16, 8, 8), "kernel_shape": (16, 16, 1 << 40, 1)},
                             "kernel_shape KH=1099511627776 is above the limit"),
    "conv2d padding": ("conv2d", {"data_shape": (1, 16, 8, 8), "kernel_shape": (16, 16, 3, 3), "padding": 10**30},
                       "padding H=1000000000000000000000000000000 is above the limit"),
    "conv2d of a 2^37-byte input": ("conv2d", {"data_shape": (1, 64, 1 << 28, 8), "kernel_shape": (64, 64, 3, 3)},
                                    "its data tensor would take 137438953472 bytes, above the limit 4294967296"),
    "dense K 10^30": ("dense", {"data_shape": (1, 10**30), "kernel_shape": (16, 10**30)},
                      "data_shape K=1000000000000000000000000000000 is above the limit"),
    "add channels 2^33": ("add", {"data_shape": (1, 1 << 33, 1, 1), "imm": 1},
                          "data_shape C=8589934592 is above the limit"),
    "relu of a 2^36-byte input": ("relu", {"data_shape": (1, 16, 1 << 16, 1 << 16)},
                                  "its lhs tensor would take 274877906944 bytes, above the limit 4294967296"),
}


@pytest.mark.parametrize("case", list(HUGE_WORKLOADS))
def test_a_dimension_past_what_a_dram_address_reaches_is_refused_when_parsed(case):
    """A shape no 32-bit VTA DRAM address reaches is one ValueError naming the dimension and the limit, raised
    before any knob space is built (one of height 10^30 took forever enumerating its height's divisors)."""
    op, workload, message = HUGE_WORKLOADS[case]
    with pytest.raises(ValueError, match=re.escape(message)) as refusal:
        compile_op(op, load_config("pynq"), **workload)
    assert "\n" not in str(refusal.value) and len(str(refusal.value)) < 200


def test_shapes_within_the_limit_still_compile():
    """The bound refuses nothing that compiled: a dense of K = 100352 (2048 x 7 x 7) and a conv of height 2^20."""
    cfg = load_config("pynq")
    assert compile_op("dense", cfg, data_shape=(1, 100352), kernel_shape=(1024, 100352)).config
    assert compile_op("conv2d", cfg, data_shape=(1, 64, 1 << 20, 8), kernel_shape=(64, 64, 3, 3), padding=1).config


@pytest.mark.parametrize("knob, value", [("h_nthread", 2.0), ("oc_nthread", True), ("h_nthread", "2"),
                                         ("tile_w", [2.9, 28.9]), ("tile_w", ["2", "28"]), ("tile_w", [[2], 28]),
                                         ("tile_w", None)])
def test_a_knob_value_that_is_not_an_integer_is_refused_naming_the_knob(knob, value):
    """2.0, True and "2" name no option (they were coerced, or failed later with a TypeError): compile_op refuses
    them with a ScheduleError naming the knob and the allowed values; the space raises KnobError (a ValueError)."""
    cfg = load_config("pynq")
    with pytest.raises(ScheduleError, match=re.escape(f"knob {knob}={value!r} is not allowed (knob values are "
                                                      "integers); allowed: [")):
        compile_op("conv2d", cfg, config={**C2_CONFIG, knob: value}, **C2)
    with pytest.raises(KnobError, match=f"knob {knob}="):
        compile_op("conv2d", cfg, **C2).space.normalize({**C2_CONFIG, knob: value})
    numpy_ints = {k: np.array(v, np.int64) if isinstance(v, list) else np.int32(v) for k, v in C2_CONFIG.items()}
    numpy_ints = {k: list(v) if isinstance(v, np.ndarray) else v for k, v in numpy_ints.items()}
    assert compile_op("conv2d", cfg, config=numpy_ints, **C2).config == C2_CONFIG   # numpy integers are integers


def test_an_env_that_is_not_a_config_is_a_type_error_naming_what_env_takes(tmp_path):
    """compile_op, build and load_best all take ``env`` through config_of: 3 was an AttributeError deep inside."""
    import tuning
    from graph_pack import build

    (tmp_path / "empty.jsonl").write_text("")
    for call in (lambda: compile_op("conv2d", 3, data_shape=(1, 16, 8, 8), kernel_shape=(16, 16, 3, 3)),
                 lambda: tuning.load_best(tmp_path / "empty.jsonl", 3), lambda: build(None, 3, {})):
        with pytest.raises(TypeError, match="env: an Environment, a HwConfig, a preset name or a config file's path"):
            call()


def test_an_operand_the_op_does_not_read_is_refused_in_plain_words():
    """residual= to a conv without a residual epilogue (the message read "... this op's epilogue has ('residual',)
    has no such operand"), rhs= to an ALU op with an immediate."""
    name, wl = EPILOGUE_CASES["conv2d"]
    op = compile_op(name, load_config("pynq"), epilogue=(("clip", -128, 127),), **wl)
    x = {"data": np.zeros((1, 32, 8, 8), np.int8), "kernel": np.zeros((32, 32, 3, 3), np.int8)}
    with pytest.raises(ValueError, match=r"^residual= given, but only an epilogue with \('residual',\) reads it and "
                                         r"this conv2d has none: it would be ignored$"):
        op.run(**x, residual=np.zeros((1, 32, 8, 8), np.int8))
    add = compile_op("add", load_config("pynq"), data_shape=(1, 16, 4, 4), imm=3)
    with pytest.raises(ValueError, match=r"^rhs= given, but only a tensor operand \(no imm=\) reads it and this add "
                                         "has none"):
        add.run(lhs=np.zeros((1, 16, 4, 4), np.int32), rhs=np.zeros((1, 16, 4, 4), np.int32))


def test_compute_and_max_insns_take_what_they_say():
    """compute="no" was int("no")'s ValueError from deep inside the simulator; max_insns 0, -1 or 1.5 were ignored."""
    op = compile_op("add", load_config("pynq"), data_shape=(1, 16, 4, 4), imm=3)
    with pytest.raises(TypeError, match=r"compute='no', trace=False: each True or False"):
        op.run(lhs=np.zeros((1, 16, 4, 4), np.int32), compute="no")
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(ValueError, match=r"max_insns=.*: an integer 1\.\.2\^32-1"):
            compile_op("add", load_config("pynq"), data_shape=(1, 16, 4, 4), imm=3, max_insns=bad)


def test_clip_bounds_are_finite_integers_in_order():
    for bounds, match in (((float("nan"), 1), "bounds: expected an integer, got nan"),
                          ((5, -5), r"clip: bounds=\(lo, hi\) with lo <= hi, got \(5, -5\)")):
        with pytest.raises(ValueError, match=match):
            compile_op("clip", load_config("pynq"), data_shape=(1, 16, 4, 4), bounds=bounds)
