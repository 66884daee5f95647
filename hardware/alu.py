"""The lane arithmetic of ALU and GEMM, with simulator/reference.py's semantics (int32 wrap-around)."""

from __future__ import annotations

from collections.abc import Iterable

from amaranth import Module, Mux, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw_config.isa_rules import SHIFT_MAX
from hw_config.layout import ALU_OPCODE_BITS, ALU_OPCODES


def shift_amounts(b: Value) -> tuple[Value, Value, Value]:
    """SHR's controls from its signed operand ``b``: whether it shifts left (b < 0), the right amount
    min(b, SHIFT_MAX) and the left amount min(-b, SHIFT_MAX). A pipeline registers them with the operand, so the
    clamp's comparisons and the negation are not in series with the shifter (hardware/loop_engine.py)."""
    b = b.as_signed()
    amount_bits = SHIFT_MAX.bit_length()
    right = Mux(b > SHIFT_MAX, SHIFT_MAX, b[:amount_bits])
    left = Mux(b < -SHIFT_MAX, SHIFT_MAX, (-b)[:amount_bits])
    return b < 0, right, left


def alu_lane(op: Value, a: Value, b: Value, width: int, opcodes: Iterable[str] = ALU_OPCODES,
             shift: tuple[Value, Value, Value] | None = None) -> Value:
    """One lane of ALU ``op`` on signed ``width``-bit ``a`` (acc[dst]) and ``b`` (acc[src] or the immediate).

    MIN/MAX compare signed; ADD and MUL keep the low ``width`` bits; SHR shifts right arithmetically by
    min(b, SHIFT_MAX) when b >= 0 and left by min(-b, SHIFT_MAX) when b < 0 (``shift``: those controls as
    ``shift_amounts(b)`` gives them, computed a stage earlier; None: from ``b`` here). Only the ``opcodes``
    named (the config's capability set) are built; any other opcode leaves ``a``, as VTA's HLS ALU writes the
    destination row back unchanged for an opcode it lacks (MUL).
    """
    a, b = a.as_signed(), b.as_signed()
    negative, right, left = shift_amounts(b) if shift is None else shift
    shifted = Mux(negative, (a << left)[:width], (a >> right)[:width])
    result = a[:width]
    values = {"MIN": lambda: Mux(a < b, a, b), "MAX": lambda: Mux(a > b, a, b), "ADD": lambda: (a + b)[:width],
              "SHR": lambda: shifted, "MUL": lambda: (a * b)[:width]}
    for name in sorted(set(opcodes), key=ALU_OPCODES.get):
        result = Mux(op == ALU_OPCODES[name], values[name]()[:width], result)
    return result.as_signed()


def tree_sum(values: list[Value]) -> Value:
    """The sum of ``values`` as a balanced adder tree (shallower logic than a chain)."""
    while len(values) > 1:
        pairs = [values[i] + values[i + 1] for i in range(0, len(values) - 1, 2)]
        values = pairs + ([values[-1]] if len(values) % 2 else [])
    return values[0]


def dot_lane(inp: list[Value], wgt: list[Value]) -> Value:
    """sum_c inp[c] * wgt[c] over signed narrow lanes (exact: it needs no more than its natural width)."""
    return tree_sum([x.as_signed() * y.as_signed() for x, y in zip(inp, wgt, strict=True)])


class AluLane(wiring.Component):
    """One ALU lane as a component (for unit tests against numpy), with the ``opcodes`` of a capability set."""

    def __init__(self, width: int, opcodes: Iterable[str] = ALU_OPCODES):
        self.width, self.opcodes = width, frozenset(opcodes)
        super().__init__({"op": In(ALU_OPCODE_BITS), "a": In(width), "b": In(width), "result": Out(width)})

    def elaborate(self, platform) -> Module:
        m = Module()
        m.d.comb += self.result.eq(alu_lane(self.op, self.a, self.b, self.width, self.opcodes))
        return m
