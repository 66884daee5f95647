"""Softmax, layer norm, the exp-based activations and erf on the host, compiled, against numpy's kernels and
onnxruntime (one thread, same run, alternating rounds, medians); then whole float networks against onnxruntime.

Three parts, float32:

- per op at BERT-base sizes (sequence 128: softmax over 12 heads' 128 x 128 scores, layer norm of 128 x 768, the
  activations on 128 x 3072): numpy as ``build`` ran it before issue 43's host kernels (np.exp, numpy's pairwise
  sums, layer norm's mean and variance in float64), graph_pack.kernels' reference now (host.numerics' order of
  operations: the definition a compiled run is bit-equal to), the compiled kernel ``build`` runs (host.jit for
  softmax and layer norm, host.ops' DAG under its default schedule for the elementwise ops), and onnxruntime on a
  one-node model; whether compiled == reference bit for bit, and its largest error against float64;
- dense at three sizes: host.jit's kernel against ``host.ops.dense_packed`` (the weight rewritten once as
  ``pack_dense_weight``: the layout item 3 of the host kernels asks for) and onnxruntime's Gemm;
- ``host.numerics.exp`` against exp in float64 and numpy's float32 exp on ``--exp-samples`` inputs spread over
  its whole range (max ulp);
- the BERT-tiny and MobileNetV2 test exports (tests/data/onnx, weights refilled from the tests' seeded
  generator), the whole float network on the host (``build`` without an accelerator region) against onnxruntime on
  the same file: both medians, the ratio, the output's agreement, and bit-equality with the numpy reference.

    python bench/host_ops.py [--repeat 9] [--exp-samples 4000000] [--parts ops,dense,exp,networks]
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from pathlib import Path

import numpy as np
from _host import header, rounds, run_main

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))   # the test models and their seeded weights live with the tests

F32 = np.float32


def _before_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _before_layer_norm(x, g, b):
    mean = x.mean(axis=-1, keepdims=True, dtype=np.float64)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return ((x - mean) / np.sqrt(var + 1e-5) * g + b).astype(np.float32)


def _gelu_tanh64(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _one_node_model(op: str, inputs: list[tuple[str, tuple]], attrs: dict, opset: int, extra_nodes=()):
    import onnx
    from onnx import TensorProto, helper
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, inputs[0][1])
    nodes = [*extra_nodes, helper.make_node(op, [n for n, _ in inputs] if not extra_nodes else ["x", "s"], ["y"],
                                            **attrs)]
    model = helper.make_model(helper.make_graph(nodes, op, ins, [out]),
                              opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _ort(model):
    from network import ort_session
    return ort_session(model)


def _gelu_tanh_ref(x):
    """host.ops' gelu_tanh in numpy: x * sigmoid(2u), with host.numerics.exp."""
    from host import numerics
    u = F32(2 * math.sqrt(2 / math.pi)) * (x + F32(0.044715) * x * x * x)
    return x / (F32(1) + numerics.exp(-u))


def op_cases(rng):
    """(label, compiled fn, reference fn, before fn, onnx model, inputs, float64 fn) per op."""
    from onnx import helper

    from graph_pack import host_auto
    from graph_pack import kernels as K
    from host import default_schedule, jit, ops
    scores = (rng.standard_normal((12, 128, 128)) * 3).astype(F32)
    h = rng.standard_normal((128, 768)).astype(F32)
    g, b = rng.standard_normal(768).astype(F32), rng.standard_normal(768).astype(F32)
    act = (rng.standard_normal((128, 3072)) * 3).astype(F32)
    sm_attrs, ln_attrs = {"axis": -1}, {"axis": -1, "epsilon": 1e-5}
    softmax = jit.get_kernel("nn.softmax", sm_attrs, [scores.shape], ["float32"])
    layer_norm = jit.get_kernel("nn.layer_norm", ln_attrs, [h.shape, g.shape, b.shape], ["float32"] * 3)

    def compiled(chain):
        dag = ops.elementwise(act.shape, chain)
        kernel = host_auto.kernel(dag, default_schedule(dag))
        return lambda x: kernel({}, x)

    def sigmoid(x):
        return K.KERNELS["sigmoid"]({}, x)
    silu_nodes = [helper.make_node("Sigmoid", ["x"], ["s"])]
    return [
        ("softmax 12x128x128", lambda x: softmax(sm_attrs, x), lambda x: K.KERNELS["nn.softmax"](sm_attrs, x),
         _before_softmax, _one_node_model("Softmax", [("x", scores.shape)], {"axis": -1}, 13), [scores],
         _before_softmax),
        ("layer norm 128x768", lambda x, g, b: layer_norm(ln_attrs, x, g, b),
         lambda x, g, b: K.KERNELS["nn.layer_norm"](ln_attrs, x, g, b), _before_layer_norm,
         _one_node_model("LayerNormalization", [("x", h.shape), ("g", g.shape), ("b", b.shape)],
                         {"axis": -1, "epsilon": 1e-5}, 17), [h, g, b],
         lambda x, g, b: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + b),
        ("sigmoid 128x3072", compiled([("sigmoid",)]), sigmoid, lambda x: F32(1) / (F32(1) + np.exp(-x)),
         _one_node_model("Sigmoid", [("x", act.shape)], {}, 13), [act], lambda x: 1 / (1 + np.exp(-x))),
        ("SiLU 128x3072", compiled([("silu",)]), lambda x: x * sigmoid(x),
         lambda x: x * (F32(1) / (F32(1) + np.exp(-x))),
         _one_node_model("Mul", [("x", act.shape)], {}, 13, silu_nodes), [act], lambda x: x / (1 + np.exp(-x))),
        ("GELU-tanh 128x3072", compiled([("gelu_tanh",)]), _gelu_tanh_ref,
         lambda x: F32(0.5) * x * (F32(1) + np.tanh(F32(math.sqrt(2 / math.pi)) * (x + F32(0.044715) * x ** 3))),
         _one_node_model("Gelu", [("x", act.shape)], {"approximate": "tanh"}, 20), [act], _gelu_tanh64),
        ("erf 128x3072 (GELU's)", compiled([("erf",)]), lambda x: K.KERNELS["erf"]({}, x),
         lambda x: K.KERNELS["erf"]({}, x), _one_node_model("Erf", [("x", act.shape)], {}, 13), [act],
         np.vectorize(math.erf)),
    ]


def op_rows(repeat: int) -> list[str]:
    out = []
    for label, compiled, reference, before, model, arrays, exact64 in op_cases(np.random.default_rng(0)):
        sess = _ort(model)
        names = [i.name for i in sess.get_inputs()]
        feeds = dict(zip(names, arrays, strict=True))
        got, want = compiled(*arrays), reference(*arrays)
        with np.errstate(all="ignore"):
            ref64 = exact64(*(a.astype(np.float64) for a in arrays))
        err = float(np.abs(got - ref64).max() / max(float(np.abs(ref64).max()), 1e-30))
        calls = [functools.partial(f, *arrays) for f in (before, reference, compiled)]
        t_before, t_ref, t_comp, t_ort = rounds([*calls, functools.partial(sess.run, None, feeds)], repeat)
        out.append(f"| {label} | {t_before * 1e3:.3f} | {t_ref * 1e3:.3f} | {t_comp * 1e3:.3f} | {t_ort * 1e3:.3f} | "
                   f"{t_before / t_comp:.2f}x | **{t_comp / t_ort:.2f}x** | "
                   f"{'yes' if np.array_equal(got, want) else 'NO'} | {err:.1e} |")
    return out


DENSE_SHAPES = (("MobileNetV2's classifier", 1, 1280, 1000), ("BERT-tiny's FFN", 16, 128, 512),
                ("BERT-base's projection", 128, 768, 768))


def _gemm_model(w: np.ndarray):
    """onnxruntime's dense: Gemm with the weight as an initializer (transB: w is (units, K))."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    units, k = w.shape
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, (None, k))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, (None, units))
    node = helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)
    model = helper.make_model(helper.make_graph([node], "dense", [x], [y], [numpy_helper.from_array(w, "w")]),
                              opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def dense_rows(repeat: int) -> list[str]:
    """host.jit's dense (weights transposed in registers per call) against host.ops.dense_packed (weights
    packed once, host.row_ops.packed_dense_schedule) and onnxruntime's Gemm."""
    from graph_pack import kernels as K
    from host import compile_schedule, jit, ops
    from host.row_ops import packed_dense_schedule
    rng = np.random.default_rng(3)
    out = []
    for label, m, k, units in DENSE_SHAPES:
        x, w = rng.standard_normal((m, k)).astype(F32), rng.standard_normal((units, k)).astype(F32)
        fixed = jit.get_kernel("nn.dense", {}, [x.shape, w.shape], ["float32", "float32"])
        dag = ops.dense_packed(x.shape, units)
        packed, wp = compile_schedule(dag, packed_dense_schedule(dag)), ops.pack_dense_weight(w)
        sess = _ort(_gemm_model(w))
        exact = np.array_equal(packed(x, wp)[:, :units], K.dense(x, w)) and np.array_equal(fixed({}, x, w),
                                                                                           K.dense(x, w))
        t_jit, t_packed, t_ort = rounds([functools.partial(fixed, {}, x, w), functools.partial(packed, x, wp),
                                         functools.partial(sess.run, None, {"x": x})], repeat)
        out.append(f"| {label} {m}x{k} . {units}x{k} | {t_jit * 1e3:.3f} | {t_packed * 1e3:.3f} | {t_ort * 1e3:.3f} | "
                   f"{t_jit / t_packed:.2f}x | **{t_packed / t_ort:.2f}x** | {'yes' if exact else 'NO'} |")
    return out


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ia, ib = (x.view(np.int32).astype(np.int64) for x in (a, b))
    ia, ib = (np.where(i < 0, -(i & 0x7FFFFFFF), i) for i in (ia, ib))
    return np.abs(ia - ib)


def exp_rows(samples: int) -> list[str]:
    from host import numerics
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.uniform(-104, 88.72, samples).astype(F32),
                        (rng.standard_normal(samples // 4) * 1e-2).astype(F32)])
    got = numerics.exp(x)
    exact = np.exp(x.astype(np.float64)).astype(F32)
    normal = exact >= np.finfo(F32).tiny
    u64, unp = _ulps(got, exact), _ulps(got, np.exp(x))
    return [(f"| host.numerics.exp vs exp in float64, rounded | {x.size:,} in [-104, 88.72] | {u64[normal].max()} | "
            f"{u64[~normal].max() if (~normal).any() else '-'} | {np.mean(u64 > 0) * 100:.2f} % |"),
            (f"| host.numerics.exp vs numpy's float32 exp | same | {unp[normal].max()} | "
            f"{unp[~normal].max() if (~normal).any() else '-'} | {np.mean(unp > 0) * 100:.2f} % |"),
            (f"| numpy's float32 exp vs exp in float64, rounded | same | {_ulps(np.exp(x), exact)[normal].max()} | "
            f"{_ulps(np.exp(x), exact)[~normal].max() if (~normal).any() else '-'} | "
            f"{np.mean(_ulps(np.exp(x), exact) > 0) * 100:.2f} % |")]


ROW_OPS = ("nn.softmax", "nn.layer_norm", "sigmoid", "erf")


def _best(fn, n: int) -> float:
    """The fastest of ``n`` calls (seconds): on a loaded machine, the run least disturbed by other jobs."""
    fn()
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def network_rows(name: str, repeat: int) -> list[str]:
    import onnx_models

    from graph_pack import build, run_reference
    from graph_pack.frontend_onnx import from_onnx
    model = onnx_models.load(name)
    feeds = onnx_models.inputs(model)
    graph, params = from_onnx(model)
    mod = build(graph, "pynq", params)
    sess = _ort(model)
    mod.run(**feeds)
    ours_out = mod.get_output(0)
    theirs = sess.run(None, feeds)[0]
    exact = np.array_equal(ours_out, run_reference(graph, params, feeds))
    agree = float(np.abs(ours_out - theirs).max() / max(float(np.abs(theirs).max()), 1e-30))
    ours, ort = rounds([lambda: mod.run(**feeds), lambda: sess.run(None, feeds)], repeat, budget=0.2)
    best_ours, best_ort = (_best(fn, 20 * repeat) for fn in (lambda: mod.run(**feeds), lambda: sess.run(None, feeds)))
    mod.run(**feeds)
    prof = mod.profile()
    row_ms = sum(r.get("host_ms", 0.0) for r in prof if r["op"] in ROW_OPS)
    backends = sorted({f"{s.op}:{s.backend}" for s in mod.steps if s.op in ROW_OPS})
    return [(f"| {name} | {ours * 1e3:.2f} | {ort * 1e3:.2f} | **{ours / ort:.2f}x** | {best_ours * 1e3:.2f} / "
             f"{best_ort * 1e3:.2f} = {best_ours / best_ort:.2f}x | {row_ms:.3f} "
            f"({', '.join(backends) or 'none'}) | {agree:.1e} | {'yes' if exact else 'NO'} |")]


PARTS = ("ops", "dense", "exp", "networks")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="timed rounds (medians; default 9)")
    parser.add_argument("--exp-samples", type=int, default=4_000_000, help="inputs of the exp ulp check")
    parser.add_argument("--networks", default="bert_tiny,mobilenet_v2", help="test exports to time whole (comma list)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"what to run (comma list of {', '.join(PARTS)})")
    args = parser.parse_args()
    if args.repeat < 1 or args.exp_samples < 1:
        raise ValueError("--repeat and --exp-samples must be at least 1")
    parts = set(args.parts.split(","))
    if parts - set(PARTS):
        raise ValueError(f"--parts {args.parts!r}: each part must be one of {', '.join(PARTS)}")
    print(header("bench/host_ops.py", "softmax / layer norm / exp activations / erf on the host: numpy, compiled, "
                                      "onnxruntime (1 thread)"))
    if "ops" in parts:
        print("\n| op (BERT-base size) | numpy before ms | numpy reference now ms | compiled ms | onnxruntime ms | "
              "compiled vs before | **compiled / onnxruntime** | compiled == reference | max error vs float64 "
              "(of the largest) |\n|---|---|---|---|---|---|---|---|---|")
        print("\n".join(op_rows(args.repeat)), flush=True)
    if "dense" in parts:
        print("\n| dense (float32) | host.jit ms | weights packed ms | onnxruntime Gemm ms | packed vs host.jit | "
              "**packed / onnxruntime** | both == reference |\n|---|---|---|---|---|---|---|")
        print("\n".join(dense_rows(args.repeat)), flush=True)
    if "exp" in parts:
        print("\n| exp | inputs | max ulp, normal results | max ulp, subnormal results | inputs off by any |\n"
              "|---|---|---|---|---|")
        print("\n".join(exp_rows(args.exp_samples)), flush=True)
    if "networks" in parts:
        print("\n| network (float, whole on the host) | ours ms | onnxruntime ms | **ours / onnxruntime** | best of "
              f"{20 * args.repeat}: ours / onnxruntime ms | ours in softmax / layer norm / sigmoid / erf ms "
              "(kernels) | max difference vs onnxruntime (of the largest) | bit-equal to the numpy reference |\n"
              "|---|---|---|---|---|---|---|---|")
        for name in args.networks.split(","):
            print("\n".join(network_rows(name.strip(), args.repeat)), flush=True)
    return 0


if __name__ == "__main__":
    run_main(main)
