"""Capability sets: what each VTA implementation executes (hw_config.capabilities), checked against what the
sources say the hardware does (docs/isa.md, "Capability sets"), refused before launch, in strict simulation, and
never emitted by the compiler for such a config."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import graph_pack
from graph_pack.zoo import get_model, pack_points
from hw_config import ALU_OPCODES, MEM_TYPES, OPCODES, ConfigError, load_config
from hw_config.capabilities import CAPABILITY_SETS, violations
from simulator import InvalidInstruction, Simulator
from vta import compile_op
from vta.device import SimDevice
from vta.isa import AluInsn, FinishInsn, MemInsn, assemble
from vta.program_check import ProgramRejected, check_program
from vta.runtime import ScheduleError

PYNQ = load_config("pynq")
PAGE = 4096
DATA, INSNS = (0x10000, 4 * PAGE), (0x20000, PAGE)


def _load(mem: str, **fields) -> MemInsn:
    geometry = {"dram_base": DATA[0] // PYNQ.elem_bytes(mem), "y_size": 1, "x_size": 2, "x_stride": 2, **fields}
    return MemInsn(opcode=OPCODES["LOAD"], memory_type=MEM_TYPES[mem], **geometry)


# (what, instruction, refused on the Pynq's 0.0.2 bitstream with) -- VTA's HLS source (vta.cc) and the issue's
# facts: no ALU MUL; the compute module loads UOP (x_size micro-ops, one row) and ACC only; padding on INP loads,
# and on ACC loads only since tvm-vta 6096ca0 (Dec 2020), after the published bitstreams
HOSTILE = {
    "mul": (AluInsn(alu_opcode=ALU_OPCODES["MUL"], uop_end=1, iter_out=1, iter_in=1), "ALU MUL"),
    "acc_8bit": (_load("ACC_8BIT"), "LOAD ACC_8BIT"),
    "padded acc": (_load("ACC", y_pad_0=1), "LOAD ACC with padding"),
    "padded wgt": (_load("WGT", x_pad_1=2), "LOAD WGT with padding"),
    "uop rows": (_load("UOP", y_size=2), "LOAD UOP of several rows"),
    # vta.cc: shft_by = ap_int<LOG_ACC_WIDTH>(the operand's low bits), so 16 is -16 on the bitstream: a left shift
    "shr 16": (AluInsn(alu_opcode=ALU_OPCODES["SHR"], use_imm=1, imm=16, uop_end=1, iter_out=1, iter_in=1),
               "ALU SHR by immediate 16"),
}
REFUSED_BY = {   # which capability sets refuse each (None: all but fsim)
    "mul": {"vta-hls", "vta-hls-0.0.2", "vta-chisel"}, "acc_8bit": {"vta-hls", "vta-hls-0.0.2", "vta-chisel"},
    "padded acc": {"vta-hls-0.0.2"}, "padded wgt": {"vta-hls", "vta-hls-0.0.2", "vta-chisel"},
    "uop rows": {"vta-hls", "vta-hls-0.0.2", "vta-chisel"}, "shr 16": {"vta-hls", "vta-hls-0.0.2"},
}


def _program(*insns, cfg=PYNQ) -> np.ndarray:
    return assemble([*insns, FinishInsn()], cfg)


def test_presets_name_what_their_hardware_executes():
    caps = {name: load_config(name).CAPABILITIES for name in ("pynq", "sim", "ultra96", "zcu104", "de10nano",
                                                                "batch4", "block32")}
    assert caps == {"pynq": "vta-hls-0.0.2", "sim": "fsim", "ultra96": "vta-hls", "zcu104": "vta-hls",
                    "de10nano": "vta-chisel", "batch4": "vta-hls", "block32": "vta-hls"}
    vta_json = {k: getattr(PYNQ, k) for k in PYNQ.vta_dict()}   # VTA's own keys only: the default follows them
    assert load_config(vta_json).CAPABILITIES == "vta-hls-0.0.2"
    # VTA published Pynq bitstreams for HW_VER 0.0.1 and 0.0.2, both built before the HLS source padded ACC loads
    assert load_config({**vta_json, "HW_VER": "0.0.1"}).CAPABILITIES == "vta-hls-0.0.2"
    assert load_config({**vta_json, "HW_VER": "0.0.1", "TARGET": "ultra96"}).CAPABILITIES == "vta-hls"
    assert load_config({**vta_json, "TARGET": "sim"}).CAPABILITIES == "fsim"
    assert load_config({**vta_json, "HW_VER": "0.0.3"}).CAPABILITIES == "vta-hls"
    assert PYNQ.replace(CAPABILITIES="fsim").fingerprint == PYNQ.fingerprint   # refuses programs, changes none
    with pytest.raises(ConfigError, match=r"CAPABILITIES='hls' is not allowed: one of fsim, vta-hls"):
        load_config("pynq", CAPABILITIES="hls")


@pytest.mark.parametrize("case", list(HOSTILE))
def test_what_the_hardware_lacks_is_refused_before_launch_naming_the_instruction(case):
    insn, what = HOSTILE[case]
    program = _program(MemInsn(opcode=OPCODES["LOAD"], memory_type=MEM_TYPES["INP"]), insn)  # a NOP, then it
    regions = [DATA, INSNS]
    for name in CAPABILITY_SETS:
        cfg = PYNQ.replace(CAPABILITIES=name)
        if name in REFUSED_BY[case]:
            with pytest.raises(ProgramRejected, match=rf"instruction 1: {what}: capability set {name}") as e:
                check_program(program, cfg, regions, INSNS)
            assert e.value.index == 1
            assert [i for i, _ in violations(program, cfg)] == [1]
        else:
            check_program(program, cfg, regions, INSNS)
            assert violations(program, cfg) == []


@pytest.mark.parametrize("case", list(HOSTILE))
def test_strict_simulation_refuses_what_the_config_lacks_and_fsim_runs_it(case):
    insn, what = HOSTILE[case]
    program = _program(insn)
    for strict in (True, False):
        sim = Simulator(PYNQ, strict=strict)
        sim.map(*DATA)
        if strict:
            with pytest.raises(InvalidInstruction, match=rf"instruction 0: {what}.*strict mode") as e:
                sim.run(program)
            assert e.value.index == 0
        else:
            sim.run(program)   # the functional simulator executes the whole ISA
    fsim = Simulator(PYNQ.replace(CAPABILITIES="fsim"), strict=True)
    fsim.map(*DATA)
    fsim.run(program)


def test_the_compiler_never_emits_mul_for_hls_hardware():
    with pytest.raises(ScheduleError, match=r"multiply: no ALU MUL in this config's hardware, capability set "
                                            r"vta-hls-0.0.2.*it has ADD, MAX, MIN, SHR"):
        compile_op("multiply", PYNQ, data_shape=(1, 16, 4, 4))
    with pytest.raises(ScheduleError, match=r"conv2d epilogue: no ALU MUL"):
        compile_op("conv2d", PYNQ, data_shape=(1, 16, 8, 8), kernel_shape=(16, 16, 3, 3), padding=1,
                   epilogue=[("mul", 3), ("shr", 4)])
    x = np.arange(256, dtype=np.int32).reshape(1, 16, 4, 4) - 128
    sim = compile_op("multiply", PYNQ.replace(CAPABILITIES="fsim"), data_shape=(1, 16, 4, 4), imm=3)
    np.testing.assert_array_equal(sim.run(x), (x * 3).astype(np.int8))   # fsim: the whole ISA, bit-exact


@pytest.mark.parametrize("imm, refused_by", [(15, set()), (-16, {"vta-chisel"}), (16, {"vta-hls", "vta-hls-0.0.2"}),
                                             (-17, {"vta-hls", "vta-hls-0.0.2", "vta-chisel"}),
                                             (31, {"vta-hls", "vta-hls-0.0.2"}), (-1, {"vta-chisel"})])
def test_shift_immediates_each_implementation_reads_as_the_isa_says(imm, refused_by):
    """VTA's HLS reads an SHR amount as a signed LOG_ACC_WIDTH-bit number (-16..15 here), its Chisel as an unsigned
    one (0..31, no left shift): an immediate outside is refused before launch, naming the instruction."""
    program = _program(AluInsn(alu_opcode=ALU_OPCODES["SHR"], use_imm=1, imm=imm, uop_end=1, iter_out=1, iter_in=1))
    refused = {name for name in CAPABILITY_SETS if violations(program, PYNQ.replace(CAPABILITIES=name))}
    assert refused == refused_by


@pytest.mark.parametrize("shift", [16, 20, 31])
def test_the_compiler_shifts_in_steps_every_implementation_reads_alike(shift):
    """"shr 20" goes out as SHR 15 then SHR 5 (exact: arithmetic shifts compose), so the Pynq's bitstream computes
    what numpy does; "shl" on VTA's Chisel, which has no left shift by SHR, is refused when compiling."""
    x = (np.arange(256, dtype=np.int64).reshape(1, 16, 4, 4) * 8_388_607 - 1_000_000_000).astype(np.int32)
    op = compile_op("right_shift", PYNQ, data_shape=(1, 16, 4, 4), imm=shift)
    assert violations(np.concatenate([s.insns for s in op.program.streams]), PYNQ) == []
    np.testing.assert_array_equal(op.run(x, None), (x >> shift).astype(np.int8))
    with pytest.raises(ScheduleError, match=r"ALU SHR by -\d+(, -\d+)*: capability set vta-chisel shifts only by 0\.\.31 .*no left shift"):
        compile_op("conv2d", load_config("de10nano"), data_shape=(1, 16, 8, 8), kernel_shape=(16, 16, 3, 3),
                   padding=1, epilogue=[("shl", shift), ("shr", 4)])


@pytest.mark.parametrize("model, image", [("resnet-18", (3, 64, 64)), ("mobilenet", (3, 64, 64)), ("dcgan", None)])
def test_networks_built_for_the_pynq_use_only_what_its_bitstream_has(model, image):
    """Every stream a zoo network's build runs goes through a strict simulator: one instruction the 0.0.2
    bitstream lacks would fail the run."""
    graph, params = get_model(model, image_shape=image)
    qgraph, qparams = graph_pack.quantize(graph, params)
    packed = graph_pack.graph_pack(qgraph, PYNQ, *pack_points(model))
    device = SimDevice(PYNQ, Simulator(PYNQ, strict=True))
    mod = graph_pack.build(packed, PYNQ, qparams, device=device)
    x = np.random.default_rng(0).standard_normal(graph[graph.inputs[0]].shape).astype(np.float32)
    mod.run(**{graph.inputs[0]: x})
    assert mod.stats.gemm_counter > 0
    reference = graph_pack.build(packed, PYNQ.replace(CAPABILITIES="fsim"), qparams)
    reference.run(**{graph.inputs[0]: x})
    np.testing.assert_array_equal(mod.get_output(0), reference.get_output(0))


@pytest.mark.parametrize("preset, says", [
    ("pynq", "bitstream: published by VTA: uwsampl/vta-distro bitstreams/pynq/0.0.2/1x16_i8w8a32_15_15_18_17.bit"),
    ("ultra96", "bitstream: none published: VTA's distro has bitstreams for pynq 0.0.1/0.0.2"),
    ("zcu104", "bitstream: none published"),
    ("sim", "bitstream: none: TARGET 'sim' is not a Pynq-style board"),
])
def test_config_show_says_what_the_hardware_executes_and_whether_a_bitstream_exists(preset, says):
    out = subprocess.run([sys.executable, "-m", "vta", "config", "show", preset], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert says in out
    assert f"executes: {load_config(preset).CAPABILITIES}: ALU MIN, MAX, ADD, SHR" in out


def test_a_missing_bitstream_with_none_published_says_what_to_do(tmp_path):
    done = subprocess.run([sys.executable, "-m", "vta", "board", "bitstream", "--config", "zcu104", "--cache-dir",
                           str(tmp_path)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "none published" in done.stderr and "VTA's hardware flow" in done.stderr
    assert "vta board bitstream --make-simulated --config zcu104" in done.stderr
