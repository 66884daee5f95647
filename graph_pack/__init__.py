"""Whole networks: graph IR, frontends (ONNX, MXNet Gluon, built-in zoo), quantization, graph packing
(offload between a start and a stop op), build, and the graph executor.

    graph, params = graph_pack.zoo.get_model("resnet-18", batch_size=1)
    qgraph, qparams = graph_pack.quantize(graph, params, global_scale=8.0, skip_conv_layers=[0])
    packed = graph_pack.graph_pack(qgraph, env, start_name="nn.max_pool2d", stop_name="nn.global_avg_pool2d")
    mod = graph_pack.build(packed, env, qparams)
    mod.set_input("data", x); mod.run(); y = mod.get_output(0)
"""

from __future__ import annotations

import importlib

from graph_pack.graph import Graph, GraphBuilder, GraphError, Node, TensorType
from graph_pack.reference import run_reference

_LAZY = {
    "from_onnx": ("graph_pack.frontend_onnx", "from_onnx"),
    "from_mxnet": ("graph_pack.frontend_mxnet", "from_mxnet"),
    "quantize": ("graph_pack.quantize", "quantize"),
    "graph_pack": ("graph_pack.pack", "graph_pack"),
    "build": ("graph_pack.build", "build"),
    "zoo": ("graph_pack.zoo", None),
}

__all__ = ["Graph", "GraphBuilder", "GraphError", "Node", "TensorType", "build", "from_mxnet", "from_onnx",
           "graph_pack", "quantize", "run_reference", "zoo"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'graph_pack' has no attribute {name!r}")
    module, attr = _LAZY[name]
    mod = importlib.import_module(module)
    return mod if attr is None else getattr(mod, attr)
