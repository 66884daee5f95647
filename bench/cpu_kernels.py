"""CPU kernels: the numpy references (graph_pack.kernels) against the llvmlite JIT (host.jit).

Times ResNet-18's stem conv, a 3x3 56x56 64->64 conv, max_pool 3x3 s2 on 112x112x64, global avg pool
7x7x512 and a 512->1000 dense (float32; --int8 adds the int8 x int8 -> int32 conv and dense), checks each
JIT result is bit-identical to the reference, and prints compile time, best-of times and the speed-up.

    python bench/cpu_kernels.py [--repeat 5] [--int8]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from _host import header, run_main

from graph_pack.kernels import KERNELS
from graph_pack.opdefs import OPS
from host import jit


def best_of(fn: Callable[[], object], repeat: int, budget: float = 0.2) -> float:
    """Best per-call seconds over ``repeat`` rounds of as many calls as fit in ``budget`` seconds."""
    t = time.perf_counter()
    fn()
    once = time.perf_counter() - t
    number = max(1, int(budget / max(once, 1e-6)))
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t) / number)
    return min(times)


def cases(rng: np.random.Generator, int8: bool) -> list[tuple[str, str, list[np.ndarray], dict]]:
    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    def i8(*shape: int) -> np.ndarray:
        return rng.integers(-128, 128, shape, dtype=np.int8)

    out = [
        ("conv 7x7 s2 (stem)", "nn.conv2d", [f32(1, 3, 224, 224), f32(64, 3, 7, 7)], {"strides": 2, "padding": 3}),
        ("conv 3x3 56x56 64->64", "nn.conv2d", [f32(1, 64, 56, 56), f32(64, 64, 3, 3)], {"padding": 1}),
        ("max_pool 3x3 s2 112x112x64", "nn.max_pool2d", [f32(1, 64, 112, 112)],
         {"pool_size": 3, "strides": 2, "padding": 1}),
        ("global_avg_pool 7x7x512", "nn.global_avg_pool2d", [f32(1, 512, 7, 7)], {}),
        ("dense 512->1000", "nn.dense", [f32(1, 512), f32(1000, 512)], {}),
    ]
    if int8:
        out += [
            ("int8 conv 3x3 56x56 64->64", "nn.conv2d", [i8(1, 64, 56, 56), i8(64, 64, 3, 3)],
             {"padding": 1, "out_dtype": "int32"}),
            ("int8 dense 512->1000", "nn.dense", [i8(1, 512), i8(1000, 512)], {"out_dtype": "int32"}),
        ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="timing rounds, best kept (default: 5)")
    ap.add_argument("--int8", action="store_true", help="also time int8 x int8 -> int32 conv2d and dense")
    args = ap.parse_args()
    if not jit.available():
        raise SystemExit("llvmlite is not installed: reinstall the package (llvmlite is a core dependency) or pip install llvmlite")
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    jit._jit()  # target machine + engine, once per process
    setup_ms = (time.perf_counter() - t) * 1e3
    print(header("cpu_kernels", "numpy reference kernels vs the llvmlite JIT, same inputs, outputs compared bit for bit"))
    print(f"JIT setup {setup_ms:.1f} ms; compile ms is one kernel's first build; numpy and JIT ms are best-of "
          f"{args.repeat} rounds")
    head = f"{'kernel':<28} {'compile ms':>10} {'numpy ms':>10} {'jit ms':>9} {'speed-up':>9}  bit-identical"
    print(head)
    print("-" * len(head))
    for label, op, arrays, kw in cases(rng, args.int8):
        attrs = OPS[op].normalize({**OPS[op].defaults, **kw}, arrays)
        t = time.perf_counter()
        fn = jit.get_kernel(op, attrs, [a.shape for a in arrays], [a.dtype.name for a in arrays])
        compile_s = time.perf_counter() - t
        if fn is None:
            print(f"{label:<28} not covered by the JIT")
            continue
        ref = KERNELS[op]
        same = np.array_equal(fn(attrs, *arrays).view(np.uint8), ref(attrs, *arrays).view(np.uint8))
        t_ref = best_of(lambda: ref(attrs, *arrays), args.repeat)  # noqa: B023 - called right here
        t_jit = best_of(lambda: fn(attrs, *arrays), args.repeat)  # noqa: B023
        print(f"{label:<28} {compile_s * 1e3:>10.1f} {t_ref * 1e3:>10.3f} {t_jit * 1e3:>9.3f} "
              f"{t_ref / t_jit:>8.1f}x  {'yes' if same else 'NO'}")


if __name__ == "__main__":
    run_main(main)
