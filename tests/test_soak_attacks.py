"""Soak (issue 25): two keyed tuning clients, each on a board of its own through the tracker, and a client of the
simulated PYNQ board, all run to completion while an attacker thread without the key cycles through the
issue's attacks 1-8 (tracker connection flood, nested JSON, a keyless hello, hogging matches at priority 1e300,
stalled gRPC streams, concurrent uploads, cross-client DMA, a faulting run) and issue 41's 4-7 (a forged
unused-match report from a fake board, a departed client's source port reused, control register and download
loops, firmware poisoning). The tuning results equal those of
the same runs without the attacker, every trial measured once. Everything runs on 127.0.0.1 (the attacker on
127.0.0.2 and on connections of its own), each attack is bounded in count and time, and every thread, socket,
channel, server and process is stopped at the end; the only time limits are hang guards."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from extras import need
from test_sim_board import FIRMWARE, Client, FromPort, _free_port, _load, _store

from hw_config import load_config
from tuning.rpc_runner import RPCRunner
from tuning.task import conv_task
from vta.device import SimDevice
from vta.isa import FinishInsn, GemmInsn, assemble
from vta.rpc import BoardServer, TrackerClient, TrackerCode, TrackerServer
from vta.rpc.base import TRACKER_MAGIC, recv_tracker_json, tracker_frame
from vta.rpc.protocol import Channel, new_nonce

CFG = load_config("pynq")
SECRET = b"0123456789abcdef0123456789abcdef"
ATTACKER = "127.0.0.2"
MiB = 1 << 20


def _from_attacker(port: int) -> socket.socket:
    sock = socket.socket()
    sock.settimeout(5)
    sock.bind((ATTACKER, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def _tracker_conn(port: int) -> socket.socket:
    sock = _from_attacker(port)
    sock.sendall(struct.pack("<i", TRACKER_MAGIC))
    sock.recv(4)
    return sock


def _hello(port: int, matchkey: str | None) -> socket.socket:
    sock = _from_attacker(port)
    ch = Channel(sock, read_timeout=5)
    ch.send({"op": "hello", "client_nonce": new_nonce().hex(), "matchkey": matchkey, "client": "attacker"})
    ch.recv(5, 0)
    return sock


class Attacker:
    """Cycles through the attacks until stopped; each bounded in count and time, everything closed after it."""

    def __init__(self, tracker: TrackerServer, boards: list[BoardServer], sim_address: str, victim: int, remote):
        self.tracker, self.boards, self.sim_address, self.victim = tracker, boards, sim_address, victim
        self.grpc, self.pb = remote
        self.stop = threading.Event()
        self.done: Counter[str] = Counter()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, name="attacker", daemon=True)

    def _run(self) -> None:
        attacks: list[tuple[str, Callable[[], None]]] = [
            ("1 connection flood", self.flood), ("2 nested JSON", self.nested), ("3 keyless hello", self.hello),
            ("4 hogging matches", self.hog), ("5 stalled streams", self.stall), ("6 uploads", self.uploads),
            ("7 cross-client DMA", self.cross_dma), ("8 faulting run", self.fault),
            ("41.4 forged penalty", self.forged_penalty), ("41.5 borrowed port", self.borrowed_port),
            ("41.6 control registers", self.control_registers), ("41.7 firmware poisoning", self.poison_firmware)]
        while not self.stop.is_set():
            for name, attack in attacks:
                if self.stop.is_set():
                    return
                try:
                    attack()
                    self.done[name] += 1
                except Exception as e:  # noqa: BLE001 - an attack that fails is reported, the soak goes on
                    self.errors.append(f"{name}: {type(e).__name__}: {e}")

    def flood(self) -> None:
        with contextlib.ExitStack() as held:
            for _ in range(80):
                with contextlib.suppress(OSError):
                    held.enter_context(contextlib.closing(_tracker_conn(self.tracker.port)))
            self.stop.wait(0.5)

    def nested(self) -> None:
        body = b'[5, {"key": "server:x", "deep": ' + b"[" * 979 + b"]" * 979 + b"}]"
        with contextlib.closing(_tracker_conn(self.tracker.port)) as s, contextlib.suppress(OSError):
            s.sendall(struct.pack("<i", len(body)) + body)
            s.recv(16)

    def hello(self) -> None:
        with contextlib.closing(_hello(self.boards[0].port, None)):
            self.stop.wait(1.0)

    def hog(self) -> None:
        with contextlib.closing(_tracker_conn(self.tracker.port)) as s:
            s.sendall(tracker_frame([4, "sim", "", 1e300]))
            s.settimeout(2)
            try:
                _, (_, port, matchkey) = recv_tracker_json(s, time.monotonic() + 2)
            except (TimeoutError, OSError):
                return
        with contextlib.closing(_hello(port, matchkey)):
            self.stop.wait(2.0)

    def _channel(self):
        return self.grpc.insecure_channel(self.sim_address, options=[("grpc.use_local_subchannel_pool", 1)])

    def stall(self) -> None:
        rd = self.pb["remote_device"]
        release = threading.Event()

        def stalled(i: int) -> Iterator:
            yield rd.WriteFileRequest(file_path=f"/lib/firmware/stall{i}.bin", data=b"x" * 1024)
            release.wait(5)

        channels = [self._channel() for _ in range(10)]
        try:
            calls = [self.pb["remote_device_grpc"].RemoteDeviceStub(ch).writefile.future(stalled(i))
                     for i, ch in enumerate(channels)]
            self.stop.wait(2.0)
            for c in calls:
                c.cancel()
        finally:
            release.set()
            for ch in channels:
                ch.close()

    def uploads(self) -> None:
        rd = self.pb["remote_device"]

        def upload(i: int) -> None:
            with self._channel() as ch, contextlib.suppress(self.grpc.RpcError):
                chunks = (rd.WriteFileRequest(file_path=f"/lib/firmware/big{i}.bin", data=b"\x33" * MiB)
                          for _ in range(7))
                self.pb["remote_device_grpc"].RemoteDeviceStub(ch).writefile(chunks, timeout=60)

        threads = [threading.Thread(target=upload, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)

    def _client(self) -> Client:
        return Client((self.grpc, self.pb), self.sim_address)

    def cross_dma(self) -> None:
        c = self._client()
        try:
            insn = c.alloc(4096)
            for program in (_store(self.victim), _load(self.victim)):
                c.write(insn, program.tobytes())
                c.launch(c.addr(insn), len(program))
                self._fault_of(c, "launch refused")
            c.free(insn)
        finally:
            c.close()

    def fault(self) -> None:
        c = self._client()
        try:
            insn = c.alloc(4096)
            bad = assemble([GemmInsn(pop_prev_dep=1), FinishInsn()], CFG)
            c.write(insn, bad.tobytes())
            c.launch(c.addr(insn), len(bad))
            self._fault_of(c, "DeadlockError")
            c.free(insn)
        finally:
            c.close()

    def forged_penalty(self) -> None:
        """A fake board (from the attacker's address) takes a request from the clients' address, 127.0.0.1, under a
        key of its own, and reports the match unused: before issue 41 the tracker then served 127.0.0.1, the tuning
        clients' address, after everyone else on every board."""
        with contextlib.closing(_tracker_conn(self.tracker.port)) as rogue:
            rogue.sendall(tracker_frame([TrackerCode.PUT, "bait", [9, "bait:forged"], None]))
            recv_tracker_json(rogue, time.monotonic() + 5)
            with contextlib.closing(TrackerClient(self.tracker.address, timeout=10)) as taker:
                assert taker.request("bait", 1, timeout=10)[2] == "bait:forged"
            rogue.sendall(tracker_frame([TrackerCode.UPDATE_INFO, {"unused_match": "bait:forged"}]))
            recv_tracker_json(rogue, time.monotonic() + 5)

    def borrowed_port(self) -> None:
        """A client of the simulated board leaves; another connects from its source port and LOADs its buffer."""
        port = _free_port()
        relay = FromPort(self.sim_address, port)
        c = Client((self.grpc, self.pb), relay.address)
        try:
            secret = c.alloc(4096)
            c.write(secret, b"\x5a" * 4096)
            where = c.addr(secret)
        finally:
            c.close()
            relay.close()
        relay = FromPort(self.sim_address, port)
        c = Client((self.grpc, self.pb), relay.address)
        try:
            assert c.status()["memory"]["by_client"] == {}
            insn = c.alloc(4096)
            program = _load(where)
            c.write(insn, program.tobytes())
            c.launch(c.addr(insn), len(program))
            self._fault_of(c, "launch refused")
            c.free(insn)
            c.free(secret)
        finally:
            c.close()
            relay.close()

    def control_registers(self) -> None:
        """Compute started without auto_restart, load stopped, and downloads, in a loop: before issue 41 the
        control registers were the board's, and the user's runs faulted (blamed on it) or waited."""
        c = self._client()
        try:
            c.program()
            for _ in range(20):
                c.wr("compute", 0x0, 0x1)
                c.wr("load", 0x0, 0x0)
                c.wr("store", 0x0, 0x1)
            c.program()
        finally:
            c.close()

    def poison_firmware(self) -> None:
        """Junk under the config's bitstream name and partial flags, while a new client programs the board."""
        c, fresh = self._client(), self._client()
        try:
            for _ in range(5):
                c.write_file(FIRMWARE, b"junk" * 64)
                c.write_file("/sys/class/fpga_manager/fpga0/flags", b"1")
                fresh.program()                                    # a new client's download still works
        finally:
            c.close()
            fresh.close()

    def _fault_of(self, c: Client, fragment: str) -> None:
        end = time.monotonic() + 30
        while fragment not in (c.status()["accelerator"]["last_fault"] or ""):
            if time.monotonic() > end or self.stop.is_set():
                raise AssertionError(f"no {fragment!r} fault")
            time.sleep(0.05)


@pytest.mark.slow
def test_tuning_and_the_simulated_board_serve_their_clients_while_an_attacker_runs(tmp_path):
    need("pynq")
    from vta.board.local import LocalBoard
    from vta.board.pynq_support import import_remote
    remote = import_remote()

    task = conv_task(CFG, (1, 16, 8, 8), (16, 16, 3, 3), 1, 1)
    configs = [task.space[i] for i in range(len(task.space)) if task.check(task.space[i]) is None]
    halves = [configs[0::2], configs[1::2]]
    key_file = tmp_path / "lab.key"
    key_file.write_bytes(SECRET)

    def tune(results: list, errors: list, i: int) -> None:
        runner = RPCRunner("sim", "127.0.0.1", tracker.port, n_parallel=1, timeout=30, key_file=key_file,
                           request_timeout=300)
        try:
            results[i] = (runner.measure(task, halves[i]), runner)
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(f"client {i}: {type(e).__name__}: {e}")

    def run_both() -> list:
        results: list = [None, None]
        errors: list[str] = []
        threads = [threading.Thread(target=tune, args=(results, errors, i)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(900)
        assert not any(t.is_alive() for t in threads) and not errors, errors
        return results

    def summary(measured) -> list:
        return [(r.config, r.ok, r.cycles, r.latency_s, r.error) for r in measured]

    tracker = TrackerServer("127.0.0.1", 0).start()
    boards = [BoardServer(lambda: SimDevice(CFG), key="sim", port=0, secret=SECRET, tracker=tracker.address,
                          name=f"sim-{i}", handshake_timeout=2.0, ping_period=0.2, unmatch_timeout=0.5).start()
              for i in range(2)]
    sim = LocalBoard("--client-timeout-s", "2", "--max-file-mb", "8", log_path=tmp_path / "sim-board.log")
    attacker = user = good = None
    served = Counter()
    stop_client = threading.Event()
    client_errors: list[str] = []
    try:
        sim.start()
        end = time.monotonic() + 30
        while tracker.summary()["queue_info"].get("sim", {}).get("free") != 2:
            assert time.monotonic() < end, "the boards did not register"
            time.sleep(0.05)
        baseline = run_both()

        good = Client(remote, sim.address)
        good.program()
        data, insn = good.alloc(4096), good.alloc(4096)
        finish = assemble([FinishInsn()], CFG)
        good.write(insn, finish.tobytes())

        def use_the_simulated_board() -> None:   # a legitimate client of the simulated board, all along
            while not stop_client.is_set():
                try:
                    pattern = bytes([served["rounds"] % 251]) * 4096
                    good.write(data, pattern)
                    good.launch(good.addr(insn), len(finish))
                    good.wait_idle(timeout=60)
                    assert good.read(data) == pattern, "the client's buffer changed under it"
                    assert good.status()["accelerator"]["last_fault"] is None
                    served["rounds"] += 1
                except Exception as e:  # noqa: BLE001 - reported by the assertion below
                    client_errors.append(f"{type(e).__name__}: {e}")
                    return

        user = threading.Thread(target=use_the_simulated_board, name="sim-board-user", daemon=True)
        attacker = Attacker(tracker, boards, sim.address, good.addr(data), remote)
        attacker.thread.start()
        user.start()
        end = time.monotonic() + 120
        while sum(attacker.done.values()) < 12 and time.monotonic() < end:   # one round of attacks first
            time.sleep(0.1)
        rounds_before = served["rounds"]
        attacked = run_both()
        end = time.monotonic() + 300
        while sum(attacker.done.values()) < 24 and time.monotonic() < end:  # and a second round entirely
            time.sleep(0.1)
        rounds_during = served["rounds"] - rounds_before
    finally:
        if attacker is not None:
            attacker.stop.set()
            attacker.thread.join(120)
        stop_client.set()
        for b in boards:
            b.stop()
        tracker.stop()
    if user is not None:
        user.join(60)
    if good is not None:
        good.close()
    assert sim.stop() == 0
    assert attacker is not None and not attacker.thread.is_alive()
    assert set(attacker.done) == {"1 connection flood", "2 nested JSON", "3 keyless hello", "4 hogging matches",
                                  "5 stalled streams", "6 uploads", "7 cross-client DMA", "8 faulting run",
                                  "41.4 forged penalty", "41.5 borrowed port", "41.6 control registers",
                                  "41.7 firmware poisoning"}, \
        (attacker.done, attacker.errors)
    assert not attacker.errors, attacker.errors
    assert not client_errors and rounds_during > 0, (client_errors, served)   # served while attacked
    for (before, _), (after, runner) in zip(baseline, attacked):
        assert summary(after) == summary(before)                     # the same results as without the attacker
        assert all(r.ok and not r.failed_boards for r in after)      # every trial measured once, on one board
        assert sum(runner.boards_used.values()) == len(after)
