"""Which graph nodes the host templates take, and their kernels with a tuned schedule (``build``'s
``host_schedules``): a float32 conv2d (groups 1 or depthwise, NCHW / OIHW) or dense, or an int8 conv2d (int32
out), with the bias add, residual add and relu that alone read it fused as the kernel's epilogue."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from host import jit
from host.shapes import pair, quad
from host.templates.base import HostKernel, host_template_of
from host.templates.conv2d import Conv2dNCHWc, Conv2dNCHWcInt8
from host.templates.dense import DensePack
from host.templates.depthwise import DepthwiseConv2dNCHWc
from host.templates.spatial_pack import Conv2dSpatialPack

CONV_TEMPLATES = {"x86": Conv2dNCHWc.ops[0], "arm": Conv2dSpatialPack.ops[0]}   # CPU family -> conv2d template
DENSE_TEMPLATES = {"x86": DensePack.ops[0], "arm": DensePack.ops[0]}
DEPTHWISE_TEMPLATES = {"x86": DepthwiseConv2dNCHWc.ops[0], "arm": DepthwiseConv2dNCHWc.ops[0]}
INT8_CONV_TEMPLATES = {"x86": Conv2dNCHWcInt8.ops[0], "arm": Conv2dNCHWcInt8.ops[0]}
HostSchedules = dict[str, dict] | Callable[[dict], dict | None] | None
_KERNELS = jit.KernelCache()   # (workload key, config, epilogue) -> HostKernel


def host_workload(node, graph, arch: str = "x86") -> dict[str, Any] | None:
    """The host-template workload of a graph node for a CPU family ("x86" / "arm"), or None when no host template
    takes it (another op, an integer or packed layout, groups)."""
    if node.op not in ("nn.conv2d", "nn.dense") or len(node.inputs) != 2:
        return None
    x, w = graph[node.inputs[0]], graph[node.inputs[1]]
    a = node.attrs   # every attribute: graph_pack's nodes hold their defaults
    dtypes = (x.dtype, w.dtype, graph[node.name].dtype)
    if dtypes not in (("float32",) * 3, ("int8", "int8", "int32")) or (dtypes[0] == "int8" and node.op != "nn.conv2d"):
        return None
    if node.op == "nn.dense":
        if a.get("data_layout", "NC") != "NC" or a.get("kernel_layout", "OI") != "OI" or len(x.shape) != 2:
            return None
        return {"op": DENSE_TEMPLATES[arch], "data_shape": tuple(x.shape), "kernel_shape": tuple(w.shape)}
    if (a.get("data_layout", "NCHW"), a.get("kernel_layout", "OIHW")) != ("NCHW", "OIHW"):
        return None
    if len(x.shape) != 4 or len(w.shape) != 4:
        return None
    groups = int(a["groups"])
    if groups == 1 and w.shape[1] == x.shape[1]:
        op = (INT8_CONV_TEMPLATES if x.dtype == "int8" else CONV_TEMPLATES)[arch]
    elif groups == x.shape[1] == w.shape[0] and w.shape[1] == 1:
        op = DEPTHWISE_TEMPLATES[arch]
    else:
        return None
    return {"op": op, "data_shape": tuple(x.shape), "kernel_shape": tuple(w.shape),
            "strides": pair(a["strides"], "strides"), "padding": quad(a["padding"], "padding"),
            "dilation": pair(a["dilation"], "dilation")}


def _key(workload: dict) -> str:
    return json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in workload.items()}, sort_keys=True,
                      separators=(",", ":"))


def tuned_config(schedules: HostSchedules, node, graph, arch: str) -> tuple[dict, dict] | None:
    """(workload, config) of the node's tuned schedule in ``schedules`` (keyed like tuning records, for this CPU's
    template family), or None."""
    workload = None if schedules is None else host_workload(node, graph, arch)
    if workload is None:
        return None
    config = schedules(workload) if callable(schedules) else schedules.get(_key(workload))
    return None if config is None else (workload, config)


def tuned_kernel(workload: dict, config: dict, epilogue: tuple[str, ...]) -> HostKernel:
    """The compiled kernel of a workload under a tuned config, compiled once per process."""
    key = (_key(workload), json.dumps(config, sort_keys=True), tuple(epilogue))
    return _KERNELS.get(key, lambda: host_template_of(workload["op"]).from_task_workload(workload).build(config,
                                                                                                          epilogue))
