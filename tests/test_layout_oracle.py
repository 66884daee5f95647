"""The instruction and micro-op bit layouts of every preset (and co-design variants), against an oracle.

``tests/test_isa.py`` pins the layout to VTA only for ``pynq``; everything else was checked against
``hw_config/layout.py`` itself. Here the layout is derived independently, for every config, from the raw
JSON keys (``cfg.to_json()``), never from the project's derived attributes or layout table:

* SRAM depths as ``hw_spec_const.h`` defines them: buffer bytes / element bytes (and, as a cross-check, the
  closed form ``LOG_*_BUFF_SIZE - LOG_BATCH - LOG_BLOCK_* - LOG_*_WIDTH + 3``).
* The struct declarations of ``hw_spec.h`` (apache/tvm-vta HEAD d4a15f6): field names, widths and order of
  ``VTAMemInsn``, ``VTAGemInsn``, ``VTAAluInsn`` (uint64_t bit-fields, ``imm`` is int64_t), the generic header
  and ``VTAUop`` (uint32_t bit-fields; ``src_idx`` is ``MAX(LOG_ACC_BUFF_DEPTH, LOG_INP_BUFF_DEPTH)`` wide).
* Positions by the System V / GCC bit-field rule: fields are laid out in declaration order; one that would
  straddle its storage unit (64 bits for instructions, 32 for micro-ops) starts at the next unit. The rule is
  applied three ways: written out here, by ``ctypes`` (CPython's native-ABI bit-field layout), and by GCC
  itself on generated C structs (skipped without a C compiler).

The oracle is then compared with the project's ``Format``/``Field`` table, with the bytes ``vta.isa`` encodes
and decodes (both directions, random field values), with ``Format.encode_rows`` (what the runtime uses), with
which configs ``load_config`` accepts, and with the C simulator, which runs a program encoded by the oracle.
``test_oracle_detects_deliberate_breaks`` shows that a swapped field order, a wrong width or a missing
straddle rule in the oracle would be caught.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import random
import shutil
import subprocess

import numpy as np
import pytest

from hw_config import ConfigError, load_config, presets
from hw_config.layout import FormatSet
from simulator import Simulator
from vta.isa import (
    AluInsn,
    FinishInsn,
    GemmInsn,
    MemInsn,
    Uop,
    decode,
    decode_uop,
    encode,
    encode_uop,
    uops_from_bytes,
    uops_to_bytes,
)

# ------------------------------------------------------------------------------------------------------------
# hw_spec_const.h, written out

VTA_LOG_INS_WIDTH = 7  # 128-bit instructions
VTA_LOG_UOP_WIDTH = 5  # 32-bit micro-ops
VTA_OPCODE_BIT_WIDTH = 3
VTA_ALU_OPCODE_BIT_WIDTH = 3
VTA_MEMOP_ID_BIT_WIDTH = 3
VTA_MEMOP_SRAM_ADDR_BIT_WIDTH = 16
VTA_MEMOP_DRAM_ADDR_BIT_WIDTH = 32
VTA_MEMOP_SIZE_BIT_WIDTH = 16
VTA_MEMOP_STRIDE_BIT_WIDTH = 16
VTA_MEMOP_PAD_BIT_WIDTH = 4
VTA_LOOP_ITER_WIDTH = 14
VTA_ALUOP_IMM_BIT_WIDTH = 16
OPCODE = {"LOAD": 0, "STORE": 1, "GEMM": 2, "FINISH": 3, "ALU": 4}
MEM_ID = {"UOP": 0, "WGT": 1, "INP": 2, "ACC": 3, "OUT": 4}
ALU_OP = {"MIN": 0, "MAX": 1, "ADD": 2, "SHR": 3}

INSN_BITS = 1 << VTA_LOG_INS_WIDTH
UOP_BITS = 1 << VTA_LOG_UOP_WIDTH

# Co-design variants (load_config overrides of a preset) the project accepts. Chosen so that fields move
# between the two 64-bit words, src_idx takes the inp or the acc width, and one straddle moves iter_in to bit 64.
VARIANTS = {
    "pynq+LOG_BLOCK=5": ("pynq", {"LOG_BLOCK": 5}),
    "pynq+LOG_BATCH=2": ("pynq", {"LOG_BATCH": 2}),
    "pynq+batch2,block32,big inp/acc": ("pynq", {"LOG_BATCH": 1, "LOG_BLOCK": 5, "LOG_INP_BUFF_SIZE": 16,
                                                  "LOG_ACC_BUFF_SIZE": 18}),
    "pynq+small uop (fields cross into word 1)": ("pynq", {"LOG_UOP_BUFF_SIZE": 10}),
    "pynq+inp smaller than acc": ("pynq", {"LOG_INP_BUFF_SIZE": 14}),
    "pynq+acc smaller than inp": ("pynq", {"LOG_ACC_BUFF_SIZE": 15}),
    "pynq+big wgt, small inp/acc": ("pynq", {"LOG_INP_BUFF_SIZE": 12, "LOG_ACC_BUFF_SIZE": 14,
                                             "LOG_WGT_BUFF_SIZE": 22}),
    "pynq+big uop (iter_in straddles to bit 64)": ("pynq", {"LOG_UOP_BUFF_SIZE": 16, "LOG_ACC_BUFF_SIZE": 13,
                                                            "LOG_INP_BUFF_SIZE": 12, "LOG_WGT_BUFF_SIZE": 15}),
    "block32+small wgt": ("block32", {"LOG_WGT_BUFF_SIZE": 16}),
    "pynq+batch4,block8 (uop exactly 32 bits)": ("pynq", {"LOG_BATCH": 2, "LOG_BLOCK": 3}),
}
# Variants VTA's structs cannot hold (the project must refuse them too).
TOO_BIG = {
    "pynq+LOG_INP_BUFF_SIZE=17 (GEMM word 2 > 64 bits)": ("pynq", {"LOG_INP_BUFF_SIZE": 17}),
    "block32+LOG_WGT_BUFF_SIZE=21": ("block32", {"LOG_WGT_BUFF_SIZE": 21}),
    "pynq+LOG_UOP_BUFF_SIZE=16 (GEMM spills past 128)": ("pynq", {"LOG_UOP_BUFF_SIZE": 16}),
    "pynq+wgt 11, inp 10 bits (only the uop, 33 bits, overflows)": ("pynq", {"LOG_WGT_BUFF_SIZE": 19,
                                                                             "LOG_INP_BUFF_SIZE": 14}),
}
CONFIGS = {**{p: (p, {}) for p in presets()}, **VARIANTS}


def make(name: str):
    base, overrides = CONFIGS[name]
    return load_config(base, **overrides)


def raw_keys(cfg) -> dict:
    """The config's keys exactly as its JSON holds them (no derived attribute is read)."""
    return json.loads(cfg.to_json())


def exact_log2(n: int) -> int | None:
    return n.bit_length() - 1 if n > 0 and n & (n - 1) == 0 else None


def log_depths(raw: dict) -> dict[str, int | None]:
    """LOG_*_BUFF_DEPTH of each SRAM: log2(buffer bytes / element bytes), None if not a whole power of two."""
    batch, block = 1 << raw["LOG_BATCH"], 1 << raw["LOG_BLOCK"]
    elem_bits = {"uop": UOP_BITS,
                 "inp": batch * block * (1 << raw["LOG_INP_WIDTH"]),
                 "wgt": block * block * (1 << raw["LOG_WGT_WIDTH"]),
                 "acc": batch * block * (1 << raw["LOG_ACC_WIDTH"])}
    size_bytes = {k: 1 << raw[f"LOG_{k.upper()}_BUFF_SIZE"] for k in elem_bits}
    out = {}
    for k, bits in elem_bits.items():
        depth = size_bytes[k] // (bits // 8) if size_bytes[k] >= bits // 8 else 0
        out[k] = exact_log2(depth)
    # hw_spec_const.h's closed forms must say the same
    closed = {"uop": raw["LOG_UOP_BUFF_SIZE"] - VTA_LOG_UOP_WIDTH + 3,
              "inp": raw["LOG_INP_BUFF_SIZE"] - raw["LOG_BATCH"] - raw["LOG_BLOCK"] - raw["LOG_INP_WIDTH"] + 3,
              "wgt": raw["LOG_WGT_BUFF_SIZE"] - 2 * raw["LOG_BLOCK"] - raw["LOG_WGT_WIDTH"] + 3,
              "acc": raw["LOG_ACC_BUFF_SIZE"] - raw["LOG_BATCH"] - raw["LOG_BLOCK"] - raw["LOG_ACC_WIDTH"] + 3}
    for k, v in out.items():
        assert v is None or v == closed[k], (k, v, closed[k])
    return out


# ------------------------------------------------------------------------------------------------------------
# hw_spec.h's structs, written out: (storage unit bits, [(field, width, signed)]) in declaration order

def vta_structs(d: dict[str, int]) -> dict[str, tuple[int, list[tuple[str, int, bool]]]]:
    header = [("opcode", VTA_OPCODE_BIT_WIDTH, False), ("pop_prev_dep", 1, False), ("pop_next_dep", 1, False),
              ("push_prev_dep", 1, False), ("push_next_dep", 1, False)]
    mem = header + [("memory_type", VTA_MEMOP_ID_BIT_WIDTH, False),
                    ("sram_base", VTA_MEMOP_SRAM_ADDR_BIT_WIDTH, False),
                    ("dram_base", VTA_MEMOP_DRAM_ADDR_BIT_WIDTH, False),
                    ("y_size", VTA_MEMOP_SIZE_BIT_WIDTH, False), ("x_size", VTA_MEMOP_SIZE_BIT_WIDTH, False),
                    ("x_stride", VTA_MEMOP_STRIDE_BIT_WIDTH, False),
                    ("y_pad_0", VTA_MEMOP_PAD_BIT_WIDTH, False), ("y_pad_1", VTA_MEMOP_PAD_BIT_WIDTH, False),
                    ("x_pad_0", VTA_MEMOP_PAD_BIT_WIDTH, False), ("x_pad_1", VTA_MEMOP_PAD_BIT_WIDTH, False)]
    loops = header + [("reset_reg", 1, False), ("uop_bgn", d["uop"], False), ("uop_end", d["uop"] + 1, False),
                      ("iter_out", VTA_LOOP_ITER_WIDTH, False), ("iter_in", VTA_LOOP_ITER_WIDTH, False),
                      ("dst_factor_out", d["acc"], False), ("dst_factor_in", d["acc"], False)]
    gemm = loops + [("src_factor_out", d["inp"], False), ("src_factor_in", d["inp"], False),
                    ("wgt_factor_out", d["wgt"], False), ("wgt_factor_in", d["wgt"], False)]
    alu = loops + [("src_factor_out", d["acc"], False), ("src_factor_in", d["acc"], False),
                   ("alu_opcode", VTA_ALU_OPCODE_BIT_WIDTH, False), ("use_imm", 1, False),
                   ("imm", VTA_ALUOP_IMM_BIT_WIDTH, True)]
    uop = [("dst_idx", d["acc"], False), ("src_idx", max(d["acc"], d["inp"]), False), ("wgt_idx", d["wgt"], False)]
    return {"mem": (64, mem), "gemm": (64, gemm), "alu": (64, alu), "finish": (64, header), "uop": (32, uop)}


CONTAINER = {"mem": INSN_BITS, "gemm": INSN_BITS, "alu": INSN_BITS, "finish": INSN_BITS, "uop": UOP_BITS}


def place(unit: int, decls) -> tuple[list[tuple[str, int, int, bool]], int]:
    """GCC's bit-field placement: in order; a field that would straddle a storage unit starts the next one."""
    pos, out = 0, []
    for name, width, signed in decls:
        if pos // unit != (pos + width - 1) // unit:
            pos = (pos // unit + 1) * unit
        out.append((name, pos, width, signed))
        pos += width
    return out, pos


def oracle_layout(cfg, structs=vta_structs, placer=place):
    """{format: ([(name, offset, width, signed)], used bits)} from the raw JSON of ``cfg``."""
    d = log_depths(raw_keys(cfg))
    return {fmt: placer(unit, decls) for fmt, (unit, decls) in structs(d).items()}


def fits(layout) -> bool:
    return all(used <= CONTAINER[fmt] for fmt, (_, used) in layout.items())


def project_layout(cfg):
    return {fmt: ([(f.name, f.offset, f.width, f.signed) for f in form.fields], form.used_bits)
            for fmt, form in cfg.insn_formats.items()}


def ctypes_place(unit: int, decls) -> tuple[list[tuple[str, int, int, bool]], int]:
    """The same struct declared through ctypes; positions found by setting each field to all ones."""
    utype, stype = (ctypes.c_uint64, ctypes.c_int64) if unit == 64 else (ctypes.c_uint32, ctypes.c_int32)

    class S(ctypes.LittleEndianStructure):
        _fields_ = [(name, stype if signed else utype, width) for name, width, signed in decls]

    out = []
    for name, width, signed in decls:
        s = S()
        setattr(s, name, -1 if signed else (1 << width) - 1)
        v = int.from_bytes(bytes(s), "little")
        lo = (v & -v).bit_length() - 1
        assert v >> lo == (1 << width) - 1, (name, hex(v))
        out.append((name, lo, width, signed))
    _, last_off, last_w, _ = out[-1]
    return out, last_off + last_w


# ---- the oracle's own encode / decode: plain shifts and masks ----

def oracle_encode(fields, values: dict[str, int]) -> int:
    word = 0
    for name, off, width, _signed in fields:
        word |= (values.get(name, 0) & ((1 << width) - 1)) << off
    return word


def oracle_decode(fields, word: int) -> dict[str, int]:
    out = {}
    for name, off, width, signed in fields:
        v = (word >> off) & ((1 << width) - 1)
        if signed and v >> (width - 1):
            v -= 1 << width
        out[name] = v
    return out


# ------------------------------------------------------------------------------------------------------------
# 1. the layout table against the oracle

def test_presets_and_variants_are_covered():
    assert set(presets()) >= {"pynq", "ultra96", "zcu104", "de10nano", "sim", "block32", "batch4"}
    for name in CONFIGS:
        make(name)  # every variant is a config the project accepts


def test_oracle_matches_vta_default_bit_positions():
    """Sanity of the oracle itself: VTA's default config gives the positions GCC gives hw_spec.h (vta-notes 2)."""
    lay = {fmt: {n: (o, o + w - 1) for n, o, w, _ in fields} for fmt, (fields, _) in oracle_layout(make("pynq")).items()}
    assert lay["mem"]["sram_base"] == (10, 25) and lay["mem"]["dram_base"] == (26, 57)
    assert lay["mem"]["y_size"] == (64, 79) and lay["mem"]["x_pad_1"] == (124, 127)
    assert lay["gemm"]["uop_bgn"] == (8, 20) and lay["gemm"]["uop_end"] == (21, 34)
    assert lay["gemm"]["iter_in"] == (49, 62) and lay["gemm"]["dst_factor_out"] == (64, 74)
    assert lay["gemm"]["wgt_factor_in"] == (118, 127)
    assert lay["alu"]["alu_opcode"] == (108, 110) and lay["alu"]["imm"] == (112, 127)
    assert lay["uop"] == {"dst_idx": (0, 10), "src_idx": (11, 21), "wgt_idx": (22, 31)}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_layout_table_matches_the_oracle(name):
    cfg = make(name)
    want = oracle_layout(cfg)
    assert fits(want), f"{name}: the oracle says VTA's structs cannot hold this config, yet it loads"
    got = project_layout(cfg)
    assert set(got) == set(want)
    for fmt in want:
        assert got[fmt][0] == want[fmt][0], (name, fmt)
        assert got[fmt][1] == want[fmt][1], (name, fmt, "used bits")
        assert cfg.insn_formats[fmt].total_bits == CONTAINER[fmt]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_native_bitfield_layout_agrees(name):
    """CPython's ctypes lays out the same declarations as the C ABI does: same positions as the oracle."""
    cfg = make(name)
    assert oracle_layout(cfg, placer=ctypes_place) == oracle_layout(cfg)


def test_gcc_bitfield_layout_agrees(tmp_path):
    """GCC itself, on C structs declared like hw_spec.h's for every config: positions and struct sizes."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    names = list(CONFIGS)
    lines = ["#include <stdint.h>", "#include <stdio.h>", "#include <string.h>"]
    body = []
    for i, name in enumerate(names):
        d = log_depths(raw_keys(make(name)))
        for fmt, (unit, decls) in vta_structs(d).items():
            utype, stype = ("uint64_t", "int64_t") if unit == 64 else ("uint32_t", "int32_t")
            members = " ".join(f"{stype if s else utype} {n} : {w};" for n, w, s in decls)
            if fmt == "finish":  # VTAGenericInsn pads the header to two words
                members += f" uint64_t pad_0 : {64 - VTA_OPCODE_BIT_WIDTH - 4}; uint64_t pad_1 : 64;"
            lines.append(f"typedef struct {{ {members} }} s{i}_{fmt};")
            for n, _, _ in decls:
                body.append(f'{{ s{i}_{fmt} v; unsigned char b[sizeof v]; memset(&v, 0, sizeof v); v.{n} = -1; '
                            f'memcpy(b, &v, sizeof v); printf("{i} {fmt} {n} %zu ", sizeof v); '
                            f'for (size_t k = 0; k < sizeof v; k++) printf("%02x", b[sizeof v - 1 - k]); '
                            f'printf("\\n"); }}')
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\nint main(void) {\n" + "\n".join(body) + "\nreturn 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-O0", "-o", str(exe), str(src)], check=True, capture_output=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    gcc: dict[tuple[int, str], dict[str, tuple[int, int]]] = {}
    sizes: dict[tuple[int, str], int] = {}
    for line in filter(None, out):
        i, fmt, n, size, bits = line.split()
        v = int(bits, 16)
        lo = (v & -v).bit_length() - 1
        gcc.setdefault((int(i), fmt), {})[n] = (lo, (v >> lo).bit_length())
        sizes[(int(i), fmt)] = int(size) * 8
    for i, name in enumerate(names):
        for fmt, (fields, used) in oracle_layout(make(name)).items():
            assert gcc[(i, fmt)] == {n: (o, w) for n, o, w, _ in fields}, (name, fmt)
            assert sizes[(i, fmt)] == CONTAINER[fmt], (name, fmt, "struct size")  # = VTA's static_asserts


@pytest.mark.parametrize("name", list(TOO_BIG))
def test_configs_vta_cannot_encode_are_refused(name):
    base, overrides = TOO_BIG[name]
    raw = {**json.loads(load_config(base).to_json()), **overrides}
    d = log_depths(raw)
    layout = {fmt: place(unit, decls) for fmt, (unit, decls) in vta_structs(d).items()}
    assert not fits(layout)
    if "only the uop" in name:
        assert [fmt for fmt, (_, used) in layout.items() if used > CONTAINER[fmt]] == ["uop"]
    with pytest.raises(ConfigError):
        load_config(base, **overrides)


def test_load_config_accepts_exactly_what_the_structs_hold():
    """Over a seeded sweep of block/batch/buffer sizes: load_config succeeds iff every depth is a whole
    number of elements addressable by the 16-bit sram_base, and every struct fits its container."""
    rng = random.Random(20240609)
    raw0 = json.loads(load_config("pynq").to_json())
    grid = list(itertools.product(range(3), range(2, 7), range(8, 18), range(10, 22), range(12, 25),
                                  range(10, 23)))
    accepted = refused = 0
    for lb, lk, lu, li, lw, la in rng.sample(grid, 400):
        over = {"LOG_BATCH": lb, "LOG_BLOCK": lk, "LOG_UOP_BUFF_SIZE": lu, "LOG_INP_BUFF_SIZE": li,
                "LOG_WGT_BUFF_SIZE": lw, "LOG_ACC_BUFF_SIZE": la}
        d = log_depths({**raw0, **over})
        # a depth of one entry would need zero-width bit-fields, which C does not allow for named fields
        ok = all(v is not None and 1 <= v <= VTA_MEMOP_SRAM_ADDR_BIT_WIDTH for v in d.values())
        ok = ok and fits({fmt: place(unit, decls) for fmt, (unit, decls) in vta_structs(d).items()})
        try:
            cfg = load_config("pynq", **over)
        except ConfigError:
            assert not ok, over
            refused += 1
            continue
        assert ok, over
        assert project_layout(cfg) == oracle_layout(cfg), over
        accepted += 1
    assert accepted > 40 and refused > 40, (accepted, refused)


@pytest.mark.parametrize("key, value", [("LOG_WGT_BUFF_SIZE", 8), ("LOG_UOP_BUFF_SIZE", 2), ("LOG_ACC_BUFF_SIZE", 6)])
def test_one_entry_buffer_is_a_config_error(key, value):
    """hw_spec.h would declare zero-width index fields for a one-entry SRAM: refuse it like any bad key."""
    raw = {**json.loads(load_config("pynq").to_json()), key: value}
    assert 0 in log_depths(raw).values()
    with pytest.raises(ConfigError) as refusal:
        load_config("pynq", **{key: value})
    assert refusal.value.key == key


# ------------------------------------------------------------------------------------------------------------
# 2. bytes: the project's encoder/decoder against the oracle's shifts and masks

CLASSES = {"mem": MemInsn, "gemm": GemmInsn, "alu": AluInsn, "finish": FinishInsn}
FIXED_OPCODE = {"gemm": OPCODE["GEMM"], "alu": OPCODE["ALU"], "finish": OPCODE["FINISH"]}


def random_values(rng: random.Random, fields, fmt: str) -> dict[str, int]:
    values = {}
    for name, _, width, signed in fields:
        lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
        roll = rng.random()
        values[name] = lo if roll < 0.1 else hi if roll < 0.25 else rng.randint(lo, hi)
    values["opcode"] = rng.choice([OPCODE["LOAD"], OPCODE["STORE"]]) if fmt == "mem" else FIXED_OPCODE.get(fmt, 0)
    return values


def as_insn(fmt: str, values: dict[str, int]):
    kwargs = {k: v for k, v in values.items() if k != "opcode" or fmt == "mem"}
    return CLASSES[fmt](**kwargs)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_encoded_bytes_match_the_oracle_both_ways(name):
    cfg = make(name)
    layout = oracle_layout(cfg)
    rng = random.Random(f"layout-oracle-{name}")
    mixed = []   # (format, field values, oracle bytes) of every format, for FormatSet.encode_flat
    for fmt in CLASSES:
        fields = layout[fmt][0]
        batch = [random_values(rng, fields, fmt) for _ in range(300)]
        mixed += [(fmt, [v[n] for n, *_ in fields], oracle_encode(fields, v).to_bytes(16, "little")) for v in batch]
        for values in batch:
            insn = as_insn(fmt, values)
            raw = encode(insn, cfg)
            word = int.from_bytes(raw, "little")
            assert oracle_decode(fields, word) == values, (name, fmt)       # project encode -> oracle decode
            mine = oracle_encode(fields, values).to_bytes(16, "little")
            assert raw == mine, (name, fmt)
            assert decode(mine, cfg) == insn, (name, fmt)                    # oracle encode -> project decode
        # the vectorised encoder the runtime assembles streams with
        columns = {n: np.array([v[n] for v in batch], dtype=np.int64) for n, *_ in fields}
        rows = cfg.insn_formats[fmt].encode_rows(columns)
        want = np.array([list(oracle_encode(fields, v).to_bytes(16, "little")) for v in batch], dtype=np.uint8)
        np.testing.assert_array_equal(rows, want)
    # the formats mixed in one flat table, as the runtime assembles a stream
    rng.shuffle(mixed)
    formats = FormatSet(tuple(cfg.insn_formats[fmt] for fmt in CLASSES))
    which = np.array([list(CLASSES).index(fmt) for fmt, *_ in mixed])
    flat = np.array([x for _, values, _ in mixed for x in values], dtype=np.int64)
    assert formats.encode_flat(which, flat).tobytes() == b"".join(raw for *_, raw in mixed)
    fields = layout["uop"][0]
    uops = [random_values(rng, fields, "uop") for _ in range(500)]
    for values in uops:
        values.pop("opcode")
        word = encode_uop(Uop(**values), cfg)
        assert word == oracle_encode(fields, values) and oracle_decode(fields, word) == values, name
        assert decode_uop(word, cfg) == Uop(**values)
    packed = uops_to_bytes([Uop(**v) for v in uops], cfg)
    assert packed == np.array([oracle_encode(fields, v) for v in uops], dtype="<u4").tobytes()
    assert uops_from_bytes(packed, cfg) == [Uop(**v) for v in uops]
    columns = {n: np.array([v[n] for v in uops], dtype=np.int64) for n, *_ in fields}
    assert cfg.insn_formats["uop"].encode_rows(columns, nbytes=4).tobytes() == packed


@pytest.mark.parametrize("name", list(CONFIGS))
def test_fields_refuse_values_one_past_the_oracle_width(name):
    """The project's range checks follow the oracle's widths (e.g. uop_end may equal the uop depth)."""
    cfg = make(name)
    for fmt, (fields, _) in oracle_layout(cfg).items():
        for fname, _, width, signed in fields:
            if fname == "opcode":
                continue
            too_big = 1 << (width - 1) if signed else 1 << width
            with pytest.raises(ValueError, match=fname):
                cfg.insn_formats[fmt].encode({n: 0 for n, *_ in fields} | {fname: too_big})
            for bad in (too_big, -(1 << (width - 1)) - 1 if signed else -1):   # the runtime's encoder too
                values = np.array([0] * len(fields) + [bad if n == fname else 0 for n, *_ in fields], dtype=np.int64)
                formats = FormatSet((cfg.insn_formats["finish"], cfg.insn_formats[fmt]))
                with pytest.raises(ValueError, match=rf"row 1: {fmt}\.{fname}={bad} is out of range"):
                    formats.encode_flat(np.array([1, 1]), values)
    d = log_depths(raw_keys(cfg))
    assert cfg.insn_formats["gemm"].field("uop_end").max_value == (1 << (d["uop"] + 1)) - 1


def test_a_format_set_refuses_fields_that_straddle_a_64_bit_word():
    """encode_flat, encode_table and decode_rows pack and read each 64-bit word on its own: a layout with a field
    across bit 64 is refused (the simulator refuses it too), not encoded or read with its high bits lost."""
    from hw_config.layout import pack_bitfields

    straddling = pack_bitfields("wide", [("a", 60, False), ("b", 10, False)], 128, 128)
    assert straddling.field("b").offset == 60
    with pytest.raises(ValueError, match=r"\['b'\] straddle a 64-bit word"):
        FormatSet((straddling,)).encode_flat(np.array([0]), np.array([1, 2]))
    with pytest.raises(ValueError, match=r"wide: fields \['b'\] straddle a 64-bit word"):
        straddling.encode_table(np.array([[1, 2]]))
    with pytest.raises(ValueError, match=r"wide: fields \['b'\] straddle a 64-bit word"):
        straddling.decode_rows(np.zeros((1, 16), dtype=np.uint8))


# ------------------------------------------------------------------------------------------------------------
# 3. the C simulator runs a program the oracle encoded

def oracle_program(cfg, rng: np.random.Generator):
    """LOAD ACC (padded, strided) -> GEMM (2 uops x 2 x 3 loops) -> ALU ADD imm -> ALU MAX acc[src] -> STORE,
    every field placed by the oracle, with indices near the top of each SRAM so high bits matter."""
    raw = raw_keys(cfg)
    d = log_depths(raw)
    depth = {k: 1 << v for k, v in d.items()}
    lay = {fmt: fields for fmt, (fields, _) in oracle_layout(cfg).items()}
    batch, block = 1 << raw["LOG_BATCH"], 1 << raw["LOG_BLOCK"]
    acc_elem, out_elem = batch * block * 4, batch * block

    d0 = depth["acc"] - 12          # 12 accumulator rows the program works on: rows [d0, d0 + 12)
    r0 = d0 - 9                     # 9 rows the ALU MAX reads (through the ALU uop's src_idx)
    s0 = depth["inp"] - 7           # GEMM input rows s0 + {0..6}
    w0 = depth["wgt"] - 6           # GEMM weight rows w0 + {0..5}
    u0 = depth["uop"] - 3           # uops: [u0] ALU, [u0+1, u0+3) GEMM (uop_end == the uop depth)
    acc_dram = 0xC0001230 + rng.integers(0, 1 << 12)  # element addresses with high bits set
    out_dram = 0x87654000 + rng.integers(0, 1 << 12)

    def insn(fmt, **values):
        return oracle_encode(lay[fmt], values).to_bytes(16, "little")

    def uop(dst, src, wgt):
        return oracle_encode(lay["uop"], {"dst_idx": dst, "src_idx": src, "wgt_idx": wgt})

    uops = [uop(d0, r0, 0), uop(d0, s0, w0), uop(d0 + 1, s0 + 1, w0 + 1)]
    program = b"".join([
        # y_pad_0=1 zero row, then 2 rows of 3 elements (stride 5) each followed by x_pad_1=1 zero element
        insn("mem", opcode=OPCODE["LOAD"], memory_type=MEM_ID["ACC"], sram_base=d0, dram_base=int(acc_dram),
             y_size=2, x_size=3, x_stride=5, y_pad_0=1, x_pad_1=1),
        # acc[d0 + u + 6i + 2j] += inp[s0 + u + i + 2j] . wgt[w0 + u + 2i + j]^T, u in {0,1}, i < 2, j < 3
        insn("gemm", opcode=OPCODE["GEMM"], uop_bgn=u0 + 1, uop_end=u0 + 3, iter_out=2, iter_in=3,
             dst_factor_out=6, dst_factor_in=2, src_factor_out=1, src_factor_in=2, wgt_factor_out=2,
             wgt_factor_in=1),
        # acc[d0 + 4i + j] += -3 for i < 3, j < 4
        insn("alu", opcode=OPCODE["ALU"], uop_bgn=u0, uop_end=u0 + 1, iter_out=3, iter_in=4, dst_factor_out=4,
             dst_factor_in=1, alu_opcode=ALU_OP["ADD"], use_imm=1, imm=-3),
        # acc[d0 + 6i + j] = max(acc[d0 + 6i + j], acc[r0 + 3i + j]), i < 2, j < 6
        insn("alu", opcode=OPCODE["ALU"], uop_bgn=u0, uop_end=u0 + 1, iter_out=2, iter_in=6, dst_factor_out=6,
             dst_factor_in=1, src_factor_out=3, src_factor_in=1, alu_opcode=ALU_OP["MAX"], use_imm=0, imm=0,
             push_next_dep=1),
        # rows [d0, d0 + 12) out as 3 rows of 4 elements, 7 elements apart in DRAM
        insn("mem", opcode=OPCODE["STORE"], memory_type=MEM_ID["OUT"], sram_base=d0, dram_base=int(out_dram),
             y_size=3, x_size=4, x_stride=7, pop_prev_dep=1, push_prev_dep=1),
        insn("finish", opcode=OPCODE["FINISH"], pop_next_dep=1),
    ])
    assert r0 >= 0
    return program, {"d0": d0, "r0": r0, "s0": s0, "w0": w0, "u0": u0, "uops": uops, "acc_dram": int(acc_dram),
                     "out_dram": int(out_dram), "acc_elem": acc_elem, "out_elem": out_elem, "batch": batch,
                     "block": block}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_simulator_runs_a_program_encoded_by_the_oracle(name):
    cfg = make(name)
    rng = np.random.default_rng(sum(map(ord, name)))
    program, p = oracle_program(cfg, rng)
    b, n = p["batch"], p["block"]
    sim = Simulator(cfg)
    acc_src = rng.integers(-1000, 1000, (5 * 2, b, n)).astype(np.int32)  # DRAM rows: 2 rows, stride 5
    sim.map(p["acc_dram"] * p["acc_elem"], acc_src.tobytes())
    sim.map(p["out_dram"] * p["out_elem"], 7 * 3 * b * n)
    inp = rng.integers(-128, 128, (7, b, n)).astype(np.int8)
    wgt = rng.integers(-128, 128, (6, n, n)).astype(np.int8)
    side = rng.integers(-500, 500, (9, b, n)).astype(np.int32)
    sim.write_sram("inp", p["s0"], inp)
    sim.write_sram("wgt", p["w0"], wgt)
    sim.write_sram("acc", p["r0"], side)
    sim.write_sram("uop", p["u0"], np.array(p["uops"], dtype=np.uint32))
    sim.run(np.frombuffer(program, dtype=np.uint8).reshape(-1, 16))

    # numpy model of the same program, from VTA's semantics
    acc = np.zeros((12, b, n), dtype=np.int64)
    for y in range(2):
        for x in range(3):
            acc[(1 + y) * 4 + x] = acc_src[y * 5 + x]
    for i in range(2):
        for j in range(3):
            for u in range(2):
                acc[u + 6 * i + 2 * j] += inp[u + i + 2 * j].astype(np.int64) @ wgt[u + 2 * i + j].astype(np.int64).T
    for i in range(3):
        for j in range(4):
            acc[4 * i + j] -= 3
    for i in range(2):
        for j in range(6):
            acc[6 * i + j] = np.maximum(acc[6 * i + j], side[3 * i + j])
    np.testing.assert_array_equal(sim.read_sram("acc", p["d0"], 12), acc.astype(np.int32))
    out = sim.read(p["out_dram"] * p["out_elem"], 7 * 3 * b * n).view(np.int8).reshape(3, 7, b, n)
    want = (acc.reshape(3, 4, b, n) & 0xFF).astype(np.uint8).view(np.int8)
    np.testing.assert_array_equal(out[:, :4], want)
    assert not out[:, 4:].any()


# ------------------------------------------------------------------------------------------------------------
# 4. the oracle is not vacuous

def _swap(structs_fn, fmt: str, a: str, b: str):
    def mutated(d):
        out = structs_fn(d)
        unit, decls = out[fmt]
        i, j = [k for k, (n, _, _) in enumerate(decls) if n in (a, b)]
        decls = list(decls)
        decls[i], decls[j] = decls[j], decls[i]
        return {**out, fmt: (unit, decls)}
    return mutated


def _width(structs_fn, fmt: str, field: str, delta: int):
    def mutated(d):
        out = structs_fn(d)
        unit, decls = out[fmt]
        return {**out, fmt: (unit, [(n, w + delta if n == field else w, s) for n, w, s in decls])}
    return mutated


def _uop_src_inp_only(d):  # hw_spec.h before the MAX() fix: src_idx as wide as the input buffer index
    out = vta_structs(d)
    unit, decls = out["uop"]
    return {**out, "uop": (unit, [(n, d["inp"] if n == "src_idx" else w, s) for n, w, s in decls])}


def _no_straddle_rule(unit, decls):
    pos, out = 0, []
    for name, width, signed in decls:
        out.append((name, pos, width, signed))
        pos += width
    return out, pos


MUTANTS = {
    "swap y_pad_0/x_pad_0": {"structs": _swap(vta_structs, "mem", "y_pad_0", "x_pad_0")},
    "swap src/wgt factor_out": {"structs": _swap(vta_structs, "gemm", "src_factor_out", "wgt_factor_out")},
    "swap alu_opcode/use_imm": {"structs": _swap(vta_structs, "alu", "alu_opcode", "use_imm")},
    "swap uop dst/src": {"structs": _swap(vta_structs, "uop", "dst_idx", "src_idx")},
    "uop_end one bit narrower": {"structs": _width(vta_structs, "gemm", "uop_end", -1)},
    "wgt_factor_in one bit wider": {"structs": _width(vta_structs, "gemm", "wgt_factor_in", 1)},
    "dram_base one bit narrower": {"structs": _width(vta_structs, "mem", "dram_base", -1)},
    "uop src_idx as wide as inp only": {"structs": _uop_src_inp_only},
    "no straddle rule": {"placer": _no_straddle_rule},
}


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_oracle_detects_deliberate_breaks(mutant):
    """Each mutation of the oracle makes the layout comparison fail for at least one config."""
    caught = []
    for name in CONFIGS:
        cfg = make(name)
        if oracle_layout(cfg, **MUTANTS[mutant]) != project_layout(cfg):
            caught.append(name)
    assert caught, f"mutant {mutant!r} survives: the comparison would not notice it"
