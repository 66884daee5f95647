"""Digests of what the compiler emits, to prove a refactor changed nothing (issue #14's acceptance).

``python tests/program_digests.py --write`` records, from the code as it stands, a SHA-256 of every
instruction stream and micro-op buffer of: ResNet-18's C2..C11 at their default and at several other
configs, dense / grouped / transposed convolutions, every ALU operator with epilogues, the tuner's
feature vectors over whole spaces, and one ResNet-18 inference's output and cycles. ``tests/test_program_identity.py``
recomputes them and compares with ``tests/data/program_digests.json``, written before the #14 refactor
(the three network digests re-recorded when the zoo's calibration pass became machine-independent, issue #22:
every digested value is the same on every x86-64 CPU, whichever kernel OpenBLAS picks; and again when the
timing model gained the shared DRAM bus, issue #24: the same outputs and programs, 1-3 % more cycles; and the
tuner's feature vectors and the three network digests when the Xilinx presets' COMPUTE_LATENCY became the depth of
the RTL's compute pipeline, 4 to 9, issue #38: every instruction stream the same, 5 more cycles per GEMM/ALU
instruction in the features' analytic estimates and the networks' cycles; and ResNet-18's and MobileNet's output
digests when the host's softmax took host.numerics' exp and lane-partial sums, issue #43: the same programs, cycles
and tasks, outputs within 4e-9 of the earlier ones).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

DIGEST_FILE = Path(__file__).parent / "data" / "program_digests.json"
PRESET = "pynq"


def _digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _program_digest(op) -> str:
    parts = []
    for s in op.program.streams:
        parts += [s.insns, s.uop_words]
    return _digest(*parts)


def _cases():
    """(name, compile_op arguments) for every case; configs by space index so knob names stay free."""
    from vta.workloads import RESNET18
    cases = []
    ep = (("bias",), ("shr", 8), ("clip", -127, 127))
    for name, (h, w, ci, co, k, p, s) in RESNET18.items():
        cases.append((name, "conv2d", {"data_shape": (1, ci, h, w), "kernel_shape": (co, ci, k, k), "strides": s,
                                           "padding": p}, ep))
        cases.append((name + "+res", "conv2d", {"data_shape": (1, ci, h, w), "kernel_shape": (co, ci, k, k),
                                                    "strides": s, "padding": p},
                      (("bias",), ("residual",), ("shr", 8), ("relu",), ("clip", -127, 127))))
    cases.append(("dense", "dense", {"data_shape": (1, 512), "kernel_shape": (1000, 512)}, ep))
    cases.append(("group", "group_conv2d", {"data_shape": (1, 64, 28, 28), "kernel_shape": (64, 16, 3, 3),
                                                "strides": 1, "padding": 1, "groups": 4}, ep))
    cases.append(("transpose", "conv2d_transpose", {"data_shape": (1, 64, 8, 8), "kernel_shape": (64, 32, 4, 4),
                                                        "strides": 2, "padding": 1}, (("shr", 6), ("min", 100))))
    alu_ep = (("shr", 2), ("clip", -127, 127))
    for op in ("add", "multiply", "minimum", "maximum", "right_shift"):
        cases.append((op, op, {"data_shape": (1, 64, 14, 14)}, alu_ep))
        cases.append((op + "+imm", op, {"data_shape": (1, 64, 14, 14), "imm": 3}, alu_ep))
    cases.append(("relu", "relu", {"data_shape": (1, 32, 7, 7)}, (("mul", 3), ("add", -5))))
    cases.append(("clip", "clip", {"data_shape": (1, 32, 7, 7), "bounds": (-50, 60)}, (("shl", 1),)))
    return cases


def compute() -> dict[str, str]:
    from hw_config import load_config
    from tuning import features
    from tuning.task import alu_task, conv_task
    from vta import compile_op
    from vta.runtime import ScheduleError
    from vta.workloads import RESNET18

    cfg = load_config(PRESET, CAPABILITIES="fsim")   # the whole ISA (MUL included), as when they were recorded
    out: dict[str, str] = {}
    for name, op, wl, ep in _cases():
        first = compile_op(op, cfg, epilogue=ep, **wl)
        out[f"op/{name}/default"] = _program_digest(first)
        space = first.space
        order = np.random.default_rng(0).permutation(len(space))[:40].tolist()
        compiled = 0
        for i in order:   # up to 5 configs that compile, and the refusals met on the way
            try:
                op_i = compile_op(op, cfg, config=space[i], epilogue=ep, **wl)
            except ScheduleError as e:
                out[f"op/{name}/{i}"] = "refused:" + str(e)
                continue
            out[f"op/{name}/{i}"] = _program_digest(op_i)
            compiled += 1
            if compiled == 5:
                break
    tasks = {name: conv_task(cfg, (1, ci, h, w), (co, ci, k, k), s, p) for name, (h, w, ci, co, k, p, s)
             in RESNET18.items()}
    tasks["alu-add"] = alu_task(cfg, "add", (1, 64, 28, 28))
    tasks["dense"] = conv_task(cfg, (1, 512), (1000, 512), op="dense")
    tasks["transpose"] = conv_task(cfg, (1, 64, 8, 8), (64, 32, 4, 4), 2, 1, op="conv2d_transpose")
    for name, task in tasks.items():
        feats = features.features_of_indices(task, np.arange(len(task.space)))
        checks = [task.check(task.space[i]) or "" for i in range(0, len(task.space), max(1, len(task.space) // 50))]
        out[f"features/{name}"] = _digest(feats) + ":" + hashlib.sha256("|".join(checks).encode()).hexdigest()
    for model, image in (("resnet-18", None), ("mobilenet", (3, 64, 64)), ("dcgan", None)):
        out[f"network/{model}"] = _network_digest(cfg, model, image)
    return out


def _network_digest(cfg, model: str, image) -> str:
    from graph_pack import build, graph_pack, quantize
    from graph_pack.zoo import get_model, pack_points
    graph, params = get_model(model, batch_size=1, image_shape=image)
    qgraph, qparams = quantize(graph, params)
    packed = graph_pack(qgraph, cfg, *pack_points(model))
    mod = build(packed, cfg, qparams, fallback="allow")
    x = np.random.default_rng(0).standard_normal(graph[graph.inputs[0]].shape).astype(np.float32)
    mod.run(**{graph.inputs[0]: x})
    cycles = np.array([mod.stats.cycles], dtype=np.int64)
    from tuning import extract_tasks
    keys = "|".join(f"{t.key}x{t.weight}" for t in extract_tasks(packed, cfg)).encode()
    return _digest(mod.get_output(0), cycles, np.frombuffer(keys, dtype=np.uint8))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"record the digests into {DIGEST_FILE}")
    args = parser.parse_args(argv)
    digests = compute()
    if args.write:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], check=False, capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
        DIGEST_FILE.write_text(json.dumps({"recorded_at_commit": commit, "preset": PRESET, "digests": digests},
                                          indent=1, sort_keys=True) + "\n")
    else:
        json.dump(digests, sys.stdout, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
