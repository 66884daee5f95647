"""host.jit: every compiled kernel is bit-identical to its numpy reference in graph_pack.kernels."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from extras import needs

from graph_pack.kernels import KERNELS
from graph_pack.opdefs import OPS
from host import jit

needs_llvmlite = needs("llvmlite")


def _attrs(op: str, arrays, **kw) -> dict:
    return OPS[op].normalize({**OPS[op].defaults, **kw}, list(arrays))


def _floats(rng, shape, lo: int = -20, hi: int = 20) -> np.ndarray:
    """Normals scaled by 2^[lo, hi): a large dynamic range, so every rounding step is visible."""
    return (rng.standard_normal(shape) * np.exp2(rng.integers(lo, hi, shape))).astype(np.float32)


def _data(rng, shape, dtype: str) -> np.ndarray:
    if dtype == "float32":
        return _floats(rng, shape)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def _assert_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype == np.float32:
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    else:
        np.testing.assert_array_equal(got, want)


def _check(op: str, arrays, **kw) -> None:
    attrs = _attrs(op, arrays, **kw)
    fn = jit.get_kernel(op, attrs, [a.shape for a in arrays], [a.dtype.name for a in arrays])
    assert fn is not None, f"{op} {kw} should be covered"
    _assert_bits(fn(attrs, *arrays), KERNELS[op](attrs, *arrays))


CONVS = {  # x shape, w shape, attrs
    "stem 7x7 s2": ((1, 3, 23, 21), (8, 3, 7, 7), {"strides": 2, "padding": 3}),
    "3x3 s1": ((1, 16, 12, 12), (16, 16, 3, 3), {"padding": 1}),
    "asymmetric padding, strides (2, 1)": ((2, 5, 11, 13), (7, 5, 3, 2), {"padding": (0, 2, 1, 3), "strides": (2, 1)}),
    "dilation 2": ((1, 4, 15, 14), (6, 4, 3, 3), {"dilation": 2, "padding": 2}),
    "dilation (1, 2), stride 2": ((1, 3, 9, 17), (5, 3, 3, 3), {"dilation": (1, 2), "strides": 2, "padding": (1, 1, 0, 2)}),
    "groups 2": ((1, 6, 9, 10), (4, 3, 3, 3), {"groups": 2, "padding": 1}),
    "depthwise s2": ((2, 8, 13, 11), (8, 1, 3, 3), {"groups": 8, "strides": 2, "padding": (1, 0, 1, 2)}),
    "depthwise multiplier 2": ((1, 4, 10, 9), (8, 1, 5, 5), {"groups": 4, "padding": 2}),
    "1x1 s2": ((1, 16, 9, 9), (20, 16, 1, 1), {"strides": 2}),
    "odd sizes": ((1, 3, 7, 5), (5, 3, 3, 5), {"padding": (2, 1, 0, 3)}),
    "wide rows": ((1, 2, 3, 70), (3, 2, 1, 3), {"padding": (0, 1, 0, 1)}),
    "channel tail": ((1, 3, 6, 6), (17, 3, 3, 3), {"padding": 1}),
    "stride 3, kernel 4": ((1, 2, 16, 19), (3, 2, 4, 4), {"strides": 3, "padding": (1, 2, 3, 0)}),
    "1x1 input, kernel larger": ((1, 2, 1, 1), (3, 2, 3, 3), {"padding": (1, 2, 1, 0)}),
}


@needs_llvmlite
@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("case", list(CONVS))
def test_conv2d_bit_identical(case, dtype):
    xs, ws, kw = CONVS[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    x, w = _data(rng, xs, dtype), _data(rng, ws, dtype)
    _check("nn.conv2d", [x, w], **kw, out_dtype="int32" if dtype == "int8" else "float32")


TRANSPOSED = {  # x shape, IOHW w shape, attrs
    "dcgan k4 s2 p1": ((1, 16, 4, 4), (16, 8, 4, 4), {"strides": 2, "padding": 1}),
    "stride 1": ((2, 3, 5, 6), (3, 5, 3, 3), {"padding": 1}),
    "strides (2, 3), output padding": ((1, 4, 5, 4), (4, 6, 3, 4), {"strides": (2, 3), "padding": (1, 0, 0, 2),
                                                                     "output_padding": (1, 2)}),
    "padding beyond the kernel (cropped)": ((1, 2, 7, 6), (2, 3, 2, 3), {"strides": 3, "padding": (2, 3, 1, 4)}),
    "1x1 input": ((1, 5, 1, 1), (5, 7, 4, 4), {"strides": 2}),
}


@needs_llvmlite
@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("case", list(TRANSPOSED))
def test_conv2d_transpose_bit_identical(case, dtype):
    """The reference's own definition (the direct conv of the stride-dilated input), on the compiled conv2d."""
    xs, ws, kw = TRANSPOSED[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    _check("nn.conv2d_transpose", [_data(rng, xs, dtype), _data(rng, ws, dtype)], **kw,
           out_dtype="int32" if dtype == "int8" else "float32")


@needs_llvmlite
def test_conv2d_transpose_not_covered_falls_back():
    rng = np.random.default_rng(3)
    x, w = _floats(rng, (1, 4, 5, 5)), _floats(rng, (4, 2, 3, 3))
    packed = _attrs("nn.conv2d_transpose", [x, w], data_layout="NCHW1n4c")
    assert jit.get_kernel("nn.conv2d_transpose", packed, [x.shape, w.shape], ["float32", "float32"]) is None
    attrs = _attrs("nn.conv2d_transpose", [x, w])
    fn = jit.get_kernel("nn.conv2d_transpose", attrs, [x.shape, w.shape], ["float32", "float32"])
    with pytest.raises(ValueError, match="compiled for input 1 of"):
        fn(attrs, x, w[:, :1])


@needs_llvmlite
def test_conv2d_resnet_stem_bit_identical():
    rng = np.random.default_rng(7)
    _check("nn.conv2d", [_floats(rng, (1, 3, 64, 64)), _floats(rng, (64, 3, 7, 7))], strides=2, padding=3)


@needs_llvmlite
def test_conv2d_padding_participates_and_subnormals():
    """0 * inf in the padding is NaN in the reference, so the kernel must add padded taps too; tiny values
    make subnormal products (no flush-to-zero on either side)."""
    rng = np.random.default_rng(3)
    x = _floats(rng, (1, 2, 6, 6), -80, -60)
    w = _floats(rng, (3, 2, 3, 3), -80, -60)
    attrs = _attrs("nn.conv2d", [x, w], padding=1)
    fn = jit.get_kernel("nn.conv2d", attrs, [x.shape, w.shape], ["float32", "float32"])
    _assert_bits(fn(attrs, x, w), KERNELS["nn.conv2d"](attrs, x, w))
    w[1, 0, 0, 0] = np.inf
    with np.errstate(invalid="ignore"):
        want = KERNELS["nn.conv2d"](attrs, x, w)
    got = fn(attrs, x, w)
    assert np.isnan(want[0, 1, 0, :]).all() and not np.isnan(want[0, 0]).any()
    np.testing.assert_array_equal(got, want)  # NaN where the reference has NaN (payload bits aside)


@needs_llvmlite
def test_signed_zeros_follow_the_reference():
    """Sums start at +0.0 as in the reference: all products -0.0 give +0.0, which folding 0 + p to p would lose."""
    x = np.zeros((1, 2, 4, 4), np.float32)
    w = -np.ones((2, 2, 3, 3), np.float32)
    _check("nn.conv2d", [x, w], padding=1)
    _check("nn.dense", [np.zeros((1, 5), np.float32), -np.ones((3, 5), np.float32)])
    _check("nn.avg_pool2d", [-np.zeros((1, 1, 4, 4), np.float32)], pool_size=2)


@needs_llvmlite
def test_non_contiguous_inputs():
    rng = np.random.default_rng(5)
    x = _floats(rng, (1, 3, 10, 12))[:, :, ::-1, ::2]
    w = _floats(rng, (4, 3, 3, 3)).transpose(0, 1, 3, 2)
    _check("nn.conv2d", [x, w], padding=1, strides=(1, 2))
    _check("nn.max_pool2d", [x], pool_size=2)
    _check("nn.global_avg_pool2d", [x])
    _check("nn.dense", [_floats(rng, (6, 3)).T, _floats(rng, (4, 6))])


@pytest.fixture
def jit_for(monkeypatch):
    """Starts the process's JIT afresh for a VTA_HOST_ISA value (the state and caches are put back after)."""
    from host.templates import target

    def start(isa: str) -> list[str]:
        monkeypatch.setenv("VTA_HOST_ISA", isa)
        monkeypatch.setattr(jit, "_STATE", None)
        monkeypatch.setattr(jit, "_CACHE", jit.KernelCache())
        target.host.cache_clear()
        irs: list[str] = []
        compile_ir = jit._compile
        monkeypatch.setattr(jit, "_compile", lambda ir, *a: irs.append(ir) or compile_ir(ir, *a))
        return irs

    yield start
    target.host.cache_clear()


def _assembly(irs: list[str]) -> str:
    """The x86 assembly of these modules, for the CPU and features the JIT compiles them for."""
    st = jit._jit()
    tm = st.target.create_target_machine(cpu=st.cpu, features=st.features, opt=3)
    return "".join(tm.emit_assembly(st.llvm.parse_assembly(ir)) for ir in irs)


@needs_llvmlite
@pytest.mark.skipif(not jit.available() or "+avx2" not in jit._jit().features.split(","),
                    reason="VTA_HOST_ISA=avx2 needs an x86 CPU with AVX2")
def test_kernels_for_an_avx2_only_cpu(jit_for):
    """VTA_HOST_ISA=avx2 builds what an AVX2-only CPU gets on any AVX2 machine: other plans (16 registers, at
    most 8 float lanes), no AVX-512 instruction, the same bits."""
    from host.templates import host

    native, native_host = jit._jit(), host()
    irs = jit_for("avx2")
    assert not jit._jit().avx512 and "-avx512f" in jit._jit().features.split(",")
    # tuned host schedules are kept apart by the CPU's fingerprint, which counts the features left on
    assert host().vector_bits == 256 and (host().fingerprint != native_host.fingerprint or not native.avx512)
    rng = np.random.default_rng(11)
    _check("nn.conv2d", [_floats(rng, (1, 5, 19, 21)), _floats(rng, (12, 5, 3, 3))], padding=1, strides=(1, 2))
    _check("nn.conv2d", [_floats(rng, (1, 3, 23, 21)), _floats(rng, (8, 3, 7, 7))], padding=3, strides=2)
    _check("nn.conv2d", [_data(rng, (1, 16, 12, 12), "int8"), _data(rng, (16, 16, 3, 3), "int8")], padding=1,
           out_dtype="int32")
    _check("nn.max_pool2d", [_data(rng, (1, 3, 19, 21), "int8")], pool_size=3, strides=2)
    _check("nn.avg_pool2d", [_floats(rng, (1, 4, 9, 10))], pool_size=3, strides=2, padding=1)
    _check("nn.dense", [_floats(rng, (2, 19)), _floats(rng, (13, 19))])
    _check("nn.dense", [_data(rng, (3, 37), "int8"), _data(rng, (21, 37), "int8")], out_dtype="int32")
    asm = _assembly(irs)
    assert "ymm" in asm and "zmm" not in asm
    if native.avx512:   # the same kernels for the CPU's own features do use AVX-512 (the check above can fail)
        irs = jit_for("auto")
        _check("nn.conv2d", [_floats(rng, (1, 5, 19, 21)), _floats(rng, (12, 5, 3, 3))], padding=1, strides=(1, 2))
        assert "zmm" in _assembly(irs)


@needs_llvmlite
def test_host_isa_is_checked(jit_for):
    jit_for("avx-512")
    with pytest.raises(ValueError, match=r"VTA_HOST_ISA=avx-512 is not a host ISA \(allowed: auto, avx2\)"):
        jit._jit()


@needs_llvmlite
@pytest.mark.parametrize("argv", [["tune", "resnet-18", "--n-trial", "2", "--image-size", "32", "--log", "t.jsonl"],
                                  ["run", "resnet-18", "--image-size", "32", "--out", "t.npz"]])
def test_a_bad_host_isa_is_refused_before_the_work(tmp_path, argv):
    """Read when a command starts, not at the first host kernel (a tuning run's end): one line, nothing written.
    Values are exact, as VTA_SIM_KERNEL's are."""
    env = {**os.environ, "VTA_HOST_ISA": "AVX2"}
    proc = subprocess.run([sys.executable, "-m", "vta", *argv], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == "vta: error: VTA_HOST_ISA=AVX2 is not a host ISA (allowed: auto, avx2)"
    assert list(tmp_path.iterdir()) == [] and "Tuning" not in proc.stdout, proc.stdout


@needs_llvmlite
@pytest.mark.skipif(not jit.available() or "+avx2" not in jit._jit().features.split(","),
                    reason="VTA_HOST_ISA=avx2 needs an x86 CPU with AVX2")
def test_a_network_with_avx2_host_kernels_gives_the_same_bits(tmp_path):
    """``vta run`` says the host kernels are limited, and its outputs are those of the CPU's own kernels."""
    outs = {}
    for isa in ("avx2", "auto"):
        proc = subprocess.run([sys.executable, "-m", "vta", "run", "resnet-18", "--image-size", "32", "--no-layers",
                               "--out", f"{isa}.npz"], cwd=tmp_path, env={**os.environ, "VTA_HOST_ISA": isa},
                              capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr
        assert ("; host kernels for avx2 (VTA_HOST_ISA)" in proc.stdout) == (isa == "avx2"), proc.stdout
        with np.load(tmp_path / f"{isa}.npz") as f:
            outs[isa] = dict(f)
    assert outs["avx2"].keys() == outs["auto"].keys()
    for k in outs["auto"]:
        _assert_bits(outs["avx2"][k], outs["auto"][k])


DENSES = [(1, 64, 100), (2, 37, 21), (3, 5, 1), (4, 300, 33)]


@needs_llvmlite
@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("n,k,m", DENSES)
def test_dense_bit_identical(n, k, m, dtype):
    rng = np.random.default_rng(n * 1000 + k + m)
    x, w = _data(rng, (n, k), dtype), _data(rng, (m, k), dtype)
    _check("nn.dense", [x, w], out_dtype="int32" if dtype == "int8" else "float32")


POOLS = {  # x shape, attrs
    "3x3 s2 p1": ((1, 4, 16, 16), {"pool_size": 3, "strides": 2, "padding": 1}),
    "2x2 default strides": ((2, 3, 9, 8), {"pool_size": 2}),
    "asymmetric, ceil": ((2, 3, 13, 11), {"pool_size": (3, 2), "strides": (2, 3), "padding": (1, 0, 2, 1),
                                          "ceil_mode": True}),
    "ceil, odd": ((1, 2, 7, 7), {"pool_size": 3, "strides": 2, "ceil_mode": True}),
    "stride 1 wide": ((1, 2, 5, 40), {"pool_size": (2, 3), "strides": 1, "padding": (0, 1, 1, 0)}),
    "tiny input, ceil": ((1, 2, 2, 1), {"pool_size": 3, "strides": 2, "padding": 1, "ceil_mode": True}),
    "large window": ((1, 2, 20, 30), {"pool_size": 9, "strides": 1, "padding": 2}),
}


@needs_llvmlite
@pytest.mark.parametrize("dtype", ["float32", "int8", "uint8", "int32"])
@pytest.mark.parametrize("case", list(POOLS))
def test_max_pool2d_bit_identical(case, dtype):
    shape, kw = POOLS[case]
    x = _data(np.random.default_rng(len(case)), shape, dtype)
    _check("nn.max_pool2d", [x], **kw)


@needs_llvmlite
@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("case", list(POOLS))
def test_avg_pool2d_bit_identical(case, count_include_pad):
    shape, kw = POOLS[case]
    x = _floats(np.random.default_rng(len(case) + 1), shape)
    _check("nn.avg_pool2d", [x], **kw, count_include_pad=count_include_pad)


@needs_llvmlite
@pytest.mark.parametrize("shape", [(1, 16, 7, 7), (2, 5, 3, 4), (1, 9, 1, 1)])
def test_global_avg_pool2d_bit_identical(shape):
    _check("nn.global_avg_pool2d", [_floats(np.random.default_rng(shape[1]), shape)])


@needs_llvmlite
@pytest.mark.parametrize("epilogue", jit.EPILOGUES)
@pytest.mark.parametrize("case", ["stem 7x7 s2", "groups 2", "depthwise s2", "channel tail", "odd sizes"])
def test_conv2d_epilogue_bit_identical(case, epilogue):
    """A float conv2d with bias_add and/or relu applied as it stores each output equals the references run one
    after the other, bit for bit: negative sums, zeros, infinities and NaN included."""
    xs, ws, kw = CONVS[case]
    rng = np.random.default_rng(sum(map(ord, case)) + len(epilogue))
    x, w, b = _floats(rng, xs), _floats(rng, ws), _floats(rng, (ws[0],))
    x.flat[:3] = np.nan, np.inf, -np.inf
    b[:2] = -0.0, 0.0
    attrs = _attrs("nn.conv2d", [x, w], **kw)
    fn = jit.get_kernel("nn.conv2d", attrs, [x.shape, w.shape], ["float32", "float32"], epilogue)
    assert fn is not None
    # the infinities above meet in the reference's sums (inf + -inf: NaN, as in the JIT's), which numpy reports
    # as an invalid value: expected here, and nowhere else in this file
    with np.errstate(invalid="ignore"):
        want = KERNELS["nn.conv2d"](attrs, x, w)
    for op in epilogue:
        want = KERNELS[op]({"axis": 1}, want, b) if op == "nn.bias_add" else KERNELS[op]({}, want)
    assert np.isnan(want).any() and (want < 0).any() == ("nn.relu" not in epilogue)
    _assert_bits(fn(attrs, x, w, *[b] * ("nn.bias_add" in epilogue)), want)
    if "nn.bias_add" in epilogue:
        with pytest.raises(ValueError, match="compiled for input 2"):
            fn(attrs, x, w, b[:-1])


QUANT_POOLS = {   # input shape, attrs, packed layout
    "stem": ((1, 32, 23, 21), {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}, "NCHW1n16c"),
    "ceil, batch 2": ((2, 16, 9, 10), {"pool_size": (2, 2), "strides": (2, 2), "ceil_mode": True}, "NCHW2n16c"),
    "1x1, blocks of 8": ((1, 24, 5, 7), {"pool_size": (1, 1)}, "NCHW1n8c"),
}


@needs_llvmlite
@pytest.mark.parametrize("case", QUANT_POOLS)
@pytest.mark.parametrize("pack", [False, True])
def test_max_pool_quantize_pack_epilogue_bit_identical(case, pack):
    """A float max_pool2d that quantizes each max to int8 (and stores it packed) as it stores it equals
    max_pool2d, qnn.quantize (and layout_transform) run one after the other: halves that round up, values that
    clip, NaN (numpy's cast of it), infinities and -0.0 included."""
    shape, kw, layout = QUANT_POOLS[case]
    rng = np.random.default_rng(len(case) + pack)
    scale = 0.0371
    x = _floats(rng, shape, -12, 4)
    x.flat[::7] = (rng.integers(-200, 200, x.flat[::7].shape) + 0.5) * np.float32(scale)   # near .5 steps
    x[0, 1] = -np.abs(x[0, 1]) - 10   # a channel whose maxima clip to -127
    x.flat[:5] = np.nan, np.inf, -np.inf, -0.0, 1e30
    attrs = _attrs("nn.max_pool2d", [x], **kw)
    quant = {**OPS["qnn.quantize"].defaults, "scale": scale, "out_dtype": "int8"}
    lt = {**OPS["layout_transform"].defaults, "src_layout": "NCHW", "dst_layout": layout}
    epilogue = [("qnn.quantize", quant), *[("layout_transform", lt)] * pack]
    fn = jit.get_kernel("nn.max_pool2d", attrs, [shape], ["float32"], epilogue)
    assert fn is not None
    with np.errstate(invalid="ignore"):
        want = KERNELS["qnn.quantize"](quant, KERNELS["nn.max_pool2d"](attrs, x))
    if pack:
        want = KERNELS["layout_transform"](lt, want)
    assert {-127, 127} <= set(np.unique(want).tolist())
    for _ in range(2):
        _assert_bits(fn(attrs, x), want)


@needs_llvmlite
def test_epilogues_not_covered():
    """Integer convs, other ops, other orders and other epilogue ops get None (the caller runs the ops apart)."""
    shapes, f32, i8 = [(1, 4, 8, 8), (4, 4, 3, 3)], ["float32", "float32"], ["int8", "int8"]
    conv = {**OPS["nn.conv2d"].defaults, "padding": (1, 1, 1, 1)}
    assert jit.get_kernel("nn.conv2d", {**conv, "out_dtype": "int32"}, shapes, i8, ["nn.relu"]) is None
    assert jit.get_kernel("nn.conv2d", conv, shapes, f32, ["nn.relu", "nn.bias_add"]) is None
    assert jit.get_kernel("nn.conv2d", conv, shapes, f32, ["clip"]) is None
    assert jit.get_kernel("nn.dense", OPS["nn.dense"].defaults, [(1, 8), (4, 8)], f32, ["nn.relu"]) is None
    assert jit.get_kernel("nn.conv2d", conv, shapes, f32, ["nn.relu"]) is not None
    # max_pool2d: quantize to int8, then a packing of whole blocks only
    pool, x = {**OPS["nn.max_pool2d"].defaults, "pool_size": (2, 2)}, [(1, 16, 8, 8)]
    q8 = ("qnn.quantize", {"scale": 0.5, "out_dtype": "int8"})
    pack = ("layout_transform", {"src_layout": "NCHW", "dst_layout": "NCHW1n16c"})
    assert jit.get_kernel("nn.max_pool2d", pool, x, ["float32"], [q8, pack]) is not None
    assert jit.get_kernel("nn.max_pool2d", pool, x, ["float32"], [pack]) is None
    assert jit.get_kernel("nn.max_pool2d", pool, x, ["int8"], [q8]) is None
    assert jit.get_kernel("nn.max_pool2d", pool, x, ["float32"], [("qnn.quantize", {"scale": 0.5, "out_dtype": "uint8"})]) is None
    assert jit.get_kernel("nn.max_pool2d", pool, x, ["float32"], [("qnn.quantize", {"scale": 0.0})]) is None
    assert jit.get_kernel("nn.max_pool2d", pool, x, ["float32"], [("qnn.quantize", {})]) is None
    assert jit.get_kernel("nn.max_pool2d", pool, [(1, 8, 8, 8)], ["float32"], [q8, pack]) is None   # half a block
    assert jit.get_kernel("nn.avg_pool2d", pool, x, ["float32"], [q8]) is None
    assert jit.get_kernel("nn.conv2d", conv, shapes, f32, [q8]) is None


@needs_llvmlite
def test_cache_returns_the_same_function():
    rng = np.random.default_rng(0)
    x, w = _floats(rng, (1, 4, 8, 8)), _floats(rng, (4, 4, 3, 3))
    attrs = _attrs("nn.conv2d", [x, w], padding=1)
    fn = jit.get_kernel("nn.conv2d", attrs, [x.shape, w.shape], ["float32", "float32"])
    compiled = jit._COUNTER[0]   # kernels compiled so far in this process
    assert jit.get_kernel("nn.conv2d", dict(attrs), [x.shape, w.shape], ["float32", "float32"]) is fn
    assert jit._COUNTER[0] == compiled   # nothing compiled again
    other = jit.get_kernel("nn.conv2d", {**attrs, "strides": (2, 2)}, [x.shape, w.shape], ["float32", "float32"])
    assert other is not fn


@needs_llvmlite
def test_wrong_input_is_refused():
    x, w = np.zeros((1, 4, 8, 8), np.float32), np.zeros((4, 4, 3, 3), np.float32)
    attrs = _attrs("nn.conv2d", [x, w])
    fn = jit.get_kernel("nn.conv2d", attrs, [x.shape, w.shape], ["float32", "float32"])
    with pytest.raises(ValueError, match="compiled for"):
        fn(attrs, np.zeros((1, 4, 9, 8), np.float32), w)
    with pytest.raises(ValueError, match="compiled for"):
        fn(attrs, x.astype(np.float64), w)


@pytest.mark.parametrize("op,shapes,dtypes,kw", [
    ("nn.conv2d", [(1, 4, 8, 8), (4, 4, 3, 3)], ["float64", "float64"], {}),
    ("nn.conv2d", [(1, 4, 8, 8), (4, 4, 3, 3)], ["int8", "int8"], {"out_dtype": "int8"}),
    ("nn.conv2d", [(1, 4, 8, 8), (4, 4, 3, 3)], ["uint8", "int8"], {"out_dtype": "int32"}),
    ("nn.conv2d", [(1, 4, 8, 8), (4, 4, 3, 3)], ["int16", "int16"], {"out_dtype": "int32"}),
    ("nn.conv2d", [(1, 1, 8, 8, 1, 16), (1, 1, 3, 3, 16, 16)], ["int8", "int8"],
     {"out_dtype": "int32", "data_layout": "NCHW1n16c", "kernel_layout": "OIHW16o16i"}),
    ("nn.dense", [(1, 8), (4, 8)], ["int8", "int8"], {"out_dtype": "int8"}),
    ("nn.dense", [(1, 8), (4, 8)], ["float16", "float16"], {}),
    ("nn.avg_pool2d", [(1, 4, 8, 8)], ["int8"], {}),
    ("nn.max_pool2d", [(1, 4, 8, 8)], ["float64"], {}),
    ("nn.global_avg_pool2d", [(1, 4, 8, 8)], ["int32"], {}),
    ("nn.relu", [(1, 4, 8, 8)], ["float32"], {}),
    ("nn.conv2d_transpose", [(1, 4, 8, 8), (4, 4, 3, 3)], ["float64", "float64"], {}),
    ("nn.conv2d_transpose", [(1, 4, 8, 8), (4, 4, 3, 3)], ["int8", "int8"], {"out_dtype": "int8"}),
])
def test_uncovered_returns_none(op, shapes, dtypes, kw):
    """The caller falls back to the numpy kernel; deciding this needs no llvmlite."""
    assert jit.get_kernel(op, {**OPS[op].defaults, **kw}, shapes, dtypes) is None


def test_missing_llvmlite_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(jit, "_STATE", None)
    monkeypatch.setattr(jit, "_CACHE", jit.KernelCache())
    monkeypatch.setitem(sys.modules, "llvmlite", None)
    monkeypatch.setitem(sys.modules, "llvmlite.binding", None)
    assert not jit.available()
    attrs = {**OPS["nn.dense"].defaults, "out_dtype": "float32"}
    with pytest.raises(ImportError, match=r"llvmlite is a core dependency\) or pip install llvmlite"):
        jit.get_kernel("nn.dense", attrs, [(1, 8), (4, 8)], ["float32", "float32"])


def test_the_kernel_cache_keeps_the_most_recently_used():
    """A process building network after network keeps at most MAX_CACHED_KERNELS compiled kernels (each holds its
    machine code and staging buffers); the least recently used goes first and is compiled again when asked for."""
    cache, made = jit.KernelCache(2), []

    def make(name):
        return lambda: made.append(name) or name

    assert [cache.get((k,), make(k)) for k in "abac"] == list("abac")
    assert made == ["a", "b", "c"] and len(cache) == 2          # "a" was used after "b": "b" went
    assert cache.get(("a",), make("a")) == "a" and made == ["a", "b", "c"]
    assert cache.get(("b",), make("b")) == "b" and made == ["a", "b", "c", "b"]


@needs_llvmlite
def test_get_kernel_stays_within_the_cache_limit(monkeypatch):
    monkeypatch.setattr(jit, "_CACHE", jit.KernelCache())
    monkeypatch.setattr(jit, "MAX_CACHED_KERNELS", 2)   # the documented setting, read as kernels are added
    rng = np.random.default_rng(5)
    for k in (19, 23, 29):
        _check("nn.dense", [_floats(rng, (2, k)), _floats(rng, (3, k))])
    assert len(jit._CACHE) == 2
    _check("nn.dense", [_floats(rng, (2, 19)), _floats(rng, (3, 19))])   # compiled again, the same bits
