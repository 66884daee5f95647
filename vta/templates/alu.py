"""Element-wise ALU operators on packed int32 tensors (VTA's add.vta / multiply.vta, and friends).

``out = epilogue(op(lhs, rhs))`` cast to int8, with lhs (and a tensor rhs) DMA'd into the accumulator
SRAM as int32. Knobs as VTA's ALU templates: ``tile_co``, ``tile_h``, ``tile_w`` (splits); tiles are
visited (batch, channel, row, column) and alternate between two accumulator halves so each tile's
store overlaps the next tile's loads and ALU work.
"""

from __future__ import annotations

from dataclasses import dataclass

from hw_config import HwConfig
from vta.runtime import COMPUTE, STORE, CommandQueue, UopKernel
from vta.space import ConfigSpace, Knob
from vta.templates.conv import LOOP_MAX, alu_immediates

BINARY = {"add": "ADD", "multiply": "MUL", "minimum": "MIN", "maximum": "MAX", "right_shift": "SHR"}
EPILOGUE_NAME = {"add": "add", "multiply": "mul", "minimum": "min", "maximum": "max", "right_shift": "shr"}
UNARY = ("relu", "clip")
HALVES = 2


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
        first = [("MAX", 0)]
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
