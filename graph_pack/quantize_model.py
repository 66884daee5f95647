"""A QDQ model's own quantization, read from its float graph: ``quantize(..., calibrate_mode="model")``.

graph_pack/onnx_quantized.py imports a ``QuantizeLinear`` -> ``DequantizeLinear`` pair as the float ops that compute
it: ``divide(x, s) -> round -> add(zp) -> clip(qmin, qmax) [-> subtract(zp)] -> multiply(s)``. That chain is the
model's statement of the tensor's quantization: its scale ``s``, zero point ``zp`` and range
``[(qmin - zp) * s, (qmax - zp) * s]``. Here each such chain becomes ``clip(x, lo, hi)`` of that range (the model's
saturation, and the ReLU that onnxruntime's quantizer removes when a uint8 zero point of 0 already clips at 0), and
the tensor's int8 exponent is the model's: VTA requantizes by power-of-two shifts, so the scale is rounded up to the
power of two that keeps the model's range in 128 levels, as VTA's global_scale counts them (``power2_exponent`` of
``max(|lo|, |hi|)`` with 128 levels: a symmetric int8 tensor whose scale is a power of two keeps that scale exactly, its
-128 saturating to -127). An unsigned tensor (255 levels) has 127 positive levels at our scale, so it keeps the range
at one bit less resolution; a scale that is no power of two loses up to one bit more.

Chains this does not recognise stay as they are (float ops on the host, computing what onnxruntime does): a
per-axis activation scale, a DequantizeLinear whose scale or zero point differs from its QuantizeLinear's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graph_pack.graph import Graph, Node, prune
from graph_pack.power2 import INT8_MAX, power2_exponent


@dataclass(frozen=True)
class ModelScale:
    """One fake-quantized tensor: the model's scale and zero point, its range, and the exponent we give it."""
    source: str         # the float tensor the model quantizes (the chain's input)
    scale: float
    zero_point: float
    lo: float           # the model's range in real units: (qmin - zp) * scale
    hi: float           # (qmax - zp) * scale
    exp: int            # ours: the smallest e with max(|lo|, |hi|) / 2**e <= 128


def _scalar(graph: Graph, params: dict, name: str) -> float | None:
    """The value of a scalar constant ``name``; None when it is not one."""
    if graph[name].op != "const" or params[name].size != 1:
        return None
    return float(params[name].reshape(-1)[0])


def _operand(graph: Graph, params: dict, node: Node, op: str) -> tuple[str, float] | None:
    """(data input, scalar constant) of ``node`` when it is ``op`` of one tensor and one scalar constant."""
    if node.op != op or len(node.inputs) != 2:
        return None
    data, const = node.inputs
    value = _scalar(graph, params, const)
    return None if value is None else (data, value)


def _match(graph: Graph, params: dict, node: Node) -> ModelScale | None:
    """The fake-quantization chain ending at ``node`` (the DequantizeLinear's multiply), or None."""
    dq = _operand(graph, params, node, "multiply")
    if dq is None:
        return None
    q, dq_scale = dq
    dq_zero = 0.0
    centered = _operand(graph, params, graph[q], "subtract")
    if centered is not None:
        q, dq_zero = centered
    clip = graph[q]
    if clip.op != "clip":
        return None
    shifted = _operand(graph, params, graph[clip.inputs[0]], "add")
    if shifted is None or graph[shifted[0]].op != "round":
        return None
    divided = _operand(graph, params, graph[graph[shifted[0]].inputs[0]], "divide")
    if divided is None:
        return None
    source, scale = divided
    zero = shifted[1]
    if scale != dq_scale or zero != dq_zero or not scale > 0 or graph[source].dtype != "float32":
        return None
    lo = (float(clip.attrs["a_min"]) - zero) * scale
    hi = (float(clip.attrs["a_max"]) - zero) * scale
    return ModelScale(source, scale, zero, lo, hi, power2_exponent(max(abs(lo), abs(hi)), INT8_MAX + 1))


def model_scales(graph: Graph, params: dict) -> dict[str, ModelScale]:
    """Every fake-quantized tensor of ``graph`` by the node that ends its chain (empty: the model carries none)."""
    found = {}
    for node in graph.ops():
        scale = _match(graph, params, node)
        if scale is not None:
            found[node.name] = scale
    return found


def strip_fake_quant(graph: Graph, params: dict) -> tuple[Graph, dict, dict[str, ModelScale]]:
    """``graph`` with each recognised chain replaced by ``clip(source, lo, hi)`` under the chain's last name (so its
    readers are unchanged), the chains' other nodes dropped, and the scales found."""
    scales = model_scales(graph, params)
    if not scales:
        return graph, params, {}
    out = graph.copy()
    for name, s in scales.items():
        old = out.nodes[name]
        out.nodes[name] = Node(name, "clip", [s.source], {"a_min": s.lo, "a_max": s.hi}, old.type)
    return (*prune(out, params), scales)


def carries_scales(graph: Graph, params: dict) -> bool:
    """Whether ``graph`` (an imported QDQ model) carries its own activation scales."""
    return any(_match(graph, params, node) is not None for node in graph.ops())


def weight_exponents(w: np.ndarray) -> tuple[str, np.ndarray] | None:
    """Whether the float weight ``w`` (a model's ``(q - zp) * scale``, folded at import) is exactly int8 integers
    times a power of two: ("tensor", [e]) for one exponent, ("channel", e per output channel) for one per channel,
    None when neither holds (the model's scales are not powers of two: its integers cannot be kept, ours are
    rounded from its float weights). A channel of zeros takes the largest exponent."""
    w = np.asarray(w, np.float64)

    def exact(values: np.ndarray, e: int) -> bool:
        q = values / 2.0 ** e
        return bool(np.all(q == np.round(q)) and np.abs(q).max(initial=0) <= INT8_MAX)

    e = power2_exponent(float(np.abs(w).max(initial=0)))
    if exact(w, e):
        return "tensor", np.array([e])
    rows = w.reshape(w.shape[0], -1)
    peaks = np.abs(rows).max(axis=1)
    exps = np.array([power2_exponent(float(m)) if m > 0 else e for m in peaks], np.int64)
    if all(exact(row, int(ec)) for row, ec in zip(rows, exps, strict=True)):
        return "channel", exps
    return None


def model_scales_note(qgraph: Graph) -> str:
    """One line on what ``quantize(..., calibrate_mode="model")`` took from the model (recorded in its meta)."""
    scales: dict[str, ModelScale] = qgraph.meta.get("model_scales", {})
    kinds = list(qgraph.meta.get("model_weights", {}).values())
    ratios = [2.0 ** s.exp * (INT8_MAX + 1) / max(abs(s.lo), abs(s.hi)) for s in scales.values()]
    text = (f"quantization (model): the model's scales for {len(scales)} tensor(s), each rounded up to the power of "
            "two that keeps its range")
    if ratios:
        text += f" (our int8 range / the model's: {min(ratios):.2f}..{max(ratios):.2f})"
    own = kinds.count("tensor") + kinds.count("channel")
    text += (f"; weights: {own} of {len(kinds)} as the model's own integers ({kinds.count('channel')} with per-channel "
             "power-of-two scales)")
    if kinds.count("ours"):
        text += (f", {kinds.count('ours')} rounded from the model's float weights to power-of-two scales (its scales "
                 "are not powers of two)")
    return text
