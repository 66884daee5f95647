"""What the tracker, the board server and their clients share: TVM's tracker constants, addresses, the
shared-key file, bounded socket reads, and the errors.

The tracker constants are TVM's (``python/tvm/rpc/base.py``): they are the wire protocol that TVM's own
tracker, servers and ``query_rpc_tracker`` speak, so they must not change.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import socket
import struct
import time
from enum import IntEnum
from pathlib import Path
from typing import Any

# TVM's magic numbers, sent as little-endian int32.
TRACKER_MAGIC = 0x2F271          # RPC_TRACKER_MAGIC: the first 4 bytes each way on a tracker connection
RPC_MAGIC = 0xFF271              # RPC_MAGIC: what a TVM RPC client sends first to a server
RPC_CODE_MISMATCH = RPC_MAGIC + 2  # a TVM server's answer to a client whose key it does not expect

DEFAULT_TRACKER_PORT = 9190      # TVM's defaults
DEFAULT_SERVER_PORT = 9091
SERVER_PORT_END = 9199

MAX_TRACKER_FRAME = 1 << 20      # TVM's MAX_TRACKER_MSG_BYTES: the most we read from a tracker
MAX_TRACKER_REQUEST = 64 << 10   # the most our tracker reads from a client (PUT, REQUEST, ... are < 1 KiB)
MAX_SUMMARY_FRAME = 16 << 20     # a summary reply from a tracker serving many boards
MAX_KEY_CHARS = 128              # a device key ("pynq")
MAX_MATCHKEY_CHARS = 256
MAX_JSON_DEPTH = 32              # nesting of any JSON a peer sends (real messages nest 4 deep at most)
SECRET_MIN_BYTES = 16
SECRET_MAX_BYTES = 4096
KEY_FILE_ENV = "VTA_RPC_KEY_FILE"
# ``extra`` of a log record the command line also says in its own words (a server's "listening on" line, on stdout,
# where scripts read the port): `vta rpc tracker|server` leave such records out of their log, which printed them twice
ANNOUNCED = {"announced": True}


class TrackerCode(IntEnum):
    """TVM's ``TrackerCode``: the first element of every tracker request."""

    FAIL = -1
    SUCCESS = 0
    PING = 1
    STOP = 2
    PUT = 3
    REQUEST = 4
    UPDATE_INFO = 5
    SUMMARY = 6
    GET_PENDING_MATCHKEYS = 7


# ------------------------------------------------------------------------------------------------------------
# errors

class RPCError(OSError):
    """Something went wrong between this process and a tracker or a board."""


class ProtocolError(RPCError):
    """A peer broke the protocol (bad magic, a frame over its limit, malformed JSON, a message of the wrong
    shape, an unknown version): the connection is dropped."""


class BoardLost(RPCError):
    """The connection to a board broke, or the board did not answer in time: the session is gone (its
    buffers are freed by the server)."""


class AuthError(RPCError):
    """Authentication failed or was refused (wrong key, missing key, a server that would not prove it knows
    the key)."""


class RemoteError(RPCError):
    """The board refused or failed a request; the session goes on. ``kind`` says what kind of refusal."""

    def __init__(self, message: str, kind: str = "error"):
        super().__init__(message)
        self.kind = kind

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class BoardFailure(RemoteError):
    """The board itself failed a request (it hung, or its hardware could not be reached); the session is
    still open, but a measurement should go to another board."""


class BoardBusy(RemoteError):
    """The board is serving another session."""


class MatchMismatch(RemoteError):
    """The board does not expect this match key (it was re-registered at the tracker, or given to someone else)."""


# ------------------------------------------------------------------------------------------------------------
# addresses and keys

def parse_addr(text: str, default_port: int = DEFAULT_TRACKER_PORT) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9190`` for IPv6, ``HOST`` alone for the default port) as (host, port)."""
    text = str(text).strip()
    if not text:
        raise ValueError("empty address: expected HOST:PORT, e.g. 127.0.0.1:9190")
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"address {text!r}: expected [IPV6]:PORT")
        port_text = rest[1:] if rest else ""
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    if not host:
        raise ValueError(f"address {text!r}: no host; expected HOST:PORT, e.g. 127.0.0.1:9190")
    if not port_text:
        return host, default_port
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"address {text!r}: port {port_text!r} is not an integer") from None
    if not 0 < port < 65536:
        raise ValueError(f"address {text!r}: port {port} is out of range 1..65535")
    return host, port


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_key(key: str, what: str = "device key") -> str:
    """A device key as TVM uses it (``pynq``): it names a queue and prefixes match keys ``KEY:RANDOM``."""
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS or ":" in key or \
            any(c.isspace() or not c.isprintable() for c in key):
        raise ValueError(f"{what} {key!r}: need 1..{MAX_KEY_CHARS} printable characters without ':' or spaces "
                         "(e.g. pynq)")
    return key


def load_secret(path: str | os.PathLike) -> bytes:
    """The shared secret in a key file (surrounding whitespace ignored): at least 16 bytes. ``vta rpc keygen``
    writes one."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as e:
        raise FileNotFoundError(f"key file {p}: {e.strerror or e}") from None
    if not p.is_file():
        raise ValueError(f"key file {p}: not a regular file")
    if st.st_size > SECRET_MAX_BYTES:
        raise ValueError(f"key file {p}: {st.st_size} bytes; a key file holds at most {SECRET_MAX_BYTES}")
    secret = p.read_bytes().strip()
    if len(secret) < SECRET_MIN_BYTES:
        raise ValueError(f"key file {p}: {len(secret)} bytes of key; need at least {SECRET_MIN_BYTES} "
                         "(make one with `vta rpc keygen FILE`)")
    return secret


def secret_from(key_file: str | os.PathLike | None, env: bool = True) -> bytes | None:
    """The secret of ``key_file``, else (for clients, ``env=True``) of ``$VTA_RPC_KEY_FILE``, else None."""
    if key_file is None and env:
        key_file = os.environ.get(KEY_FILE_ENV) or None
    return None if key_file is None else load_secret(key_file)


# ------------------------------------------------------------------------------------------------------------
# bounded blocking reads

def recv_exact(sock: socket.socket, n: int, deadline: float, what: str = "data") -> bytearray:
    """Exactly ``n`` bytes, or TimeoutError at ``deadline`` (time.monotonic()), ConnectionError at EOF.
    The caller has checked ``n`` against its limit: this allocates it."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"timed out reading {what} ({got} of {n} bytes arrived)")
        sock.settimeout(None if remaining == float("inf") else remaining)
        try:
            k = sock.recv_into(view[got:], min(n - got, 1 << 20))
        except TimeoutError:
            raise TimeoutError(f"timed out reading {what} ({got} of {n} bytes arrived)") from None
        if k == 0:
            raise ConnectionError(f"connection closed while reading {what} ({got} of {n} bytes arrived)")
        got += k
    return buf


def skip_exact(sock: socket.socket, n: int, deadline: float, what: str = "data", on_data=None) -> None:
    """Read and discard ``n`` bytes in bounded pieces (``on_data(chunk)`` sees each)."""
    left = n
    while left:
        chunk = recv_exact(sock, min(left, 1 << 16), deadline, what)
        if on_data is not None:
            on_data(chunk)
        left -= len(chunk)


# ------------------------------------------------------------------------------------------------------------
# TVM's tracker framing (client side): [int32 size][JSON]

def tracker_frame(value) -> bytes:
    data = json.dumps(value).encode("utf-8")
    return struct.pack("<i", len(data)) + data


def recv_tracker_json(sock: socket.socket, deadline: float, max_bytes: int = MAX_TRACKER_FRAME):
    """One tracker frame, bounded by ``max_bytes`` (checked before the body is read) and by ``deadline``."""
    size = struct.unpack("<i", recv_exact(sock, 4, deadline, "a tracker frame's size"))[0]
    if size <= 0 or size > max_bytes:
        raise ProtocolError(f"tracker frame of {size} bytes refused (allowed 1..{max_bytes})")
    body = recv_exact(sock, size, deadline, "a tracker frame")
    try:
        return loads_bounded(body)
    except ValueError as e:
        raise ProtocolError(f"tracker frame is not JSON: {str(e)[:100]}") from None


# ------------------------------------------------------------------------------------------------------------
# JSON from the network: bounded nesting

# strings (skipped) and brackets. The closing quote is optional, so that an unterminated string is one match to
# the end: with it required, each of n escaped quotes started a scan to the end that failed (quadratic: a 64 KiB
# frame held the event loop, and the GIL, for ~30 s). No alternative backtracks once the loop stops, so the scan
# is linear; what a text without the quote means is for json.loads to refuse.
_JSON_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.DOTALL)


def json_depth(data: bytes | bytearray) -> int:
    """How deeply the arrays and objects of a JSON text nest (brackets inside strings do not count)."""
    depth = peak = 0
    for m in _JSON_TOKENS.finditer(data):
        c = m.group()
        if c in (b"[", b"{"):
            depth += 1
            peak = max(peak, depth)
        elif c in (b"]", b"}"):
            depth -= 1
    return peak


def loads_bounded(data: bytes | bytearray, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON from a peer: UTF-8, no NaN/Infinity, arrays and objects nested at most ``max_depth`` deep, checked
    before parsing, so that nothing deeper than Python's own recursion limit can be parsed and kept (it could
    then never be serialised again); ``ValueError`` otherwise."""
    depth = json_depth(data)
    if depth > max_depth:
        raise ValueError(f"JSON nested {depth} deep; at most {max_depth} is accepted")
    try:
        return json.loads(bytes(data).decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, RecursionError) as e:
        raise ValueError(str(e)) from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")
