"""The board session protocol (ours): versioned JSON headers with raw byte payloads, bounded and authenticated.

A message is::

    prefix   16 bytes   b"VTAR", header length (uint32 LE), payload length (uint64 LE)
    header   JSON object, at most 64 KiB, always with "v": 1 (the protocol version)
    payload  raw bytes (buffer contents, an instruction stream, a trace), at most the receiver's limit
    tag      32 bytes, only once the session is authenticated: HMAC-SHA256 over a per-direction sequence
             number, the prefix, the header and the payload, with a key derived from the handshake

Both lengths are checked against the receiver's limits before anything is allocated (a frame claiming 4 GiB is
refused from its 16-byte prefix), every read has a deadline (the first byte of a message may wait for the
session's idle timeout; the rest must arrive within the read timeout, payloads at no less than 1 MiB/s), and
nothing is ever unpickled or evaluated: headers are JSON, payloads are bytes given to numpy as uint8.

Handshake (client C, server S; nonces are 16 random bytes, hex in JSON)::

    C -> S  {"op": "hello", "client_nonce": Nc, "matchkey": M|null, "client": name}
    S -> C  {"op": "challenge", "server_nonce": Ns, "auth": "hmac-sha256"|"none", "server_proof": Ps|null}
    C -> S  {"op": "auth", "proof": Pc|null}
    S -> C  {"op": "ready", "board": name, "device": kind, "config": {...}, "limits": {...}}

    Ps = HMAC(secret, "vta-rpc/1 server\\0" + Nc + Ns + M),  Pc = HMAC(secret, "vta-rpc/1 client\\0" + Ns + Nc + M)

so each side proves it holds the shared key without sending it, over fresh nonces (no replay), and compares
proofs and tags in constant time (``same_secret``, that is ``hmac.compare_digest``). From "ready" on, with a
key, every message carries its tag.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import socket
import struct
import time
from dataclasses import fields
from typing import Any

import numpy as np

from simulator.stats import MODULES, RunStats
from vta.rpc.base import AuthError, ProtocolError, loads_bounded, recv_exact, skip_exact

PROTOCOL_VERSION = 1
MAGIC = b"VTAR"
PREFIX = struct.Struct("<4sIQ")
MAX_HEADER = 64 << 10
TAG_BYTES = 32
NONCE_BYTES = 16
MIN_RATE = 1 << 20          # bytes per second a payload must at least arrive at
AUTH_HMAC = "hmac-sha256"
TVM_RPC_MAGIC_BYTES = struct.pack("<i", 0xFF271)   # a TVM RPC client knocking at a board server


class VersionError(ProtocolError):
    """The peer speaks another version of this protocol."""


class Channel:
    """One connection's framing: send/receive messages, bounded, with deadlines and (after the handshake)
    per-message authentication tags."""

    def __init__(self, sock: socket.socket, read_timeout: float = 30.0):
        self.sock = sock
        self.read_timeout = read_timeout
        self._send_key: bytes | None = None
        self._recv_key: bytes | None = None
        self._send_seq = 0
        self._recv_seq = 0

    def secure(self, send_key: bytes, recv_key: bytes) -> None:
        """From now on every message carries (and must carry) an authentication tag."""
        self._send_key, self._recv_key = send_key, recv_key

    def send(self, header: dict[str, Any], payload: bytes | bytearray | memoryview | np.ndarray = b"") -> None:
        head = json.dumps({"v": PROTOCOL_VERSION, **header}, separators=(",", ":")).encode("utf-8")
        if len(head) > MAX_HEADER:
            raise ProtocolError(f"header of {len(head)} bytes: the limit is {MAX_HEADER}")
        if isinstance(payload, np.ndarray):
            payload = np.ascontiguousarray(payload).reshape(-1).view(np.uint8)
        data = memoryview(payload).cast("B")
        prefix = PREFIX.pack(MAGIC, len(head), data.nbytes)
        tag = b""
        if self._send_key is not None:
            mac = hmac.new(self._send_key, self._send_seq.to_bytes(8, "little") + prefix + head, hashlib.sha256)
            mac.update(data)
            tag = mac.digest()
            self._send_seq += 1
        self.sock.settimeout(self.read_timeout + data.nbytes / MIN_RATE)
        if data.nbytes <= 1 << 16:
            self.sock.sendall(b"".join((prefix, head, data, tag)))
        else:
            self.sock.sendall(prefix + head)
            self.sock.sendall(data)
            if tag:
                self.sock.sendall(tag)

    def recv(self, first_timeout: float | None, max_payload: int, accept=None,
             prefix: bytes | None = None) -> tuple[dict[str, Any], bytearray | None, str | None]:
        """The next message: (header, payload, refusal). ``accept(header, payload_len)`` (optional) checks the
        header before the payload is read: it returns None to take the payload, or a reason to refuse it
        (the payload is then read in small pieces and dropped, and ``payload`` is None), or raises
        ProtocolError. ``first_timeout`` bounds the wait for the message's first byte (None: no bound)."""
        now = time.monotonic()
        if prefix is None:
            first = recv_exact(self.sock, 1, now + first_timeout if first_timeout is not None else float("inf"),
                               "a message")
            prefix = bytes(first) + bytes(recv_exact(self.sock, PREFIX.size - 1, time.monotonic() + self.read_timeout,
                                                     "a message prefix"))
        magic, hlen, plen = PREFIX.unpack(prefix)
        if magic != MAGIC:
            raise ProtocolError(f"bad magic {magic!r}: not a vta-stack RPC peer")
        if not 0 < hlen <= MAX_HEADER:
            raise ProtocolError(f"header of {hlen} bytes refused (allowed 1..{MAX_HEADER})")
        if plen > max_payload:
            raise ProtocolError(f"payload of {plen} bytes refused (limit {max_payload})")
        head = recv_exact(self.sock, hlen, time.monotonic() + self.read_timeout, "a message header")
        try:
            header = loads_bounded(head)
        except ValueError as e:
            raise ProtocolError(f"message header is not JSON: {str(e)[:100]}") from None
        if not isinstance(header, dict):
            raise ProtocolError("message header is not a JSON object")
        if header.get("v") != PROTOCOL_VERSION:
            raise VersionError(f"protocol version {str(header.get('v'))[:20]}: this side speaks version "
                               f"{PROTOCOL_VERSION}")
        mac = None
        if self._recv_key is not None:
            mac = hmac.new(self._recv_key, self._recv_seq.to_bytes(8, "little") + prefix + bytes(head), hashlib.sha256)
        refusal = accept(header, plen) if accept is not None else None
        deadline = time.monotonic() + self.read_timeout + plen / MIN_RATE
        payload: bytearray | None = None
        if refusal is None:
            payload = recv_exact(self.sock, plen, deadline, "a payload") if plen else bytearray()
            if mac is not None:
                mac.update(payload)
        else:
            skip_exact(self.sock, plen, deadline, "a refused payload", None if mac is None else mac.update)
        if mac is not None:
            tag = recv_exact(self.sock, TAG_BYTES, time.monotonic() + self.read_timeout, "a message tag")
            if not same_secret(bytes(tag), mac.digest()):
                raise AuthError("a message failed authentication (altered, replayed or not from the peer)")
            self._recv_seq += 1
        return header, payload, refusal


# ------------------------------------------------------------------------------------------------------------
# authentication

def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def nonce_of(header: dict[str, Any], name: str) -> bytes:
    value = header.get(name)
    if not isinstance(value, str) or len(value) != 2 * NONCE_BYTES:
        raise ProtocolError(f"{name} must be {NONCE_BYTES} bytes in hex")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise ProtocolError(f"{name} is not hex") from None


def proof(secret: bytes, role: str, first: bytes, second: bytes, matchkey: str | None) -> str:
    message = f"vta-rpc/{PROTOCOL_VERSION} {role}\0".encode() + first + second + (matchkey or "").encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def same_secret(given: bytes, expected: bytes) -> bool:
    """Whether a received secret value (a proof, a tag, a match key) equals the expected one, in a time that
    does not depend on where they differ (``hmac.compare_digest``): every secret comparison of this protocol
    goes through here, so that none leaks how much of a forgery was right."""
    return hmac.compare_digest(given, expected)


def proof_matches(given: Any, expected: str) -> bool:
    """Constant-time comparison of a received proof (any JSON value) with the expected one: False, never an
    exception, for a value that is not an ASCII string."""
    return isinstance(given, str) and given.isascii() and same_secret(given.encode(), expected.encode())


def session_keys(secret: bytes, client_nonce: bytes, server_nonce: bytes, matchkey: str | None) -> tuple[bytes, bytes]:
    """(client->server key, server->client key) for the per-message tags."""
    base = client_nonce + server_nonce + (matchkey or "").encode()
    return (hmac.new(secret, b"vta-rpc/1 c2s\0" + base, hashlib.sha256).digest(),
            hmac.new(secret, b"vta-rpc/1 s2c\0" + base, hashlib.sha256).digest())


# ------------------------------------------------------------------------------------------------------------
# run statistics and traces on the wire

_STAT_FIELDS = {f.name for f in fields(RunStats)} - {"trace"}


def stats_to_wire(stats: RunStats) -> dict[str, Any]:
    return stats.to_dict()


def stats_from_wire(data: Any) -> RunStats:
    """RunStats from a board's reply, every field type-checked (a board's answer is input too)."""
    if not isinstance(data, dict):
        raise ProtocolError("run stats must be a JSON object")
    values = {k: data[k] for k in _STAT_FIELDS if k in data}
    default = RunStats()
    for k, v in values.items():
        if not _same_kind(v, getattr(default, k)):
            raise ProtocolError(f"run stats field {k!r} has the wrong type")
    return RunStats(**values)


def _same_kind(value: Any, like: Any) -> bool:
    """``value`` has the JSON shape of ``like`` (a RunStats default): ints, numbers, dicts of those."""
    if isinstance(like, bool) or isinstance(value, bool):
        return type(value) is type(like)
    if isinstance(like, int):
        return isinstance(value, int)
    if isinstance(like, float):
        return isinstance(value, (int, float))
    if isinstance(like, dict):
        sample = next(iter(like.values()), 0)
        return isinstance(value, dict) and len(value) <= 64 and all(isinstance(k, str) and _same_kind(v, sample)
                                                                    for k, v in value.items())
    return False


def trace_to_wire(trace: list[tuple[str, int, int]] | None) -> np.ndarray:
    if not trace:
        return np.zeros((0, 3), np.int64)
    index = {m: i for i, m in enumerate(MODULES)}
    return np.array([(index[m], s, e) for m, s, e in trace], dtype=np.int64)


def trace_from_wire(payload: bytes | bytearray, count: int) -> list[tuple[str, int, int]]:
    if len(payload) != count * 24:
        raise ProtocolError(f"trace payload of {len(payload)} bytes for {count} instructions")
    rows = np.frombuffer(payload, dtype="<i8").reshape(-1, 3)
    if rows.size and (rows[:, 0].min() < 0 or rows[:, 0].max() >= len(MODULES)):
        raise ProtocolError("trace names an unknown module")
    return [(MODULES[int(m)], int(s), int(e)) for m, s, e in rows]
