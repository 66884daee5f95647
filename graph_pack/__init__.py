"""Whole networks: graph IR, frontends (ONNX, MXNet Gluon, built-in zoo), quantization, graph packing
(offload between a start and a stop op), build, and the graph executor.

    graph, params = graph_pack.zoo.get_model("resnet-18", batch_size=1)
    qgraph, qparams = graph_pack.quantize(graph, params, dataset=[{"data": x}])   # percentile ranges on x
    packed = graph_pack.graph_pack(qgraph, env)     # every region the accelerator can run (or VTA's start/stop names)
    print(graph_pack.explain(packed).format())     # where each op runs, why, the MAC share
    mod = graph_pack.build(packed, env, qparams)
    mod.set_input("data", x); mod.run(); y = mod.get_output(0)

The public names are bound eagerly, after their submodules are imported: two of them (``quantize``,
``build``) share their submodule's name, and Python binds a package attribute to the submodule whenever
that submodule is first imported, so a lazy binding would turn ``graph_pack.build`` into a module the moment
any code imported ``graph_pack.build`` as a module. The frontends import onnx / mxnet only when called.
"""

from __future__ import annotations

from graph_pack import zoo
from graph_pack.build import build
from graph_pack.calibration import load_calibration, quantization_report
from graph_pack.explain import explain
from graph_pack.frontend_mxnet import from_mxnet, import_mxnet
from graph_pack.frontend_onnx import from_onnx
from graph_pack.graph import Graph, GraphBuilder, GraphError, Node, TensorType
from graph_pack.pack import graph_pack
from graph_pack.quantize import quantize
from graph_pack.reference import run_reference

__all__ = ["Graph", "GraphBuilder", "GraphError", "Node", "TensorType", "build", "explain", "from_mxnet", "from_onnx",
           "graph_pack", "import_mxnet", "load_calibration", "quantization_report", "quantize", "run_reference", "zoo"]
