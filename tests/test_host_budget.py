"""The host-work budget (issue #10, item 1): ``max_work`` bounds what a run makes the host do, not only the
simulated cycles, so no program hangs the host.

The hostile image is the issue's: 36 KB, one GEMM of 2^30 micro-op iterations on a 16x64x64 core, which fits
the default cycle budget (2^30) yet asks for 7 * 10^13 multiply-accumulates, hours of host CPU. It must be
refused before it executes, naming the instruction; it runs in a subprocess with a timeout, so a regression
fails instead of hanging the suite. Accounting is exact at the boundary (work == budget runs, one unit less
refuses) on both simulators, with and without compute, and the C simulator agrees with the reference on
random streams under small budgets.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_fuzz import _prepared, outcome, random_stream

from hw_config import MEM_TYPES, OPCODES, HwConfig, load_config
from simulator.core import DEFAULT_MAX_CYCLES, DEFAULT_MAX_WORK, Simulator
from simulator.errors import BudgetExceeded, CycleBudgetExceeded, SimulatorError, WorkBudgetExceeded
from simulator.image import ProgramImage, save_image
from simulator.reference import ReferenceSimulator
from vta.cli import main
from vta.isa import AluInsn, FinishInsn, GemmInsn, MemInsn, assemble

ROOT = Path(__file__).resolve().parent.parent
SIMULATORS = {"c": Simulator, "reference": ReferenceSimulator}
BIG = load_config("pynq", LOG_BATCH=4, LOG_BLOCK=6)  # 16x64x64: 65,536 MACs per micro-op iteration
UOP_ADDR = 0x10000
TIMEOUT = 120  # seconds; the refusal takes milliseconds, the regression it guards against takes hours


def gemm_image(cfg: HwConfig, n_uops: int, iter_out: int, iter_in: int) -> ProgramImage:
    """LOAD UOP of ``n_uops`` zero micro-ops (all indices 0), one GEMM over them in two loops, FINISH."""
    insns = assemble([
        MemInsn(opcode=OPCODES["LOAD"], memory_type=MEM_TYPES["UOP"], dram_base=UOP_ADDR // 4, y_size=1,
                x_size=n_uops, x_stride=n_uops),
        GemmInsn(uop_bgn=0, uop_end=n_uops, iter_out=iter_out, iter_in=iter_in),
        FinishInsn(),
    ], cfg)
    return ProgramImage(cfg, insns, segments=[(UOP_ADDR, np.zeros(4 * n_uops, dtype=np.uint8))])


def hostile_image() -> ProgramImage:
    """The issue's program: 8 x 16383 x 8192 = 1,073,676,288 iterations, just inside max_cycles = 2^30."""
    image = gemm_image(BIG, BIG.UOP_BUFF_DEPTH, 8, (1 << 14) - 1)
    iterations = 8 * ((1 << 14) - 1) * BIG.UOP_BUFF_DEPTH
    assert iterations * BIG.GEMM_II + BIG.COMPUTE_LATENCY < DEFAULT_MAX_CYCLES  # the cycle budget lets it run
    assert iterations * BIG.BATCH * BIG.BLOCK_IN * BIG.BLOCK_OUT > DEFAULT_MAX_WORK
    return image


# ---------------------------------------------------------------------------------------------------------
# the hostile image: refused before it runs, in a subprocess with a timeout

API_SCRIPT = """
import json, sys
from simulator.core import Simulator
from simulator.image import load_image
from simulator.reference import ReferenceSimulator
from simulator.replay import replay_into
image = load_image(sys.argv[1])
out = []
for cls in (Simulator, ReferenceSimulator):
    for compute in (True, False):
        try:
            replay_into(cls(image.config), image, compute=compute)
            out.append(["ok", None, ""])
        except Exception as e:
            out.append([type(e).__name__, getattr(e, "index", None), str(e)])
print(json.dumps(out))
"""


def run_python(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT,
                          check=False)


@pytest.fixture(scope="module")
def hostile_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hostile") / "hostile.npz"
    save_image(path, hostile_image(), compress=False)
    assert 32 * 1024 < path.stat().st_size < 40 * 1024  # the 36 KB image
    return path


def test_hostile_image_is_refused_through_the_api(hostile_file: Path) -> None:
    res = run_python(["-c", API_SCRIPT, str(hostile_file)], ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    outcomes = json.loads(res.stdout)
    assert len(outcomes) == 4  # C and reference, with and without compute
    for name, index, message in outcomes:
        assert (name, index) == ("WorkBudgetExceeded", 1), message
        assert message.startswith("instruction 1 (GEMM): needs 70364449210368 units of host work"), message
        assert f"max_work={DEFAULT_MAX_WORK}" in message and "raise max_work" in message
    assert len({m for _, _, m in outcomes}) == 1  # both simulators say the same thing


@pytest.mark.parametrize("timing_only", [False, True])
def test_hostile_image_is_refused_by_vta_sim_replay(hostile_file: Path, timing_only: bool) -> None:
    res = run_python(["-m", "vta", "sim", "replay", str(hostile_file), *(["--timing-only"] if timing_only else [])],
                     ROOT)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.startswith("vta: error: instruction 1 (GEMM): needs 70364449210368 units of host work")
    assert "--max-work" in res.stderr and len(res.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------------------
# the same program, smaller: refused under a small budget, runs once the budget is raised

SMALL_UOPS, SMALL_OUT, SMALL_IN = 64, 1, 2
SMALL_WORK = SMALL_UOPS * 4 + SMALL_UOPS * SMALL_OUT * SMALL_IN * BIG.BATCH * BIG.BLOCK_IN * BIG.BLOCK_OUT


@pytest.mark.parametrize("sim_name", list(SIMULATORS))
def test_scaled_down_program_runs_with_a_raised_budget(sim_name: str) -> None:
    image = gemm_image(BIG, SMALL_UOPS, SMALL_OUT, SMALL_IN)
    sim = SIMULATORS[sim_name](BIG, max_work=1 << 20)  # a simulator whose runs default to a small budget
    with pytest.raises(WorkBudgetExceeded) as info:
        sim.replay(image)
    assert info.value.index == 1 and "max_work=1048576" in str(info.value)
    assert isinstance(info.value, BudgetExceeded)
    result = sim.replay(image, max_work=1 << 24)  # raised for one run
    assert result.stats["work"] == SMALL_WORK == 8_388_864
    assert result.stats["gemm_counter"] == SMALL_UOPS * SMALL_OUT * SMALL_IN
    raised = SIMULATORS[sim_name](BIG, max_work=SMALL_WORK)  # raised for every run of the simulator
    assert raised.replay(image).stats["work"] == SMALL_WORK
    assert SIMULATORS[sim_name](BIG).replay(image).stats["work"] == SMALL_WORK  # the default is far above


def test_vta_sim_replay_max_work_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "small.npz"
    save_image(path, gemm_image(BIG, SMALL_UOPS, SMALL_OUT, SMALL_IN))
    assert main(["sim", "replay", str(path), "--max-work", str(SMALL_WORK - 1)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vta: error: instruction 1 (GEMM): needs 8388608 units of host work")
    assert f"has done 256 of its budget max_work={SMALL_WORK - 1}" in err
    assert main(["sim", "replay", str(path), "--max-work", str(SMALL_WORK), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["work"] == SMALL_WORK
    assert main(["sim", "replay", str(path), "--max-work", "0"]) == 2
    assert "max_work=0: need a positive integer" in capsys.readouterr().err
    assert main(["sim", "replay", "--help"]) == 0
    assert f"{DEFAULT_MAX_WORK:,}" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------------------
# exact accounting: every kind of instruction, the boundary, compute or not, both simulators

def mixed_program(cfg: HwConfig, base: int) -> tuple[np.ndarray, list[int], int]:
    """A program with every kind of work, STORE last to execute; returns it, each instruction's work (the
    formulas of docs/simulator.md, "Budgets", written out independently) and the STORE's DRAM address."""
    def elem(mem: str) -> int:
        return cfg.elem_bytes(mem)

    def load(mem: str, dram: int, y: int, x: int, pads=(0, 0, 0, 0), sram: int = 0, **flags) -> MemInsn:
        return MemInsn(opcode=OPCODES["LOAD"], memory_type=MEM_TYPES[mem], sram_base=sram, dram_base=dram // elem(mem),
                       y_size=y, x_size=x, x_stride=x, y_pad_0=pads[0], y_pad_1=pads[1], x_pad_0=pads[2],
                       x_pad_1=pads[3], **flags)

    lanes, macs = cfg.BATCH * cfg.BLOCK_OUT, cfg.BATCH * cfg.BLOCK_OUT * cfg.BLOCK_IN
    out_addr, uop_addr = base + 0x8000, base + 0xC000  # both zero; data below 0x8000
    insns = [
        load("INP", base, 2, 3),                                              # 0 load module
        load("WGT", base, 1, 2, push_next_dep=1),                             # 1 load module
        load("UOP", uop_addr, 1, 4),                                          # 2 (zero micro-ops)
        load("ACC", base, 2, 1, pads=(1, 0, 2, 1), sram=8),                   # 3 padded: 3 x 4 elements
        load("ACC_8BIT", base, 1, 3, sram=20),                                # 4 written as ACC elements
        GemmInsn(reset_reg=1, uop_end=2, iter_out=3, iter_in=1),              # 5
        GemmInsn(uop_end=4, iter_out=2, iter_in=3, pop_prev_dep=1),           # 6
        AluInsn(uop_end=3, iter_out=1, iter_in=2, alu_opcode=2, use_imm=1, imm=5, push_next_dep=1),  # 7
        MemInsn(opcode=OPCODES["STORE"], memory_type=MEM_TYPES["OUT"], dram_base=out_addr // elem("OUT"),
                y_size=2, x_size=2, x_stride=2, pop_prev_dep=1),             # 8 store module, waits for the ALU
        MemInsn(opcode=OPCODES["LOAD"], memory_type=MEM_TYPES["INP"]),        # 9 a NOP
        FinishInsn(),                                                         # 10
    ]
    # a reset GEMM writes zeros (lanes), except into an HLS output buffer, which gets the sum it computes (macs)
    reset = macs if cfg.capabilities.out_buffer == "hls" else lanes
    work = [6 * elem("INP"), 2 * elem("WGT"), 4 * 4, 12 * elem("ACC"), 3 * elem("ACC"), 2 * 3 * reset,
            4 * 2 * 3 * macs, 3 * 2 * lanes, 4 * elem("OUT"), 0, 0]
    return assemble(insns, cfg), work, out_addr


@pytest.mark.parametrize("compute", [True, False], ids=["compute", "timing-only"])
@pytest.mark.parametrize("preset", ["pynq", "batch4"])
@pytest.mark.parametrize("sim_name", list(SIMULATORS))
def test_budget_accounting_is_exact_at_the_boundary(sim_name: str, preset: str, compute: bool) -> None:
    cfg = load_config(preset)
    sim = SIMULATORS[sim_name](cfg)
    base = sim.alloc(0x10000)
    sim.write(base, np.arange(0x8000, dtype=np.uint8))
    prog, work, out_addr = mixed_program(cfg, base)
    total = sum(work)
    stats = sim.run(prog, compute=compute)
    assert stats.work == total
    assert sim.run(prog, compute=compute, max_work=total).work == total  # exactly the budget: runs
    nbytes = work[8]  # the STORE's bytes
    written = sim.read(out_addr, nbytes).copy()
    sim.write(out_addr, np.zeros(nbytes, dtype=np.uint8))
    with pytest.raises(WorkBudgetExceeded) as info:  # one unit less: the STORE, last to execute, is refused
        sim.run(prog, compute=compute, max_work=total - 1)
    assert info.value.index == 8
    msg = str(info.value)
    assert msg.startswith(f"instruction 8 (STORE OUT): needs {work[8]} units of host work (bytes moved)"), msg
    assert f"has done {total - work[8]} of its budget max_work={total - 1}" in msg
    assert not sim.read(out_addr, nbytes).any()  # it touched nothing
    if compute:
        assert written.any()
    with pytest.raises(WorkBudgetExceeded) as info:  # the first instruction to execute is refused alone
        sim.run(prog, compute=compute, max_work=work[0] - 1)
    assert info.value.index == 0 and "has done 0 of" in str(info.value)
    sim.run(prog, compute=compute, max_work=total)  # still usable after a refusal


@pytest.mark.parametrize("sim_name", list(SIMULATORS))
def test_gemm_and_alu_work_names_its_loops(sim_name: str) -> None:
    cfg = load_config("pynq")
    sim = SIMULATORS[sim_name](cfg)
    prog = assemble([GemmInsn(uop_end=5, iter_out=3, iter_in=7), AluInsn(uop_end=2, iter_out=4, iter_in=1,
                                                                           use_imm=1), FinishInsn()], cfg)
    with pytest.raises(WorkBudgetExceeded) as info:
        sim.run(prog, max_work=105 * 256 - 1)
    assert info.value.index == 0
    assert ("needs 26880 units of host work (105 micro-op iterations (iter_out=3 x iter_in=7 x 5 micro-ops) x "
            "256 multiply-accumulates)") in str(info.value)
    with pytest.raises(WorkBudgetExceeded) as info:
        sim.run(prog, max_work=105 * 256 + 8 * 16 - 1)
    assert info.value.index == 1
    assert "(8 micro-op iterations (iter_out=4 x iter_in=1 x 2 micro-ops) x 16 lanes)" in str(info.value)
    assert sim.run(prog, max_work=105 * 256 + 8 * 16).work == 105 * 256 + 8 * 16


@pytest.mark.parametrize("sim_name", list(SIMULATORS))
def test_the_cycle_budget_is_checked_first(sim_name: str) -> None:
    cfg = load_config("pynq")
    prog = assemble([GemmInsn(uop_end=4, iter_out=10, iter_in=10), FinishInsn()], cfg)
    with pytest.raises(CycleBudgetExceeded) as info:
        SIMULATORS[sim_name](cfg).run(prog, max_cycles=100, max_work=10)
    assert info.value.index == 0 and isinstance(info.value, BudgetExceeded)


@pytest.mark.parametrize("sim_name", list(SIMULATORS))
@pytest.mark.parametrize("value", [0, -1, 1 << 64, True, 1.5, "10", None])
def test_budget_arguments_are_checked(sim_name: str, value: object) -> None:
    cls = SIMULATORS[sim_name]
    prog = assemble([FinishInsn()], load_config("pynq"))
    for name in ("max_work", "max_cycles"):
        with pytest.raises(SimulatorError, match=f"{name}="):
            cls("pynq", **{name: value})
        if value is not None:  # None in run() means "the simulator's own budget"
            with pytest.raises(SimulatorError, match=f"{name}="):
                cls("pynq").run(prog, **{name: value})
    sim = cls("pynq", max_work=np.int64(5), max_cycles=(1 << 64) - 1)
    assert (sim.max_work, sim.max_cycles) == (5, (1 << 64) - 1)
    assert cls("pynq").max_work == DEFAULT_MAX_WORK and cls("pynq").max_cycles == DEFAULT_MAX_CYCLES


# ---------------------------------------------------------------------------------------------------------
# C and reference agree under small budgets (tests/test_fuzz.py's streams)

@pytest.mark.parametrize("preset", ["pynq", "batch4"])
def test_c_and_reference_agree_under_small_work_budgets(preset: str) -> None:
    cfg = load_config(preset)
    kinds: dict[str, int] = {}
    for seed in range(300):
        rng = np.random.default_rng([seed, 10])
        stream = random_stream(cfg, rng)
        max_work = int(rng.integers(1, 6000))
        compute = seed % 5 != 0
        ref = outcome(_prepared(ReferenceSimulator, cfg, seed), stream, compute, max_work)
        fast = outcome(_prepared(Simulator, cfg, seed), stream, compute, max_work)
        assert fast[0] == ref[0], f"seed {seed}: C {fast[0][:2]} vs reference {ref[0][:2]}"
        assert fast[1] == ref[1], f"seed {seed}: final DRAM/SRAM state differs"
        kinds[ref[0][0]] = kinds.get(ref[0][0], 0) + 1
    assert kinds.get("WorkBudgetExceeded", 0) >= 10 and kinds.get("ok", 0) >= 10, kinds
