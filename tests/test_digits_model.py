"""The shipped digits CNN (a real torch export, tests/data/digits_cnn.onnx) through the ONNX frontend.

It must import with a fixed batch, agree with onnxruntime on the held-out split and keep its accuracy
there: the end-to-end check that a trained network survives from_onnx (batch-norm folding included).
Regenerate the model with tests/data/train_digits.py (needs torch, which the tests do not).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from extras import need

from graph_pack import run_reference
from graph_pack.frontend_onnx import from_onnx
from graph_pack.graph import GraphError

onnx = need("onnx")
ort = need("onnxruntime")
need("sklearn")
DATA = Path(__file__).resolve().parent / "data"
MODEL = DATA / "digits_cnn.onnx"


def _load_split():
    spec = importlib.util.spec_from_file_location("digits_split", DATA / "digits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.load_split()


@pytest.fixture(scope="module")
def held_out():
    """(x_test, y_test, onnxruntime logits, reference logits, graph)."""
    _, _, x_test, y_test = _load_split()
    expected = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"]).run(None, {"input": x_test})[0]
    graph, params = from_onnx(MODEL, shape={"input": x_test.shape})
    return x_test, y_test, expected, run_reference(graph, params, {"input": x_test}), graph


def test_shipped_model_is_small_with_a_dynamic_batch() -> None:
    assert MODEL.stat().st_size < 200_000
    model = onnx.load(str(MODEL))
    assert [i.name for i in model.graph.input] == ["input"] and [o.name for o in model.graph.output] == ["logits"]
    with pytest.raises(GraphError, match="input 'input': dimension 0 is dynamic"):
        from_onnx(model)


def test_imports_to_offloadable_ops(held_out) -> None:
    *_, graph = held_out
    ops = [n.op for n in graph.ops()]
    assert ops.count("nn.conv2d") == 3 and ops.count("nn.dense") == 1
    assert "nn.batch_norm" not in ops   # the three batch norms folded into the convolutions
    assert graph.inputs == ["input"] and graph.outputs == ["logits"]
    assert graph["input"].shape == (360, 1, 8, 8) and graph["logits"].shape == (360, 10)


def test_matches_onnxruntime_on_the_held_out_split(held_out) -> None:
    _, _, expected, got, _ = held_out
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert (got.argmax(1) == expected.argmax(1)).all()


def test_held_out_accuracy(held_out) -> None:
    _, y_test, _, got, _ = held_out
    assert len(y_test) == 360
    assert (got.argmax(1) == y_test).mean() >= 0.97


def test_batch_fills_the_dynamic_dimension() -> None:
    graph, _ = from_onnx(MODEL, batch=3)
    assert graph[graph.inputs[0]].shape == (3, 1, 8, 8)
    graph, _ = from_onnx(MODEL, shape={"input": (5, 1, 8, 8)}, batch=3)  # an explicit shape wins
    assert graph[graph.inputs[0]].shape == (5, 1, 8, 8)
