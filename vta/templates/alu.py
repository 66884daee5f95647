"""Element-wise ALU operators on packed int32 tensors (VTA's add.vta / multiply.vta, and friends).

``out = epilogue(op(lhs, rhs))`` cast to int8, with lhs (and a tensor rhs) DMA'd into the accumulator
SRAM as int32. Knobs as VTA's ALU templates: ``tile_co``, ``tile_h``, ``tile_w`` (splits); tiles are
visited (batch, channel, row, column) and alternate between two accumulator halves so each tile's
store overlaps the next tile's loads and ALU work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hw_config import HwConfig
from hw_config.isa_rules import INSN_BYTES, LOOP_MAX, SHIFT_MAX
from simulator.timing import dma_beats, dma_cycles, shared_spans
from vta.numerics import (
    blocks,
    broadcast_channels,
    pack_blocks,
    padded_shape,
    safe_log2,
    unpack_blocks,
    wrap_int32,
)
from vta.runtime import COMPUTE, STORE, CommandQueue, ScheduleError, UopKernel
from vta.space import Config, ConfigSpace, Knob
from vta.templates.base import (
    GraphHead,
    Template,
    as_int,
    as_ints,
    check_buffer_sizes,
    check_extents,
    checked_array,
    only_known,
    present_inputs,
    register,
)
from vta.templates.epilogue import (
    ALU_OPCODE,
    GRAPH_OPS,
    Epilogue,
    alu_immediates,
    clip_bounds,
    missing_alu,
    reference_epilogue,
    split_add,
    unsupported_shifts,
)

# graph / operator name -> its epilogue op (the same op with a constant operand)
EPILOGUE_NAME = {op: GRAPH_OPS[op] for op in ("add", "multiply", "minimum", "maximum", "right_shift")}
BINARY = {op: ALU_OPCODE[name] for op, name in EPILOGUE_NAME.items()}   # operator -> ALU opcode
UNARY = ("relu", "clip")
GRAPH_OP_NAME = {**{op: op for op in BINARY}, "nn.relu": "relu", "clip": "clip"}   # graph op -> operator
HALVES = 2

# numpy meaning of each binary operator with a tensor operand (the ALU's semantics, docs/simulator.md)
_TENSOR_MEANING = {
    "add": lambda x, y: x + y, "multiply": lambda x, y: x * y, "minimum": np.minimum, "maximum": np.maximum,
    "right_shift": lambda x, y: np.where(y >= 0, x >> np.minimum(y, SHIFT_MAX), x << np.minimum(-y, SHIFT_MAX)),
}


@dataclass(frozen=True)
class AluGeometry:
    nb: int
    cob: int
    height: int
    width: int
    op: str
    rhs_imm: int | None  # None: a tensor operand
    args: tuple = ()     # clip bounds

    @property
    def tensor_rhs(self) -> bool:
        return self.op in BINARY and self.rhs_imm is None


@dataclass(frozen=True)
class AluTiling:
    co1: int
    h1: int
    w1: int

    @property
    def positions(self) -> int:
        return self.co1 * self.h1 * self.w1


@dataclass
class AluBuffers:
    lhs: object
    out: object
    rhs: object | None = None


def alu_space(g: AluGeometry) -> ConfigSpace:
    return ConfigSpace([Knob.split("tile_co", g.cob), Knob.split("tile_h", g.height), Knob.split("tile_w", g.width)])


def alu_tiling(config: dict) -> AluTiling:
    return AluTiling(co1=config["tile_co"][1], h1=config["tile_h"][1], w1=config["tile_w"][1])


def alu_ops(g: AluGeometry, epilogue: tuple) -> list[tuple[str, int | None]]:
    """(ALU opcode, immediate or None for the tensor operand) for the op and its epilogue, in order."""
    if g.op in BINARY and g.rhs_imm is None:
        first = [(BINARY[g.op], None)]
    elif g.op in BINARY:  # an immediate operand: validated like an epilogue constant
        first = alu_immediates((EPILOGUE_NAME[g.op], g.rhs_imm))
    elif g.op == "relu":
        first = alu_immediates(("relu",))
    else:
        first = alu_immediates(("clip", *g.args))
    rest = [pair for op in epilogue for pair in alu_immediates(op)]
    return first + rest


def check_alu(cfg: HwConfig, g: AluGeometry, t: AluTiling) -> str | None:
    need = t.positions * (2 if g.tensor_rhs else 1)
    if need * HALVES > cfg.ACC_BUFF_DEPTH:
        return (f"SRAM capacity: {HALVES} halves x {need} accumulator elements = {need * HALVES} > the "
                f"accumulator buffer's {cfg.ACC_BUFF_DEPTH}")
    if max(t.co1 * t.h1, t.w1) > LOOP_MAX:
        return f"loop limit: a loop extent exceeds {LOOP_MAX}"
    return None


def default_alu_config(cfg: HwConfig, g: AluGeometry, space: ConfigSpace) -> dict:
    """The largest tile that fits, preferring whole rows (fewer, longer DMAs)."""
    valid = [c for c in space if check_alu(cfg, g, alu_tiling(c)) is None]
    return max(valid, key=lambda c: (alu_tiling(c).positions, c["tile_w"][1]))


def emit_alu(q: CommandQueue, g: AluGeometry, t: AluTiling, ops: list[tuple[str, int | None]], bufs) -> None:
    need = t.positions * (2 if g.tensor_rhs else 1)
    loops = ((t.co1 * t.h1, t.w1, t.w1, 0), (t.w1, 1, 1, 0))
    kernels = []
    for half in range(HALVES):
        acc, rhs = half * need, half * need + t.positions
        kernels.append([UopKernel("alu", [[acc, rhs if imm is None else 0, 0]], loops=loops, alu_op=op,
                                  use_imm=imm is not None, imm=imm or 0) for op, imm in ops])
    tile = 0
    for n in range(g.nb):
        for c0 in range(0, g.cob, t.co1):
            for h0 in range(0, g.height, t.h1):
                for w0 in range(0, g.width, t.w1):
                    half = tile % HALVES
                    acc = half * need
                    if tile >= HALVES:
                        q.dep_pop(STORE, COMPUTE)  # the half's previous tile has been stored
                    # one 2D transfer per channel block: (sram offset in the half, dram element offset)
                    runs = [(co * t.h1 * t.w1, ((n * g.cob + c0 + co) * g.height + h0) * g.width + w0)
                            for co in range(t.co1)]
                    for sram, offset in runs:
                        q.load_2d(bufs.lhs, offset, t.w1, t.h1, g.width, acc + sram, "ACC")
                        if g.tensor_rhs:
                            q.load_2d(bufs.rhs, offset, t.w1, t.h1, g.width, acc + t.positions + sram, "ACC")
                    for kernel in kernels[half]:
                        q.push_kernel(kernel)
                    q.dep_push(COMPUTE, STORE)
                    q.dep_pop(COMPUTE, STORE)
                    for sram, offset in runs:
                        q.store_2d(acc + sram, bufs.out, offset, t.w1, t.h1, g.width)
                    q.dep_push(STORE, COMPUTE)
                    tile += 1
                    q.checkpoint()


def _estimate(t: AluTemplate, kv: dict) -> dict[str, np.ndarray]:
    """The ALU template in the conv template's terms: no reduction, operands DMA'd into the accumulator,
    two accumulator halves (always double buffered). Accumulator loads run on the compute module, so a tile's
    loads and ALU instructions serialise there while the previous tile's stores proceed on the store module."""
    g, c = t.geometry, t.cfg
    one = np.ones(len(next(iter(kv.values()))[0]))
    n_ep = len(t.instructions)
    (co1, nco), (h1, nht), (w1, nwt) = kv["tile_co"], kv["tile_h"], kv["tile_w"]
    positions = co1 * h1 * w1
    tiles = g.nb * nco * nht * nwt
    operands = 2 if g.tensor_rhs else 1
    acc = positions * operands
    contiguous = w1 == g.width
    rows = np.where(contiguous, 1, h1)
    row_bytes = np.where(contiguous, h1 * w1, w1) * c.ACC_ELEM_BYTES
    load = dma_cycles(c, rows, row_bytes, co1 * operands)
    compute = n_ep * (c.COMPUTE_LATENCY + positions * c.ALU_II)
    out_row_bytes = row_bytes / c.ACC_ELEM_BYTES * c.OUT_ELEM_BYTES
    store = dma_cycles(c, rows, out_row_bytes, co1)
    # a tile's store starts with the next tile's loads and shares the DRAM bus with them
    load_span, store_span = load - co1 * operands * c.DRAM_LATENCY, store - co1 * c.DRAM_LATENCY
    shared_load, shared_store = shared_spans(dma_beats(c, rows, row_bytes, co1 * operands), load_span,
                                             dma_beats(c, rows, out_row_bytes, co1), store_span)
    load_beside = load + shared_load - load_span
    store_beside = store + shared_store - store_span
    est = (tiles - 1) * np.maximum(load_beside + compute, store_beside) + load + compute + store
    insns = tiles * (co1 * (operands + 1) + n_ep + 4)
    fetch = insns * -(-INSN_BYTES // c.BUS_BYTES)
    est = np.maximum(est, fetch)
    elems = g.nb * g.cob * g.height * g.width
    ideal = elems * c.ALU_II * n_ep
    in_bytes = tiles * positions * operands * c.ACC_ELEM_BYTES
    dram = in_bytes + elems * c.OUT_ELEM_BYTES
    transfers = tiles * co1 * (operands + 1)
    ops_elems = elems * c.BATCH * c.BLOCK_OUT
    z = 0 * one
    return {
        "log_b_inner": z, "log_h_inner": safe_log2(h1), "log_w_inner": safe_log2(w1), "log_ci_inner": z,
        "log_co_inner": safe_log2(co1), "log_b_outer": safe_log2(g.nb) * one, "log_h_outer": safe_log2(nht),
        "log_w_outer": safe_log2(nwt), "log_ci_outer": z, "log_co_outer": safe_log2(nco), "oc_nthread": one,
        "h_nthread": one, "threads": one, "double_buffered": one,
        "log_tiles": safe_log2(tiles), "log_positions": safe_log2(positions), "log_chunks_per_tile": z,
        "log_chunks": safe_log2(tiles), "log_uops_per_kernel": z, "log_gemm_iters_per_chunk": safe_log2(positions),
        "log_ideal_cycles": safe_log2(ideal) * one,
        "log_inp_elems": z, "log_wgt_elems": z, "log_acc_elems": safe_log2(acc), "inp_frac": z, "wgt_frac": z,
        "acc_frac": acc * HALVES / c.ACC_BUFF_DEPTH,
        "uop_frac": n_ep / c.UOP_BUFF_DEPTH * one,
        "halo_overhead": one, "pad_fraction": z, "input_reread": one, "weight_reread": z,
        "log_dram_bytes": safe_log2(dram) * one, "log_bytes_per_mac": safe_log2(dram / ops_elems) * one,
        "log_arith_intensity": safe_log2(positions * c.BATCH * c.BLOCK_OUT / (acc * c.ACC_ELEM_BYTES)),
        "log_dma_transfers": safe_log2(transfers), "log_bytes_per_transfer": safe_log2(dram / transfers),
        "inp_transfers_per_chunk": co1 * operands, "store_transfers_per_tile": co1,
        "whole_row_loads": contiguous.astype(np.float64),
        "whole_image_stores": (h1 * w1 == g.height * g.width) * one,
        "log_load_cycles_per_chunk": safe_log2(load), "log_compute_cycles_per_chunk": safe_log2(compute),
        "compute_over_load": safe_log2(compute / load), "log_insns": safe_log2(insns), "fetch_share": fetch / est,
        "log_est_cycles": safe_log2(est), "est_over_ideal": safe_log2(est / ideal),
        "kh_kw": one, "stride": one, "is_conv": z, "is_group": z, "is_transpose": z, "is_dense": z,
        "is_alu": one, "est_cycles": est,
    }


@register
class AluTemplate(Template):
    """Element-wise add / multiply / minimum / maximum / right_shift (tensor or immediate rhs), relu, clip."""

    ops = (*BINARY, *UNARY)
    inputs = ("lhs", "rhs")
    Buffers = AluBuffers
    graph_ops = ("add", "multiply", "maximum", "minimum", "right_shift", "nn.relu", "clip")
    input_dtypes: ClassVar[dict[str, str]] = {"lhs": "int32", "rhs": "int32"}

    def __init__(self, op: str, cfg: HwConfig, epilogue: Epilogue, geometry: AluGeometry, shape: tuple[int, ...]):
        super().__init__(op, cfg, epilogue)
        self.geometry, self.shape = geometry, shape
        self.instructions = alu_ops(geometry, epilogue.ops)   # validates every immediate before anything is emitted
        lacking = missing_alu(cfg, {code for code, _ in self.instructions}) or unsupported_shifts(
            cfg, [(code, imm) for code, imm in self.instructions if imm is not None])
        if lacking:
            raise ScheduleError(f"{op}: {lacking}")

    @classmethod
    def parse(cls, op: str, cfg: HwConfig, epilogue: tuple, workload: dict) -> AluTemplate:
        only_known(op, workload, {"data_shape", "imm", "bounds"})
        if "data_shape" not in workload:
            raise ValueError(f"{op}: missing workload argument 'data_shape' (N, C, H, W)")
        shape = as_ints("data_shape", workload["data_shape"])
        if len(shape) != 4 or min(shape) <= 0:
            raise ValueError(f"{op}: data_shape needs 4 positive dims (N, C, H, W), got {shape}")
        check_extents(op, "data_shape", shape, ("N", "C", "H", "W"))
        imm = None if workload.get("imm") is None else as_int("imm", workload["imm"])
        if imm is not None and op not in BINARY:
            raise ValueError(f"{op}: imm= applies only to {', '.join(BINARY)}")
        if op == "clip":
            if "bounds" not in workload:
                raise ValueError("clip: pass bounds=(lo, hi)")
            args = as_ints("bounds", workload["bounds"], 2)
            if args[0] > args[1]:
                raise ValueError(f"clip: bounds=(lo, hi) with lo <= hi, got {args}")
        elif "bounds" in workload:
            raise ValueError(f"{op}: bounds= applies only to clip")
        else:
            args = ()
        n, c, h, w = shape
        geometry = AluGeometry(nb=blocks(n, cfg.BATCH), cob=blocks(c, cfg.BLOCK_OUT), height=h, width=w, op=op,
                               rhs_imm=imm, args=args)
        template = cls(op, cfg, Epilogue(epilogue), geometry, shape)
        check_buffer_sizes(template)
        return template

    def task_workload(self) -> dict:
        return {"op": self.op, "data_shape": self.shape, "tensor_rhs": self.geometry.tensor_rhs}

    @classmethod
    def task_program(cls, workload: dict) -> tuple[dict, tuple]:
        args: dict = {"data_shape": tuple(workload["data_shape"])}
        if workload["op"] == "clip":
            args["bounds"] = (-127, 127)
        elif workload["op"] in BINARY and not workload.get("tensor_rhs"):
            args["imm"] = 3
        return args, (("shr", 2), ("clip", -127, 127))

    @classmethod
    def from_graph(cls, head, inputs, kinds, cfg: HwConfig) -> GraphHead | None:
        """An int32 element-wise op of 4D operands of one shape (its chain then ends in an int8 cast)."""
        if head.dtype != "int32" or len(head.shape) != 4:
            return None
        shape = padded_shape(head.shape, cfg.BATCH, cfg.BLOCK_OUT)
        operands = {"lhs": inputs[0].name}
        op = GRAPH_OP_NAME.get(head.op)
        if op in UNARY:
            bounds = clip_bounds(head.attrs["a_min"], head.attrs["a_max"]) if op == "clip" else ()
            if bounds is None:
                return None
            workload = {"data_shape": shape, **({"bounds": bounds[1:]} if bounds else {})}
            return GraphHead(op, workload, operands)
        if op not in BINARY or len(inputs) != 2 or kinds[0] != "tensor" or inputs[0].shape != head.shape:
            return None
        rhs = inputs[1]
        if kinds[1] == "scalar":
            return GraphHead(op, {"data_shape": shape}, operands, {"imm": rhs.name})
        if kinds[1] == "per_channel" or (kinds[1] == "tensor" and rhs.shape == head.shape and rhs.dtype == "int32"):
            return GraphHead(op, {"data_shape": shape}, {**operands, "rhs": rhs.name})
        return None

    @classmethod
    def graph_workload(cls, op: str, workload: dict, epilogue: list[tuple]) -> tuple[dict, list[tuple]]:
        if op == "add" and "imm" in workload:   # beyond 16 bits: the rest of the constant as epilogue adds
            first, *rest = split_add(workload["imm"])
            return {**workload, "imm": first[1]}, rest + epilogue
        return workload, epilogue

    # ---- schedule ----
    def space(self) -> ConfigSpace:
        return alu_space(self.geometry)

    def check(self, config: Config) -> str | None:
        return check_alu(self.cfg, self.geometry, alu_tiling(config))

    def default_config(self) -> Config:
        return default_alu_config(self.cfg, self.geometry, self.space())

    @property
    def macs(self) -> int:
        g = self.geometry
        return g.nb * g.cob * g.height * g.width * self.cfg.BATCH * self.cfg.BLOCK_OUT

    def estimate(self, kv: dict) -> dict:
        return _estimate(self, kv)

    # ---- program and data ----
    def buffer_bytes(self) -> dict[str, int]:
        g = self.geometry
        packed = g.nb * g.cob * g.height * g.width * self.cfg.BATCH * self.cfg.BLOCK_OUT
        return {"lhs": 4 * packed, "out": packed, "rhs": 4 * packed if g.tensor_rhs else 0}

    def emit(self, queue: CommandQueue, config: Config, buffers: AluBuffers) -> None:
        emit_alu(queue, self.geometry, alu_tiling(config), self.instructions, buffers)

    def check_inputs(self, inputs: dict) -> dict:
        present = present_inputs(self, inputs, {"rhs": "a tensor operand (no imm=)"})
        return {k: checked_array(k, v, self.shape, ("int8", "int32")) for k, v in present.items()}

    def pack(self, name: str, value: np.ndarray) -> np.ndarray:
        """An operand in the packed int32 layout; a per-channel constant ``rhs`` is broadcast first."""
        return pack_blocks(broadcast_channels(value, self.shape).astype(np.int32), self.cfg.BATCH, self.cfg.BLOCK_OUT)

    def unpack(self, name: str, raw: np.ndarray) -> np.ndarray:
        g, c = self.geometry, self.cfg
        packed = raw.view(np.int32).reshape(g.nb, g.cob, g.height, g.width, c.BATCH, c.BLOCK_OUT)
        return unpack_blocks(packed, self.shape[0], self.shape[1])

    def unpack_output(self, raw: np.ndarray) -> np.ndarray:
        g, c = self.geometry, self.cfg
        packed = raw.view(np.int8).reshape(g.nb, g.cob, g.height, g.width, c.BATCH, c.BLOCK_OUT)
        return unpack_blocks(packed, self.shape[0], self.shape[1])

    def reference(self, lhs, rhs=None) -> np.ndarray:
        g = self.geometry
        x = lhs.astype(np.int64)
        if g.op in BINARY and g.rhs_imm is None:
            x = wrap_int32(_TENSOR_MEANING[g.op](x, rhs.astype(np.int64)))
            return reference_epilogue(x, self.epilogue.ops, None, None)
        first = (EPILOGUE_NAME[g.op], g.rhs_imm) if g.op in BINARY else ("relu",) if g.op == "relu" else ("clip", *g.args)
        return reference_epilogue(x, (first, *self.epilogue.ops), None, None)

    def random_inputs(self, rng: np.random.Generator) -> dict:
        out = {"lhs": rng.integers(-512, 512, self.shape).astype(np.int32)}
        if self.geometry.tensor_rhs:
            out["rhs"] = rng.integers(-512, 512, self.shape).astype(np.int32)
        return out
