"""Program images and replay results: the ``.npz`` interchange format for programs and golden traces.

An image holds everything a simulator or a board needs to run a program without its compiler: the
hardware config, the instruction stream, where it sits in DRAM and the DRAM segments it reads. A result
holds the segments a run stored to plus its counters. The format (keys, dtypes) is specified in
``docs/image-format.md``; anything else is refused with an ``ImageError`` naming the key, so a corrupt or
foreign file never reaches the simulator. Files are written atomically.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from hw_config import ConfigError, HwConfig, config_from_dict
from simulator.dram import MAX_ADDRESS
from simulator.files import write_atomic

INSN_BYTES = 16
_SEG_KEY = re.compile(r"seg_(0|[1-9][0-9]*)")
PathOrFile = str | os.PathLike | IO[bytes]


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
    if not isinstance(insns, np.ndarray) or insns.dtype != np.uint8 or insns.ndim != 2 \
            or insns.shape[1] != INSN_BYTES:
        raise ImageError(f"{where}: insns must be a uint8 array of shape (N, 16), got {_describe(insns)}",
                         "insns")


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray):
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
# reading

def _name(path_or_file: PathOrFile) -> str:
    if isinstance(path_or_file, (str, os.PathLike)):
        return os.fspath(path_or_file)
    return str(getattr(path_or_file, "name", "<file>"))


def _read_npz(path_or_file: PathOrFile, where: str) -> dict[str, np.ndarray]:
    """Every array of an .npz, read eagerly with pickles refused."""
    if isinstance(path_or_file, (str, os.PathLike)):
        with open(path_or_file, "rb") as f:
            return _read_npz(f, where)
    start = path_or_file.tell() if path_or_file.seekable() else None
    magic = path_or_file.read(4)
    if start is not None:
        path_or_file.seek(start)
    if magic != b"PK\x03\x04":
        raise ImageError(f"{where}: not an .npz file (a zip archive of .npy arrays, "
                         "as written by numpy.savez)")
    arrays = {}
    try:
        with np.load(path_or_file, allow_pickle=False) as z:
            for key in z.files:
                try:
                    value = z[key]
                except ValueError as e:
                    raise ImageError(f"{where}: key {key!r} cannot be read ({e})", key) from None
                if not isinstance(value, np.ndarray):
                    raise ImageError(f"{where}: archive member {key!r} is not a .npy array", key)
                arrays[key] = value
    except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as e:
        raise ImageError(f"{where}: corrupt .npz archive ({e})") from None
    return arrays


def _scalar_str(arrays: dict[str, np.ndarray], key: str, where: str) -> str:
    a = arrays[key]
    if a.ndim != 0 or a.dtype.kind != "U":
        raise ImageError(f"{where}: key {key!r} must be a 0-d str array, got {_describe(a)}", key)
    return str(a[()])


def _require(arrays: dict[str, np.ndarray], fixed: tuple[str, ...],
             where: str) -> list[tuple[int, np.ndarray]]:
    """Check the key set (fixed keys, seg_addr, seg_0..seg_{K-1}, nothing else); return the segments."""
    for key in (*fixed, "seg_addr"):
        if key not in arrays:
            raise ImageError(f"{where}: missing key {key!r} (expected {', '.join(fixed)}, "
                             "seg_addr, seg_<i>)", key)
    extra = sorted(k for k in arrays if k not in fixed and k != "seg_addr" and not _SEG_KEY.fullmatch(k))
    if extra:
        raise ImageError(f"{where}: unknown key(s) {', '.join(map(repr, extra))}; "
                         f"allowed: {', '.join(fixed)}, seg_addr, seg_<i>", extra[0])
    seg_addr = arrays["seg_addr"]
    if seg_addr.dtype != np.uint64 or seg_addr.ndim != 1:
        raise ImageError(f"{where}: seg_addr must be a uint64 array of shape (K,), got {_describe(seg_addr)}",
                         "seg_addr")
    count = len(seg_addr)
    present = sorted(int(k[4:]) for k in arrays if _SEG_KEY.fullmatch(k))
    if present != list(range(count)):
        missing = sorted(set(range(count)) - set(present))
        surplus = sorted(set(present) - set(range(count)))
        detail = f"missing seg_{missing[0]}" if missing else f"unexpected seg_{surplus[0]}"
        raise ImageError(f"{where}: seg_addr lists {count} segment(s) but the file has "
                         f"{len(present)} seg_<i> array(s) ({detail}); expected seg_0 .. seg_{count - 1}",
                         f"seg_{missing[0]}" if missing else f"seg_{surplus[0]}")
    return _segments_from([(int(seg_addr[i]), arrays[f"seg_{i}"]) for i in range(count)], where)


def load_image(path_or_file: PathOrFile) -> ProgramImage:
    """Read and check a program image (``.npz``).

    A config with only VTA's keys (like the golden images') gets its TARGET's platform/timing values.
    """
    where = f"program image {_name(path_or_file)}"
    arrays = _read_npz(path_or_file, where)
    segments = _require(arrays, ("config", "insns", "insn_addr"), where)
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
    if insn_addr.dtype != np.uint64 or insn_addr.ndim != 0:
        raise ImageError(f"{where}: insn_addr must be a 0-d uint64 array, got {_describe(insn_addr)}",
                         "insn_addr")
    _check_stream_clear(int(insn_addr), insns.size, segments, where)
    return ProgramImage(cfg, insns, int(insn_addr), segments)


def load_result(path_or_file: PathOrFile) -> ReplayResult:
    """Read and check a replay result (``.npz`` with seg_addr, seg_<i> and stats)."""
    where = f"replay result {_name(path_or_file)}"
    arrays = _read_npz(path_or_file, where)
    segments = _require(arrays, ("stats",), where)
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
