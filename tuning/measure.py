"""Measuring configs: a runner compiles a task's template for each config, runs it and reports the cycles.

``LocalRunner`` uses the simulator in this process or in worker processes. Every measured config's output
is checked against the template's numpy reference (VTA's tuning scripts had to switch that off); in
``timing_only`` mode the simulator skips the data and only the timing model runs (same cycles, tested).
``DaskRunner`` sends the same work to a Dask cluster. Any runner is an object with
``measure(task, configs) -> list[MeasureResult]``, so a board runner plugs in the same way.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from tuning.task import Task
from vta.templates import random_inputs


@dataclass
class MeasureResult:
    config: dict
    cycles: int = 0
    latency_s: float = 0.0        # one call's time on the board: predicted by the config's board model, or measured
    error: str | None = None      # why the config failed (refused, wrong output, crashed)
    checked: bool = False         # output compared with the numpy reference
    wall_s: float = 0.0           # host seconds spent measuring
    # where latency_s comes from: "sim" (the board model's prediction from a simulator run), "board" (measured on
    # a board), "" (nothing ran). vta calibrate fits only "board" times.
    device: str = ""
    std_s: float = 0.0            # the standard deviation of latency_s over the repeats (CPU measurements)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


SIMULATED, MEASURED, CPU = "sim", "board", "cpu"   # MeasureResult.device


def cost_cycles(result: MeasureResult, clock_mhz: float) -> float:
    """What the tuners minimise: one call's time on the board (``latency_s``: predicted by the config's board
    model, or measured on a board) in cycles of the accelerator's clock; the accelerator's own cycles where a
    runner reports no latency; 0 for a failed result."""
    if not result.ok or result.cycles <= 0:
        return 0.0
    return result.latency_s * clock_mhz * 1e6 if result.latency_s > 0 else float(result.cycles)


class Runner(Protocol):
    def measure(self, task: Task, configs: Sequence[dict]) -> list[MeasureResult]: ...


def measure_one(task: Task, config: dict, check: bool = True, timing_only: bool = False,
                seed: int = 0) -> MeasureResult:
    """Compile ``config``, run it once on the simulator and (unless timing only) check the output."""
    def measure(t0: float) -> MeasureResult:
        op = task.compile(config)
        if timing_only:
            stats = op.time()
            return MeasureResult(config, stats.cycles, stats.latency_s, None, False, time.perf_counter() - t0,
                                 SIMULATED)
        inputs, expected = _inputs_and_reference(task, op, seed)
        out = op.run(**inputs)
        if check and not np.array_equal(out, expected()):
            return MeasureResult(config, op.cycles, op.stats.latency_s, "wrong output: differs from the numpy "
                                 "reference", True, time.perf_counter() - t0, SIMULATED)
        return MeasureResult(config, op.cycles, op.stats.latency_s, None, check, time.perf_counter() - t0, SIMULATED)

    return guarded(task, config, measure)


def guarded(task: Any, config: dict, measure: Callable[[float], MeasureResult]) -> MeasureResult:
    """``measure(t0)`` (t0: when the measurement started) for a config ``task.check`` accepts; a refused config,
    or one whose measurement raises, comes back as a failed result: a bad config is a measurement result, never a
    crash of the tuner (every runner's one measurement: the simulator's here, the host CPU's in tuning.cpu)."""
    t0 = time.perf_counter()
    reason = task.check(config)
    if reason:
        return MeasureResult(config, error=f"invalid config: {reason}", wall_s=time.perf_counter() - t0)
    try:
        return measure(t0)
    except Exception as e:  # noqa: BLE001 - see the docstring
        detail = "".join(traceback.format_exception_only(type(e), e)).strip()
        return MeasureResult(config, error=f"failed: {detail}", wall_s=time.perf_counter() - t0)


_REFERENCE_CACHE: dict[tuple, tuple] = {}


def _inputs_and_reference(task: Task, op, seed: int):
    """The task's random inputs and a lazy numpy reference, both the same for every config: cached per
    process (the reference costs more than a simulated run)."""
    key = (task.key, task.cfg.fingerprint, seed)
    entry = _REFERENCE_CACHE.get(key)   # read once: another thread may clear the cache meanwhile
    if entry is None:
        if len(_REFERENCE_CACHE) > 64:
            _REFERENCE_CACHE.clear()
        entry = _REFERENCE_CACHE[key] = (random_inputs(op, seed=seed), [])
    inputs, ref = entry

    def expected() -> np.ndarray:
        if not ref:
            ref.append(op.reference(**inputs))
        return ref[0]
    return inputs, expected


@lru_cache(maxsize=8)
def _unpickled(blob: bytes) -> Task:
    """A task from its pickle, once per LocalRunner worker (the 8 latest kept)."""
    return pickle.loads(blob)


def _measure_pickled(args: tuple) -> MeasureResult:
    """A LocalRunner job whose task comes as its pickle, made once per batch: a worker unpickles each task once
    (a task's pickle and unpickle cost ~0.25 ms, a twentieth of a timing-only trial)."""
    blob, *rest = args
    task = _unpickled(blob)
    return measure_one(task, *rest)


def _worker_threads(threads: int) -> None:
    """Simulators made in this process split GEMMs over ``threads`` (unless the user set ``VTA_SIM_THREADS``), so
    that n workers x threads stay within the machine's CPUs."""
    os.environ.setdefault("VTA_SIM_THREADS", str(threads))


def _local_worker(threads: int) -> None:
    """Initializer of a LocalRunner worker process: its threads, and Ctrl-C left to the parent (a terminal's Ctrl-C
    reaches every process of its group; the parent stops the pool, so no worker prints a traceback)."""
    _worker_threads(threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _measure_on_cluster(args: tuple) -> MeasureResult:
    """A Dask worker may run several measurements at once: one simulator thread each (unless set)."""
    _worker_threads(1)
    return measure_one(*args)


def completed_in(pool: ProcessPoolExecutor, fn: Callable[[Any], Any], jobs: Sequence[Any],
                 which: Iterable[int]) -> Iterator[tuple[int, Any]]:
    """``(i, fn(jobs[i]))`` for each ``i`` of ``which`` as it finishes in ``pool``, and ``(i, None)`` for each job a
    broken pool (a worker that died) lost: the caller reruns those (``LocalRunner``, ``vta dse``)."""
    which = list(which)
    try:
        futures = {pool.submit(fn, jobs[i]): i for i in which}
    except BrokenProcessPool:
        yield from ((i, None) for i in which)
        return
    for future in as_completed(futures):
        try:
            yield futures[future], future.result()
        except BrokenProcessPool:
            yield futures[future], None


class LocalRunner:
    """Measure on the simulator, in ``n_parallel`` worker processes (1: in this process).

    A worker process that dies mid-batch (an out-of-memory kill, a crash) never hangs ``measure``: the pool is
    rebuilt and the configs it lost are measured again, each in a process of its own, so a config that kills
    its worker every time comes back as a failed result naming that, and the others as measured. Threads may share
    a runner: their batches take turns on its worker processes (with ``n_parallel=1`` they measure at once, each in
    its own thread)."""

    def __init__(self, n_parallel: int = 1, check: bool = True, timing_only: bool = False, seed: int = 0):
        if n_parallel < 1:
            raise ValueError(f"n_parallel must be >= 1, got {n_parallel}")
        self.n_parallel, self.check, self.timing_only, self.seed = n_parallel, check, timing_only, seed
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()   # held by the batch using (making, replacing, closing) the worker pool

    def measure(self, task: Task, configs: Sequence[dict]) -> list[MeasureResult]:
        if self.n_parallel == 1 or len(configs) <= 1:
            return [measure_one(task, c, self.check, self.timing_only, self.seed) for c in configs]
        blob = pickle.dumps(task)
        jobs = [(blob, c, self.check, self.timing_only, self.seed) for c in configs]
        with self._lock:
            return self._measure_pooled(configs, jobs)

    def _measure_pooled(self, configs: Sequence[dict], jobs: list[tuple]) -> list[MeasureResult]:
        if self._pool is None:
            self._pool = self._workers(self.n_parallel)
        results = self._run(self._pool, jobs, range(len(jobs)))
        lost = [i for i, r in enumerate(results) if r is None]
        if lost:   # the pool broke: start a new one, and isolate the lost configs to find one that kills workers
            self._close()
            for i in lost:
                with self._workers(1) as alone:
                    results[i] = self._run(alone, jobs, [i])[i] or MeasureResult(
                        configs[i], error="failed: the worker process measuring it died (twice)")
        return results   # type: ignore[return-value]

    def _workers(self, n: int) -> ProcessPoolExecutor:
        """``n`` worker processes, each with its share of the CPUs for simulator threads."""
        from simulator.core import usable_cpus  # the C simulator loads when measuring, not at import

        threads = max(1, usable_cpus() // self.n_parallel)
        return ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"), initializer=_local_worker,
                                   initargs=(threads,))

    @staticmethod
    def _run(pool: ProcessPoolExecutor, jobs: list[tuple], which) -> list[MeasureResult | None]:
        results: list[MeasureResult | None] = [None] * len(jobs)
        for i, result in completed_in(pool, _measure_pickled, jobs, which):
            results[i] = result
        return results

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> LocalRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class DaskRunner:
    """Measure on a Dask cluster (``pip install dask distributed``); ``client`` is a distributed.Client.

    A worker that dies mid-batch loses nothing: Dask reruns its configs elsewhere (up to the scheduler's
    ``distributed.scheduler.allowed-failures``). A config whose workers kept dying (``KilledWorker``) or that
    raised on the cluster comes back as a failed result naming why, never as an exception out of
    ``measure``. With ``timeout`` (seconds per batch), configs still unfinished then (say, every worker is
    gone) come back as timed out and are cancelled; without it ``measure`` waits for the cluster."""

    def __init__(self, client, check: bool = True, timing_only: bool = False, seed: int = 0,
                 timeout: float | None = None):
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds or None, got {timeout}")
        self.client, self.check, self.timing_only, self.seed = client, check, timing_only, seed
        self.timeout = timeout

    def measure(self, task: Task, configs: Sequence[dict]) -> list[MeasureResult]:
        as_completed = _distributed().as_completed
        futures = self.client.map(_measure_on_cluster, [(task, c, self.check, self.timing_only, self.seed)
                                                  for c in configs], pure=False)
        position = {f.key: i for i, f in enumerate(futures)}
        results: list[MeasureResult | None] = [None] * len(futures)
        try:
            for future, value in as_completed(futures, loop=self.client.loop, with_results=True,
                                              raise_errors=False, timeout=self.timeout):
                i = position[future.key]
                if isinstance(value, MeasureResult):
                    results[i] = value
                else:  # the (type, exception, traceback) of an erred task, or the CancelledError
                    exc = value[1] if isinstance(value, tuple) else value
                    results[i] = MeasureResult(configs[i], error="failed on the Dask cluster: "
                                               f"{type(exc).__name__}: {exc}")
        except TimeoutError:
            pass
        finally:
            self.client.cancel([f for f, r in zip(futures, results) if r is None])
        return [r if r is not None else MeasureResult(c, error=f"timed out: no result from the Dask cluster "
                                                             f"within {self.timeout} s")
                for c, r in zip(configs, results)]


def _distributed():
    """The ``distributed`` module: the one import point of dask."""
    try:
        import distributed
    except ImportError:
        raise ImportError("DaskRunner needs dask: pip install 'vta-stack[dask]'") from None
    return distributed


def dask_client(address: str | None = None, **kwargs):
    """A ``distributed.Client`` (a local cluster when ``address`` is None)."""
    client = _distributed().Client
    if address:
        return client(address, **kwargs)
    return client(**{"processes": True, **kwargs})
