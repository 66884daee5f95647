"""The ISA: bit positions pinned to VTA, encode/decode round trips, golden streams, disassembly, docs."""

import dataclasses
import random
from pathlib import Path

import numpy as np
import pytest
from golden_files import GOLDEN_DIR, golden_path

from hw_config import MEM_TYPES, OPCODES, load_config, presets
from vta import isa
from vta.isa import (
    AluInsn,
    FinishInsn,
    GemmInsn,
    MemInsn,
    Uop,
    assemble,
    decode,
    decode_program,
    decode_uop,
    disassemble,
    encode,
    encode_uop,
    isa_page,
    uops_from_bytes,
    uops_to_bytes,
)

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = GOLDEN_DIR
GOLDEN_NAMES = sorted(p.name[:-4] for p in GOLDEN.glob("*.npz") if not p.name.endswith(".expect.npz"))
PYNQ = load_config("pynq")

HEADER = [("opcode", 0, 2), ("pop_prev_dep", 3, 3), ("pop_next_dep", 4, 4), ("push_prev_dep", 5, 5),
          ("push_next_dep", 6, 6)]
LOOPS = [("reset_reg", 7, 7), ("uop_bgn", 8, 20), ("uop_end", 21, 34), ("iter_out", 35, 48),
         ("iter_in", 49, 62), ("dst_factor_out", 64, 74), ("dst_factor_in", 75, 85),
         ("src_factor_out", 86, 96), ("src_factor_in", 97, 107)]
# vta-notes section 2: GCC's packing of hw_spec.h for the default config (inclusive bit ranges).
VTA_LAYOUT = {
    "mem": HEADER + [("memory_type", 7, 9), ("sram_base", 10, 25), ("dram_base", 26, 57), ("y_size", 64, 79),
                     ("x_size", 80, 95), ("x_stride", 96, 111), ("y_pad_0", 112, 115), ("y_pad_1", 116, 119),
                     ("x_pad_0", 120, 123), ("x_pad_1", 124, 127)],
    "gemm": HEADER + LOOPS + [("wgt_factor_out", 108, 117), ("wgt_factor_in", 118, 127)],
    "alu": HEADER + LOOPS + [("alu_opcode", 108, 110), ("use_imm", 111, 111), ("imm", 112, 127)],
    "finish": HEADER,
    "uop": [("dst_idx", 0, 10), ("src_idx", 11, 21), ("wgt_idx", 22, 31)],
}
CLASSES = {"mem": MemInsn, "gemm": GemmInsn, "alu": AluInsn, "finish": FinishInsn}


def golden(name: str):
    return np.load(golden_path(f"{name}.npz"), allow_pickle=False)


@pytest.mark.parametrize("fmt", sorted(VTA_LAYOUT))
def test_default_layout_matches_vta(fmt):
    got = [(f.name, f.offset, f.offset + f.width - 1) for f in PYNQ.insn_formats[fmt].fields]
    assert got == VTA_LAYOUT[fmt]
    signed = [f.name for f in PYNQ.insn_formats[fmt].fields if f.signed]
    assert signed == (["imm"] if fmt == "alu" else [])


def test_dataclasses_name_exactly_the_table_fields():
    for preset in presets():
        formats = load_config(preset).insn_formats
        for fmt, cls in CLASSES.items():
            names = {f.name for f in dataclasses.fields(cls)} | {"opcode"}
            assert names == set(formats[fmt].names), (preset, fmt)
        assert {f.name for f in dataclasses.fields(Uop)} == set(formats["uop"].names)


def test_known_encodings():
    # A LOAD INP of gemm_1 (instruction 6), checked bit by bit against the table above.
    insn = MemInsn(opcode=OPCODES["LOAD"], memory_type=MEM_TYPES["INP"], sram_base=2, dram_base=258, y_size=1,
                   x_size=2, x_stride=2, pop_next_dep=1)
    word = int.from_bytes(encode(insn, PYNQ), "little")
    assert word == (0 | 1 << 4 | 2 << 7 | 2 << 10 | 258 << 26 | 1 << 64 | 2 << 80 | 2 << 96)
    assert encode(FinishInsn(), PYNQ) == bytes([3]) + bytes(15)
    alu = AluInsn(alu_opcode=3, use_imm=1, imm=-1)
    assert int.from_bytes(encode(alu, PYNQ), "little") == 4 | 3 << 108 | 1 << 111 | 0xFFFF << 112
    assert encode_uop(Uop(dst_idx=1, src_idx=2, wgt_idx=3), PYNQ) == 1 | 2 << 11 | 3 << 22


def _random_value(rng: random.Random, f) -> int:
    roll = rng.random()
    if roll < 0.15:
        return f.min_value
    if roll < 0.3:
        return f.max_value
    return rng.randint(f.min_value, f.max_value)


def _random_insn(rng: random.Random, cfg, fmt: str):
    values = {f.name: _random_value(rng, f) for f in cfg.insn_formats[fmt].fields if f.name != "opcode"}
    if fmt == "mem":
        values["opcode"] = rng.choice([OPCODES["LOAD"], OPCODES["STORE"]])
    return CLASSES[fmt](**values)


@pytest.mark.parametrize("preset", presets())
def test_random_round_trip(preset):
    cfg = load_config(preset)
    rng = random.Random(f"isa-{preset}")
    for fmt in CLASSES:
        insns = [_random_insn(rng, cfg, fmt) for _ in range(2000)]
        for insn in insns:
            raw = encode(insn, cfg)
            assert len(raw) == 16
            assert decode(raw, cfg) == insn
        program = assemble(insns, cfg)
        assert program.dtype == np.uint8 and program.shape == (2000, 16)
        assert decode_program(program, cfg) == insns
    alus = assemble([_random_insn(rng, cfg, "alu") for _ in range(200)], cfg)
    imms = {i.imm for i in decode_program(alus, cfg)}
    assert {-32768, 32767} <= imms
    fmt = cfg.insn_formats["uop"]
    uops = [Uop(**{f.name: _random_value(rng, f) for f in fmt.fields}) for _ in range(2000)]
    for u in uops:
        word = encode_uop(u, cfg)
        assert 0 <= word < 1 << 32 and decode_uop(word, cfg) == u
    assert uops_from_bytes(uops_to_bytes(uops, cfg), cfg) == uops


def test_decode_is_total_for_valid_opcodes():
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=(5000, 16), dtype=np.uint8)
    for row in raw:
        opcode = int(row[0]) & 7
        if opcode <= 4:
            insn = decode(row, PYNQ)
            assert insn.op == opcode
        else:
            with pytest.raises(ValueError, match=f"unknown opcode {opcode}"):
                decode(row, PYNQ)


def test_decode_program_names_the_bad_index():
    program = assemble([FinishInsn(), FinishInsn()], PYNQ)
    program[1, 0] = 6
    with pytest.raises(ValueError, match="instruction 1: unknown opcode 6"):
        decode_program(program, PYNQ)
    with pytest.raises(ValueError, match=r"\(N, 16\)"):
        decode_program(np.zeros((2, 8), dtype=np.uint8), PYNQ)
    with pytest.raises(ValueError, match="16 bytes"):
        decode(b"\x00" * 15, PYNQ)


@pytest.mark.parametrize(("word", "shown"), [(1 << 32, "0x100000000"), (-1, "-0x1"), ((1 << 40) + 5, "0x10000000005")])
def test_decode_uop_refuses_words_outside_32_bits_naming_the_word(word, shown):
    """A micro-op is one 32-bit word: 2^32 (the first word past it) and -1 are refused, not masked into range."""
    with pytest.raises(ValueError, match="does not fit 32 bits") as info:
        decode_uop(word, PYNQ)
    assert f"word {shown} " in str(info.value)


def test_decode_uop_takes_the_largest_32_bit_word():
    """2^32 - 1 sets every bit: each field (widths from the table: 11 + 11 + 10 on pynq) decodes to its maximum."""
    assert [f.width for f in PYNQ.insn_formats["uop"].fields] == [11, 11, 10]
    assert decode_uop((1 << 32) - 1, PYNQ) == Uop(dst_idx=2047, src_idx=2047, wgt_idx=1023)
    assert decode_uop(0, PYNQ) == Uop(dst_idx=0, src_idx=0, wgt_idx=0)


@pytest.mark.parametrize("insn, field, value, allowed", [
    (MemInsn(sram_base=1 << 16), "sram_base", 65536, "[0, 65535]"),
    (MemInsn(opcode=OPCODES["STORE"], dram_base=-1), "dram_base", -1, "[0, 4294967295]"),
    (MemInsn(x_pad_1=16), "x_pad_1", 16, "[0, 15]"),
    (GemmInsn(uop_bgn=8192), "uop_bgn", 8192, "[0, 8191]"),
    (GemmInsn(wgt_factor_in=1024), "wgt_factor_in", 1024, "[0, 1023]"),
    (GemmInsn(iter_out=1 << 14), "iter_out", 16384, "[0, 16383]"),
    (AluInsn(imm=32768), "imm", 32768, "[-32768, 32767]"),
    (AluInsn(imm=-32769), "imm", -32769, "[-32768, 32767]"),
    (AluInsn(alu_opcode=8), "alu_opcode", 8, "[0, 7]"),
    (FinishInsn(push_next_dep=2), "push_next_dep", 2, "[0, 1]"),
])
def test_out_of_range_encode_names_type_field_value_and_range(insn, field, value, allowed):
    with pytest.raises(ValueError) as info:
        encode(insn, PYNQ)
    msg = str(info.value)
    assert type(insn).__name__ in msg and field in msg and str(value) in msg and allowed in msg


def test_encode_refuses_non_integers_and_bad_opcodes():
    with pytest.raises(ValueError, match="x_size=1.5"):
        encode(MemInsn(x_size=1.5), PYNQ)
    with pytest.raises(ValueError, match="LOAD 0 or STORE 1"):
        MemInsn(opcode=OPCODES["GEMM"])
    with pytest.raises(ValueError, match="instruction 1: .*iter_in"):
        assemble([FinishInsn(), GemmInsn(iter_in=-1)], PYNQ)
    with pytest.raises(ValueError, match="Uop: .*wgt_idx"):
        encode_uop(Uop(wgt_idx=1024), PYNQ)
    with pytest.raises(ValueError, match="needs the hardware config"):
        uops_to_bytes([Uop()])
    assert uops_to_bytes([1, 0xFFFFFFFF]) == bytes([1, 0, 0, 0, 255, 255, 255, 255])


def test_empty_program():
    assert assemble([], PYNQ).shape == (0, 16)
    assert decode_program(np.zeros((0, 16), dtype=np.uint8), PYNQ) == []


@pytest.mark.parametrize("name", GOLDEN_NAMES or ["missing"])
def test_golden_programs_decode_and_reassemble_bit_exactly(name):
    insns = golden(name)["insns"]
    program = decode_program(insns, PYNQ)
    assert isinstance(program[-1], FinishInsn)
    assert np.array_equal(assemble(program, PYNQ), insns)
    lines = disassemble(insns, PYNQ).splitlines()
    assert len(lines) == len(insns)
    assert all(line.startswith(f"{i:4d}  ") for i, line in enumerate(lines))
    assert "???" not in "\n".join(lines)


def test_golden_gemm_1_known_facts():
    z = golden("gemm_1")
    program = decode_program(z["insns"], PYNQ)
    assert len(program) == 29
    nop = program[26]
    assert nop == MemInsn(opcode=OPCODES["LOAD"], memory_type=MEM_TYPES["INP"], push_next_dep=1)
    assert isinstance(program[28], FinishInsn)
    assert program[1] == GemmInsn(reset_reg=1, uop_bgn=0, uop_end=1, iter_out=2, iter_in=4, dst_factor_out=4,
                                  dst_factor_in=1, push_prev_dep=1)
    assert isinstance(program[11], AluInsn) and program[11].alu_opcode == 3 and program[11].imm == 8
    # The micro-op segment (placed at dram_base 4096 x 4 bytes = 0x4000) decodes and re-encodes exactly.
    seg = dict(zip(z["seg_addr"].tolist(), (z[f"seg_{i}"] for i in range(len(z["seg_addr"]))), strict=True))
    uops = uops_from_bytes(seg[0x4000], PYNQ)
    assert uops[6] == Uop(dst_idx=8, src_idx=2, wgt_idx=4)
    assert uops_to_bytes(uops, PYNQ) == seg[0x4000].tobytes()
    lines = disassemble(z["insns"], PYNQ).splitlines()
    assert lines[6] == "   6  LOAD   INP  sram=2 dram=258 y=1 x=2 stride=2 pad=(0,0,0,0)  [pop g2l]"
    assert lines[26] == "  26  LOAD   INP  nop  [push l2g]"
    assert lines[27] == "  27  LOAD   UOP  nop  [pop l2g, pop s2g]"
    assert lines[28] == "  28  FINISH"
    assert lines[1].split()[1:4] == ["GEMM", "reset", "uop=[0,1)"] and "iter=2x4" in lines[1]
    assert "[push g2l]" in lines[1]
    assert "SHR" in lines[11] and "imm=8" in lines[11]


def test_disassembly_of_bad_opcodes_and_invalid_flags():
    program = assemble([MemInsn(memory_type=MEM_TYPES["WGT"], pop_prev_dep=1, x_size=1, y_size=1),
                        MemInsn(opcode=OPCODES["STORE"], memory_type=MEM_TYPES["OUT"], push_next_dep=1),
                        FinishInsn()], PYNQ)
    program[2, 0] = 7
    lines = disassemble(program, PYNQ, start_index=10).splitlines()
    assert lines[0].startswith("  10  LOAD   WGT") and lines[0].endswith("[pop_prev?]")
    assert lines[1].endswith("[push_next?]")
    assert lines[2].startswith("  12  ??? opcode 7")
    objects = [AluInsn(alu_opcode=6), MemInsn(memory_type=7, x_size=1)]
    text = disassemble(objects, PYNQ)
    assert "op?6" in text and "mem?7" in text


def test_routing_and_flag_names():
    assert isa.module_of(MemInsn(memory_type=MEM_TYPES["INP"])) == "load"
    assert isa.module_of(MemInsn(memory_type=MEM_TYPES["ACC"])) == "compute"
    assert isa.module_of(MemInsn(opcode=OPCODES["STORE"], memory_type=MEM_TYPES["OUT"])) == "store"
    assert isa.dep_flag_names(GemmInsn(pop_prev_dep=1, pop_next_dep=1, push_prev_dep=1, push_next_dep=1)) == [
        "pop l2g", "pop s2g", "push g2l", "push g2s"]
    assert isa.dep_flag_names(MemInsn(opcode=OPCODES["STORE"], pop_prev_dep=1, push_prev_dep=1)) == [
        "pop g2s", "push s2g"]


def test_docs_isa_md_is_current():
    assert (ROOT / "docs" / "isa.md").read_text() == isa_page(PYNQ), \
        "docs/isa.md is stale: run `python -m vta.isa --markdown > docs/isa.md`"


def test_markdown_for_every_preset(capsys):
    for preset in presets():
        text = isa.isa_markdown(load_config(preset))
        assert "| `imm` |" in text and "ACC_8BIT" in text and "SHL" in text
    assert isa._main(["--markdown", "block32"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# The instruction set") and "pynq_1x32_i8w8a32_15_16_19_18" in out
