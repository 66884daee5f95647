"""The fused epilogue, spelled once: which graph ops fuse as which epilogue op, how each lowers to ALU
instructions, what each means in numpy, and how a chain's constants become immediates.

An epilogue is a tuple of ops applied in order to the int32 accumulator before the int8 store:
``("bias",)`` ``("residual",)`` ``("channel_shr",)`` (tensor operands in the accumulator SRAM: a per-channel
add, a residual add, a per-channel arithmetic right shift), ``("shr", n)`` ``("shl", n)``
``("clip", lo, hi)`` ``("relu",)`` ``("min", v)`` ``("max", v)`` ``("add", v)`` ``("mul", v)``.
The ALU lowering (``alu_immediates``) and the numpy meaning (``reference_epilogue``) are written
independently on purpose: the templates' tests compare one against the other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hw_config import HwConfig
from hw_config.isa_rules import IMM_MAX, IMM_MIN, SHIFT_MAX
from vta.numerics import wrap_int32
from vta.runtime import ScheduleError

OPERAND_OPS = ("bias", "residual", "channel_shr")   # read a tensor staged in the accumulator SRAM
# the ALU opcode each operand op runs as (the tensor as the second operand)
OPERAND_OPCODE = {"bias": "ADD", "residual": "ADD", "channel_shr": "SHR"}
# per-channel right shifts every VTA implementation computes alike from a tensor operand (HLS reads the amount's
# low 5 bits as signed, Chisel as unsigned: 0..15 is the same in both)
CHANNEL_SHIFT_MAX = 15
# graph op -> the epilogue op it fuses as when its other operand is a scalar constant
GRAPH_OPS = {"add": "add", "multiply": "mul", "maximum": "max", "minimum": "min", "right_shift": "shr",
             "left_shift": "shl"}
# epilogue op with a constant -> the ALU opcode that computes it with a tensor operand instead
ALU_OPCODE = {"add": "ADD", "mul": "MUL", "min": "MIN", "max": "MAX", "shr": "SHR"}

# Shifts go out in steps every VTA implementation computes alike: right by at most 15, left by at most 16 (VTA's
# HLS reads an SHR amount as a signed 5-bit number, so 16 would shift left and 20 left by 12: docs/isa.md).
# Arithmetic shifts compose exactly, so "shr 20" is SHR 15 then SHR 5; amounts within a step are one instruction,
# as before.
SHR_STEP, SHL_STEP = 15, 16


def _shift_steps(n: int, step: int, sign: int) -> list[tuple[str, int]]:
    steps = [("SHR", sign * step)] * (n // step) + ([("SHR", sign * (n % step))] if n % step else [])
    return steps or [("SHR", 0)]


_LOWERING: dict[str, Callable[..., list[tuple[str, int]]]] = {
    "shr": lambda n: _shift_steps(n, SHR_STEP, 1), "shl": lambda n: _shift_steps(n, SHL_STEP, -1),
    "relu": lambda: [("MAX", 0)],
    "clip": lambda lo, hi: [("MIN", hi), ("MAX", lo)], "min": lambda v: [("MIN", v)],
    "max": lambda v: [("MAX", v)], "add": lambda v: [("ADD", v)], "mul": lambda v: [("MUL", v)]}
IMMEDIATE_OPS = tuple(_LOWERING)


def alu_immediates(op: tuple) -> list[tuple[str, int]]:
    """ALU instructions (opcode, immediate) for one epilogue op with constants; refuses what cannot be encoded."""
    name, *args = op
    if name not in _LOWERING:
        raise ScheduleError(f"unknown epilogue op {name!r}; allowed: {', '.join(OPERAND_OPS + IMMEDIATE_OPS)}")
    if name in ("shr", "shl") and len(args) == 1 and not (isinstance(args[0], (int, np.integer))
                                                          and 0 <= args[0] <= SHIFT_MAX):
        raise ScheduleError(f"epilogue op {op!r}: the shift count must be an integer in [0, {SHIFT_MAX}]")
    try:
        out = _LOWERING[name](*args)
    except TypeError:
        raise ScheduleError(f"epilogue op {op!r} has the wrong number of arguments") from None
    for _, imm in out:
        if not isinstance(imm, (int, np.integer)) or not IMM_MIN <= imm <= IMM_MAX:
            raise ScheduleError(f"epilogue op {op!r}: immediate {imm!r} must be an integer in "
                                f"[{IMM_MIN}, {IMM_MAX}] (16-bit ALU immediate)")
    return out


def alu_opcodes(ops) -> set[str]:
    """The ALU opcodes an epilogue's ops run as (an operand op adds its staged tensor)."""
    return {code for op in ops for code, _ in ([(OPERAND_OPCODE[op[0]], None)] if op[0] in OPERAND_OPS
                                               else alu_immediates(op))}


def unsupported_shifts(cfg: HwConfig, instructions) -> str | None:
    """Why ``cfg``'s hardware would not compute these (opcode, immediate) SHRs as the ISA says, or None (VTA's
    Chisel reads the amount unsigned: it has no left shift by SHR)."""
    limits = cfg.capabilities.shr_immediates(cfg.LOG_ACC_WIDTH)
    if limits is None:
        return None
    bad = sorted({imm for code, imm in instructions if code == "SHR" and not limits[0] <= imm <= limits[1]})
    if not bad:
        return None
    how = ("reads the amount's low bits as a signed number" if cfg.capabilities.shr_amount == "signed" else
           "reads the amount's low bits unsigned: it has no left shift by SHR")
    return (f"ALU SHR by {', '.join(map(str, bad))}: capability set {cfg.CAPABILITIES} shifts only by "
            f"{limits[0]}..{limits[1]} as the ISA says (it {how})")


def missing_alu(cfg: HwConfig, opcodes) -> str | None:
    """Why ``cfg``'s hardware cannot run ALU ``opcodes`` (its capability set lacks one), or None."""
    lacking = sorted(set(opcodes) - cfg.capabilities.alu_opcodes)
    if not lacking:
        return None
    return (f"no ALU {', '.join(lacking)} in this config's hardware, capability set {cfg.CAPABILITIES}: "
            f"{cfg.capabilities.source}; it has {', '.join(sorted(cfg.capabilities.alu_opcodes))} "
            f"(CAPABILITIES=fsim, as in the sim preset, simulates the whole ISA)")


@dataclass(frozen=True)
class Epilogue:
    """An epilogue's ops, checked: operand ops at most once each, every constant op encodable."""

    ops: tuple[tuple, ...] = ()

    def __post_init__(self) -> None:
        for op in self.ops:
            if op[0] not in OPERAND_OPS:
                alu_immediates(op)

    @property
    def bias(self) -> bool:
        return any(op[0] == "bias" for op in self.ops)

    @property
    def residual(self) -> bool:
        return any(op[0] == "residual" for op in self.ops)

    @property
    def channel_shift(self) -> bool:
        return any(op[0] == "channel_shr" for op in self.ops)

    @property
    def alu_instructions(self) -> int:
        """ALU instructions per output tile (one per operand op, one or two per constant op)."""
        return sum(1 if op[0] in OPERAND_OPS else len(alu_immediates(op)) for op in self.ops)


def clip_bounds(a_min: float, a_max: float) -> tuple | None:
    """("clip", lo, hi) with the integer bounds of a clip, or None when they do not fit the ALU's 16-bit
    immediates (an infinite bound included)."""
    lo, hi = np.ceil(a_min), np.floor(a_max)
    return ("clip", int(lo), int(hi)) if IMM_MIN <= lo <= hi <= IMM_MAX else None


def parse_ops(epilogue) -> tuple[tuple, ...]:
    """A user's epilogue argument as a tuple of op tuples (shape only; ``Epilogue`` checks the values)."""
    if isinstance(epilogue, (str, bytes)):   # else read one character at a time
        raise TypeError(f"epilogue={epilogue!r}: a sequence of op tuples, e.g. [('shr', 8), ('clip', 0, 127)] "
                        "(the command line's text form is parsed by vta compile --epilogue)")
    ops = []
    for op in epilogue:
        if not isinstance(op, (list, tuple)) or not op or not isinstance(op[0], str):
            raise ValueError(f"epilogue op {op!r}: expected a tuple starting with the op's name, e.g. ('shr', 8)")
        ops.append(tuple(op))
    return tuple(ops)


# ---- numpy meaning ----------------------------------------------------------------------------------------------

_MEANING: dict[str, Callable[..., np.ndarray]] = {
    "shr": lambda x, n: x >> min(n, SHIFT_MAX),
    "shl": lambda x, n: wrap_int32(x << min(n, SHIFT_MAX)).astype(np.int64),
    "clip": lambda x, lo, hi: np.maximum(np.minimum(x, hi), lo),
    "relu": lambda x: np.maximum(x, 0),
    "min": lambda x, v: np.minimum(x, v),
    "max": lambda x, v: np.maximum(x, v),
    "add": lambda x, v: wrap_int32(x + v).astype(np.int64),
    "mul": lambda x, v: wrap_int32(x * v).astype(np.int64),
}


def reference_epilogue(acc: np.ndarray, ops: Sequence[tuple], bias: np.ndarray | None,
                       residual: np.ndarray | None, channel_shr: np.ndarray | None = None) -> np.ndarray:
    """numpy model of the fused epilogue on an int32 NCHW accumulator, then the int8 store (low 8 bits)."""
    x = np.asarray(acc).astype(np.int64)
    for name, *args in ops:
        if name == "bias":
            x = wrap_int32(x + bias.astype(np.int64)[None, :, None, None]).astype(np.int64)
        elif name == "channel_shr":
            x = x >> channel_shr.astype(np.int64)[None, :, None, None]
        elif name == "residual":
            x = wrap_int32(x + residual.astype(np.int64)).astype(np.int64)
        else:
            x = _MEANING[name](x, *args)
    return (x & 0xFF).astype(np.uint8).view(np.int8)


# ---- from a graph's chain to immediates ---------------------------------------------------------------------

def split_add(v: int) -> list[tuple]:
    """Adding the int32 constant ``v`` as ("add", imm) ops with 16-bit immediates (int32 addition wraps alike)."""
    ops: list[tuple] = []
    while not IMM_MIN <= v <= IMM_MAX:
        part = IMM_MAX if v > 0 else IMM_MIN
        ops.append(("add", part))
        v -= part
    if v or not ops:
        ops.append(("add", v))
    return ops


def resolve(entries: Sequence[tuple], scalar: Callable[[str], int]) -> list[tuple]:
    """A graph chain's epilogue entries (``("shr", const_node)``, ``("clip", lo, hi)``, ``("bias", node)`` ...)
    as template ops, reading each scalar constant through ``scalar(node)``: shifts clamp to 31, an add beyond
    16 bits becomes several adds, an add of 0 after another op is dropped."""
    ops: list[tuple] = []
    for entry in entries:
        kind = entry[0]
        if kind in (*OPERAND_OPS, "relu"):
            ops.append((kind,))
        elif kind == "clip":
            ops.append(tuple(entry))
        elif kind in ("shr", "shl"):
            ops.append((kind, min(scalar(entry[1]), SHIFT_MAX)))
        elif kind == "add":
            parts = split_add(scalar(entry[1]))
            if parts != [("add", 0)] or not ops:
                ops.extend(parts)
        else:
            ops.append((kind, scalar(entry[1])))
    return ops
