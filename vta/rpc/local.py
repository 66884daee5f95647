"""A tracker and simulated boards on this machine, each its own process on 127.0.0.1: the whole RPC flow
without a board (trying it out, tests).

    with LocalCluster(boards=4, key="sim") as cluster:
        runner = RPCRunner("sim", *cluster.tracker)

Every process is started here and ended here, by its own pid.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vta.rpc.base import parse_addr
from vta.rpc.tracker import TrackerClient, servers_by_key


def _first_line(proc: subprocess.Popen, timeout: float, what: str) -> str:
    """The first line a child prints (its address), or RuntimeError with what it said instead."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not sel.select(timeout):
            raise RuntimeError(f"{what} did not start within {timeout:g} s")
        line = proc.stdout.readline()
    finally:
        sel.close()
    if not line:
        proc.wait(5)
        raise RuntimeError(f"{what} exited with status {proc.returncode} before it started")
    return line.strip()


class LocalCluster:
    """A tracker (ours, unless ``tracker`` names a running one, e.g. TVM's) and ``boards`` simulated board
    servers registered under ``key``. ``key_file`` makes the boards require that shared key. Logs go to
    ``log_dir`` (default: a temporary directory, removed by ``stop``; kept when ``start`` fails, whose error
    names it), one file per process."""

    def __init__(self, boards: int = 4, key: str = "sim", *, config: str | None = None, tracker: str | None = None,
                 key_file: str | os.PathLike | None = None, log_dir: str | os.PathLike | None = None,
                 server_args: tuple[str, ...] = (), tracker_args: tuple[str, ...] = (), startup_timeout: float = 60.0):
        self.n_boards, self.key, self.config, self.key_file = boards, key, config, key_file
        self.server_args, self.tracker_args = tuple(server_args), tuple(tracker_args)
        self.startup_timeout = startup_timeout
        self._own_logs = log_dir is None
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="vta-rpc-"))
        self.tracker_proc: subprocess.Popen | None = None
        self.address = tracker
        self.boards: dict[str, subprocess.Popen] = {}

    @property
    def tracker(self) -> tuple[str, int]:
        return parse_addr(self.address)

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen:
        log = open(self.log_dir / log_name, "ab")   # noqa: SIM115 - the child holds it; closed with the child
        try:
            return subprocess.Popen([sys.executable, "-m", "vta", *args], stdout=subprocess.PIPE, stderr=log,
                                    stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        finally:
            log.close()

    def start(self) -> LocalCluster:
        try:
            if self.address is None:
                self.tracker_proc = self._spawn(["rpc", "tracker", "--port", "0", *self.tracker_args], "tracker.log")
                line = _first_line(self.tracker_proc, self.startup_timeout, "the tracker")
                self.address = line.rsplit(" ", 1)[-1]
            names = [f"{self.key}-{i}" for i in range(self.n_boards)]
            for name in names:   # all at once, then wait for each to say where it listens
                self.boards[name] = self._spawn(self._server_args(name), f"{name}.log")
            for name in names:
                _first_line(self.boards[name], self.startup_timeout, f"board {name}")
            self.wait_free(self.n_boards)
        except BaseException:
            self._own_logs = False   # kept: what went wrong is in them (wait_free's error names the directory)
            self.stop()
            raise
        return self

    def add_board(self, name: str, wait: bool = False) -> subprocess.Popen:
        """Start one more simulated board (or restart one that was killed) named ``name``."""
        proc = self._spawn(self._server_args(name), f"{name}.log")
        self.boards[name] = proc
        _first_line(proc, self.startup_timeout, f"board {name}")
        if wait:
            self.wait_free(sum(p.poll() is None for p in self.boards.values()))
        return proc

    def _server_args(self, name: str) -> list[str]:
        args = ["rpc", "server", "--tracker", self.address, "--key", self.key, "--device", "sim", "--port", "0",
                "--name", name, *self.server_args]
        if self.config:
            args += ["--config", self.config]
        if self.key_file:
            args += ["--key-file", str(self.key_file)]
        return args

    def kill_board(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.boards[name]
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
        proc.wait(10)

    def summary(self) -> dict:
        with TrackerClient(self.address) as client:
            return client.summary()

    def counts(self) -> tuple[int, int]:
        """(boards registered, boards free) for this cluster's key."""
        s = self.summary()
        return servers_by_key(s).get(self.key, 0), s.get("queue_info", {}).get(self.key, {}).get("free", 0)

    def wait_free(self, n: int, timeout: float | None = None) -> None:
        """Wait until ``n`` boards of the key are registered and free."""
        end = time.monotonic() + (self.startup_timeout if timeout is None else timeout)
        while True:
            total, free = self.counts()
            if total == n and free == n:
                return
            if time.monotonic() > end:
                raise TimeoutError(f"{free} of {total} {self.key!r} boards free, expected {n} (logs: {self.log_dir})")
            time.sleep(0.05)

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        procs = [*self.boards.values(), *([self.tracker_proc] if self.tracker_proc else [])]
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()
        self.boards.clear()
        self.tracker_proc = None
        if self._own_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
