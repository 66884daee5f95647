"""batch_matmul: B independent matrix products ``out[b] = data[b] @ kernel[b].T`` on the GEMM core.

Attention multiplies two activations (Q K^T, then the probabilities by V); VTA's GEMM core multiplies an input
tile by a weight tile, so one operand of each product is loaded as the weight tile, as VTA loads a dense layer's
weights: ``kernel`` is (B, N, K), one (N, K) weight matrix per batch entry, like dense's (M, K) kernel and TVM's
``nn.batch_matmul`` (transpose_b). ``data`` is (B, M, K); the output (B, M, N).

The per-batch loop is a grouped convolution's loop over groups: data rows are the convolution's batch rows (tiles
of ``tile_b`` row blocks), the B matrices its groups, K its input channels of a group, N its output channels of a
group, all 1 x 1. The conv engine (``vta.templates.conv``) emits it: a channel tile never spans two groups, so
every GEMM reads one batch entry's rows and one batch entry's weights. The knobs are dense's, with ``tile_co``
splitting one entry's output blocks (N / BLOCK_OUT), so every config of the space runs.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from hw_config import HwConfig
from vta.numerics import (
    blocks,
    pack_batched_matrices,
    pack_batched_rows,
    unpack_batched_matrices,
    unpack_batched_rows,
)
from vta.runtime import ScheduleError
from vta.space import ConfigSpace, Knob
from vta.templates.base import (
    GraphHead,
    as_ints,
    check_buffer_sizes,
    check_extents,
    checked_array,
    only_known,
    present_inputs,
    register,
)
from vta.templates.conv import ConvBuffers, ConvGeometry, ConvTemplate
from vta.templates.epilogue import Epilogue, reference_epilogue


@register
class BatchMatmulTemplate(ConvTemplate):
    """B products of (M, K) x (N, K)^T with a fused epilogue; the conv engine as a grouped 1 x 1 convolution."""

    ops = ("batch_matmul",)
    inputs = ("data", "kernel")
    Buffers = ConvBuffers
    graph_ops = ("nn.batch_matmul",)
    kind = "conv"
    fusable_operands = ()
    input_dtypes: ClassVar[dict[str, str]] = {"data": "int8", "kernel": "int8"}

    # ---- workload ----
    @classmethod
    def parse(cls, op: str, cfg: HwConfig, epilogue: tuple, workload: dict) -> BatchMatmulTemplate:
        only_known(op, workload, {"data_shape", "kernel_shape"}, ("data_shape", "kernel_shape"))
        data_shape = as_ints("data_shape", workload["data_shape"])
        kernel_shape = as_ints("kernel_shape", workload["kernel_shape"])
        if len(data_shape) != 3 or len(kernel_shape) != 3 or min(*data_shape, *kernel_shape) <= 0:
            raise ValueError(f"{op}: data_shape (B, M, K) and kernel_shape (B, N, K) need 3 positive dims, got "
                             f"{data_shape} and {kernel_shape}")
        (b, m, k), (b2, n, k2) = data_shape, kernel_shape
        if b != b2 or k != k2:
            raise ValueError(f"{op}: data_shape (B, M, K) and kernel_shape (B, N, K) must agree on B and K, got "
                             f"{data_shape} and {kernel_shape}")
        check_extents(op, "data_shape", data_shape, ("B", "M", "K"))
        check_extents(op, "kernel_shape", kernel_shape, ("B", "N", "K"))
        geometry = ConvGeometry(nb=blocks(m, cfg.BATCH), cib=blocks(k, cfg.BLOCK_IN), cob=b * blocks(n, cfg.BLOCK_OUT),
                                groups=b, height=1, width=1, kh=1, kw=1, sh=1, sw=1, ph=0, pw=0)
        shapes = {"data": data_shape, "kernel": kernel_shape, "out": (b, m, n)}
        template = cls(op, cfg, Epilogue(epilogue), geometry, shapes)
        lacking = [o[0] for o in template.epilogue.ops if o[0] in ("bias", "residual")]
        if lacking:
            raise ValueError(f"{op}: epilogue {lacking[0]!r} is not supported (batch_matmul fuses ALU ops with "
                             "immediates only)")
        check_buffer_sizes(template)
        return template

    def task_workload(self) -> dict:
        return {"op": self.op, "data_shape": self.shapes["data"], "kernel_shape": self.shapes["kernel"]}

    @classmethod
    def task_program(cls, workload: dict) -> tuple[dict, tuple]:
        args = {k: tuple(workload[k]) for k in ("data_shape", "kernel_shape")}
        return args, (("shr", 8), ("clip", -127, 127))

    @classmethod
    def from_graph(cls, head, inputs, kinds, cfg: HwConfig) -> GraphHead | str | None:
        data, other = inputs
        if kinds != ["tensor", "tensor"]:
            return ("an operand is a constant (the template multiplies two activations; a MatMul by a constant "
                    "matrix imports as dense)")
        if (data.dtype, other.dtype, head.dtype) != ("int8", "int8", "int32"):
            return f"needs int8 x int8 -> int32, got {data.dtype} x {other.dtype} -> {head.dtype} (quantize first)"
        if data.shape[:-2] != other.shape[:-2]:
            return (f"batch dimensions {data.shape[:-2]} and {other.shape[:-2]} differ (the template multiplies "
                    "matrix by matrix; broadcasting is not supported)")
        batch = int(np.prod(data.shape[:-2], dtype=np.int64))
        (m, k), n = data.shape[-2:], other.shape[-1]
        workload = {"data_shape": (batch, m, k), "kernel_shape": (batch, n, k)}
        try:
            cls.parse("batch_matmul", cfg, (), workload)
        except (ValueError, ScheduleError) as e:
            return str(e)
        workload = {"data_shape": (batch, blocks(m, cfg.BATCH) * cfg.BATCH, blocks(k, cfg.BLOCK_IN) * cfg.BLOCK_IN),
                    "kernel_shape": (batch, blocks(n, cfg.BLOCK_OUT) * cfg.BLOCK_OUT,
                                     blocks(k, cfg.BLOCK_IN) * cfg.BLOCK_IN)}
        return GraphHead("batch_matmul", workload, {"data": data.name, "kernel": other.name})

    # ---- schedule ----
    def space(self) -> ConfigSpace:
        g = self.geometry
        return ConfigSpace([Knob.split("tile_b", g.nb), Knob.split("tile_ci", g.cib),
                            Knob.split("tile_co", g.cob_per_group), Knob.choice("oc_nthread", (1, 2))])

    def estimate(self, kv: dict) -> dict:
        """The conv engine's model, its channel tiles counted over all B entries (``tile_co`` splits one)."""
        co1, nco = kv["tile_co"]
        return super().estimate({**kv, "tile_co": (co1, nco * self.geometry.groups)})

    # ---- program and data ----
    def buffer_bytes(self) -> dict[str, int]:
        g, c = self.geometry, self.cfg
        return {"data": g.nb * g.cib_total * c.BATCH * c.BLOCK_IN, "kernel": g.cob * g.cib * c.BLOCK_OUT * c.BLOCK_IN,
                "out": g.nb * g.cob * c.BATCH * c.BLOCK_OUT}

    def check_inputs(self, inputs: dict) -> dict:
        s = self.shapes
        present = present_inputs(self, inputs, {})
        return {name: checked_array(name, present[name], s[name], ("int8",)) for name in ("data", "kernel")}

    def pack(self, name: str, value: np.ndarray) -> np.ndarray:
        c = self.cfg
        if name == "data":
            return pack_batched_rows(value, c.BATCH, c.BLOCK_IN)
        return pack_batched_matrices(value, c.BLOCK_OUT, c.BLOCK_IN)

    def _packed(self, raw: np.ndarray, name: str) -> np.ndarray:
        g, c = self.geometry, self.cfg
        b = g.groups
        if name == "data":
            return raw.view(np.int8).reshape(g.nb, b, g.cib, c.BATCH, c.BLOCK_IN)
        if name == "kernel":
            return raw.view(np.int8).reshape(b, g.cob_per_group, g.cib, c.BLOCK_OUT, c.BLOCK_IN)
        return raw.view(np.int8).reshape(g.nb, b, g.cob_per_group, c.BATCH, c.BLOCK_OUT)

    def unpack(self, name: str, raw: np.ndarray) -> np.ndarray:
        _, d0, d1 = self.shapes[name]
        if name == "data":
            return unpack_batched_rows(self._packed(raw, name), d0, d1)
        return unpack_batched_matrices(self._packed(raw, name), d0, d1)

    def unpack_output(self, raw: np.ndarray) -> np.ndarray:
        _, m, n = self.shapes["out"]
        return unpack_batched_rows(self._packed(raw, "out"), m, n)

    def reference(self, data, kernel) -> np.ndarray:
        acc = np.matmul(data.astype(np.int64), kernel.astype(np.int64).transpose(0, 2, 1))
        return reference_epilogue(acc, self.epilogue.ops, None, None)

    def random_inputs(self, rng: np.random.Generator) -> dict:
        """int8 data and kernel in [-128, 128) (VTA's test range)."""
        s = self.shapes
        return {name: rng.integers(-128, 128, s[name], dtype=np.int8) for name in ("data", "kernel")}
