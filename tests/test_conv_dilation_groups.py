"""Dilated convolutions, groups narrower than a channel block (depthwise, RegNet's 8-channel groups) and per-channel
shifts on the accelerator (issue 40): each program's output against a direct numpy convolution written here
(independent of the templates' own references), for the default config and several others of the tuning space;
then the same layers in a graph, quantized with per-channel scales, offloaded and bit-exact against the quantized
graph's numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

import graph_pack
from graph_pack import explain
from graph_pack.graph import GraphBuilder
from graph_pack.kernels import KERNELS
from graph_pack.quantize import _Quantizer
from hw_config import load_config
from vta.numerics import block_diagonal, from_block_diagonal, unpack_blocks
from vta.runtime import ScheduleError
from vta.templates import compile_op
from vta.templates.conv import ConvTemplate

PYNQ = load_config("pynq")


def direct_conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int, dilation: int, groups: int) -> np.ndarray:
    """NCHW x OIHW grouped, dilated convolution in int64, one kernel tap at a time."""
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    og = o // groups
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dilation:i * dilation + (oh - 1) * stride + 1:stride,
                           j * dilation:j * dilation + (ow - 1) * stride + 1:stride]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch,
                                                         w[g * og:(g + 1) * og, :, i, j].astype(np.int64))
    return out


def sample_configs(op, rng: np.random.Generator, count: int) -> list:
    """Up to ``count`` valid configs of the op's space besides its default (the tuner's candidates)."""
    space, t = op.space, op.template
    picks = []
    for i in rng.permutation(len(space))[:400]:
        config = space[int(i)]
        if t.check(config) is None and config != op.config:
            picks.append(config)
        if len(picks) == count:
            break
    return picks


# (channels in, channels out, groups, kernel, stride, padding, dilation, height = width, preset)
CASES = {
    "dilation2": (16, 32, 1, 3, 1, 2, 2, 10, "pynq"),
    "dilation3-stride2": (20, 16, 1, 3, 2, 3, 3, 13, "pynq"),
    "depthwise-24": (24, 24, 24, 3, 1, 1, 1, 9, "pynq"),
    "depthwise-stride2-dilated": (32, 32, 32, 3, 2, 2, 2, 11, "pynq"),
    "groups-of-8": (32, 32, 4, 3, 1, 1, 1, 8, "pynq"),
    "depthwise-multiplier2": (16, 32, 16, 3, 1, 1, 1, 7, "pynq"),
    "groups-of-16-on-block32": (64, 64, 4, 3, 1, 1, 1, 6, "block32"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_dilated_and_narrow_group_convs_are_exact_for_several_configs(case: str) -> None:
    ci, co, groups, k, stride, pad, dilation, hw, preset = CASES[case]
    cfg = load_config(preset)
    rng = np.random.default_rng(len(case))
    epilogue = [("bias",), ("shr", 7), ("clip", -127, 127)]
    wl = {"data_shape": (cfg.BATCH, ci, hw, hw), "kernel_shape": (co, ci // groups, k, k), "strides": stride,
              "padding": pad, "groups": groups, "dilation": dilation}
    name = "group_conv2d" if groups > 1 else "conv2d"
    default = compile_op(name, cfg, epilogue=epilogue, **wl)
    x = rng.integers(-128, 128, wl["data_shape"], dtype=np.int8)
    w = rng.integers(-128, 128, wl["kernel_shape"], dtype=np.int8)
    bias = rng.integers(-(1 << 12), 1 << 12, co).astype(np.int32)
    acc = direct_conv(x, w, stride, pad, dilation, groups) + bias[None, :, None, None]
    want = np.clip(acc >> 7, -127, 127).astype(np.int8)
    configs = sample_configs(default, rng, 3)
    assert len(configs) == 3, "the tuning space has other valid configs"
    for config in [None, *configs]:
        op = default if config is None else compile_op(name, cfg, epilogue=epilogue, config=config, **wl)
        np.testing.assert_array_equal(op.run(x, w, bias), want, err_msg=f"{case}, config {config or 'default'}")
    t = default.template
    model_macs = int(want.size) * (ci // groups) * k * k
    assert t.model_macs == model_macs
    if groups > 1 and (ci // groups) % cfg.BLOCK_IN:   # block-diagonal: the GEMM core multiplies zeros too
        assert t.narrow_groups and t.macs == model_macs * cfg.BLOCK_IN // (ci // groups) * (-(-co // cfg.BLOCK_OUT)
                                                                                        * cfg.BLOCK_OUT) // co
    task = t.task_workload()
    assert task.get("dilation", (1, 1)) == (dilation, dilation) and task["groups"] == groups


def test_a_dilated_task_is_a_task_of_its_own_and_undilated_keys_stay():
    """Dilation enters a task's key only when it is not 1, so every earlier task (and its tuning records) keeps its
    key; a dilated task rebuilds the same workload."""
    plain = ConvTemplate.parse("conv2d", PYNQ, (), {"data_shape": (1, 16, 8, 8), "kernel_shape": (16, 16, 3, 3),
                                                        "padding": 1})
    dilated = ConvTemplate.parse("conv2d", PYNQ, (), {"data_shape": (1, 16, 8, 8), "kernel_shape": (16, 16, 3, 3),
                                                          "padding": 2, "dilation": 2})
    assert "dilation" not in plain.task_workload()
    again = ConvTemplate.from_task_workload(dilated.task_workload(), PYNQ)
    assert (again.geometry.dh, again.geometry.dw) == (2, 2) and again.geometry.out_h == 8


@pytest.mark.parametrize("bad, message", [
    ({"dilation": 0}, "dilation must be >= 1"),
    ({"dilation": (1, 2), "op": "conv2d_transpose"}, "conv2d_transpose: dilation must be 1"),
])
def test_bad_dilations_are_refused(bad: dict, message: str) -> None:
    op = bad.pop("op", "conv2d")
    kernel = (16, 16, 4, 4) if op == "conv2d_transpose" else (16, 16, 3, 3)
    with pytest.raises(ValueError, match=message):
        compile_op(op, PYNQ, epilogue=[("shr", 8)], data_shape=(1, 16, 8, 8), kernel_shape=kernel, padding=1, **bad)


def test_per_channel_shift_epilogue_is_exact():
    """("bias",) then ("channel_shr",): the ALU adds the staged per-channel constant, then shifts each channel right
    by its own staged amount (0..15), against numpy."""
    rng = np.random.default_rng(5)
    epilogue = [("bias",), ("channel_shr",), ("shr", 1), ("clip", -127, 127)]
    op = compile_op("group_conv2d", PYNQ, epilogue=epilogue, data_shape=(1, 40, 9, 9), kernel_shape=(40, 1, 3, 3),
                    padding=1, groups=40)
    x = rng.integers(-128, 128, (1, 40, 9, 9), dtype=np.int8)
    w = rng.integers(-128, 128, (40, 1, 3, 3), dtype=np.int8)
    bias = rng.integers(-(1 << 10), 1 << 10, 40).astype(np.int32)
    shifts = rng.integers(0, 16, 40).astype(np.int32)
    acc = direct_conv(x, w, 1, 1, 1, 40) + bias[None, :, None, None]
    want = np.clip((acc >> shifts[None, :, None, None]) >> 1, -127, 127).astype(np.int8)
    np.testing.assert_array_equal(op.run(x, w, bias, channel_shr=shifts), want)
    with pytest.raises(ScheduleError, match=r"channel_shr: per-channel shift amounts must lie in 0\.\.15"):
        op.run(x, w, bias, channel_shr=np.full(40, 16, np.int32))


def test_block_diagonal_kernels_round_trip_and_match_the_graphs_packing():
    """The template's block-diagonal packing and graph_pack's layout_transform (groups=) give the same packed
    kernel, and unpacking gives the operator's kernel back."""
    rng = np.random.default_rng(2)
    w = rng.integers(-128, 128, (24, 1, 3, 3), dtype=np.int8)   # depthwise, 24 channels: padded to 32
    wide = block_diagonal(w, 24, 16)
    assert wide.shape == (24, 16, 3, 3) and np.count_nonzero(wide) == np.count_nonzero(w)
    np.testing.assert_array_equal(from_block_diagonal(wide, 24, 1), w)
    t = ConvTemplate.parse("group_conv2d", PYNQ, (), {"data_shape": (1, 32, 8, 8), "kernel_shape": (32, 1, 3, 3),
                                                          "padding": 1, "groups": 32})
    packed = t.pack("kernel", w)
    graph_packed = KERNELS["layout_transform"]({"src_layout": "OIHW", "dst_layout": "OIHW16o16i", "groups": 24}, w)
    np.testing.assert_array_equal(packed, graph_packed)
    np.testing.assert_array_equal(t.unpack("kernel", packed.view(np.uint8))[:24], w)
    assert unpack_blocks(packed, 32, 16)[:24, :, 1, 1].nonzero()[1].tolist() == list(range(16)) + list(range(8))


def _block(rng: np.random.Generator) -> tuple:
    """conv 3x3 dilation 2 (+bias, relu) -> depthwise 3x3 whose channels' weights differ 16x (+bias, relu; per-channel
    scales under per_channel="auto") -> 3x3 conv in groups of 8 channels (relu): 20 channels, not a whole block."""
    b = GraphBuilder()
    x = b.input("data", (1, 20, 12, 12))
    spread = 2.0 ** rng.uniform(-2, 2, 24)
    w1 = (rng.standard_normal((24, 20, 3, 3)) / 12).astype(np.float32)
    wd = (rng.standard_normal((24, 1, 3, 3)) * spread[:, None, None, None] / 3).astype(np.float32)
    w3 = (rng.standard_normal((24, 8, 3, 3)) / 6).astype(np.float32)
    y = b.op("nn.conv2d", [x, b.const("w1", w1)], padding=(2, 2), dilation=(2, 2), name="dilated")
    y = b.op("nn.relu", [b.op("nn.bias_add", [y, b.const("b1", rng.standard_normal(24).astype(np.float32))])])
    y = b.op("nn.conv2d", [y, b.const("wd", wd)], padding=(1, 1), groups=24, name="depthwise")
    y = b.op("nn.relu", [b.op("nn.bias_add", [y, b.const("bd", rng.standard_normal(24).astype(np.float32))])])
    y = b.op("nn.relu", [b.op("nn.conv2d", [y, b.const("w3", w3)], padding=(1, 1), groups=3, name="grouped")])
    graph, params = b.finish([y])
    return graph, params, rng.standard_normal((1, 20, 12, 12)).astype(np.float32)


def test_dilated_depthwise_and_grouped_layers_offload_bit_exact_with_per_channel_scales():
    graph, params, x = _block(np.random.default_rng(3))
    qgraph, qparams = graph_pack.quantize(graph, params, dataset=[{"data": x}], skip_conv_layers=())
    assert any(n.name.endswith("channel_shr") for n in qgraph.ops()), "per-channel scales on the depthwise layer"
    packed = graph_pack.graph_pack(qgraph, PYNQ)
    placement = explain(packed)
    assert placement.mac_share == 1.0, [(p.name, p.why) for p in placement.ops if p.macs and p.where == "host"]
    assert ("channel_shr",) in [e[:1] for e in packed.meta["groups"]["depthwise"].epilogue]
    assert placement.executed_macs > placement.accelerator_macs   # padding to 32 channels, block-diagonal groups
    mod = graph_pack.build(packed, PYNQ, qparams, fallback="error")
    mod.run(data=x)
    np.testing.assert_array_equal(mod.get_output(0), graph_pack.run_reference(qgraph, qparams, {"data": x}))
    float_out = graph_pack.run_reference(graph, params, {"data": x})
    got = mod.get_output(0).astype(np.float64).ravel()
    assert got @ float_out.ravel() / (np.linalg.norm(got) * np.linalg.norm(float_out)) > 0.99


def test_a_bias_folded_into_the_per_channel_rounding_changes_no_output(monkeypatch):
    """The quantizer adds a per-channel layer's bias (at the finer scales) with its rounding term, before the
    per-channel shift: the same integers as the shift followed by the bias add, one per-channel add fewer."""
    graph, params, x = _block(np.random.default_rng(4))
    folded, fparams = graph_pack.quantize(graph, params, dataset=[{"data": x}], skip_conv_layers=())
    monkeypatch.setattr(_Quantizer, "_sole_bias", lambda self, node: (None, None))
    separate, sparams = graph_pack.quantize(graph, params, dataset=[{"data": x}], skip_conv_layers=())
    assert len(folded.ops()) < len(separate.ops())
    np.testing.assert_array_equal(graph_pack.run_reference(folded, fparams, {"data": x}),
                                  graph_pack.run_reference(separate, sparams, {"data": x}))


def test_a_narrow_group_head_falls_back_to_the_host_exactly():
    """Where build must run a planned group on the host (its template refusing every config), the packed head with
    its wide groups and block-diagonal weight computes the operator's grouped convolution."""
    from graph_pack.build import _packed_head_on_host
    from vta.numerics import pack_blocks

    graph, params, x = _block(np.random.default_rng(6))
    qgraph, qparams = graph_pack.quantize(graph, params, dataset=[{"data": x}], skip_conv_layers=())
    packed = graph_pack.graph_pack(qgraph, PYNQ)
    head = packed["grouped"]
    weight = packed[head.inputs[1]]
    assert head.attrs["groups"] == 2 and weight.attrs["groups"] == 3   # 32 padded channels: two 16-wide groups
    rng = np.random.default_rng(7)
    data = rng.integers(-128, 128, (1, 24, 12, 12), dtype=np.int8)
    w = qparams[qgraph["grouped"].inputs[1]]
    got = _packed_head_on_host(head.attrs, pack_blocks(data, 1, 16), KERNELS["layout_transform"](weight.attrs, w))
    np.testing.assert_array_equal(unpack_blocks(got, 1, 24), direct_conv(data, w, 1, 1, 1, 3))


def test_vta_compile_takes_dilation_and_a_per_channel_shift(capsys):
    """``vta compile --dilation`` with a depthwise workload and a channel_shr epilogue checks itself against numpy;
    a dilation of 0 is one line naming the rule."""
    from vta.cli import main

    status = main(["compile", "group_conv2d", "--data-shape", "1,24,10,10", "--kernel-shape", "24,1,3,3", "--groups",
                   "24", "--padding", "2,2", "--dilation", "2,2", "--epilogue", "bias; channel_shr; clip -127 127"])
    assert status == 0 and "bit-exact against numpy: yes" in capsys.readouterr().out
    assert main(["compile", "conv2d", "--data-shape", "1,16,8,8", "--kernel-shape", "16,16,3,3", "--dilation",
                 "0,1"]) == 2
    assert "vta: error: conv2d: dilation must be >= 1, got (0, 1)" in capsys.readouterr().err
