"""Tuning a remote board's CPU through our RPC, as AutoTVM tunes an ARM board over its tracker: a
``vta rpc server --device cpu`` on the board compiles each host-template config for its own CPU (its triple and
features), checks and times it; ``RPCCpuRunner`` sends it the configs (JSON requests over the authenticated,
bounded frames of vta.rpc) and records what it measured, under the board CPU's fingerprint.

    runner = RPCCpuRunner("rk3399", "tracker.lan", 9190, number=4, repeat=3, key_file="board.key")
    tasks = tuning.extract_tasks(graph, runner.cpu_target, target="cpu")   # the board's template family
    tuning.tune_tasks(tasks, runner=runner, log="r18.rk3399.jsonl")
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from host.templates import CpuTarget, host, host_template_of
from tuning.auto_network import AutoScheduleTask
from tuning.cpu import CpuRunner, CpuTask, MeasureOption
from tuning.measure import MeasureResult
from tuning.task import Task, _canonical
from tuning.tuners import _result_of
from vta.rpc import BoardLost
from vta.rpc.base import check_key, secret_from
from vta.rpc.client import RemoteDevice, request_board
from vta.rpc.server import CPU_MEASURERS, CpuMeasurer

# what one request may ask of the board's CPU (its time is the server's to bound)
OPTION_LIMITS = {"number": 1 << 20, "repeat": 1000, "min_repeat_ms": 60_000.0, "timeout": 600.0, "check": 1}
MAX_ELEMENTS = 1 << 26    # elements of one input or output a request may make the board allocate (256 MB of float32)
MAX_MACS = 1 << 36        # multiply-adds of one call
_SERVER_RUNNER: list[CpuRunner] = []


def _option(option: dict[str, Any]) -> MeasureOption:
    unknown = set(option) - set(OPTION_LIMITS)
    if unknown:
        raise ValueError(f"measure option(s) {sorted(unknown)[:5]} unknown; allowed: {', '.join(OPTION_LIMITS)}")
    for name, value in option.items():
        if isinstance(value, bool) != (name == "check") or not isinstance(value, (int, float)) or \
                not math.isfinite(value) or not 0 <= value <= OPTION_LIMITS[name]:
            raise ValueError(f"measure option {name}={str(value)[:40]} is outside 0..{OPTION_LIMITS[name]:g}")
    return MeasureOption(**option)


def serve_measure(workload: dict, config: dict, option: dict, seed: int) -> dict[str, Any]:
    """A ``--device cpu`` server's ``measure_cpu``: the config compiled for this CPU, checked and timed in a worker
    process (``option.timeout``); ValueError for a workload or option the server refuses."""
    opt = _option(option)
    if "inputs" in workload:   # an auto-scheduler DAG's key (host.knobs.dag_of_workload names what is wrong)
        task: CpuTask = AutoScheduleTask(workload, host())
        sizes = [math.prod(t.shape) for t in task.dag.inputs]
    else:
        host_template_of(str(workload.get("op")))   # names the allowed templates when unknown
        task = CpuTask(_canonical(workload), host())
        sizes = [math.prod(s) for s in (workload.get("data_shape", ()), workload.get("kernel_shape", ()))]
    t = task.template   # parses the workload: a ValueError names what is wrong
    if max(sizes) > MAX_ELEMENTS or t.macs > MAX_MACS:
        raise ValueError(f"measure_cpu: a workload of {max(sizes)} elements and {t.macs} multiply-adds; this server "
                         f"takes at most {MAX_ELEMENTS} and {MAX_MACS}")
    if not _SERVER_RUNNER:
        _SERVER_RUNNER.append(CpuRunner())
    result = _SERVER_RUNNER[0].measure_with(task, [config], opt, seed)[0]
    out = result.to_dict()
    out.pop("config")
    return out


CPU_MEASURERS.append(CpuMeasurer(lambda: host().to_dict(), serve_measure))


class RPCCpuRunner:
    """Measure host-template configs on the CPU of a ``vta rpc server --device cpu`` of ``key`` at the tracker
    ``host:port`` (AutoTVM's ``RPCRunner`` for a CPU): one board session per batch, configs one at a time.
    ``cpu_target`` is the board's CPU (ask it before extracting tasks: its template family and fingerprint)."""

    def __init__(self, key: str, host: str = "127.0.0.1", port: int = 9190, *, number: int = 1, repeat: int = 3,
                 min_repeat_ms: float = 0.0, timeout: float = 10.0, check: bool = True, seed: int = 0,
                 key_file: str | os.PathLike | None = None, request_timeout: float = 120.0):
        self.key = check_key(key)
        self.tracker = (host, int(port))
        self.option = _option({"number": number, "repeat": repeat, "min_repeat_ms": float(min_repeat_ms),
                               "timeout": float(timeout), "check": check})
        self.seed, self.request_timeout = seed, request_timeout
        self.secret = secret_from(key_file)
        self.boards_used: dict[str, int] = {}

    def _session(self) -> RemoteDevice:
        host, port, matchkey = request_board(self.tracker, self.key, timeout=self.request_timeout)
        device = RemoteDevice(host, port, matchkey=matchkey, secret=self.secret, timeout=self.option.timeout + 60,
                              client=f"RPCCpuRunner pid {os.getpid()}")
        if device.cpu is None:
            device.close()
            raise BoardLost(f"board {device.board} of key {self.key!r} is not a CPU server: start it with "
                            "vta rpc server --device cpu")
        return device

    @cached_property
    def cpu_target(self) -> CpuTarget:
        with self._session() as device:
            return CpuTarget.from_dict(device.cpu)

    def measure(self, task: Task, configs: Sequence[dict]) -> list[MeasureResult]:
        if not isinstance(task, CpuTask) or task.cfg != self.cpu_target:
            raise ValueError(f"RPCCpuRunner measures host-template tasks of the board's CPU ({self.cpu_target.model}): "
                             f"extract them with extract_tasks(graph, runner.cpu_target, target='cpu')")
        workload = json.loads(task.key)
        option = {"number": self.option.number, "repeat": self.option.repeat,
                  "min_repeat_ms": self.option.min_repeat_ms, "timeout": self.option.timeout,
                  "check": self.option.check}
        out: list[MeasureResult] = []
        with self._session() as device:
            for config in configs:
                reason = task.check(config)
                if reason:
                    out.append(MeasureResult(config, error=f"invalid config: {reason}"))
                    continue
                try:
                    out.append(_result_of(config, device.measure_cpu(workload, config, option, self.seed)))
                except ValueError as e:   # the board refused the request: a failed trial, not a lost board
                    out.append(MeasureResult(config, error=f"failed: {e}"))
                self.boards_used[device.board] = self.boards_used.get(device.board, 0) + 1
        return out

    def close(self) -> None:
        pass

    def __enter__(self) -> RPCCpuRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
