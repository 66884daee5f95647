"""Tuning tasks: one accelerator workload (a template call) with its knob space and its weight in a network.

A task is what AutoTVM's ``autotvm.task`` was for VTA: the operator, its shapes and the epilogue kind
that changes what fits in SRAM (a bias vector, a residual tile). Measuring compiles the template for a
config with an epilogue like the network's (bias / residual, then shift, clip, int8 store), so a schedule
tuned here is valid inside ``build`` and ranks the same (the network's chain may add a few ALU ops).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from graph_pack.build import workload_key
from graph_pack.graph import Graph
from graph_pack.pack import group_workload
from graph_pack.schedule_log import workload_name
from hw_config import HwConfig
from tuning.targets import TuningTarget, owner_of, register_target, target_named
from vta.environment import config_of
from vta.space import ConfigSpace, KnobError
from vta.templates import TEMPLATE_VERSION, CompiledOp, Template, compile_template, template_of
from vta.templates.base import TEMPLATES

__all__ = ["TEMPLATE_VERSION", "Task", "alu_task", "conv_task", "extract_tasks"]   # TEMPLATE_VERSION: vta.templates'
CONV_WORKLOAD_ARGS = ("data_shape", "kernel_shape", "strides", "padding", "groups")


@dataclass
class Task:
    """One workload to tune on one hardware config; ``weight`` = how often the network runs it."""

    workload: dict[str, Any]
    cfg: HwConfig
    weight: int = 1
    names: list[str] = field(default_factory=list)   # the network's groups that run this workload

    @property
    def key(self) -> str:
        return workload_key(self.workload)

    @property
    def op(self) -> str:
        return self.workload["op"]

    @property
    def template_version(self) -> str:
        """What the records of this task carry as the version of the code they measured."""
        return TEMPLATE_VERSION

    @property
    def name(self) -> str:
        return workload_name(self.workload)

    # ---- compiling ----
    @cached_property
    def template(self) -> Template:
        """The template instance tuning measures (``Template.task_program``: a network-like epilogue)."""
        return template_of(self.op).from_task_workload(self.workload, self.cfg)

    def epilogue(self) -> list[tuple]:
        return list(self.template.epilogue.ops)

    def compile_args(self) -> dict[str, Any]:
        return template_of(self.op).task_program(self.workload)[0]

    def compile(self, config: dict | None = None, **kwargs) -> CompiledOp:
        """The template compiled for ``config`` (None: its default)."""
        return compile_template(self.template, config, **kwargs)

    @cached_property
    def default_op(self) -> CompiledOp:
        return self.compile(None)

    @cached_property
    def space(self) -> ConfigSpace:
        return self.template.space()

    @property
    def default_config(self) -> dict:
        return self.default_op.config

    def check(self, config: dict) -> str | None:
        """Why ``config`` cannot run (checked without emitting anything), or None."""
        try:
            normal = self.space.normalize(config)
        except KnobError as e:
            return str(e)
        return self.template.check(normal)

    @property
    def flop(self) -> int:
        """Useful operations of one run (2 x multiply-accumulates; one per element for ALU ops)."""
        return self.template.flop

    def __repr__(self) -> str:
        return f"Task({self.name}, weight={self.weight}, {len(self.space)} configs)"

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("default_op", None)  # holds a simulator; workers compile their own
        return state


def extract_tasks(packed: Graph, env=None, ops: tuple[str, ...] | None = None, target: str = "vta") -> list[Task]:
    """The tasks of ``target`` in a graph, deduplicated, each weighted by its occurrences (in order of first use).
    ``ops`` filters by template name (e.g. ("conv2d", "group_conv2d")).

    ``target="vta"``: the accelerator workloads of a packed graph (``env`` its hardware config); ``"cpu"``: the host
    operators instead (float conv2d and dense of any graph, packed or not), as tasks of the host templates for
    ``env`` (a ``CpuTarget``; default this machine's CPU): ``tuning.cpu``. Targets are ``tuning.targets``'."""
    return target_named(target).extract(packed, env, ops)


def _extract_accelerator_tasks(packed: Graph, env, ops: tuple[str, ...] | None) -> list[Task]:
    """The accelerator's tasks: the groups graph_pack planned, one workload each."""
    if not isinstance(getattr(packed, "meta", None), dict):
        raise TypeError(f"extract_tasks takes a graph_pack.Graph (packed by graph_pack), not {type(packed).__name__}")
    if "groups" not in packed.meta:   # an accelerator's tasks are the groups graph_pack plans
        raise ValueError("this graph is not packed: graph_pack(graph, env, start_name=..., stop_name=...) first "
                         "(target='cpu' takes unpacked graphs)")
    cfg = config_of(env)
    if packed.meta.get("config") not in (None, cfg.fingerprint):
        raise ValueError("this graph was packed for another hardware config; pack it with this env")
    tasks: dict[str, Task] = {}
    for group in packed.meta.get("groups", {}).values():
        workload = group_workload(packed, group, cfg)
        if ops is not None and workload["op"] not in ops:
            continue
        key = workload_key(workload)
        if key not in tasks:
            tasks[key] = Task(workload, cfg)
        else:
            tasks[key].weight += 1
        tasks[key].names.append(group.head)
    return list(tasks.values())


def conv_task(env, data_shape, kernel_shape, strides=1, padding=0, groups: int = 1, *, op: str | None = None,
              bias: bool = True, residual: bool = False) -> Task:
    """A task for one convolution / dense written by hand (as VTA's tune_conv2d.py scripts do)."""
    pair = (lambda v: (v, v) if isinstance(v, int) else tuple(v))
    name = op or ("group_conv2d" if groups > 1 else "conv2d")
    workload: dict[str, Any] = {"op": name, "data_shape": tuple(data_shape), "kernel_shape": tuple(kernel_shape),
                                "bias": bias, "residual": residual}
    if name != "dense":
        workload.update(strides=pair(strides), padding=pair(padding))
    if name in ("conv2d", "group_conv2d"):
        workload["groups"] = groups
    return Task(_canonical(workload), config_of(env))


def alu_task(env, op: str, data_shape, tensor_rhs: bool = True) -> Task:
    """A task for one element-wise ALU op on an int32 tensor of ``data_shape`` (N, C, H, W)."""
    return Task(_canonical({"op": op, "data_shape": tuple(data_shape), "tensor_rhs": tensor_rhs}), config_of(env))


def task_of(workload: dict, cfg) -> Task:
    """The task of a workload, by the target that owns its op (``tuning.targets``: a host template's is a
    ``tuning.cpu.CpuTask``, an accelerator template's a ``Task``)."""
    return owner_of(workload).task(workload, cfg)


def _canonical(workload: dict) -> dict:
    """Tuples as build's group_workload writes them, so keys agree."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in workload.items()}


register_target(TuningTarget("vta", _extract_accelerator_tasks, lambda w: w.get("op") in TEMPLATES,
                             lambda w, cfg: Task(w, cfg), "the accelerator's layers of a packed graph"))
