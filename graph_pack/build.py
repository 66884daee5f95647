"""``build``: a packed graph becomes a ``GraphModule`` - accelerator programs plus host kernels, in order.

Build steps, each timed in ``module.build_times``: "check params" (every constant's param present and of its
type), "compile" (each accelerator group as graph_pack planned it: its template parsed with the scalar
constants read, compiled with a tuned schedule when ``schedules`` has one for its task, the template's default
otherwise; its constants packed once, from their params straight into the template's layout and staged in
device DRAM; every other node gets a host kernel: llvmlite JIT where it covers the op, numpy otherwise) and
"fold host constants" (the constant subgraphs host kernels read). Accelerator groups chain through shared
DRAM buffers in the packed layout, so a convolution reads its predecessor's output where it was stored;
host steps copy device values out only when they need them.
"""

from __future__ import annotations

import json
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graph_pack import batched, host_auto
from graph_pack.graph import Graph, GraphError
from graph_pack.kernels import KERNELS, conv2d_transpose_direct
from graph_pack.opdefs import packed_factors
from graph_pack.pack import Group
from graph_pack.reference import check_input, check_inputs
from host import jit
from host import templates as host_templates
from hw_config import HwConfig
from hw_config.checks import is_whole
from simulator.stats import RunStats, basis_legend
from vta.device import Buffer, Device, SimDevice, cleanup_on_error, close_on_exit, free_all
from vta.environment import config_of
from vta.numerics import (
    pack_batched_rows,
    pack_blocks,
    unpack_batched_matrices,
    unpack_batched_rows,
    unpack_blocks,
)
from vta.runtime import ScheduleError, combine_stats
from vta.templates import CompiledOp, compile_template
from vta.templates.epilogue import resolve

Schedules = Mapping[str, dict] | Callable[[dict], dict | None] | None
CPU_BACKENDS = ("auto", "jit", "numpy")
FALLBACKS = ("warn", "error", "allow")   # what build does with a group its template refuses


class HostFallbackWarning(UserWarning):
    """An accelerator group of the packed graph runs on the host: its template has no config for it."""


class HostFallbackError(GraphError):
    """``build(..., fallback="error")`` met a group its template refuses."""


@dataclass
class DeviceTensor:
    """A value living in device DRAM in the packed layout."""

    buffer: Buffer
    shape: tuple[int, ...]
    dtype: str


# ---- workloads: how tuning records name an accelerator group -------------------------------------------------

def workload_key(workload: dict) -> str:
    """Canonical text of a workload (the key of ``schedules`` and of tuning records)."""
    return json.dumps(workload, sort_keys=True, separators=(",", ":"))


# ---- steps ----------------------------------------------------------------------------------------------------

@dataclass
class StepRecord:
    name: str
    op: str
    where: str                  # "accelerator" or "cpu"
    fused: int = 0
    stats: RunStats | None = None
    host_seconds: float = 0.0
    macs: int = 0


@dataclass
class HostStep:
    name: str
    op: str
    fn: Callable[..., np.ndarray]
    attrs: dict
    inputs: list[str]
    backend: str = "numpy"
    fused: list[str] = field(default_factory=list)   # ops after `name` it also computes (a kernel's epilogue)

    @property
    def output(self) -> str:
        """The value the step produces: its last fused op's, else its own."""
        return self.fused[-1] if self.fused else self.name

    def run(self, m: GraphModule, compute: bool) -> None:
        m.values[self.output] = self.fn(self.attrs, *(m.host_value(i) for i in self.inputs))


@dataclass
class AccelStep:
    group: Group
    op: CompiledOp
    staged: list[tuple[str, Buffer, str]]        # (value, buffer, dtype) copied in before each run
    output: str
    out_shape: tuple[int, ...]
    workload: dict = field(default_factory=dict)
    macs: int = 0

    @property
    def name(self) -> str:
        return self.group.head

    def run(self, m: GraphModule, compute: bool) -> RunStats:
        for value, buf, dtype in self.staged:
            v = m.values[value]
            if isinstance(v, DeviceTensor):
                if v.buffer == buf:
                    continue
                v = m.host_value(value)
            m.device.copy_in(buf, np.ascontiguousarray(v, dtype=dtype))
        stats = self.op.program.run(compute=compute)
        m.values[self.output] = DeviceTensor(self.op.buffers.out, self.out_shape, "int8")
        return stats

    def record(self, stats: RunStats) -> StepRecord:
        """The module's record of a run of this group."""
        return StepRecord(self.name, self.workload["op"], "accelerator", len(self.group.members) - 1, stats,
                          macs=self.macs)

    def check(self, m: GraphModule) -> str | None:
        """Why this group's output of the last run differs from its template's numpy reference on the inputs
        it read (every input buffer read back from the device), or None when they agree bit for bit."""
        t, device, need = self.op.template, m.device, self.op.template.buffer_bytes()
        inputs = {name: t.unpack(name, device.copy_out(getattr(self.op.buffers, name), need[name]))
                  for name in t.inputs if need.get(name)}
        want = t.reference(**inputs)
        got = t.unpack_output(device.copy_out(self.op.buffers.out, need["out"]))
        if np.array_equal(got, want):
            return None
        wrong = np.argwhere(got != want)
        first = tuple(int(i) for i in wrong[0])
        return (f"{len(wrong)} of {got.size} outputs differ from the numpy reference, the first at {first}: "
                f"{int(got[first])} instead of {int(want[first])}")


def release(device: Device, steps: list, owned: list[Buffer]) -> None:
    """Free the accelerator steps' own buffers (their micro-op kernels; the ops are closed) and ``owned``."""
    ops = [step.op for step in steps if isinstance(step, AccelStep)]
    buffers = [buf for op in ops for buf in op.owned] + owned
    for op in ops:
        op.owned, op.closed = [], True
    free_all(device, buffers)


# ---- the module -------------------------------------------------------------------------------------------------

NAME_WIDTH = 64   # the per-layer table's widest layer name column


def _shortened(name: str, width: int) -> str:
    """``name`` in at most ``width`` characters: whole if it fits, else its start and end around "..."."""
    if len(name) <= width:
        return name
    head = (width - 3) // 2
    return f"{name[:head]}...{name[len(name) - (width - 3 - head):]}"


class GraphModule:
    """A built network: ``set_input``, ``run``, ``get_output``, ``benchmark``, ``profile``.

    Threads: a module holds one set of inputs, intermediate values and outputs, so it is one thread's at a time.
    ``run``, ``set_input``, ``get_output``, ``check_steps`` or ``close`` while another thread is in one of them
    raises GraphError; give each thread its own module (``build`` again: modules share nothing but the device
    they were built on; docs/networks.md, "Threads").
    """

    def __init__(self, graph: Graph, cfg: HwConfig, device: Device, steps: list, consts: dict[str, np.ndarray],
                 build_times: dict[str, float], owned: list[Buffer] | None = None):
        self.graph, self.cfg, self.device, self.steps = graph, cfg, device, steps
        self._owned = list(owned or [])   # the groups' buffers on the device (the ops own their micro-op buffers)
        self.closed = False
        self.consts = consts
        self.build_times = build_times
        self.inputs: dict[str, np.ndarray] = {}
        self.values: dict[str, Any] = {}
        self.outputs: list[np.ndarray] = []
        self.records: list[StepRecord] = []
        self.fallbacks: dict[str, str] = {}   # accelerator groups build had to run on the host, and why
        self._stats: RunStats | None = None
        self._runs: list[RunStats] | None = None   # the last run's, per accelerator group (``stats`` adds them up)
        self.host_seconds = 0.0
        self._in_use = threading.Lock()   # held by the thread in run / set_input / get_output (_alone)
        self._plan: list | None = None    # the steps as run: groups in batches on the simulator (graph_pack.batched)

    @contextmanager
    def _alone(self) -> Iterator[None]:
        """Hold the module for one call; refused (GraphError) while another thread holds it."""
        if not self._in_use.acquire(blocking=False):
            raise GraphError("this GraphModule is in use in another thread: a module holds one set of inputs and "
                             "outputs, so it is one thread's at a time; give each thread its own (build it again)")
        try:
            yield
        finally:
            self._in_use.release()

    # ---- inputs and outputs ----
    def set_input(self, name: str | None = None, value: np.ndarray | None = None, **inputs: np.ndarray) -> None:
        """Set inputs by name (``set_input("data", x)`` or ``set_input(data=x)``); every one is checked (name,
        shape, dtype) before any is kept, so a refused call changes nothing."""
        if name is not None:
            inputs[name] = value
        elif value is not None:
            raise GraphError(f"set_input(name=None, value=...): give the input's name, one of {self.graph.inputs}")
        with self._alone():
            self._set_inputs(inputs)

    def _set_inputs(self, inputs: dict[str, np.ndarray]) -> None:
        checked = {}
        for k, v in inputs.items():
            if k not in self.graph.inputs:
                raise GraphError(f"unknown input {k!r}; the graph's inputs: {self.graph.inputs}")
            checked[k] = check_input(self.graph, k, v)
        self.inputs.update(checked)

    def get_num_outputs(self) -> int:
        return len(self.graph.outputs)

    def get_output(self, index: int = 0) -> np.ndarray:
        """Output ``index`` of the last run, as a new array (changing it changes nothing the module keeps)."""
        with self._alone():
            return self._output(index).copy()

    def _output(self, index: int) -> np.ndarray:
        if not self.outputs:
            raise GraphError("no outputs yet: call run() first (or the last run was refused)")
        if not is_whole(index) or not 0 <= index < len(self.outputs):
            raise GraphError(f"output index {index} out of range: the graph has {len(self.outputs)} output(s)")
        return self.outputs[index]

    def host_value(self, name: str) -> np.ndarray:
        v = self.values[name]
        if isinstance(v, DeviceTensor):
            raw = self.device.copy_out(v.buffer, int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize)
            v = raw.view(v.dtype).reshape(v.shape)
            self.values[name] = v
        return v

    def close(self) -> None:
        """Free what the module holds on its device (weights, activations, micro-op kernels); ``run`` then raises
        GraphError. A module on the default device (a simulator of its own) needs no close; one built on a board,
        a remote session or a shared simulator holds that device's memory until it is closed. Safe to call twice."""
        with self._alone():
            self.closed = True
            owned, self._owned = self._owned, []
            release(self.device, self.steps, owned)

    def __enter__(self) -> GraphModule:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        close_on_exit(self.close, exc_type is not None)

    # ---- running ----
    def run(self, compute: bool = True, **inputs: np.ndarray) -> None:
        """Run once. ``compute=False`` simulates timing only (accelerator outputs are then meaningless)."""
        with self._alone():
            self._run(compute, inputs)

    def _run(self, compute: bool, inputs: dict[str, np.ndarray]) -> None:
        if self.closed:
            raise GraphError("this module was closed (its device buffers are freed): build it again")
        self._set_inputs(inputs)
        values = check_inputs(self.graph, self.inputs)
        self.outputs, self.records = [], []   # a run that fails from here leaves no earlier run's outputs behind
        self.values = {**self.consts, **values}
        records, runs = [], []
        host_total = 0.0
        if self._plan is None:
            self._plan = batched.plan(self.steps, self.device)
        for step in self._plan:
            if isinstance(step, batched.AccelBatch):
                for member, stats in zip(step.steps, step.run(self, compute)):
                    runs.append(stats)
                    records.append(member.record(stats))
            elif isinstance(step, AccelStep):
                stats = step.run(self, compute)
                runs.append(stats)
                records.append(step.record(stats))
            else:
                t0 = time.perf_counter()
                step.run(self, compute)
                dt = time.perf_counter() - t0
                host_total += dt
                records.append(StepRecord(step.name, step.op, "cpu", len(step.fused), host_seconds=dt))
        self.outputs = [np.array(self.host_value(o)) for o in self.graph.outputs]
        self.records = records
        self.host_seconds = host_total
        self._runs, self._stats = runs, None

    @property
    def stats(self) -> RunStats | None:
        """The last run's counters and cycles, every accelerator group's together (None before a run); added up when
        first asked for, so that a run does not pay for it."""
        if self._stats is None and self._runs is not None:
            self._stats = combine_stats(self._runs)
            self._stats.clock_mhz = self.cfg.CLOCK_MHZ
        return self._stats

    @property
    def cycles(self) -> int:
        return self.stats.cycles if self.stats else 0

    def check_steps(self) -> dict[str, str | None]:
        """Each accelerator group of the last run against its template's numpy reference on the data it read:
        group name -> None (bit-exact) or what differs, in execution order. Localises a wrong layer that an
        end-to-end check only detects (``vta run --check``): the first group named is where it went wrong (the
        groups that read its output later may disagree too)."""
        with self._alone():
            if self.closed:   # its buffers are freed: another build on the device may hold them by now
                raise GraphError("this module was closed (its device buffers are freed): build it again")
            if not self.records:
                raise GraphError("no run to check yet: call run() first")
            return {step.name: step.check(self) for step in self.steps if isinstance(step, AccelStep)}

    def benchmark(self, number: int = 1, repeat: int = 3, warmup: int = 1, **inputs: np.ndarray) -> dict[str, float]:
        """Wall time of ``run`` (mean/std over ``repeat`` groups of ``number`` runs, after ``warmup`` untimed runs:
        the first run pays for first touches of memory and caches, as TVM's time_evaluator skips its first call)
        and the simulated latency."""
        for name, value, least in (("number", number, 1), ("repeat", repeat, 1), ("warmup", warmup, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"benchmark: {name}={value!r}; allowed: an integer >= {least}")
        for _ in range(warmup):
            self.run(**inputs)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                self.run(**inputs)
            times.append((time.perf_counter() - t0) / number)
        t = np.array(times)
        return {"mean_ms": float(t.mean() * 1e3), "std_ms": float(t.std() * 1e3), "cycles": self.cycles,
                "accelerator_ms": self.stats.seconds * 1e3 if self.stats else 0.0,
                "host_ms": self.host_seconds * 1e3}

    def profile(self) -> list[dict[str, Any]]:
        """Per step of the last run: accelerator layers with simulated cycles, GOPS, DRAM bytes and the board
        milliseconds the config's board model predicts (``board_ms``); CPU layers with host time."""
        if not self.records:
            raise GraphError("no run to profile yet: call run() first")
        rows = []
        for r in self.records:
            row: dict[str, Any] = {"name": r.name, "op": r.op, "where": r.where, "fused": r.fused}
            if r.stats is not None:
                secs = r.stats.seconds
                row.update(cycles=r.stats.cycles, time_ms=secs * 1e3, board_ms=r.stats.latency_s * 1e3,
                           gops=2 * r.macs / secs / 1e9 if secs and r.macs else 0.0,
                           dram_bytes=r.stats.dram_bytes)
            else:
                row.update(host_ms=r.host_seconds * 1e3)
            rows.append(row)
        return rows

    @property
    def board_figure(self) -> str | None:
        """How ``stats.latency_s`` (the profile's ``board_ms``) was obtained: "predicted by the board model",
        "measured" (a board), "modelled by the simulated board"; None where there is no board figure (the RTL,
        or the simulator on a config without a board model: latency_s is then the accelerator's own time)."""
        if isinstance(self.device, SimDevice) or getattr(self.device, "device_kind", None) == "sim":
            # the simulator here, or an RPC board server's (`vta rpc server --device sim`): a prediction either way
            return "predicted by the board model" if self.cfg.board_model else None
        board = getattr(self.device, "board", None)
        if board is None:
            return None
        return "modelled by the simulated board" if str(board).startswith("vta-simulated-") else "measured"

    def format_profile(self, min_host_ms: float = 0.0) -> str:
        """The profile as a table: the accelerator's columns where accelerator layers ran, the board's where
        there is a board figure (``board_figure``), and the totals."""
        rows = self.profile()
        accel = any(row["where"] == "accelerator" for row in rows)
        figure = self.board_figure if accel else None
        op_width = max([18, *(len(row["op"]) for row in rows)])   # every op name whole (nn.conv2d_transpose)
        # every layer name whole up to NAME_WIDTH (ONNX names run long); a longer one keeps its start and its end
        name_width = min(max([34, *(len(row["name"]) for row in rows)]), NAME_WIDTH)
        head = f"{'layer':{name_width}} {'op':{op_width}} {'where':11}"
        if accel:
            head += f" {'fused':>5} {'cycles':>11} {'time ms':>9} {'GOPS':>7} {'DRAM KB':>9}"
            head += f" {'board ms':>9}" if figure else ""
        else:
            head += f" {'time ms':>9}"
        lines = [head]
        for row in rows:
            start = f"{_shortened(row['name'], name_width):{name_width}} {row['op']:{op_width}}"
            if row["where"] == "accelerator":
                lines.append(f"{start} {'VTA':11} {row['fused']:5d} {row['cycles']:11,d} {row['time_ms']:9.3f} "
                             f"{row['gops']:7.1f} {row['dram_bytes'] / 1024:9.1f}"
                             + (f" {row['board_ms']:9.3f}" if figure else ""))
            elif row["host_ms"] >= min_host_ms:
                lines.append(f"{start} {'CPU':11} " + (f"{'':5} {'':11} " if accel else "")
                             + f"{row['host_ms']:9.3f}")
        s = self.stats
        if s is not None and accel:
            board = f" ({s.latency_s * 1e3:.3f} ms on the board, {figure})" if figure else ""
            lines.append(f"total: {s.cycles:,} cycles = {s.seconds * 1e3:.3f} ms on the accelerator at "
                         f"{self.cfg.CLOCK_MHZ:g} MHz{board}; host {self.host_seconds * 1e3:.2f} ms")
            lines.append(basis_legend(self.cfg, figure))
        else:
            lines.append(f"total: host {self.host_seconds * 1e3:.2f} ms (no accelerator layer)")
        return "\n".join(lines)


# ---- building -----------------------------------------------------------------------------------------------------

class Constants:
    """Every value computable from constants alone, evaluated when first read: a weight that a template packs
    straight from its param is never also run through the graph's layout transform (packed once)."""

    def __init__(self, graph: Graph, params: dict[str, np.ndarray]):
        self.graph, self.values = graph, {}
        self.names: set[str] = set()
        for node in graph:
            if node.op == "const":
                if node.name not in params:
                    raise GraphError(f"params has no value for constant {node.name!r} {node.type}")
                value = np.asarray(params[node.name])
                if value.shape != node.shape or value.dtype.name != node.dtype:
                    raise GraphError(f"param {node.name!r}: expected {node.type}, got {value.shape} {value.dtype}")
                self.values[node.name] = value
                self.names.add(node.name)
            elif node.inputs and node.op != "input" and all(i in self.names for i in node.inputs):
                self.names.add(node.name)

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.values:
            node = self.graph[name]
            self.values[name] = KERNELS[node.op](node.attrs, *(self[i] for i in node.inputs))
        return self.values[name]

    def scalar(self, name: str) -> int:
        return int(np.asarray(self[name]).reshape(-1)[0])


def _host_kernel(node, graph: Graph, cpu: str):
    if node.op == "nn.batch_matmul" and packed_factors(node.attrs.get("data_layout", "")):
        return _packed_batch_matmul_on_host, "numpy"
    if cpu != "numpy":
        if jit.available():
            fn = jit.get_kernel(node.op, node.attrs, [graph[i].shape for i in node.inputs],
                                [graph[i].dtype for i in node.inputs])
            if fn is not None:
                return fn, "jit"
        elif cpu == "jit":
            raise ImportError("cpu='jit' needs llvmlite: reinstall the package (llvmlite is a core dependency) or pip install llvmlite")
    if packed_factors(node.attrs.get("data_layout", "")):
        return _packed_head_on_host, "numpy"
    fn = KERNELS.get(node.op)
    if fn is None:
        raise GraphError(f"{node.name}: no CPU kernel for op {node.op!r}")
    return fn, "numpy"


def _packed_head_on_host(attrs: dict, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A packed conv / dense computed on the host (unpack, reference kernel, pack) - the fallback when the
    template refuses a group."""
    b, c = x.shape[-2], x.shape[-1]
    nat_x = unpack_blocks(x, x.shape[0] * b, x.shape[1] * c)
    nat_w = unpack_blocks(w, w.shape[0] * w.shape[-2], w.shape[1] * w.shape[-1])
    plain = {k: v for k, v in attrs.items() if k not in ("data_layout", "kernel_layout")}
    if nat_w.ndim == 2:
        y = KERNELS["nn.dense"]({"out_dtype": plain["out_dtype"]}, nat_x, nat_w)
    elif "output_padding" in plain:  # packed transposed weights are already the direct-conv kernel
        y = conv2d_transpose_direct(nat_x, nat_w, plain["strides"], plain["padding"], plain["output_padding"],
                                    plain["out_dtype"])
    else:
        y = KERNELS["nn.conv2d"](plain, nat_x, nat_w)
    return pack_blocks(y, b, c)


def _packed_batch_matmul_on_host(attrs: dict, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A packed batch_matmul computed on the host (unpack, reference kernel, pack): the fallback when its template
    refuses the group. Its padding rows and columns are zeros, so the padded product is the product, padded."""
    b, c = x.shape[-2:]
    data = unpack_batched_rows(x, x.shape[0] * b, x.shape[2] * c)
    kernel = unpack_batched_matrices(w, w.shape[1] * w.shape[3], w.shape[2] * w.shape[4])
    y = KERNELS["nn.batch_matmul"]({"out_dtype": attrs["out_dtype"]}, data, np.swapaxes(kernel, 1, 2))
    return pack_batched_rows(y, b, w.shape[3])


class _Builder:
    def __init__(self, graph: Graph, cfg: HwConfig, consts: Constants, schedules: Schedules, cpu: str,
                 max_insns: int, fallback: str, device: Device | None, host_schedules: Schedules = None,
                 auto_schedules: host_auto.AutoSchedules | None = None):
        self.g, self.cfg, self.consts = graph, cfg, consts
        self.host_schedules, self.auto_schedules = host_schedules, auto_schedules
        self.schedules, self.cpu, self.max_insns, self.fallback = schedules, cpu, max_insns, fallback
        self.device = device if device is not None else SimDevice(cfg)
        self.owned: list[Buffer] = []                  # what the groups' buffers took on the device (close frees it)
        self.producer_buffer: dict[str, Buffer] = {}   # accelerator outputs by value name
        self.steps: list = []
        self.fallbacks: dict[str, str] = {}

    def schedule_for(self, workload: dict) -> dict | None:
        if self.schedules is None:
            return None
        if callable(self.schedules):
            return self.schedules(workload)
        return self.schedules.get(workload_key(workload))

    def accel_step(self, group: Group) -> AccelStep:
        """Compile a group as graph_pack planned it: its template, its blocked workload with the scalar constants
        read, its epilogue resolved, its inputs chained to their producers' buffers or staged."""
        template, consts = group.template, self.consts
        workload = {**group.workload, **{arg: consts.scalar(c) for arg, c in group.scalars.items()}}
        workload, epilogue = template.graph_workload(group.op, workload, resolve(group.epilogue, consts.scalar))
        t = template.parse(group.op, self.cfg, tuple(epilogue), workload)
        buffers: dict[str, Buffer | None] = {}
        staged: list[tuple[str, Buffer, str]] = []
        fresh: list[Buffer] = []
        # a group the template refuses (it then runs on the host) leaves nothing on the device
        with cleanup_on_error(lambda: free_all(self.device, fresh)):
            for name, nbytes in t.buffer_bytes().items():
                value = group.operands.get(name)   # None for the output
                chained = value not in consts and t.input_dtypes.get(name) == "int8" and value in self.producer_buffer
                if chained:
                    buffers[name] = self.producer_buffer[value]
                else:
                    buffers[name] = self.device.alloc(nbytes) if nbytes else None
                    fresh += [buffers[name]] if nbytes else []
                if value is not None and value not in consts and not chained:
                    staged.append((value, buffers[name], t.input_dtypes[name]))
            op = compile_template(t, self.schedule_for(group.task), device=self.device, max_insns=self.max_insns,
                                  buffers=template.Buffers(**buffers))
            with cleanup_on_error(op.close):
                for name, value in group.operands.items():
                    if value in consts:   # packed once, from the param, straight into the template's layout
                        op.write(name, t.pack(name, consts[value]))
        self.owned += fresh
        self.producer_buffer[group.output] = buffers["out"]
        return AccelStep(group, op, staged, group.output, self.g[group.output].shape, group.task, t.macs)

    def host_step(self, node) -> HostStep:
        packed = self.packed_dense_step(node)
        if packed is not None:
            return packed
        fn, backend = _host_kernel(node, self.g, self.cpu)
        return HostStep(node.name, node.op, fn, node.attrs, list(node.inputs), backend)

    def packed_dense_step(self, node) -> HostStep | None:
        """A float32 dense of a constant weight as host.jit's packed-weight kernel: the weight rewritten once, here,
        into the layout its vector loop reads contiguously (the same bits as the other kernels), or None."""
        if node.op != "nn.dense" or self.cpu == "numpy" or not jit.available() or len(node.inputs) != 2:
            return None
        x, w = (self.g[i] for i in node.inputs)
        a = node.attrs
        weight = self.consts[node.inputs[1]] if node.inputs[1] in self.consts else None  # noqa: SIM401 (no .get)
        if not isinstance(weight, np.ndarray) or x.dtype != "float32" or w.dtype != "float32" or \
                (a.get("out_dtype") or "float32") != "float32" or a.get("data_layout", "NC") != "NC" or \
                a.get("kernel_layout", "OI") != "OI":
            return None
        fn = jit.get_packed_dense(x.shape, weight)
        return None if fn is None else HostStep(node.name, node.op, fn, node.attrs, list(node.inputs), "jit")

    def sole_reader(self, name: str, op: str, member_of: dict):
        """The node that alone reads ``name``, if it is a host op ``op`` reading it as its first input."""
        users = self.users[name]
        nxt = self.g[users[0]] if len(users) == 1 and users[0] in self.g.nodes else None
        return nxt if nxt is not None and nxt.op == op and nxt.inputs[0] == name and nxt.name not in member_of else None

    def fused_host_step(self, node, member_of: dict) -> HostStep | None:
        """A float conv2d on the host with the bias_add and/or relu that alone read it as its JIT kernel's
        epilogue (one pass over the output instead of three; the same bits), a float max_pool2d with the
        quantize (and the packing) that alone read it likewise, or None."""
        if self.cpu == "numpy" or not jit.available() or self.g[node.name].dtype != "float32":
            return None
        if node.op == "nn.max_pool2d":
            return self.fused_pool_step(node, member_of)
        if node.op != "nn.conv2d":
            return None
        chain, extra, last = [], [], node.name
        for op in jit.EPILOGUE_OPS:
            nxt = self.sole_reader(last, op, member_of)
            if nxt is None:
                continue
            if op == "nn.bias_add":
                bias = self.g[nxt.inputs[1]]
                if nxt.attrs.get("axis", 1) % 4 != 1 or bias.dtype != "float32" or bias.shape != (self.g[last].shape[1],):
                    continue
                extra.append(nxt.inputs[1])
            chain.append(nxt.name)
            last = nxt.name
        if not chain:
            return None
        fn = jit.get_kernel("nn.conv2d", node.attrs, [self.g[i].shape for i in node.inputs],
                            [self.g[i].dtype for i in node.inputs], [self.g[c].op for c in chain])
        if fn is None:
            return None
        return HostStep(node.name, node.op, fn, node.attrs, [*node.inputs, *extra], "jit", chain)

    def tuned_host_step(self, node, member_of: dict) -> HostStep | None:
        """A float conv2d / dense with a tuned host schedule (``host_schedules``) as a host template's kernel, with
        the bias_add, residual add (conv2d) and relu that alone read it as its epilogue, or None."""
        if self.host_schedules is None or self.cpu == "numpy" or not jit.available():
            return None
        found = host_templates.tuned_config(self.host_schedules, node, self.g, host_templates.host().arch)
        if found is None:
            return None
        steps, chain, extra, last = [], [], [], node.name
        if self.g[node.name].dtype != "float32":   # an int8 conv stores its int32 sums as they are
            kernel = host_templates.tuned_kernel(*found, ())
            return HostStep(node.name, node.op, lambda attrs, *arrays: kernel(*arrays), node.attrs, list(node.inputs),
                            "tuned")
        bias = self.sole_reader(last, "nn.bias_add", member_of)
        if bias is not None and bias.attrs.get("axis", 1) % len(self.g[last].shape) == 1 and \
                self.g[bias.inputs[1]].shape == (self.g[last].shape[1],) and self.g[bias.inputs[1]].dtype == "float32":
            steps, chain, extra, last = ["bias"], [bias.name], [bias.inputs[1]], bias.name
            users = self.users[last]
            add = self.g[users[0]] if len(users) == 1 and users[0] in self.g.nodes else None
            if node.op == "nn.conv2d" and add is not None and add.op == "add" and add.name not in member_of and \
                    last in add.inputs and len(add.inputs) == 2 and add.inputs[0] != add.inputs[1]:
                other = add.inputs[1 - add.inputs.index(last)]
                ready = other in self.g.inputs or other in self.consts or any(
                    other in (s.output, s.name, *getattr(s, "fused", ())) for s in self.steps)   # computed before
                if ready and self.g[other].shape == self.g[last].shape and self.g[other].dtype == "float32":
                    steps, chain, extra, last = [*steps, "residual"], [*chain, add.name], [*extra, other], add.name
        relu = self.sole_reader(last, "nn.relu", member_of)
        if relu is not None:
            steps, chain = [*steps, "relu"], [*chain, relu.name]
        kernel = host_templates.tuned_kernel(*found, tuple(steps))
        return HostStep(node.name, node.op, lambda attrs, *arrays: kernel(*arrays), node.attrs,
                        [*node.inputs, *extra], "tuned", chain)

    def auto_host_step(self, node, member_of: dict) -> HostStep | None:
        """A float host op (with the elementwise ops that alone read it) as the auto-scheduler's compiled kernel:
        under its schedule from ``auto_schedules``, or its default schedule for an op the host would run in numpy
        (``host_auto.compiled_by_default``); None keeps the other kernels."""
        if self.cpu == "numpy" or not jit.available():
            return None
        outputs = {s.output for s in self.steps}
        found = host_auto.fused_op(self.g, node, self.users,
                                   ready=lambda v: v in self.g.inputs or v in self.consts or v in outputs,
                                   free=lambda n: n not in member_of)
        schedule = host_auto.schedule_for(found.dag, self.auto_schedules) if found is not None else None
        if schedule is None:
            return None
        return HostStep(node.name, node.op, host_auto.kernel(found.dag, schedule), node.attrs, list(found.inputs),
                        "auto", list(found.nodes[1:]))

    def fused_pool_step(self, node, member_of: dict) -> HostStep | None:
        """max_pool2d -> qnn.quantize (-> layout_transform into the packed layout): ResNet's stem tail as one
        JIT kernel that stores packed int8 (one pass instead of four; the same bits)."""
        quant = self.sole_reader(node.name, "qnn.quantize", member_of)
        if quant is None:
            return None
        pack = self.sole_reader(quant.name, "layout_transform", member_of)
        x = self.g[node.inputs[0]]
        # with the packing if covered (whole blocks), else the quantize alone
        for chain in ([quant, pack], [quant]) if pack is not None else ([quant],):
            fn = jit.get_kernel(node.op, node.attrs, [x.shape], [x.dtype], [(n.op, n.attrs) for n in chain])
            if fn is not None:
                return HostStep(node.name, node.op, fn, node.attrs, list(node.inputs), "jit", [n.name for n in chain])
        return None

    def fall_back(self, grp: Group, what: str, reason: str) -> None:
        """The template has no config for this workload (e.g. too few output positions for VTA's pipeline):
        the group's ops run on the host, bit-exact in the packed layout - visibly, or not at all."""
        if self.fallback == "error":
            raise HostFallbackError(f"{what}: the template refused every config: {reason} "
                                    "(build(..., fallback='warn') runs such groups on the host)")
        if self.fallback == "warn":
            warnings.warn(f"{what} runs on the host: {reason}", HostFallbackWarning, stacklevel=6)
        self.fallbacks[grp.head] = f"CPU: the template refused it: {reason}"
        self.steps.extend(self.host_step(self.g[m]) for m in grp.members)

    def run(self, groups: dict[str, Group]) -> list:
        member_of = {m: grp for grp in groups.values() for m in grp.members}
        self.users = self.g.consumers()
        done: set[str] = set()   # ops fused into an earlier step
        for node in self.g:
            if node.op in ("input", "const") or node.name in self.consts or node.name in done:
                continue
            grp = member_of.get(node.name)
            if grp is None:
                step = (self.auto_host_step(node, member_of) or self.tuned_host_step(node, member_of)
                        or self.fused_host_step(node, member_of) or self.host_step(node))
                done.update(step.fused)
                self.steps.append(step)
            elif node.name == grp.output:  # every operand of the chain is ready here
                try:
                    step = self.accel_step(grp)
                except ScheduleError as e:
                    what = f"accelerator group {grp.head!r} ({' -> '.join(self.g[m].op for m in grp.members)})"
                    if self.schedule_for(grp.task) is not None:  # a given config
                        raise ScheduleError(f"{what}: {e}") from None
                    self.fall_back(grp, what, str(e))
                    continue
                self.steps.append(step)
        return self.steps


def host_steps(graph: Graph, cpu: str = "auto") -> list:
    """The steps ``build`` runs for a graph of float host ops when no log gives them a schedule (no accelerator
    groups, no device): what a tuned schedule of those ops must beat (``graph_pack.untuned``)."""
    if graph.meta.get("groups"):
        raise GraphError("host_steps takes a graph of host ops only (this one has accelerator groups)")
    builder = _Builder(graph, None, Constants(graph, {}), None, cpu, 0, "error", _NO_DEVICE)
    return builder.run({})


class _NoDevice:
    """The device of a build without accelerator groups: nothing asks it for anything."""


_NO_DEVICE = _NoDevice()


def build(graph: Graph, env, params: dict[str, np.ndarray], schedules: Schedules = None, *,
          cpu: str = "auto", max_insns: int = 1 << 20, fallback: str = "warn", device: Device | None = None,
          host_schedules: Schedules = None, auto_schedules: host_auto.AutoSchedules | None = None) -> GraphModule:
    """Compile a (packed) graph for ``env``'s accelerator; ``params`` are the quantized graph's params.

    ``schedules`` maps ``workload_key(workload)`` to a knob config (``tuning.load_best`` gives one) or is a
    function of the workload dict; groups without one use the template's default. ``cpu`` picks host
    kernels: "auto" (llvmlite JIT where available, numpy otherwise), "jit" or "numpy". ``fallback`` says what
    happens to a group whose template refuses every config: "warn" (run it on the host and issue a
    ``HostFallbackWarning``), "allow" (the same, silently) or "error" (raise ``HostFallbackError``); either
    way ``module.fallbacks`` names each such group and the reason. ``device`` runs the accelerator groups: the
    simulator by default, or any device of ``env``'s config (a Pynq board, a remote board); weights are staged
    on it once, at build. ``host_schedules`` does for the host's float conv2d / dense what ``schedules`` does for the
    accelerator's groups, with the host templates' tuned configs (``tuning.load_best(log, "cpu")``); those without
    one run host.jit's fixed kernels. ``auto_schedules`` (``graph_pack.host_auto.read_auto_schedules(log, cpu)``)
    runs the host ops the auto-scheduler tuned (``vta tune --scheduler auto``) under their best logged schedules."""
    cfg = config_of(env)
    if not isinstance(graph, Graph):
        raise TypeError(f"graph: a (packed) Graph from graph_pack, not {type(graph).__name__}")
    if not isinstance(params, Mapping):
        raise TypeError(f"params: a mapping of names to arrays (quantize's params), not {type(params).__name__}")
    for name, given in (("schedules", schedules), ("host_schedules", host_schedules)):
        if given is not None and not isinstance(given, Mapping) and not callable(given):
            raise TypeError(f"{name}: a mapping of workload keys to configs (tuning.load_best gives one), a "
                            f"function of a workload, or None; not {type(given).__name__}")
    if cpu not in CPU_BACKENDS:
        raise ValueError(f"cpu={cpu!r}; allowed: {', '.join(CPU_BACKENDS)}")
    if cpu == "auto":
        jit.available_or_notice()   # without llvmlite (a Pynq board): one JitUnavailableWarning per process
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback={fallback!r}; allowed: {', '.join(FALLBACKS)}")
    if device is not None and not isinstance(device, Device):
        raise TypeError(f"device={device!r} is not a device (alloc/free/copy_in/copy_out/run, as vta.device.SimDevice)")
    if device is not None and device.cfg.fingerprint != cfg.fingerprint:
        raise GraphError(f"the device is a {device.cfg.model}, the build is for {cfg.model}: give a device of the "
                         "build's config")
    packed_for = graph.meta.get("config")
    if packed_for is not None and packed_for != cfg.fingerprint:
        raise GraphError("this graph was packed for another hardware config; run graph_pack with this env")
    times: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        out = fn()
        times[name] = time.perf_counter() - t0
        return out

    consts = timed("check params", lambda: Constants(graph, params))
    builder = _Builder(graph, cfg, consts, schedules, cpu, max_insns, fallback, device, host_schedules, auto_schedules)
    # a build that fails leaves nothing on the device
    with cleanup_on_error(lambda: release(builder.device, builder.steps, builder.owned)):
        steps = timed("compile", lambda: builder.run(graph.meta.get("groups", {})))
    host_inputs = {i for s in steps for i in getattr(s, "inputs", ())}
    runtime_consts = timed("fold host constants", lambda: {k: consts[k] for k in host_inputs if k in consts})
    module = GraphModule(graph, cfg, builder.device, steps, runtime_consts, times, builder.owned)
    module.fallbacks.update(builder.fallbacks)
    return module
