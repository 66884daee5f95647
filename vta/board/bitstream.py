"""VTA bitstreams: where they are cached, which one a config needs, and placeholders for the simulated board.

VTA keeps bitstreams in ``$VTA_CACHE_PATH`` (default ``~/.vta_cache``) as
``<cache>/<TARGET>/<HW_VER with '.' -> '_'>/<bitstream>.bit``, where ``<bitstream>`` is the config's name
such as ``1x16_i8w8a32_15_15_18_17``. A board runs only the bitstream built for its config: the name is
checked before anything is downloaded, and a missing file is reported with every place looked at and how
to get one (VTA's own flow failed later, with an HTTP 404 from its download URL).

The simulated board (``vta board serve --simulated``) accepts a *placeholder* bitstream: a well-formed
``.bit`` file (Xilinx header, sync word) whose design name marks it as not being hardware. ``vta board
bitstream --make-simulated`` writes one into the cache; ``PynqDevice`` refuses to download a placeholder
onto anything but a simulated board.

A bitstream built by ``vta hw vivado``'s flow has the config it implements beside it, ``<bitstream>.json``
(with ``<bitstream>.hwh``). The name alone does not tell two designs apart (a 32-bit bus or another clock keeps
``1x16_i8w8a32_15_15_18_17``), so where that file is present the config a program was compiled for must equal it
in every key the hardware depends on; a mismatch is refused naming both configs.
"""

from __future__ import annotations

import json
import os
import shlex
import struct
from pathlib import Path

from hw_config import ConfigError, HwConfig, load_config, presets
from hw_config.config import LATENCY_KEYS, config_from_dict
from hw_config.writing import write_atomic

PLACEHOLDER_DESIGN = "vta_stack_simulated_board_placeholder"
BIT_MAGIC = b"\x00\x09\x0f\xf0\x0f\xf0\x0f\xf0\x0f\xf0\x00\x00\x01"
SYNC_WORD = b"\xaa\x99\x55\x66"
MAX_BITSTREAM_BYTES = 256 << 20    # the largest Zynq UltraScale+ bitstreams are ~30-60 MB
# Targets whose VTA bitstream has the HLS register map (fetch/load/compute/store blocks, ap_ctrl, done).
HLS_TARGETS = ("pynq", "ultra96", "zcu104")

# What VTA's distro (uwsampl/vta-distro, bitstreams/<TARGET>/<HW_VER>/) published: the Pynq's 1x16 design only
# (its ultra96 0.0.1 entry has no file); every other config needs a bitstream built by its user.
PUBLISHED_BITSTREAMS = {("pynq", "0.0.1"): ("1x16_i8w8a32_15_15_18_17",),
                        ("pynq", "0.0.2"): ("1x16_i8w8a32_15_15_18_17",)}


def availability(cfg: HwConfig) -> str:
    """Whether a bitstream for ``cfg`` exists anywhere a user can get it, and if not, what to do instead."""
    if cfg.bitstream in PUBLISHED_BITSTREAMS.get((cfg.TARGET, cfg.HW_VER), ()):
        return (f"published by VTA: uwsampl/vta-distro bitstreams/{cfg.TARGET}/{cfg.HW_VER}/{cfg.bitstream}.bit "
                f"(capability set {cfg.CAPABILITIES})")
    if cfg.TARGET not in HLS_TARGETS:
        return f"none: TARGET {cfg.TARGET!r} is not a Pynq-style board (simulate it, or pick --config pynq)"
    return (f"none published: VTA's distro has bitstreams for pynq 0.0.1/0.0.2 "
            f"(1x16_i8w8a32_15_15_18_17) only, not {cfg.TARGET} {cfg.HW_VER} {cfg.bitstream}. Build one with "
            f"VTA's hardware flow (hardware/xilinx, Vivado) or from this stack's RTL (vta hw vivado: scripts not yet "
            f"run on Vivado, docs/vivado.md) for this config and put it in the cache, or "
            f"simulate it (--device sim, or a simulated board: vta board serve --simulated)")


class BitstreamError(ValueError):
    """A bitstream that is missing, unreadable, or not the one the hardware config needs."""


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The bitstream cache: ``cache_dir``, else ``$VTA_CACHE_PATH``, else ``~/.vta_cache`` (as VTA)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("VTA_CACHE_PATH")
    return Path(env).expanduser() if env else Path.home() / ".vta_cache"


def bitstream_path(cfg: HwConfig, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where the cache keeps the config's bitstream: ``<cache>/<TARGET>/<HW_VER _>/<bitstream>.bit``."""
    return cache_root(cache_dir) / cfg.TARGET / cfg.HW_VER.replace(".", "_") / f"{cfg.bitstream}.bit"


def check_board_config(cfg: HwConfig) -> None:
    """Refuse configs no Pynq-style board runs (the simulator-only targets, de10nano's Chisel registers)."""
    if cfg.TARGET not in HLS_TARGETS:
        why = ("de10nano's VTA is the Chisel design with a different register interface (VCR)"
               if cfg.TARGET == "de10nano" else f"TARGET {cfg.TARGET!r} is a simulation target, not a board")
        raise BitstreamError(f"config {cfg.model}: {why}; a Pynq board runs the HLS bitstreams of TARGET "
                             f"{', '.join(HLS_TARGETS)} (e.g. --config pynq)")


def check_name(cfg: HwConfig, path: str | os.PathLike) -> None:
    """The file must be ``<cfg.bitstream>.bit``: VTA names bitstreams by the config they implement."""
    p = Path(path)
    if p.suffix != ".bit":
        raise BitstreamError(f"bitstream {p}: expected a .bit file named {cfg.bitstream}.bit")
    if p.stem != cfg.bitstream:
        raise BitstreamError(f"bitstream {p.name} does not match the hardware config {cfg.model}: a board "
                             f"running it needs {cfg.bitstream}.bit (rebuild or pick the config the "
                             f"bitstream was built for)")


# keys that change no bitstream: words, the board latency model (fitted to a board after the fact), the memory a
# board gives the runtime
NOT_IN_BITSTREAM = ("DESCRIPTION", "CALIBRATED_FOR", "BOARD_MEM_MB", *LATENCY_KEYS)


def sidecar_path(bitstream: str | os.PathLike) -> Path:
    """Where ``vta hw vivado``'s build puts the config a bitstream implements: ``<bitstream>.json`` beside it."""
    return Path(bitstream).with_suffix(".json")


def bitstream_config(path: str | os.PathLike) -> HwConfig | None:
    """The config the bitstream at ``path`` implements, from its sidecar JSON; None without one (VTA's own
    bitstreams have none). A sidecar that is not such a file is a BitstreamError."""
    side = sidecar_path(path)
    if not side.is_file():
        return None
    try:
        data = json.loads(side.read_text())
        return config_from_dict(data["config"])
    except (OSError, ValueError, KeyError, TypeError, ConfigError) as e:
        raise BitstreamError(f"{side}: not the config JSON `vta hw vivado` writes beside a bitstream ({e})") from None


def hardware_differences(built: HwConfig, wanted: HwConfig) -> list[str]:
    """The keys in which two configs ask for different hardware, as ``KEY built vs wanted``."""
    a, b = built.to_dict(), wanted.to_dict()
    out = []
    for key in a:
        if key in NOT_IN_BITSTREAM:
            continue
        x, y = a[key], b.get(key)
        if key == "CLOCK_MHZ" and float(x) == float(y):
            continue
        if x != y:
            show = (lambda v: f"0x{v:08X}") if key in ("MMIO_BASE", "MMIO_RANGE") else repr
            out.append(f"{key} {show(x)} vs {show(y)}")
    return out


def check_config(cfg: HwConfig, path: str | os.PathLike) -> None:
    """Refuse a bitstream whose sidecar says it implements another config than ``cfg``, naming both."""
    built = bitstream_config(path)
    if built is None:
        return
    diff = hardware_differences(built, cfg)
    if diff:
        raise BitstreamError(
            f"bitstream {Path(path).name} implements {built.name} (its {sidecar_path(path).name}), not {cfg.name}, "
            f"the config in use: {'; '.join(diff)} (the bitstream's vs the config in use). Run with the bitstream's "
            f"config ({nearest_config_options(built)}) or build one for yours (vta hw vivado)")


def config_options(name: str | None, sets: list[tuple[str, object]] | None = None) -> str:
    """The command-line options that load a config as the user gave it: ``--config NAME|PATH`` (none for the
    default) and one ``--set KEY=VALUE`` per override, shell-quoted."""
    words = ["--config", str(name)] if name is not None else []
    for key, value in sets or []:
        words += ["--set", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    return shlex.join(words)


def nearest_config_options(cfg: HwConfig) -> str:
    """``--config PRESET --set KEY=VALUE ...`` that loads ``cfg``: the preset it differs least from, and the keys
    it differs in (for a message to someone who built ``cfg`` in Python, not from a command line)."""
    mine = {k: v for k, v in cfg.to_dict().items() if k != "DESCRIPTION"}
    best: tuple[int, str, list[tuple[str, object]]] | None = None
    for name in presets():
        theirs = load_config(name).to_dict()
        diff = [(k, v) for k, v in mine.items() if theirs.get(k) != v]
        if best is None or len(diff) < best[0]:
            best = (len(diff), name, diff)
    assert best is not None
    return config_options(best[1], best[2])


def find_bitstream(cfg: HwConfig, bitstream: str | os.PathLike | None = None,
                   cache_dir: str | os.PathLike | None = None, *, cli: str | None = None) -> Path:
    """The bitstream file for ``cfg``: ``bitstream`` if given, else the cache's; refused with where it looked.

    ``cli``: given by a command (``vta run``, ``vta board ...``), the options that loaded its config (see
    ``config_options``); the refusal then names the command's ``--bitstream`` flag and these options, instead of
    the Python argument and the preset nearest ``cfg``.
    """
    check_board_config(cfg)
    if bitstream is not None:
        path = Path(bitstream).expanduser()
        check_name(cfg, path)
        if not path.is_file():
            raise BitstreamError(f"bitstream {path} does not exist (or is not a file)")
        read_bit_header(path)
        check_config(cfg, path)
        return path
    path = bitstream_path(cfg, cache_dir)
    if path.is_file():
        read_bit_header(path)
        check_config(cfg, path)
        return path
    source = ("cache directory given" if cache_dir is not None else
              "$VTA_CACHE_PATH" if os.environ.get("VTA_CACHE_PATH") else "default cache ~/.vta_cache")
    how = "--bitstream PATH" if cli is not None else "bitstream=PATH"
    options = cli if cli is not None else nearest_config_options(cfg)
    if cache_dir is not None:
        options = f"{options} --cache-dir {shlex.quote(str(cache_dir))}".lstrip()
    raise BitstreamError(
        f"no bitstream for {cfg.model}: looked for {path} (the {source}, laid out as "
        f"<cache>/<TARGET>/<HW_VER>/<bitstream>.bit). Put {cfg.bitstream}.bit there or pass {how}. "
        f"Bitstream for this config: {availability(cfg)}. For the simulated board: "
        f"vta board bitstream --make-simulated {options}".rstrip())


def read_bit_header(path: str | os.PathLike) -> dict[str, object]:
    """Parse a Xilinx ``.bit`` header: design, part, date, time and the length of the configuration data."""
    p = Path(path)
    size = p.stat().st_size
    if size > MAX_BITSTREAM_BYTES:
        raise BitstreamError(f"bitstream {p}: {size} bytes is more than any Zynq bitstream "
                             f"({MAX_BITSTREAM_BYTES >> 20} MiB)")
    data = p.read_bytes()
    info: dict[str, object] = {}
    try:
        (n,) = struct.unpack(">H", data[0:2])
        off = 2 + n + 2
        while True:
            key = data[off]
            off += 1
            if key == 0x65:
                (length,) = struct.unpack(">I", data[off:off + 4])
                off += 4
                if off + length > len(data):
                    raise BitstreamError(f"bitstream {p}: header says {length} bytes of data, file has "
                                         f"{len(data) - off}")
                info["length"] = length
                info["data_offset"] = off
                break
            if key not in (0x61, 0x62, 0x63, 0x64):
                raise BitstreamError(f"bitstream {p}: unknown header field 0x{key:02x} at byte {off - 1}")
            (length,) = struct.unpack(">H", data[off:off + 2])
            off += 2
            text = data[off:off + length].rstrip(b"\x00").decode("ascii", "replace")
            off += length
            name = {0x61: "design", 0x62: "part", 0x63: "date", 0x64: "time"}[key]
            info[name] = text.split(";")[0] if key == 0x61 else text
    except (struct.error, IndexError):
        raise BitstreamError(f"bitstream {p}: not a Xilinx .bit file (truncated or malformed header)") from None
    return info


def is_placeholder(path: str | os.PathLike) -> bool:
    """Whether the file is a simulated-board placeholder (never meant for hardware)."""
    return read_bit_header(path).get("design") == PLACEHOLDER_DESIGN


def _field(key: int, text: str) -> bytes:
    raw = text.encode("ascii") + b"\x00"
    return bytes([key]) + struct.pack(">H", len(raw)) + raw


def placeholder_bytes(cfg: HwConfig) -> bytes:
    """A well-formed ``.bit`` for the simulated board: Xilinx header, a dummy word, the sync word, a note."""
    note = (f"vta-stack simulated board placeholder for {cfg.model} (HW_VER {cfg.HW_VER}); "
            f"not an FPGA configuration").encode("ascii")
    payload = b"\xff\xff\xff\xff" * 8 + b"\x00\x00\x00\xbb\x11\x22\x00\x44" + SYNC_WORD + note
    payload += b"\x00" * (-len(payload) % 4)
    header = (BIT_MAGIC + _field(0x61, f"{PLACEHOLDER_DESIGN};UserID=0XFFFFFFFF;Version=none")
              + _field(0x62, f"{cfg.TARGET}-simulated") + _field(0x63, "2026/01/01") + _field(0x64, "00:00:00"))
    return header + b"\x65" + struct.pack(">I", len(payload)) + payload


def make_placeholder(cfg: HwConfig, path: str | os.PathLike | None = None,
                     cache_dir: str | os.PathLike | None = None) -> Path:
    """Write a placeholder bitstream for ``cfg`` (default: into the cache, where ``PynqDevice`` finds it)."""
    check_board_config(cfg)
    target = Path(path) if path is not None else bitstream_path(cfg, cache_dir)
    check_name(cfg, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    data = placeholder_bytes(cfg)
    write_atomic(target, lambda f: f.write(data))   # two processes may make the same one: no shared temporary
    return target
