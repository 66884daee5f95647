"""Builds, once per config, the Verilator model of the generated RTL and its C++ harness into a shared
library, in the cache: ~/.cache/vta-stack/rtl/<config's hardware fingerprint>/<build key>/ (the key adds the capability
set, the register spacing and a hash of the generator's and the harness's sources, so any change rebuilds).

Every step is a function; a build holds a file lock, so concurrent processes build a config once, and a
finished build is marked by its library's presence (written last, by rename)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hardware.generator import DEFAULT_MAX_PRODUCTS, TOP, build_key, check_core_size, generate, manifest
from hardware.toolchain import (
    RTL_CACHE_VARIABLE,
    cache_root,
    locked_dir,
    verilator_command,
    verilator_root,
)
from hw_config import HwConfig
from hw_config.writing import write_text_atomic

HARNESS = Path(__file__).resolve().parent / "csrc" / "harness.cpp"
LIBRARY = "libvta_rtl.so"


class BuildError(ChildProcessError):
    """Verilator or the C++ compiler failed; the message holds the end of its output. (An OSError, as the failure
    of a tool this machine runs: a command line reports it in one message, as it does a file it cannot write.)"""


def build_dir(cfg: HwConfig, dsp_packing: bool | None = None) -> Path:
    """The cache entry of ``cfg``'s RTL built with the generator's options (``dsp_packing``: None = default)."""
    return cache_root() / cfg.hardware_fingerprint / build_key(cfg, dsp_packing)


def _run(cmd: list[str], env: dict[str, str] | None, what: str, log: Path) -> None:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    log.write_text(f"$ {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}")
    if proc.returncode:
        tail = (proc.stderr or proc.stdout).strip()[-3000:]
        raise BuildError(f"{what} failed (exit {proc.returncode}); full log in {log}:\n{tail}")


def write_manifest(cfg: HwConfig, directory: Path, dsp_packing: bool | None = None) -> Path:
    """``directory/manifest.json``: what the generated design is for ``cfg`` (hardware.generator.manifest), written
    whole by rename."""
    path = directory / "manifest.json"
    write_text_atomic(path, json.dumps(manifest(cfg, dsp_packing), indent=2) + "\n")
    return path


def write_verilog(cfg: HwConfig, directory: Path, max_products: int = DEFAULT_MAX_PRODUCTS,
                  dsp_packing: bool | None = None) -> tuple[Path, float]:
    """The generated Verilog and manifest in ``directory`` (``build_dir(cfg, dsp_packing)``); returns the Verilog's
    path and seconds taken. A config not yet generated whose core is larger than ``max_products`` is refused first
    (check_core_size)."""
    path = directory / f"{TOP}.v"
    if path.is_file():
        return path, 0.0
    t0 = time.perf_counter()
    text = generate(cfg, max_products, dsp_packing)   # refuses a core past max_products first
    # each file whole, by rename, the Verilog (the mark of a finished entry) last: `vta hw generate`, `vta hw
    # estimate --synth` and a build may write one entry at the same time
    write_manifest(cfg, directory, dsp_packing)
    write_text_atomic(path, text)
    return path, time.perf_counter() - t0


def verilate(cfg: HwConfig, verilog: Path, directory: Path, jobs: int = 2, cflags: tuple[str, ...] = ()) -> Path:
    """Verilator's C++ model, compiled to static libraries in ``directory/obj`` (``cflags``: the profile-guided
    build's, ``profile_guided``)."""
    obj = directory / "obj"
    cmd, env = verilator_command()
    _run(cmd + ["--cc", str(verilog), "--top-module", TOP, "--prefix", "Vvta_core", "--Mdir", str(obj),
                "-Wno-fatal", "-Wno-lint", "-Wno-style", "--x-assign", "fast", "--x-initial", "0",
                "-O3", "--build", "-j", str(jobs), "-CFLAGS", " ".join(("-fPIC", *cflags)),
                # the PyPI package's verilated.mk leaves the precompiled-header include flag empty
                "-MAKEFLAGS", "CFG_CXXFLAGS_PCH_I=-include",
                # the model's code at -O3 instead of verilated.mk's -Os: -O2 gave ~20% more cycles per second than
                # -Os (ResNet-18 112x112 on pynq, bench/rtl.py's machine), -O3 another ~16% less CPU time than -O2
                # (pynq at COMPUTE_LATENCY 9, ResNet-18 56x56, medians of 5 alternating runs; docs/benchmarks.md)
                "-MAKEFLAGS", "OPT_FAST=-O3"],
         env, "verilator", directory / "verilator.log")
    return obj


def link(cfg: HwConfig, obj: Path, directory: Path, flags: tuple[str, ...] = (), name: str = LIBRARY) -> Path:
    """The harness and the model linked into one shared library ``directory/name`` (written atomically;
    ``flags``: the instrumented build's)."""
    root = verilator_root()
    out = directory / name
    tmp = directory / (name + ".tmp")
    cxx = os.environ.get("CXX", "g++")
    _run([cxx, "-shared", "-fPIC", "-O2", "-std=c++17", *flags, f"-DVTA_BUS_BYTES={cfg.BUS_BYTES}",
          f"-DVTA_MMIO_RANGE={cfg.MMIO_RANGE}", f"-I{obj}", f"-I{root / 'include'}", f"-I{root / 'include' / 'vltstd'}",
          str(HARNESS), str(obj / "Vvta_core__ALL.a"), str(obj / "libverilated.a"), "-o", str(tmp),
          "-lpthread", "-latomic"], None, "linking the harness", directory / f"link{'-' + name if flags else ''}.log")
    os.replace(tmp, out)
    return out


# The profile-guided build (VTA_RTL_PGO=1; GCC's -fprofile-generate, a training run, -fprofile-use): the model
# compiled once instrumented, run on hardware/training.py's fixed program, compiled again with the counts. Off by
# default: it doubles the compile, and on ResNet-18's accelerator part (pynq, COMPUTE_LATENCY 9) it took 0.89-1.04x
# the plain build's CPU round by round at 56x56 and 0.99x at 224x224, within this machine's noise (docs/
# benchmarks.md, "Profile-guided build"; trained on tiles that never overlapped it was 1.17x). The program and its
# data are fixed and the model is single-threaded, so the counts (and the library) are the same at every build.
# It needs GCC 10 or newer (clang's profiles need llvm-profdata); the cache key does not say whether a build had it.
PGO_VARIABLE = "VTA_RTL_PGO"
PROFILE_GENERATE = ("-fprofile-generate",)
PROFILE_USE = ("-fprofile-use", "-fprofile-partial-training", "-Wno-missing-profile")
TRAINING_LIBRARY = "libvta_rtl_training.so"


def profile_guided() -> bool:
    """Whether builds are profile-guided: with VTA_RTL_PGO=1, when the C++ compiler Verilator's make and the link
    use is GCC 10 or newer (-fprofile-partial-training)."""
    if os.environ.get(PGO_VARIABLE, "0") != "1":
        return False
    cxx = os.environ.get("CXX", "c++")
    try:
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout
        major = subprocess.run([cxx, "-dumpversion"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return False
    gcc = "Free Software Foundation" in version and "clang" not in version
    return gcc and major.split(".")[0].strip().isdigit() and int(major.split(".")[0]) >= 10


def train(cfg: HwConfig, library: Path, directory: Path) -> None:
    """Run the training program on the instrumented ``library`` in a process of its own (its counts, .gcda files
    beside the objects, are written when it exits)."""
    config = directory / "training-config.json"
    config.write_text(cfg.to_json())
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))}
    _run([sys.executable, "-m", "hardware.training", str(library), str(config)], env, "the profile's training run",
         directory / "training.log")


def build_model(cfg: HwConfig, verilog: Path, directory: Path, say: Callable[[str], None]) -> Path:
    """The model compiled and linked with the harness into ``directory/LIBRARY``: profile-guided when
    ``profile_guided()`` (compiled twice around a training run), else once."""
    if not profile_guided():
        return link(cfg, verilate(cfg, verilog, directory), directory)
    obj = verilate(cfg, verilog, directory, cflags=PROFILE_GENERATE)
    instrumented = link(cfg, obj, directory, flags=PROFILE_GENERATE, name=TRAINING_LIBRARY)
    say("  compiled with profile instrumentation; training it (hardware/training.py) ...")
    train(cfg, instrumented, directory)
    say("  compiling again with the profile ...")
    for leftover in [*obj.glob("*.o"), *obj.glob("*.a"), *obj.glob("*.gch"), instrumented,
                     *directory.glob("*.gcda")]:
        leftover.unlink()   # the counts (obj/*.gcda) stay for the second compile
    return link(cfg, verilate(cfg, verilog, directory, cflags=PROFILE_USE), directory)


# What the steps took for the pynq preset's 1x16x16 core on two cores (generate 12.8 s, verilate 21.5 s); a larger
# core takes about sqrt(products / 256) times as long (65,536 products took 4 min to generate)
TYPICAL_SECONDS = {"generate": 13.0, "verilate": 22.0}


def estimate_seconds(cfg: HwConfig, step: str) -> float:
    """Roughly how long ``step`` ("generate" or "verilate", with the link) of ``cfg``'s build takes (a
    profile-guided build compiles twice)."""
    products = cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT
    twice = 2.0 if step == "verilate" and profile_guided() else 1.0
    return twice * TYPICAL_SECONDS[step] * max(1.0, products / 256) ** 0.5


def _about(seconds: float) -> str:
    """"about N s" on an idle machine, scaled by how busy this one is: the steps are CPU-bound, so a load of 6 on
    2 CPUs makes them about 3 times as long (a new user's 'about 22 s' took 58 s under load)."""
    try:
        busy = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:   # no load average on this system
        busy = 0.0
    scaled = seconds * max(1.0, busy)
    about = f"about {scaled:.0f} s" if scaled < 90 else f"about {scaled / 60:.0f} min"
    return about + (f" (this machine is busy: load {busy * (os.cpu_count() or 1):.1f} on {os.cpu_count()} CPUs)"
                    if busy > 1.25 else "")


HEARTBEAT_SECONDS = 15.0   # a long step says it is still at work this often


@contextmanager
def heartbeat(say: Callable[[str], None], what: str, every: float = HEARTBEAT_SECONDS) -> Iterator[None]:
    """While the body runs, ``say`` "still <what> (N s)" every ``every`` seconds: a minute of silence reads as a
    hang."""
    stop, t0 = threading.Event(), time.perf_counter()

    def beat() -> None:
        while not stop.wait(every):
            say(f"  ... still {what} ({time.perf_counter() - t0:.0f} s)")

    thread = threading.Thread(target=beat, name="rtl-build-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def generate_announced(cfg: HwConfig, directory: Path, say: Callable[[str], None],
                       max_products: int = DEFAULT_MAX_PRODUCTS, dsp_packing: bool | None = None
                       ) -> tuple[Path, float]:
    """``write_verilog``, announced with its rough time and a heartbeat when it has to generate (the cache's copy
    is taken without a word)."""
    if (directory / f"{TOP}.v").is_file():
        return write_verilog(cfg, directory, max_products, dsp_packing)
    say(f"generating {TOP}.v (Amaranth, Yosys), {_about(estimate_seconds(cfg, 'generate'))} ...")
    with heartbeat(say, f"generating {TOP}.v"):
        return write_verilog(cfg, directory, max_products, dsp_packing)


def ensure_built(cfg: HwConfig, progress=None, max_products: int = DEFAULT_MAX_PRODUCTS,
                 dsp_packing: bool | None = None) -> Path:
    """The shared library for ``cfg`` (with the generator's ``dsp_packing``; None: the config's default), building
    it first if the cache lacks it (a core of more than ``max_products`` int8 products is refused first:
    check_core_size). ``progress(text)`` (optional) hears each
    step before it starts (what, for which config, roughly how long) and its time when done; a library found in
    the cache is returned without a word."""
    directory = build_dir(cfg, dsp_packing)
    lib = directory / LIBRARY
    if lib.is_file():
        return lib
    if len(str(directory).split()) != 1:   # verilated.mk's own check: $(words $(CURDIR))
        raise ValueError(f"the RTL cache {cache_root()} has a space in its path, where Verilator's build (GNU Make) "
                         f"cannot run; set {RTL_CACHE_VARIABLE} to a directory without one")
    if not (directory / f"{TOP}.v").is_file():
        check_core_size(cfg, max_products)
    say = progress or (lambda text: None)
    with locked_dir(directory, RTL_CACHE_VARIABLE, say):
        if lib.is_file():
            return lib
        t0 = time.perf_counter()
        say(f"building the RTL model of {cfg.model}, once per config (cached in {directory}; "
            f"{RTL_CACHE_VARIABLE} moves the cache)")
        verilog, took = generate_announced(cfg, directory, say, max_products, dsp_packing)
        say(f"generated {verilog.name} in {took:.1f} s" if took else f"{verilog.name} already generated")
        say(f"verilating {verilog.name} and compiling its C++ model (Verilator), "
            f"{_about(estimate_seconds(cfg, 'verilate'))} ...")
        t1 = time.perf_counter()
        # objects left by a build that was killed are not reused: make takes a truncated one, newer than its
        # source, for done, and the library linked from it fails to load (an undefined symbol) from then on
        shutil.rmtree(directory / "obj", ignore_errors=True)
        with heartbeat(say, "verilating and compiling"):
            build_model(cfg, verilog, directory, say)
            say(f"verilated in {time.perf_counter() - t1:.1f} s")
        shutil.rmtree(directory / "obj", ignore_errors=True)   # ~140 MB of objects the library no longer needs
        timings = {"generate_s": round(took, 2), "total_s": round(time.perf_counter() - t0, 2)}
        (directory / "build.json").write_text(json.dumps(timings) + "\n")
        say(f"built {lib} in {time.perf_counter() - t0:.1f} s")
    return lib


def main(argv: list[str] | None = None) -> int:
    """``python -m hardware.build [CONFIG]`` (what ``vta hw build --config CONFIG`` does): build or find a
    config's library and print its path; a bad config or a missing toolchain is a one-line error (exit 2)."""
    import argparse

    from hw_config import ConfigError, load_config

    parser = argparse.ArgumentParser(prog="python -m hardware.build", description="Build (or find in the cache) the "
                                     "Verilator model of a config's RTL, ahead of its first --device rtl run; print "
                                     "the library's path. The same as `vta hw build --config CONFIG`.")
    parser.add_argument("config", nargs="?", default=None, metavar="CONFIG",
                        help="hardware preset or JSON file (default: pynq)")
    parser.add_argument("--max-products", type=int, default=DEFAULT_MAX_PRODUCTS, metavar="N",
                        help=f"refuse a GEMM core of more than N int8 products (default {DEFAULT_MAX_PRODUCTS:,})")
    args = parser.parse_args(argv)
    try:
        print(ensure_built(load_config(args.config), progress=print, max_products=args.max_products))
    except (ConfigError, ImportError, BuildError, OSError, ValueError) as e:   # ValueError: a core or cache refused
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
