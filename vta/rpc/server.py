"""The board server: one device (a Pynq board, or the simulator), one session at a time, registered with a
tracker (ours or TVM's) under a device key, or listening for direct connections.

A session (protocol in ``vta.rpc.protocol``) allocates and frees buffers, copies bytes in and out, and runs
instruction streams; every stream is validated with ``check_program`` against the session's own buffers
before it runs, so a program can reach nothing else in the board's memory. Each run returns the device's
counters, cycles and latency (``RunStats.to_dict()``) and the host time of the run. When the session ends,
the client disconnects, or it goes quiet for ``session_timeout``, every buffer it allocated is freed and the
board registers again with the tracker.

Security: with a shared key (``secret``), clients must prove they hold it (HMAC challenge-response, both
ways, constant-time comparison) and every message after the handshake carries an HMAC tag. Without one the
server binds 127.0.0.1 only, whatever ``host`` says, and logs so.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from simulator.errors import SimulatorError
from vta.device import Buffer, Device
from vta.program_check import INSN_BYTES, ProgramRejected, check_program
from vta.rpc.base import (
    ANNOUNCED,
    DEFAULT_SERVER_PORT,
    SERVER_PORT_END,
    AuthError,
    ProtocolError,
    check_key,
    is_loopback,
    parse_addr,
    recv_exact,
)
from vta.rpc.protocol import (
    AUTH_HMAC,
    PREFIX,
    TVM_RPC_MAGIC_BYTES,
    Channel,
    VersionError,
    new_nonce,
    nonce_of,
    proof,
    proof_matches,
    session_keys,
    stats_to_wire,
    trace_to_wire,
)
from vta.rpc.tracker import UNUSED_MATCH, TrackerClient

log = logging.getLogger("vta.rpc.server")
TVM_RPC_CODE_MISMATCH = (0xFF271 + 2).to_bytes(4, "little", signed=True)


@dataclass(frozen=True)
class SessionLimits:
    """What one session may ask of the board (announced to the client in the "ready" message)."""

    max_payload: int = 64 << 20          # bytes in one message (copies larger than this are split by the client)
    max_buffer: int = 256 << 20          # bytes in one buffer
    max_session_bytes: int = 512 << 20   # bytes of all of a session's buffers (a Pynq-Z1 has 512 MiB)
    max_buffers: int = 4096
    max_insns: int = 1 << 20             # instructions in one run

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class CpuMeasurer:
    """What a ``--device cpu`` server does for ``measure_cpu``: compile a host template's config for this machine's
    CPU, check and time it. The tuning layer (above this one) provides it when it is imported (``tuning.cpu``)."""

    target: Callable[[], dict[str, Any]]    # this CPU: {triple, cpu, features, vector_bits}
    measure: Callable[[dict, dict, dict, int], dict[str, Any]]   # (workload, config, option, seed) -> result


CPU_MEASURERS: list[CpuMeasurer] = []


class RequestError(Exception):
    """A request the session refuses (the session goes on): ``kind`` travels to the client."""

    def __init__(self, message: str, kind: str = "request"):
        super().__init__(message)
        self.kind = kind


def _int(header: dict, name: str, lo: int, hi: int) -> int:
    """An integer field: not an integer breaks the protocol; out of [lo, hi] is a refused request."""
    v = header.get(name)
    if not isinstance(v, int) or isinstance(v, bool):
        raise ProtocolError(f"{header.get('op')}: {name} must be an integer, got {str(v)[:40]}")
    if not lo <= v <= hi:
        raise RequestError(f"{header.get('op')}: {name}={v} is out of range [{lo}, {hi}]")
    return v


def _flag(header: dict, name: str) -> bool:
    v = header.get(name, False)
    if not isinstance(v, bool):
        raise ProtocolError(f"{header.get('op')}: {name} must be true or false")
    return v


class _Session:
    """One client's buffers on the device; everything is freed by ``close``."""

    def __init__(self, server: BoardServer, device: Device, peer: str):
        self.server, self.device, self.peer = server, device, peer
        self.limits = server.limits
        self.buffers: dict[int, Buffer] = {}
        self.nbytes = 0
        self.insn_buffer: Buffer | None = None
        self.runs = 0

    # ---- checks done on the header, before any payload is read ----
    def accept(self, h: dict, plen: int) -> str | None:
        op = h.get("op")
        if op not in OPS:
            raise ProtocolError(f"unknown op {str(op)[:40]!r}; known: {', '.join(OPS)}")
        if op == "copy_in":
            try:
                buf = self._buffer(h)
                offset = _int(h, "offset", 0, buf.nbytes)
            except RequestError as e:
                return str(e)
            if offset + plen > buf.nbytes:
                return f"copy of {plen} bytes at offset {offset} overruns the {buf.nbytes}-byte buffer at {buf.addr:#x}"
        elif op == "run":
            if plen % INSN_BYTES or not INSN_BYTES <= plen <= self.limits.max_insns * INSN_BYTES:
                return (f"an instruction stream of {plen} bytes: need a whole number of {INSN_BYTES}-byte "
                        f"instructions, 1..{self.limits.max_insns}")
        elif plen:
            raise ProtocolError(f"{op} takes no payload")
        return None

    def _buffer(self, h: dict) -> Buffer:
        addr = _int(h, "addr", 0, (1 << 64) - 1)
        buf = self.buffers.get(addr)
        if buf is None:
            raise RequestError(f"no buffer of this session at {addr:#x}")
        return buf

    # ---- requests ----
    def handle(self, h: dict, payload: bytearray) -> tuple[dict[str, Any], Any]:
        return getattr(self, "op_" + h["op"])(h, payload)

    def op_alloc(self, h: dict, _payload) -> tuple[dict, Any]:
        nbytes = _int(h, "nbytes", 1, self.limits.max_buffer)
        if len(self.buffers) >= self.limits.max_buffers:
            raise RequestError(f"a session holds at most {self.limits.max_buffers} buffers", "limit")
        if self.nbytes + nbytes > self.limits.max_session_bytes:
            raise RequestError(f"allocating {nbytes} bytes would take this session's buffers to "
                               f"{self.nbytes + nbytes} bytes, over its {self.limits.max_session_bytes}", "limit")
        buf = self.device.alloc(nbytes)
        self.buffers[buf.addr] = buf
        self.nbytes += buf.nbytes
        return {"addr": buf.addr, "nbytes": buf.nbytes}, b""

    def op_free(self, h: dict, _payload) -> tuple[dict, Any]:
        buf = self._buffer(h)
        del self.buffers[buf.addr]
        self.nbytes -= buf.nbytes
        self.device.free(buf)
        return {}, b""

    def op_copy_in(self, h: dict, payload: bytearray) -> tuple[dict, Any]:
        buf = self._buffer(h)
        if payload:
            self.device.copy_in(buf, np.frombuffer(payload, np.uint8), h["offset"])
        return {}, b""

    def op_copy_out(self, h: dict, _payload) -> tuple[dict, Any]:
        buf = self._buffer(h)
        offset = _int(h, "offset", 0, buf.nbytes)
        nbytes = _int(h, "nbytes", 0, min(buf.nbytes - offset, self.limits.max_payload))
        return {"nbytes": nbytes}, self.device.copy_out(buf, nbytes, offset)

    def op_run(self, h: dict, payload: bytearray) -> tuple[dict, Any]:
        compute, trace = _flag(h, "compute"), _flag(h, "trace")
        insns = np.frombuffer(payload, np.uint8).reshape(-1, INSN_BYTES)
        need = insns.nbytes
        if self.insn_buffer is None or self.insn_buffer.nbytes < need:   # where the stream sits for the fetch module
            if self.insn_buffer is not None:
                self.device.free(self.insn_buffer)
                self.insn_buffer = None
            self.insn_buffer = self.device.alloc(max(need, 4096))
        ib = self.insn_buffer
        regions = [(b.addr, b.nbytes) for b in self.buffers.values()] + [(ib.addr, ib.nbytes)]
        check_program(insns, self.device.cfg, regions, (ib.addr, ib.nbytes))
        t0 = time.perf_counter()
        stats = self.device.run(insns, compute=compute, trace=trace)
        wall = time.perf_counter() - t0
        self.runs += 1
        out = trace_to_wire(stats.trace) if trace else b""
        return {"stats": stats_to_wire(stats), "wall_s": wall, "trace": len(insns) if trace else 0}, out

    def op_measure_cpu(self, h: dict, _payload) -> tuple[dict, Any]:
        """Measure one config of a host template on this server's CPU (``--device cpu``): JSON in, JSON out."""
        if self.server.device_kind != "cpu" or not CPU_MEASURERS:
            raise RequestError(f"board {self.server.name} serves a {self.server.device_kind} device: measure_cpu "
                               "needs a server started with --device cpu")
        for name in ("workload", "config", "option"):
            if not isinstance(h.get(name), dict):
                raise RequestError(f"measure_cpu: {name} must be a JSON object")
        seed = _int(h, "seed", 0, (1 << 32) - 1)
        return {"result": CPU_MEASURERS[-1].measure(h["workload"], h["config"], h["option"], seed)}, b""

    def op_reset(self, _h: dict, _payload) -> tuple[dict, Any]:
        freed = len(self.buffers)
        self.free_all()
        return {"freed": freed}, b""

    def op_info(self, _h: dict, _payload) -> tuple[dict, Any]:
        return {**self.server.board_info(), "buffers": len(self.buffers), "bytes": self.nbytes}, b""

    def op_ping(self, _h: dict, _payload) -> tuple[dict, Any]:
        return {}, b""

    def op_close(self, _h: dict, _payload) -> tuple[dict, Any]:
        return {}, b""

    def free_all(self) -> None:
        for buf in [*self.buffers.values(), *([self.insn_buffer] if self.insn_buffer else [])]:
            try:
                self.device.free(buf)
            except Exception as e:  # noqa: BLE001 - free the rest whatever one buffer does
                log.warning("freeing the buffer at %#x failed: %s", buf.addr, e)
        self.buffers.clear()
        self.insn_buffer = None
        self.nbytes = 0


OPS = ("alloc", "free", "copy_in", "copy_out", "run", "measure_cpu", "reset", "info", "ping", "close")
_DEVICE_ERRORS = (ProgramRejected, SimulatorError, ValueError, MemoryError, RuntimeError, OSError)


class BoardServer:
    """Serve ``device_factory()``'s device, one session at a time.

    ``device_factory`` is called when a session starts (the simulator gives each session a fresh device; a
    board's factory returns its one device); a session's buffers are freed when it ends either way.
    ``tracker`` (``HOST:PORT``) registers the board there under ``key``; without it the server takes direct
    connections. ``secret`` (bytes, from a key file) turns authentication on; without it the server binds
    127.0.0.1 only. ``port`` 0 takes any free port; the default searches 9091..9198 as TVM's server does.
    """

    def __init__(self, device_factory: Callable[[], Device], *, key: str = "pynq", tracker: str | None = None,
                 host: str = "127.0.0.1", port: int = DEFAULT_SERVER_PORT, port_end: int | None = None,
                 secret: bytes | None = None, name: str | None = None, custom_addr: str | None = None,
                 device_kind: str = "sim", limits: SessionLimits | None = None, handshake_timeout: float = 10.0,
                 read_timeout: float = 30.0, session_timeout: float = 600.0, ping_period: float = 2.0,
                 unmatch_timeout: float = 4.0, max_handshakes: int = 8):
        self.device_factory = device_factory
        self.key = check_key(key)
        self.tracker_addr = parse_addr(tracker) if tracker else None
        self.secret = secret
        self.notice = None
        if secret is None and not is_loopback(host):
            self.notice = (f"no key file: serving 127.0.0.1 only, not {host} (give --key-file FILE so that "
                           "clients on other machines can authenticate)")
            host = "127.0.0.1"
        self.host, self.port = host, port
        self.port_end = port_end if port_end is not None else (SERVER_PORT_END if port == DEFAULT_SERVER_PORT else port + 1)
        self.custom_addr = custom_addr
        self.device_kind = device_kind
        self.limits = limits or SessionLimits()
        self.handshake_timeout, self.read_timeout = handshake_timeout, read_timeout
        self.session_timeout, self.ping_period, self.unmatch_timeout = session_timeout, ping_period, unmatch_timeout
        self.max_handshakes = max_handshakes
        self._name = name
        self._cfg = None
        self._lock = threading.Lock()
        self._busy = False
        self._matchkey: str | None = None     # the key the tracker hands out for this board, while free
        self._declined: str | None = None     # a match whose holder left in the handshake: report it, offer anew
        self._changed = threading.Event()     # a session ended: register again
        self._stop = threading.Event()
        self._pending: dict[socket.socket, float] = {}   # connections still in their handshake, oldest first
        self._listener: socket.socket | None = None
        self._active: socket.socket | None = None   # the session's connection (shut down by stop())
        self._threads: list[threading.Thread] = []
        self.sessions = 0                      # sessions served (ended)
        self.registered = threading.Event()    # set once registered with the tracker (each time)
        self.session_active = threading.Event()

    # ---- facts ----
    @property
    def name(self) -> str:
        return self._name or f"{self.key}@{socket.gethostname()}:{self.port}"

    @property
    def cfg(self):
        if self._cfg is None:
            self._cfg = self.device_factory().cfg
        return self._cfg

    def board_info(self) -> dict[str, Any]:
        info = {"board": self.name, "key": self.key, "device": self.device_kind, "config": self.cfg.to_dict(),
                "limits": self.limits.to_dict()}
        if self.device_kind == "cpu" and CPU_MEASURERS:
            info["cpu"] = CPU_MEASURERS[-1].target()
        return info

    # ---- life cycle ----
    def bind(self) -> None:
        if self._listener is not None:
            return
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ports = [0] if self.port == 0 else range(self.port, max(self.port + 1, self.port_end))
        for port in ports:
            try:
                sock.bind((self.host, port))
                break
            except OSError as e:
                last = e
        else:
            sock.close()
            raise OSError(f"cannot bind {self.host}:{self.port}..{self.port_end - 1}: {last.strerror or last}")
        sock.listen(128)
        sock.settimeout(0.5)
        self._listener = sock
        self.port = sock.getsockname()[1]
        _ = self.cfg   # the device must come up before anyone is told the board exists
        if self.notice:
            log.warning("%s", self.notice, extra=ANNOUNCED)
        log.info("board %s (%s, %s) listening on %s:%d%s", self.name, self.device_kind, self.cfg.model, self.host,
                 self.port, ", authentication on" if self.secret else ", no authentication", extra=ANNOUNCED)

    def start(self) -> BoardServer:
        """Bind and serve from daemon threads (the tracker registration too); returns at once."""
        if self._threads:
            return self
        self.bind()
        for target, name in ((self._accept_loop, "accept"), (self._tracker_loop, "tracker")):
            if name == "tracker" and self.tracker_addr is None:
                continue
            t = threading.Thread(target=target, name=f"vta-rpc-server-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def serve_forever(self) -> None:
        self.start()
        try:
            while not self._stop.wait(0.5):
                pass
        finally:
            self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._changed.set()
        for sock in (self._active, self._listener):   # wakes the session's read and the accept
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(5)
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()

    def __enter__(self) -> BoardServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- connections ----
    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, addr = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                time.sleep(0.1)
                continue
            with self._lock:   # full: the oldest unfinished handshake makes room (stallers cannot lock clients out)
                oldest = next(iter(self._pending)) if len(self._pending) >= self.max_handshakes else None
                self._pending.pop(oldest, None)
                self._pending[conn] = time.monotonic()
            if oldest is not None:
                log.warning("%d handshakes unfinished: dropped the oldest to serve %s", self.max_handshakes, addr[0])
                with contextlib.suppress(OSError):
                    oldest.shutdown(socket.SHUT_RDWR)
            threading.Thread(target=self._connection, args=(conn, str(addr[0])), daemon=True,
                             name="vta-rpc-session").start()

    def _connection(self, sock: socket.socket, peer: str) -> None:
        session = None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            ch = Channel(sock, self.read_timeout)
            session = self._handshake(ch, peer)
        except OSError as e:   # protocol errors, timeouts, a vanished client, a wrong key
            log.warning("handshake with %s failed: %s", peer, e)
        except Exception:   # the device did not come up, or a bug: the server stays up
            log.exception("handshake with %s", peer)
        finally:
            with self._lock:
                self._pending.pop(sock, None)
        try:
            if session is not None:
                self._active = sock
                self._serve(ch, session)
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def _refuse(self, ch: Channel, message: str, kind: str) -> None:
        with contextlib.suppress(OSError, ProtocolError):
            ch.send({"ok": False, "error": message, "kind": kind})

    def _handshake(self, ch: Channel, peer: str) -> _Session | None:
        deadline = time.monotonic() + self.handshake_timeout
        first = bytes(recv_exact(ch.sock, 4, deadline, "the first message"))
        if first == TVM_RPC_MAGIC_BYTES:   # a TVM RPC client: answer as a TVM server with a key it does not expect
            ch.sock.sendall(TVM_RPC_CODE_MISMATCH)
            raise ProtocolError("a TVM RPC client (this board speaks vta-stack's session protocol)")
        prefix = first + bytes(recv_exact(ch.sock, PREFIX.size - 4, deadline, "the hello"))
        ch.read_timeout = max(0.1, deadline - time.monotonic())
        try:
            hello, _, _ = ch.recv(None, 0, prefix=prefix)
        except VersionError as e:
            self._refuse(ch, str(e), "version")
            raise
        if hello.get("op") != "hello":
            raise ProtocolError("the first message must be hello")
        client_nonce = nonce_of(hello, "client_nonce")
        matchkey = hello.get("matchkey")
        if matchkey is not None and (not isinstance(matchkey, str) or len(matchkey) > 256):
            raise ProtocolError("matchkey must be a string or null")
        client = str(hello.get("client", ""))[:80]
        try:
            return self._authenticate(ch, peer, client_nonce, matchkey, client, deadline)
        except BaseException:
            self._decline(matchkey)
            raise

    def _decline(self, matchkey: str | None) -> None:
        """The holder of this board's current match left in the handshake: the board offers itself again now, not
        after ``unmatch_timeout``. On a keyed board (a wrong proof, or gone after the challenge) the match is
        reported unused to the tracker, which serves its taker last; a keyless board does not report it, since
        the client that leaves one is a keyed client rightly refusing to trust it."""
        with self._lock:
            if self._busy or self._matchkey is None or not proof_matches(matchkey, self._matchkey):
                return
            self._declined = self._matchkey if self.secret is not None else None
            self._matchkey = None
        self._changed.set()

    def _authenticate(self, ch: Channel, peer: str, client_nonce: bytes, matchkey: str | None, client: str,
                      deadline: float) -> _Session | None:
        """The handshake after the hello: challenge, the client's proof, the claim, ready."""
        server_nonce = new_nonce()
        challenge = {"op": "challenge", "ok": True, "server_nonce": server_nonce.hex(),
                     "auth": AUTH_HMAC if self.secret else "none",
                     "server_proof": proof(self.secret, "server", client_nonce, server_nonce, matchkey)
                     if self.secret else None}
        ch.send(challenge)
        auth, _, _ = ch.recv(max(0.1, deadline - time.monotonic()), 0)
        if auth.get("op") != "auth":
            raise ProtocolError("the second message must be auth")
        client = str(auth.get("client") or client)[:80]   # sent after the board's proof (in hello by older clients)
        if self.secret is not None:
            if not proof_matches(auth.get("proof"), proof(self.secret, "client", server_nonce, client_nonce,
                                                          matchkey)):
                self._refuse(ch, "authentication failed: the client's proof is wrong (it does not hold this "
                                 "board's key)", "auth")
                raise AuthError(f"{peer} failed authentication (wrong key)")
            ch.secure(*reversed(session_keys(self.secret, client_nonce, server_nonce, matchkey)))
        # Only now, authenticated, does the client take the board: a client that walks away (or stalls) in the
        # handshake never held it, so the next one is not told "busy" while this thread notices it left.
        refusal = self._claim(matchkey)
        if refusal is not None:
            self._refuse(ch, *refusal)
            log.info("refused %s: %s", peer, refusal[1])
            return None
        try:
            ch.read_timeout = self.read_timeout
            session = _Session(self, self.device_factory(), peer)
            ch.send({"op": "ready", "ok": True, **self.board_info()})
        except BaseException:
            self._end_session(None)
            raise
        log.info("session from %s (%s) started", peer, client or "client")
        return session

    def _claim(self, matchkey: str | None) -> tuple[str, str] | None:
        """Take the board for an authenticated client: None, or why not as (message, kind)."""
        with self._lock:
            if self._busy:
                return f"board {self.name} is serving another session", "busy"
            if self.tracker_addr is not None and not proof_matches(matchkey, self._matchkey or "\0"):
                stale = (f"board {self.name} does not expect this match key (it registered again, or the "
                         "tracker gave it to another client): request a board again")
                return stale, "mismatch"
            self._busy = True
            self._matchkey = None    # consumed: a new one is registered when this session ends
            self.session_active.set()
        return None

    def _serve(self, ch: Channel, session: _Session) -> None:
        reason = "closed by the client"
        ended = False
        try:
            while not self._stop.is_set():
                try:
                    header, payload, refusal = ch.recv(self.session_timeout, self.limits.max_payload, session.accept)
                except TimeoutError as e:
                    idle = str(e).startswith("timed out reading a message (")
                    reason = f"idle for {self.session_timeout:g} s" if idle else f"stalled mid-message: {e}"
                    break
                except ConnectionError:
                    reason = "the client vanished"
                    break
                op = header["op"]
                if refusal is not None:
                    ch.send({"op": op, "ok": False, "error": refusal, "kind": "request"})
                    continue
                try:
                    reply, out = session.handle(header, payload)
                except RequestError as e:
                    ch.send({"op": op, "ok": False, "error": str(e), "kind": e.kind})
                    continue
                except ProtocolError:
                    raise
                except _DEVICE_ERRORS as e:
                    ch.send({"op": op, "ok": False, "error": str(e) or type(e).__name__, "kind": type(e).__name__})
                    continue
                if op == "close":   # the board is free before the client hears so: it may come back at once
                    ended = True
                    self._end_session(session)
                ch.send({"op": op, "ok": True, **reply}, out)
                if op == "close":
                    break
        except (ProtocolError, OSError) as e:
            reason = f"dropped: {e}"
            self._refuse(ch, str(e), "protocol")
        except Exception as e:   # a bug: end the session cleanly, keep the server up
            reason = f"internal error: {type(e).__name__}: {e}"
            log.exception("session from %s", session.peer)
            self._refuse(ch, reason, "internal")
        finally:
            if not ended:
                self._end_session(session)
            log.info("session from %s ended (%s): %d run(s); buffers freed", session.peer, reason, session.runs)

    def _end_session(self, session: _Session | None) -> None:
        if session is not None:
            session.free_all()
        with self._lock:
            self._busy = False
            self.sessions += 1
            self.session_active.clear()
        self._changed.set()

    # ---- the tracker ----
    def _tracker_loop(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            client = None
            try:
                client = TrackerClient(self.tracker_addr, timeout=10.0)
                client.update_info({"key": f"server:{self.key}", "addr": [self.custom_addr, self.port],
                                    "board": self.name, "device": self.device_kind})
                log.info("registered with the tracker at %s:%d as %r", *self.tracker_addr, self.key)
                backoff = 0.5
                self._registered_loop(client)
            except (OSError, ProtocolError, TimeoutError) as e:
                if self._stop.is_set():
                    break
                log.warning("tracker %s:%d: %s; retrying in %.1f s", *self.tracker_addr, e, backoff)
            finally:
                self.registered.clear()
                with self._lock:
                    self._matchkey = None if not self._busy else self._matchkey
                if client is not None:
                    client.close()
            self._stop.wait(backoff)
            backoff = min(5.0, backoff * 2)

    def _registered_loop(self, client: TrackerClient) -> None:
        unmatched = 0
        offered = None
        unused = None
        while not self._stop.is_set():
            with self._lock:
                busy, current = self._busy, self._matchkey
                if not busy and current is None:
                    current = self._matchkey = f"{self.key}:{secrets.token_hex(16)}"
            if not busy and current != offered:
                if unused is not None:   # tell the tracker who took a match and never used it (ours penalises)
                    client.update_info({UNUSED_MATCH: unused})
                    unused = None
                client.put(self.key, self.port, current, self.custom_addr)
                offered, unmatched = current, 0
                self.registered.set()
            self._changed.wait(self.ping_period)
            self._changed.clear()
            with self._lock:
                busy, current = self._busy, self._matchkey
                if self._declined is not None:
                    unused = self._declined if self._declined == offered else unused
                    self._declined = None
            if busy or current != offered:
                continue
            if current in client.pending_matchkeys():
                unmatched = 0
                continue
            unmatched += 1   # a request took this board but nobody came: offer it again under a new key
            if unmatched * self.ping_period > self.unmatch_timeout + self.ping_period:
                with self._lock:
                    if not self._busy and self._matchkey == offered:
                        log.info("match %s was taken but never used: registering again", offered.rsplit(':', 1)[0])
                        self._matchkey = None
                        unused = offered

