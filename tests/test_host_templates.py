"""The host (CPU) templates: every space enumerable, every config sampled here agreeing with a float64 numpy
oracle (np.allclose, tight tolerance: the kernels reassociate sums), the epilogues, the refusals, and the same
kernels compiled for AArch64 and ARMv7 object code (run under qemu-arm and checked against numpy where the armhf
cross compiler is installed)."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from extras import need, needs

from graph_pack.host_templates import AARCH64, ARMV7, HOST_TEMPLATES, host_template_of
from graph_pack.host_templates.conv2d import conv_reference, pack_weights
from vta.runtime import ScheduleError

pytestmark = needs("llvmlite")

CONV = {"data_shape": (1, 8, 7, 9), "kernel_shape": (16, 8, 3, 3), "strides": (1, 1), "padding": (1, 1)}
STRIDED = {"data_shape": (1, 3, 11, 12), "kernel_shape": (8, 3, 5, 5), "strides": (2, 2), "padding": (2, 1, 2, 1)}
DENSE = {"data_shape": (2, 24), "kernel_shape": (40, 24)}
DEPTHWISE = {"data_shape": (1, 32, 9, 8), "kernel_shape": (32, 1, 3, 3), "strides": (2, 1), "padding": (1, 1)}
CASES = [("conv2d_NCHWc.x86", CONV), ("conv2d_NCHWc.x86", STRIDED), ("conv2d_nchw_spatial_pack.arm", CONV),
         ("conv2d_nchw_spatial_pack.arm", STRIDED), ("dense_pack.x86", DENSE),
         ("depthwise_conv2d_NCHWc.x86", DEPTHWISE), ("conv2d_NCHWc_int8.x86", CONV)]


def _template(op: str, workload: dict):
    return host_template_of(op).parse(op, None, (), dict(workload))


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    """float32: within 1e-5 of the largest value of the float64 oracle; int32: exactly the oracle's sums."""
    if np.issubdtype(want.dtype, np.integer):
        return got.dtype == np.int32 and np.array_equal(got, want)
    return got.dtype == np.float32 and np.allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def _valid(t, count: int, seed: int = 0) -> list[dict]:
    space, picked = t.space(), []
    for i in np.random.default_rng(seed).permutation(len(space)):
        if t.check(space[int(i)]) is None:
            picked.append(space[int(i)])
        if len(picked) == count:
            break
    return picked


@pytest.mark.parametrize(("op", "workload"), CASES)
def test_sampled_configs_agree_with_a_float64_numpy_oracle(op, workload):
    t = _template(op, workload)
    space = t.space()
    assert len(list(space)) == len(space) > 1   # enumerable: every index names a config
    inputs = t.random_inputs(np.random.default_rng(1))
    x, w = inputs["data"], inputs["kernel"]
    calc = np.int64 if x.dtype == np.int8 else np.float64   # int8: exact sums (these never wrap)
    if "conv" in op:   # the oracle, independent of the template: a direct loop in float64 (int64)
        p = t.p
        xp = np.pad(x.astype(calc), ((0, 0), (0, 0), (p.pt, p.pb), (p.pl, p.pr)))
        want = np.zeros(t.out_shape, calc)
        for i in range(p.kh):
            for j in range(p.kw):
                win = xp[:, :, i:i + p.sh * (p.oh - 1) + 1:p.sh, j:j + p.sw * (p.ow - 1) + 1:p.sw]
                if op.startswith("depthwise"):
                    want += win * w[None, :, 0, i, j, None, None].astype(calc)
                else:
                    want += np.einsum("nchw,oc->nohw", win, w[:, :, i, j].astype(calc))
    else:
        want = x.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(t.reference(**inputs), want, rtol=1e-12, atol=1e-9)
    assert t.reference(**inputs).dtype == (np.int32 if calc is np.int64 else np.float64)
    for config in [None, *_valid(t, 4)]:
        for _ in range(2):   # twice in one process: a fresh kernel each time
            got = t.build(config)(x, w)
            assert _close(got, want), (config, float(np.abs(got - want).max()))


@pytest.mark.parametrize(("op", "workload"), [("conv2d_NCHWc.x86", CONV), ("conv2d_nchw_spatial_pack.arm", CONV),
                                               ("depthwise_conv2d_NCHWc.x86", DEPTHWISE)])
@pytest.mark.parametrize("epilogue", [("bias",), ("bias", "relu"), ("bias", "residual", "relu"), ("relu",)])
def test_conv_epilogues_follow_the_graph_order(op, workload, epilogue):
    t = _template(op, workload)
    rng = np.random.default_rng(2)
    inputs = t.random_inputs(rng)
    bias = rng.standard_normal(t.out_shape[1]).astype(np.float32)
    res = rng.standard_normal(t.out_shape).astype(np.float32)
    extra = {"bias": bias if "bias" in epilogue else None, "residual": res if "residual" in epilogue else None}
    want = conv_reference(inputs["data"], inputs["kernel"], t.p, depthwise=t.depthwise)
    if "bias" in epilogue:
        want = want + bias[None, :, None, None]
    if "residual" in epilogue:
        want = want + res
    if "relu" in epilogue:
        want = np.maximum(want, 0)
    got = t.build(_valid(t, 1, seed=3)[0], epilogue)(inputs["data"], inputs["kernel"], **extra)
    assert _close(got, want)


def test_the_kernel_packs_a_new_weight_array_and_refuses_wrong_shapes():
    t = _template("conv2d_NCHWc.x86", CONV)
    kernel = t.build()
    rng = np.random.default_rng(4)
    inputs = t.random_inputs(rng)
    first = kernel(inputs["data"], inputs["kernel"])
    w2 = rng.standard_normal(inputs["kernel"].shape).astype(np.float32)
    assert _close(kernel(inputs["data"], w2), conv_reference(inputs["data"], w2, t.p))
    assert _close(kernel(inputs["data"], inputs["kernel"]), conv_reference(inputs["data"], inputs["kernel"], t.p))
    assert not np.allclose(first, kernel(inputs["data"], w2))
    with pytest.raises(ValueError, match=r"data must be \(1, 8, 7, 9\) float32"):
        kernel(inputs["data"].astype(np.float64), inputs["kernel"])


def test_configs_and_workloads_the_template_refuses_name_why():
    t = _template("conv2d_NCHWc.x86", {**CONV, "data_shape": (1, 64, 32, 32), "kernel_shape": (64, 64, 3, 3)})
    big = {"tile_ic": [1, 64], "tile_oc": [1, 64], "tile_ow": [1, 32], "unroll_kw": 1}
    assert "vector accumulators" in t.check(t.space().normalize(big))
    with pytest.raises(ScheduleError, match="config refused: .*vector accumulators"):
        t.build(big)
    with pytest.raises(ScheduleError, match=r"knob tile_ow=\[3, 3\] is not allowed"):
        t.build({**t.default_config(), "tile_ow": [3, 3]})
    with pytest.raises(ValueError, match="takes 4 input channels, the data has 8"):
        _template("conv2d_NCHWc.x86", {**CONV, "kernel_shape": (16, 4, 3, 3)})
    with pytest.raises(ValueError, match="unknown workload argument"):
        _template("dense_pack.x86", {**DENSE, "strides": 1})
    with pytest.raises(ValueError, match="unknown host template 'conv9'; allowed: "):
        host_template_of("conv9")
    with pytest.raises(ValueError, match="host epilogue"):
        t.build(None, ("residual", "bias"))
    with pytest.raises(ValueError, match="stores its int32 sums as they are: no epilogue"):
        _template("conv2d_NCHWc_int8.x86", CONV).build(None, ("relu",))
    assert set(HOST_TEMPLATES) >= {"conv2d_NCHWc.x86", "conv2d_nchw_spatial_pack.arm", "dense_pack.x86"}


ELF_MACHINE = {AARCH64.triple: (2, 183), ARMV7.triple: (1, 40)}   # (ELF class: 2 = 64-bit, e_machine)


@pytest.mark.parametrize("target", [AARCH64, ARMV7], ids=["aarch64", "armv7"])
@pytest.mark.parametrize(("op", "workload"), CASES[::2] + CASES[-1:])
def test_the_same_kernels_compile_for_arm_targets(target, op, workload):
    t = _template(op, workload)
    for config in [None, _valid(t, 1, seed=5)[0]]:
        obj = t.object_code(config, target)
        assert obj[:4] == b"\x7fELF"
        elf_class, machine = ELF_MACHINE[target.triple]
        assert obj[4] == elf_class and int.from_bytes(obj[18:20], "little") == machine
        assert b"kernel" in obj   # the symbol the board's harness calls


HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
void kernel(float *, float *, float *, float *, float *, float *);
int main(int argc, char **argv) {
    long n[4];
    for (int i = 0; i < 4; i++) n[i] = atol(argv[i + 1]);   /* input, scratch, packed weights, output */
    float *x = malloc(4 * n[0]), *s = calloc(n[1], 4), *w = malloc(4 * n[2]), *o = malloc(4 * n[3]), z = 0;
    if (fread(x, 4, n[0], stdin) != (size_t)n[0] || fread(w, 4, n[2], stdin) != (size_t)n[2]) return 2;
    kernel(x, s, w, &z, &z, o);
    fwrite(o, 4, n[3], stdout);
    return 0;
}
"""


def test_an_armv7_conv_kernel_runs_under_qemu_and_agrees_with_numpy(tmp_path):
    cross, qemu = need("armv7-toolchain")
    t = _template("conv2d_nchw_spatial_pack.arm", STRIDED)
    config = _valid(t, 1, seed=6)[0]
    (tmp_path / "conv.o").write_bytes(t.object_code(config, ARMV7))
    (tmp_path / "main.c").write_text(HARNESS)
    exe = tmp_path / "conv"
    subprocess.run([cross, "-O1", "-static", "-o", str(exe), str(tmp_path / "main.c"), str(tmp_path / "conv.o")],
                   check=True, capture_output=True, timeout=120)
    inputs = t.random_inputs(np.random.default_rng(7))
    s = t.sched(config)
    wp = pack_weights(inputs["kernel"], s.ic_bn, s.oc_bn)
    p = t.p
    sizes = [inputs["data"].size, p.n * p.c * (p.h + p.pt + p.pb) * (p.w + p.pl + p.pr), wp.size,
             int(np.prod(t.out_shape))]
    done = subprocess.run([qemu, str(exe), *map(str, sizes)], input=inputs["data"].tobytes() + wp.tobytes(),
                          capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    got = np.frombuffer(done.stdout, np.float32).reshape(t.out_shape)
    assert _close(got, t.reference(**inputs))


@pytest.mark.parametrize("workload", [CONV, STRIDED], ids=["stride1", "stride2"])
def test_the_arm_template_vectorises_output_channels_or_output_columns(workload):
    t = _template("conv2d_nchw_spatial_pack.arm", workload)
    rng = np.random.default_rng(8)
    inputs = t.random_inputs(rng)
    bias = rng.standard_normal(t.out_shape[1]).astype(np.float32)
    res = rng.standard_normal(t.out_shape).astype(np.float32)
    want = np.maximum(conv_reference(inputs["data"], inputs["kernel"], t.p) + bias[None, :, None, None] + res, 0)
    for vectorize in (0, 1):
        configs = [c for c in _valid(t, 60, seed=9) if c["vectorize"] == vectorize][:3]
        assert configs
        for config in configs:
            got = t.build(config, ("bias", "residual", "relu"))(inputs["data"], inputs["kernel"], bias, res)
            assert _close(got, want), config
