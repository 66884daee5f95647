"""Tuning the host CPU's operators, as AutoTVM tunes x86 and ARM CPUs: tasks of the host templates
(host.templates), measured by timing the compiled kernel on this CPU.

    tasks = tuning.extract_tasks(graph, target="cpu")            # float conv2d / dense of any network
    runner = tuning.CpuRunner(number=4, repeat=3, min_repeat_ms=20, timeout=10)   # AutoTVM's measure_option
    tuning.tune_tasks(tasks, tuner="xgb", n_trial=32, runner=runner, log="r18.cpu.jsonl")
    mod = graph_pack.build(graph, env, params, host_schedules=tuning.load_best("r18.cpu.jsonl", "cpu"))

Records are the accelerator's format: ``latency_s`` is the mean over ``repeat`` timings of ``number`` calls,
``std_s`` their standard deviation, ``cycles`` the mean in ns (``CpuTarget.CLOCK_MHZ`` = 1000), ``hw`` the CPU's
fingerprint (triple, CPU name, features), so a schedule is applied only on the CPU it was tuned on. Each
measurement runs in a worker process: a config that hangs past ``timeout`` or crashes is a failed result.
"""

from __future__ import annotations

import multiprocessing
import numbers
import signal
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from graph_pack.graph import Graph
from graph_pack.untuned import is_untuned, untuned_template_kernel
from host.templates import (
    HOST_TEMPLATE_VERSION,
    HOST_TEMPLATES,
    CpuTarget,
    HostKernel,
    HostTemplate,
    host,
    host_template_of,
)
from host.templates.graph import host_workload
from hw_config.checks import is_whole
from tuning.measure import CPU, MeasureResult, guarded
from tuning.targets import TuningTarget, register_target
from tuning.task import Task, _canonical

__all__ = ["CpuRunner", "CpuTask", "MeasureOption", "cpu_task", "extract_cpu_tasks", "host_conv_op", "measure_cpu"]


class CpuTask(Task):
    """A host template's workload on one CPU (``cfg`` is its ``CpuTarget``)."""

    @cached_property
    def template(self) -> HostTemplate:
        return host_template_of(self.op).from_task_workload(self.workload, self.cfg)

    @property
    def template_version(self) -> str:
        return HOST_TEMPLATE_VERSION

    def compile(self, config: dict | None = None, **kwargs) -> HostKernel:
        """The kernel of ``config``; for ``graph_pack.untuned.UNTUNED`` the kernel build runs without a record
        (host.jit's), the baseline a tuned config must beat to be applied."""
        if is_untuned(config):
            return untuned_template_kernel(self.workload)
        return self.template.build(config)

    measures_untuned = True   # tune_tasks times the UNTUNED baseline among its trials

    def check(self, config: dict) -> str | None:
        return None if is_untuned(config) else super().check(config)

    @property
    def default_config(self) -> dict:
        return self.template.default_config()

    MISMATCH = "differs from the float64 numpy reference beyond 1e-5"

    def matches(self, got: np.ndarray, want: np.ndarray) -> bool:
        """Whether a kernel's output is right (the float64 reference to 1e-5: the templates reassociate sums)."""
        return close_to(got, want)

    def matches_untuned(self, got: np.ndarray, want: np.ndarray) -> bool:
        """Whether the untuned baseline's output is right (as any config's)."""
        return self.matches(got, want)


def cpu_task(op: str, target: CpuTarget | None = None, **workload: Any) -> CpuTask:
    """A task of one host template written by hand, e.g. ``cpu_task("conv2d_NCHWc.x86", data_shape=...)``."""
    t = host_template_of(op).parse(op, target, (), workload)
    return CpuTask(_canonical(t.task_workload()), target or host())


def extract_cpu_tasks(graph: Graph, target: CpuTarget | None = None, ops: tuple[str, ...] | None = None
                      ) -> list[CpuTask]:
    """The float32 conv2d (groups 1, NCHW) and dense nodes of ``graph`` as tasks of ``target``'s template family
    (x86: NCHWc; ARM: spatial pack), deduplicated and weighted, in order of first use. A packed graph's
    accelerator groups are not host operators and are skipped. ``ops`` filters by template name."""
    target = target if isinstance(target, CpuTarget) else host()
    tasks: dict[str, CpuTask] = {}
    for node in graph:
        workload = host_workload(node, graph, target.arch)
        if workload is None or (ops is not None and workload["op"] not in ops):
            continue
        task = CpuTask(_canonical(workload), target)
        if task.key not in tasks:
            tasks[task.key] = task
        else:
            tasks[task.key].weight += 1
        tasks[task.key].names.append(node.name)
    return list(tasks.values())


# ---- measuring ---------------------------------------------------------------------------------------------

MAX_NUMBER = 1 << 20          # calls per timing (the CLI's --number)
MAX_REPEAT = 1000             # timings per config (--repeat)
MAX_MIN_REPEAT_MS = 60_000.0  # --min-repeat-ms
MIN_TIMEOUT_S, MAX_TIMEOUT_S = 0.1, 3600.0   # seconds per config (--timeout)
# configs one worker process measures before a fresh one replaces it: llvmlite (0.50) keeps ~110 KB of every
# optimisation run for good (each PassBuilder's instrumentation callbacks are never deleted), so a worker that
# measured 100,000 configs would hold ~11 GB; a fork per 256 configs costs well under 1% of their compile time
MEASUREMENTS_PER_WORKER = 256


@dataclass(frozen=True)
class MeasureOption:
    """AutoTVM's measure_option for a CPU: ``number`` calls per timing, ``repeat`` timings (mean and std kept),
    ``number`` raised until one timing lasts ``min_repeat_ms``; ``timeout`` seconds per config (compile and
    runs); outputs checked against the float64 reference with np.allclose (``check``)."""

    number: int = 1
    repeat: int = 3
    min_repeat_ms: float = 0.0
    timeout: float = 10.0
    check: bool = True

    def __post_init__(self) -> None:
        """Each field's type and range, as the CLI flags take them (--number, --repeat, --min-repeat-ms,
        --timeout, check): refused naming it (TypeError, ValueError) before a config is measured; stored as int /
        float / bool."""
        for name, (lo, hi) in {"number": (1, MAX_NUMBER), "repeat": (1, MAX_REPEAT)}.items():
            v = getattr(self, name)
            if not is_whole(v):
                raise TypeError(f"{name}={v!r}: an integer {lo}..{hi:,}")
            if not lo <= v <= hi:
                raise ValueError(f"{name}={v!r}: an integer {lo}..{hi:,}")
            object.__setattr__(self, name, int(v))
        for name, (lo, hi, unit) in {"min_repeat_ms": (0.0, MAX_MIN_REPEAT_MS, "ms"),
                                     "timeout": (MIN_TIMEOUT_S, MAX_TIMEOUT_S, "seconds")}.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise TypeError(f"{name}={v!r}: a number of {unit}, {lo:g}..{hi:g}")
            if not lo <= v <= hi:   # (nan and inf too)
                raise ValueError(f"{name}={v!r}: a number of {unit}, {lo:g}..{hi:g}")
            object.__setattr__(self, name, float(v))
        if not isinstance(self.check, (bool, np.bool_)):    # "no" is truthy: it would check
            raise TypeError(f"check={self.check!r}: True or False")
        object.__setattr__(self, "check", bool(self.check))


def close_to(got: np.ndarray, want: np.ndarray, tol: float = 1e-5) -> bool:
    """The host kernels' check: float32 output within ``tol`` of the float64 reference, relative to each value and to
    the largest (the sums are reassociated, so not bit for bit); an integer output exactly the reference's. One
    kernel: 1e-5; a whole network, whose 20-odd layers each round differently: 1e-4."""
    if np.issubdtype(want.dtype, np.integer):
        return got.dtype == want.dtype and np.array_equal(got, want)
    scale = float(np.abs(want).max()) if want.size else 0.0
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=tol, atol=tol * max(scale, 1e-30)))


_REFERENCES: dict[str, tuple[dict, np.ndarray]] = {}


def measure_cpu(task: CpuTask, config: dict, option: MeasureOption, seed: int = 0) -> MeasureResult:
    """Compile ``config``, check its output, time it: mean and std of ``repeat`` timings of ``number`` calls."""
    def measure(t0: float) -> MeasureResult:
        kernel = task.compile(config)
        entry = _REFERENCES.get(task.key)   # read once: another thread may clear it for its own task
        if entry is None:
            inputs = task.template.random_inputs(np.random.default_rng(seed))
            entry = (inputs, task.template.reference(**inputs))
            _REFERENCES.clear()
            _REFERENCES[task.key] = entry
        inputs, want = entry
        out = kernel(**inputs)
        matches = task.matches_untuned if is_untuned(config) else task.matches
        if option.check and not matches(out, want):
            return MeasureResult(config, error=f"wrong output: {task.MISMATCH}",
                                 checked=True, wall_s=time.perf_counter() - t0, device=CPU)
        number = option.number
        while True:
            start = time.perf_counter()
            for _ in range(number):
                kernel(**inputs)
            once = time.perf_counter() - start
            if once * 1e3 >= option.min_repeat_ms or number >= 1 << 20:
                break
            number = max(number * 2, int(number * option.min_repeat_ms / max(once * 1e3, 1e-3) * 1.1))
        times = [once / number]
        for _ in range(option.repeat - 1):
            start = time.perf_counter()
            for _ in range(number):
                kernel(**inputs)
            times.append((time.perf_counter() - start) / number)
        mean = statistics.fmean(times)
        std = statistics.pstdev(times) if len(times) > 1 else 0.0
        return MeasureResult(config, max(1, round(mean * 1e9)), mean, None, option.check, time.perf_counter() - t0,
                             CPU, std)

    return guarded(task, config, measure)


def _serve(conn, parent_end) -> None:
    """The worker process: measure what the parent sends until it closes the pipe (or dies: the fork's copy of
    the parent's end is closed first, else the pipe would never report the parent gone and the worker would
    outlive a killed server)."""
    parent_end.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        conn.send(measure_cpu(*job))


class _Worker:
    """One measuring process (forked: it starts with this process's imports), replaced when a config hangs or
    kills it."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("fork")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, self.conn), daemon=True)
        self.proc.start()
        child.close()
        self.measured = 0

    def call(self, job: tuple, timeout: float) -> MeasureResult | str:
        """The result, or why there is none ("timed out ...", "the worker died ...")."""
        self.measured += 1
        try:
            self.conn.send(job)
            if self.conn.poll(timeout):
                return self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(5)
            return f"the measuring process died (exit code {self.proc.exitcode})"
        return f"timed out after {timeout:g} s"

    def close(self) -> None:
        self.conn.close()
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)


class CpuRunner:
    """Measure host-template configs on this CPU, one at a time (timings on a shared CPU stay honest), each in a
    worker process with ``timeout`` (AutoTVM's ``measure_option(builder=LocalBuilder(), runner=LocalRunner(
    number, repeat, min_repeat_ms, timeout))``), replaced every ``MEASUREMENTS_PER_WORKER`` configs.
    ``isolate=False`` measures in this process (no timeout; llvmlite's ~110 KB per compile stays in it).
    Threads may share a runner: their configs are measured one at a time, each result its own config's."""

    def __init__(self, number: int = 1, repeat: int = 3, min_repeat_ms: float = 0.0, timeout: float = 10.0,
                 check: bool = True, seed: int = 0, isolate: bool = True):
        self.option = MeasureOption(number, repeat, min_repeat_ms, timeout, check)
        self.seed, self.isolate = seed, isolate
        self._worker: _Worker | None = None
        self._lock = threading.Lock()   # one measurement at a time: the worker's pipe is one request's at a time

    def measure(self, task: Task, configs: Sequence[dict]) -> list[MeasureResult]:
        return self.measure_with(task, configs, self.option)

    def measure_with(self, task: Task, configs: Sequence[dict], option: MeasureOption,
                     seed: int | None = None) -> list[MeasureResult]:
        """``measure`` with another measure option and seed (what a CPU server does for each client's request)."""
        if not isinstance(task, CpuTask):
            raise TypeError(f"CpuRunner measures host-template tasks (extract_tasks(..., target='cpu')), got {task!r}")
        return [self._measure_one((task, config, option, self.seed if seed is None else seed)) for config in configs]

    def _measure_one(self, job: tuple) -> MeasureResult:
        with self._lock:
            if not self.isolate:
                return measure_cpu(*job)
            if self._worker is None:
                self._worker = _Worker()
            try:
                got = self._worker.call(job, job[2].timeout)
            except BaseException:   # Ctrl-C with a config in flight: its late answer must not be the next one's
                self._worker.close()   # (not self.close(): it takes the lock held here)
                self._worker = None
                raise
            if isinstance(got, str) or self._worker.measured >= MEASUREMENTS_PER_WORKER:
                self._worker.close()   # hung, died, or holds what llvmlite never frees (MEASUREMENTS_PER_WORKER)
                self._worker = None
            return MeasureResult(job[1], error=f"failed: {got}") if isinstance(got, str) else got

    def close(self) -> None:
        with self._lock:
            if self._worker is not None:
                self._worker.close()
                self._worker = None

    def __enter__(self) -> CpuRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def host_conv_op(target: CpuTarget | None = None) -> str:
    """The conv2d template of ``target``'s family (default this CPU): NCHWc on x86, spatial pack on ARM."""
    from host.templates import CONV_TEMPLATES
    return CONV_TEMPLATES[(target or host()).arch]


register_target(TuningTarget(
    "cpu", lambda graph, env, ops: extract_cpu_tasks(graph, env, ops), lambda w: w.get("op") in HOST_TEMPLATES,
    lambda w, cfg: CpuTask(w, cfg if isinstance(cfg, CpuTarget) else host()),
    "the host CPU's float conv2d / dense, any graph"))
