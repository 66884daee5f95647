"""Per-channel weight scales whose spread exceeds the accelerator's per-channel shifts (0..15, where VTA's HLS and
Chisel agree): the quantizer pre-scales the finest channels to 2**-15 of the largest (``within_channel_shifts``), so
the layer stays on the accelerator's channel_shr epilogue, bit-exact against the numpy reference and as close to the
float layer as the full spread would be."""

from __future__ import annotations

import numpy as np

import graph_pack
from graph_pack import GraphBuilder
from graph_pack.explain import explain
from vta import Environment

PYNQ = Environment("pynq")


def _conv_with_quiet_channels(rng: np.random.Generator):
    """conv 3x3 (+bias, relu), 32 output channels; channels 0..3 have weights 2**-20 of the others' (and a bias of
    their size, so their outputs are not all zero)."""
    b = GraphBuilder()
    x = b.input("data", (1, 16, 8, 8))
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32) / 12
    w[:4] *= 2.0 ** -20
    bias = rng.standard_normal(32).astype(np.float32) * 0.5
    bias[:4] *= 2.0 ** -20
    y = b.op("nn.conv2d", [x, b.const("w", w)], padding=(1, 1), name="conv")
    y = b.op("nn.relu", [b.op("nn.bias_add", [y, b.const("b", bias)], name="biased")])
    graph, params = b.finish([y])
    return graph, params, rng.standard_normal((1, 16, 8, 8)).astype(np.float32)


def test_shifts_beyond_15_are_pre_scaled_into_the_accelerators_range():
    graph, params, x = _conv_with_quiet_channels(np.random.default_rng(5))
    qgraph, qparams = graph_pack.quantize(graph, params, dataset=[{"data": x}], skip_conv_layers=(), per_channel="all")
    shifts = qparams[next(n.inputs[1] for n in qgraph.ops() if n.name == "conv.channel_shr")].reshape(-1)
    assert shifts.max() == 15 and (shifts[:4] == 15).all() and shifts[4:].max() < 15, shifts
    packed = graph_pack.graph_pack(qgraph, PYNQ)
    assert ("channel_shr",) in [e[:1] for e in packed.meta["groups"]["conv"].epilogue]
    assert explain(packed).mac_share == 1.0
    mod = graph_pack.build(packed, PYNQ, qparams, fallback="error")   # no host fallback: every shift encodes
    mod.run(data=x)
    got = mod.get_output(0)
    np.testing.assert_array_equal(got, graph_pack.run_reference(qgraph, qparams, {"data": x}))
    want = graph_pack.run_reference(graph, params, {"data": x}).astype(np.float64)
    got = got.astype(np.float64)
    assert got.ravel() @ want.ravel() / (np.linalg.norm(got) * np.linalg.norm(want)) > 0.999
