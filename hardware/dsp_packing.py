"""Two int8 products in one DSP multiplier (INT8 packing, as Xilinx's WP486 does on the DSP48E2).

A GEMM core of BATCH x BLOCK_OUT dot products of BLOCK_IN terms has BATCH x BLOCK_IN x BLOCK_OUT int8 x int8
products; one per DSP slice, pynq's 1x16x16 core needs 256 DSP48E1 on an xc7z020 that has 220. Two outputs o1, o2
of one batch row multiply the same input x[c] by different weights, so one multiplier can make both products:

    P = (w1 * 2^S + w2) * x + 2^(S-1)   =   p1 * 2^S + p2 + 2^(S-1)        (p1 = w1 * x, p2 = w2 * x)

With S = INP_WIDTH + WGT_WIDTH (16 for int8), every product of a signed INP_WIDTH-bit and a signed WGT_WIDTH-bit
number lies in [-2^(S-1), 2^(S-1)) (int8: -16,256 .. 16,384), so p2 + 2^(S-1) lies in [0, 2^S): it is P's low S
bits exactly, and the bits above are p1 exactly, with no borrow to correct. So

    p2 = P[0:S] - 2^(S-1)     (the low S bits with their top bit inverted, read as signed: wiring)
    p1 = P[S:2S]              (read as signed: wiring)

The constant 2^(S-1) is the correction a floor division would need (p1 = ((P' - p2) >> S) with P' the product
alone is floor(P' / 2^S) plus P'[S-1]), added once by the DSP's post-adder instead of a carry chain per product.

Why S = 16, not 17 as WP486 uses for a 27-bit port: the packed factor w1 * 2^S + w2 spans [-2^(S+7) - 128,
2^(S+7) - 2^S + 127], 25 signed bits for S = 16, which is exactly the DSP48E1's 25-bit A port; with S = 17 the
corner w1 = -128, w2 < 0 needs 26 bits, and Yosys would spread that multiply over two DSP slices. x, the other
factor, takes 8 of the 18-bit B port. The product needs 2S = 32 bits (of the DSP's 48).

Exactness is checked over every (w1, w2, x) of int8 (tests/test_dsp_packing.py, 2^24 cases), the hardware against
the numpy model ``unpack(pack(w1, w2) * x + BIAS)`` on the corners and random values in Amaranth's simulator, and
the whole core against the C simulator on VTA's golden programs (tests/test_hardware_rtl.py).

Packing is a generator option (``dsp_packing`` of hardware.params.RtlParams), not part of the config: it changes
no program, no result and no cycle, only how the RTL spends DSP slices, so the config's fingerprint (hashed into
program digests) stays as it is; the RTL's build key and the Yosys cache key include it. It is on by default for
configs whose TARGET is a Xilinx board (``XILINX_TARGETS``: a DSP48E1/E2 has the 25 x 18 multiplier it needs) and
off otherwise (ECP5's MULT18X18D is 18 x 18: the packed factor does not fit one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hw_config import HwConfig

if TYPE_CHECKING:   # Amaranth is the [hw] extra's: imported where the hardware is built, not for the arithmetic
    from amaranth import Module, Value

# The DSP48E1's multiplier (7 series): a signed 25-bit port times a signed 18-bit port (the DSP48E2's is 27 x 18).
DSP_PORT_BITS = (25, 18)
# Config TARGETs whose boards carry a Xilinx part with DSP48E1/E2 slices (hardware/fpga/parts.py TARGET_PARTS).
XILINX_TARGETS = ("pynq", "ultra96", "zcu104")


@dataclass(frozen=True)
class Int8Packing:
    """Two products w1 * x and w2 * x of signed ``wgt_width``-bit weights and a signed ``inp_width``-bit input made
    by one multiplier (the module docstring)."""

    inp_width: int = 8
    wgt_width: int = 8

    @property
    def shift(self) -> int:
        """S: where the second product sits in the packed product (bits of one product)."""
        return self.inp_width + self.wgt_width

    @property
    def bias(self) -> int:
        """2^(S-1), added to the packed product so both products are read off by wiring."""
        return 1 << (self.shift - 1)

    @property
    def packed_width(self) -> int:
        """Signed bits of the packed factor w1 * 2^S + w2."""
        return self.wgt_width + self.shift + 1

    @property
    def product_width(self) -> int:
        """Signed bits of the packed product plus its bias: two products side by side."""
        return 2 * self.shift

    def refusal(self) -> str:
        """Why this packing does not fit a DSP48E1's multiplier ("" when it does)."""
        a, b = DSP_PORT_BITS
        if self.packed_width > a or self.inp_width > b:
            return (f"INP_WIDTH={self.inp_width}, WGT_WIDTH={self.wgt_width}: the packed weights need "
                    f"{self.packed_width} x {self.inp_width} signed bits, more than a DSP48E1's {a} x {b} multiplier "
                    f"(packing needs int8 weights and inputs, or narrower)")
        return ""

    # ---- the arithmetic on numpy arrays (the model the hardware is tested against) ----

    def pack(self, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
        """The packed factor w1 * 2^S + w2 (int64)."""
        return np.asarray(w1, np.int64) * (1 << self.shift) + np.asarray(w2, np.int64)

    def multiply(self, w1: np.ndarray, w2: np.ndarray, x: np.ndarray) -> np.ndarray:
        """What the DSP computes: pack(w1, w2) * x + 2^(S-1), as the ``product_width``-bit two's complement word
        the hardware keeps (int64, bits above it dropped)."""
        p = self.pack(w1, w2) * np.asarray(x, np.int64) + self.bias
        mask = (1 << self.product_width) - 1
        return _signed(p & mask, self.product_width)

    def unpack(self, packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(w1 * x, w2 * x) read off a packed product: its bits above S and its low S bits less 2^(S-1), each as a
        signed S-bit number."""
        p = np.asarray(packed, np.int64)
        s = self.shift
        low = _signed((p & ((1 << s) - 1)) ^ self.bias, s)
        high = _signed((p >> s) & ((1 << s) - 1), s)
        return high, low


def _signed(u: np.ndarray, bits: int) -> np.ndarray:
    """An unsigned ``bits``-bit number read as two's complement."""
    return np.where(u >= 1 << (bits - 1), u - (1 << bits), u)


def packing_refusal(inp_width: int, wgt_width: int, block_out: int) -> str:
    """Why a core of these widths cannot pack two products per DSP ("" when it can): the factors must fit the
    DSP48E1's 25 x 18 multiplier, and BLOCK_OUT must pair its outputs."""
    if block_out % 2:
        return f"BLOCK_OUT={block_out}: packing pairs the outputs of a batch row, so BLOCK_OUT must be even"
    return Int8Packing(inp_width, wgt_width).refusal()


def resolve_packing(cfg: HwConfig, requested: bool | None = None) -> bool:
    """Whether ``cfg``'s RTL packs two products per DSP: ``requested`` (True refused with a ValueError naming why,
    when the widths do not allow it), else the default: on for a Xilinx board's TARGET (``XILINX_TARGETS``) when
    the widths allow it, off otherwise."""
    refusal = packing_refusal(cfg.INP_WIDTH, cfg.WGT_WIDTH, cfg.BLOCK_OUT)
    if requested is None:
        return cfg.TARGET in XILINX_TARGETS and not refusal
    if requested and refusal:
        raise ValueError(f"DSP packing (two int8 products per DSP) is not possible for {cfg.model}: {refusal}")
    return bool(requested)


# ---- the hardware ----

def packed_factor(packing: Int8Packing, w1: Value, w2: Value) -> Value:
    """The packed factor w1 * 2^S + w2 of two signed weights (one adder: w1 less w2's sign, then w2's bits)."""
    return (w1.as_signed() << packing.shift) + w2.as_signed()


def packed_products(m: Module, packing: Int8Packing, factor: Value, x: Value, registered: bool,
                    name: str) -> tuple[Value, Value]:
    """(w1 * x, w2 * x) from one multiplier: ``factor`` (packed_factor's) times the signed ``x``, the product in a
    register when ``registered`` (a DSP's M register), plus the bias (the DSP's post-adder), read off by wiring."""
    from amaranth import Signal, signed
    product = factor.as_signed() * x.as_signed()
    if registered:
        q = Signal(signed(len(product)), name=f"{name}_m")
        m.d.sync += q.eq(product)
        product = q
    biased = Signal(packing.product_width, name=f"{name}_p")
    m.d.comb += biased.eq(product + packing.bias)
    s = packing.shift
    low = Signal(signed(s), name=f"{name}_lo")
    high = Signal(signed(s), name=f"{name}_hi")
    m.d.comb += [low.eq(biased[:s] ^ packing.bias), high.eq(biased[s:2 * s])]
    return high, low
