"""Measuring configs on boards: ``RPCRunner(key, host, port, ...)`` (AutoTVM's names) asks a tracker for the
boards of a device key and measures a batch on as many of them as it offers, in parallel.

Each config is compiled here, for a buffer layout allocated on the board, run there (``number`` x
``repeat`` times), and its output checked against the numpy reference exactly as ``LocalRunner`` does.
When no board can be had at all (the tracker is gone, no board of the key registers within
``request_timeout``, every board refuses the key), ``measure`` raises ``BoardLost`` instead of recording
failures: the log keeps every finished batch and a rerun resumes from it. Until a board of the key has been seen,
a tracker that has none registered is an error at once, with the tracker's boards by key (the usual cause is a
wrong ``key``); afterwards a board that is away (rebooting) is waited for, up to ``request_timeout``.
A board that fails or does not answer within ``timeout`` in the middle of a trial loses that trial: it goes
back to the queue and runs on another board, ``max_attempts`` boards at most, so a trial is never lost, never
measured twice, and never retried forever; the board is marked (``board_failures``) and is not used again
in that batch. Results name the board that measured them (``BoardResult.board``; records keep it in their
result), and the trials they were taken from (``failed_boards``).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from tuning.measure import MEASURED, SIMULATED, MeasureResult, _inputs_and_reference
from tuning.task import Task
from vta.rpc.base import AuthError, BoardFailure, BoardLost, ProtocolError, check_key, secret_from
from vta.rpc.client import RemoteDevice, check_key_registered
from vta.rpc.tracker import TrackerClient, servers_by_key

BOARD_LOST = (BoardLost, BoardFailure, AuthError)   # the board's fault, not the config's: measure elsewhere


@dataclass
class BoardResult(MeasureResult):
    """A measurement on a board: which board, and the boards a trial was lost on before it."""

    board: str | None = None
    failed_boards: list[str] = field(default_factory=list)


class _Batch:
    """One ``measure`` call: the queue of config indices, their results, and the boards that failed."""

    def __init__(self, task: Task, configs: Sequence[dict], results: list[MeasureResult | None], max_attempts: int):
        self.task, self.configs, self.results = task, list(configs), results
        self.queue = deque(i for i, r in enumerate(results) if r is None)
        self.lost_on: list[list[str]] = [[] for _ in configs]
        self.bad_boards: set[str] = set()
        self.problems: list[str] = []
        self.max_attempts = max_attempts
        self.lock = threading.Lock()

    def finished(self) -> bool:
        with self.lock:
            return all(r is not None for r in self.results)

    def has_work(self) -> bool:
        with self.lock:
            return bool(self.queue)

    def take(self) -> int | None:
        with self.lock:
            return self.queue.popleft() if self.queue else None

    def done(self, i: int, result: MeasureResult) -> bool:
        with self.lock:
            if self.results[i] is not None:   # never twice
                return False
            self.results[i] = result
            return True

    def lost(self, i: int, board: str, why: str) -> MeasureResult | None:
        """Trial ``i`` was lost with its board: queue it again, or give up after ``max_attempts`` boards."""
        with self.lock:
            self.lost_on[i].append(board)
            self.bad_boards.add(board)
            if len(self.lost_on[i]) < self.max_attempts:
                self.queue.appendleft(i)
                return None
            result = BoardResult(self.configs[i], error=f"board failures: lost on {len(self.lost_on[i])} boards "
                                 f"({', '.join(self.lost_on[i])}); last: {why}"[:2000],
                                 failed_boards=list(self.lost_on[i]))
            self.results[i] = result
            return result


class RPCRunner:
    """Measure on the ``key`` boards of the tracker at ``host:port`` (ours or TVM's).

    ``n_parallel``: boards used at once (default: as many as the tracker lists for ``key``). ``timeout``:
    seconds a board may take to answer any request of a trial before it counts as failed. ``number`` x
    ``repeat``: runs per config (``latency_s`` is the mean over repeats of the mean over ``number`` runs;
    ``cycles`` those of the checked first run). ``check`` / ``timing_only`` / ``seed`` as ``LocalRunner``'s.
    ``key_file`` (default ``$VTA_RPC_KEY_FILE``): the boards' shared key. ``request_timeout``: how long to
    wait for a free board before giving up (``BoardLost``). ``on_result(i, result)``
    is called as each trial completes (from a worker thread).
    """

    def __init__(self, key: str, host: str = "127.0.0.1", port: int = 9190, n_parallel: int | None = None,
                 timeout: float = 60.0, number: int = 1, repeat: int = 1, *, priority: float = 1,
                 check: bool = True, timing_only: bool = False, seed: int = 0,
                 key_file: str | os.PathLike | None = None, max_attempts: int = 3, request_timeout: float = 120.0,
                 on_result: Callable[[int, MeasureResult], None] | None = None):
        if n_parallel is not None and n_parallel < 1:
            raise ValueError(f"n_parallel must be >= 1 or None, got {n_parallel}")
        if number < 1 or repeat < 1 or max_attempts < 1:
            raise ValueError(f"number, repeat and max_attempts must be >= 1, got {number}, {repeat}, {max_attempts}")
        if timeout <= 0 or request_timeout <= 0:
            raise ValueError(f"timeout and request_timeout must be > 0 seconds, got {timeout}, {request_timeout}")
        self.key = check_key(key)
        self.tracker = (host, int(port))
        self.n_parallel, self.timeout, self.number, self.repeat = n_parallel, timeout, number, repeat
        self.priority, self.check, self.timing_only, self.seed = priority, check, timing_only, seed
        self.secret = secret_from(key_file)
        self.max_attempts, self.request_timeout, self.on_result = max_attempts, request_timeout, on_result
        self.boards_used: Counter[str] = Counter()       # trials measured per board
        self.board_failures: Counter[str] = Counter()    # trials lost per board
        self._key_seen = False                           # a board of the key was registered at some point

    def __repr__(self) -> str:
        return f"RPCRunner({self.key!r}, {self.tracker[0]}:{self.tracker[1]}, n_parallel={self.n_parallel})"

    # ---- the runner protocol ----
    def measure(self, task: Task, configs: Sequence[dict]) -> list[MeasureResult]:
        results: list[MeasureResult | None] = []
        for config in configs:   # refused configs need no board (and build the task's default op once, here)
            reason = task.check(config)
            results.append(None if reason is None else BoardResult(config, error=f"invalid config: {reason}"))
        batch = _Batch(task, configs, results, self.max_attempts)
        if not self._key_seen and batch.queue:
            self._check_key()
        n = min(len(batch.queue), self._parallel())
        workers = [threading.Thread(target=self._worker, args=(batch,), daemon=True, name=f"rpc-runner-{i}")
                   for i in range(n)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        if any(r is None for r in batch.results):   # no board to be had: an outage, not a measurement
            why = "; ".join(dict.fromkeys(batch.problems[-3:])) or "no board"
            raise BoardLost(f"no usable {self.key!r} board at the tracker {self.tracker[0]}:{self.tracker[1]}: "
                            f"{why}"[:2000])
        return list(batch.results)

    def _check_key(self) -> None:
        """Fail at once when the tracker has no board of the key (BoardLost naming the keys it has); a tracker that
        cannot be reached is left to the workers, which say so."""
        try:
            with TrackerClient(self.tracker, timeout=10.0) as client:
                check_key_registered(client, self.key)
        except BoardLost:
            raise
        except OSError:
            return
        self._key_seen = True

    def _parallel(self) -> int:
        if self.n_parallel is not None:
            return self.n_parallel
        try:
            with TrackerClient(self.tracker, timeout=10.0) as client:
                summary = client.summary()
        except (OSError, ProtocolError):
            return 1
        return max(1, servers_by_key(summary).get(self.key, 0),
                   summary.get("queue_info", {}).get(self.key, {}).get("free", 0))

    # ---- one worker: a board at a time, trials from the shared queue ----
    def _worker(self, batch: _Batch) -> None:
        misses = 0
        while batch.has_work() and misses < 3:
            try:
                device = self._acquire(batch)
            except (OSError, TimeoutError) as e:
                misses += 1
                with batch.lock:
                    batch.problems.append(str(e)[:300])
                time.sleep(0.1 * misses)
                continue
            if device is None:
                return
            with device:
                if device.board in batch.bad_boards or device.cfg.fingerprint != batch.task.cfg.fingerprint:
                    misses += 1
                    if device.cfg.fingerprint != batch.task.cfg.fingerprint:
                        with batch.lock:
                            batch.problems.append(f"board {device.board} runs {device.cfg.model}, the task is for "
                                                  f"{batch.task.cfg.model}")
                    time.sleep(0.1 * misses)
                    continue
                misses = 0
                while (i := batch.take()) is not None:
                    try:
                        result = self._measure_on(device, batch.task, batch.configs[i])
                    except BOARD_LOST as e:   # the board is lost (or failed) mid-trial: the trial goes back
                        with batch.lock:
                            self.board_failures[device.board] += 1
                        final = batch.lost(i, device.board, str(e))
                        if final is not None and self.on_result is not None:
                            self.on_result(i, final)
                        break
                    result.failed_boards = list(batch.lost_on[i])
                    if batch.done(i, result):
                        with batch.lock:
                            self.boards_used[device.board] += 1
                        if self.on_result is not None:
                            self.on_result(i, result)

    def _acquire(self, batch: _Batch) -> RemoteDevice | None:
        """A session on a free board, or None when the batch ran out of work while waiting."""
        client = TrackerClient(self.tracker, timeout=10.0)
        try:
            host, port, matchkey = client.request(self.key, self.priority, timeout=self.request_timeout,
                                                  cancel=lambda: not batch.has_work())
        except TimeoutError:
            if not batch.has_work():
                return None
            raise
        finally:
            client.close()
        device = RemoteDevice(host, port, matchkey=matchkey, secret=self.secret, timeout=self.timeout,
                              client=f"RPCRunner pid {os.getpid()}")
        if not batch.has_work():   # the work ran out meanwhile: hand the board back at once
            device.close()
            return None
        return device

    def _measure_on(self, device: RemoteDevice, task: Task, config: dict) -> BoardResult:
        """One trial, as ``tuning.measure.measure_one`` does it, on ``device``; BoardLost when the board is lost."""
        t0 = time.perf_counter()
        try:
            try:
                op = task.compile(config, device=device)
                inputs, expected = _inputs_and_reference(task, op, self.seed)
                out, latency, measured = self._timed(device, lambda: op.run(**inputs, compute=not self.timing_only), op)
                cycles = op.cycles
                if self.number * self.repeat > 1:
                    means = []
                    for r in range(self.repeat):
                        runs = [self._timed(device, lambda: op.program.run(compute=not self.timing_only))[1]
                                for _ in range(self.number - (1 if r == 0 else 0))]
                        means.append(statistics.fmean(([latency] if r == 0 else []) + runs))
                    latency = statistics.fmean(means)
                checked = self.check and not self.timing_only
                error = None
                if checked and not np.array_equal(out, expected()):
                    error = "wrong output: differs from the numpy reference"
                return BoardResult(config, cycles, latency, error, checked, time.perf_counter() - t0,
                                   MEASURED if measured else SIMULATED, board=device.board)
            finally:
                if device.connected:
                    device.reset()
        except BOARD_LOST:
            raise
        except Exception as e:  # noqa: BLE001 - a crashing config is a measurement result, never a crash of the tuner
            detail = "".join(traceback.format_exception_only(type(e), e)).strip()
            return BoardResult(config, error=f"failed: {detail}", wall_s=time.perf_counter() - t0,
                               board=device.board)

    @staticmethod
    def _timed(device: RemoteDevice, run, op=None) -> tuple[object, float, bool]:
        """(what ``run()`` returns, its latency, whether the board measured it): what the board measured when it
        measures (a Pynq board), else the board latency the config's model predicts (a simulated board, as the
        local runner reports)."""
        before_s, before_n = device.measured_s, device.measured_runs
        value = run()
        stats = op.stats if op is not None else value
        if device.measured_runs > before_n:
            return value, device.measured_s - before_s, True
        return value, stats.latency_s, False

    # ---- context manager (nothing is held between batches) ----
    def close(self) -> None:
        pass

    def __enter__(self) -> RPCRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()



# ------------------------------------------------------------------------------------------------------------
# the command-line flags shared by `vta tune`, tuning.tune_conv2d and tuning.tune_alu

RUNNER_FLAGS = (
    (("--rpc",), {"default": None, "metavar": "HOST:PORT",
                  "help": "measure on the boards of this RPC tracker (ours or TVM's) instead of the local simulator"}),
    (("--key",), {"default": "pynq", "help": "device key of the boards at the tracker (with --rpc; default pynq)"}),
    (("--key-file",), {"default": None, "metavar": "FILE",
                       "help": "the boards' shared key (with --rpc; default $VTA_RPC_KEY_FILE)"}),
    (("--dask",), {"default": None, "metavar": "SCHEDULER",
                   "help": "measure on a Dask cluster: its scheduler address (tcp://HOST:8786), or 'local'"}),
)


def add_runner_flags(parser) -> None:
    """Add --rpc, --key, --key-file and --dask to an argparse parser."""
    for flags, options in RUNNER_FLAGS:
        parser.add_argument(*flags, **options)


@contextlib.contextmanager
def runner_from_flags(args, *, check: bool = True, timing_only: bool = False, seed: int = 0,
                      n_parallel: int | None = None):
    """The runner the flags ask for (RPC boards, a Dask cluster, or local processes), closed afterwards.
    ``n_parallel``: boards at once with --rpc (None: all the tracker lists), worker processes otherwise."""
    if args.rpc and args.dask:
        raise ValueError("--rpc and --dask: give one of them (boards through a tracker, or a Dask cluster)")
    if args.rpc:
        from vta.rpc.base import parse_addr
        host, port = parse_addr(args.rpc)
        with RPCRunner(args.key, host, port, n_parallel=n_parallel, check=check, timing_only=timing_only,
                       seed=seed, key_file=args.key_file) as runner:
            yield runner
    elif args.dask:
        from tuning.measure import DaskRunner, dask_client
        client = dask_client(None if args.dask == "local" else args.dask,
                             **({"n_workers": n_parallel} if args.dask == "local" and n_parallel else {}))
        try:
            yield DaskRunner(client, check=check, timing_only=timing_only, seed=seed)
        finally:
            client.close()
    else:
        from tuning.measure import LocalRunner
        with LocalRunner(n_parallel=n_parallel or 1, check=check, timing_only=timing_only, seed=seed) as runner:
            yield runner
