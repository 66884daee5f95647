"""A board on the network as a device: ``RemoteDevice`` has the surface of every other device (alloc, free,
copy_in, copy_out, run, cfg, last_stats), so ``compile_op(..., device=remote)`` and
``graph_pack.build(..., device=remote)`` run on a board unchanged. ``connect_device`` asks a tracker for a
free board of a key and opens a session on it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import threading
import time
import weakref
from typing import Any

import numpy as np

from hw_config import HwConfig, load_config
from hw_config.buffer import alloc_size, checked_buffer
from simulator import errors as sim_errors
from simulator.stats import RunStats
from vta.device import Buffer
from vta.program_check import ProgramRejected
from vta.rpc.base import (
    DEFAULT_SERVER_PORT,
    AuthError,
    BoardBusy,
    BoardFailure,
    BoardLost,
    MatchMismatch,
    ProtocolError,
    RemoteError,
    check_key,
    secret_from,
)
from vta.rpc.protocol import (
    AUTH_HMAC,
    Channel,
    new_nonce,
    nonce_of,
    proof,
    proof_matches,
    session_keys,
    stats_from_wire,
    trace_from_wire,
)
from vta.rpc.tracker import TrackerClient, servers_by_key

BOARD_FAILURES = ("BoardError", "BoardTimeout")   # vta.device_pynq's errors: the board, not the program
_SIM_ERRORS = {name: getattr(sim_errors, name) for name in
               ("SimulatorError", "InvalidInstruction", "MemoryAccessError", "DeadlockError", "BudgetExceeded",
                "CycleBudgetExceeded", "WorkBudgetExceeded")}


def _error_of(reply: dict[str, Any], board: str) -> Exception:
    """The exception a board's refusal stands for: the same class a local device raises where there is one."""
    kind = str(reply.get("kind", "error"))
    message = f"board {board}: {str(reply.get('error', 'refused'))[:2000]}"
    if kind == "ProgramRejected":
        return ProgramRejected(message)
    if kind in _SIM_ERRORS:
        return _SIM_ERRORS[kind](message)
    if kind in ("ValueError", "request"):
        return ValueError(message)
    if kind in BOARD_FAILURES:
        return BoardFailure(message, kind)
    if kind == "busy":
        return BoardBusy(message, kind)
    if kind == "mismatch":
        return MatchMismatch(message, kind)
    if kind == "auth":
        return AuthError(message)
    if kind in ("version", "protocol"):
        return ProtocolError(message)
    return RemoteError(message, kind)


def expect_message(header: dict[str, Any], op: str, board: str) -> dict[str, Any]:
    """``header`` if it is the ``op`` message the protocol expects next. A refusal in its place (a board that
    is busy, expects another match key, refuses the key, speaks another version) raises what it stands for
    (``BoardBusy``, ``MatchMismatch``, ``AuthError``, ``ProtocolError``, ...); any other message a
    ``ProtocolError`` naming what came instead."""
    if header.get("ok") is False:
        raise _error_of(header, board)
    if header.get("op") != op:
        raise ProtocolError(f"board {board}: expected the {op!r} message, got {str(header.get('op'))[:20]!r}")
    return header


_OPEN: weakref.WeakSet[RemoteDevice] = weakref.WeakSet()


@atexit.register
def _close_open_sessions() -> None:
    """Sessions still open when the interpreter exits end politely (the board frees them either way)."""
    for device in list(_OPEN):
        with contextlib.suppress(Exception):
            device.close()


class RemoteDevice:
    """A session on a board server at ``host:port``.

    ``matchkey`` is what the tracker handed out with the address (None for a server taking direct
    connections); ``secret`` the shared key (bytes) when the board requires one. ``timeout`` bounds every
    request, runs included: a board that does not answer in time is taken as lost (``BoardLost``), as is a
    broken connection. Refusals raise what a local device raises (``ProgramRejected``, ``SimulatorError``,
    ``ValueError``) or ``RemoteError``; the session goes on after them. ``close()`` (or leaving a ``with``)
    ends the session and the board frees everything it held.
    """

    def __init__(self, host: str, port: int = DEFAULT_SERVER_PORT, *, matchkey: str | None = None,
                 secret: bytes | None = None, timeout: float = 60.0, connect_timeout: float = 10.0,
                 client: str | None = None):
        self.host, self.port, self.timeout = host, port, timeout
        self.board = f"{host}:{port}"
        self.last_stats: RunStats | None = None
        self.last_wall_s = 0.0        # host time of the last run on the board server
        self.measured_s = 0.0         # sum of the latencies the board measured itself (Pynq boards), and
        self.measured_runs = 0        # how many runs reported one
        self._lock = threading.Lock()
        self._ch: Channel | None = None
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as e:
            raise BoardLost(f"cannot reach the board at {host}:{port}: {e.strerror or e}") from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            self._ch = Channel(sock, read_timeout=connect_timeout)
            self._handshake(matchkey, secret, connect_timeout, client or f"{socket.gethostname()} pid {os.getpid()}")
            self._ch.read_timeout = timeout
        except BaseException:
            self._abort()
            raise
        _OPEN.add(self)

    def _handshake(self, matchkey: str | None, secret: bytes | None, timeout: float, client: str) -> None:
        ch = self._ch
        client_nonce = new_nonce()
        try:
            # who the client is goes in the auth message: only a board that has proved it holds the key (or, for a
            # client without one, any board) learns the host and pid
            ch.send({"op": "hello", "client_nonce": client_nonce.hex(), "matchkey": matchkey})
            challenge = expect_message(ch.recv(timeout, 0)[0], "challenge", self.board)
            server_nonce = nonce_of(challenge, "server_nonce")
            auth = challenge.get("auth")
            if auth == AUTH_HMAC:
                if secret is None:
                    raise AuthError(f"board {self.board} requires a key: give --key-file FILE (or set "
                                    "VTA_RPC_KEY_FILE) with the board's shared key")
                expected = proof(secret, "server", client_nonce, server_nonce, matchkey)
                if not proof_matches(challenge.get("server_proof"), expected):
                    raise AuthError(f"board {self.board} could not prove it holds the key: a wrong key file, or "
                                    "not the board it claims to be")
                ch.send({"op": "auth", "proof": proof(secret, "client", server_nonce, client_nonce, matchkey),
                         "client": client})
                ch.secure(*session_keys(secret, client_nonce, server_nonce, matchkey))
            elif auth == "none":
                if secret is not None:
                    raise AuthError(f"board {self.board} does not authenticate (it has no key file) but a key "
                                    "was given: refusing to trust it (start the board with --key-file)")
                ch.send({"op": "auth", "proof": None, "client": client})
            else:
                raise ProtocolError(f"board {self.board}: unknown authentication {str(auth)[:40]!r}")
            ready, _, _ = ch.recv(timeout, 0)
        except (TimeoutError, ConnectionError) as e:
            raise BoardLost(f"board {self.board}: handshake failed: {e}") from None
        self._ready(expect_message(ready, "ready", self.board))

    def _ready(self, ready: dict[str, Any]) -> None:
        try:
            self.cfg: HwConfig = load_config(ready["config"])
            self.board = str(ready["board"])[:200]
            self.key = str(ready.get("key", ""))
            self.device_kind = str(ready.get("device", ""))
            self.cpu = ready.get("cpu") if isinstance(ready.get("cpu"), dict) else None   # a --device cpu server
            limits = ready["limits"]
            self.limits = {k: int(limits[k]) for k in ("max_payload", "max_buffer", "max_session_bytes",
                                                      "max_buffers", "max_insns")}
        except (KeyError, TypeError, ValueError) as e:
            raise ProtocolError(f"board {self.board}: malformed ready message ({e})") from None
        if min(self.limits.values()) <= 0:
            raise ProtocolError(f"board {self.board}: malformed limits {self.limits}")

    # ---- the session ----
    def _call(self, op: str, payload: Any = b"", expect: int = 0, **fields: Any) -> tuple[dict[str, Any], bytearray]:
        with self._lock:
            if self._ch is None:
                raise BoardLost(f"board {self.board}: the session is closed")
            try:
                self._ch.send({"op": op, **fields}, payload)
                reply, data, _ = self._ch.recv(self.timeout, expect)
            except OSError as e:   # timeouts, broken connections, protocol and tag errors
                self._abort()
                if isinstance(e, AuthError):
                    raise
                raise BoardLost(f"board {self.board}: {op} failed: {e}") from None
        if reply.get("op") != op:
            self._abort()
            raise BoardLost(f"board {self.board}: answered {str(reply.get('op'))[:20]!r} to {op}")
        if not reply.get("ok"):
            raise _error_of(reply, self.board)
        return reply, data

    def _abort(self) -> None:
        ch, self._ch = self._ch, None
        if ch is not None:
            with contextlib.suppress(OSError):
                ch.sock.close()

    @property
    def connected(self) -> bool:
        return self._ch is not None

    def alloc(self, nbytes: int) -> Buffer:
        n = alloc_size(nbytes)
        reply, _ = self._call("alloc", nbytes=max(1, n))
        addr, size = reply.get("addr"), reply.get("nbytes")
        if not isinstance(addr, int) or not isinstance(size, int) or size < n:
            raise BoardLost(f"board {self.board}: malformed alloc answer")
        return Buffer(addr, n)

    def free(self, buf: Buffer) -> None:
        self._call("free", addr=checked_buffer(buf).addr)

    def copy_in(self, buf: Buffer, data: np.ndarray | bytes, offset: int = 0) -> None:
        raw = np.frombuffer(data, np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) else \
            np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if offset < 0 or offset + raw.size > buf.nbytes:
            raise ValueError(f"copy of {raw.size} bytes at offset {offset} overruns a {buf.nbytes}-byte buffer")
        step = self.limits["max_payload"]
        for start in range(0, raw.size, step) if raw.size else ():
            self._call("copy_in", raw[start:start + step], addr=buf.addr, offset=offset + start)

    def copy_out(self, buf: Buffer, nbytes: int | None = None, offset: int = 0) -> np.ndarray:
        n = buf.nbytes - offset if nbytes is None else int(nbytes)
        if offset < 0 or n < 0 or offset + n > buf.nbytes:
            raise ValueError(f"read of {n} bytes at offset {offset} overruns a {buf.nbytes}-byte buffer")
        out = np.empty(n, np.uint8)
        step = self.limits["max_payload"]
        for start in range(0, n, step):
            k = min(step, n - start)
            _, data = self._call("copy_out", expect=k, addr=buf.addr, offset=offset + start, nbytes=k)
            if len(data) != k:
                self._abort()
                raise BoardLost(f"board {self.board}: copy_out returned {len(data)} bytes, not {k}")
            out[start:start + k] = np.frombuffer(data, np.uint8)
        return out

    def run(self, insns: np.ndarray, *, compute: bool = True, trace: bool = False) -> RunStats:
        rows = np.ascontiguousarray(insns, dtype=np.uint8).reshape(-1)
        if rows.size % 16:
            raise ValueError(f"instructions must be a whole number of 16-byte instructions, got {rows.size} bytes")
        count = rows.size // 16
        reply, data = self._call("run", rows, expect=24 * count if trace else 0, compute=bool(compute),
                                 trace=bool(trace))
        stats = stats_from_wire(reply.get("stats"))
        if trace:
            stats.trace = trace_from_wire(data, count)
        wall = reply.get("wall_s", 0.0)
        self.last_wall_s = float(wall) if isinstance(wall, (int, float)) and not isinstance(wall, bool) else 0.0
        measured = reply["stats"].get("host_seconds")   # a board's own measurement (vta.device_pynq)
        if isinstance(measured, (int, float)) and not isinstance(measured, bool) and measured >= 0:
            self.measured_s += float(measured)
            self.measured_runs += 1
        self.last_stats = stats
        return stats

    def measure_cpu(self, workload: dict, config: dict, option: dict, seed: int = 0) -> dict[str, Any]:
        """One host-template config measured on a ``--device cpu`` server's CPU: the MeasureResult fields."""
        reply, _ = self._call("measure_cpu", workload=workload, config=config, option=option, seed=seed)
        if not isinstance(reply.get("result"), dict):
            raise ProtocolError(f"board {self.board}: measure_cpu answered without a result")
        return reply["result"]

    def reset(self) -> int:
        """Free every buffer of this session on the board; returns how many."""
        reply, _ = self._call("reset")
        return int(reply.get("freed", 0))

    def info(self) -> dict[str, Any]:
        reply, _ = self._call("info")
        return reply

    def close(self) -> None:
        """End the session (the board frees everything); safe to call twice."""
        if self._ch is None:
            return
        with contextlib.suppress(OSError, RemoteError, ValueError):
            self._call("close")
        self._abort()

    def __enter__(self) -> RemoteDevice:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "open" if self._ch is not None else "closed"
        return f"RemoteDevice({self.board}, {getattr(self, 'cfg', None) and self.cfg.model}, {state})"


def boards_summary(summary: dict[str, Any]) -> str:
    """A tracker's boards per key, as ``sim: 1 free of 2, pynq: 0 free of 1`` (``none`` without boards)."""
    total, queues = servers_by_key(summary), summary.get("queue_info", {})
    keys = sorted(set(total) | {k for k, q in queues.items() if isinstance(q, dict) and q.get("free")})
    return ", ".join(f"{k}: {queues.get(k, {}).get('free', 0)} free of {total.get(k, 0)}" for k in keys) or "none"


def check_key_registered(client: TrackerClient, key: str) -> None:
    """``BoardLost`` at once, with the tracker's summary, when no board is registered under ``key``: a request
    would wait for a board that is not coming. (A tracker that cannot summarise is not checked.)"""
    try:
        summary = client.summary()
    except ProtocolError:
        return
    if servers_by_key(summary).get(key) or summary.get("queue_info", {}).get(key, {}).get("free"):
        return
    raise BoardLost(f"the tracker at {client.address} has no {key!r} board (boards by key: {boards_summary(summary)}); "
                    f"register one (vta rpc server --tracker {client.address} --key {key} ...) or ask for a key it has")


def request_board(tracker: str | tuple[str, int], key: str, *, priority: float = 1, timeout: float | None = 60.0,
                  cancel=None) -> tuple[str, int, str]:
    """(host, port, matchkey) of a free board of ``key`` from a tracker (ours or TVM's); ``BoardLost`` at once
    when the tracker has no board of ``key`` at all."""
    check_key(key)
    with TrackerClient(tracker) as client:
        check_key_registered(client, key)
        return client.request(key, priority=priority, timeout=timeout, cancel=cancel)


def connect_device(tracker: str | tuple[str, int], key: str, cfg: HwConfig | str | None = None,
                   timeout: float = 60.0, *, key_file: str | os.PathLike | None = None, priority: float = 1,
                   request_timeout: float | None = None, attempts: int = 3) -> RemoteDevice:
    """A session on a free board of ``key`` from the tracker at ``tracker`` (``HOST:PORT``).

    Waits up to ``request_timeout`` (default ``timeout``) for a board to be free. With ``cfg`` the board must
    run that hardware config (``ValueError`` naming both otherwise). ``key_file`` (default
    ``$VTA_RPC_KEY_FILE``) holds the boards' shared key. A match that turns out stale (the board registered
    again meanwhile) is requested again, ``attempts`` times in all.
    """
    secret = secret_from(key_file)
    want = None if cfg is None else load_config(cfg)
    wait = timeout if request_timeout is None else request_timeout
    last: Exception | None = None
    for _ in range(max(1, attempts)):
        host, port, matchkey = request_board(tracker, key, priority=priority, timeout=wait)
        try:
            device = RemoteDevice(host, port, matchkey=matchkey, secret=secret, timeout=timeout)
        except (MatchMismatch, BoardBusy, BoardLost) as e:
            last = e
            time.sleep(0.2)
            continue
        except AuthError as e:
            if secret is None:   # this client's own setup (no key for a keyed board): no other board helps
                raise
            last = e   # a board without the key (a rogue one, or misconfigured): try the next, as RPCRunner does
            continue
        if want is not None and device.cfg.fingerprint != want.fingerprint:
            device.close()
            raise ValueError(f"board {device.board} runs {device.cfg.model}, not {want.model}: start boards with "
                             f"--config for this build, or build for the board's config")
        return device
    if isinstance(last, AuthError):   # every board offered failed the key: say so as what it is
        raise AuthError(f"no {key!r} board from the tracker at {tracker} proved it holds the key in {attempts} "
                        f"attempt(s); the last: {last}")
    raise BoardLost(f"no usable {key!r} board from the tracker at {tracker}: {last}")

