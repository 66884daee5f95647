"""A toy operator template written as a contributor would, in this one file: ``subtract`` of a scalar constant
from an int32 tensor (VTA's ALU has no SUB, so it adds the negated constant), then the fused epilogue and the
int8 store. Nothing else in the tree knows about it; ``tests/test_template_contract.py`` registers it and runs
it through ``compile_op``, tuning's task extraction and a graph (docs/architecture.md, "Adding an operator").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hw_config import HwConfig
from hw_config.isa_rules import LOOP_MAX
from vta.numerics import blocks, pack_blocks, padded_shape, unpack_blocks, wrap_int32
from vta.runtime import COMPUTE, STORE, CommandQueue, UopKernel
from vta.space import Config, ConfigSpace, Knob
from vta.templates.base import GraphHead, Template, as_int, as_ints, checked_array, only_known, present_inputs
from vta.templates.epilogue import Epilogue, alu_immediates, reference_epilogue


@dataclass
class SubtractBuffers:
    lhs: object
    out: object


class SubtractScalar(Template):
    """``out = int8(epilogue(lhs - imm))``, tiles of whole rows of one channel block, one at a time."""

    ops = ("subtract",)
    inputs = ("lhs",)
    Buffers = SubtractBuffers
    graph_ops = ("subtract",)
    input_dtypes = {"lhs": "int32"}  # noqa: RUF012 - a class constant, as in the built-in templates

    def __init__(self, op: str, cfg: HwConfig, epilogue: Epilogue, shape: tuple[int, ...], imm: int):
        super().__init__(op, cfg, epilogue)
        self.shape, self.imm = shape, imm
        self.instructions = alu_immediates(("add", -imm)) + [i for o in epilogue.ops for i in alu_immediates(o)]

    @property
    def packed_dims(self) -> tuple[int, int, int, int]:
        n, c, h, w = self.shape
        return blocks(n, self.cfg.BATCH), blocks(c, self.cfg.BLOCK_OUT), h, w

    # ---- workload ----
    @classmethod
    def parse(cls, op, cfg, epilogue, workload):
        only_known(op, workload, {"data_shape", "imm"}, ("data_shape", "imm"))
        shape = as_ints("data_shape", workload["data_shape"], 4)
        if min(shape) <= 0:
            raise ValueError(f"{op}: data_shape needs 4 positive dims, got {shape}")
        return cls(op, cfg, Epilogue(epilogue), shape, as_int("imm", workload["imm"]))

    def task_workload(self):
        return {"op": self.op, "data_shape": self.shape}

    @classmethod
    def task_program(cls, workload):
        return {"data_shape": tuple(workload["data_shape"]), "imm": 3}, (("clip", -127, 127),)

    @classmethod
    def from_graph(cls, head, inputs, kinds, cfg):
        if head.dtype != "int32" or len(head.shape) != 4 or kinds != ["tensor", "scalar"]:
            return None
        if inputs[0].shape != head.shape:
            return "subtract: the tensor operand must have the result's shape"
        return GraphHead("subtract", {"data_shape": padded_shape(head.shape, cfg.BATCH, cfg.BLOCK_OUT)},
                         {"lhs": inputs[0].name}, {"imm": inputs[1].name})

    # ---- schedule: how many rows a tile holds ----
    def space(self) -> ConfigSpace:
        return ConfigSpace([Knob.split("tile_h", self.shape[2])])

    def check(self, config: Config) -> str | None:
        rows, width = config["tile_h"][1], self.shape[3]
        if rows * width > self.cfg.ACC_BUFF_DEPTH:
            return f"a tile of {rows} x {width} positions exceeds the {self.cfg.ACC_BUFF_DEPTH} accumulator entries"
        if rows * width > LOOP_MAX:
            return f"loop limit: {rows * width} > {LOOP_MAX}"
        return None

    def default_config(self) -> Config:
        return max((c for c in self.space() if self.check(c) is None), key=lambda c: c["tile_h"][1])

    def estimate(self, knobs):
        rows = knobs["tile_h"][0]
        nb, cb, h, w = self.packed_dims
        tiles = nb * cb * h / rows
        per_tile = 2 * self.cfg.DRAM_LATENCY + len(self.instructions) * (self.cfg.COMPUTE_LATENCY + rows * w)
        return {"est_cycles": tiles * per_tile}

    @property
    def macs(self) -> int:
        nb, cb, h, w = self.packed_dims
        return nb * cb * h * w * self.cfg.BATCH * self.cfg.BLOCK_OUT

    # ---- program and data ----
    def buffer_bytes(self):
        elements = self.macs
        return {"lhs": 4 * elements, "out": elements}

    def emit(self, queue: CommandQueue, config: Config, buffers) -> None:
        rows = config["tile_h"][1]
        nb, cb, h, w = self.packed_dims
        positions = rows * w
        loops = ((rows, w, w, 0), (w, 1, 1, 0))
        kernels = [UopKernel("alu", [[0, 0, 0]], loops=loops, alu_op=op, use_imm=True, imm=imm)
                   for op, imm in self.instructions]
        tile = 0
        for b in range(nb):
            for c in range(cb):
                for h0 in range(0, h, rows):
                    if tile:
                        queue.dep_pop(STORE, COMPUTE)   # the previous tile left the accumulators
                    offset = ((b * cb + c) * h + h0) * w
                    queue.load_2d(buffers.lhs, offset, positions, 1, positions, 0, "ACC")
                    for kernel in kernels:
                        queue.push_kernel(kernel)
                    queue.dep_push(COMPUTE, STORE)
                    queue.dep_pop(COMPUTE, STORE)
                    queue.store_2d(0, buffers.out, offset, positions, 1, positions)
                    queue.dep_push(STORE, COMPUTE)
                    tile += 1
                    queue.checkpoint()

    def check_inputs(self, inputs):
        present = present_inputs(self, inputs, {})
        return {"lhs": checked_array("lhs", present["lhs"], self.shape, ("int8", "int32"))}

    def pack(self, name, value):
        return pack_blocks(np.asarray(value).astype(np.int32), self.cfg.BATCH, self.cfg.BLOCK_OUT)

    def unpack(self, name, raw):
        nb, cb, h, w = self.packed_dims
        packed = raw.view(np.int32).reshape(nb, cb, h, w, self.cfg.BATCH, self.cfg.BLOCK_OUT)
        return unpack_blocks(packed, self.shape[0], self.shape[1])

    def unpack_output(self, raw):
        nb, cb, h, w = self.packed_dims
        packed = raw.view(np.int8).reshape(nb, cb, h, w, self.cfg.BATCH, self.cfg.BLOCK_OUT)
        return unpack_blocks(packed, self.shape[0], self.shape[1])

    def reference(self, lhs):
        return reference_epilogue(wrap_int32(lhs.astype(np.int64) - self.imm), self.epilogue.ops, None, None)

    def random_inputs(self, rng):
        return {"lhs": rng.integers(-1000, 1000, self.shape).astype(np.int32)}
