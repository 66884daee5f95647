"""The simulated PYNQ board (`vta board serve --simulated`): pynq's remote protocol, VTA's registers, limits.

A real server runs in a child process on 127.0.0.1 (a free port); requests go through pynq's own generated
gRPC stubs, and misbehaving clients are real processes and sockets. The board here runs with
``--time-scale 1000`` (a run lasts a thousand times its modelled hardware time) so that register states
during a run can be observed, and ``--lease-s 1`` so that a dead client's buffers can be reclaimed quickly.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from extras import need

from hw_config import MEM_TYPES, OPCODES, load_config
from vta.board.bitstream import placeholder_bytes
from vta.cli import main
from vta.isa import FinishInsn, GemmInsn, MemInsn, assemble

CFG = load_config("pynq")
MiB = 1 << 20
FIRMWARE = f"/lib/firmware/{CFG.bitstream}.bin"
BLOCKS = ("fetch", "load", "compute", "store")


@pytest.fixture(scope="module")
def remote():
    """(grpc, pynq's remote protocol modules)."""
    need("pynq")
    from vta.board.pynq_support import import_remote
    return import_remote()


@pytest.fixture(scope="module")
def board(remote, tmp_path_factory):
    from vta.board.local import LocalBoard
    log = tmp_path_factory.mktemp("board") / "server.log"
    b = LocalBoard("--time-scale", "1000", "--lease-s", "1", log_path=log)
    b.start()
    yield b
    assert b.stop() == 0, f"the server did not shut down cleanly on SIGTERM; log: {log.read_text()[-2000:]}"
    assert "stopped" in log.read_text()


class Client:
    """One connection to the board through pynq's generated stubs (its own peer, as a separate client)."""

    def __init__(self, remote, address: str):
        self.grpc, pb = remote
        self.pb = pb
        # a connection of its own (gRPC shares one between a process's channels to the same address by default)
        self.channel = self.grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
        self.dev = pb["remote_device_grpc"].RemoteDeviceStub(self.channel)
        self.mm = pb["mmio_grpc"].MmioStub(self.channel)
        self.buf = pb["buffer_grpc"].RemoteBufferStub(self.channel)
        self.handles: dict[str, str] = {}

    def close(self) -> None:
        self.channel.close()

    def error(self, call) -> tuple[str, str]:
        """(status code name, details) of ``call()``, which must fail with a gRPC status."""
        with pytest.raises(self.grpc.RpcError) as info:
            result = call()
            if hasattr(result, "__iter__") and not hasattr(result, "ListFields"):
                list(result)   # a response stream fails when read
        return info.value.code().name, info.value.details()

    # buffers
    def alloc(self, size: int) -> str:
        return self.buf.allocate(self.pb["buffer"].AllocateRequest(size=size, dtype="|u1", cacheable=True),
                                 timeout=10).buffer_id

    def write(self, bid: str, data: bytes) -> str:
        chunks = [data[i:i + 2 * MiB] for i in range(0, len(data), 2 * MiB)] or [b""]
        return self.buf.write(iter(self.pb["buffer"].BufferWriteRequest(buffer_id=bid, data=c) for c in chunks),
                              timeout=30).msg

    def read(self, bid: str) -> bytes:
        return b"".join(r.data for r in self.buf.read(self.pb["buffer"].BufferReadRequest(buffer_id=bid),
                                                      timeout=30))

    def addr(self, bid: str) -> int:
        return self.buf.physical_address(self.pb["buffer"].AddressRequest(buffer_id=bid), timeout=10).address

    def free(self, bid: str) -> str:
        return self.buf.freebuffer(self.pb["buffer"].FreeBufferRequest(buffer_id=bid), timeout=10).msg

    # files and the PL
    def write_file(self, path: str, data: bytes):
        rd = self.pb["remote_device"]
        return self.dev.writefile(iter([rd.WriteFileRequest(file_path=path, data=data)]), timeout=10)

    def read_file(self, path: str) -> bytes:
        rd = self.pb["remote_device"]
        return b"".join(r.data for r in self.dev.readfile(rd.ReadFileRequest(file_path=path), timeout=10))

    def program(self) -> None:
        """What pynq's RemoteDevice.download sends for the config's bitstream."""
        rd = self.pb["remote_device"]
        self.dev.set_bitstream_attrs(rd.SetBitstreamAttrsRequest(binfile_name=f"{CFG.bitstream}.bin"), timeout=10)
        self.write_file(FIRMWARE, placeholder_bytes(CFG))
        self.write_file("/sys/class/fpga_manager/fpga0/flags", b"0")
        self.write_file("/sys/class/fpga_manager/fpga0/firmware", f"{CFG.bitstream}.bin".encode())

    def status(self) -> dict:
        return json.loads(self.read_file("/proc/vta-sim/status"))

    # registers
    def handle(self, block: str) -> str:
        if block not in self.handles:
            r = self.mm.get_mmio(self.pb["mmio"].GetMmioRequest(base_addr=CFG.mmio_address(block),
                                                                 length=CFG.MMIO_RANGE), timeout=10)
            assert r.status and not r.msg, r.msg
            self.handles[block] = r.mmio_id
        return self.handles[block]

    def rd(self, block: str, offset: int) -> int:
        r = self.mm.read(self.pb["mmio"].ReadRequest(mmio_id=self.handle(block), offset=offset, length=4),
                         timeout=10)
        assert not r.msg, r.msg
        return r.data

    def wr(self, block: str, offset: int, value: int) -> None:
        r = self.mm.write(self.pb["mmio"].WriteRequest(mmio_id=self.handle(block), offset=offset,
                                                        data=int(value).to_bytes(4, "little")), timeout=10)
        assert not r.msg, r.msg

    def launch(self, insn_addr: int, count: int) -> None:
        """VTADeviceRun's register writes, exactly."""
        self.wr("fetch", 0x10, count)
        self.wr("fetch", 0x18, insn_addr)
        self.wr("load", 0x10, 0)
        self.wr("load", 0x18, 0)
        self.wr("compute", 0x20, 0)
        self.wr("compute", 0x28, 0)
        self.wr("store", 0x10, 0)
        self.wr("fetch", 0x0, 0x1)
        for block in ("load", "compute", "store"):
            self.wr(block, 0x0, 0x81)

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Poll fetch until ap_idle; whether its ap_done (clear on read) was seen on the way."""
        end = time.monotonic() + timeout
        done = False
        while True:
            ctrl = self.rd("fetch", 0)
            done = done or bool(ctrl & 0x2)
            if ctrl & 0x4:
                return done
            assert time.monotonic() < end, "fetch never went idle"
            time.sleep(0.01)


@pytest.fixture
def client(remote, board):
    c = Client(remote, board.address)
    yield c
    c.close()


def assert_accounted(status: dict) -> None:
    """The board's books balance: bytes per client add up, every allocation is live, freed or reclaimed."""
    mem = status["memory"]
    others = mem["other_clients"]   # a client sees the others' buffers only as totals
    assert mem["used_bytes"] == sum(c["bytes"] for c in mem["by_client"].values()) + others["bytes"]
    assert mem["buffers"] == sum(c["buffers"] for c in mem["by_client"].values()) + others["buffers"]
    assert mem["allocated_total"] - mem["freed_total"] - mem["reclaimed_total"] == mem["buffers"]
    assert mem["simulator_regions"] == mem["buffers"]
    assert 0 <= mem["used_bytes"] <= mem["limit_bytes"]


# ------------------------------------------------------------------------------------------------------------
# the command line (no pynq needed)

def test_board_help_everywhere(capsys):
    for argv in (["board"], ["board", "serve"], ["board", "status"], ["board", "bitstream"], ["board", "replay"]):
        assert main([*argv, "--help"]) == 0
        assert capsys.readouterr().out.startswith("usage: vta board")


def test_serve_needs_simulated_and_a_board_config(capsys):
    assert main(["board", "serve"]) == 2
    assert "only --simulated" in capsys.readouterr().err
    assert main(["board", "serve", "--simulated", "--config", "de10nano"]) == 2
    assert "Chisel" in capsys.readouterr().err
    assert main(["board", "serve", "--simulated", "--port", "70000"]) == 2
    assert "out of range" in capsys.readouterr().err


def test_bitstream_command(tmp_path, capsys):
    assert main(["board", "bitstream", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    expected = tmp_path / "pynq" / "0_0_2" / f"{CFG.bitstream}.bit"
    assert str(expected) in err and "--make-simulated" in err and "vta-distro" in err
    assert main(["board", "bitstream", "--cache-dir", str(tmp_path), "--make-simulated"]) == 0
    assert expected.is_file() and "placeholder" in capsys.readouterr().out
    wrong = tmp_path / "1x32_i8w8a32_15_15_18_17.bit"
    wrong.write_bytes(expected.read_bytes())
    assert main(["board", "bitstream", "--bitstream", str(wrong)]) == 2
    assert "does not match the hardware config" in capsys.readouterr().err


def test_core_and_board_help_work_without_pynq(tmp_path):
    """With pynq (and grpc) unimportable, the CLI works and the board commands name the extra to install."""
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("pynq", "grpc"):
                    raise ImportError(f"No module named {name!r} (blocked by the test)")
        sys.meta_path.insert(0, Block())
        import graph_pack, tuning, vta.device_pynq, vta.board.server
        from vta.cli import main
        assert main(["config", "list"]) == 0
        assert main(["board", "--help"]) == 0
        sys.exit(main(["board", "serve", "--simulated", "--port", "0"]))
    """)
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "pip install 'vta-stack[pynq]'" in done.stderr


# ------------------------------------------------------------------------------------------------------------
# the protocol, driven through pynq's stubs

def test_device_files_buffers_and_accounting(client):
    assert client.dev.existsfile(client.pb["remote_device"].ExistsFileRequest(file_path="/proc/version")).exists
    assert b"armv7l" in client.read_file("/proc/version")
    assert client.read_file("/proc/device-tree/chosen/pynq_board").rstrip(b"\0") == b"vta-simulated-pynq"
    before = client.status()
    data = np.random.default_rng(0).integers(0, 256, 5 * MiB + 123, dtype=np.uint8).tobytes()
    bid = client.alloc(len(data))
    assert client.addr(bid) % 4096 == 0
    assert client.write(bid, data) == ""
    assert client.read(bid) == data
    mid = client.status()
    assert mid["memory"]["used_bytes"] == before["memory"]["used_bytes"] + -(-len(data) // 4096) * 4096
    assert_accounted(mid)
    assert client.free(bid) == ""
    after = client.status()
    assert after["memory"]["used_bytes"] == before["memory"]["used_bytes"]
    assert after["memory"]["freed_total"] == before["memory"]["freed_total"] + 1
    assert_accounted(after)


def test_every_compute_instruction_clears_done_as_the_hls_block_does(client):
    """vta.cc's compute block writes done = 0 for each instruction it executes, not only GEMM/ALU: a program whose
    first compute instruction is a micro-op LOAD shows done 0 while its GEMM still waits for slow weight loads."""
    client.program()
    wgt, uops, insn = client.alloc(1024 * 256), client.alloc(4096), client.alloc(4096)
    quick = assemble([GemmInsn(uop_bgn=0, uop_end=1, iter_out=1, iter_in=1), FinishInsn()], CFG)
    client.write(insn, quick.tobytes())
    client.launch(client.addr(insn), len(quick))
    assert client.wait_idle() and client.rd("compute", 0x18) == 1           # done is 1 after a run
    loads = [MemInsn(memory_type=MEM_TYPES["WGT"], dram_base=client.addr(wgt) // 256, y_size=1, x_size=1024,
                     x_stride=1024, push_next_dep=int(i == 7)) for i in range(8)]
    uop_load = MemInsn(memory_type=MEM_TYPES["UOP"], dram_base=client.addr(uops) // 4, y_size=1, x_size=1,
                       x_stride=1)
    slow = assemble([uop_load, *loads, GemmInsn(pop_prev_dep=1, uop_bgn=0, uop_end=1, iter_out=1, iter_in=1),
                     FinishInsn()], CFG)
    client.write(insn, slow.tobytes())
    t0 = time.monotonic()
    client.launch(client.addr(insn), len(slow))
    while client.rd("compute", 0x18) != 0:      # the micro-op load (cycle ~40 of ~295,000) cleared it
        assert time.monotonic() - t0 < 2.0, "done still 1 although the compute block ran a LOAD UOP"
    assert not client.rd("fetch", 0) & 0x4       # long before the run ends (2.7 s of board time)
    assert client.wait_idle() and client.rd("compute", 0x18) == 1


def test_registers_behave_as_vta_hls_blocks(client, board):
    """ap_start/ap_done/ap_idle as HLS does, and done a level register: stale 1 right after a relaunch."""
    client.program()
    assert client.status()["accelerator"]["programmed"] == f"{CFG.bitstream}.bin"
    wgt = client.alloc(1024 * 256)
    insn = client.alloc(4096)
    quick = assemble([GemmInsn(uop_bgn=0, uop_end=1, iter_out=1, iter_in=1), FinishInsn()], CFG)
    client.write(insn, quick.tobytes())
    addr = client.addr(insn)
    client.launch(addr, len(quick))
    assert client.wait_idle()                                    # fetch: ap_done, then ap_idle
    assert not client.rd("fetch", 0) & 0x2                      # ap_done was cleared by the read
    assert client.rd("compute", 0x18) == 1                      # FINISH raised done
    assert client.rd("compute", 0) & 0x80                       # auto_restart as written
    # a program whose first GEMM waits for eight long weight loads (2.7 ms of hardware, 2.7 s of board time: far
    # longer than the few register reads below take, however loaded the machine)
    loads = [MemInsn(memory_type=MEM_TYPES["WGT"], dram_base=client.addr(wgt) // 256, y_size=1, x_size=1024,
                     x_stride=1024, push_next_dep=int(i == 7)) for i in range(8)]
    slow = assemble([*loads, GemmInsn(pop_prev_dep=1, uop_bgn=0, uop_end=1, iter_out=1, iter_in=1), FinishInsn()],
                    CFG)
    client.write(insn, slow.tobytes())
    client.rd("compute", 0)                                      # clear compute's ap_done latch (clear on read)
    t0 = time.monotonic()
    client.launch(addr, len(slow))
    for _ in range(3):   # the trap: done still shows the previous run's 1 while this one waits for its loads
        assert (client.rd("compute", 0x18), client.rd("compute", 0) & 0x2, client.rd("fetch", 0) & 0x4) == (1, 0, 0)
    fresh = False                                                # the fix: done counts only after compute's ap_done
    while not (fresh and client.rd("compute", 0x18) == 1):
        fresh = fresh or bool(client.rd("compute", 0) & 0x2)
        assert time.monotonic() - t0 < 30
    elapsed = time.monotonic() - t0
    cycles = client.status()["accelerator"]["last_run"]["cycles"]
    assert elapsed >= 0.95 * cycles / (CFG.CLOCK_MHZ * 1e6) * 1000   # board time follows the timing model
    assert f"{cycles:,} cycles = " in board.log_path.read_text()      # ... and its latency is logged,
    assert "SIMULATED at 100 MHz" in board.log_path.read_text()        # labelled as simulated
    # ... and the board model's figure for it, worked out by hand (docs/simulator.md, "Timing model"; docs/calibrate.md,
    # the pynq column): each load is one 262144-byte row, 32768 beats in 2048 bursts: 32 + 32768 + 2048 * 2 = 36896
    # cycles, back to back on the load module from dispatch at 32 + 2; the GEMM (1 x 1 iteration of 1 micro-op,
    # COMPUTE_LATENCY 9 + 1) waits for the last load, FINISH takes 1. The board adds 1 / 0.7095 - 1 cycles per beat
    # and 44.85 per row to each load, 18.97 to the GEMM's one loop iteration; then launch, 10 instructions and the
    # cache maintenance of the stream (160 bytes) and the 262144 bytes the loads read (pynq.json, refitted at depth 9).
    assert cycles == 34 + 8 * 36896 + 10 + 1
    board_cycles = 34 + 8 * (36896 + 32768 * (1 / 0.7095 - 1) + 44.85) + 10 + 18.97 + 1
    by_hand = 41.81e-6 + 10 * 376.1e-9 + (10 * 16 + 1024 * 256) * 0.3438e-9 + board_cycles / 100e6
    assert client.status()["accelerator"]["last_run"]["board_seconds"] == pytest.approx(by_hand, rel=1e-9)
    client.wait_idle()
    for bid in (wgt, insn):
        client.free(bid)
    assert_accounted(client.status())


def _store(addr: int) -> np.ndarray:
    """A STORE of one OUT vector (16 bytes) to ``addr``, then FINISH."""
    return assemble([MemInsn(opcode=OPCODES["STORE"], memory_type=MEM_TYPES["OUT"], dram_base=addr // 16, y_size=1,
                             x_size=1, x_stride=1), FinishInsn()], CFG)


def _load(addr: int) -> np.ndarray:
    return assemble([MemInsn(memory_type=MEM_TYPES["INP"], dram_base=addr // 16, y_size=1, x_size=1, x_stride=1),
                     FinishInsn()], CFG)


def _fault_seen(client: Client, fragment: str, timeout: float = 30.0) -> str:
    """The client's own last fault once it mentions ``fragment`` (runs finish in the background)."""
    deadline = time.monotonic() + timeout
    while fragment not in (fault := client.status()["accelerator"]["last_fault"] or ""):
        assert time.monotonic() < deadline, f"no fault with {fragment!r}: {client.status()['accelerator']}"
        time.sleep(0.05)
    return fault


def test_a_launch_may_touch_only_its_own_clients_buffers(remote, board):
    """Issue 25 item 7: buffers are handed out at sequential addresses, so a client can relocate a program onto
    another's. Every launch is now checked against the launching client's own buffers: a LOAD of another
    client's buffer, a STORE into it and an instruction fetch from it are refused, naming the instruction, and
    the other's data is untouched. The status shows a client only its own buffers, runs and faults."""
    a, b = Client(remote, board.address), Client(remote, board.address)
    try:
        a.program()
        secret = a.alloc(4096)
        a.write(secret, b"\xa5" * 4096)
        victim = a.addr(secret)
        insn = b.alloc(4096)
        for program, fragment in ((_load(victim), "instruction 0 (LOAD INP)"),
                                  (_store(victim), "instruction 0 (STORE OUT)")):
            b.write(insn, program.tobytes())
            b.launch(b.addr(insn), len(program))
            fault = _fault_seen(b, fragment)
            assert "launch refused" in fault and f"{victim:#x}" in fault, fault
        insn_a = a.alloc(4096)
        a.write(insn_a, _store(victim).tobytes())
        b.launch(a.addr(insn_a), 2)                                  # B fetching A's program: refused as well
        assert "launch refused" in _fault_seen(b, "instruction fetch of 2 instructions")
        assert a.read(secret) == b"\xa5" * 4096                      # nothing of A's was overwritten
        seen_by_a = a.status()
        assert len(seen_by_a["memory"]["by_client"]) == 1            # A's own entry; B's buffer only counted
        assert seen_by_a["memory"]["other_clients"]["buffers"] >= 1
        assert seen_by_a["accelerator"]["last_fault"] is None        # B's faults are B's
        assert "isolated" in seen_by_a["isolation"]
        b.program()
        for c, bid in ((a, secret), (a, insn_a), (b, insn)):
            c.free(bid)
        assert_accounted(a.status())
    finally:
        a.close()
        b.close()


class FromPort:
    """A TCP relay whose connection to the board comes from 127.0.0.1:``port`` (SO_REUSEADDR), as any program on the
    client's host can make its own connection look once the client has gone; closing it resets the connection (no
    TIME_WAIT holds the port)."""

    def __init__(self, board_address: str, port: int):
        host, board_port = board_address.rsplit(":", 1)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.out = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.out.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.out.bind(("127.0.0.1", port))
        self.out.connect((host, int(board_port)))
        self.inbound: socket.socket | None = None
        self.threads = [threading.Thread(target=self._serve, daemon=True)]
        self.threads[0].start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            self.inbound, _ = self.listener.accept()
            back = threading.Thread(target=self._pump, args=(self.out, self.inbound), daemon=True)
            back.start()
            self.threads.append(back)
            self._pump(self.inbound, self.out)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)

    def close(self) -> None:
        self.out.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))   # RST: no TIME_WAIT
        for s in (self.out, self.inbound, self.listener):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
        for t in self.threads:
            t.join(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_connection_from_a_departed_clients_port_is_a_new_client(remote, board):
    """Issue 41, item 5: a client was its gRPC peer string (ipv4:IP:PORT), and its buffers outlive its connection
    for the lease, so a program connecting from the departed client's source port owned them: its launches could
    LOAD them, its status listed them, its calls kept their lease. A client without a session token is now its
    connection (the board's socket for it), so a new connection from the same address and port is a new client."""
    port = _free_port()
    relay = FromPort(board.address, port)
    victim = Client(remote, relay.address)
    victim.program()
    secret = victim.alloc(4096)
    victim.write(secret, b"\x5a" * 4096)
    where = victim.addr(secret)
    assert victim.status()["memory"]["by_client"]                    # the victim's own buffer, as it sees it
    victim.close()
    relay.close()                                                    # the victim has gone
    relay = FromPort(board.address, port)                            # ... and another comes from its port
    attacker = Client(remote, relay.address)
    try:
        assert relay.out.getsockname() == ("127.0.0.1", port)
        status = attacker.status()
        assert status["memory"]["by_client"] == {}                   # before: the victim's buffer was its own
        assert status["memory"]["other_clients"]["buffers"] >= 1
        attacker.program()
        insn = attacker.alloc(4096)
        program = _load(where)
        attacker.write(insn, program.tobytes())
        attacker.launch(attacker.addr(insn), len(program))
        assert "launch refused" in _fault_seen(attacker, "instruction 0 (LOAD INP)")
        attacker.free(insn)
        attacker.free(secret)   # a buffer's random handle is its capability: whoever holds it may free it
    finally:
        attacker.close()
        relay.close()


def test_telling_connections_apart_leaks_no_descriptors(remote, board):
    """The board finds a connection's socket among its own descriptors through duplicates of them; every one is
    closed again (a leak of one per descriptor and call ran the board out of descriptors in a few hundred calls)."""
    fds = Path(f"/proc/{board.proc.pid}/fd")
    if not fds.is_dir():
        pytest.skip("no /proc: the descriptor count cannot be read")
    warm = Client(remote, board.address)
    warm.status()
    before = len(list(fds.iterdir()))
    for _ in range(20):
        c = Client(remote, board.address)
        for _ in range(5):
            c.status()
        c.close()
    warm.status()
    assert len(list(fds.iterdir())) <= before + 10   # (connections the server may not have closed yet)
    warm.close()


def test_a_session_token_is_its_clients_identity_on_any_connection(remote, board):
    """Issue 41, item 5: reading /proc/vta-sim/session issues a new secret token; calls that carry it (gRPC metadata
    vta-session, as PynqDevice sends) are that client's on any connection, so a client that reconnects proves who
    it is; a token the board never issued is refused, and a connection without one is a client of its own."""
    from vta.board.server import SESSION_FILE, SESSION_HEADER, STATUS_FILE
    a, b = Client(remote, board.address), Client(remote, board.address)
    bf, rd = remote[1]["buffer"], remote[1]["remote_device"]
    try:
        token = a.read_file(SESSION_FILE).decode()
        assert len(token) >= 32 and token != a.read_file(SESSION_FILE).decode()   # a new one at every read
        mine = ((SESSION_HEADER, token),)
        bid = a.buf.allocate(bf.AllocateRequest(size=4096, dtype="|u1"), metadata=mine, timeout=10).buffer_id

        def status(client: Client, metadata=()) -> dict:
            return json.loads(b"".join(r.data for r in client.dev.readfile(
                rd.ReadFileRequest(file_path=STATUS_FILE), metadata=metadata, timeout=10)))

        assert [c["buffers"] for c in status(b, mine)["memory"]["by_client"].values()] == [1]   # same client
        assert status(a)["memory"]["by_client"] == {} and b.status()["memory"]["by_client"] == {}
        code, details = b.error(lambda: b.buf.allocate(bf.AllocateRequest(size=16), timeout=10,
                                                       metadata=((SESSION_HEADER, "0" * 32),)))
        assert code == "UNAUTHENTICATED" and "no session" in details
        b.buf.freebuffer(bf.FreeBufferRequest(buffer_id=bid), metadata=mine, timeout=10)
    finally:
        a.close()
        b.close()


def test_each_client_launches_with_the_registers_it_wrote(remote, board):
    """Two clients launching at once interleave their register writes (the soak of issue 25 did): each launch
    uses the instruction count and address its own client wrote, never the other's."""
    a, b = Client(remote, board.address), Client(remote, board.address)
    try:
        a.program()
        ia, ib = a.alloc(4096), b.alloc(4096)
        a.write(ia, assemble([FinishInsn()], CFG).tobytes())
        b.write(ib, assemble([GemmInsn(), GemmInsn(), FinishInsn()], CFG).tobytes())
        a.wr("fetch", 0x10, 1)
        a.wr("fetch", 0x18, a.addr(ia))
        b.wr("fetch", 0x10, 3)                                       # B's writes land between A's
        b.wr("fetch", 0x18, b.addr(ib))
        a.wr("fetch", 0x0, 0x1)
        for block in ("load", "compute", "store"):
            a.wr(block, 0x0, 0x81)
        a.wait_idle(timeout=10)
        acc = a.status()["accelerator"]
        assert acc["last_fault"] is None and acc["last_run"]["instructions"] == 1, acc
        assert (a.rd("fetch", 0x10), b.rd("fetch", 0x10)) == (1, 3)
        a.free(ia)
        b.free(ib)
    finally:
        a.close()
        b.close()


def test_a_launch_of_no_instructions_never_looks_finished(remote, board):
    """A bitstream download resets its client's registers: one made between a client's register writes and its
    start makes that launch run 0 instructions (before issue 41 any client's download did, and every PynqDevice
    downloads it when it connects). Such a run showed compute's ap_done and done = 1, so its client took it for its
    finished run and read its output before anything was written. As in VTA's HLS, nothing now reaches compute:
    its client waits, then times out (BoardTimeout)."""
    a = Client(remote, board.address)
    try:
        a.program()
        insn = a.alloc(4096)
        program = assemble([GemmInsn(), FinishInsn()], CFG)
        a.write(insn, program.tobytes())
        a.rd("compute", 0x0)                                         # clears ap_done, as PynqDevice does
        a.wr("fetch", 0x10, len(program))
        a.wr("fetch", 0x18, a.addr(insn))
        a.program()                                                  # a download in between: registers reset
        a.wr("fetch", 0x0, 0x1)
        for block in ("load", "compute", "store"):
            a.wr(block, 0x0, 0x81)
        a.wait_idle(timeout=10)
        acc = a.status()["accelerator"]
        assert acc["last_run"]["instructions"] == 0 and "a launch of 0 instructions" in acc["last_fault"], acc
        assert not a.rd("compute", 0x0) & 0x2 and a.rd("compute", 0x18) == 0   # no compute ap_done, done still 0
        a.free(insn)
    finally:
        a.close()


def test_another_clients_control_writes_and_downloads_do_not_touch_a_launch(remote, board):
    """Issue 41, item 6: compute's control register (its start and auto_restart state) was board-wide, so a second
    client writing CTRL = 0x1 (start without auto_restart) between the victim's 0x81 and its run made the victim's
    run fault ("started without auto_restart"), blamed on the victim; a download by anyone reset the victim's
    registers. Now every client's control, interrupt and data registers and its launches are its own."""
    victim, attacker = Client(remote, board.address), Client(remote, board.address)
    try:
        victim.program()
        attacker.program()
        insn = victim.alloc(4096)
        program = assemble([GemmInsn(), GemmInsn(), FinishInsn()], CFG)   # compute runs 3 instructions
        victim.write(insn, program.tobytes())
        for download in (False, True):
            victim.wr("fetch", 0x10, len(program))
            victim.wr("fetch", 0x18, victim.addr(insn))
            for block in ("load", "compute", "store"):
                victim.wr(block, 0x0, 0x81)
            attacker.wr("compute", 0x0, 0x1)       # single shot: compute would run one instruction and stop
            attacker.wr("compute", 0x4, 0x1)       # interrupts (GIE) are the attacker's own too
            if download:
                attacker.wr("load", 0x0, 0x0)      # load stopped: no launch could begin
                attacker.program()                 # the attacker's download resets its own registers only
                attacker.wr("compute", 0x0, 0x1)
            victim.wr("fetch", 0x0, 0x1)
            assert victim.wait_idle(timeout=30)
            acc = victim.status()["accelerator"]
            assert acc["last_fault"] is None and acc["last_run"]["instructions"] == len(program), acc
            assert victim.rd("compute", 0x18) == 1
            assert not attacker.rd("compute", 0x0) & 0x80 and victim.rd("compute", 0x0) & 0x81 == 0x81
            assert victim.rd("compute", 0x4) == 0 and victim.rd("fetch", 0x10) == len(program)
        assert acc["modules_started"] == {"load": True, "compute": True, "store": True}
        assert attacker.status()["accelerator"]["modules_started"]["load"] is False
        victim.free(insn)
    finally:
        victim.close()
        attacker.close()


def test_what_one_clients_run_left_in_the_srams_is_not_anothers_to_store(remote, board):
    """The SRAMs keep what a run left, as on a board, but only for the same client: another client's program that
    STOREs accumulator rows it never loaded into its own buffer read what the first client's LOAD ACC put there
    (the victim's data, narrowed to int8). Now a run of another client starts from cleared SRAMs."""
    victim, attacker = Client(remote, board.address), Client(remote, board.address)
    acc_bytes, out_bytes = CFG.elem_bytes("ACC"), CFG.elem_bytes("OUT")

    def run(client: Client, where: str, program: np.ndarray) -> None:
        client.write(where, program.tobytes())
        client.launch(client.addr(where), len(program))
        assert client.wait_idle()
        assert client.status()["accelerator"]["last_fault"] is None

    try:
        victim.program()
        attacker.program()
        secret = (np.arange(acc_bytes // 4, dtype=np.int32) + 1) * 3   # int32 lanes, 3..48: visible as int8
        data, insns = victim.alloc(4096), victim.alloc(4096)
        victim.write(data, secret.tobytes())
        load = assemble([MemInsn(opcode=OPCODES["LOAD"], memory_type=MEM_TYPES["ACC"], sram_base=0,
                                 dram_base=victim.addr(data) // acc_bytes, y_size=1, x_size=1, x_stride=1),
                         FinishInsn()], CFG)
        run(victim, insns, load)

        stolen, theirs = attacker.alloc(4096), attacker.alloc(4096)
        attacker.write(stolen, bytes(4096))
        dump = assemble([MemInsn(opcode=OPCODES["STORE"], memory_type=MEM_TYPES["OUT"], sram_base=0,
                                 dram_base=attacker.addr(stolen) // out_bytes, y_size=1, x_size=1, x_stride=1),
                         FinishInsn()], CFG)
        run(attacker, theirs, dump)
        got = np.frombuffer(attacker.read(stolen)[:out_bytes], np.int8)
        assert not got.any(), f"another client's accumulator rows reached the attacker: {got.tolist()}"

        run(victim, insns, load)   # the same client keeps its SRAMs between its runs
        for client, buffers in ((victim, (data, insns)), (attacker, (stolen, theirs))):
            for bid in buffers:
                client.free(bid)
    finally:
        victim.close()
        attacker.close()


def test_each_client_waits_for_its_own_run():
    """The status registers were the board's own: a client polling as vta.device_pynq does (compute's ap_done
    seen, then done == 1) for a run launched behind another client's took that run's compute ap_done and FINISH
    for its own and read its output early (5 of 5 here; its clear-on-read of ap_done could also hide it from the
    other client, which then timed out). Each client now sees its own runs only. In process: the board's register
    blocks over a simulator, polled without the RPC's latency."""
    from simulator.core import Simulator
    from vta.board import registers as R

    sim = Simulator(CFG, threads=1)
    vta = R.SimulatedVTA(CFG, sim, time_scale=1000.0)   # a run of 3,600 cycles: 36 ms
    vta.reset(f"{CFG.bitstream}.bin")
    program = assemble([GemmInsn(uop_bgn=0, uop_end=1, iter_out=60, iter_in=60), FinishInsn()], CFG)
    addr = sim.alloc(program.nbytes)
    sim.write(addr, program)

    def launch(peer: str) -> None:
        vta.read("compute", R.CTRL, peer)   # clears its ap_done
        vta.write("fetch", R.FETCH_INSN_COUNT, len(program), peer)
        vta.write("fetch", R.FETCH_INSN_ADDR, addr, peer)
        vta.write("fetch", R.CTRL, R.AP_START, peer)
        for block in ("load", "compute", "store"):
            vta.write(block, R.CTRL, R.AP_START | R.AUTO_RESTART, peer)

    def wait(peer: str) -> dict:
        end, fresh = time.monotonic() + 10, False
        while not (fresh and vta.read("compute", R.COMPUTE_DONE_RD, peer) == 1):
            fresh = fresh or bool(vta.read("compute", R.CTRL, peer) & R.AP_DONE)
            assert time.monotonic() < end, f"{peer}: done never rose"
        return vta.status(peer)

    try:
        for _ in range(3):
            launch("b")
            launch("a")                                                  # queued behind b's run
            seen = wait("a")
            assert seen["state"] == "idle" and seen["last_run"]["seq"] == vta.runs_total, seen
            assert wait("b")["state"] == "idle"
    finally:
        vta.close()

def test_interrupt_registers_follow_hls_ap_ctrl_hs():
    """GIE/IER/ISR were stored, never raised. Now an ap_done sets the ISR bits IER enables at that moment, a write
    toggles ISR, the interrupt output is GIE and ISR: the script the RTL runs in tests/test_rtl_control.py gives
    HLS's observations here too. In process, one client (its own registers, as every client's are)."""
    from hls_control import EXPECTED, interrupt_script
    from programs import finish_sync

    from simulator.core import Simulator
    from vta.board import registers as R

    sim = Simulator(CFG, threads=1)
    vta = R.SimulatedVTA(CFG, sim)
    vta.reset(f"{CFG.bitstream}.bin")
    program = assemble(finish_sync([]), CFG)
    addr = sim.alloc(program.nbytes)
    sim.write(addr, program)
    peer = "a"

    def launch() -> None:
        before = vta.runs_total
        vta.write("fetch", R.FETCH_INSN_COUNT, len(program), peer)
        vta.write("fetch", R.FETCH_INSN_ADDR, addr, peer)
        for block in ("load", "compute", "store"):
            vta.write(block, R.CTRL, R.AP_START | R.AUTO_RESTART, peer)
        vta.write("fetch", R.CTRL, R.AP_START, peer)
        end = time.monotonic() + 10
        while not (vta.runs_total > before and vta.status(peer)["state"] == "idle"):
            assert time.monotonic() < end, "the run never ended"
            time.sleep(0.001)

    try:
        seen = interrupt_script(lambda b, off: vta.read(b, off, peer), lambda b, off, v: vta.write(b, off, v, peer),
                                lambda: vta.interrupts(peer), launch)
        assert seen == EXPECTED
        assert vta.interrupts("b") == dict.fromkeys(BLOCKS, False)    # another client's registers: untouched
    finally:
        vta.close()


def test_a_faulted_run_hangs_its_own_client_only(remote, board):
    """Issue 25 item 8: a run that faults (here a deadlock: a GEMM waiting for a token nobody pushes; and the
    issue's LOAD from an unmapped address, refused at launch) used to hang the accelerator for every client until
    someone downloaded the bitstream again. Now its client sees the hang (fetch never idle, its status names the
    fault) and everyone else's runs go on at once; its own next launch runs normally."""
    a, b = Client(remote, board.address), Client(remote, board.address)
    try:
        a.program()
        insn_a, insn_b = a.alloc(4096), b.alloc(4096)
        good = assemble([FinishInsn()], CFG)
        b.write(insn_b, good.tobytes())
        for bad, fragment in ((assemble([GemmInsn(pop_prev_dep=1), FinishInsn()], CFG), "DeadlockError"),
                              (_load(0x10), "instruction 0 (LOAD INP)")):
            a.write(insn_a, bad.tobytes())
            a.launch(a.addr(insn_a), len(bad))
            _fault_seen(a, fragment)
            assert a.status()["accelerator"]["state"] == "hung"
            assert not a.rd("fetch", 0) & 0x4                         # A's accelerator never finishes
            assert b.status()["accelerator"]["state"] != "hung"
            b.launch(b.addr(insn_b), len(good))                      # B is served meanwhile
            b.wait_idle(timeout=10)
            assert b.status()["accelerator"]["last_run"]["instructions"] == 1
        a.write(insn_a, good.tobytes())
        a.launch(a.addr(insn_a), len(good))                          # and A's next launch runs
        a.wait_idle(timeout=10)
        assert a.status()["accelerator"]["state"] == "idle"
        a.free(insn_a)
        b.free(insn_b)
        assert_accounted(a.status())
    finally:
        a.close()
        b.close()


def test_bitstreams_other_than_the_configs_are_refused(client):
    rd = client.pb["remote_device"]
    code, details = client.error(lambda: client.dev.set_bitstream_attrs(
        rd.SetBitstreamAttrsRequest(binfile_name="base.bin")))
    assert code == "FAILED_PRECONDITION" and f"{CFG.bitstream}.bit" in details and "base.bin" in details
    client.write_file("/lib/firmware/base.bin", placeholder_bytes(CFG))
    code, details = client.error(lambda: client.write_file("/sys/class/fpga_manager/fpga0/firmware", b"base.bin"))
    assert code == "FAILED_PRECONDITION" and "accepts only" in details
    code, _ = client.error(lambda: client.dev.set_bitstream_attrs(
        rd.SetBitstreamAttrsRequest(binfile_name=f"{CFG.bitstream}.bin", partial=True)))
    assert code == "UNIMPLEMENTED"
    client.write_file(FIRMWARE, b"\x00" * 64)
    code, details = client.error(lambda: client.write_file("/sys/class/fpga_manager/fpga0/firmware",
                                                           f"{CFG.bitstream}.bin".encode()))
    assert code == "FAILED_PRECONDITION" and "sync word" in details


def test_firmware_and_fpga_manager_files_are_each_clients_own(remote, board):
    """Issue 41, item 7: one firmware namespace served every client, so another client writing junk to
    /lib/firmware/<the config's bitstream>.bin (or the FPGA manager's flags = 1) between a client's upload and its
    program made the program fail ("not a Xilinx bitstream"), and pynq's own download, which uploads only when the
    file does not exist, programmed the junk. Now every client's firmware files and flags are its own."""
    victim, attacker = Client(remote, board.address), Client(remote, board.address)
    rd = remote[1]["remote_device"]
    try:
        attacker.write_file(FIRMWARE, b"junk" * 64)
        attacker.write_file("/sys/class/fpga_manager/fpga0/flags", b"1")
        assert not victim.dev.existsfile(rd.ExistsFileRequest(file_path=FIRMWARE), timeout=10).exists
        assert attacker.dev.existsfile(rd.ExistsFileRequest(file_path=FIRMWARE), timeout=10).exists
        victim.dev.set_bitstream_attrs(rd.SetBitstreamAttrsRequest(binfile_name=f"{CFG.bitstream}.bin"), timeout=10)
        victim.write_file(FIRMWARE, placeholder_bytes(CFG))
        victim.write_file("/sys/class/fpga_manager/fpga0/flags", b"0")
        attacker.write_file(FIRMWARE, b"junk" * 64)                          # in between: the attacker's own file
        attacker.write_file("/sys/class/fpga_manager/fpga0/flags", b"1")     # ... and its own flags
        victim.write_file("/sys/class/fpga_manager/fpga0/firmware", f"{CFG.bitstream}.bin".encode())
        assert victim.read_file("/sys/class/fpga_manager/fpga0/firmware").strip() == f"{CFG.bitstream}.bin".encode()
        assert victim.read_file("/sys/class/fpga_manager/fpga0/flags").strip() == b"0"
        code, details = attacker.error(lambda: attacker.write_file("/sys/class/fpga_manager/fpga0/firmware",
                                                                   f"{CFG.bitstream}.bin".encode()))
        assert code == "UNIMPLEMENTED" and "partial" in details            # its own flags, its own junk
        attacker.write_file("/sys/class/fpga_manager/fpga0/flags", b"0")
        code, details = attacker.error(lambda: attacker.write_file("/sys/class/fpga_manager/fpga0/firmware",
                                                                   f"{CFG.bitstream}.bin".encode()))
        assert code == "FAILED_PRECONDITION" and "not a Xilinx bitstream" in details
        code, _ = victim.error(lambda: victim.read_file(FIRMWARE))          # write-only: no bytes are kept
        assert code == "PERMISSION_DENIED"
        assert victim.status()["accelerator"]["programmed"] == f"{CFG.bitstream}.bin"
    finally:
        victim.close()
        attacker.close()


def test_malformed_requests_get_errors_and_the_board_survives(client, board):
    pb = client.pb
    bf, mm = pb["buffer"], pb["mmio"]
    assert client.error(lambda: client.buf.allocate(bf.AllocateRequest(size=0)))[0] == "INVALID_ARGUMENT"
    assert client.error(lambda: client.buf.allocate(bf.AllocateRequest(size=-5)))[0] == "INVALID_ARGUMENT"
    assert client.error(lambda: client.buf.read(bf.BufferReadRequest(buffer_id="nope")))[0] == "NOT_FOUND"
    assert "no buffer" in client.free("nope")
    assert "no buffer" in client.buf.flush(bf.FlushRequest(buffer_id="x" * 10000)).msg
    bid = client.alloc(100)
    assert "overruns" in client.write(bid, b"x" * 101)
    assert client.error(lambda: client.buf.read(bf.BufferReadRequest(buffer_id=bid, start=50, end=200)))[0] \
        == "OUT_OF_RANGE"
    r = client.buf.write(iter([bf.BufferWriteRequest(buffer_id=bid, data=b"ab", start=10, end=11)]))
    assert "does not match" in r.msg
    client.free(bid)
    assert client.mm.get_mmio(mm.GetMmioRequest(base_addr=0, length=4)).msg.startswith("no device")
    assert "no device" in client.mm.get_mmio(mm.GetMmioRequest(base_addr=CFG.mmio_address("store"),
                                                                length=CFG.MMIO_RANGE + 4)).msg
    assert "unknown MMIO handle" in client.mm.read(mm.ReadRequest(mmio_id="vta:../../etc", length=4)).msg
    handle = client.handle("fetch")
    assert "allowed 1, 2, 4 or 8" in client.mm.read(mm.ReadRequest(mmio_id=handle, length=3)).msg
    assert "multiple of 4" in client.mm.read(mm.ReadRequest(mmio_id=handle, offset=2, length=4)).msg
    assert "inside" in client.mm.read(mm.ReadRequest(mmio_id=handle, offset=CFG.MMIO_RANGE, length=4)).msg
    assert "multiple of 4" in client.mm.write(mm.WriteRequest(mmio_id=handle, data=b"abc")).msg
    assert client.error(lambda: client.read_file("/etc/shadow"))[0] == "NOT_FOUND"
    assert client.error(lambda: client.write_file("/etc/passwd", b"x"))[0] == "PERMISSION_DENIED"
    assert client.error(lambda: client.write_file("/lib/firmware/../../etc/x", b"x"))[0] == "INVALID_ARGUMENT"
    assert client.error(lambda: client.write_file("/sys/class/fpga_manager/fpga0/flags", b"7"))[0] \
        == "INVALID_ARGUMENT"
    big = client.alloc(6 * MiB)
    one_message = iter([bf.BufferWriteRequest(buffer_id=big, data=b"\0" * (5 * MiB))])
    assert client.error(lambda: client.buf.write(one_message))[0] == "RESOURCE_EXHAUSTED"   # > --max-message-mb 4
    client.free(big)
    status = client.status()
    assert status["rpc"]["errors"] and board.alive()
    assert_accounted(status)


def test_garbage_on_the_port_leaves_the_board_serving(client, board):
    rng = random.Random(11)
    payloads = [bytes(rng.randrange(256) for _ in range(4096)), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(rng.randrange(256) for _ in range(512)), b""]
    idle = []
    for payload in payloads:
        s = socket.create_connection(("127.0.0.1", board.port), timeout=5)
        if payload:
            s.sendall(payload)
        idle.append(s)                                           # leave them open while others are served
    bid = client.alloc(4096)
    client.write(bid, b"\x01" * 4096)
    assert client.read(bid) == b"\x01" * 4096
    client.free(bid)
    for s in idle:
        s.close()
    assert board.alive()
    assert_accounted(client.status())


def test_allocating_past_the_boards_memory_is_refused(remote, board):
    a, b = Client(remote, board.address), Client(remote, board.address)
    try:
        first = a.alloc(300 * MiB)
        code, details = b.error(lambda: b.buf.allocate(b.pb["buffer"].AllocateRequest(size=300 * MiB)))
        assert code == "RESOURCE_EXHAUSTED" and "512 MiB" in details and "by others" in details
        code, _ = b.error(lambda: b.buf.allocate(b.pb["buffer"].AllocateRequest(size=(1 << 31) - 1)))
        assert code == "RESOURCE_EXHAUSTED"
        status = b.status()
        assert status["memory"]["used_bytes"] == 300 * MiB
        assert_accounted(status)
        a.free(first)
        assert b.status()["memory"]["used_bytes"] == 0
    finally:
        a.close()
        b.close()


def test_vanished_clients_buffers_are_reclaimed_when_the_buffer_count_is_full_too():
    """gRPC has no disconnect hook: a vanished client's buffers stay until an allocation needs room, and then
    those of clients idle past the lease are reclaimed, whole, longest idle first: when the board's buffer
    *count* (--max-buffers) is what is full too, not only its memory (small buffers of vanished clients once
    filled the count for good, and every allocation was refused however long their owners had been gone)."""
    from vta.board.server import Refused, ServerLimits, SimulatedBoard
    board = SimulatedBoard(CFG, ServerLimits(mem_bytes=64 * MiB, max_buffers=8, lease_s=60.0))
    try:
        for client in ("gone-1", "gone-2"):
            board.touch(client, "allocate")
            for _ in range(4):
                board.allocate(4096, "|u1", client)
        for client in ("gone-1", "gone-2"):
            board.peers[client] -= 120.0    # both idle past the lease; gone-1 the longest
        board.touch("new", "allocate")
        board.allocate(4096, "|u1", "new")
        assert sorted({b.owner for b in board.buffers.values()}) == ["gone-2", "new"]
        assert board.status()["memory"]["reclaimed_total"] == 4
        for _ in range(7):   # gone-2's go too when the count is full again; then only this client's remain
            board.allocate(4096, "|u1", "new")
        assert {b.owner for b in board.buffers.values()} == {"new"} and len(board.buffers) == 8
        with pytest.raises(Refused, match=r"holds 8 buffers, the most it keeps \(--max-buffers 8\)"):
            board.allocate(4096, "|u1", "new")   # a client's own buffers are never reclaimed for it
        assert len(board.sim.regions()) == 8 and board.used == 8 * 4096
    finally:
        board.close()


STALE_DONE_CLIENT = """
import json
from hw_config import MEM_TYPES, OPCODES, load_config
from vta.device_pynq import PynqDevice
from vta.isa import FinishInsn, GemmInsn, MemInsn, assemble
cfg = load_config("pynq")
with PynqDevice(cfg, timeout_s=60) as dev:
    wgt = dev.alloc(1024 * 256)
    slow = assemble([MemInsn(memory_type=MEM_TYPES["WGT"], dram_base=wgt.addr // 256, y_size=1, x_size=1024,
                             x_stride=1024, push_next_dep=1),
                     GemmInsn(pop_prev_dep=1, uop_bgn=0, uop_end=1, iter_out=1, iter_in=1), FinishInsn()], cfg)
    runs = [dev.run(slow) for _ in range(2)]   # the second starts with the first's done=1 still showing
    print(json.dumps([[st.host_seconds, st.seconds] for st in runs]))
"""


def test_the_pynq_device_waits_past_a_stale_done(board, tmp_path):
    """Each run lasts its modelled time (x1000 here), though done reads 1 from the start of the second run."""
    from vta.board.bitstream import make_placeholder
    make_placeholder(CFG, cache_dir=tmp_path)
    env = {**os.environ, "PYNQ_REMOTE_DEVICES": "127.0.0.1", "VTA_PYNQ_BOARD": board.address,
           "VTA_CACHE_PATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", STALE_DONE_CLIENT], env=env, check=False, capture_output=True,
                          text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    for host_seconds, model_seconds in json.loads(done.stdout.strip().splitlines()[-1]):
        assert model_seconds > 3e-4                                  # the weight load alone: ~0.36 ms
        assert host_seconds >= 0.95 * model_seconds * 1000          # not ended early by the stale 1


KILLED_CLIENT = """
import sys, time
from hw_config import MEM_TYPES, OPCODES, load_config
from vta.device_pynq import PynqDevice
from vta.isa import FinishInsn, GemmInsn, assemble
cfg = load_config("pynq")
dev = PynqDevice(cfg, timeout_s=600)
dev.alloc(256 << 20)
print("allocated", flush=True)
long = assemble([GemmInsn(uop_bgn=0, uop_end=1, iter_out=1000, iter_in=1000), FinishInsn()], cfg)
print("launching", flush=True)
dev.run(long)
print("finished?!", flush=True)
"""


def test_a_client_killed_mid_run_leaves_the_board_up_and_its_memory_reclaimable(remote, board, tmp_path):
    """The client is SIGKILLed while its 10 s (board time) run is going; its 256 MiB are reclaimed later."""
    from vta.board.bitstream import make_placeholder
    make_placeholder(CFG, cache_dir=tmp_path)
    env = {**os.environ, "PYNQ_REMOTE_DEVICES": "127.0.0.1", "VTA_PYNQ_BOARD": board.address,
           "VTA_CACHE_PATH": str(tmp_path)}
    child = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        for expected in ("allocated", "launching"):
            line = child.stdout.readline().strip()
            assert line == expected, child.stderr.read() if not line else line
        observer = Client(remote, board.address)
        deadline = time.monotonic() + 30
        while observer.status()["accelerator"]["state"] != "running":
            assert time.monotonic() < deadline, child.stderr.read() if child.poll() is not None else "not running"
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    status = observer.status()
    assert status["accelerator"]["state"] == "running"            # the run goes on without its client
    assert status["memory"]["by_client"] == {}                     # the observer holds nothing, and sees
    assert status["memory"]["other_clients"]["bytes"] >= 256 * MiB  # the dead client's buffers as a total only
    assert_accounted(status)
    time.sleep(1.2)                                                # past the lease (--lease-s 1)
    before = status["memory"]["reclaimed_bytes"]
    bid = observer.alloc(400 * MiB)                                # does not fit beside the dead client's
    status = observer.status()
    assert status["memory"]["reclaimed_bytes"] - before >= 256 * MiB
    assert status["memory"]["used_bytes"] == 400 * MiB
    assert_accounted(status)
    observer.free(bid)
    observer.program()                          # its own registers only: the dead client's run goes on (issue 41)
    status = observer.status()
    assert status["memory"]["used_bytes"] == 0 and status["accelerator"]["state"] == "running"
    assert_accounted(status)
    observer.close()
    assert board.alive()


def test_programming_the_board_is_one_log_line(remote, tmp_path):
    """A download was logged twice, by the registers ("PL programmed with ...") and by the server ("... programmed
    ... (N bytes)"): one line now, with the client, the size and what it did."""
    from vta.board.local import LocalBoard
    b = LocalBoard(log_path=tmp_path / "log").start()
    try:
        c = Client(remote, b.address)
        c.program()
        c.close()
    finally:
        assert b.stop() == 0
    lines = [line for line in (tmp_path / "log").read_text().splitlines() if "programmed" in line]
    assert len(lines) == 1 and lines[0].endswith(f"programmed {CFG.bitstream}.bin ({len(placeholder_bytes(CFG))} bytes): "
                                                 "its VTA registers reset"), lines


def test_clean_shutdown_on_sigint(remote, tmp_path):
    from vta.board.local import LocalBoard
    b = LocalBoard(log_path=tmp_path / "log").start()
    c = Client(remote, b.address)
    c.alloc(4096)                                                  # a buffer left behind at shutdown
    c.close()
    b.proc.send_signal(signal.SIGINT)
    assert b.proc.wait(15) == 0
    assert "stopped" in Path(tmp_path / "log").read_text()
