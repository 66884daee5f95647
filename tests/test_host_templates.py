"""The host (CPU) templates: every space enumerable, every config sampled here agreeing with a float64 numpy
oracle (np.allclose, tight tolerance: the kernels reassociate sums), the epilogues, the refusals, and the same
kernels compiled to AArch64 and ARMv7 object code, linked by Debian's cross gcc and run under qemu-aarch64 and
qemu-arm against numpy (`bash .ci/arm-cross.sh` installs them)."""

from __future__ import annotations

import gc
import re
import subprocess

import numpy as np
import pytest
from extras import need, needs

from host.templates import AARCH64, ARMV7, HOST_TEMPLATES, host_template_of, object_code
from host.templates.conv2d import conv_reference
from host.templates.dense import DensePack
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


# Running ARM kernels: each target's cross gcc links the kernels' object code with DRIVER into one static program,
# which qemu-user runs on the target's own CPU model (so an instruction that CPU lacks fails the run).
CROSS_TOOLCHAIN = {AARCH64: "aarch64-toolchain", ARMV7: "armv7-toolchain"}   # the test need giving gcc and qemu
CROSS_TARGETS = [pytest.param(t, id=name.split("-")[0], marks=needs(name)) for t, name in CROSS_TOOLCHAIN.items()]
GUARD = 64   # bytes after each buffer that the kernel must leave alone
DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define ARGS %(arity)d
#define GUARD %(guard)d
typedef void kernel_fn(%(params)s);
kernel_fn %(names)s;
static kernel_fn *const KERNELS[] = {%(names)s};
/* argv: which kernel, then each argument's size in bytes; stdin: every argument but the last (the output), which
   starts as 0xff bytes (NaN, -1) so an output the kernel never writes is caught; stdout: the output. */
int main(int argc, char **argv) {
    size_t size[ARGS];
    unsigned char *a[ARGS];
    if (argc != ARGS + 2) {
        fprintf(stderr, "usage: %%s KERNEL_INDEX then %%d argument sizes in bytes\n", argv[0], ARGS);
        return 64;
    }
    for (int i = 0; i < ARGS; i++) {
        size[i] = strtoul(argv[i + 2], NULL, 10);
        a[i] = malloc(size[i] + GUARD);
        memset(a[i], 0xff, size[i]);
        memset(a[i] + size[i], 0xa5, GUARD);
        if (i < ARGS - 1 && fread(a[i], 1, size[i], stdin) != size[i]) {
            fprintf(stderr, "stdin ended before argument %%d\n", i);
            return 65;
        }
    }
    KERNELS[atoi(argv[1])](%(call)s);
    for (int i = 0; i < ARGS; i++)
        for (int j = 0; j < GUARD; j++)
            if (a[i][size[i] + j] != 0xa5) {
                fprintf(stderr, "the kernel wrote past argument %%d (%%zu bytes)\n", i, size[i]);
                return 66;
            }
    fwrite(a[ARGS - 1], 1, size[ARGS - 1], stdout);
    return 0;
}
"""


def _cross_program(target, codes: list[bytes], arity: int, where) -> str:
    """One static program for ``target`` holding the kernels' object ``codes`` (their functions named kernel0,
    kernel1, ..., each taking ``arity`` pointers; libm linked in), run by ``_run_under_qemu``."""
    cross, _ = need(CROSS_TOOLCHAIN[target])
    where.mkdir(parents=True, exist_ok=True)
    objects = []
    for i, code in enumerate(codes):
        objects.append(where / f"kernel{i}.o")
        objects[-1].write_bytes(code)
    names = ", ".join(f"kernel{i}" for i in range(len(codes)))
    (where / "driver.c").write_text(DRIVER % {"arity": arity, "guard": GUARD, "names": names,
                                              "params": ", ".join(["void *"] * arity),
                                              "call": ", ".join(f"a[{i}]" for i in range(arity))})
    exe = where / "kernels"
    done = subprocess.run([cross, "-O1", "-static", "-Wall", "-Werror", "-o", str(exe), str(where / "driver.c"),
                           *map(str, objects), "-lm"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{cross} could not link the kernels:\n{done.stderr}"
    return str(exe)


def _run_under_qemu(target, exe: str, index: int, args: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    """kernel<index>(*args, out) run under qemu-user; returns what it wrote into ``out``'s shape and dtype."""
    _, qemu = need(CROSS_TOOLCHAIN[target])
    sizes = [a.nbytes for a in args] + [out.nbytes]
    done = subprocess.run([qemu, "-cpu", target.cpu, exe, str(index), *map(str, sizes)],
                          input=b"".join(np.ascontiguousarray(a).tobytes() for a in args),
                          capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, f"kernel{index} under {qemu}: exit {done.returncode}, {done.stderr.decode()[-500:]}"
    assert len(done.stdout) == out.nbytes
    return np.frombuffer(done.stdout, out.dtype).reshape(out.shape)


def _kernel_args(t, config, inputs: dict, epilogue: tuple) -> tuple[list[np.ndarray], np.ndarray]:
    """A kernel's arguments but the output, in its order, as its build() passes them (packed weights, a zeroed
    staging scratch for conv, one float for an unused bias or residual), and an empty output."""
    unused = np.zeros(1, np.float32)
    bias = inputs["bias"] if "bias" in epilogue else unused
    if isinstance(t, DensePack):
        wp = t.pack_kernel(inputs["kernel"], t.checked(config)["tile_x"][1])
        return [inputs["data"], wp, bias], np.empty((t.n, t.m), np.float32)
    p, s = t.p, t.sched(t.checked(config))
    scratch = np.zeros(p.n * p.c * (p.h + p.pt + p.pb) * (p.w + p.pl + p.pr), inputs["data"].dtype)
    residual = inputs["residual"] if "residual" in epilogue else unused
    out = np.empty(t.out_shape, np.int32 if t.integer else np.float32)
    return [inputs["data"], scratch, t.pack_kernel(inputs["kernel"], s), bias, residual], out


def _covering(t, seed: int = 0) -> list[dict]:
    """The default config, then valid configs picked greedily until every value of every knob that some valid
    config takes (each tile size, vectorize, unroll_kw, reorder) has been run."""
    space = t.space()

    def values(config: dict) -> set:
        return {(name, repr(v)) for name, v in config.items()}

    picked = [space.normalize(t.default_config())]
    seen = values(picked[0])
    for i in np.random.default_rng(seed).permutation(len(space)):
        config = space.normalize(space[int(i)])
        if not values(config) <= seen and t.check(config) is None:
            picked.append(config)
            seen |= values(config)
    return picked


# what the ARM boards run: the ARM conv2d (stride 1 and 2: the wide loads and shuffles of vectorize=1), and the
# depthwise, dense and int8 conv templates that an ARM CPU's tasks take too; float ones with their epilogues
QEMU_RUNS = [("conv2d_nchw_spatial_pack.arm", CONV, ("bias", "residual", "relu")),
             ("conv2d_nchw_spatial_pack.arm", STRIDED, ("bias", "relu")),
             ("depthwise_conv2d_NCHWc.x86", DEPTHWISE, ("bias", "residual", "relu")),
             ("dense_pack.x86", DENSE, ("bias", "relu")),
             ("conv2d_NCHWc_int8.x86", CONV, ())]


@pytest.mark.parametrize("target", CROSS_TARGETS)
@pytest.mark.parametrize(("op", "workload", "epilogue"), QEMU_RUNS,
                         ids=["spatial-pack", "spatial-pack-stride2", "depthwise", "dense", "int8-conv"])
def test_arm_kernels_run_under_qemu_and_agree_with_numpy(target, op, workload, epilogue, tmp_path):
    t = host_template_of(op).parse(op, target, (), dict(workload))   # the ARM CPU's lanes, registers, default
    configs = _covering(t)
    if op == "conv2d_nchw_spatial_pack.arm":
        assert all({c[knob] for c in configs} == {0, 1} for knob in ("vectorize", "unroll_kw", "reorder"))
    rng = np.random.default_rng(7)
    inputs = t.random_inputs(rng)
    out_shape = (t.n, t.m) if isinstance(t, DensePack) else t.out_shape
    inputs |= {"bias": rng.standard_normal(out_shape[1]).astype(np.float32),
               "residual": rng.standard_normal(out_shape).astype(np.float32)}
    want = t.reference(**{k: v for k, v in inputs.items() if k in ("data", "kernel", *epilogue)},
                       relu="relu" in epilogue)
    calls = [_kernel_args(t, config, inputs, epilogue) for config in configs]
    exe = _cross_program(target, [object_code(t.ir(c, target, epilogue, name=f"kernel{i}"), target)
                                  for i, c in enumerate(configs)], len(calls[0][0]) + 1, tmp_path)
    for i, (config, (args, out)) in enumerate(zip(configs, calls)):
        got = _run_under_qemu(target, exe, i, args, out)
        assert _close(got, want), (config, float(np.abs(got.astype(np.float64) - want).max()))


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


@pytest.mark.parametrize(("op", "workload", "field"), [
    ("conv2d_NCHWc.x86", {**CONV, "data_shape": (1, 8, 10**30, 9)}, "data_shape H="),
    ("conv2d_nchw_spatial_pack.arm", {**CONV, "kernel_shape": (2**31, 8, 3, 3), "data_shape": (1, 8, 7, 9)},
     "kernel_shape O=2147483648"),
    ("conv2d_NCHWc_int8.x86", {**CONV, "padding": (2**40, 1)}, "strides / dilation / padding PT="),
    ("depthwise_conv2d_NCHWc.x86", {**DEPTHWISE, "data_shape": (1, 32, 9, 10**20)}, "data_shape W="),
    ("dense_pack.x86", {"data_shape": (2, 10**30), "kernel_shape": (40, 10**30)}, "data_shape / kernel_shape K="),
])
def test_a_host_dimension_past_the_limit_is_refused_when_parsed(op, workload, field):
    """A host workload (from a log, say) with a dimension of 10^30 hung building its knob space from divisors:
    each dimension is at most 2^31 - 1, refused in one line naming it."""
    import signal

    def hung(*_):
        raise TimeoutError(f"{op}: parsing took over 5 s")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(5)
    try:
        with pytest.raises(ValueError, match=rf"{op}: {re.escape(field)}.* is above the limit 2147483647 "
                                             r"\(2\^31 - 1, the host templates' limit\)"):
            _template(op, workload).space()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize(("op", "workload", "tensor"), [
    ("conv2d_NCHWc.x86", {**CONV, "padding": (10**7, 1)}, "padded input"),
    ("dense_pack.x86", {"data_shape": (2**15, 2**15), "kernel_shape": (40, 2**15)}, "data"),
    ("depthwise_conv2d_NCHWc.x86", {**DEPTHWISE, "data_shape": (1, 32, 2**14, 2**14)}, "padded input"),
])
def test_a_host_tensor_past_the_limit_is_refused_when_parsed(op, workload, tensor):
    """Dimensions under 2^31 can still make a tensor of terabytes (a padding of 10^6 asked for a 12.9 GiB float64
    reference when measured): each tensor is at most 2^29 elements, refused in one line naming it."""
    with pytest.raises(ValueError, match=rf"{op}: its {tensor} would have [\d,]+ elements, above the limit "
                                         r"536,870,912 \(2\^29"):
        _template(op, workload)


def test_a_dropped_kernel_takes_its_compiled_module_with_it():
    """Host tuning compiles config after config in one process (a CpuRunner's worker, a --device cpu server):
    no LLVM module (IR and machine code, ~65 KB each) may outlive its kernel. One engine for the process kept
    every module it was ever given."""
    import llvmlite.binding as llvm

    def modules() -> int:
        gc.collect()
        return sum(isinstance(o, llvm.ModuleRef) for o in gc.get_objects())

    t = _template("conv2d_NCHWc.x86", CONV)
    inputs = t.random_inputs(np.random.default_rng(0))
    configs = _valid(t, 6, seed=1)
    t.build(configs[0])(inputs["data"], inputs["kernel"])   # the first compile creates what lives per process
    before = modules()
    for config in configs[1:]:
        kernel = t.build(config)
        assert _close(kernel(inputs["data"], inputs["kernel"]), t.reference(**inputs))
        del kernel
    assert modules() == before


def test_a_dropped_kernel_frees_its_engine_only_between_compiles():
    """LLVM's global context is not thread-safe: a kernel dropped in one thread frees its engine under the JIT's
    lock, so never while another thread compiles (it was freed wherever its last reference went)."""
    import threading
    import weakref

    from host import jit
    t = _template("conv2d_NCHWc.x86", CONV)
    held = [t.build(_valid(t, 1, seed=2)[0])]
    engine = next(c.cell_contents.engine for c in held[0].run.__closure__ if hasattr(c.cell_contents, "engine"))
    ref = weakref.ref(getattr(engine, "ref", engine))   # the llvmlite ExecutionEngine

    def freed() -> bool:
        return ref() is None or ref()._closed

    del engine
    dropped = threading.Event()

    def drop() -> None:
        held.clear()                     # the kernel's last reference goes in this thread
        dropped.set()

    with jit._LOCK:                      # while another thread compiles
        threading.Thread(target=drop, daemon=True).start()
        dropped.wait(0.5)
        assert not freed()               # the dropping thread waits for the lock
    assert dropped.wait(30) and freed()
