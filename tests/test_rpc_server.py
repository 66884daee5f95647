"""The board server and RemoteDevice: sessions give the same bits and counters as the local simulator,
programs are checked before they run, keys are checked both ways, hostile or vanished clients are dropped
and everything they held is freed."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from devices import assert_alloc_and_free_refuse_what_is_not_a_size_or_a_buffer

from hw_config import load_config
from simulator.errors import DeadlockError
from vta import compile_op
from vta.device import SimDevice
from vta.isa import FinishInsn, GemmInsn, MemInsn, assemble
from vta.program_check import ProgramRejected
from vta.rpc import (
    AuthError,
    BoardBusy,
    BoardLost,
    BoardServer,
    MatchMismatch,
    ProtocolError,
    RemoteDevice,
    RemoteError,
    SessionLimits,
    TrackerClient,
    TrackerServer,
    connect_device,
    protocol,
    request_board,
)
from vta.rpc.client import expect_message
from vta.rpc.local import _first_line
from vta.rpc.protocol import PREFIX, Channel, new_nonce
from vta.templates import random_inputs

CFG = load_config("pynq")
SECRET = b"0123456789abcdef0123456789abcdef"
EPILOGUE = [("shr", 8), ("clip", -127, 127)]


class Board:
    """An in-process board server on one shared simulator device, so a test can see what a session left."""

    def __init__(self, **options):
        self.device = SimDevice(CFG)
        options = {"key": "sim", "port": 0, "handshake_timeout": 1.0, "read_timeout": 1.0, **options}
        self.server = BoardServer(lambda: self.device, **options).start()
        self.port = self.server.port

    def connect(self, **options) -> RemoteDevice:
        return RemoteDevice("127.0.0.1", self.port, timeout=10, **options)

    def allocated(self) -> list:
        return self.device.sim.regions()

    def wait_idle(self, timeout: float = 5.0) -> None:
        end = time.monotonic() + timeout
        while self.server.session_active.is_set() or self.allocated():
            assert time.monotonic() < end, f"session still active / memory held: {self.allocated()}"
            time.sleep(0.02)


@pytest.fixture
def board():
    b = Board()
    yield b
    b.server.stop()


def conv(device=None):
    return compile_op("conv2d", CFG, data_shape=(1, 32, 8, 8), kernel_shape=(32, 32, 3, 3), padding=(1, 1),
                      epilogue=EPILOGUE, device=device)


def test_a_remote_conv_is_bit_exact_with_the_same_counters(board):
    local = conv()
    inputs = random_inputs(local, 0)
    expected = local.run(**inputs)
    with board.connect() as dev:
        assert dev.cfg.fingerprint == CFG.fingerprint and dev.board.startswith("sim@")
        op = conv(dev)
        out = op.run(**inputs)
        assert np.array_equal(out, expected) and np.array_equal(out, op.reference(**inputs))
        assert op.stats.to_dict() == local.stats.to_dict() and dev.last_stats.cycles == op.cycles
        traced = op.program.run(trace=True)
        assert traced.trace == local.program.run(trace=True).trace and len(traced.trace) == op.num_insns
        assert dev.info()["buffers"] > 0
    board.wait_idle()   # the session's buffers are freed when it ends


def test_big_copies_are_split_to_the_boards_payload_limit():
    b = Board(limits=SessionLimits(max_payload=4096))
    try:
        with b.connect() as dev:
            buf = dev.alloc(50_000)
            data = np.random.default_rng(0).integers(0, 256, 50_000, dtype=np.uint8)
            dev.copy_in(buf, data)
            assert np.array_equal(dev.copy_out(buf), data)
            assert np.array_equal(dev.copy_out(buf, 5000, 40_000), data[40_000:45_000])
    finally:
        b.server.stop()


def _load_at(dev: RemoteDevice, byte_addr: int, n: int = 4) -> np.ndarray:
    return assemble([MemInsn(memory_type=2, dram_base=byte_addr // 16, y_size=1, x_size=n, x_stride=n),
                     FinishInsn()], dev.cfg)


def test_programs_are_checked_against_the_sessions_buffers(board):
    with board.connect() as dev:
        buf = dev.alloc(64)
        stats = dev.run(_load_at(dev, buf.addr))
        assert stats.inp_load_nbytes == 64
        with pytest.raises(ProgramRejected, match="not inside one buffer"):
            dev.run(_load_at(dev, buf.addr + 4096 * 64))       # beyond the session's buffers
        with pytest.raises(ProgramRejected, match="not inside one buffer"):
            dev.run(_load_at(dev, buf.addr, n=5))               # one element past its end
        dev.free(buf)
        with pytest.raises(ProgramRejected):
            dev.run(_load_at(dev, buf.addr))                    # freed: no longer the session's
        with pytest.raises(DeadlockError, match="never pushed"):   # the simulator's own errors come back typed
            dev.run(assemble([GemmInsn(pop_prev_dep=1, uop_bgn=0, uop_end=1, iter_out=1, iter_in=1), FinishInsn()],
                             dev.cfg))
        with pytest.raises(ValueError):
            dev.free(buf)                                       # not a buffer of this session
        assert dev.run(_load_at(dev, dev.alloc(64).addr)).inp_load_nbytes == 64   # the session goes on
        assert_alloc_and_free_refuse_what_is_not_a_size_or_a_buffer(dev)
    board.wait_idle()


def test_session_limits_are_refused_and_the_session_goes_on():
    b = Board(limits=SessionLimits(max_session_bytes=1 << 20, max_buffers=3, max_payload=1 << 16))
    try:
        with b.connect() as dev:
            with pytest.raises(RemoteError, match="over its 1048576"):
                dev.alloc(2 << 20)
            bufs = [dev.alloc(16) for _ in range(3)]
            with pytest.raises(RemoteError, match="at most 3 buffers"):
                dev.alloc(16)
            with pytest.raises(ValueError, match="overruns"):   # checked by the server, bypassing the client's check
                dev._call("copy_in", b"x" * 10, addr=bufs[0].addr, offset=10)
            with pytest.raises(ValueError, match="out of range"):
                dev._call("copy_out", expect=100, addr=bufs[0].addr, offset=0, nbytes=100)
            dev.copy_in(bufs[0], b"y" * 16)
            assert bytes(dev.copy_out(bufs[0])) == b"y" * 16
            assert dev.reset() == 3 and dev.info()["buffers"] == 0
        b.wait_idle()
    finally:
        b.server.stop()


def test_one_session_at_a_time(board):
    first = board.connect()
    with pytest.raises(BoardBusy, match="serving another session"):
        board.connect()
    first.close()
    board.wait_idle()
    with board.connect() as second:
        second.alloc(8)


def test_a_vanished_client_frees_its_board(board):
    dev = board.connect()
    for _ in range(3):
        dev.copy_in(dev.alloc(4096), b"z" * 4096)
    assert len(board.allocated()) == 3
    dev._ch.sock.close()   # gone without a word
    board.wait_idle()
    with board.connect() as again:
        again.alloc(16)


def test_an_idle_session_times_out():
    b = Board(session_timeout=0.5)
    try:
        dev = b.connect()
        dev.alloc(64)
        time.sleep(1.0)
        b.wait_idle()
        with pytest.raises(BoardLost):
            dev.alloc(64)
    finally:
        b.server.stop()


# ------------------------------------------------------------------------------------------------------------
# keys

@pytest.fixture
def keyed():
    b = Board(secret=SECRET)
    yield b
    b.server.stop()


def test_the_right_key_opens_a_tagged_session(keyed):
    local = conv()
    inputs = random_inputs(local, 0)
    with keyed.connect(secret=SECRET) as dev:
        assert np.array_equal(conv(dev).run(**inputs), local.run(**inputs))
    keyed.wait_idle()


def test_a_wrong_or_missing_key_is_refused(keyed):
    with pytest.raises(AuthError, match="could not prove it holds the key"):
        keyed.connect(secret=b"x" * 32)           # the client checks the board's proof first
    with pytest.raises(AuthError, match="requires a key"):
        keyed.connect()
    ch = _raw_hello(keyed.port)                   # a client that skips the board's proof and guesses
    ch.send({"op": "auth", "proof": "00" * 32})
    reply, _, _ = ch.recv(5, 0)
    assert reply == {"v": 1, "ok": False, "kind": "auth",
                     "error": "authentication failed: the client's proof is wrong (it does not hold this "
                              "board's key)"}
    assert _closed(ch.sock)
    keyed.wait_idle()
    with keyed.connect(secret=SECRET) as dev:     # and the board serves the next one
        dev.alloc(8)


def test_a_proof_that_is_not_an_ascii_string_is_refused_cleanly(keyed):
    # hmac.compare_digest raises TypeError on a non-ASCII str; a lone surrogate (valid JSON) cannot be encoded
    for forged in ("é" * 64, "\ud800" * 64, 12345, ["00"] * 32, None):
        ch = _raw_hello(keyed.port)
        ch.send({"op": "auth", "proof": forged})
        reply, _, _ = ch.recv(5, 0)
        assert (reply["kind"], reply["ok"]) == ("auth", False), forged
        assert _closed(ch.sock)
    assert not any(protocol.proof_matches(v, "0" * 64) for v in ("é" * 64, "\ud800" * 64, None, 0, "0" * 63))


def test_a_client_that_leaves_or_stalls_in_the_handshake_never_holds_the_board(keyed):
    """The board is taken only once a client has authenticated: one that got the challenge and went quiet, or
    walked away, does not make the next client hear "busy" (it did, while the server's thread had not yet
    noticed it leave: the KeyError 'op' of a raw hello under load)."""
    stalled = _raw_hello(keyed.port)                  # got the challenge, says nothing more, stays connected
    with pytest.raises(AuthError, match="requires a key"):
        keyed.connect()                               # and one that walked away after the challenge
    _raw_hello(keyed.port).sock.close()
    with keyed.connect(secret=SECRET) as dev:         # served at once, no BoardBusy
        dev.alloc(8)
    stalled.sock.close()
    keyed.wait_idle()


class _SlowFree(SimDevice):
    """Frees slowly, so that a server freeing after it answered "close" is caught doing so."""

    def free(self, buf) -> None:
        time.sleep(0.3)
        super().free(buf)


def test_a_closed_session_has_freed_the_board_when_close_returns(board):
    board.device = _SlowFree(CFG)
    dev = board.connect()
    dev.copy_in(dev.alloc(64), b"a" * 64)
    dev.close()
    assert not board.server.session_active.is_set() and board.allocated() == []
    with board.connect() as again:                    # no wait: the board is free
        again.alloc(8)


def _one_reply_board(reply: dict) -> tuple[socket.socket, threading.Thread]:
    """A fake board that answers a hello with ``reply`` (where the challenge belongs)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            ch = Channel(conn, read_timeout=5)
            ch.recv(5, 0)
            ch.send(reply)
            _closed(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


@pytest.mark.parametrize("reply, error, match", [
    ({"ok": False, "error": "serving another session", "kind": "busy"}, BoardBusy, "serving another session"),
    ({"ok": False, "error": "handshake timed out", "kind": "timeout"}, RemoteError, "handshake timed out"),
    ({"ok": False, "error": "protocol version 2", "kind": "version"}, ProtocolError, "protocol version 2"),
    ({"op": "ready", "ok": True}, ProtocolError, "expected the 'challenge' message, got 'ready'"),
    ({"error": "no op, no ok"}, ProtocolError, "expected the 'challenge' message, got 'None'"),
])
def test_a_refusal_where_the_challenge_belongs_raises_what_it_says(reply, error, match):
    listener, thread = _one_reply_board(reply)
    try:
        with pytest.raises(error, match=match) as caught:
            RemoteDevice("127.0.0.1", listener.getsockname()[1], timeout=5)
        assert not isinstance(caught.value, KeyError)
        if error is RemoteError:
            assert caught.value.kind == "timeout"
    finally:
        thread.join(10)
        listener.close()


def test_every_secret_comparison_goes_through_compare_digest(keyed, monkeypatch):
    """Proofs and tags are compared in constant time: each goes through ``protocol.same_secret``, which is
    ``hmac.compare_digest`` (seen here by recording its calls, not by timing)."""
    seen: list[tuple[bytes, bytes, bool]] = []
    compare_digest = protocol.hmac.compare_digest

    def recording(a, b):
        result = compare_digest(a, b)
        seen.append((bytes(a), bytes(b), result))
        return result

    monkeypatch.setattr(protocol.hmac, "compare_digest", recording)
    ch = _raw_hello(keyed.port)                       # the board checks a forged client proof
    ch.send({"op": "auth", "proof": "ab" * 32})
    assert ch.recv(5, 0)[0]["kind"] == "auth"
    assert (b"ab" * 32, False) in [(a, r) for a, _, r in seen]
    keyed.wait_idle()

    seen.clear()                                      # the client checks a board's proof (another key)
    with pytest.raises(AuthError, match="could not prove"):
        keyed.connect(secret=b"x" * 32)
    assert [r for _, _, r in seen] == [False] and len(seen[0][0]) == 64
    keyed.wait_idle()

    dev = keyed.connect(secret=SECRET)
    seen.clear()
    dev.alloc(64)                                     # an honest message: its tag compared both ways
    assert [(len(a), r) for a, _, r in seen] == [(32, True), (32, True)]
    seen.clear()
    dev._ch.secure(b"k" * 32, dev._ch._recv_key)      # a forged tag
    with pytest.raises(BoardLost):
        dev.alloc(64)
    keyed.wait_idle()
    assert (32, False) in [(len(a), r) for a, _, r in seen]


def test_a_keyed_client_does_not_trust_a_keyless_board(board):
    with pytest.raises(AuthError, match="does not authenticate"):
        board.connect(secret=SECRET)


def test_a_message_with_a_bad_tag_ends_the_session(keyed):
    dev = keyed.connect(secret=SECRET)
    dev.alloc(64)
    dev._ch.secure(b"k" * 32, dev._ch._recv_key)   # forge: the next message carries a wrong tag
    with pytest.raises(BoardLost):
        dev.alloc(64)
    keyed.wait_idle()


def test_without_a_key_the_server_binds_loopback_only():
    server = BoardServer(lambda: SimDevice(CFG), key="sim", host="0.0.0.0", port=0)
    assert server.host == "127.0.0.1" and "127.0.0.1 only" in server.notice


def test_the_cli_says_it_binds_loopback_only():
    proc = subprocess.Popen([sys.executable, "-m", "vta", "rpc", "server", "--device", "sim", "--host", "0.0.0.0",
                             "--port", "0", "--key", "sim"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = _first_line(proc, 60, "the board")
        assert "listening on 127.0.0.1:" in line
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert "no key file: serving 127.0.0.1 only, not 0.0.0.0" in err


def test_the_tracker_and_the_server_say_each_thing_once(tmp_path):
    """`vta rpc tracker` and `vta rpc server` printed their ready line on stdout and logged it on stderr (and the
    server its loopback notice twice): each is said once now, and the server's ready line says it is registering,
    which the log confirms when it has."""
    def start(*argv: str, err: Path) -> subprocess.Popen:
        with open(err, "w") as e:
            return subprocess.Popen([sys.executable, "-m", "vta", "rpc", *argv], stdout=subprocess.PIPE, stderr=e,
                                    text=True)

    tracker = start("tracker", "--port", "0", err=tmp_path / "tracker.err")
    server = None
    try:
        ready = _first_line(tracker, 60, "the tracker")
        assert ready.startswith("tracker listening on 127.0.0.1:")
        address = ready.rsplit(" ", 1)[1]
        server = start("server", "--tracker", address, "--device", "sim", "--port", "0", "--key", "sim", "--host",
                       "0.0.0.0", err=tmp_path / "server.err")
        line = _first_line(server, 60, "the board")
        assert "listening on 127.0.0.1:" in line and line.endswith(f", registering with {address} as 'sim'")
        deadline = time.monotonic() + 60
        while "registered with the tracker" not in (tmp_path / "server.err").read_text():
            assert time.monotonic() < deadline and server.poll() is None, (tmp_path / "server.err").read_text()
            time.sleep(0.05)
    finally:
        for proc in (server, tracker):
            if proc is not None:
                proc.terminate()
                proc.communicate(timeout=20)
    tracker_err, server_err = (tmp_path / "tracker.err").read_text(), (tmp_path / "server.err").read_text()
    assert "listening on" not in tracker_err + server_err, tracker_err + server_err
    assert server_err.count("serving 127.0.0.1 only") == 1, server_err
    assert server_err.count("registered with the tracker at") == 1, server_err


# ------------------------------------------------------------------------------------------------------------
# hostile clients

def _closed(sock: socket.socket, within: float = 5.0) -> bool:
    sock.settimeout(within)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, BrokenPipeError):
        pass
    except TimeoutError:
        return False
    return True


def _raw_hello(port: int) -> Channel:
    ch = Channel(socket.create_connection(("127.0.0.1", port), timeout=5), read_timeout=5)
    ch.send({"op": "hello", "client_nonce": new_nonce().hex(), "matchkey": None, "client": "test"})
    expect_message(ch.recv(5, 0)[0], "challenge", f"127.0.0.1:{port}")   # a refusal raises what it says
    return ch


def _raw_session(port: int) -> Channel:
    ch = _raw_hello(port)
    ch.send({"op": "auth", "proof": None})
    expect_message(ch.recv(5, 0)[0], "ready", f"127.0.0.1:{port}")
    return ch


def _frame(header: bytes, payload_len: int = 0) -> bytes:
    return PREFIX.pack(b"VTAR", len(header), payload_len) + header


BEFORE = {
    "http": lambda s: s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
    "4 GiB header": lambda s: s.sendall(PREFIX.pack(b"VTAR", 0xFFFFFFFF, 0)),
    "4 GiB payload": lambda s: s.sendall(_frame(b'{"v":1,"op":"hello"}', 4 << 30)),
    "not JSON": lambda s: s.sendall(_frame(b"\xff\xfe{")),
    "half a prefix": lambda s: s.sendall(b"VTAR\x10\x00"),
    "half a header": lambda s: s.sendall(PREFIX.pack(b"VTAR", 100, 0) + b'{"v": 1, '),
    "no nonce": lambda s: s.sendall(_frame(b'{"v":1,"op":"hello"}')),
    "another version": lambda s: s.sendall(_frame(b'{"v":2,"op":"hello"}')),
}


@pytest.mark.parametrize("attack", list(BEFORE))
def test_hostile_handshakes_are_dropped_and_do_not_block_the_board(board, attack):
    evil = socket.create_connection(("127.0.0.1", board.port), timeout=5)
    BEFORE[attack](evil)
    with board.connect() as dev:   # served while the attacker is still connected (or stalling)
        dev.alloc(16)
    assert _closed(evil), attack   # dropped (a stall after the board's 1 s handshake timeout)
    board.wait_idle()


def test_a_tvm_client_is_told_mismatch(board):
    sock = socket.create_connection(("127.0.0.1", board.port), timeout=5)
    key = b"client:sim:0.5"
    sock.sendall(struct.pack("<i", 0xFF271) + struct.pack("<i", len(key)) + key)
    assert struct.unpack("<i", sock.recv(4))[0] == 0xFF271 + 2   # TVM's RPC_CODE_MISMATCH
    assert _closed(sock)


IN_SESSION = {
    "4 GiB payload": lambda ch, addr: ch.sock.sendall(_frame(b'{"v":1,"op":"copy_in","addr":%d,"offset":0}' % addr,
                                                             4 << 30)),
    "unknown op": lambda ch, addr: ch.send({"op": "format_disk"}),
    "wrong type": lambda ch, addr: ch.send({"op": "alloc", "nbytes": "lots"}),
    "payload where none belongs": lambda ch, addr: ch.send({"op": "alloc", "nbytes": 16}, b"abc"),
    "half a payload": lambda ch, addr: ch.sock.sendall(_frame(b'{"v":1,"op":"copy_in","addr":%d,"offset":0}' % addr,
                                                              64) + b"x" * 10),
    "half a prefix": lambda ch, addr: ch.sock.sendall(b"VTA"),
}


@pytest.mark.parametrize("attack", list(IN_SESSION))
def test_hostile_sessions_are_dropped_and_freed(board, attack):
    ch = _raw_session(board.port)
    ch.send({"op": "alloc", "nbytes": 64})
    reply, _, _ = ch.recv(5, 0)
    IN_SESSION[attack](ch, reply["addr"])
    assert _closed(ch.sock), attack      # dropped (stalls after the 1 s read timeout)
    board.wait_idle()                    # and its buffer freed
    with board.connect() as dev:
        assert dev.run(_load_at(dev, dev.alloc(64).addr)).inp_load_nbytes == 64


def test_a_refused_payload_is_skipped_and_the_session_goes_on(board):
    ch = _raw_session(board.port)
    ch.send({"op": "copy_in", "addr": 12345, "offset": 0}, b"q" * 1000)   # no such buffer: refused, payload dropped
    reply, _, _ = ch.recv(5, 0)
    assert reply["ok"] is False and "no buffer" in reply["error"]
    ch.send({"op": "run", "compute": True, "trace": False}, b"x" * 17)    # not whole instructions
    reply, _, _ = ch.recv(5, 0)
    assert reply["ok"] is False and "whole number" in reply["error"]
    ch.send({"op": "alloc", "nbytes": 16})
    assert ch.recv(5, 0)[0]["ok"] is True
    ch.send({"op": "close"})
    assert ch.recv(5, 0)[0]["ok"] is True
    board.wait_idle()


# ------------------------------------------------------------------------------------------------------------
# with a tracker

@pytest.fixture
def tracked():
    tracker = TrackerServer("127.0.0.1", 0).start()
    b = Board(tracker=tracker.address, ping_period=0.2, unmatch_timeout=0.4)
    yield tracker, b
    b.server.stop()
    tracker.stop()


def _free(tracker: TrackerServer) -> int:
    return tracker.summary()["queue_info"].get("sim", {}).get("free", 0)


def _wait(predicate, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition not reached in time"
        time.sleep(0.05)


def test_a_board_through_the_tracker(tracked):
    tracker, b = tracked
    _wait(lambda: _free(tracker) == 1)
    with pytest.raises(MatchMismatch):
        b.connect()                                   # registered boards take matched clients only
    with connect_device(tracker.address, "sim", CFG, timeout=10) as dev:
        assert _free(tracker) == 0
        dev.alloc(64)
        with pytest.raises(TimeoutError, match="no 'sim' board became free"):   # the one board is busy
            connect_device(tracker.address, "sim", request_timeout=0.3)
    _wait(lambda: _free(tracker) == 1)                # registered again when the session ended
    b.wait_idle()
    with pytest.raises(ValueError, match="runs pynq_1x16"):   # a board of another config is refused
        connect_device(tracker.address, "sim", load_config("pynq", LOG_BLOCK=5))
    _wait(lambda: _free(tracker) == 1)


def test_a_match_nobody_uses_is_registered_again(tracked):
    tracker, _ = tracked
    _wait(lambda: _free(tracker) == 1)
    host, port, stale = request_board(tracker.address, "sim", timeout=5)
    assert _free(tracker) == 0
    _wait(lambda: _free(tracker) == 1, timeout=5)     # the board saw its match unused and offered itself again
    with pytest.raises(MatchMismatch):
        RemoteDevice(host, port, matchkey=stale)
    with connect_device(tracker.address, "sim") as dev:
        dev.alloc(8)


def test_a_board_a_client_refuses_in_the_handshake_offers_itself_again_at_once(tmp_path):
    """A keyed client meeting a keyless board refuses it (AuthError): the board offered itself again only after
    its unmatch timeout (8 s here with the defaults), so a runner with the wrong key file waited 16 s for its
    error. Now it is free again as soon as the client has left, and its taker is not penalised."""
    key = tmp_path / "lab.key"
    key.write_text("k" * 64)
    tracker = TrackerServer("127.0.0.1", 0).start()
    b = Board(tracker=tracker.address, ping_period=0.2, unmatch_timeout=60)   # the timeout alone: a minute
    try:
        _wait(lambda: _free(tracker) == 1)
        for _ in range(3):
            with pytest.raises(AuthError, match="does not authenticate"):
                connect_device(tracker.address, "sim", key_file=key, timeout=5, attempts=1)
            _wait(lambda: _free(tracker) == 1, timeout=5)
        with connect_device(tracker.address, "sim", request_timeout=5) as dev:   # served at once: no penalty
            dev.alloc(8)
    finally:
        b.server.stop()
        tracker.stop()


def test_a_board_registers_again_when_the_tracker_comes_back(tracked):
    tracker, b = tracked
    _wait(lambda: _free(tracker) == 1)
    port = tracker.port
    tracker.stop()
    again = TrackerServer("127.0.0.1", port).start()
    try:
        _wait(lambda: _free(again) == 1, timeout=15)
        assert [s["board"] for s in again.summary()["server_info"]] == [b.server.name]
        with TrackerClient(again.address) as q:
            assert "sim   1      1     0" in q.text_summary()
    finally:
        again.stop()


def test_graph_pack_build_runs_on_a_remote_board(tracked):
    import graph_pack
    from vta import Environment

    tracker, _ = tracked
    env = Environment(CFG)
    graph, params = graph_pack.zoo.get_model("resnet-18", batch_size=1, image_shape=(3, 32, 32))
    qgraph, qparams = graph_pack.quantize(graph, params, global_scale=8.0, skip_conv_layers=[0])
    packed = graph_pack.graph_pack(qgraph, env, start_name="nn.max_pool2d", stop_name="nn.global_avg_pool2d")
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    local = graph_pack.build(packed, env, qparams)
    local.set_input("data", x)
    local.run()
    _wait(lambda: _free(tracker) == 1)
    with connect_device(tracker.address, "sim", env.cfg) as board:
        mod = graph_pack.build(packed, env, qparams, device=board)
        for _ in range(2):   # weights staged once; runs again on the same board buffers
            mod.set_input("data", x)
            mod.run()
            assert np.array_equal(mod.get_output(0), local.get_output(0))
        assert mod.stats.cycles == local.stats.cycles


def test_stalled_handshakes_cannot_lock_the_board_out():
    """More stalled handshakes than slots: each new connection drops the oldest unfinished one at once (the
    handshake timeout, an hour here, never comes into it), so a client is served and stallers do not pile up."""
    b = Board(handshake_timeout=3600)
    slots = b.server.max_handshakes
    stallers = []
    try:
        for _ in range(3 * slots):
            s = socket.create_connection(("127.0.0.1", b.port), timeout=5)
            s.sendall(b"VTAR\x10")
            stallers.append(s)
        with b.connect() as dev:
            dev.alloc(16)
        # every connection after the first `slots` dropped the oldest: only the newest slots - 1 stallers are left
        assert all(_closed(s) for s in stallers[:-(slots - 1)])
        assert all(_still_open(s) for s in stallers[-(slots - 1):])
        b.wait_idle()
    finally:
        for s in stallers:
            s.close()
        b.server.stop()


def _still_open(sock: socket.socket) -> bool:
    """Nothing to read and not closed (looked at without waiting)."""
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def test_server_memory_stays_bounded_under_a_flood():
    """A board server process (the CLI's) flooded with connections that claim huge frames or stall mid-frame:
    its memory does not grow with the claims, and a client is served right after."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc")
    proc = subprocess.Popen([sys.executable, "-m", "vta", "rpc", "server", "--device", "sim", "--port", "0",
                             "--key", "sim", "--read-timeout", "1", "--quiet"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        port = int(_first_line(proc, 60, "the board").split("listening on 127.0.0.1:")[1].split(",")[0])
        with RemoteDevice("127.0.0.1", port) as dev:   # warm up (first session, simulator created)
            dev.alloc(16)
        before = _rss_kib(proc.pid)
        for round_ in range(5):
            evil = []
            for i in range(40):
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                if i % 2:
                    s.sendall(PREFIX.pack(b"VTAR", 60_000, 4 << 30) + b"{" * 30_000)   # 4 GiB claim, half a header
                else:
                    s.sendall(PREFIX.pack(b"VTAR", 0xFFFFFFFF, 0))
                evil.append(s)
            with RemoteDevice("127.0.0.1", port) as dev:
                assert dev.run(_load_at(dev, dev.alloc(64).addr)).inp_load_nbytes == 64
            for s in evil:
                s.close()
        assert _rss_kib(proc.pid) - before < 32 << 10
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")
