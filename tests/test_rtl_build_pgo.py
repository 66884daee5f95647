"""The profile-guided build of the RTL model (hardware/build.py): its training program is a valid VTA program that
runs to FINISH on the RTL and leaves the C simulator's DRAM there (so the profile is of real work, and a build cannot
hang on it), and the build is profile-guided only when asked (VTA_RTL_PGO=1) and where GCC's profiles can be used."""

from __future__ import annotations

import numpy as np
import pytest
from test_hardware_rtl import device

from hardware.build import PGO_VARIABLE, profile_guided
from hardware.training import training_program
from simulator.image import ProgramImage
from simulator.replay import replay


@pytest.mark.slow
def test_the_training_program_leaves_the_c_simulators_dram_on_the_rtl():
    dev = device("pynq")
    segments, insns, insn_addr = training_program(dev.cfg)
    image = ProgramImage(config=dev.cfg, insns=insns, insn_addr=insn_addr, segments=segments)
    model = replay(image)
    opcodes = set(dev.cfg.insn_formats["mem"].decode_rows(insns)["opcode"].tolist())
    assert opcodes == {0, 1, 2, 3, 4}, "LOAD, STORE, GEMM, FINISH and ALU all trained"
    dev.reprogram()
    got, cycles = dev.replay(image)
    for (addr, want), (_, rtl) in zip(model.segments, got, strict=True):
        np.testing.assert_array_equal(rtl, want, err_msg=f"segment 0x{addr:x}")
    assert np.any(model.segments[-1][1]), "the store wrote the tile"
    assert abs(cycles / model.stats["cycles"] - 1) <= 0.05


def test_the_build_is_profile_guided_only_when_asked_and_with_gcc(monkeypatch, tmp_path):
    """Off by default (it doubles the compile for a gain within the noise, docs/benchmarks.md); VTA_RTL_PGO=1 asks
    for it, which a compiler other than GCC (or none) turns down."""
    import shutil
    import subprocess

    monkeypatch.delenv(PGO_VARIABLE, raising=False)
    monkeypatch.delenv("CXX", raising=False)
    assert not profile_guided()
    monkeypatch.setenv(PGO_VARIABLE, "1")
    gcc = shutil.which("c++") and "Free Software Foundation" in subprocess.run(
        ["c++", "--version"], capture_output=True, text=True, check=False).stdout
    assert profile_guided() == bool(gcc)
    monkeypatch.setenv(PGO_VARIABLE, "0")
    assert not profile_guided()
    monkeypatch.setenv(PGO_VARIABLE, "1")
    clang = tmp_path / "clang++"
    clang.write_text("#!/bin/sh\necho 'clang version 17.0.0'\n")
    clang.chmod(0o755)
    monkeypatch.setenv("CXX", str(clang))
    assert not profile_guided()
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    assert not profile_guided()


def test_a_profile_guided_build_compiles_trains_and_compiles_again_with_the_counts(tmp_path, monkeypatch):
    """The sequence, with Verilator, the link and the training run stood in for: an instrumented compile and link,
    the training run on that library, then a compile with the counts in the same object directory (GCC finds each
    object's .gcda by its path) from which the stale objects and the instrumented library are gone, and the final
    library; the objects are removed after, as for a plain build."""
    from hardware import build
    from hw_config import load_config

    monkeypatch.setenv("VTA_RTL_CACHE", str(tmp_path / "rtl"))
    monkeypatch.delenv(build.PGO_VARIABLE, raising=False)
    monkeypatch.setattr(build, "profile_guided", lambda: True)
    monkeypatch.setattr(build, "generate", lambda cfg, max_products=0, dsp_packing=None: "module vta_core; endmodule")
    monkeypatch.setattr(build, "manifest", lambda cfg, dsp_packing=None: {"top": "vta_core"})
    steps: list[tuple] = []

    def verilate(cfg, verilog, directory, cflags=()):
        obj = directory / "obj"
        steps.append(("verilate", cflags, sorted(p.name for p in obj.glob("*")) if obj.exists() else []))
        obj.mkdir(exist_ok=True)
        (obj / "model.o").write_text("o")
        (obj / "Vvta_core__ALL.a").write_text("a")
        return obj

    def link(cfg, obj, directory, flags=(), name=build.LIBRARY):
        steps.append(("link", flags, name))
        (directory / name).write_text("so")
        return directory / name

    def train(cfg, library, directory):
        steps.append(("train", library.name))
        (directory / "obj" / "model.gcda").write_text("counts")
        (directory / "libvta_rtl_training.so.tmp-harness.gcda").write_text("harness counts")

    monkeypatch.setattr(build, "verilate", verilate)
    monkeypatch.setattr(build, "link", link)
    monkeypatch.setattr(build, "train", train)
    cfg = load_config("pynq")
    lib = build.ensure_built(cfg)
    assert steps == [("verilate", build.PROFILE_GENERATE, []),
                     ("link", build.PROFILE_GENERATE, build.TRAINING_LIBRARY),
                     ("train", build.TRAINING_LIBRARY),
                     ("verilate", build.PROFILE_USE, ["model.gcda"]),
                     ("link", (), build.LIBRARY)]
    assert lib == build.build_dir(cfg) / build.LIBRARY and lib.read_text() == "so"
    assert sorted(p.name for p in lib.parent.iterdir() if p.suffix in (".so", ".gcda") or p.is_dir()) == [build.LIBRARY]
