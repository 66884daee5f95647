"""The tracker: TVM's tracker protocol on the wire, so TVM's ``query_rpc_tracker``, servers and runners can
use ours and ours can use a TVM tracker a lab already runs.

The protocol (TVM's ``python/tvm/rpc/tracker.py``): a client connects and sends ``TRACKER_MAGIC`` (int32,
little-endian); the tracker answers with the same. Then every message is ``[int32 size][JSON]``, a JSON
list starting with a ``TrackerCode``; the tracker answers each with one frame:

- ``[PING]`` -> ``SUCCESS``
- ``[UPDATE_INFO, {"key": "server:pynq", "addr": [host|null, port], ...}]`` -> ``SUCCESS`` (a null host
  becomes the peer's address; a connection whose key starts with ``server`` is listed by SUMMARY)
- ``[PUT, key, [port, matchkey], custom_addr|null]`` -> ``SUCCESS``: one free board, reachable at
  ``custom_addr`` (default: the peer's address) and ``port``; ``matchkey`` is ``key:random``
- ``[REQUEST, key, user, priority]`` -> ``[SUCCESS, [host, port, matchkey]]`` once a board is free: requests
  wait per key, highest priority first, first come first served within a priority
- ``[GET_PENDING_MATCHKEYS]`` -> the match keys this connection PUT that no request has taken yet
- ``[SUMMARY]`` -> ``[SUCCESS, {"queue_info": {key: {"free": n, "pending": m}}, "server_info": [info...]}]``
- ``[STOP, stop_key]`` -> ``SUCCESS`` and the tracker stops, if ``stop_key`` is the tracker's own

A board whose connection closes is dropped from its queue; it registers again when it reconnects. A match
whose requester is gone before the answer could be written goes back to the front of the queue (a requester
that took a match and never connected is the board's to notice: it sees its match key taken but unused and
registers a new one, as TVM's server does).

Robustness: frames are bounded (a size outside 1..64 KiB is refused before anything is allocated, JSON nested
deeper than 32 is refused before it is parsed), every read has a timeout (the handshake, each frame once its
first byte arrived, and a connection that holds nothing: no board, no waiting request), a connection that
breaks the protocol is dropped without touching the others, every request gets an answer (``FAIL`` when the
answer cannot be written, logged), and connections (in all and per peer address), per-connection boards,
requests and info are bounded. There is no pickle and no eval: JSON only.

Peers without a key: the tracker cannot authenticate anyone (TVM's protocol has no keys), so it limits what a
peer can take instead. Priorities are clamped to ``[-max_priority, max_priority]``. A board of this stack
reports a match that was never used (``UPDATE_INFO {"unused_match": matchkey}``, sent before it offers itself
under a new key): the peer that took it is then served after every other peer *by that board* for ``penalty``
seconds (doubling with each unused match of that board, at most ``max_penalty``), so a peer that takes boards
and never proves the boards' key cannot keep them from the clients that can. Only the board connection that
PUT the match can report it, and the report orders only that connection's offers: a keyless peer's own fake
board cannot make a keyed client (which refuses that board) wait behind others on the real boards.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import json
import logging
import math
import secrets
import select
import socket
import struct
import threading
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from vta.rpc.base import (
    ANNOUNCED,
    DEFAULT_TRACKER_PORT,
    MAX_KEY_CHARS,
    MAX_MATCHKEY_CHARS,
    MAX_SUMMARY_FRAME,
    MAX_TRACKER_FRAME,
    MAX_TRACKER_REQUEST,
    TRACKER_MAGIC,
    ProtocolError,
    TrackerCode,
    json_depth,
    loads_bounded,
    parse_addr,
    recv_exact,
    recv_tracker_json,
    tracker_frame,
)
from vta.rpc.protocol import same_secret

log = logging.getLogger("vta.rpc.tracker")

MAX_PUTS_PER_CONNECTION = 64       # free boards one connection may offer at once (a TVM server offers one)
MAX_REQUESTS_PER_CONNECTION = 64   # requests one connection may have waiting
MAX_INFO_BYTES = 4096              # UPDATE_INFO's dict, as JSON
MAX_KEYS = 4096                    # device keys (queues) the tracker keeps
MAX_WRITE_BUFFER = 4 << 20         # a peer that does not read its answers is dropped past this
MAX_INFO_DEPTH = 8                 # nesting of an UPDATE_INFO dict (TVM's servers send a flat one)
MAX_DELIVERED = 64                 # match keys per board connection remembered as taken (for unused reports)
MAX_PENALISED = 4096               # (peer, board) pairs remembered with an unused match
UNUSED_MATCH = "unused_match"      # the UPDATE_INFO field in which our boards report a match nobody used


class _Drop(Exception):
    """Close this connection (the message says why)."""


@dataclass(eq=False)
class _Conn:
    peer: str
    writer: asyncio.StreamWriter
    info: dict[str, Any] = field(default_factory=dict)
    puts: list[_Value] = field(default_factory=list)
    pending_matchkeys: set[str] = field(default_factory=set)
    taken: OrderedDict[str, str] = field(default_factory=OrderedDict)   # its match keys taken: -> requester
    requests: int = 0
    closed: bool = False
    serial: int = 0     # this connection's number (a board's penalties are its own: see _unused_match)

    def holds_something(self) -> bool:
        """A registered board or a waiting request: idle by nature (a busy board says nothing), never timed out."""
        return bool(self.requests or self.puts or str(self.info.get("key", "")).startswith("server"))

    def name(self) -> str:
        return f"{self.info.get('key', 'client')} at {self.peer}"


@dataclass(eq=False)
class _Value:
    """A free board: where to reach it and the match key it expects."""

    conn: _Conn
    host: str
    port: int
    matchkey: str


@dataclass(order=True)
class _Request:
    neg_priority: float
    seq: int
    conn: _Conn = field(compare=False)
    cancelled: bool = field(default=False, compare=False)


class _Queue:
    """One device key: free boards (FIFO) and waiting requests (priority, then arrival)."""

    def __init__(self) -> None:
        self.values: deque[_Value] = deque()
        self.requests: list[_Request] = []
        self.live_requests = 0

    def summary(self) -> dict[str, int]:
        return {"free": len(self.values), "pending": self.live_requests}


class TrackerServer:
    """A tracker on ``host:port`` (port 0: any free port; the bound one is ``self.port``).

    ``start()`` serves from a background thread (tests, embedding); ``serve_forever()`` serves in this thread
    until ``stop()`` or a STOP request with ``stop_key``. ``idle_timeout`` (seconds, None: never) drops a
    connection that sends nothing for that long while it holds nothing: boards and waiting requests are idle
    by nature (TVM's boards send nothing while serving a session) and are never dropped for it; TCP keep-alive
    finds those that died. ``max_connections_per_peer`` bounds the connections of one peer address, so one
    peer cannot take every connection. ``max_priority`` clamps client-chosen priorities; ``penalty`` and
    ``max_penalty`` (seconds) say how long a peer that took a board and never used it waits behind the others.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = DEFAULT_TRACKER_PORT, *, max_connections: int = 1024,
                 max_connections_per_peer: int = 64, max_frame: int = MAX_TRACKER_REQUEST,
                 handshake_timeout: float = 10.0, frame_timeout: float = 10.0, idle_timeout: float | None = 60.0,
                 max_priority: float = 100.0, penalty: float = 30.0, max_penalty: float = 600.0,
                 stop_key: str | None = None):
        self.host, self.port = host, port
        self.max_connections, self.max_frame = max_connections, max_frame
        self.max_connections_per_peer = max_connections_per_peer
        self.handshake_timeout, self.frame_timeout, self.idle_timeout = handshake_timeout, frame_timeout, idle_timeout
        self.max_priority, self.penalty, self.max_penalty = float(max_priority), penalty, max_penalty
        self.stop_key = stop_key or f"tracker:{secrets.token_hex(16)}"
        self._per_peer: Counter[str] = Counter()
        # (peer, board connection's serial) -> (unused matches of that board it took, until when)
        self._penalised: OrderedDict[tuple[str, int], tuple[int, float]] = OrderedDict()
        self._queues: dict[str, _Queue] = {}
        self._conns: set[_Conn] = set()
        self._tasks: set[asyncio.Task] = set()
        self._seq = itertools.count()
        self._conn_serial = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._stopped: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.dropped = 0   # connections dropped for breaking the protocol or a limit

    # ---- life cycle ----
    def start(self) -> TrackerServer:
        """Bind and serve from a daemon thread; returns once listening (raises if binding failed)."""
        self._thread = threading.Thread(target=self._run, name="vta-rpc-tracker", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    def wait(self) -> None:
        """Block until the tracker started by ``start`` stops serving (``stop`` from another thread)."""
        if self._thread is not None:
            self._thread.join()

    def serve_forever(self) -> None:
        self._run()
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # noqa: BLE001 - reported to start()'s caller
            self._error = e
        finally:
            self._ready.set()

    def stop(self) -> None:
        """Close every connection and the listening socket (from any thread)."""
        loop, stopped = self._loop, self._stopped
        if loop is not None and stopped is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stopped.set)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)

    def __enter__(self) -> TrackerServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        self._server = await asyncio.start_server(self._serve, self.host, self.port, reuse_address=True,
                                                  limit=1 << 16, backlog=128)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("tracker listening on %s:%d", self.host, self.port, extra=ANNOUNCED)
        self._ready.set()
        async with self._server:
            await self._stopped.wait()
            self._server.close()
            for conn in list(self._conns):
                conn.writer.close()
            if self._tasks:   # let every connection's handler finish (closing ends their reads)
                _, pending = await asyncio.wait(list(self._tasks), timeout=2)
                for task in pending:
                    task.cancel()
                if pending:
                    await asyncio.wait(pending, timeout=2)
        log.info("tracker stopped")

    # ---- one connection ----
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        conn = _Conn(str(peer[0]), writer, serial=next(self._conn_serial))
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            await self._serve_conn(conn, reader, writer)
        except asyncio.CancelledError:
            pass
        finally:
            self._tasks.discard(task)

    async def _serve_conn(self, conn: _Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._conns) >= self.max_connections:
            log.warning("refused a connection from %s: %d connections open (the limit)", conn.peer,
                        len(self._conns))
            self.dropped += 1
            writer.close()
            return
        if self._per_peer[conn.peer] >= self.max_connections_per_peer:
            log.warning("refused a connection from %s: it has %d open (the limit per peer)", conn.peer,
                        self._per_peer[conn.peer])
            self.dropped += 1
            writer.close()
            return
        self._conns.add(conn)
        self._per_peer[conn.peer] += 1
        try:
            magic = await asyncio.wait_for(reader.readexactly(4), self.handshake_timeout)
            if struct.unpack("<i", magic)[0] != TRACKER_MAGIC:
                raise _Drop(f"bad magic {magic.hex()} (not a TVM tracker client)")
            writer.write(struct.pack("<i", TRACKER_MAGIC))
            while not conn.closed:
                first = await self._first_byte(conn, reader)
                rest = await asyncio.wait_for(reader.readexactly(3), self.frame_timeout)
                size = struct.unpack("<i", first + rest)[0]
                if size <= 0 or size > self.max_frame:
                    raise _Drop(f"frame of {size} bytes refused (allowed 1..{self.max_frame})")
                body = await asyncio.wait_for(reader.readexactly(size), self.frame_timeout)
                try:
                    message = loads_bounded(body)
                except ValueError as e:
                    raise _Drop(f"frame is not JSON: {str(e)[:80]}") from None
                self._handle(conn, message)
                if writer.transport.get_write_buffer_size() > MAX_WRITE_BUFFER:
                    raise _Drop("does not read its answers")
                await asyncio.wait_for(writer.drain(), self.frame_timeout)
        except _Drop as e:
            self.dropped += 1
            log.warning("dropped %s: %s", conn.name(), e)
        except (TimeoutError, asyncio.TimeoutError):   # distinct classes before Python 3.11
            self.dropped += 1
            log.warning("dropped %s: timed out in the middle of a message (or idle)", conn.name())
        except asyncio.IncompleteReadError:
            pass   # the peer closed: the normal end of a connection
        except OSError as e:
            log.info("connection of %s lost: %s", conn.name(), e)
        except Exception:   # a bug: this connection goes, the tracker stays
            self.dropped += 1
            log.exception("dropped %s", conn.name())
        finally:
            self._close(conn)

    async def _first_byte(self, conn: _Conn, reader: asyncio.StreamReader) -> bytes:
        """The first byte of the next frame; TimeoutError after ``idle_timeout`` of silence from a connection
        that holds nothing (one that holds a board or a waiting request may stay silent)."""
        if self.idle_timeout is None:
            return await reader.readexactly(1)
        read = asyncio.ensure_future(reader.readexactly(1))
        try:
            while True:
                done, _ = await asyncio.wait({read}, timeout=self.idle_timeout)
                if done:
                    return read.result()
                if not conn.holds_something():
                    raise TimeoutError
        finally:
            if not read.done():
                read.cancel()
                with contextlib.suppress(asyncio.CancelledError, asyncio.IncompleteReadError):
                    await read

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._conns.discard(conn)
        self._per_peer[conn.peer] -= 1
        if self._per_peer[conn.peer] <= 0:
            del self._per_peer[conn.peer]
        conn.writer.close()
        for value in conn.puts:   # its boards leave their queues
            queue = self._queues.get(self._key_of(value))
            if queue is not None and value in queue.values:
                queue.values.remove(value)
                log.info("board %s:%d (%s) dropped: its connection closed", value.host, value.port,
                         self._key_of(value))
        conn.puts.clear()
        for who in [w for w in self._penalised if w[1] == conn.serial]:   # its penalties end with the board
            del self._penalised[who]
        if conn.requests:
            for queue in self._queues.values():
                for req in queue.requests:
                    if req.conn is conn and not req.cancelled:
                        req.cancelled = True
                        queue.live_requests -= 1
                if len(queue.requests) > 2 * queue.live_requests + 16:   # compact the heap
                    queue.requests = [r for r in queue.requests if not r.cancelled]
                    heapq.heapify(queue.requests)

    @staticmethod
    def _key_of(value: _Value) -> str:
        return value.matchkey.rsplit(":", 1)[0]

    def _reply(self, conn: _Conn, value: Any) -> bool:
        """Write one answer; an answer that cannot be serialised is logged and answered ``FAIL`` instead (every
        request gets an answer). False when the connection is gone."""
        if conn.closed or conn.writer.is_closing():
            return False
        try:
            frame = tracker_frame(value)
        except (ValueError, TypeError, RecursionError) as e:
            log.error("the answer to %s cannot be serialised (%s: %s): answered FAIL", conn.name(),
                      type(e).__name__, str(e)[:200])
            frame = tracker_frame(TrackerCode.FAIL)
        try:
            conn.writer.write(frame)
        except (OSError, RuntimeError):
            return False
        return True

    # ---- messages ----
    def _handle(self, conn: _Conn, message: Any) -> None:
        if not isinstance(message, list) or not message or not _is_int(message[0]):
            raise _Drop("a message must be a JSON list starting with a TrackerCode")
        code = message[0]
        if code == TrackerCode.PING:
            self._reply(conn, TrackerCode.SUCCESS)
        elif code == TrackerCode.UPDATE_INFO:
            self._update_info(conn, message)
        elif code == TrackerCode.PUT:
            self._put(conn, message)
        elif code == TrackerCode.REQUEST:
            self._request(conn, message)
        elif code == TrackerCode.GET_PENDING_MATCHKEYS:
            self._reply(conn, sorted(conn.pending_matchkeys))
        elif code == TrackerCode.SUMMARY:
            self._reply(conn, [TrackerCode.SUCCESS, self._summary()])
        elif code == TrackerCode.STOP:
            ok = len(message) == 2 and isinstance(message[1], str) and message[1].isascii() and \
                same_secret(message[1].encode(), self.stop_key.encode())
            self._reply(conn, TrackerCode.SUCCESS if ok else TrackerCode.FAIL)
            if ok:
                log.info("STOP from %s", conn.peer)
                self._stopped.set()
        else:
            raise _Drop(f"unknown tracker code {code}")

    def _update_info(self, conn: _Conn, message: list) -> None:
        if len(message) != 2 or not isinstance(message[1], dict):
            raise _Drop("UPDATE_INFO takes one JSON object")
        update = dict(message[1])
        unused = update.pop(UNUSED_MATCH, None)
        if unused is not None:
            self._unused_match(conn, unused)
        info = {**conn.info, **update}
        try:   # what is stored must serialise again (SUMMARY sends it to everyone)
            text = json.dumps(info)
        except (ValueError, TypeError, RecursionError) as e:
            raise _Drop(f"info cannot be serialised: {type(e).__name__}") from None
        if len(text) > MAX_INFO_BYTES:
            raise _Drop(f"info over {MAX_INFO_BYTES} bytes")
        if json_depth(text.encode()) > MAX_INFO_DEPTH:
            raise _Drop(f"info nested deeper than {MAX_INFO_DEPTH}")
        addr = info.get("addr")
        if addr is not None:
            if not (isinstance(addr, list) and len(addr) == 2 and (addr[0] is None or isinstance(addr[0], str))):
                raise _Drop("info addr must be [host or null, port]")
            if addr[0] is None:
                info["addr"] = [conn.peer, addr[1]]
        if "key" in info and not (isinstance(info["key"], str) and info["key"].isprintable()):
            raise _Drop("info key must be a string of printable characters")
        conn.info = info
        self._reply(conn, TrackerCode.SUCCESS)

    def _put(self, conn: _Conn, message: list) -> None:
        if len(message) not in (3, 4):
            raise _Drop("PUT takes key, [port, matchkey] and an optional address")
        key, where = message[1], message[2]
        custom = message[3] if len(message) == 4 else None
        _check_key(key)
        if not (isinstance(where, list) and len(where) == 2 and _is_int(where[0]) and 0 < where[0] < 65536
                and isinstance(where[1], str) and 0 < len(where[1]) <= MAX_MATCHKEY_CHARS and where[1].isprintable()):
            raise _Drop("PUT's second argument must be [port 1..65535, matchkey of printable characters]")
        port, matchkey = where
        if matchkey.rsplit(":", 1)[0] != key:
            raise _Drop(f"match key {matchkey[:40]!r} does not start with its key {key!r} and ':'")
        if custom is not None and (not isinstance(custom, str) or not 0 < len(custom) <= 255 or not custom.isprintable()):
            raise _Drop("PUT's address must be a host name or null")
        if len(conn.puts) >= MAX_PUTS_PER_CONNECTION:   # forget this connection's oldest offer
            old = conn.puts.pop(0)
            queue = self._queues.get(self._key_of(old))
            if queue is not None and old in queue.values:
                queue.values.remove(old)
            conn.pending_matchkeys.discard(old.matchkey)
        queue = self._queue(key)
        value = _Value(conn, custom or conn.peer, port, matchkey)
        conn.puts.append(value)
        conn.pending_matchkeys.add(matchkey)
        queue.values.append(value)
        self._reply(conn, TrackerCode.SUCCESS)
        self._schedule(queue)

    def _request(self, conn: _Conn, message: list) -> None:
        if len(message) != 4:
            raise _Drop("REQUEST takes key, user and priority")
        key, _user, priority = message[1], message[2], message[3]
        _check_key(key)
        if not (_is_int(priority) or (isinstance(priority, float) and math.isfinite(priority))):
            raise _Drop("REQUEST's priority must be a number")
        # a bounded choice, clamped before float(): an int of 400 digits has no float (OverflowError)
        priority = float(max(-self.max_priority, min(self.max_priority, priority)))
        if conn.requests >= MAX_REQUESTS_PER_CONNECTION:
            raise _Drop(f"over {MAX_REQUESTS_PER_CONNECTION} requests waiting on one connection")
        queue = self._queue(key)
        conn.requests += 1
        heapq.heappush(queue.requests, _Request(-priority, next(self._seq), conn))
        queue.live_requests += 1
        self._schedule(queue)

    def _queue(self, key: str) -> _Queue:
        queue = self._queues.get(key)
        if queue is None:
            if len(self._queues) >= MAX_KEYS:
                for k, q in list(self._queues.items()):   # forget empty queues first
                    if not q.values and not q.live_requests:
                        del self._queues[k]
                if len(self._queues) >= MAX_KEYS:
                    raise _Drop(f"over {MAX_KEYS} device keys")
            queue = self._queues[key] = _Queue()
        return queue

    def _schedule(self, queue: _Queue) -> None:
        """Match free boards to waiting requests; a match that cannot be delivered goes back to the front."""
        while queue.values:
            req = self._next_request(queue, queue.values[0].conn)
            if req is None:
                return
            queue.live_requests -= 1
            req.conn.requests -= 1
            value = queue.values.popleft()
            if self._reply(req.conn, [TrackerCode.SUCCESS, [value.host, value.port, value.matchkey]]):
                value.conn.pending_matchkeys.discard(value.matchkey)
                with contextlib.suppress(ValueError):
                    value.conn.puts.remove(value)
                value.conn.taken[value.matchkey] = req.conn.peer
                while len(value.conn.taken) > MAX_DELIVERED:
                    value.conn.taken.popitem(last=False)
                log.info("matched %s:%d (%s) to %s", value.host, value.port, value.matchkey.rsplit(":", 1)[0],
                         req.conn.peer)
            else:
                queue.values.appendleft(value)   # the requester is gone: the board stays free

    def _next_request(self, queue: _Queue, board: _Conn) -> _Request | None:
        """The waiting request ``board`` (the next free one) serves next: the highest priority, first come, among
        peers that left none of *this board's* matches unused; only when none of those waits, the same among the
        others."""
        behind: list[_Request] = []
        chosen = None
        while queue.requests:
            req = heapq.heappop(queue.requests)
            if req.cancelled:
                continue
            if self._is_penalised(req.conn.peer, board):
                behind.append(req)
                continue
            chosen = req
            break
        if chosen is None and behind:
            chosen = behind.pop(0)
        for req in behind:
            heapq.heappush(queue.requests, req)
        return chosen

    def _is_penalised(self, peer: str, board: _Conn) -> bool:
        entry = self._penalised.get((peer, board.serial))
        return entry is not None and time.monotonic() < entry[1]

    def _unused_match(self, conn: _Conn, matchkey: Any) -> None:
        """A board reports that a match of its own was taken and never used: the peer that took it waits behind
        every other peer *for this board* (this board connection's later offers) for a while, longer each time.

        Only the board connection that PUT the match and saw it delivered can report it (``conn.taken``), and its
        report costs the taker nothing on any other board: the tracker cannot tell an honest board from a keyless
        peer that registers a board of its own (TVM's protocol has no keys), and such a board's reports must not
        make a keyed client, which refuses it, wait for the real boards. Reports about other boards' matches, or
        matches nobody took, are ignored."""
        requester = conn.taken.pop(matchkey, None) if isinstance(matchkey, str) else None
        if requester is None:
            return
        who = (requester, conn.serial)
        count, _ = self._penalised.pop(who, (0, 0.0))
        count = min(count + 1, 32)
        seconds = min(self.max_penalty, self.penalty * 2 ** (count - 1))
        self._penalised[who] = (count, time.monotonic() + seconds)
        while len(self._penalised) > MAX_PENALISED:
            self._penalised.popitem(last=False)
        log.warning("%s took the match %s of %s and never used it: its requests wait behind others' for this "
                    "board for %g s", requester, matchkey.rsplit(":", 1)[0], conn.name(), seconds)
        for queue in self._queues.values():   # boards may be waiting for the others now
            self._schedule(queue)

    def summary(self) -> dict[str, Any]:
        """TVM's summary: the queue of every key and the info of every connection whose key says ``server``
        (safe to call from any thread)."""
        loop = self._loop
        if loop is not None and loop.is_running() and threading.current_thread() is not self._thread:
            async def snapshot() -> dict[str, Any]:
                return self._summary()
            return asyncio.run_coroutine_threadsafe(snapshot(), loop).result(10)
        return self._summary()

    def _summary(self) -> dict[str, Any]:
        return {"queue_info": {k: q.summary() for k, q in self._queues.items()},
                "server_info": [c.info for c in self._conns
                                if str(c.info.get("key", "")).startswith("server") and "addr" in c.info]}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_key(key: Any) -> None:
    if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_CHARS or not key.isprintable():
        raise _Drop(f"a device key must be a string of 1..{MAX_KEY_CHARS} printable characters (control characters "
                    "would forge log lines)")


# ------------------------------------------------------------------------------------------------------------
# the client side (ours, and what a TVM tracker answers too)

class TrackerClient:
    """A connection to a tracker (ours or TVM's): summary, request, and the calls a board server makes."""

    def __init__(self, address: str | tuple[str, int], timeout: float = 10.0):
        self.host, self.port = parse_addr(address) if isinstance(address, str) else address
        self.timeout = timeout
        deadline = time.monotonic() + timeout
        try:
            self.sock = socket.create_connection((self.host, self.port), timeout=timeout)
        except OSError as e:
            raise ConnectionError(f"cannot reach the tracker at {self.host}:{self.port}: {e.strerror or e}") from None
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            self.sock.sendall(struct.pack("<i", TRACKER_MAGIC))
            magic = struct.unpack("<i", recv_exact(self.sock, 4, deadline, "the tracker's magic"))[0]
        except (OSError, TimeoutError) as e:
            self.close()
            raise ConnectionError(f"{self.host}:{self.port} did not answer as an RPC tracker: {e}") from None
        if magic != TRACKER_MAGIC:
            self.close()
            raise ProtocolError(f"{self.host}:{self.port} is not an RPC tracker (magic {magic:#x})")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> TrackerClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def call(self, message: list, timeout: float | None = None, max_bytes: int = MAX_TRACKER_FRAME):
        """Send one request and read its answer (within ``timeout``, default the client's)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        self.sock.settimeout(self.timeout if timeout is None else timeout)
        self.sock.sendall(tracker_frame(message))
        return recv_tracker_json(self.sock, deadline, max_bytes)

    def _expect_success(self, reply: Any, what: str) -> None:
        if reply != TrackerCode.SUCCESS:
            raise ProtocolError(f"tracker {self.address} answered {what} with {str(reply)[:80]}")

    def ping(self) -> None:
        self._expect_success(self.call([TrackerCode.PING]), "PING")

    def summary(self) -> dict[str, Any]:
        reply = self.call([TrackerCode.SUMMARY], max_bytes=MAX_SUMMARY_FRAME)
        if not (isinstance(reply, list) and len(reply) == 2 and reply[0] == TrackerCode.SUCCESS
                and isinstance(reply[1], dict)):
            raise ProtocolError(f"tracker {self.address}: unexpected SUMMARY answer {str(reply)[:80]}")
        return reply[1]

    def text_summary(self) -> str:
        return format_summary(self.summary())

    def update_info(self, info: dict[str, Any]) -> None:
        self._expect_success(self.call([TrackerCode.UPDATE_INFO, info]), "UPDATE_INFO")

    def put(self, key: str, port: int, matchkey: str, custom_addr: str | None = None) -> None:
        self._expect_success(self.call([TrackerCode.PUT, key, [port, matchkey], custom_addr]), "PUT")

    def pending_matchkeys(self) -> list[str]:
        reply = self.call([TrackerCode.GET_PENDING_MATCHKEYS])
        if not isinstance(reply, list) or not all(isinstance(k, str) for k in reply):
            raise ProtocolError(f"tracker {self.address}: unexpected GET_PENDING_MATCHKEYS answer {str(reply)[:80]}")
        return reply

    def request(self, key: str, priority: float = 1, user: str = "", timeout: float | None = None,
                cancel=None) -> tuple[str, int, str]:
        """Wait for a free board of ``key``: its (host, port, matchkey). ``timeout`` (seconds, None: forever)
        and ``cancel()`` (polled) give up: the connection is then closed, which withdraws the request."""
        self.sock.settimeout(self.timeout)
        self.sock.sendall(tracker_frame([TrackerCode.REQUEST, key, user, priority]))
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = 0.2 if end is None else max(0.0, min(0.2, end - time.monotonic()))
            ready, _, _ = select.select([self.sock], [], [], wait)
            if ready:
                break
            if cancel is not None and cancel():
                self.close()
                raise TimeoutError(f"request for a {key!r} board withdrawn")
            if end is not None and time.monotonic() >= end:
                self.close()
                raise TimeoutError(f"no {key!r} board became free at the tracker {self.address} within {timeout:g} s")
        reply = recv_tracker_json(self.sock, time.monotonic() + self.timeout)
        if not (isinstance(reply, list) and len(reply) == 2 and reply[0] == TrackerCode.SUCCESS
                and isinstance(reply[1], list) and len(reply[1]) == 3):
            raise ProtocolError(f"tracker {self.address}: unexpected REQUEST answer {str(reply)[:80]}")
        host, port, matchkey = reply[1]
        if not (isinstance(host, str) and _is_int(port) and isinstance(matchkey, str)):
            raise ProtocolError(f"tracker {self.address}: malformed match {str(reply[1])[:80]}")
        return host, port, matchkey

    def stop(self, stop_key: str) -> bool:
        return self.call([TrackerCode.STOP, stop_key]) == TrackerCode.SUCCESS


def servers_by_key(summary: dict[str, Any]) -> dict[str, int]:
    """How many boards of each key are registered (TVM counts them from ``server_info``)."""
    counts: dict[str, int] = {}
    for item in summary.get("server_info", []):
        key = str(item.get("key", ""))
        if ":" in key:
            k = key.split(":")[1]
            counts[k] = counts.get(k, 0) + 1
    return counts


def format_summary(data: dict[str, Any]) -> str:
    """The summary as TVM's ``query_rpc_tracker`` prints it (``TrackerSession.text_summary``)."""
    lines = ["Server List", "-" * 30, "server-address           key", "-" * 30]
    for item in sorted(data.get("server_info", []), key=lambda x: str(x.get("key", ""))):
        addr = item.get("addr", ["?", "?"])
        lines.append(f"{':'.join(map(str, addr)):21s}    {item.get('key', '')}")
    lines += ["-" * 30, ""]
    total = servers_by_key(data)
    queue_info = data.get("queue_info", {})
    keys = sorted(queue_info)
    width = max((len(k) for k in keys), default=0)
    title = f"{'key':<{width}s}   total  free  pending"
    lines += ["Queue Status", "-" * (len(title) + 1), title, "-" * (len(title) + 1)]
    for k in keys:
        free, pending = queue_info[k].get("free", 0), queue_info[k].get("pending", 0)
        if total.get(k, 0) or pending:
            lines.append(f"{k:<{width}}   {total.get(k, 0):<5d}  {free:<4d}  {pending:<7d}")
    lines.append("-" * (len(title) + 1))
    return "\n".join(lines) + "\n"
