"""The simulated PYNQ board against clients that stall or flood it (issue 25, items 5 and 6): a real server in a
child process on 127.0.0.1, attackers on connections of their own (as other machines would be), every stream
and channel released and the server stopped at the end. A legitimate client must be served *while* the attack
runs (hang guards only, no timing thresholds)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from extras import need
from test_sim_board import Client, MiB, assert_accounted


@pytest.fixture(scope="module")
def remote():
    need("pynq")
    from vta.board.pynq_support import import_remote
    return import_remote()


def _channel(grpc, address: str):
    """A connection of its own (a process's channels to one address share one by default)."""
    return grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_stalled_streams_cannot_take_every_worker(remote, tmp_path):
    """The issue's attack: as many client streams as the board has workers (16), each sending one chunk and then
    nothing, from connections of their own, plus six from one connection. Before, every worker waited on them
    and a legitimate client's calls ran into their deadlines for as long as the stall lasted. Now one
    connection may have 4 calls in flight, at most 8 calls wait on their clients (a new call cancels the one
    waiting longest), and a call that waits on its client for --client-timeout-s is cancelled."""
    from vta.board.local import LocalBoard
    grpc, pb = remote
    rd = pb["remote_device"]
    stop = threading.Event()

    def stall(i: int) -> Iterator:
        yield rd.WriteFileRequest(file_path=f"/lib/firmware/stall{i}.bin", data=b"x" * 1024)
        stop.wait(120)

    board = LocalBoard("--client-timeout-s", "5", log_path=tmp_path / "server.log").start()
    channels, calls = [], []
    good = Client(remote, board.address)
    try:
        for i in range(16):
            channels.append(_channel(grpc, board.address))
            calls.append(pb["remote_device_grpc"].RemoteDeviceStub(channels[-1]).writefile.future(stall(i)))
        greedy = _channel(grpc, board.address)
        channels.append(greedy)
        greedy_calls = [pb["remote_device_grpc"].RemoteDeviceStub(greedy).writefile.future(stall(100 + i))
                        for i in range(6)]
        # served while every stalled stream is still held open by its client
        bid = good.alloc(64 * 1024)
        good.write(bid, b"\x5a" * (64 * 1024))
        assert good.read(bid) == b"\x5a" * (64 * 1024)
        good.free(bid)
        assert_accounted(good.status())
        # one connection gets 4 calls; the board cancels every stalled call (evicted, or timed out)
        codes = [c.exception(timeout=60) for c in calls + greedy_calls]
        assert all(e is not None for e in codes), "a stalled stream was never ended by the board"
        names = [e.code().name for e in codes]
        assert names.count("RESOURCE_EXHAUSTED") >= 2 and "--max-peer-rpcs" in " ".join(
            e.details() for e in codes if e.code().name == "RESOURCE_EXHAUSTED")
        assert set(names) <= {"CANCELLED", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED"}, names
        assert not stop.is_set()
    finally:
        stop.set()
        for c in calls:
            c.cancel()
        for ch in channels:
            ch.close()
        good.close()
        assert board.stop() == 0


def test_uploads_together_hold_a_bounded_amount_of_memory(remote, tmp_path):
    """The issue's attack, at a quarter of its size: 8 concurrent 15 MiB writefile streams on a board that takes
    files of 16 MiB (--max-file-mb 16; uploads in progress: 32 MiB together by default). Before, all of them
    were held at once (twice: the chunks and the joined file); now the chunk that would take the uploads past
    the bound ends its stream with RESOURCE_EXHAUSTED naming the bound, the others complete, and the server's
    peak memory grows by far less than the 240 MiB the attack used to cost."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc")
    from vta.board.local import LocalBoard
    grpc, pb = remote
    rd = pb["remote_device"]
    board = LocalBoard("--max-file-mb", "16", log_path=tmp_path / "server.log").start()
    together = threading.Barrier(8, timeout=30)
    chunk = b"\x33" * MiB
    results: list = [None] * 8

    def upload(i: int) -> None:
        def chunks() -> Iterator:
            yield rd.WriteFileRequest(file_path=f"/lib/firmware/big{i}.bin", data=chunk)
            try:
                together.wait()
            except threading.BrokenBarrierError:
                pass
            for _ in range(14):
                yield rd.WriteFileRequest(file_path=f"/lib/firmware/big{i}.bin", data=chunk)

        with _channel(grpc, board.address) as channel:
            try:
                pb["remote_device_grpc"].RemoteDeviceStub(channel).writefile(chunks(), timeout=120)
                results[i] = "ok"
            except grpc.RpcError as e:
                results[i] = (e.code().name, e.details())

    try:
        before = _peak_rss_kib(board.proc.pid)
        threads = [threading.Thread(target=upload, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert not any(t.is_alive() for t in threads)
        refused = [r for r in results if r != "ok"]
        assert "ok" in results and refused, results
        for code, details in refused:
            assert code == "RESOURCE_EXHAUSTED" and "--max-upload-mb" in details, (code, details)
        assert (_peak_rss_kib(board.proc.pid) - before) < 120 << 10
        assert board.alive()
    finally:
        assert board.stop() == 0
