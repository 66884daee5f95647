"""A zoo network's float graph written as an ONNX model, so that onnxruntime and our ONNX frontend run the same
file (bench/network.py compares them). Covers the ops the classification zoo uses: conv2d, bias_add, relu,
max_pool2d, add, global_avg_pool2d, batch_flatten, dense, softmax."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from graph_pack.graph import Graph

if TYPE_CHECKING:
    import onnx


def to_onnx(graph: Graph, params: dict[str, np.ndarray], opset: int = 13) -> onnx.ModelProto:
    import onnx  # the onnx extra: imported here, so that a script importing this module can check for it first
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []
    users = graph.consumers()
    for node in graph:
        a, ins = node.attrs, list(node.inputs)
        if node.op in ("input",):
            continue
        if node.op == "const":
            if all(graph[u].op == "nn.bias_add" for u in users[node.name]):
                continue   # written reshaped, by its bias_add
            inits.append(numpy_helper.from_array(np.asarray(params[node.name], dtype=np.float32), node.name))
        elif node.op == "nn.conv2d":
            pt, pl, pb, pr = a["padding"]
            kh, kw = graph[ins[1]].shape[2:]
            nodes.append(helper.make_node("Conv", ins, [node.name], kernel_shape=[kh, kw], strides=list(a["strides"]),
                                          pads=[pt, pl, pb, pr], dilations=list(a["dilation"]), group=a["groups"]))
        elif node.op == "nn.bias_add":
            shaped = f"{ins[1]}.chw"
            inits.append(numpy_helper.from_array(
                np.asarray(params[ins[1]], dtype=np.float32).reshape(-1, *(1,) * (len(node.shape) - 2)), shaped))
            nodes.append(helper.make_node("Add", [ins[0], shaped], [node.name]))
        elif node.op == "nn.relu":
            nodes.append(helper.make_node("Relu", ins, [node.name]))
        elif node.op == "add":
            nodes.append(helper.make_node("Add", ins, [node.name]))
        elif node.op == "nn.max_pool2d":
            pt, pl, pb, pr = a["padding"]
            nodes.append(helper.make_node("MaxPool", ins, [node.name], kernel_shape=list(a["pool_size"]),
                                          strides=list(a["strides"]), pads=[pt, pl, pb, pr],
                                          ceil_mode=int(a["ceil_mode"])))
        elif node.op == "nn.global_avg_pool2d":
            nodes.append(helper.make_node("GlobalAveragePool", ins, [node.name]))
        elif node.op == "nn.batch_flatten":
            nodes.append(helper.make_node("Flatten", ins, [node.name], axis=1))
        elif node.op == "nn.dense":
            nodes.append(helper.make_node("Gemm", ins, [node.name], transB=1))
        elif node.op == "nn.softmax":
            nodes.append(helper.make_node("Softmax", ins, [node.name], axis=a["axis"]))
        else:
            raise ValueError(f"no ONNX export for {node.op} ({node.name})")
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(graph[n].shape)) for n in graph.inputs]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(graph[n].shape)) for n in graph.outputs]
    model = helper.make_model(helper.make_graph(nodes, "zoo", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model
