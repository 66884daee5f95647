"""The Pynq device (`vta.device_pynq.PynqDevice`) driving the simulated board through the unmodified pynq client.

Each client is a child process with ``PYNQ_REMOTE_DEVICES=127.0.0.1`` (pynq's remote mode) and the board's
free port in ``$VTA_PYNQ_BOARD`` (pynq's own probe always uses port 7967: one test moves pynq's default to a
free port for that path, another checks that the board's default is 7967). The board is `vta board serve --simulated` on 127.0.0.1, in its own process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from extras import need
from golden_files import GOLDEN_DIR

from hw_config import load_config
from simulator.image import load_image, load_result
from simulator.stats import VTA_COUNTERS
from vta.board.bitstream import BitstreamError, make_placeholder

CFG = load_config("pynq")
GOLDEN = ["alu_0", "alu_1", "alu_2", "alu_3", "alu_4", "alu_5", "gemm_0", "gemm_1", "padded_load_0",
          "padded_load_1", "padded_load_2", "padded_load_3", "padded_load_4", "relu_0", "save_load_out_0",
          "shift_and_scale_0"]
PRELUDE = """
import json, sys, time
import numpy as np
from hw_config import load_config
from vta.device_pynq import BoardTimeout, PynqDevice
from vta.program_check import ProgramRejected
cfg = load_config("pynq")
def emit(**values):
    print(json.dumps(values), flush=True)
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vta_cache")
    make_placeholder(CFG, cache_dir=root)
    return root


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    need("pynq")
    from vta.board.local import LocalBoard
    log = tmp_path_factory.mktemp("board") / "server.log"
    with LocalBoard(log_path=log) as b:
        yield b
    assert b.proc.returncode == 0, log.read_text()[-2000:]


def client(code: str, board, cache: Path, *args: str, timeout: float = 60, **env) -> dict:
    """Run ``code`` (``sys.argv[1:]`` = ``args``) in a fresh pynq client process; returns its last JSON line."""
    full_env = {**os.environ, "PYNQ_REMOTE_DEVICES": "127.0.0.1", "VTA_CACHE_PATH": str(cache),
                **({"VTA_PYNQ_BOARD": board.address} if board is not None else {}), **env}
    done = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code), *args], env=full_env,
                          check=False, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def stored_bytes_match(name: str, segments, where: Path | None = None) -> None:
    """The bytes VTA's own run stored are identical; everything else is as the image had it (the image and its
    ``.expect.npz`` from ``where``, default the golden programs)."""
    where = GOLDEN_DIR if where is None else where
    image = load_image(where / f"{name}.npz")
    with np.load(where / f"{name}.expect.npz", allow_pickle=False) as z:
        expect = [(int(a), z[f"seg_{i}"].copy()) for i, a in enumerate(z["seg_addr"])]
    assert [a for a, _ in segments] == [a for a, _ in image.segments]
    for (base, before), (_, after) in zip(image.segments, segments, strict=True):
        written = np.zeros(before.size, dtype=bool)
        for addr, data in expect:
            if base <= addr < base + before.size:
                assert after[addr - base:addr - base + data.size].tobytes() == data.tobytes(), \
                    f"{name}: bytes at 0x{addr:x} differ from VTA's"
                written[addr - base:addr - base + data.size] = True
        np.testing.assert_array_equal(after[~written], before[~written], err_msg=f"{name}: unstored bytes changed")


# ------------------------------------------------------------------------------------------------------------
# before anything runs (no board needed)

def test_missing_or_mismatched_bitstreams_are_refused_before_anything_runs(tmp_path):
    from vta.device_pynq import PynqDevice
    with pytest.raises(BitstreamError) as info:
        PynqDevice(CFG, cache_dir=tmp_path)
    text = str(info.value)
    assert str(tmp_path / "pynq" / "0_0_2" / f"{CFG.bitstream}.bit") in text
    assert "bitstream=PATH" in text and "vta-distro" in text and "--make-simulated" in text
    other = tmp_path / "1x16_i8w8a32_15_15_18_18.bit"
    other.write_bytes(b"x")
    with pytest.raises(BitstreamError, match="does not match the hardware config"):
        PynqDevice(CFG, bitstream=other)
    named = tmp_path / f"{CFG.bitstream}.bit"
    named.write_bytes(b"not a bitstream")
    with pytest.raises(BitstreamError, match="not a Xilinx .bit file"):
        PynqDevice(CFG, bitstream=named)
    with pytest.raises(BitstreamError, match="Chisel"):
        PynqDevice(load_config("de10nano"), cache_dir=tmp_path)
    with pytest.raises(BitstreamError, match="simulation target"):
        PynqDevice(load_config("sim"), cache_dir=tmp_path)


def test_a_missing_pynq_extra_is_one_clear_message(cache):
    code = """
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "pynq":
                    raise ImportError("No module named 'pynq' (blocked by the test)")
        sys.meta_path.insert(0, Block())
        try:
            PynqDevice(cfg)
        except ImportError as e:
            emit(message=str(e))
    """
    out = client(code, None, cache, PYNQ_REMOTE_DEVICES="")
    assert "pip install 'vta-stack[pynq]'" in out["message"] and "PynqDevice" in out["message"]


# ------------------------------------------------------------------------------------------------------------
# on the simulated board

GOLDEN_CLIENT = """
    from simulator.image import load_image, save_result
    from vta.board.images import replay_on_device
    from vta.program_check import ProgramRejected
    out = {}
    with PynqDevice(cfg) as dev:
        for name in sys.argv[1].split(","):
            try:
                result, stats = replay_on_device(dev, load_image(f"{sys.argv[2]}/{name}.npz"))
            except ProgramRejected as e:
                out[name] = {"refused": str(e), "index": e.index}
                continue
            save_result(f"{sys.argv[3]}/{name}.npz", result)
            out[name] = {"board": stats.board, "host_seconds": stats.host_seconds, "seconds": stats.seconds}
    emit(**out)
"""


def test_vtas_golden_programs_give_bit_identical_dram_on_the_board(board, cache, tmp_path):
    need("golden")
    out = client(GOLDEN_CLIENT, board, cache, ",".join(GOLDEN), str(GOLDEN_DIR), str(tmp_path))
    # VTA's padded ACC loads came after the published 0.0.2 bitstream: refused before launch, at the load
    padded = [name for name in GOLDEN if name.startswith("padded_load")]
    for name in padded:
        assert out[name]["index"] == 0 and "LOAD ACC with padding" in out[name]["refused"], out[name]
    for name in (n for n in GOLDEN if n not in padded):
        result = load_result(tmp_path / f"{name}.npz")
        stored_bytes_match(name, result.segments)
        with np.load(GOLDEN_DIR / f"{name}.expect.npz", allow_pickle=False) as z:
            expect_stats = json.loads(str(z["stats"]))
        assert {k: result.stats[k] for k in VTA_COUNTERS} == expect_stats      # counters from the program
        assert result.stats["launched"] and "timing model" in result.stats["cycles_from"]
        assert out[name]["board"].startswith("vta-simulated-pynq at 127.0.0.1:")
        # the poll never ends on a stale done: the board shows done only after the modelled run time
        assert out[name]["host_seconds"] >= out[name]["seconds"] > 0
    status = board.status()
    assert status["memory"]["used_bytes"] == 0 and status["accelerator"]["runs"] >= len(GOLDEN) - len(padded)


OPS_CLIENT = """
    from vta import compile_op
    from vta.device import SimDevice
    from vta.templates import random_inputs
    cases = [
        ("conv2d", dict(data_shape=(1, 32, 14, 14), kernel_shape=(32, 32, 3, 3), padding=(1, 1),
                        epilogue=[("bias",), ("shr", 8), ("clip", 0, 127)])),
        ("dense", dict(data_shape=(4, 256), kernel_shape=(64, 256), epilogue=[("shr", 6), ("clip", -127, 127)])),
        ("add", dict(data_shape=(1, 32, 8, 8))),
        ("relu", dict(data_shape=(1, 16, 7, 7))),
    ]
    out = {}
    with PynqDevice(cfg) as dev:
        for name, kw in cases:
            on_board = compile_op(name, cfg, device=dev, **kw)
            on_sim = compile_op(name, cfg, device=SimDevice(cfg), config=on_board.config, **kw)
            inputs = random_inputs(on_board, 7)
            got = on_board.run(**inputs)
            out[name] = {"numpy": bool(np.array_equal(got, on_board.reference(**inputs))),
                         "simulator": bool(np.array_equal(got, on_sim.run(**inputs))),
                         "counters": on_board.stats.vta_counters() == on_sim.stats.vta_counters(),
                         "cycles": [on_board.cycles, on_sim.cycles], "insns": on_board.num_insns}
    emit(**out)
"""


def test_compiled_operators_run_bit_exactly_on_the_board(board, cache):
    out = client(OPS_CLIENT, board, cache)
    for name, r in out.items():
        assert r["numpy"] and r["simulator"], f"{name}: board output differs ({r})"
        assert r["counters"] and r["cycles"][0] == r["cycles"][1] > 0
    assert board.status()["memory"]["used_bytes"] == 0


SHARED_CLIENT = """
    import threading
    import vta
    from vta.templates.base import random_inputs
    sys.setswitchinterval(1e-6)
    dev = PynqDevice(cfg, timeout_s=5)
    ops = [vta.compile_op("conv2d", cfg, device=dev, data_shape=(1, 16, 4, 4), kernel_shape=(16, 16, 3, 3),
                          padding=(1, 1), epilogue=[("shr", 6), ("clip", -127, 127)]) for _ in range(3)]
    inputs = [random_inputs(op, seed=i) for i, op in enumerate(ops)]
    want = [op.reference(**x) for op, x in zip(ops, inputs)]
    wrong, errors = [0] * 3, []
    start = threading.Barrier(3)
    def work(i):
        start.wait()
        try:
            for _ in range(5):
                wrong[i] += not np.array_equal(ops[i].run(**inputs[i]), want[i])
        except Exception as e:
            errors.append(repr(e)[:300])
    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for op in ops:
        op.close()
    dev.close()
    emit(wrong=sum(wrong), errors=errors)
"""


def test_one_device_shared_by_threads(board, cache):
    """Threads sharing one PynqDevice, each running its own op: calls take turns, every output is right. Before its
    lock, the threads' programs overwrote each other in the device's one instruction buffer: wrong outputs and
    runs that never raised done (BoardTimeout) in 2 of 2 client runs."""
    assert client(SHARED_CLIENT, board, cache) == {"wrong": 0, "errors": []}
    assert board.status()["memory"]["used_bytes"] == 0


HOSTILE_CLIENT = """
    from vta.board.local import read_status
    from vta.isa import FinishInsn, GemmInsn, MemInsn, assemble
    from hw_config import MEM_TYPES, OPCODES
    host, port = sys.argv[1].split(":")
    out = {}
    def runs():
        return read_status(host, int(port))["accelerator"]["runs"]
    dev = PynqDevice(cfg, timeout_s=1.5)
    buf = dev.alloc(4096)
    def refused(insns):
        try:
            dev.run(assemble(insns, cfg))
        except ProgramRejected as e:
            return [str(e), e.index]
        return None
    before = runs()
    out["outside"] = refused([MemInsn(memory_type=MEM_TYPES["INP"], dram_base=(buf.addr + (1 << 24)) // 16, y_size=1,
                                      x_size=1, x_stride=1), FinishInsn()])
    out["kernel"] = refused([MemInsn(opcode=OPCODES["STORE"], memory_type=MEM_TYPES["OUT"], dram_base=0x10,
                                     y_size=4, x_size=4, x_stride=4), FinishInsn()])
    out["no_finish"] = refused([GemmInsn()])
    dev.run(assemble([GemmInsn(), FinishInsn()], cfg))            # allocates the instruction buffer
    addr, size = dev.instruction_region
    out["self_rewrite"] = refused([MemInsn(opcode=OPCODES["STORE"], memory_type=MEM_TYPES["OUT"],
                                           dram_base=addr // 16, y_size=1, x_size=1, x_stride=1), FinishInsn()])
    out["launched_while_refusing"] = runs() - before - 1
    t = time.perf_counter()
    try:
        dev.run(assemble([GemmInsn(pop_prev_dep=1), FinishInsn()], cfg))   # waits for a token never pushed
    except BoardTimeout as e:
        out["timeout"] = [str(e), time.perf_counter() - t]
    # the same device recovers: it downloads the bitstream again before its next run
    dev.copy_in(buf, bytes(range(256)) * 16)
    after = dev.run(assemble([FinishInsn()], cfg))
    out["recovered"] = bool(after.launched) and dev.copy_out(buf, 256).tolist() == list(range(256))
    dev.close()
    emit(**out)
"""


def test_hostile_programs_are_refused_or_stopped_and_the_board_serves_on(board, cache):
    need("golden")   # the client served afterwards replays VTA's gemm_1
    out = client(HOSTILE_CLIENT, board, cache, board.address)
    for key, fragment in (("outside", "instruction 0 (LOAD INP)"), ("kernel", "instruction 0 (STORE OUT)"),
                          ("no_finish", "does not end with FINISH"), ("self_rewrite", "instruction buffer")):
        message, index = out[key]
        assert fragment in message and index == 0, (key, message)
    assert "[0x" in out["outside"][0] and "not inside one buffer" in out["outside"][0]
    assert out["launched_while_refusing"] == 0                     # refused before launch: nothing ran
    message, seconds = out["timeout"]
    assert 1.5 <= seconds < 10
    for fragment in ("vta-simulated-pynq at 127.0.0.1", "2 instructions", "buffer(s)", "done 0",
                     "DeadlockError", "downloads 1x16_i8w8a32_15_15_18_17.bit again"):
        assert fragment in message, (fragment, message)
    assert out["recovered"]
    # another client is served as usual afterwards
    again = client(GOLDEN_CLIENT, board, cache, "gemm_1", str(GOLDEN_DIR), str(cache))
    assert again["gemm_1"]["host_seconds"] > 0
    stored_bytes_match("gemm_1", load_result(cache / "gemm_1.npz").segments)
    status = board.status()
    assert status["accelerator"]["faults"] >= 1 and status["accelerator"]["state"] == "idle"
    assert status["memory"]["used_bytes"] == 0


def test_board_replay_and_status_commands(board, cache, tmp_path, capsys):
    """`vta board replay` runs an image on the board (in this process); `vta board status` reads the books."""
    need("golden")
    from vta.cli import main
    out = tmp_path / "relu_0.result.npz"
    argv = ["board", "replay", str(GOLDEN_DIR / "relu_0.npz"), "--board", board.address, "--cache-dir", str(cache),
            "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    text = capsys.readouterr().out
    assert "ms per call measured by the host (launch to done)" in text and "predicted" not in text
    assert "timing model" in text and "vta-simulated-pynq" in text
    stored_bytes_match("relu_0", load_result(out).segments)
    host, port = board.address.split(":")
    assert main(["board", "status", "--host", host, "--port", port]) == 0
    text = capsys.readouterr().out
    assert "memory: 0 of 536,870,912 bytes" in text and "run(s)" in text   # (the replay's last run is its session's)
    assert main(["board", "status", "--host", host, "--port", port, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory"]["used_bytes"] == 0
    assert main(["board", "status", "--port", "1", "--timeout", "0.5"]) == 2
    assert "is `vta board serve --simulated` running" in capsys.readouterr().err


def test_pynqs_own_device_probe_finds_the_board(cache, tmp_path):
    """PYNQ_REMOTE_DEVICES=127.0.0.1 alone: pynq's own probe (``pynq.Device.devices``) finds the board. pynq
    always connects to RemoteDevice's default port, 7967; the client moves that default to a free port, so the
    test does not depend on 7967 being free on a shared machine (issue 39). The next test checks that our
    board's default port is pynq's."""
    need("pynq")
    from vta.board.local import LocalBoard
    with LocalBoard(port=0, log_path=tmp_path / "log") as b:
        code = f"""
            from pynq.pl_server import remote_device
            init = remote_device.RemoteDevice.__init__
            init.__defaults__ = tuple({b.port} if d == remote_device.PYNQ_PORT else d for d in init.__defaults__)
            import pynq
            dev = PynqDevice(cfg)
            buf = dev.alloc(100)
            dev.copy_in(buf, bytes(range(100)))
            own = list(__import__("json").loads(dev._dev.read_file("/proc/vta-sim/status"))["memory"]["by_client"])
            emit(board=dev.board, probed=[d.name for d in pynq.Device.devices], data=dev.copy_out(buf).tolist(),
                 own=own)
            dev.close()
        """
        out = client(code, None, cache, VTA_PYNQ_BOARD="")
        assert b.status()["memory"]["used_bytes"] == 0
    assert out["board"] == f"vta-simulated-pynq at 127.0.0.1:{b.port}"
    assert out["probed"] == ["vta-simulated-pynq"] and out["data"] == list(range(100))
    assert [c.split("-")[0] for c in out["own"]] == ["session"]   # its buffers are its session's (issue 41, item 5)


def test_the_boards_default_port_is_the_one_pynqs_probe_uses():
    need("pynq")
    from pynq.pl_server import remote_device

    from vta import cli, device_pynq
    from vta.board import server
    assert remote_device.PYNQ_PORT == 7967
    assert remote_device.RemoteDevice.__init__.__defaults__[2] == remote_device.PYNQ_PORT   # (index, ip, port, tag)
    assert server.DEFAULT_PORT == device_pynq.DEFAULT_PORT == remote_device.PYNQ_PORT
    cli.load_plugins()
    for argv in (["board", "serve", "--simulated"], ["board", "status"]):
        assert cli.build_parser().parse_args(argv).port == remote_device.PYNQ_PORT, argv


def test_local_buffers_are_cached_like_vtas(tmp_path):
    """VTA's runtime stages data in cached CMA buffers (kAlwaysCache); pynq's local allocate defaults to uncached
    ones, so the device asks for cacheable=True (on the real board pynq passes it to XRT's BO flags)."""
    from simulator import Simulator
    from vta.device_pynq import BoardError, PynqDevice

    class Buffer(np.ndarray):
        physical_address = 0x1000_0000

        def freebuffer(self):
            pass

    asked = []

    class FakePynq:   # pynq.allocate's signature: allocate(shape, dtype, target, **kwargs)
        @staticmethod
        def allocate(shape, dtype, target=None, **kwargs):
            asked.append(kwargs)
            return np.zeros(shape, dtype).view(Buffer)

    dev = PynqDevice.__new__(PynqDevice)
    dev.cfg, dev._pynq, dev._dev, dev.board, dev._timing = CFG, FakePynq, object(), "a local board", Simulator(CFG)
    arr, addr = dev._allocate(4096)
    assert asked == [{"cacheable": True}] and addr == 0x1000_0000 and arr.nbytes == 4096
    # the Pynq's masters reach the ACP DDR window [0, 1 GiB) only (VTA's vivado.tcl): a buffer past it is refused
    Buffer.physical_address = (1 << 30) - 2048
    with pytest.raises(BoardError, match=r"ends past 0x40000000, beyond the DDR window VTA's AXI masters reach"):
        dev._allocate(4096)


# ------------------------------------------------------------------------------------------------------------
# the local path: pynq's own API over a faked hardware layer (tests/fake_zynq.py), no /dev/mem, no XRT

@pytest.fixture
def local_board(tmp_path, monkeypatch):
    """PynqDevice on "the board itself": pynq's active device is FakeZynq; a non-placeholder .bit in the cache."""
    need("pynq")
    import pynq
    from fake_zynq import FakeZynq, cache_board_bitstream

    cache_board_bitstream(CFG, tmp_path)
    made = []

    def install(cfg=CFG, time_scale=1.0):
        fake = FakeZynq(cfg, time_scale)
        monkeypatch.setattr(pynq.Device, "_active_device", fake, raising=False)
        made.append(fake)
        return fake

    monkeypatch.delenv("VTA_PYNQ_BOARD", raising=False)
    monkeypatch.delenv("PYNQ_REMOTE_DEVICES", raising=False)
    yield install, tmp_path
    for fake in made:
        fake.close()


@pytest.mark.parametrize("coherent", [True, False])
def test_the_local_path_runs_bit_exactly_through_pynqs_own_api(local_board, coherent):
    """Cached buffers as VTA allocates them; on the ACP-coherent Pynq no flush, elsewhere flush and invalidate
    around each run (a missing one gives wrong results in the fake's two-copy memory)."""
    from vta import compile_op
    from vta.device_pynq import PynqDevice
    from vta.templates import random_inputs
    install, cache = local_board
    cfg = CFG.replace(COHERENT=coherent)
    fake = install(cfg)
    wl = {"data_shape": (1, 32, 8, 8), "kernel_shape": (32, 32, 3, 3), "padding": (1, 1)}
    epilogue = [("bias",), ("shr", 8), ("clip", -127, 127)]
    reference = compile_op("conv2d", cfg, epilogue=epilogue, **wl)
    inputs = random_inputs(reference, 3)
    with PynqDevice(cfg, cache_dir=cache, timeout_s=30) as dev:
        assert dev.board == f"local board {fake.name}" and not dev.remote
        op = compile_op("conv2d", cfg, epilogue=epilogue, device=dev, **wl)
        for _ in range(2):
            np.testing.assert_array_equal(op.run(**inputs), reference.run(**inputs))
    assert fake.allocations and all(a["cacheable"] for a in fake.allocations)
    syncs = fake.calls["flush"] + fake.calls["invalidate"]
    assert (syncs == 0) if coherent else (fake.calls["flush"] > 0 and fake.calls["invalidate"] > 0)


def test_a_hung_local_board_is_reprogrammed_with_its_buffers_kept(local_board):
    """Hang recovery on the local path: a program that waits forever times out; the next run downloads the
    bitstream again while the buffers stay allocated, and their data survives (CMA memory outlives the PL)."""
    from vta.device_pynq import BoardTimeout, PynqDevice
    from vta.isa import FinishInsn, GemmInsn, assemble
    install, cache = local_board
    fake = install()
    with PynqDevice(CFG, cache_dir=cache, timeout_s=3.0) as dev:
        buf = dev.alloc(4096)
        dev.copy_in(buf, bytes(range(256)) * 16)
        assert fake.calls["download"] == 1
        with pytest.raises(BoardTimeout):
            dev.run(assemble([GemmInsn(pop_prev_dep=1), FinishInsn()], CFG))   # a token never pushed
        after = dev.run(assemble([FinishInsn()], CFG))
        assert after.launched and fake.calls["download"] == 2
        assert dev.copy_out(buf, 4096).tolist() == list(range(256)) * 16
