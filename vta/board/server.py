"""A simulated PYNQ board: pynq's remote-device gRPC protocol, backed by the C simulator.

``vta board serve --simulated`` runs this. With ``PYNQ_REMOTE_DEVICES=<host>`` the unmodified ``pynq``
package (>= 3.1; its client is ``pynq.pl_server.remote_device``) drives it as it would a board running
PYNQ's remote server:

- ``buffer.RemoteBuffer``: ``allocate`` maps a region of the simulator's DRAM (its physical address is the
  simulator's address), ``write``/``read`` stream its bytes, ``flush``/``invalidate`` are accepted (the
  simulated DRAM is the only copy), ``freebuffer`` unmaps it.
- ``mmio.Mmio``: ``get_mmio`` maps one of VTA's four register blocks at ``cfg.mmio_address(...)``;
  ``read``/``write`` go to ``vta.board.registers.SimulatedVTA`` (HLS control bits, ``done``, runs).
- ``remote_device.RemoteDevice``: files (``/proc/version``, the board name, the FPGA manager's files,
  ``/lib/firmware/``), ``set_bitstream_attrs`` and the FPGA manager write that programs the PL. Only the
  config's bitstream (``<cfg.bitstream>.bit``, sent by pynq as ``.bin`` firmware) is accepted. Firmware files
  and the FPGA manager's flags are each client's own (``_Files``), and write-only: no client sees, replaces or
  programs another's.

Who a client is: reading ``/proc/vta-sim/session`` issues a secret session token, and calls carrying it as gRPC
metadata ``vta-session`` (PynqDevice sends it on every call) are that session's on any connection; a call without
one is its connection's (``ConnectionIds``: the server's socket, never the peer's address or port), so a new
connection from a departed client's address and port is a new client. Buffers, registers, launches and files
belong to that client.

The file ``/proc/vta-sim/status`` (readable through the same protocol, or ``vta board status``) holds the
board's accounting as JSON, as the reading client may see it: its own buffers and bytes, the others' only as
totals, reclaimed bytes, runs, faults, its own last run (with the *simulated* latency) and fault.

Limits, checked before any work: total buffer bytes (the board's memory, ``cfg.BOARD_MEM_MB``), the number
of buffers, gRPC message sizes, firmware file sizes, concurrent RPCs. A client that disappears leaves its
buffers behind (gRPC has no disconnect hook); when an allocation does not fit (the memory or the number of
buffers), buffers of clients idle for longer than the lease are reclaimed first. Every request is validated: a malformed one gets an error
status, never a crash. Unlike a real board, the clients are isolated from each other (``ISOLATION``; see
``vta.board.registers``): a launch that would fetch, load or store outside the launching client's own buffers
is refused, and a faulted run hangs the accelerator for its own client only.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import logging
import os
import re
import secrets
import signal
import socket
import stat
import threading
import time
import urllib.parse
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

from hw_config import HwConfig
from simulator.core import Simulator
from simulator.dram import PAGE_BYTES
from simulator.errors import SimulatorError
from vta.board.bitstream import SYNC_WORD, check_board_config
from vta.board.pynq_support import import_remote
from vta.board.registers import RegisterError, SimulatedVTA

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7967   # pynq.pl_server.remote_device.PYNQ_PORT: the port pynq's client always uses
MiB = 1 << 20
STATUS_FILE = "/proc/vta-sim/status"
SESSION_FILE = "/proc/vta-sim/session"   # reading it issues a new session token (a new client)
SESSION_HEADER = "vta-session"           # the gRPC metadata key that carries a client's session token
FIRMWARE_DIR = "/lib/firmware/"
FPGA_MANAGER = "/sys/class/fpga_manager/fpga0/"
CHUNK = 1 * MiB   # read streams: well under the client's default 4 MiB receive limit
SIMULATED_BOARD_PREFIX = "vta-simulated-"
MAX_PEERS = 4096   # clients remembered (last activity) before idle ones without buffers are forgotten
MAX_FIRMWARE_FILES = 16   # firmware files one client's namespace keeps (its oldest are forgotten past this)
ISOLATION = ("clients are isolated (a real PYNQ board does not do this): a launch whose instruction fetch or "
             "LOAD/STORE ranges leave the launching client's own buffers is refused, naming the instruction; a "
             "faulted run hangs the accelerator for its client only and is reset for the others; registers, "
             "launches, downloads and firmware files are each client's own; buffers, runs and faults are shown to "
             "their own client only; a client is its session token (or its connection), never its address")


@dataclass(frozen=True)
class ServerLimits:
    """What the server bounds; every value has a ``vta board serve`` flag."""

    mem_bytes: int                       # total buffer bytes (the board's DRAM for buffers)
    max_message_bytes: int = 4 * MiB     # one gRPC message (pynq sends 2 MiB chunks)
    max_file_bytes: int = 64 * MiB       # one uploaded firmware file (its bytes are not kept: see _Files)
    max_buffers: int = 65536
    lease_s: float = 600.0               # idle time after which a client's buffers may be reclaimed
    max_concurrent_rpcs: int = 64
    workers: int = 16
    max_upload_bytes: int = 128 * MiB    # bytes all uploads in progress (writefile, download) may hold at once
    client_timeout_s: float = 10.0       # an RPC waiting this long on its client (a message, a read) is cancelled
    max_peer_rpcs: int = 4               # RPCs one client connection may have in flight
    max_waiting: int = 8                 # RPCs waiting on their clients at once (each holds a worker thread)
    conn_idle_s: float = 600.0           # a connection with no RPC for this long is closed (gRPC's idle limit)
    keepalive_s: float = 60.0            # the server pings a connection silent for this long; no answer: closed


class Refused(Exception):
    """A request the board refuses: a gRPC status code name and a message for the client."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class _Uploads:
    """The memory that uploads in progress (firmware files, bitstreams) hold, bounded for all of them together:
    the chunk that would take the total past ``limit`` ends its stream with RESOURCE_EXHAUSTED."""

    def __init__(self, limit: int):
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()

    def receive(self, chunks: Iterator[bytes], what: str, max_bytes: int) -> bytearray:
        """Every chunk of one upload in one buffer (at most ``max_bytes``), its bytes counted while it lasts."""
        data = bytearray()
        try:
            for chunk in chunks:
                n = len(chunk)
                if len(data) + n > max_bytes:
                    raise Refused("RESOURCE_EXHAUSTED", f"{what}: more than {max_bytes // MiB} MiB (--max-file-mb)")
                with self._lock:
                    if self.held + n > self.limit:
                        raise Refused("RESOURCE_EXHAUSTED",
                                      f"{what}: uploads in progress hold {self.held / MiB:.1f} MiB, and this "
                                      f"{n}-byte chunk would take them past the board's {self.limit // MiB} MiB for "
                                      f"uploads (--max-upload-mb); send it again when the others are done")
                    self.held += n
                data += chunk
        finally:
            with self._lock:
                self.held -= len(data)
        return data


@dataclass
class _Files:
    """One client's own files: its firmware namespace (``/lib/firmware/``, name -> (bytes, a Xilinx bitstream?)),
    its FPGA manager flags and the firmware it last programmed, the bitstream named by its ``set_bitstream_attrs``.

    Firmware bytes are not kept: what programming needs of a file (that it is a bitstream: its sync word) is read
    as it is written, so a client's files cost the board no memory and no client can push another's out."""

    firmware: OrderedDict[str, tuple[int, bool]] = field(default_factory=OrderedDict)
    flags: str = "0"
    programmed: str = ""
    pending_bitstream: tuple[str, bool] | None = None


@dataclass
class _Buffer:
    id: str
    addr: int
    size: int
    footprint: int
    owner: str
    dtype: str


def _peer_address(peer: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int] | None:
    """gRPC's peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``, brackets maybe %-encoded) -> (address, port)."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host, _, port = urllib.parse.unquote(rest).rpartition(":")
    try:
        return _plain(ipaddress.ip_address(host.strip("[]").split("%")[0])), int(port)
    except ValueError:
        return None


def _plain(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An IPv4-mapped IPv6 address as the IPv4 address it is."""
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped if mapped is not None else address


def _is_connection(sock: socket.socket, remote: tuple, local_port: int | None) -> bool:
    """Whether ``sock`` is an established TCP connection from ``remote`` (address, port) to ``local_port``."""
    try:
        peer, local = sock.getpeername(), sock.getsockname()
    except (OSError, TypeError):   # not connected any more (reset, closed), or not an IP socket
        return False
    if not (isinstance(peer, tuple) and isinstance(local, tuple)):
        return False
    if local_port is not None and local[1] != local_port:
        return False
    try:
        if (_plain(ipaddress.ip_address(str(peer[0]).split("%")[0])), peer[1]) != remote:
            return False
    except ValueError:
        return False
    tcp_info = getattr(socket, "TCP_INFO", None)
    if tcp_info is not None:   # Linux: tcpi_state, the first byte, is TCP_ESTABLISHED (1) while it lives
        with contextlib.suppress(OSError):
            return sock.getsockopt(socket.IPPROTO_TCP, tcp_info, 8)[0] == 1
    return True


def _socket_is(fd: int, inode: int | None, remote: tuple, local_port: int | None) -> int | None:
    """The inode of the socket at ``fd`` if it is (still) the connection from ``remote`` (and, given, the inode
    remembered for it); None otherwise. Works on a duplicate of the descriptor: gRPC's own is never touched."""
    try:
        dup = os.dup(fd)
    except OSError:
        return None
    try:
        st = os.fstat(dup)
        if not stat.S_ISSOCK(st.st_mode) or (inode is not None and st.st_ino != inode):
            return None
        sock = socket.socket(fileno=dup)
        dup = -1   # the socket's to close now
        with sock:
            return st.st_ino if _is_connection(sock, remote, local_port) else None
    except OSError:
        return None
    finally:
        if dup >= 0:
            os.close(dup)


class ConnectionIds:
    """Who a call without a session token comes from: its TCP connection, the server's socket for it (found by
    the peer's address among this process's descriptors, then remembered by descriptor and inode), never the
    address or port alone. A connection that closes takes its identity with it: a new connection from the same
    address and port, even while the old socket's descriptor lingers, is another socket (another inode, or one
    that is no longer established), so it is a new client.

    Where the process's descriptors cannot be listed (``/proc/self/fd``, ``/dev/fd``), calls without a session
    token are refused (``client`` returns None)."""

    def __init__(self, port: int | None = None):
        self.port = port   # the server's port: only connections to it are ours
        self._lock = threading.Lock()
        self._known: OrderedDict[str, tuple[int, int, str]] = OrderedDict()   # peer -> (fd, inode, client id)
        self._fd_dir = next((d for d in ("/proc/self/fd", "/dev/fd") if os.path.isdir(d)), None)

    def client(self, peer: str) -> str | None:
        remote = _peer_address(peer)
        if remote is None or self._fd_dir is None:
            return None
        with self._lock:
            known = self._known.get(peer)
            if known is not None and _socket_is(known[0], known[1], remote, self.port) is not None:
                self._known.move_to_end(peer)
                return known[2]
            found = self._find(remote)
            if found is None:
                return None
            client = f"connection-{secrets.token_hex(6)}"
            self._known.pop(peer, None)
            self._known[peer] = (*found, client)
            while len(self._known) > MAX_PEERS:
                self._known.popitem(last=False)
            return client

    def _find(self, remote: tuple) -> tuple[int, int] | None:
        try:
            names = os.listdir(self._fd_dir)
        except OSError:
            return None
        for name in names:
            if name.isdigit():
                inode = _socket_is(int(name), None, remote, self.port)
                if inode is not None:
                    return int(name), inode
        return None


def _board_name(cfg: HwConfig) -> str:
    return f"{SIMULATED_BOARD_PREFIX}{cfg.TARGET}"


class SimulatedBoard:
    """Everything a board answers, independent of gRPC (thread safe)."""

    def __init__(self, cfg: HwConfig, limits: ServerLimits | None = None, *, time_scale: float = 1.0,
                 max_cycles: int | None = None, max_work: int | None = None, log: logging.Logger | None = None):
        check_board_config(cfg)
        self.cfg = cfg
        self.limits = limits or ServerLimits(mem_bytes=cfg.BOARD_MEM_MB * MiB)
        self.log = log or logging.getLogger("vta.board")
        kwargs = {k: v for k, v in (("max_cycles", max_cycles), ("max_work", max_work)) if v}
        # one GEMM thread: a run's wall time is the board model's, not the simulator's, and GEMM threads would
        # only compete with the server's RPC threads for the CPUs
        self.sim = Simulator(cfg, threads=1, **kwargs)
        self.sim_lock = threading.Lock()
        self.vta = SimulatedVTA(cfg, self.sim, sim_lock=self.sim_lock, time_scale=time_scale,
                                max_cycles=max_cycles, max_work=max_work, log=self.log, regions_of=self.regions_of)
        self._lock = threading.Lock()          # Python tables; taken after sim_lock when both are needed
        self.buffers: dict[str, _Buffer] = {}
        self.used = 0
        self.peers: dict[str, float] = {}        # client -> last activity (a client: a session or a connection)
        self.sessions: dict[bytes, str] = {}     # sha256(session token) -> client
        self.session_of: dict[str, bytes] = {}   # client -> sha256(its token)
        self.connections = ConnectionIds()       # clients without a session token: their connections
        self.files: OrderedDict[str, _Files] = OrderedDict()   # per client: its firmware and FPGA manager files
        self.uploads = _Uploads(self.limits.max_upload_bytes)
        self.on_close: list[Callable[[], None]] = []   # what else stops with the board (the server's RPC guard)
        self.totals = Counter()
        self.calls: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.started = time.time()

    # ---- bookkeeping ----
    def client_of(self, context) -> str:
        """Who a call comes from: the session its token names (gRPC metadata ``vta-session``, which PynqDevice
        sends), else the connection it came on; never the peer's address or port. A token the board does not
        know is refused: a client whose session ended gets a new one (a new client), it cannot claim an old one."""
        token = next((v for k, v in (context.invocation_metadata() or ()) if k == SESSION_HEADER), None)
        if token is not None:
            digest = hashlib.sha256(str(token).encode("utf-8", "replace")).digest()
            with self._lock:
                client = self.sessions.get(digest)
            if client is None:
                raise Refused("UNAUTHENTICATED", f"this board has no session of the token in {SESSION_HEADER!r} "
                                                 f"(it ended, or it never began): read {SESSION_FILE} for a new "
                                                 f"session, as a new client")
            return client
        client = self.connections.client(context.peer() or "")
        if client is None:
            raise Refused("UNAUTHENTICATED", f"cannot tell which client this call is from: send a session token "
                                             f"(read {SESSION_FILE}, then send it as gRPC metadata {SESSION_HEADER!r} "
                                             f"on every call, as PynqDevice does)")
        return client

    def new_session(self) -> bytes:
        """A new client: a fresh secret token, which its calls carry from now on."""
        token = secrets.token_hex(16)
        client = f"session-{secrets.token_hex(6)}"
        digest = hashlib.sha256(token.encode()).digest()
        with self._lock:
            self.sessions[digest] = client
            self.session_of[client] = digest
            self.peers[client] = time.monotonic()
            self._forget_idle()
        return token.encode()

    def touch(self, peer: str, method: str) -> None:
        with self._lock:
            self.peers[peer] = time.monotonic()
            self.calls[method] += 1
            self._forget_idle()

    def _forget_idle(self) -> None:
        """Past ``MAX_PEERS`` clients, forget the longest-idle ones that hold no buffers (their sessions end)."""
        if len(self.peers) > MAX_PEERS:
            holding = {b.owner for b in self.buffers.values()}
            for _, old in sorted((t, p) for p, t in self.peers.items() if p not in holding)[:MAX_PEERS // 4]:
                del self.peers[old]
                digest = self.session_of.pop(old, None)
                if digest is not None:
                    self.sessions.pop(digest, None)

    def refused(self, method: str) -> None:
        with self._lock:
            self.errors[method] += 1

    def _buffer(self, buffer_id: str) -> _Buffer:
        buf = self.buffers.get(buffer_id) if isinstance(buffer_id, str) else None
        if buf is None:
            raise Refused("NOT_FOUND", f"no buffer {buffer_id[:40]!r} on this board (freed, reclaimed, or never "
                                       f"allocated)")
        return buf

    # ---- buffers ----
    def allocate(self, size: int, dtype: str, peer: str) -> _Buffer:
        lim = self.limits
        if not 0 < size <= lim.mem_bytes:
            raise Refused("INVALID_ARGUMENT" if size <= 0 else "RESOURCE_EXHAUSTED",
                          f"allocate {size} bytes: need 1 .. {lim.mem_bytes} (the board has "
                          f"{lim.mem_bytes // MiB} MiB for buffers)")
        footprint = -(-size // PAGE_BYTES) * PAGE_BYTES
        with self.sim_lock, self._lock:
            if len(self.buffers) >= lim.max_buffers or self.used + footprint > lim.mem_bytes:
                self._reclaim(footprint, peer)
            if len(self.buffers) >= lim.max_buffers:
                raise Refused("RESOURCE_EXHAUSTED", f"the board holds {len(self.buffers)} buffers, the most it "
                                                    f"keeps (--max-buffers {lim.max_buffers}); free some")
            if self.used + footprint > lim.mem_bytes:
                mine = sum(b.footprint for b in self.buffers.values() if b.owner == peer)
                raise Refused("RESOURCE_EXHAUSTED",
                              f"allocate {size} bytes: the board has {lim.mem_bytes // MiB} MiB for buffers and "
                              f"{self.used} bytes are in use ({mine} by this client, {self.used - mine} by "
                              f"others); free buffers first")
            try:
                addr = self.sim.alloc(footprint)
            except SimulatorError as e:
                raise Refused("RESOURCE_EXHAUSTED", f"allocate {size} bytes: {e}") from None
            buf = _Buffer(secrets.token_hex(8), addr, size, footprint, peer, str(dtype)[:16])
            self.buffers[buf.id] = buf
            self.used += footprint
            self.totals["allocated"] += 1
        return buf

    def _reclaim(self, need: int, peer: str) -> None:
        """Free every buffer of clients idle past the lease, longest idle first, until ``need`` more bytes and one
        more buffer fit (``mem_bytes``, ``max_buffers``: vanished clients' buffers count against both).

        A client is reclaimed whole: a buffer without the rest of its program is of no use to anyone.
        """
        now = time.monotonic()
        owners = {b.owner for b in self.buffers.values() if b.owner != peer}
        idle = sorted((self.peers.get(o, 0.0), o) for o in owners if now - self.peers.get(o, 0.0) > self.limits.lease_s)
        for seen, owner in idle:
            if self.used + need <= self.limits.mem_bytes and len(self.buffers) < self.limits.max_buffers:
                break
            mine = [b for b in self.buffers.values() if b.owner == owner]
            for buf in mine:
                del self.buffers[buf.id]
                self.sim.free(buf.addr)
                self.used -= buf.footprint
                self.totals["reclaimed"] += 1
                self.totals["reclaimed_bytes"] += buf.footprint
            self.log.warning("reclaimed %d buffer(s), %d bytes, of %s: idle for %.0f s (lease %g s) and memory was "
                             "needed", len(mine), sum(b.footprint for b in mine), owner, now - seen,
                             self.limits.lease_s)

    def free(self, buffer_id: str) -> None:
        with self.sim_lock, self._lock:
            buf = self._buffer(buffer_id)
            del self.buffers[buf.id]
            self.used -= buf.footprint
            self.totals["freed"] += 1
            self.sim.free(buf.addr)

    def write(self, requests: Iterator, peer: str) -> None:
        """A buffer write stream: chunks in order from offset 0, or each at its own ``[start, end)``."""
        offset = 0
        buffer_id = None
        for req in requests:
            if buffer_id is None:
                buffer_id = req.buffer_id
            elif req.buffer_id != buffer_id:
                raise Refused("INVALID_ARGUMENT", "a write stream must name one buffer in every chunk")
            data = req.data
            start = offset
            if req.end or req.start:
                start = req.start
                if req.end - req.start != len(data) or req.start < 0:
                    raise Refused("INVALID_ARGUMENT", f"write chunk [start={req.start}, end={req.end}) does not "
                                                      f"match its {len(data)} data bytes")
            with self.sim_lock, self._lock:
                buf = self._buffer(buffer_id)
                if start + len(data) > buf.size:
                    raise Refused("OUT_OF_RANGE", f"write of {len(data)} bytes at offset {start} overruns the "
                                                  f"{buf.size}-byte buffer {buf.id}")
                if data:
                    self.sim.write(buf.addr + start, data)
            offset = start + len(data)
        if buffer_id is None:
            raise Refused("INVALID_ARGUMENT", "empty write stream")

    def read(self, buffer_id: str, start: int, end: int) -> Iterator[bytes]:
        with self._lock:
            buf = self._buffer(buffer_id)
        if not (start or end):
            start, end = 0, buf.size
        if not 0 <= start <= end <= buf.size:
            raise Refused("OUT_OF_RANGE", f"read [start={start}, end={end}) is outside the {buf.size}-byte buffer")
        for pos in range(start, end, CHUNK):
            n = min(CHUNK, end - pos)
            with self.sim_lock, self._lock:
                buf = self._buffer(buffer_id)
                data = self.sim.read(buf.addr + pos, n).tobytes()
            yield data

    def address(self, buffer_id: str) -> int:
        with self._lock:
            return self._buffer(buffer_id).addr

    def regions_of(self, peer: str) -> list[tuple[int, int]]:
        """(address, bytes) of every buffer ``peer`` holds: all that a program it launches may touch."""
        with self._lock:
            return [(b.addr, b.footprint) for b in self.buffers.values() if b.owner == peer]

    # ---- MMIO ----
    def get_mmio(self, base: int, length: int) -> str:
        where = self.vta.block_at(base, length) if length > 0 else None
        if where is None:
            blocks = ", ".join(f"{b} 0x{a:x}" for b, a in self.vta.bases.items())
            raise Refused("INVALID_ARGUMENT",
                          f"no device at [0x{base:x}, 0x{base + max(length, 0):x}) on this simulated board: VTA's "
                          f"register blocks are {blocks}, 0x{self.cfg.MMIO_RANGE:x} bytes each")
        block, offset = where
        return f"vta:{block}:{offset:x}:{length:x}"

    def _mmio(self, mmio_id: str, offset: int, nbytes: int) -> tuple[str, int]:
        m = re.fullmatch(r"vta:(fetch|load|compute|store):([0-9a-f]{1,8}):([0-9a-f]{1,8})", mmio_id or "")
        if m is None:
            raise Refused("NOT_FOUND", f"unknown MMIO handle {str(mmio_id)[:40]!r}; call get_mmio first")
        block, base, length = m.group(1), int(m.group(2), 16), int(m.group(3), 16)
        if offset < 0 or offset % 4 or offset + nbytes > length:
            raise Refused("OUT_OF_RANGE", f"MMIO access of {nbytes} bytes at offset 0x{offset:x}: need a multiple "
                                          f"of 4 inside the 0x{length:x}-byte mapping")
        return block, base + offset

    def mmio_read(self, mmio_id: str, offset: int, length: int, word_order: str, peer: str = "") -> int:
        if length not in (1, 2, 4, 8):
            raise Refused("INVALID_ARGUMENT", f"MMIO read of {length} bytes: allowed 1, 2, 4 or 8")
        block, off = self._mmio(mmio_id, offset, max(length, 4))
        try:
            if length == 8:
                lo, hi = self.vta.read(block, off, peer), self.vta.read(block, off + 4, peer)
                return (hi << 32 | lo) if word_order != "big" else (lo << 32 | hi)
            return self.vta.read(block, off, peer) & ((1 << (8 * length)) - 1)
        except RegisterError as e:
            raise Refused("FAILED_PRECONDITION", str(e)) from None

    def mmio_write(self, mmio_id: str, offset: int, data: bytes, peer: str) -> None:
        if not data or len(data) % 4 or len(data) > 64:
            raise Refused("INVALID_ARGUMENT", f"MMIO write of {len(data)} bytes: need 4 .. 64, a multiple of 4")
        block, off = self._mmio(mmio_id, offset, len(data))
        try:
            for i in range(0, len(data), 4):
                self.vta.write(block, off + i, int.from_bytes(data[i:i + 4], "little"), peer)
        except RegisterError as e:
            raise Refused("FAILED_PRECONDITION", str(e)) from None

    # ---- files and the FPGA manager ----
    def _virtual_files(self, peer: str | None = None) -> dict[str, Callable[[], bytes]]:
        arch = "aarch64" if self.cfg.TARGET in ("ultra96", "zcu104") else "armv7l"
        return {
            "/proc/version": lambda: (f"Linux version 6.6.10-xilinx (vta-stack simulated {self.cfg.TARGET} board) "
                                      f"#1 SMP PREEMPT {arch}\n").encode(),
            "/proc/device-tree/chosen/pynq_board": lambda: _board_name(self.cfg).encode() + b"\x00",
            FPGA_MANAGER + "state": lambda: b"operating\n",
            FPGA_MANAGER + "flags": lambda: self._files(peer).flags.encode() + b"\n",
            FPGA_MANAGER + "firmware": lambda: self._files(peer).programmed.encode() + b"\n",
            STATUS_FILE: lambda: json.dumps(self.status(peer), indent=1).encode(),
            SESSION_FILE: self.new_session,
        }

    def _files(self, peer: str | None) -> _Files:
        """``peer``'s files as they read (none for a client that never wrote one)."""
        return self.files.get(peer or "") or _Files()

    def _own_files(self, peer: str) -> _Files:
        """``peer``'s files, to write (lock held; the ``MAX_PEERS`` most recently written clients are kept)."""
        files = self.files.pop(peer, None) or _Files()
        self.files[peer] = files
        while len(self.files) > MAX_PEERS:
            self.files.popitem(last=False)
        return files

    def exists(self, path: str, peer: str | None = None) -> bool:
        """Whether ``path`` exists for ``peer``: a firmware file exists for the client that wrote it only."""
        if path in self._virtual_files():
            return True
        with self._lock:
            return path.startswith(FIRMWARE_DIR) and path[len(FIRMWARE_DIR):] in self._files(peer).firmware

    def read_file(self, path: str, peer: str | None = None) -> bytes | bytearray:
        files = self._virtual_files(peer)
        if path in files:
            return files[path]()
        with self._lock:
            if path.startswith(FIRMWARE_DIR) and path[len(FIRMWARE_DIR):] in self._files(peer).firmware:
                raise Refused("PERMISSION_DENIED", f"{path[:200]}: firmware files are write-only on the simulated "
                                                   f"board (it keeps whether a file is a bitstream, not its bytes)")
        raise Refused("NOT_FOUND", f"{str(path)[:200]}: no such file on the simulated board")

    def write_file(self, requests: Iterator, peer: str) -> None:
        path = None

        def chunks() -> Iterator[bytes]:
            nonlocal path
            for req in requests:
                if path is None:
                    path = req.file_path
                elif req.file_path != path:
                    raise Refused("INVALID_ARGUMENT", "a writefile stream must name one file in every chunk")
                yield req.data

        data = self.uploads.receive(chunks(), "writefile", self.limits.max_file_bytes)
        if path is None:
            raise Refused("INVALID_ARGUMENT", "empty writefile stream")
        self.put_file(str(path), data, peer)

    def put_file(self, path: str, data: bytes | bytearray, peer: str) -> None:
        if path.startswith(FIRMWARE_DIR):
            name = path[len(FIRMWARE_DIR):]
            if not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", name) or name in (".", ".."):
                raise Refused("INVALID_ARGUMENT", f"firmware name {name[:80]!r}: letters, digits, '.', '_', '-'")
            bitstream = SYNC_WORD in data or SYNC_WORD[::-1] in data
            with self._lock:
                firmware = self._own_files(peer).firmware   # this client's own namespace: nobody else reads it
                firmware.pop(name, None)
                firmware[name] = (len(data), bitstream)
                while len(firmware) > MAX_FIRMWARE_FILES:
                    firmware.popitem(last=False)
            return
        if path == FPGA_MANAGER + "flags":
            text = data.decode("ascii", "replace").strip()
            if text not in ("0", "1"):
                raise Refused("INVALID_ARGUMENT", f"fpga_manager flags {text[:20]!r}: 0 (full) or 1 (partial)")
            with self._lock:
                self._own_files(peer).flags = text
            return
        if path == FPGA_MANAGER + "firmware":
            self.program(data.decode("ascii", "replace").strip(), peer)
            return
        raise Refused("PERMISSION_DENIED", f"{path[:200]}: the simulated board accepts writes only to "
                                           f"{FIRMWARE_DIR} and {FPGA_MANAGER}{{flags,firmware}}")

    def expected_firmware(self) -> str:
        return f"{self.cfg.bitstream}.bin"

    def check_bitstream_name(self, name: str) -> None:
        if name != self.expected_firmware():
            raise Refused("FAILED_PRECONDITION",
                          f"this simulated board implements {self.cfg.model} (HW_VER {self.cfg.HW_VER}); it accepts "
                          f"only the bitstream {self.cfg.bitstream}.bit (firmware {self.expected_firmware()}), not "
                          f"{name[:120]!r}")

    def set_bitstream_attrs(self, name: str, partial: bool, peer: str = "") -> None:
        if partial:
            raise Refused("UNIMPLEMENTED", "partial reconfiguration is not supported by the simulated board")
        self.check_bitstream_name(name)
        with self._lock:
            self._own_files(peer).pending_bitstream = (name, partial)

    def program(self, name: str, peer: str) -> None:
        """The FPGA manager's firmware write: program the PL with a matching bitstream this client uploaded (its
        own firmware namespace and flags: another client's files are not seen)."""
        with self._lock:
            files = self._files(peer)
            flags, entry = files.flags, files.firmware.get(name)
        if flags != "0":
            raise Refused("UNIMPLEMENTED", "partial reconfiguration (fpga_manager flags 1) is not supported")
        self.check_bitstream_name(name)
        if entry is None:
            raise Refused("NOT_FOUND", f"firmware {name} was not uploaded to {FIRMWARE_DIR} by this client (each "
                                       f"client's firmware files are its own)")
        size, bitstream = entry
        if not bitstream:
            raise Refused("FAILED_PRECONDITION", f"firmware {name} is not a Xilinx bitstream (no sync word)")
        with self._lock:
            self._own_files(peer).programmed = name
            self.totals["programmed"] += 1
        self.vta.reset(name, peer)
        self.log.info("%s programmed %s (%d bytes): its VTA registers reset", peer or "a client", name, size)

    def download(self, data: bytes | bytearray, peer: str) -> None:
        """The protocol's ``download`` call: firmware bytes for the name given by ``set_bitstream_attrs``."""
        pending = self._files(peer).pending_bitstream
        name = pending[0] if pending else self.expected_firmware()
        self.put_file(FIRMWARE_DIR + name, data, peer)
        self.program(name, peer)

    # ---- status ----
    def status(self, peer: str | None = None) -> dict:
        """The board's accounting. With ``peer`` (a client reading the status file), as that client may see it:
        its own buffers, runs and faults; other clients only as totals, never their addresses or names."""
        with self._lock:
            now = time.monotonic()
            by_peer: dict[str, dict] = {}
            for b in self.buffers.values():
                p = by_peer.setdefault(b.owner, {"buffers": 0, "bytes": 0})
                p["buffers"] += 1
                p["bytes"] += b.footprint
            for owner, p in by_peer.items():
                p["idle_s"] = round(now - self.peers.get(owner, now), 3)
            others = {"clients": 0, "buffers": 0, "bytes": 0}
            if peer is not None:
                for owner in [o for o in by_peer if o != peer]:
                    p = by_peer.pop(owner)
                    others["clients"] += 1
                    others["buffers"] += p["buffers"]
                    others["bytes"] += p["bytes"]
            memory = {"limit_bytes": self.limits.mem_bytes, "used_bytes": self.used, "buffers": len(self.buffers),
                      "by_client": by_peer, "other_clients": others, "allocated_total": self.totals["allocated"],
                      "freed_total": self.totals["freed"], "reclaimed_total": self.totals["reclaimed"],
                      "reclaimed_bytes": self.totals["reclaimed_bytes"], "lease_s": self.limits.lease_s,
                      "simulator_regions": len(self.sim.regions())}
            rpc = {"calls": dict(self.calls), "errors": dict(self.errors)}
        return {"board": _board_name(self.cfg), "config": self.cfg.model, "hw_ver": self.cfg.HW_VER,
                "accepts_bitstream": f"{self.cfg.bitstream}.bit", "clock_mhz": self.cfg.CLOCK_MHZ,
                "uptime_s": round(time.time() - self.started, 3), "memory": memory,
                "accelerator": self.vta.status(peer), "rpc": rpc, "isolation": ISOLATION}

    def close(self) -> None:
        self.vta.close()
        for stop in self.on_close:
            stop()


# ------------------------------------------------------------------------------------------------------------
# gRPC

@dataclass(eq=False)
class _Call:
    """One RPC in flight: whose, and since when it waits on its client (None: it does not)."""

    peer: str
    method: str
    context: Any
    waiting_since: float | None = None
    cancelled: str | None = None      # why the server cancelled it


class RpcGuard:
    """What clients can hold of the server's worker threads, which gRPC's sync server gives one per RPC for as
    long as the RPC lasts, a client that stalls included.

    Every RPC (unary ones too: they are served as streams, so that reading their request is watched as well)
    is counted per client connection (``max_peer_rpcs``; more are refused at once). An RPC *waits on its
    client* while it reads a request message or while a response chunk waits for the client to take it; one
    that waits longer than ``client_timeout_s`` is cancelled. At most ``max_waiting`` RPCs wait on their clients
    at once: a new RPC then cancels the one that has waited longest, so that ``workers - max_waiting`` threads
    always serve clients that do not stall, and a stalled call cannot keep a new one out.
    """

    def __init__(self, limits: ServerLimits, log: logging.Logger):
        self.limits, self.log = limits, log
        self._lock = threading.Lock()
        self._calls: set[_Call] = set()
        self._per_peer: Counter[str] = Counter()
        self._stop = threading.Event()
        self.cancelled = 0
        self._thread = threading.Thread(target=self._watch, name="vta-board-rpc-watchdog", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def begin(self, context, method: str) -> _Call:
        peer = context.peer() or "unknown"
        lim = self.limits
        with self._lock:
            if self._per_peer[peer] >= lim.max_peer_rpcs:
                raise Refused("RESOURCE_EXHAUSTED", f"{method}: this connection has {lim.max_peer_rpcs} calls in "
                                                    f"flight, the most one client may have (--max-peer-rpcs)")
            waiting = [c for c in self._calls if c.waiting_since is not None and c.cancelled is None]
            if len(waiting) >= lim.max_waiting:   # the call that has waited longest on its client makes room
                oldest = min(waiting, key=lambda c: c.waiting_since)
                self._cancel(oldest, f"it waited {time.monotonic() - oldest.waiting_since:.1f} s on its client "
                                     f"while {lim.max_waiting} calls waited (--max-waiting) and another call came")
            call = _Call(peer, method, context)
            self._calls.add(call)
            self._per_peer[peer] += 1
        return call

    def end(self, call: _Call) -> None:
        with self._lock:
            if call in self._calls:
                self._calls.discard(call)
                self._per_peer[call.peer] -= 1
                if self._per_peer[call.peer] <= 0:
                    del self._per_peer[call.peer]

    def _cancel(self, call: _Call, reason: str) -> None:
        """Cancel an RPC (lock held): its client gets CANCELLED; a read it waits in ends."""
        call.cancelled = reason
        self.cancelled += 1
        self.log.warning("%s %s cancelled: %s", call.peer, call.method, reason)
        try:
            call.context.cancel()
        except Exception as e:  # noqa: BLE001 - a call that ended meanwhile
            self.log.debug("cancelling %s %s: %s", call.peer, call.method, e)

    def _watch(self) -> None:
        while not self._stop.wait(0.1):
            now = time.monotonic()
            with self._lock:
                for call in list(self._calls):
                    if call.cancelled is None and call.waiting_since is not None and \
                            now - call.waiting_since > self.limits.client_timeout_s:
                        self._cancel(call, f"it waited on its client for more than {self.limits.client_timeout_s:g} "
                                           f"s (--client-timeout-s)")

    def _waiting(self, call: _Call, waiting: bool) -> None:
        with self._lock:
            call.waiting_since = time.monotonic() if waiting else None

    def requests(self, call: _Call, iterator: Iterator) -> Iterator:
        """The RPC's request messages, each read under the watch."""
        while True:
            self._waiting(call, True)
            try:
                request = next(iterator)
            except StopIteration:
                break
            except Exception:
                if call.cancelled is not None:
                    raise Refused("DEADLINE_EXCEEDED", f"{call.method} cancelled: {call.cancelled}") from None
                raise
            finally:
                self._waiting(call, False)
            if call.cancelled is not None:
                break
            yield request
        if call.cancelled is not None:   # a cancelled stream looks ended: never take it for a complete one
            raise Refused("DEADLINE_EXCEEDED", f"{call.method} cancelled: {call.cancelled}")

    def responses(self, call: _Call, responses: Iterator) -> Iterator:
        """The RPC's response messages; the wait for the client to take each is watched."""
        for response in responses:
            self._waiting(call, True)
            yield response
            self._waiting(call, False)
            if call.cancelled is not None:
                return


def _guard_handler(grpc, guard: RpcGuard, method: str, handler):
    """``handler`` served as a stream-request handler under ``guard`` (same wire format: a unary request is a
    stream of one message)."""
    inner = handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream

    def argument(call: _Call, context, request_iterator):
        requests = guard.requests(call, request_iterator)
        if handler.request_streaming:
            return requests
        try:
            return next(requests)
        except StopIteration:
            raise Refused("INVALID_ARGUMENT", f"{method}: no request message") from None

    def begin(context) -> _Call:
        try:
            return guard.begin(context, method)
        except Refused as e:
            guard.log.info("%s %s refused: %s", context.peer(), method, e.message)
            context.abort(getattr(grpc.StatusCode, e.code), e.message)
            raise AssertionError("abort returned") from None

    def refused(context, e: Refused):
        guard.log.info("%s %s refused: %s", context.peer(), method, e.message)
        context.abort(getattr(grpc.StatusCode, e.code), e.message)

    def unary_response(request_iterator, context):
        call = begin(context)
        try:
            return inner(argument(call, context, request_iterator), context)
        except Refused as e:
            refused(context, e)
        finally:
            guard.end(call)

    def stream_response(request_iterator, context):
        call = begin(context)
        try:
            yield from guard.responses(call, inner(argument(call, context, request_iterator), context))
        except Refused as e:
            refused(context, e)
        finally:
            guard.end(call)

    if handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(stream_response, handler.request_deserializer,
                                                     handler.response_serializer)
    return grpc.stream_unary_rpc_method_handler(unary_response, handler.request_deserializer,
                                                handler.response_serializer)


class _Collect:
    """Stands in for a server to collect what a generated ``add_*Servicer_to_server`` registers."""

    def __init__(self) -> None:
        self.services: dict[str, dict] = {}

    def add_generic_rpc_handlers(self, handlers) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        self.services[service] = handlers


def _servicers(board: SimulatedBoard, grpc, pb: dict):
    """The three servicers pynq's client calls, each method validating and translating errors."""
    rd, mm, bf = pb["remote_device"], pb["mmio"], pb["buffer"]

    def guarded(method: str, respond: Callable | None = None):
        """Run a handler; ``Refused`` becomes the response's ``msg`` (when the client reads it) or a status."""
        def wrap(fn):
            def handler(self, request, context):
                peer = context.peer() or "unknown"
                try:
                    peer = board.client_of(context)
                    board.touch(peer, method)
                    return fn(request, context, peer)
                except Refused as e:
                    board.refused(method)
                    board.log.info("%s %s refused: %s", peer, method, e.message)
                    if respond is not None:
                        return respond(e.message)
                    context.abort(getattr(grpc.StatusCode, e.code), e.message)
                except (SimulatorError, ValueError, TypeError, OverflowError, UnicodeError) as e:
                    board.refused(method)
                    board.log.info("%s %s failed: %s", peer, method, e)
                    message = f"{method}: {e}"
                    if respond is not None:
                        return respond(message)
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
            return handler
        return wrap

    def guarded_stream(method: str):
        def wrap(fn):
            def handler(self, request, context):
                peer = context.peer() or "unknown"
                try:
                    peer = board.client_of(context)
                    board.touch(peer, method)
                    yield from fn(request, context, peer)
                except Refused as e:
                    board.refused(method)
                    board.log.info("%s %s refused: %s", peer, method, e.message)
                    context.abort(getattr(grpc.StatusCode, e.code), e.message)
                except (SimulatorError, ValueError, TypeError, OverflowError, UnicodeError) as e:
                    board.refused(method)
                    board.log.info("%s %s failed: %s", peer, method, e)
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{method}: {e}")
            return handler
        return wrap

    class Device(pb["remote_device_grpc"].RemoteDeviceServicer):
        @guarded("set_bitstream_attrs")
        def set_bitstream_attrs(request, context, peer):
            board.set_bitstream_attrs(request.binfile_name, request.partial, peer)
            return rd.SetBitstreamAttrsResponse(status=True)

        @guarded("download")
        def download(requests, context, peer):
            data = board.uploads.receive((req.buffer for req in requests), "bitstream download",
                                         board.limits.max_file_bytes)
            board.download(data, peer)
            return rd.DownloadResponse(status=True)

        @guarded("set_pl_clk")
        def set_pl_clk(request, context, peer):
            board.log.info("%s set_pl_clk(%d, %d MHz): ignored, the simulated clock is the config's %g MHz",
                           peer, request.i, request.clk_mhz, board.cfg.CLOCK_MHZ)
            return rd.SetPlClkResponse(status=True)

        @guarded("shutdown")
        def shutdown(request, context, peer):
            return rd.ShutdownResponse(status=True)

        @guarded_stream("readfile")
        def readfile(request, context, peer):
            data = board.read_file(request.file_path, peer)
            for pos in range(0, max(len(data), 1), CHUNK):
                yield rd.ReadFileResponse(data=bytes(data[pos:pos + CHUNK]))

        @guarded("writefile")
        def writefile(requests, context, peer):
            board.write_file(requests, peer)
            return rd.WriteFileResponse()

        @guarded("existsfile")
        def existsfile(request, context, peer):
            return rd.ExistsFileResponse(exists=board.exists(request.file_path, peer))

    class Mmio(pb["mmio_grpc"].MmioServicer):
        @guarded("get_mmio", lambda m: mm.GetMmioResponse(status=False, msg=m))
        def get_mmio(request, context, peer):
            return mm.GetMmioResponse(status=True, mmio_id=board.get_mmio(request.base_addr, request.length))

        @guarded("mmio_read", lambda m: mm.ReadResponse(status=False, msg=m))
        def read(request, context, peer):
            value = board.mmio_read(request.mmio_id, request.offset, request.length, request.word_order, peer)
            return mm.ReadResponse(status=True, data=value)

        @guarded("mmio_write", lambda m: mm.WriteResponse(status=False, msg=m))
        def write(request, context, peer):
            board.mmio_write(request.mmio_id, request.offset, bytes(request.data), peer)
            return mm.WriteResponse(status=True)

    class Buffers(pb["buffer_grpc"].RemoteBufferServicer):
        @guarded("allocate")
        def allocate(request, context, peer):
            return bf.AllocateResponse(buffer_id=board.allocate(request.size, request.dtype, peer).id)

        @guarded("buffer_write", lambda m: bf.BufferWriteResponse(msg=m))
        def write(requests, context, peer):
            board.write(requests, peer)
            return bf.BufferWriteResponse()

        @guarded_stream("buffer_read")
        def read(request, context, peer):
            for data in board.read(request.buffer_id, request.start, request.end):
                yield bf.BufferReadResponse(data=data)

        @guarded("freebuffer", lambda m: bf.FreeBufferResponse(msg=m))
        def freebuffer(request, context, peer):
            board.free(request.buffer_id)
            return bf.FreeBufferResponse()

        @guarded("flush", lambda m: bf.FlushResponse(msg=m))
        def flush(request, context, peer):
            board.address(request.buffer_id)
            return bf.FlushResponse()

        @guarded("invalidate", lambda m: bf.InvalidateResponse(msg=m))
        def invalidate(request, context, peer):
            board.address(request.buffer_id)
            return bf.InvalidateResponse()

        @guarded("physical_address", lambda m: bf.AddressResponse(msg=m))
        def physical_address(request, context, peer):
            return bf.AddressResponse(address=board.address(request.buffer_id))

        @guarded("virtual_address", lambda m: bf.AddressResponse(msg=m))
        def virtual_address(request, context, peer):
            return bf.AddressResponse(address=board.address(request.buffer_id))

        @guarded("cacheable", lambda m: bf.CacheableResponse(msg=m))
        def cacheable(request, context, peer):
            board.address(request.buffer_id)
            return bf.CacheableResponse(cacheable=True)

    return Device(), Mmio(), Buffers()


def start_server(board: SimulatedBoard, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT):
    """Start serving ``board`` on ``host:port``; returns (grpc server, bound port). The server's ``guard`` (an
    ``RpcGuard``) is stopped with ``board.close()``."""
    grpc, pb = import_remote()
    lim = board.limits
    options = [("grpc.max_receive_message_length", lim.max_message_bytes),
               ("grpc.max_send_message_length", lim.max_message_bytes),
               ("grpc.so_reuseport", 0),
               ("grpc.max_concurrent_streams", 2 * lim.max_peer_rpcs),   # per connection, in HTTP/2 itself
               ("grpc.max_connection_idle_ms", int(lim.conn_idle_s * 1000)),
               ("grpc.keepalive_time_ms", int(lim.keepalive_s * 1000)),
               ("grpc.keepalive_timeout_ms", int(lim.client_timeout_s * 1000)),
               ("grpc.http2.min_ping_interval_without_data_ms", 10_000),   # clients may ping every 10 s at most
               ("grpc.http2.max_ping_strikes", 2)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=lim.workers, thread_name_prefix="vta-board-rpc"),
                         options=options, maximum_concurrent_rpcs=lim.max_concurrent_rpcs)
    guard = RpcGuard(lim, board.log)
    board.on_close.append(guard.close)
    device, mmio, buffers = _servicers(board, grpc, pb)
    collected = _Collect()
    pb["remote_device_grpc"].add_RemoteDeviceServicer_to_server(device, collected)
    pb["mmio_grpc"].add_MmioServicer_to_server(mmio, collected)
    pb["buffer_grpc"].add_RemoteBufferServicer_to_server(buffers, collected)
    server.add_generic_rpc_handlers(tuple(
        grpc.method_handlers_generic_handler(service, {name: _guard_handler(grpc, guard, name, h)
                                                        for name, h in handlers.items()})
        for service, handlers in collected.services.items()))
    server.guard = guard
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as e:
        raise OSError(f"cannot listen on {address}: {e} (is the port in use?)") from None
    if not bound:
        raise OSError(f"cannot listen on {address} (is the port in use?)")
    board.connections.port = bound
    server.start()
    return server, bound


def serve(board: SimulatedBoard, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          on_ready: Callable[[int], None] | None = None, stop: threading.Event | None = None) -> int:
    """Serve until SIGINT/SIGTERM (or ``stop`` is set); a clean shutdown returns 0."""
    stop = stop or threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda signum, frame: stop.set())
    try:
        server, bound = start_server(board, host, port)
        try:
            if on_ready is not None:
                on_ready(bound)
            while not stop.wait(0.25):
                pass
            board.log.info("shutting down: refusing new requests, finishing the ones in flight")
        finally:
            server.stop(grace=2.0).wait(5.0)
            board.close()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    board.log.info("stopped")
    return 0
