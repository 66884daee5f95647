"""Acceptance: the shipped digits CNN (trained, tests/data/digits_cnn.onnx), quantized with calibration
on training images and run with every convolution on the simulated accelerator, keeps its answers on the
held-out digits: top-1 agreement with the float model >= 98%, accuracy loss <= 1 point."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from extras import needs

from graph_pack.build import build
from graph_pack.frontend_onnx import from_onnx
from graph_pack.pack import graph_pack, offload_report
from graph_pack.quantize import quantize
from graph_pack.reference import run_reference
from hw_config import load_config

pytestmark = needs("onnx", "sklearn")
DATA = Path(__file__).resolve().parent / "data"


def _split():
    spec = importlib.util.spec_from_file_location("digits_split", DATA / "digits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.load_split()


@pytest.mark.parametrize(("preset", "mode"), [("pynq", "max"), ("pynq", "percentile"), ("batch4", "max")])
def test_digits_accuracy_survives_the_accelerator(preset, mode):
    x_train, _, x_test, y_test = _split()
    graph, params = from_onnx(DATA / "digits_cnn.onnx", shape={"input": x_test.shape})
    calibration = [{"input": x_train[i:i + len(x_test)]} for i in (0, len(x_test))]
    qgraph, qparams = quantize(graph, params, skip_conv_layers=[], calibrate_mode=mode, dataset=calibration)
    cfg = load_config(preset)
    # the whole conv stack offloads: the 1-channel input is padded to a channel block at the region entry
    packed = graph_pack(qgraph, cfg, start_name="qnn.quantize", stop_name="nn.batch_flatten")
    assert sum(r["where"] == "accelerator" for r in offload_report(packed)) == 3
    mod = build(packed, cfg, qparams, fallback="error")
    mod.run(input=x_test)
    accel = mod.get_output(0)
    np.testing.assert_array_equal(accel, run_reference(qgraph, qparams, {"input": x_test}))
    floats = run_reference(graph, params, {"input": x_test})
    agreement = np.mean(accel.argmax(1) == floats.argmax(1))
    float_acc, accel_acc = np.mean(floats.argmax(1) == y_test), np.mean(accel.argmax(1) == y_test)
    assert agreement >= 0.98, agreement
    assert float_acc - accel_acc <= 0.01, (float_acc, accel_acc)
    assert mod.cycles > 0 and sum(r["where"] == "accelerator" for r in mod.profile()) == 3
