"""The small exported models of tests/data/onnx (made by tests/data/onnx/make_models.py with the torch venv), their
stripped weights refilled from a seeded generator, and inputs for them. Tests import this; it needs onnx."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np

MODELS = Path(__file__).resolve().parent / "data" / "onnx"
_MADE = json.loads((MODELS / "models.json").read_text())
FAMILIES: list[str] = _MADE["families"]
VARIANTS: list[str] = _MADE.get("variants", [])   # more exports of a family (e.g. ViT through SDPA at opset 23)
EXPORTS = ("", "_ts17")   # torch.onnx.export's default (dynamo) exporter; the TorchScript one at opset 17


def load(name: str, seed: int = 0):
    """The ModelProto ``name`` (e.g. "resnet50" or "resnet50_ts17") with every stripped initializer refilled:
    normal values of the recorded mean and std, clipped to the recorded range, from a generator seeded by
    ``seed`` and the tensor's name (so one tensor's values do not depend on the others')."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(MODELS / f"{name}.onnx"))
    meta = {p.key: p.value for p in model.metadata_props}
    for t in json.loads(meta.get("stripped_initializers", "[]")):
        rng = np.random.default_rng([seed, zlib.crc32(t["name"].encode())])
        value = rng.normal(t["mean"], t["std"], t["dims"]).clip(t["min"], t["max"]).astype(t["dtype"])
        model.graph.initializer.append(numpy_helper.from_array(value, t["name"]))
    return model


def inputs(model, seed: int = 1) -> dict[str, np.ndarray]:
    """Inputs for ``model``: float inputs standard normal; BERT's token ids in [0, 100) and an attention mask with
    its last quarter masked."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    init = {t.name for t in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in init:
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        if vi.name == "attention_mask":
            mask = np.ones(shape, dtype)
            mask[..., shape[-1] * 3 // 4:] = 0
            out[vi.name] = mask
        elif np.dtype(dtype).kind == "i":
            out[vi.name] = rng.integers(0, 100, shape).astype(dtype)
        else:
            out[vi.name] = rng.standard_normal(shape).astype(dtype)
    return out


def onnxruntime_outputs(model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def onnxruntime_quantized(model, feeds: dict[str, np.ndarray], directory: Path, quant_format: str = "QDQ",
                          activation_type: str = "QUInt8", extra_options: dict | None = None):
    """``model`` quantized by onnxruntime.quantization.quantize_static (per-channel int8 weights, uint8 activations
    unless ``activation_type`` says otherwise, calibrated on ``feeds``), as a user quantizes a model with
    onnxruntime's tools: (the quantized ModelProto, the path of its file in ``directory``, beside the float model's
    ``float.onnx``)."""
    import onnx
    from onnxruntime import quantization as q

    class OneInput(q.CalibrationDataReader):
        def __init__(self) -> None:
            self.left = [feeds]

        def get_next(self):
            return self.left.pop() if self.left else None

    src, dst = Path(directory) / "float.onnx", Path(directory) / f"quantized_{quant_format}.onnx"
    onnx.save(model, str(src))
    q.quantize_static(str(src), str(dst), OneInput(), quant_format=getattr(q.QuantFormat, quant_format),
                      activation_type=getattr(q.QuantType, activation_type), weight_type=q.QuantType.QInt8,
                      per_channel=True, extra_options=extra_options or {})
    return onnx.load(str(dst)), dst
