"""The core on a Pynq board's Python: run by tests/test_py310.py in the venv of .ci/py310-venv.sh (Python 3.10,
the PYNQ image's numpy and cffi, no llvmlite), with the package installed by that venv's pip on PYTHONPATH.

    python tests/board_python_smoke.py WORKDIR

Prints one ``ok: ...`` line per check and ``board-python: N passed, 0 failed`` last; any failure raises. The
notice that the host layers run on numpy goes to stderr as a warning, once however many builds there are.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

CHECKS: list[str] = []


def ok(what: str) -> None:
    CHECKS.append(what)
    print(f"ok: {what}", flush=True)


def check_environment() -> None:
    import cffi

    import vta

    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, cffi {cffi.__version__}", flush=True)
    print(f"package: {Path(vta.__file__).resolve().parent.parent}", flush=True)
    try:
        importlib.import_module("llvmlite")
    except ImportError:
        ok("llvmlite is absent, as on the board")
    else:
        raise AssertionError("llvmlite is importable: this venv must not have it (the board has no wheel)")


def check_imports() -> None:
    for name in ("hw_config", "simulator", "vta", "vta.device_pynq", "vta.board", "vta.board.server",
                 "vta.board.cli", "vta.rpc", "vta.rpc.server", "vta.rpc.client", "vta.rpc.tracker", "vta.cli",
                 "graph_pack", "host.jit", "tuning"):
        importlib.import_module(name)
    ok("the board path imports (vta.device_pynq, vta.board, vta.rpc, graph_pack, tuning)")


def check_conv2d(work: Path) -> None:
    import vta
    from simulator.image import load_result, save_image
    from vta.numerics import conv2d_int

    env = vta.Environment("pynq")
    op = vta.compile_op("conv2d", env, data_shape=(1, 32, 14, 14), kernel_shape=(32, 32, 3, 3), strides=1,
                        padding=1, epilogue=(("bias",), ("shr", 8), ("clip", -127, 127)))
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (1, 32, 14, 14), dtype=np.int8)
    w = rng.integers(-128, 128, (32, 32, 3, 3), dtype=np.int8)
    b = rng.integers(-3000, 3000, 32, dtype=np.int32)
    out = op.run(x, w, bias=b)
    # the oracle written here: int64 convolution, bias, arithmetic shift, clip
    acc = conv2d_int(x.astype(np.int64), w.astype(np.int64), (1, 1), (1, 1, 1, 1)) + b[None, :, None, None]
    want = np.clip(acc >> 8, -127, 127).astype(np.int8)
    assert out.dtype == np.int8 and np.array_equal(out, want), "conv2d on the simulator differs from numpy"
    assert op.stats.gemm_counter > 0 and op.cycles > 0
    ok(f"conv2d 3x3 on the simulator equals numpy ({op.cycles} cycles)")

    # the same program as an image, replayed through the CLI in a fresh process: the same output bytes
    image = op.image(data=x, kernel=w, bias=b)
    out_buf = op.buffers.out
    path, result = work / "conv2d.npz", work / "conv2d.result.npz"
    save_image(path, image)
    cmd = [sys.executable, "-m", "vta", "sim", "replay", str(path), "--out", str(result)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, f"{' '.join(cmd)}: exit {res.returncode}\n{res.stdout}{res.stderr}"
    segments = dict(load_result(result).segments)
    got = segments[out_buf.addr][:out_buf.nbytes]
    assert np.array_equal(got, op.device.copy_out(out_buf)), "the replayed image left other output bytes"
    ok("its program image replays (python -m vta sim replay) to the same output bytes")


def check_host_fallback() -> None:
    import vta
    from graph_pack import build, graph_pack, quantize, run_reference, zoo
    from host.jit import JitUnavailableWarning, available

    env = vta.Environment("pynq")
    graph, params = zoo.get_model("resnet-18", image_shape=(3, 32, 32), num_classes=10)
    qgraph, qparams = quantize(graph, params)
    packed = graph_pack(qgraph, env, start_name="nn.max_pool2d", stop_name="nn.global_avg_pool2d")
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    assert not available()
    # every warning shown, so only the notice's own once-per-process rule can keep a second one off stderr
    warnings.simplefilter("always", JitUnavailableWarning)
    for _ in range(2):   # two builds, one notice (tests/test_py310.py counts it on stderr)
        mod = build(packed, env, qparams)
        mod.run(data=x)
    backends = {s.backend for s in mod.steps if hasattr(s, "backend")}
    assert backends == {"numpy"}, f"host steps on {backends}"
    assert np.array_equal(mod.get_output(0), run_reference(qgraph, qparams, {"data": x})), "ResNet-18 differs"
    ok("ResNet-18 (32x32) built twice, every host layer on the numpy kernels, output equals the reference")


def main() -> int:
    work = Path(sys.argv[1])
    work.mkdir(parents=True, exist_ok=True)
    check_environment()
    check_imports()
    check_conv2d(work)
    check_host_fallback()
    print(f"board-python: {len(CHECKS)} passed, 0 failed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
