"""A simulated board in a child process on this machine: start it, reach it, read its status, stop it.

    with LocalBoard("--time-scale", "100") as board:          # `vta board serve --simulated --port 0 ...`
        dev = PynqDevice(cfg, board=board.address)
        ...
        print(board.status()["memory"]["used_bytes"])

The child is ``python -m vta board serve --simulated``; it binds 127.0.0.1 on a free port (``--port 0``) and
prints the port it got. ``stop()`` sends SIGTERM and returns the exit status (0 on a clean shutdown).
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from vta.board.pynq_support import import_remote

READY = re.compile(r"listening on (\S+):(\d+) ")


def read_status(host: str, port: int, timeout: float = 5.0) -> dict:
    """A simulated board's ``/proc/vta-sim/status`` (its accounting), read through pynq's remote protocol."""
    from vta.board.server import STATUS_FILE

    grpc, pb = import_remote("reading a simulated board's status")
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    with grpc.insecure_channel(target) as channel:
        stub = pb["remote_device_grpc"].RemoteDeviceStub(channel)
        request = pb["remote_device"].ReadFileRequest(file_path=STATUS_FILE)
        try:
            data = b"".join(r.data for r in stub.readfile(request, timeout=timeout))
        except grpc.RpcError as e:
            raise OSError(f"board at {target}: {e.code().name}: {e.details()} (is `vta board serve --simulated` "
                          f"running there?)") from None
    return json.loads(data)


class LocalBoard:
    """``vta board serve --simulated`` as a child process (``extra_args`` are more ``serve`` flags)."""

    def __init__(self, *extra_args: str, config: str = "pynq", host: str = "127.0.0.1", port: int = 0,
                 log_path: str | os.PathLike | None = None, startup_timeout: float = 60.0,
                 env: dict[str, str] | None = None):
        self.args = ["--simulated", "--config", config, "--host", host, "--port", str(port), *extra_args]
        self.host = host
        self.port: int | None = None
        self.log_path = Path(log_path) if log_path else None
        self.startup_timeout = startup_timeout
        self.env = env
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> LocalBoard:
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL   # noqa: SIM115 - child owns it
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "vta", "board", "serve", *self.args],
                                         stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                         env=self.env, text=True)
        finally:
            if self.log_path:
                log.close()
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        try:
            line = lines.get(timeout=self.startup_timeout)
        except queue.Empty:
            line = None
        match = READY.search(line or "")
        if match is None:
            self.stop()
            where = f" (its log: {self.log_path})" if self.log_path else ""
            raise OSError(f"`vta board serve {' '.join(self.args)}` did not start{where}; it printed {line!r}")
        self.port = int(match.group(2))
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def status(self, timeout: float = 5.0) -> dict:
        return read_status(self.host, self.port, timeout)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, then wait; SIGKILL only if it does not stop in time. Returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        return self.proc.returncode

    def __enter__(self) -> LocalBoard:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
