"""dense on the CPU, float32 (AutoTVM's ``dense_pack.x86``, which its ARM schedule shares): the weights packed
(M/tile_x, K, tile_x) so that ``tile_x`` output features are one contiguous vector per k, ``tile_y`` rows of
the data per register tile, and ``tile_k`` reduction steps unrolled into independent accumulators (more
multiply-adds in flight; summed at the end). Sums are reassociated: checked with np.allclose.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from host import jit
from host.templates.base import (
    HostKernel,
    HostTemplate,
    PackedWeights,
    check_arrays,
    check_epilogue,
    check_host_extents,
    check_host_tensors,
    largest_divisor,
    register_host,
    timed_compile,
)
from host.templates.conv2d import MAX_ACC_VECTORS, _split, _vector_count, relu
from host.templates.target import CpuTarget
from vta.space import Config, ConfigSpace
from vta.templates.base import as_ints, only_known


def dense_ir(name: str, n: int, k: int, m: int, ty: int, bn: int, tk: int, epilogue: tuple[str, ...]) -> str:
    """dense(x, w, bias, out): x (N, K), w packed (M/bn, K, bn), out (N, M)."""
    f = jit._Fn(name, ["ptr noalias readonly %x", "ptr noalias readonly %w", "ptr noalias readonly %bias",
                       "ptr noalias %out"])
    vt = f"<{bn} x float>"
    fma = f"@llvm.fmuladd.v{bn}f32"
    f.decls.add(f"declare {vt} {fma}({vt}, {vt}, {vt})")
    keys = [(y, u) for y in range(ty) for u in range(tk)]
    accs = {key: f.alloca(vt) for key in keys}
    with f.loop(n // ty) as yb, f.loop(m // bn) as mb:
        for a in accs.values():
            f.emit(f"store {vt} zeroinitializer, ptr {a}, align 64")
        with f.loop(k // tk) as kb:
            cur = {key: f.let(f"load {vt}, ptr {a}, align 64") for key, a in accs.items()}
            for u in range(tk):
                kk = f.lin(u, (tk, kb))
                wv = f.let(f"load {vt}, ptr {f.gep('float', '%w', f.lin(0, (k * bn, mb), (bn, kk)))}, align 4")
                for y in range(ty):
                    q = f.gep("float", "%x", f.lin(y * k, (ty * k, yb), (1, kk)))
                    xv = f.splat("float", bn, f.let(f"load float, ptr {q}, align 4"))
                    cur[y, u] = f.let(f"call {vt} {fma}({vt} {xv}, {vt} {wv}, {vt} {cur[y, u]})")
            for key, a in accs.items():
                f.emit(f"store {vt} {cur[key]}, ptr {a}, align 64")
        bias = None
        if "bias" in epilogue:
            bias = f.let(f"load {vt}, ptr {f.gep('float', '%bias', f.lin(0, (bn, mb)))}, align 4")
        for y in range(ty):
            val = f.let(f"load {vt}, ptr {accs[y, 0]}, align 64")
            for u in range(1, tk):
                val = f.let(f"fadd {vt} {val}, {f.let(f'load {vt}, ptr {accs[y, u]}, align 64')}")
            if bias is not None:
                val = f.let(f"fadd {vt} {val}, {bias}")
            if "relu" in epilogue:
                val = relu(f, vt, val)
            q = f.gep("float", "%out", f.lin(y * m, (ty * m, yb), (bn, mb)))
            f.emit(f"store {vt} {val}, ptr {q}, align 4")
    return f.text()


@register_host
class DensePack(HostTemplate):
    """Knobs tile_y (data rows), tile_x (output features per vector block), tile_k (unrolled reduction)."""

    ops: ClassVar[tuple[str, ...]] = ("dense_pack.x86",)
    family: ClassVar[str] = "x86"
    inputs: ClassVar[tuple[str, ...]] = ("data", "kernel", "bias")

    def __init__(self, op: str, n: int, k: int, m: int, target: CpuTarget | None = None):
        super().__init__(op, target)
        self.n, self.k, self.m = n, k, m

    @classmethod
    def parse(cls, op: str, cfg: Any, epilogue: tuple, workload: dict[str, Any]) -> DensePack:
        only_known(op, workload, {"data_shape", "kernel_shape"}, ("data_shape", "kernel_shape"))
        n, k = as_ints("data_shape", workload["data_shape"], 2)
        m, k2 = as_ints("kernel_shape", workload["kernel_shape"], 2)
        if k != k2 or min(n, k, m) < 1:
            raise ValueError(f"{op}: data (N, K) {(n, k)} and kernel (M, K) {(m, k2)} must agree on K >= 1")
        check_host_extents(op, "data_shape / kernel_shape", (n, k, m), ("N", "K", "M"))
        check_host_tensors(op, {"data": n * k, "kernel": m * k, "output": n * m})
        return cls(op, n, k, m, cfg if isinstance(cfg, CpuTarget) else None)

    def task_workload(self) -> dict[str, Any]:
        return {"op": self.op, "data_shape": (self.n, self.k), "kernel_shape": (self.m, self.k)}

    @property
    def macs(self) -> int:
        return self.n * self.k * self.m

    @property
    def flop(self) -> int:
        return 2 * self.macs

    def space(self) -> ConfigSpace:
        return ConfigSpace([_split("tile_y", self.n, 8), _split("tile_x", self.m, 64), _split("tile_k", self.k, 8)])

    def check(self, config: Config) -> str | None:
        acc = config["tile_y"][1] * config["tile_k"][1] * _vector_count(self.target.lanes, config["tile_x"][1])
        if acc > MAX_ACC_VECTORS:
            return f"{acc} vector accumulators; at most {MAX_ACC_VECTORS} fit in the registers"
        return None

    def default_config(self) -> Config:
        bn = largest_divisor(self.m, self.target.lanes)
        return {"tile_y": [self.n, 1], "tile_x": [self.m // bn, bn], "tile_k": [self.k, 1]}

    def estimate(self, knobs: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
        ty, bn, tk = knobs["tile_y"][0], knobs["tile_x"][0], knobs["tile_k"][0]
        vecs = np.ceil(bn / self.target.lanes)
        steps = (self.n / ty) * (self.m / bn) * self.k
        latency = 4.0 / np.minimum(4.0, ty * tk * vecs)    # a multiply-add chain waits on the previous one
        est = steps * (ty * vecs * np.maximum(latency, 0.5) + vecs / 2 + ty / 2) + steps / tk
        return {"est_cycles": est, "log_co_inner": np.log2(bn), "log_b_inner": np.log2(ty),
                "log_ci_inner": np.log2(tk), "is_dense": 1.0}

    def ir(self, config: Config | None = None, target: CpuTarget | None = None, epilogue: tuple[str, ...] = (),
           name: str = "kernel") -> str:
        c = self.checked(config)
        return dense_ir(name, self.n, self.k, self.m, c["tile_y"][1], c["tile_x"][1], c["tile_k"][1],
                        check_epilogue(epilogue))

    def build(self, config: Config | None = None, epilogue: tuple[str, ...] = ()) -> HostKernel:
        normal = self.checked(config)
        epilogue = check_epilogue(epilogue)
        if "residual" in epilogue:
            raise ValueError(f"{self.op}: a residual add is not fused into dense; allowed: bias, relu")
        bn = normal["tile_x"][1]
        name = jit._fresh_name("dense_pack")
        ir = dense_ir(name, self.n, self.k, self.m, normal["tile_y"][1], bn, normal["tile_k"][1], epilogue)
        cfn, seconds = timed_compile(lambda: jit._compile(ir, name, 4))
        packed = PackedWeights(lambda w: self.pack_kernel(w, bn))
        zero = np.zeros(1, np.float32)
        shapes = {"data": (self.n, self.k), "kernel": (self.m, self.k), "bias": (self.m,)}

        def run(data: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
            given = {"data": data, "kernel": kernel, "bias": bias}
            check_arrays(self.op, given, shapes, ("data", "kernel", *(("bias",) if "bias" in epilogue else ())))
            x = np.ascontiguousarray(data)
            b = np.ascontiguousarray(bias) if "bias" in epilogue else zero
            out = np.empty((self.n, self.m), np.float32)
            cfn(jit._ptr(x), jit._ptr(packed.get(kernel)), jit._ptr(b), jit._ptr(out))
            return out

        return HostKernel(self, normal, epilogue, run, seconds)

    def pack_kernel(self, w: np.ndarray, bn: int) -> np.ndarray:
        """(M, K) -> (M/bn, K, bn): ``bn`` (tile_x) output features contiguous per k."""
        return np.ascontiguousarray(w.reshape(self.m // bn, bn, self.k).transpose(0, 2, 1), dtype=np.float32)

    def reference(self, **inputs: np.ndarray) -> np.ndarray:
        out = inputs["data"].astype(np.float64) @ inputs["kernel"].astype(np.float64).T
        if inputs.get("bias") is not None:
            out += inputs["bias"]
        return np.maximum(out, 0) if inputs.get("relu") else out

    def random_inputs(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {"data": rng.standard_normal((self.n, self.k)).astype(np.float32),
                "kernel": rng.standard_normal((self.m, self.k)).astype(np.float32)}
