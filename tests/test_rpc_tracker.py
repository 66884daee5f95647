"""The tracker: TVM's tracker protocol on the wire (matching, priorities, drops, summary), hostile peers, and
TVM's own query_rpc_tracker and RPC server/client using ours (in the tvm-venv)."""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from extras import need, needs

from vta.rpc import TrackerClient, TrackerCode, TrackerServer, format_summary
from vta.rpc.base import TRACKER_MAGIC, recv_tracker_json, tracker_frame
from vta.rpc.local import _first_line

PEER = Path(__file__).resolve().parent / "tvm_peer"


@pytest.fixture
def tracker():
    t = TrackerServer("127.0.0.1", 0, handshake_timeout=1.0, frame_timeout=0.5).start()
    yield t
    t.stop()


def connect(t: TrackerServer | int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", t if isinstance(t, int) else t.port), timeout=5)
    sock.sendall(struct.pack("<i", TRACKER_MAGIC))
    assert struct.unpack("<i", sock.recv(4))[0] == TRACKER_MAGIC
    return sock


def ask(sock: socket.socket, message, timeout: float = 5.0):
    sock.sendall(tracker_frame(message))
    return recv_tracker_json(sock, time.monotonic() + timeout)


def register(t: TrackerServer, key: str, port: int, name: str = "b") -> tuple[socket.socket, str]:
    """A board as TVM's server registers it: UPDATE_INFO, then PUT with a KEY:RANDOM match key."""
    sock = connect(t)
    assert ask(sock, [TrackerCode.UPDATE_INFO, {"key": f"server:{key}", "addr": [None, port]}]) == 0
    matchkey = f"{key}:{name}{port}"
    assert ask(sock, [TrackerCode.PUT, key, [port, matchkey], None]) == 0
    return sock, matchkey


def closed_by_peer(sock: socket.socket, within: float = 5.0) -> bool:
    sock.settimeout(within)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def wait_for(predicate, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition not reached in time"
        time.sleep(0.02)


def test_requests_are_served_by_priority_then_in_order(tracker):
    low, high, high2 = connect(tracker), connect(tracker), connect(tracker)
    for sock, priority in ((low, 1), (high, 5), (high2, 5)):
        sock.sendall(tracker_frame([TrackerCode.REQUEST, "pynq", "", priority]))
    with TrackerClient(("127.0.0.1", tracker.port)) as q:
        wait_for(lambda: q.summary()["queue_info"].get("pynq", {}).get("pending") == 3)
    board, matchkey = register(tracker, "pynq", 9091)
    got = recv_tracker_json(high, time.monotonic() + 5)
    assert got == [TrackerCode.SUCCESS, ["127.0.0.1", 9091, matchkey]]   # highest priority, first come
    assert ask(board, [TrackerCode.GET_PENDING_MATCHKEYS]) == []          # its match key was taken
    assert ask(board, [TrackerCode.PUT, "pynq", [9091, "pynq:second"], "10.0.0.7"]) == 0
    assert recv_tracker_json(high2, time.monotonic() + 5) == [0, ["10.0.0.7", 9091, "pynq:second"]]
    assert ask(board, [TrackerCode.PUT, "pynq", [9091, "pynq:third"], None]) == 0
    assert recv_tracker_json(low, time.monotonic() + 5)[1][2] == "pynq:third"
    summary = TrackerClient(("127.0.0.1", tracker.port)).summary()
    assert summary["queue_info"]["pynq"] == {"free": 0, "pending": 0}
    assert summary["server_info"] == [{"key": "server:pynq", "addr": ["127.0.0.1", 9091]}]


def test_a_board_that_disconnects_is_dropped_and_registers_again(tracker):
    board, _ = register(tracker, "pynq", 9091)
    _other, _ = register(tracker, "pynq", 9092, "c")
    q = TrackerClient(("127.0.0.1", tracker.port))
    assert q.summary()["queue_info"]["pynq"]["free"] == 2
    board.close()
    wait_for(lambda: q.summary()["queue_info"]["pynq"]["free"] == 1)
    assert [s["addr"][1] for s in q.summary()["server_info"]] == [9092]
    _again, _ = register(tracker, "pynq", 9091)   # rebooted: registers again
    wait_for(lambda: q.summary()["queue_info"]["pynq"]["free"] == 2)
    assert sorted(s["addr"][1] for s in q.summary()["server_info"]) == [9091, 9092]
    assert q.request("pynq", timeout=5)[1] == 9092   # FIFO: the board that waited longest first


def test_a_lost_match_goes_back_to_the_queue(tracker):
    gone = connect(tracker)
    gone.sendall(tracker_frame([TrackerCode.REQUEST, "pynq", "", 1]))
    q = TrackerClient(("127.0.0.1", tracker.port))
    wait_for(lambda: q.summary()["queue_info"].get("pynq", {}).get("pending") == 1)
    gone.close()   # the requester leaves before any board is free: its request is withdrawn
    wait_for(lambda: q.summary()["queue_info"]["pynq"]["pending"] == 0)
    _, matchkey = register(tracker, "pynq", 9091)
    assert q.summary()["queue_info"]["pynq"] == {"free": 1, "pending": 0}
    assert q.request("pynq", timeout=5) == ("127.0.0.1", 9091, matchkey)


def test_a_request_times_out_and_is_withdrawn(tracker):
    q = TrackerClient(("127.0.0.1", tracker.port))
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="no 'pynq' board"):
        q.request("pynq", timeout=0.3)
    assert time.monotonic() - t0 < 3
    with TrackerClient(("127.0.0.1", tracker.port)) as q2:
        wait_for(lambda: q2.summary()["queue_info"]["pynq"]["pending"] == 0)


def test_one_connection_may_have_64_requests_waiting_and_not_65(tracker):
    """MAX_REQUESTS_PER_CONNECTION is 64: sixty-four REQUESTs on one connection all wait (the queue says 64 pending,
    the connection still answers PING); the sixty-fifth drops the connection, and its requests with it."""
    from vta.rpc.tracker import MAX_REQUESTS_PER_CONNECTION

    assert MAX_REQUESTS_PER_CONNECTION == 64
    sock = connect(tracker)
    sock.sendall(b"".join(tracker_frame([TrackerCode.REQUEST, "pynq", "", 1]) for _ in range(64)))
    assert ask(sock, [TrackerCode.PING]) == TrackerCode.SUCCESS            # after the 64: still served
    with TrackerClient(("127.0.0.1", tracker.port)) as q:
        assert q.summary()["queue_info"]["pynq"]["pending"] == 64
        sock.sendall(tracker_frame([TrackerCode.REQUEST, "pynq", "", 1]) + tracker_frame([TrackerCode.PING]))
        assert closed_by_peer(sock)
        wait_for(lambda: q.summary()["queue_info"]["pynq"]["pending"] == 0)


def test_ping_stop_and_unknown_codes(tracker):
    sock = connect(tracker)
    assert ask(sock, [TrackerCode.PING]) == TrackerCode.SUCCESS
    assert ask(sock, [TrackerCode.STOP, "guess"]) == TrackerCode.FAIL   # only the tracker's own stop key
    assert ask(sock, [TrackerCode.PING]) == TrackerCode.SUCCESS
    sock.sendall(tracker_frame([99]))
    assert closed_by_peer(sock)


HOSTILE = {
    "bad magic": lambda s: s.sendall(struct.pack("<i", 0x1234)),
    "4 GiB frame": lambda s: s.sendall(struct.pack("<i", TRACKER_MAGIC) + b"\xff\xff\xff\xff"),
    "2 GiB frame": lambda s: s.sendall(struct.pack("<i", TRACKER_MAGIC) + struct.pack("<i", 0x7FFFFFFF)),
    "zero frame": lambda s: s.sendall(struct.pack("<i", TRACKER_MAGIC) + struct.pack("<i", 0)),
    "not JSON": lambda s: s.sendall(struct.pack("<i", TRACKER_MAGIC) + struct.pack("<i", 5) + b"\x80abc{"),
    "not a list": lambda s: s.sendall(struct.pack("<i", TRACKER_MAGIC) + tracker_frame({"code": 3})),
    "bad PUT": lambda s: s.sendall(struct.pack("<i", TRACKER_MAGIC) + tracker_frame([3, "pynq", "x"])),
    "PUT of another key": lambda s: s.sendall(struct.pack("<i", TRACKER_MAGIC)
                                              + tracker_frame([3, "pynq", [1, "other:1"], None])),
    "bad priority": lambda s: s.sendall(struct.pack("<i", TRACKER_MAGIC) + tracker_frame([4, "pynq", "", "high"])),
    "deep JSON": lambda s: s.sendall(struct.pack("<i", TRACKER_MAGIC) + struct.pack("<i", 20000)
                                     + b"[" * 10000 + b"]" * 10000),
    "half a size": lambda s: s.sendall(struct.pack("<i", TRACKER_MAGIC) + b"\x10\x00"),
    "half a frame": lambda s: s.sendall(struct.pack("<i", TRACKER_MAGIC) + struct.pack("<i", 100) + b"[1, "),
    "half the magic": lambda s: s.sendall(b"\x71"),
    "a key with a newline": lambda s: s.sendall(struct.pack("<i", TRACKER_MAGIC)
                                                + tracker_frame([4, "pynq\nINFO forged line", "", 1])),
    "a match key with an escape": lambda s: s.sendall(struct.pack("<i", TRACKER_MAGIC)
                                                      + tracker_frame([3, "pynq", [1, "pynq:\x1b[2Jx"], None])),
}


@pytest.mark.parametrize("attack", list(HOSTILE))
def test_hostile_peers_are_dropped_without_harming_others(tracker, attack):
    board, matchkey = register(tracker, "pynq", 9091)
    bystander = connect(tracker)
    evil = socket.create_connection(("127.0.0.1", tracker.port), timeout=5)
    HOSTILE[attack](evil)
    t0 = time.monotonic()
    assert closed_by_peer(evil, 5.0), f"{attack}: the tracker kept the connection"
    assert time.monotonic() - t0 < 3   # stalls are dropped after the frame/handshake timeout (0.5 s / 1 s)
    assert ask(bystander, [TrackerCode.PING]) == TrackerCode.SUCCESS
    assert ask(board, [TrackerCode.GET_PENDING_MATCHKEYS]) == [matchkey]
    assert tracker.summary()["queue_info"]["pynq"] == {"free": 1, "pending": 0}


def test_connection_limit():
    with TrackerServer("127.0.0.1", 0, max_connections=4) as t:
        socks = [connect(t) for _ in range(4)]
        extra = socket.create_connection(("127.0.0.1", t.port), timeout=5)
        assert closed_by_peer(extra)
        socks.pop().close()
        time.sleep(0.1)
        assert ask(connect(t), [TrackerCode.PING]) == 0


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_memory_stays_bounded_under_a_flood(tmp_path):
    """200 connections each sending most of a maximal frame and stalling: the tracker (its own process) holds
    at most max_connections x 64 KiB, drops them all after the frame timeout, and serves others meanwhile."""
    proc = subprocess.Popen([sys.executable, "-m", "vta", "rpc", "tracker", "--port", "0", "--frame-timeout", "1",
                             "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = int(_first_line(proc, 60, "the tracker").rsplit(":", 1)[1])
        good = connect(port)
        before = _rss_kib(proc.pid)
        evil = []
        for _ in range(200):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(struct.pack("<i", TRACKER_MAGIC) + struct.pack("<i", 64 << 10) + b"x" * (60 << 10))
            evil.append(s)
        time.sleep(0.5)
        assert ask(good, [TrackerCode.PING]) == 0
        peak = _rss_kib(proc.pid)
        assert peak - before < 48 << 10, f"RSS grew by {(peak - before) >> 10} MiB"
        assert all(closed_by_peer(s, 5.0) for s in evil)
        assert ask(good, [TrackerCode.PING]) == 0
        for _ in range(2):   # again: nothing accumulates
            for s in evil:
                s.close()
            evil = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(200)]
            for s in evil:
                s.sendall(struct.pack("<i", TRACKER_MAGIC) + b"\xff\xff\xff\xff")
            assert all(closed_by_peer(s, 6.0) for s in evil)
        assert _rss_kib(proc.pid) - before < 48 << 10
        assert ask(good, [TrackerCode.PING]) == 0
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()


def test_query_prints_tvms_table(tracker, capsys):
    from vta.cli import main
    _boards = [register(tracker, "pynq", 9091), register(tracker, "pynq", 9092, "c"),
               register(tracker, "ultra96", 9093, "d")]
    waiting = connect(tracker)
    waiting.sendall(tracker_frame([TrackerCode.REQUEST, "zcu104", "", 1]))
    wait_for(lambda: tracker.summary()["queue_info"].get("zcu104", {}).get("pending") == 1)
    assert main(["rpc", "query", "--tracker", f"127.0.0.1:{tracker.port}"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Tracker address 127.0.0.1:{tracker.port}\n\nServer List\n")
    assert "127.0.0.1:9091           server:pynq\n" in out
    rows = {line.split()[0]: line.split()[1:] for line in out.split("Queue Status")[1].splitlines()
            if line and line[0].isalpha() and not line.startswith("key")}
    assert rows == {"pynq": ["2", "2", "0"], "ultra96": ["1", "1", "0"], "zcu104": ["0", "0", "1"]}
    assert main(["rpc", "query", "--tracker", f"127.0.0.1:{tracker.port}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["queue_info"]["pynq"] == {"free": 2, "pending": 0}


def test_query_of_nothing_is_a_clear_error(capsys):
    from vta.cli import main
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["rpc", "query", "--tracker", f"127.0.0.1:{port}"]) == 2
    assert f"cannot reach the tracker at 127.0.0.1:{port}" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------------------
# the real peer: TVM in its own venv

def _tvm(python: str, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return subprocess.run([python, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False)


@needs("tvm-venv")
def test_tvms_query_rpc_tracker_reads_ours(tracker):
    python = need("tvm-venv")
    _boards = [register(tracker, "pynq", 9091), register(tracker, "sim", 9095, "s")]
    done = _tvm(python, "-m", "tvm.exec.query_rpc_tracker", "--host", "127.0.0.1", "--port", str(tracker.port))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == f"Tracker address 127.0.0.1:{tracker.port}\n\n" + format_summary(tracker.summary()) + "\n"
    assert "pynq   1      1     0" in done.stdout


@needs("tvm-venv")
def test_tvms_server_and_client_work_through_ours(tracker, tmp_path):
    """TVM's RPC server registers with our tracker; TVM's client requests it through ours and uses it."""
    python = need("tvm-venv")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(tmp_path / "server.log", "w") as log:
        server = subprocess.Popen([python, "-m", "tvm.exec.rpc_server", "--tracker", f"127.0.0.1:{tracker.port}",
                                   "--key", "tvmcpu", "--host", "127.0.0.1", "--port", str(port), "--port-end",
                                   str(port + 1)], stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    try:
        wait_for(lambda: tracker.summary()["queue_info"].get("tvmcpu", {}).get("free") == 1, timeout=60)
        done = _tvm(python, str(PEER / "request_session.py"), "127.0.0.1", str(tracker.port), "tvmcpu")
        assert done.returncode == 0, done.stderr[-2000:]
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report["ok"] and report["summary"]["queue_info"]["tvmcpu"] == {"free": 1, "pending": 0}
        wait_for(lambda: tracker.summary()["queue_info"]["tvmcpu"]["free"] == 1, timeout=30)   # registered again
    finally:
        os.killpg(server.pid, 9)
        server.wait(10)


@pytest.mark.parametrize("priority", [10**400, -10**400, 10**20], ids=["1e400", "-1e400", "1e20"])
def test_a_priority_past_any_float_is_clamped_not_a_traceback(tracker, priority, caplog):
    """REQUEST's priority 10**400 raised OverflowError in float() (a traceback in the log, the connection dropped):
    an integer is clamped to [-max_priority, max_priority] first, like any other number."""
    _board, matchkey = register(tracker, "pynq", 9091)   # its socket keeps the board registered
    client = connect(tracker)
    with caplog.at_level(logging.WARNING, logger="vta.rpc.tracker"):
        assert ask(client, [TrackerCode.REQUEST, "pynq", "me", priority]) == [TrackerCode.SUCCESS,
                                                                               ["127.0.0.1", 9091, matchkey]]
    assert "Traceback" not in caplog.text and "OverflowError" not in caplog.text
