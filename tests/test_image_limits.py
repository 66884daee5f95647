"""Image bombs and output-path mistakes: every limit is checked against the .npy headers before any data is
read, refused in one line naming the file, the key and the flag, and can be raised by that flag.

The hostile files are made here, by hand: a 3 KB archive whose header declares a 1 TiB segment, a 3 MB
deflate stream that expands to 3 GiB, a 64 KB image of 2 M instructions. Whatever could regress into a
multi-GB allocation runs in a subprocess under RLIMIT_AS, so a regression fails the test instead of
eating the machine.
"""

from __future__ import annotations

import io
import json
import os
import resource
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from golden_files import golden_path

from hw_config import MEM_TYPES, load_config
from simulator import Simulator
from simulator.image import (
    DEFAULT_MAX_DRAM_BYTES,
    DEFAULT_MAX_INSNS,
    ImageError,
    ImageLimits,
    ProgramImage,
    load_image,
    load_result,
    parse_count,
    parse_size,
    save_image,
)
from simulator.replay import replay_with_stats
from simulator.trace import (
    DEFAULT_MAX_TRACE_EVENTS,
    TraceLimitError,
    chrome_trace,
    write_chrome_trace,
)
from vta.cli import main
from vta.isa import FinishInsn, MemInsn, assemble

PYNQ = load_config("pynq")
AS_LIMIT = 1 << 30  # address space of the subprocesses: vta needs < 512 MiB for these files
TIB = 1 << 40


# ------------------------------------------------------------------------------------------------------------
# hand-made files

def npy_header(descr: str, shape: tuple[int, ...], version: int = 1) -> bytes:
    """A .npy magic + header declaring ``descr`` of ``shape`` (no data)."""
    text = repr({"descr": descr, "fortran_order": False, "shape": shape}).encode()
    fixed = 8 + (2 if version == 1 else 4)
    text += b" " * (63 - (fixed + len(text)) % 64) + b"\n"
    length = struct.pack("<H" if version == 1 else "<I", len(text))
    return b"\x93NUMPY" + bytes([version, 0]) + length + text


def npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def zip_archive(entries: list[tuple[str, bytes, int, int, int]]) -> bytes:
    """A zip built by hand from (name, stored bytes, method, declared uncompressed size, crc) entries: the
    directory says whatever it is told (zip64 extra fields for sizes of 4 GiB or more)."""
    out, central = bytearray(), bytearray()
    for name, data, method, size, crc in entries:
        raw = name.encode()
        big = size >= 0xFFFFFFFF
        extra = struct.pack("<HHQ", 1, 8, size) if big else b""
        usize = 0xFFFFFFFF if big else size
        offset = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, method, 0, 0x21, crc, len(data), usize,
                           len(raw), len(extra)) + raw + extra + data
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, method, 0, 0x21, crc, len(data),
                               usize, len(raw), len(extra), 0, 0, 0, 0, offset) + raw + extra
    count = len(entries)
    return bytes(out + central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(central),
                                             len(out), 0))


def stored(name: str, data: bytes) -> tuple[str, bytes, int, int, int]:
    return name, data, 0, len(data), zlib.crc32(data)


def valid_members() -> list[tuple[str, bytes, int, int, int]]:
    """The members of a small valid image (one instruction, one 64-byte segment last), all stored."""
    arrays = {"config": np.array(PYNQ.to_json()), "insns": assemble([FinishInsn()], PYNQ),
              "insn_addr": np.array(0, dtype=np.uint64), "seg_addr": np.array([0x1000], dtype=np.uint64),
              "seg_0": np.zeros(64, dtype=np.uint8)}
    return [stored(f"{k}.npy", npy(v)) for k, v in arrays.items()]


def declaring(key: str, descr: str, shape: tuple[int, ...], consistent: bool = True) -> bytes:
    """An image whose ``key`` header declares ``descr`` ``shape`` while only 64 data bytes are stored; the
    zip directory agrees with the header (``consistent``) or tells the truth about the stored bytes."""
    header = npy_header(descr, shape)
    data = header + bytes(64)
    declared = max(len(data), len(header) + int(np.prod(shape, dtype=object)) * np.dtype(descr).itemsize)
    entries = [e for e in valid_members() if e[0] != f"{key}.npy"]
    entries.append((f"{key}.npy", data, 0, declared if consistent else len(data), zlib.crc32(data)))
    return zip_archive(entries)


def deflate_bomb(payload_bytes: int) -> tuple[bytes, int]:
    """A raw deflate stream of a .npy header for ``payload_bytes`` zeros plus those zeros, and its size; the
    64 MiB block is compressed once and repeated (a full flush makes each copy self-contained)."""
    block_size = 64 << 20
    assert payload_bytes % block_size == 0
    header = npy_header("|u1", (payload_bytes,))
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(header) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(bytes(block_size)) + c.flush(zlib.Z_FULL_FLUSH)
    return head + block * (payload_bytes // block_size) + c.flush(), len(header) + payload_bytes


def nop_image(count: int) -> ProgramImage:
    """``count`` instructions: LOAD INP NOPs and a FINISH (no segments)."""
    body = assemble([MemInsn(memory_type=MEM_TYPES["INP"])], PYNQ)
    insns = np.concatenate([np.repeat(body, count - 1, axis=0), assemble([FinishInsn()], PYNQ)])
    return ProgramImage(PYNQ, insns, 0, [])


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def vta(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """``vta ARGV`` in a subprocess whose address space is capped at AS_LIMIT."""
    return subprocess.run([sys.executable, "-m", "vta", *argv], cwd=cwd, capture_output=True, text=True,
                          preexec_fn=_limit_memory, timeout=300, check=False)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vta: error: "), proc.stderr
    return lines[0]


def refused(path: Path, limits: ImageLimits | None = None) -> ImageError:
    with pytest.raises(ImageError) as info:
        load_image(path, limits)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    return info.value


# ------------------------------------------------------------------------------------------------------------
# declared sizes: refused before any allocation

def test_tiny_file_declaring_a_tebibyte_segment_is_refused_in_a_subprocess(tmp_path):
    path = tmp_path / "tib.npz"
    path.write_bytes(declaring("seg_0", "|u1", (TIB,)))
    assert path.stat().st_size < 8192   # a few KB (mostly the config JSON) that declare 1 TiB
    line = one_error_line(vta("sim", "replay", path.name, cwd=tmp_path))
    assert "tib.npz" in line and "seg_0" in line and "1,099,511,627,776" in line
    assert f"at most {DEFAULT_MAX_DRAM_BYTES:,} bytes" in line and "--max-dram-bytes" in line
    err = refused(path)
    assert err.key == "seg_0"
    # Raising the limit does not make the file readable: a stored member holds only 192 of those bytes.
    err = refused(path, ImageLimits(max_dram_bytes=2 * TIB))
    assert err.key == "seg_0" and "from 192 bytes in the file" in str(err)


def test_truncated_member_is_refused_after_a_bounded_read(tmp_path):
    path = tmp_path / "short.npz"
    path.write_bytes(declaring("seg_0", "|u1", (1 << 20,)))  # deflate could not make 1 MiB from 192 bytes
    with pytest.raises(ImageError, match="more than storing can produce"):
        load_image(path)
    header = npy_header("|u1", (1 << 20,))
    inflated = header + np.random.default_rng(0).integers(0, 256, 2000, dtype=np.uint8).tobytes()
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    data = c.compress(inflated) + c.flush()  # the stream ends after 2,000 of 1 MiB
    entries = [*valid_members()[:-1], ("seg_0.npy", data, 8, len(header) + (1 << 20), zlib.crc32(inflated))]
    path.write_bytes(zip_archive(entries))
    with pytest.raises(ImageError, match="key 'seg_0' ends after 2,000 of 1,048,576 data bytes"):
        load_image(path)


def test_directory_disagreeing_with_the_header_is_refused(tmp_path):
    path = tmp_path / "liar.npz"
    path.write_bytes(declaring("seg_0", "|u1", (TIB,), consistent=False))
    err = refused(path)
    assert err.key == "seg_0" and "holds" in str(err) and "declares uint8 array of shape (1099511627776,)" in str(err)


@pytest.mark.parametrize("key, descr, shape, refused_key, fragments", [
    ("insns", "|u1", (1 << 36, 16), "insns", ["insns declares 68,719,476,736 instructions",
                                              f"{DEFAULT_MAX_INSNS:,}", "--max-insns"]),
    ("insns", "<i8", (1 << 36, 16), "insns", ["insns must be a uint8 array of shape (N, 16)"]),
    ("config", "<U268435456", (), "config", ["'config' declares 268,435,456 characters", "max_text_chars"]),
    ("seg_addr", "<u8", (1 << 37,), "seg_1", ["seg_addr lists 137438953472 segment(s)", "missing seg_1"]),
    ("insn_addr", "<u8", (1 << 37,), "insn_addr", ["insn_addr must be a 0-d uint64"]),
    ("seg_0", "<u8", (TIB,), "seg_0", ["seg_0 must be a 1-D uint8 array"]),
    ("seg_0", "|V1073741824", (), "seg_0", ["seg_0 must be a 1-D uint8 array"]),
    ("seg_0", "|u1", (-5,), "seg_0", ["invalid array"]),
    ("seg_0", "|V1099511627776", (1,), "seg_0", ["invalid array"]),  # numpy wraps the itemsize to 0
])
def test_every_key_is_bounded_by_its_header(tmp_path, key, descr, shape, refused_key, fragments):
    path = tmp_path / "big.npz"
    path.write_bytes(declaring(key, descr, shape))
    assert path.stat().st_size < 8192
    err = refused(path)
    assert err.key == refused_key
    for fragment in fragments:
        assert fragment in str(err)


def test_huge_npy_header_is_refused_before_it_is_read(tmp_path):
    evil = b"\x93NUMPY\x02\x00" + struct.pack("<I", 0xFFFFFFF0) + b"{" * 100
    path = tmp_path / "h.npz"
    path.write_bytes(zip_archive([*valid_members()[:-1],
                                  ("seg_0.npy", evil, 0, len(evil) + (1 << 32), zlib.crc32(evil))]))
    err = refused(path)
    assert err.key == "seg_0" and "header of 4,294,967,280 bytes" in str(err) and "10,000" in str(err)


def test_member_level_refusals(tmp_path):
    path = tmp_path / "m.npz"
    good = valid_members()

    def check(entries, fragment, key):
        path.write_bytes(zip_archive(entries))
        err = refused(path)
        assert fragment in str(err) and err.key == key

    name, data, _, size, crc = good[-1]
    check([*good[:-1], (name, data, 12, size, crc)], "compression method 12", "seg_0")  # bzip2
    v3 = npy(np.zeros(64, np.uint8)).replace(b"NUMPY\x01", b"NUMPY\x03", 1)
    check([*good[:-1], stored("seg_0.npy", v3)], "version 3.0", "seg_0")
    check([*good, good[-1]], "appears twice", "seg_0")
    check([*good[:-1], stored("seg_0.npy", b"\x93NUMPY\x01\x00\x76")], "ends inside its .npy header", "seg_0")
    check([*good[:-1], stored("seg_0.npy", npy_header("|u1", (64,)).replace(b"'descr'", b"'dexcr'") + bytes(64))],
          "malformed .npy header", "seg_0")
    v2 = npy_header("|u1", (64,), version=2) + bytes(range(64))  # .npy 2.0 (4-byte header length) is read
    path.write_bytes(zip_archive([*good[:-1], stored("seg_0.npy", v2)]))
    assert load_image(path).segments[0][1].tolist() == list(range(64))
    insns = np.asfortranarray(np.arange(48, dtype=np.uint8).reshape(3, 16))  # as np.load returns it
    path.write_bytes(zip_archive([good[0], stored("insns.npy", npy(insns)), *good[2:]]))
    assert np.array_equal(load_image(path).insns, insns)
    path.write_bytes(zip_archive(good))
    with pytest.raises(ImageError, match="corrupt"):  # the stored CRC is checked at the end of each member
        load_image(io.BytesIO(path.read_bytes().replace(bytes(64), b"\x01" * 64, 1)))
    assert load_image(path).segments[0][1].tolist() == [0] * 64


def test_segment_count_is_checked_on_the_zip_directory(tmp_path):
    img = ProgramImage(PYNQ, assemble([FinishInsn()], PYNQ), 0,
                       [(0x1000 * (i + 1), np.ones(4, np.uint8)) for i in range(20)])
    path = tmp_path / "many.npz"
    save_image(path, img)
    err = refused(path, ImageLimits(max_segments=19))
    assert err.key == "seg_addr" and "24 members" in str(err) and "--max-segments" in str(err)
    assert len(load_image(path, ImageLimits(max_segments=20)).segments) == 20


def test_deflate_bomb_is_refused_before_decompressing(tmp_path):
    """3 MB on disk, 3 GiB once inflated: refused from the headers, in a 1 GiB address space."""
    stream, size = deflate_bomb(3 << 30)
    path = tmp_path / "bomb.npz"
    path.write_bytes(zip_archive([*valid_members()[:-1], ("seg_0.npy", stream, 8, size, 0)]))
    assert path.stat().st_size < 4 << 20
    first = zlib.decompressobj(-15).decompress(stream, 1 << 20)  # it really inflates: header, then zeros
    assert first.startswith(b"\x93NUMPY") and first.count(0) > 1_000_000
    line = one_error_line(vta("sim", "replay", "bomb.npz", cwd=tmp_path))
    assert "bomb.npz" in line and "seg_0" in line and "3,221,225,472" in line and "--max-dram-bytes" in line
    doc = (Path(__file__).resolve().parents[1] / "docs" / "image-format.md").read_text()
    assert f"\n{line}\n" in doc, f"docs/image-format.md quotes this refusal; it now reads:\n{line}"
    line = one_error_line(vta("sim", "disasm", "bomb.npz", cwd=tmp_path))
    assert "--max-dram-bytes" in line
    result = tmp_path / "bomb.result.npz"  # a replay result is read the same way
    result.write_bytes(zip_archive([stored("stats.npy", npy(np.array("{}"))),
                                    stored("seg_addr.npy", npy(np.array([0x1000], np.uint64))),
                                    ("seg_0.npy", stream, 8, size, 0)]))
    code = ("import sys\nfrom simulator.image import load_result\n"
            "try:\n    load_result(sys.argv[1])\nexcept ValueError as e:\n    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(result)], capture_output=True, text=True,
                          check=False, preexec_fn=_limit_memory, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.startswith(f"replay result {result}: the segments declare") and "--max-dram-bytes" in proc.stdout


def test_raising_limits_lets_a_large_legitimate_image_through(tmp_path, capsys):
    img = ProgramImage(PYNQ, nop_image(5000).insns, 0, [(0x1000, np.arange(3 << 20, dtype=np.uint64)
                                                         .astype(np.uint8))])
    path = tmp_path / "large.npz"
    save_image(path, img)
    for flags, fragment in ((["--max-insns", "4999"], "5,000 instructions; at most 4,999 (--max-insns)"),
                            (["--max-dram-bytes", "2M"], "at most 2,097,152 bytes of DRAM (--max-dram-bytes)")):
        assert main(["sim", "replay", str(path), *flags]) == 2
        err = capsys.readouterr().err
        assert fragment in err and str(path) in err and len(err.splitlines()) == 1
    assert main(["sim", "replay", str(path), "--max-insns", "5000", "--max-dram-bytes", "3M", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["insns"]["load"] == 4999
    back = load_image(path, ImageLimits(max_insns=5000, max_dram_bytes=3 << 20))
    assert np.array_equal(back.insns, img.insns)


# ------------------------------------------------------------------------------------------------------------
# traces

def test_two_million_instructions_with_trace_are_refused_before_the_run(tmp_path):
    path = tmp_path / "long.npz"
    save_image(path, nop_image(2_000_000))
    assert path.stat().st_size < 200_000
    line = one_error_line(vta("sim", "replay", "long.npz", "--trace", "t.json", "--out", "r.npz", cwd=tmp_path))
    assert "2,000,000 instructions" in line and "--max-insns" in line
    line = one_error_line(vta("sim", "replay", "long.npz", "--max-insns", "2000000", "--trace", "t.json",
                              "--out", "r.npz", cwd=tmp_path))
    assert "long.npz" in line and "2,000,000 instructions" in line
    assert f"at most {DEFAULT_MAX_TRACE_EVENTS:,} trace events (--max-trace-events)" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.npz"]  # nothing written, nothing run


def test_trace_limit_flag_and_library(tmp_path, capsys):
    path = tmp_path / "p.npz"
    save_image(path, nop_image(3000))
    trace = tmp_path / "t.json"
    assert main(["sim", "replay", str(path), "--trace", str(trace), "--max-trace-events", "2999"]) == 2
    assert "3,000 instructions" in capsys.readouterr().err and not trace.exists()
    assert main(["sim", "replay", str(path), "--trace", str(trace), "--max-trace-events", "3000"]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == 3000
    image = load_image(path)
    with pytest.raises(TraceLimitError, match="3,000 instructions"):
        replay_with_stats(Simulator(PYNQ), image, trace=True, max_trace_events=100)
    _, stats = replay_with_stats(Simulator(PYNQ), image, trace=True, max_trace_events=3000)
    with pytest.raises(TraceLimitError):
        chrome_trace(stats, image.insns, PYNQ, max_events=2999)
    with pytest.raises(TraceLimitError):
        write_chrome_trace(trace, stats, image.insns, PYNQ, max_events=2999)


@pytest.mark.parametrize("name", ["gemm_1", "alu_0"])
def test_streamed_trace_is_byte_identical_to_the_dict(tmp_path, name):
    image = load_image(golden_path(f"{name}.npz"))
    _, stats = replay_with_stats(Simulator(image.config), image, trace=True)
    path = tmp_path / "t.json"
    write_chrome_trace(path, stats, image.insns, image.config)
    assert path.read_bytes() == json.dumps(chrome_trace(stats, image.insns, image.config)).encode()
    assert os.listdir(tmp_path) == ["t.json"]


# ------------------------------------------------------------------------------------------------------------
# output paths and empty images

@pytest.mark.parametrize("flags, fragment", [
    (["--out", "IMAGE"], "--out IMAGE is the input image"),
    (["--trace", "IMAGE"], "--trace IMAGE is the input image"),
    (["--out", "x.out", "--trace", "x.out"], "--out x.out and --trace x.out are the same file"),
    (["--out", ""], "--out '': empty path"),
    (["--trace", ""], "--trace '': empty path"),
])
def test_output_paths_are_checked_before_the_run(tmp_path, capsys, monkeypatch, flags, fragment):
    monkeypatch.chdir(tmp_path)
    image = tmp_path / "prog.npz"
    image.write_bytes(golden_path("gemm_1.npz").read_bytes())
    before = image.read_bytes()
    flags = [str(image) if f == "IMAGE" else f for f in flags]
    assert main(["sim", "replay", str(image), *flags]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("vta: error: ") and len(err.splitlines()) == 1
    assert fragment.replace("IMAGE", str(image)) in err
    assert image.read_bytes() == before and os.listdir(tmp_path) == ["prog.npz"]


def test_same_file_by_another_name(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "prog.npz").write_bytes(golden_path("gemm_1.npz").read_bytes())
    os.link(tmp_path / "prog.npz", tmp_path / "d" / "alias.npz")
    for argv in (["prog.npz", "--out", "d/../prog.npz"], ["prog.npz", "--out", "d/alias.npz"],
                 ["prog.npz", "--out", "r.npz", "--trace", "./r.npz"]):
        assert main(["sim", "replay", *argv]) == 2
        assert "vta: error: --" in capsys.readouterr().err
    assert main(["sim", "replay", "prog.npz", "--out", "r.npz", "--trace", "r.json"]) == 0
    assert {p.name for p in tmp_path.iterdir()} == {"prog.npz", "d", "r.npz", "r.json"}


def test_image_without_instructions(tmp_path, capsys):
    path = tmp_path / "empty.npz"
    np.savez(path, config=np.array(PYNQ.to_json()), insns=np.zeros((0, 16), np.uint8),
             insn_addr=np.array(0x8000, np.uint64), seg_addr=np.zeros(0, np.uint64))
    err = refused(path)
    assert err.key == "insns" and "image has no instructions" in str(err)
    for cmd in ("replay", "disasm"):
        assert main(["sim", cmd, str(path)]) == 2
        line = capsys.readouterr().err
        assert "image has no instructions" in line and str(path) in line and "cannot map" not in line
    with pytest.raises(ImageError, match="no instructions"):
        ProgramImage(PYNQ, np.zeros((0, 16), np.uint8))


# ------------------------------------------------------------------------------------------------------------
# the knobs themselves

def test_limit_values_and_flag_syntax(capsys):
    assert parse_size("4G") == parse_size("4GiB") == parse_size("4_294_967_296") == 4 << 30
    assert parse_size("512k") == 512 << 10 and parse_count("2_000_000") == 2_000_000
    for bad in ("0", "-1", "1.5G", "4X", "", "1__0M"):
        with pytest.raises(ValueError, match="byte size"):
            parse_size(bad)
    with pytest.raises(ValueError, match="positive integer"):
        parse_count("1e6")
    with pytest.raises(ValueError, match="max_insns"):
        ImageLimits(max_insns=0)
    assert main(["sim", "replay", "x.npz", "--max-dram-bytes", "lots"]) == 2
    assert "--max-dram-bytes: 'lots' is not a byte size" in capsys.readouterr().err


def test_golden_result_files_still_load():
    result = load_result(golden_path("gemm_1.expect.npz"))
    assert result.segments and "gemm_counter" in result.stats
