"""Program images and replay results: the ``.npz`` interchange format for programs and golden traces.

An image holds everything a simulator or a board needs to run a program without its compiler: the
hardware config, the instruction stream, where it sits in DRAM and the DRAM segments it reads. A result
holds the segments a run stored to plus its counters. The format (keys, dtypes) is specified in
``docs/image-format.md``; anything else is refused with an ``ImageError`` naming the key, so a corrupt or
foreign file never reaches the simulator. Files are written atomically.

Reading is two-phase: the zip directory and every member's ``.npy`` header (dtype, shape, declared size)
are read and checked against the format and against ``ImageLimits`` (instructions, total segment bytes,
segments) before any array data is decompressed, and data is then read in bounded chunks, never more than
the header declared. So a few-KB file that declares a terabyte, or a zip bomb, is refused in
milliseconds with an ``ImageError`` instead of exhausting memory.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math
import os
import re
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import IO, Any

import numpy as np

from hw_config import ConfigError, HwConfig, config_from_dict
from hw_config.isa_rules import INSN_BYTES
from hw_config.writing import write_atomic
from simulator.dram import MAX_ADDRESS

_SEG_KEY = re.compile(r"seg_(0|[1-9][0-9]*)")
PathOrFile = str | os.PathLike | IO[bytes]

# Limits on what a file read may declare (docs/image-format.md, "Reading untrusted files"), checked on the
# .npy headers before any data is read; raise them with ImageLimits(...) or the `vta sim` flag named here.
DEFAULT_MAX_INSNS = 1 << 20  # instructions in an image (16 MiB of stream)          --max-insns
DEFAULT_MAX_DRAM_BYTES = 1 << 30  # total bytes of all seg_<i> of a file (1 GiB)      --max-dram-bytes
DEFAULT_MAX_SEGMENTS = 1 << 16  # seg_<i> members of a file                            --max-segments
DEFAULT_MAX_TEXT_CHARS = 1 << 20  # characters of config / stats JSON (Python API only)
MAX_NPY_HEADER_BYTES = 10_000  # a .npy header's dict (numpy's own max_header_size); a format rule
_READ_CHUNK = 1 << 20
_MAX_DEFLATE_RATIO = 1032  # deflate's largest expansion (258-byte matches coded in 2 bits)


@dataclass(frozen=True)
class ImageLimits:
    """Upper bounds checked against the ``.npy`` headers of a file before any data is read.

    ``max_insns``: rows of ``insns``; ``max_dram_bytes``: sum of the sizes of all ``seg_<i>``;
    ``max_segments``: number of ``seg_<i>``; ``max_text_chars``: length of the ``config`` / ``stats`` JSON.
    """

    max_insns: int = DEFAULT_MAX_INSNS
    max_dram_bytes: int = DEFAULT_MAX_DRAM_BYTES
    max_segments: int = DEFAULT_MAX_SEGMENTS
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ImageLimits.{f.name}={value!r}: need a positive integer")


_SIZE = re.compile(r"\s*([0-9][0-9_]*)\s*(|k|m|g|t|ki|mi|gi|ti)(b?)\s*", re.IGNORECASE)
_SIZE_UNITS = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}


def parse_size(text: str) -> int:
    """A positive byte count: ``1073741824``, ``1_000_000``, ``512M``, ``4GiB``, ``1T`` (K/M/G/T are 1024-based)."""
    m = _SIZE.fullmatch(text)
    try:
        value = int(m.group(1)) << _SIZE_UNITS[m.group(2)[:1].lower()] if m else 0
    except ValueError:  # misplaced underscores
        value = 0
    if value < 1:
        raise ValueError(f"{text!r} is not a byte size: expected a positive integer with an optional "
                         "K, M, G or T suffix (powers of 1024), e.g. 4G")
    return value


def parse_count(text: str) -> int:
    """A positive integer: ``2000000`` or ``2_000_000``."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{text!r} is not a positive integer")
    return value


class ImageError(ValueError):
    """A program image or replay result that does not follow the format; ``key`` names the offending key."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


def _segments_from(segments: Any, where: str) -> list[tuple[int, np.ndarray]]:
    """Check (and lightly normalise) a segment list: uint8 1-D, non-empty, non-overlapping, below 2^48."""
    out = []
    for i, seg in enumerate(segments):
        try:
            addr, data = seg
        except (TypeError, ValueError):
            raise ImageError(f"{where}: segment {i} must be an (address, uint8 array) pair",
                             f"seg_{i}") from None
        if isinstance(data, (bytes, bytearray, memoryview)):
            data = np.frombuffer(bytes(data), dtype=np.uint8).copy()
        if isinstance(addr, (bool, np.bool_)) or not isinstance(addr, (int, np.integer)):
            raise ImageError(f"{where}: segment {i} address {addr!r} is not an integer", "seg_addr")
        addr = int(addr)
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 1:
            raise ImageError(f"{where}: seg_{i} must be a 1-D uint8 array, got {_describe(data)}", f"seg_{i}")
        if data.size == 0:
            raise ImageError(f"{where}: seg_{i} is empty; every segment needs at least one byte", f"seg_{i}")
        if addr < 0 or addr + data.size > MAX_ADDRESS:
            raise ImageError(f"{where}: seg_{i} [0x{addr:x}, +{data.size}) is outside the physical address "
                             f"range [0, 2^48)", "seg_addr")
        out.append((addr, data))
    _check_disjoint([(a, d.size, f"seg_{i}") for i, (a, d) in enumerate(out)], where)
    return out


def _check_disjoint(ranges: list[tuple[int, int, str]], where: str) -> None:
    ranges = sorted(ranges)
    for (a0, n0, k0), (a1, n1, k1) in itertools.pairwise(ranges):
        if a0 + n0 > a1:
            raise ImageError(f"{where}: {k0} [0x{a0:x}, 0x{a0 + n0:x}) overlaps "
                             f"{k1} [0x{a1:x}, 0x{a1 + n1:x})", "seg_addr")


def _check_stream_clear(insn_addr: int, nbytes: int, segments: list[tuple[int, np.ndarray]],
                        where: str) -> None:
    """A placed stream (insn_addr != 0) must not overlap a segment: replay maps both."""
    if insn_addr and nbytes:
        _check_disjoint([(a, d.size, f"seg_{i}") for i, (a, d) in enumerate(segments)]
                        + [(insn_addr, nbytes, "the instruction stream (insn_addr)")], where)


def _check_insns(insns: Any, where: str) -> None:
    """insns (an array, or a _Member before its data is read) is uint8 (N, 16) with N >= 1."""
    if not isinstance(insns, (np.ndarray, _Member)) or insns.dtype != np.uint8 or len(insns.shape) != 2 \
            or insns.shape[1] != INSN_BYTES:
        raise ImageError(f"{where}: insns must be a uint8 array of shape (N, 16), got {_describe(insns)}",
                         "insns")
    if insns.shape[0] == 0:
        raise ImageError(f"{where}: image has no instructions: insns has shape (0, 16); a program needs at "
                         "least one (it ends with FINISH)", "insns")


def _describe(x: Any) -> str:
    if isinstance(x, (np.ndarray, _Member)):
        return f"{x.dtype} array of shape {x.shape}"
    return type(x).__name__


@dataclass
class ProgramImage:
    """A program ready to replay: config, instruction stream (uint8 (N, 16)), its DRAM address (0 = anywhere)
    and the DRAM segments ``(physical address, uint8 bytes)`` it reads."""

    config: HwConfig
    insns: np.ndarray
    insn_addr: int = 0
    segments: list[tuple[int, np.ndarray]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if isinstance(self.insns, (bytes, bytearray, memoryview)):
            self.insns = np.frombuffer(bytes(self.insns), dtype=np.uint8).reshape(-1, INSN_BYTES).copy()
        self.validate()

    def validate(self, where: str = "program image") -> None:
        """Raise ImageError unless the image follows the format (called on creation and before saving)."""
        if not isinstance(self.config, HwConfig):
            raise ImageError(f"{where}: config must be a HwConfig, got {type(self.config).__name__}",
                             "config")
        _check_insns(self.insns, where)
        ins = self.insns
        addr = self.insn_addr
        if isinstance(addr, (bool, np.bool_)) or not isinstance(addr, (int, np.integer)) or not (
                0 <= int(addr) and int(addr) + ins.size <= MAX_ADDRESS):
            raise ImageError(f"{where}: insn_addr={addr!r} must be an integer address in [0, 2^48) "
                             f"(0 = anywhere)", "insn_addr")
        self.insn_addr = int(addr)
        self.segments = _segments_from(self.segments, where)
        _check_stream_clear(self.insn_addr, ins.size, self.segments, where)


@dataclass
class ReplayResult:
    """What a run left behind: the DRAM segments it stored to (final bytes) and its stats (JSON-able)."""

    segments: list[tuple[int, np.ndarray]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, where: str = "replay result") -> None:
        self.segments = _segments_from(self.segments, where)
        if not isinstance(self.stats, dict):
            raise ImageError(f"{where}: stats must be a dict, got {type(self.stats).__name__}", "stats")


# ------------------------------------------------------------------------------------------------------------
# reading: the zip directory and every .npy header first, then bounded reads of the data

def _name(path_or_file: PathOrFile) -> str:
    if isinstance(path_or_file, (str, os.PathLike)):
        return os.fspath(path_or_file)
    return str(getattr(path_or_file, "name", "<file>"))


@dataclass(frozen=True)
class _Member:
    """What one archive member's .npy header declares (nothing of its data has been read)."""

    key: str
    info: zipfile.ZipInfo
    dtype: np.dtype
    shape: tuple[int, ...]
    fortran_order: bool
    data_offset: int  # bytes of magic, version, length and header before the data

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize


def _read_exact(f: IO[bytes], n: int) -> bytes:
    """Up to ``n`` bytes (fewer only at the end of the member)."""
    parts, left = [], n
    while left > 0:
        chunk = f.read(min(left, _READ_CHUNK))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, zlib.error, struct.error,
               NotImplementedError)


@contextlib.contextmanager
def _member_errors(info: zipfile.ZipInfo, key: str, where: str) -> Iterator[None]:
    """Turn zipfile's errors while reading one member (bad CRC, truncated deflate stream) into an ImageError."""
    try:
        yield
    except _ZIP_ERRORS as e:
        raise ImageError(f"{where}: archive member {info.filename!r} is corrupt ({_one_line(e)})", key) from None


def _member_header(zf: zipfile.ZipFile, info: zipfile.ZipInfo, key: str, where: str) -> _Member:
    """Parse one member's .npy header (at most MAX_NPY_HEADER_BYTES are decompressed) and check it."""
    name = info.filename
    if info.flag_bits & 0x1:
        raise ImageError(f"{where}: archive member {name!r} is encrypted", key)
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise ImageError(f"{where}: archive member {name!r} uses zip compression method {info.compress_type}; "
                         "only stored and deflated members (as numpy.savez writes) are read", key)
    with _member_errors(info, key, where), zf.open(info) as f:
        magic = _read_exact(f, len(np.lib.format.MAGIC_PREFIX) + 2)
        if not name.endswith(".npy") or magic[:-2] != np.lib.format.MAGIC_PREFIX:
            raise ImageError(f"{where}: archive member {name!r} is not a .npy array", key)
        version = (magic[-2], magic[-1])
        if version not in ((1, 0), (2, 0)):
            raise ImageError(f"{where}: key {key!r} is in .npy format version {version[0]}.{version[1]}; "
                             "versions 1.0 and 2.0 are read", key)
        length_size = 2 if version == (1, 0) else 4
        length_bytes = _read_exact(f, length_size)
        header_len = int.from_bytes(length_bytes, "little")
        if header_len > MAX_NPY_HEADER_BYTES:
            raise ImageError(f"{where}: key {key!r} has a .npy header of {header_len:,} bytes; at most "
                             f"{MAX_NPY_HEADER_BYTES:,}", key)
        header = _read_exact(f, header_len)
    if len(length_bytes) < length_size or len(header) < header_len:
        raise ImageError(f"{where}: key {key!r}: the member ends inside its .npy header", key)
    reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    try:
        # the length is bounded above, so numpy's own max_header_size (numpy 1.23.5 on; a Pynq image has 1.21) is not
        # needed
        shape, fortran_order, dtype = reader(io.BytesIO(length_bytes + header))
    except (ValueError, TypeError, SyntaxError, KeyError, IndexError, OverflowError, RecursionError) as e:
        raise ImageError(f"{where}: key {key!r} has a malformed .npy header ({_one_line(e)})", key) from None
    if dtype.hasobject:
        raise ImageError(f"{where}: key {key!r} cannot be read (an object array needs pickle, which is "
                         "never loaded)", key)
    if dtype.itemsize == 0 or any(d < 0 for d in shape):
        raise ImageError(f"{where}: key {key!r} declares an invalid array ({dtype} of shape {shape})", key)
    member = _Member(key, info, dtype, tuple(shape), bool(fortran_order),
                     len(magic) + len(length_bytes) + header_len)
    if info.file_size != member.data_offset + member.nbytes:
        raise ImageError(f"{where}: archive member {name!r} holds {info.file_size:,} bytes but its .npy header "
                         f"declares {_describe(member)} = {member.data_offset + member.nbytes:,} bytes "
                         "(header included); the archive is corrupt", key)
    return member


def _member_data(zf: zipfile.ZipFile, m: _Member, where: str) -> np.ndarray:
    """The array of a checked member: exactly ``m.nbytes`` are read, in bounded chunks, into one buffer."""
    packed, size, how = m.info.compress_size, m.info.file_size, m.info.compress_type
    if (size != packed) if how == zipfile.ZIP_STORED else (size > _MAX_DEFLATE_RATIO * packed + 1024):
        raise ImageError(f"{where}: archive member {m.info.filename!r} declares {size:,} bytes from {packed:,} "
                         f"bytes in the file, more than {'storing' if how == zipfile.ZIP_STORED else 'deflate'} "
                         "can produce; the archive is corrupt", m.key)
    try:
        flat = np.zeros(m.count, dtype=m.dtype)
    except MemoryError:
        raise ImageError(f"{where}: key {m.key!r}: cannot allocate {m.nbytes:,} bytes of host memory",
                         m.key) from None
    buf = flat.view(np.uint8)
    with _member_errors(m.info, m.key, where), zf.open(m.info) as f:
        _read_exact(f, m.data_offset)
        done = 0
        while done < m.nbytes:
            chunk = f.read(min(_READ_CHUNK, m.nbytes - done))
            if not chunk:
                raise ImageError(f"{where}: key {m.key!r} ends after {done:,} of {m.nbytes:,} data bytes", m.key)
            buf[done:done + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
            done += len(chunk)
        f.read(1)  # at the end of the member: lets zipfile check its CRC
    if m.fortran_order:
        return flat.reshape(m.shape[::-1]).transpose()
    return flat.reshape(m.shape)


def _read_npz(path_or_file: PathOrFile, where: str, fixed: tuple[str, ...], limits: ImageLimits,
              check: Callable[[dict[str, _Member]], None]) -> dict[str, np.ndarray]:
    """Every array of an .npz: all headers are read and passed to ``check`` before any data is read."""
    if isinstance(path_or_file, (str, os.PathLike)):
        try:   # (reading an open file raises neither of these: they are the open's)
            with open(path_or_file, "rb") as f:
                return _read_npz(f, where, fixed, limits, check)
        except FileNotFoundError:   # the OSError types stay; the message names the file and what it is for
            raise FileNotFoundError(f"{where}: no such file") from None
        except IsADirectoryError:
            raise IsADirectoryError(f"{where}: a directory, not an .npz file") from None
    start = path_or_file.tell() if path_or_file.seekable() else None
    magic = path_or_file.read(4)
    if start is not None:
        path_or_file.seek(start)
    if magic != b"PK\x03\x04":
        raise ImageError(f"{where}: not an .npz file (a zip archive of .npy arrays, "
                         "as written by numpy.savez)")
    try:
        with zipfile.ZipFile(path_or_file) as zf:
            infos = zf.infolist()
            if len(infos) > len(fixed) + 1 + limits.max_segments:
                raise ImageError(f"{where}: the archive has {len(infos):,} members, room for "
                                 f"{len(infos) - len(fixed) - 1:,} seg_<i>; at most {limits.max_segments:,} "
                                 "segments (--max-segments)", "seg_addr")
            members: dict[str, _Member] = {}
            for info in infos:
                key = info.filename.removesuffix(".npy")
                if key in members:
                    raise ImageError(f"{where}: archive member {info.filename!r} appears twice", key)
                members[key] = _member_header(zf, info, key, where)
            check(members)
            return {key: _member_data(zf, m, where) for key, m in members.items()}
    except ImageError:
        raise
    except (*_ZIP_ERRORS, ValueError) as e:
        raise ImageError(f"{where}: corrupt .npz archive ({_one_line(e)})") from None


def _check_text(m: _Member, where: str, limits: ImageLimits) -> None:
    """A 0-d str of at most max_text_chars characters (config, stats)."""
    key = m.key
    if len(m.shape) != 0 or m.dtype.kind != "U":
        raise ImageError(f"{where}: key {key!r} must be a 0-d str array, got {_describe(m)}", key)
    chars = m.dtype.itemsize // 4
    if chars > limits.max_text_chars:
        raise ImageError(f"{where}: key {key!r} declares {chars:,} characters; at most "
                         f"{limits.max_text_chars:,} (ImageLimits.max_text_chars)", key)


def _check_members(members: dict[str, _Member], fixed: tuple[str, ...], where: str, limits: ImageLimits) -> None:
    """Everything a header tells: the key set, dtypes and shapes, and the limits (before any data is read)."""
    _require(members, fixed, where)
    for key in fixed:
        if key in ("config", "stats"):
            _check_text(members[key], where, limits)
    sizes = []
    for i in range(members["seg_addr"].shape[0]):
        seg = members[f"seg_{i}"]
        if seg.dtype != np.uint8 or len(seg.shape) != 1:
            raise ImageError(f"{where}: seg_{i} must be a 1-D uint8 array, got {_describe(seg)}", f"seg_{i}")
        sizes.append(seg.nbytes)
    if sum(sizes) > limits.max_dram_bytes:
        big = max(range(len(sizes)), key=sizes.__getitem__)
        raise ImageError(f"{where}: the segments declare {sum(sizes):,} bytes in total (seg_{big} alone "
                         f"{sizes[big]:,}); at most {limits.max_dram_bytes:,} bytes of DRAM (--max-dram-bytes)",
                         f"seg_{big}")


def _scalar_str(arrays: dict[str, np.ndarray], key: str, where: str) -> str:
    a = arrays[key]
    if a.ndim != 0 or a.dtype.kind != "U":
        raise ImageError(f"{where}: key {key!r} must be a 0-d str array, got {_describe(a)}", key)
    return str(a[()])


def _require(arrays: dict[str, np.ndarray] | dict[str, _Member], fixed: tuple[str, ...], where: str) -> None:
    """Check the key set (fixed keys, seg_addr, seg_0..seg_{K-1}, nothing else) and seg_addr's dtype/shape."""
    for key in (*fixed, "seg_addr"):
        if key not in arrays:
            raise ImageError(f"{where}: missing key {key!r} (expected {', '.join(fixed)}, "
                             "seg_addr, seg_<i>)", key)
    extra = sorted(k for k in arrays if k not in fixed and k != "seg_addr" and not _SEG_KEY.fullmatch(k))
    if extra:
        raise ImageError(f"{where}: unknown key(s) {', '.join(map(repr, extra))}; "
                         f"allowed: {', '.join(fixed)}, seg_addr, seg_<i>", extra[0])
    seg_addr = arrays["seg_addr"]
    if seg_addr.dtype != np.uint64 or len(seg_addr.shape) != 1:
        raise ImageError(f"{where}: seg_addr must be a uint64 array of shape (K,), got {_describe(seg_addr)}",
                         "seg_addr")
    count = seg_addr.shape[0]  # may be anything a header declares: nothing here is sized by it
    present = sorted(int(k[4:]) for k in arrays if _SEG_KEY.fullmatch(k))
    if len(present) != count or present != list(range(count)):
        missing = next((i for i, k in enumerate(present) if k != i), len(present))
        bad = f"seg_{missing}" if missing < count else f"seg_{present[count]}"
        detail = f"missing {bad}" if missing < count else f"unexpected {bad}"
        raise ImageError(f"{where}: seg_addr lists {count} segment(s) but the file has "
                         f"{len(present)} seg_<i> array(s) ({detail}); expected seg_0 .. seg_{count - 1}", bad)


def _segments(arrays: dict[str, np.ndarray], where: str) -> list[tuple[int, np.ndarray]]:
    seg_addr = arrays["seg_addr"]
    return _segments_from([(int(seg_addr[i]), arrays[f"seg_{i}"]) for i in range(len(seg_addr))], where)


_IMAGE_KEYS = ("config", "insns", "insn_addr")
_RESULT_KEYS = ("stats",)


def load_image(path_or_file: PathOrFile, limits: ImageLimits | None = None) -> ProgramImage:
    """Read and check a program image (``.npz``); ``limits`` (default ``ImageLimits()``) bound what it may declare.

    A config with only VTA's keys (like the golden images') gets its TARGET's platform/timing values.
    """
    limits = limits or ImageLimits()
    where = f"program image {_name(path_or_file)}"

    def check(members: dict[str, _Member]) -> None:
        _check_members(members, _IMAGE_KEYS, where, limits)
        insns, insn_addr = members["insns"], members["insn_addr"]
        _check_insns(insns, where)
        if insns.shape[0] > limits.max_insns:
            raise ImageError(f"{where}: insns declares {insns.shape[0]:,} instructions; at most "
                             f"{limits.max_insns:,} (--max-insns)", "insns")
        if insn_addr.dtype != np.uint64 or len(insn_addr.shape) != 0:
            raise ImageError(f"{where}: insn_addr must be a 0-d uint64 array, got {_describe(insn_addr)}",
                             "insn_addr")

    arrays = _read_npz(path_or_file, where, _IMAGE_KEYS, limits, check)
    segments = _segments(arrays, where)
    text = _scalar_str(arrays, "config", where)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ImageError(f"{where}: config is not valid JSON ({e})", "config") from None
    if not isinstance(data, dict):
        raise ImageError(f"{where}: config must be a JSON object, got {type(data).__name__}", "config")
    try:
        cfg = config_from_dict(data)
    except ConfigError as e:
        raise ImageError(f"{where}: config: {e}", "config") from e
    insns = arrays["insns"]
    _check_insns(insns, where)
    insn_addr = arrays["insn_addr"]
    _check_stream_clear(int(insn_addr), insns.size, segments, where)
    return ProgramImage(cfg, insns, int(insn_addr), segments)


def load_result(path_or_file: PathOrFile, limits: ImageLimits | None = None) -> ReplayResult:
    """Read and check a replay result (``.npz`` with seg_addr, seg_<i> and stats)."""
    limits = limits or ImageLimits()
    where = f"replay result {_name(path_or_file)}"
    arrays = _read_npz(path_or_file, where, _RESULT_KEYS, limits,
                       lambda members: _check_members(members, _RESULT_KEYS, where, limits))
    segments = _segments(arrays, where)
    try:
        stats = json.loads(_scalar_str(arrays, "stats", where))
    except json.JSONDecodeError as e:
        raise ImageError(f"{where}: stats is not valid JSON ({e})", "stats") from None
    if not isinstance(stats, dict):
        raise ImageError(f"{where}: stats must be a JSON object, got {type(stats).__name__}", "stats")
    return ReplayResult(segments, stats)


# ------------------------------------------------------------------------------------------------------------
# writing

def _segment_arrays(segments: list[tuple[int, np.ndarray]]) -> dict[str, np.ndarray]:
    arrays = {"seg_addr": np.array([a for a, _ in segments], dtype=np.uint64).reshape(len(segments))}
    arrays.update({f"seg_{i}": d for i, (_, d) in enumerate(segments)})
    return arrays


def _write_atomic(path: str | os.PathLike, arrays: dict[str, np.ndarray], compress: bool) -> None:
    """Write an .npz at exactly ``path`` (no '.npz' appended), atomically."""
    write_atomic(path, lambda f: (np.savez_compressed if compress else np.savez)(f, **arrays))


def save_image(path: str | os.PathLike, image: ProgramImage, compress: bool = True) -> None:
    """Write a program image atomically to exactly ``path``."""
    image.validate()
    arrays = {"config": np.array(image.config.to_json(indent=None)),
              "insns": image.insns,
              "insn_addr": np.array(image.insn_addr, dtype=np.uint64)}
    arrays.update(_segment_arrays(image.segments))
    _write_atomic(path, arrays, compress)


def save_result(path: str | os.PathLike, result: ReplayResult, compress: bool = True) -> None:
    """Write a replay result atomically to exactly ``path``."""
    result.validate()
    try:
        stats = json.dumps(result.stats)
    except (TypeError, ValueError) as e:
        raise ImageError(f"replay result: stats are not JSON-serialisable ({e})", "stats") from None
    arrays = {"stats": np.array(stats)}
    arrays.update(_segment_arrays(result.segments))
    _write_atomic(path, arrays, compress)
