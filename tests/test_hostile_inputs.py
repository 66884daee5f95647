"""Mutation fuzzing of everything a user (or, through a board server, the network) hands the stack: program
images, ONNX models, hardware configs and tuning logs. Each mutated input must end in success or a clean
project error, never a traceback of another type, and the run must stay under a memory ceiling.

The cases run in a child process under ``resource.setrlimit(RLIMIT_AS)`` (a bomb then fails the test with a
MemoryError instead of eating the machine) and a wall-clock timeout. Seeded, bounded in count.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from extras import need
from golden_files import GOLDEN_DIR

ROOT = Path(__file__).resolve().parents[1]
MEMORY_CEILING = 3 << 30   # address space of the child; the stack itself maps ~1 GiB before any input
CASES_PER_KIND = 120

_CHILD = r'''
import io, json, os, resource, sys, traceback, warnings, zipfile
import numpy as np
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[2]), int(sys.argv[2])))
kind, n_cases, workdir, seed_path = sys.argv[1], int(sys.argv[3]), sys.argv[4], sys.argv[5]
PROJECT = ("hw_config", "simulator", "vta", "host", "graph_pack", "tuning")
warnings.simplefilter("ignore")

def clean(exc):
    """A project error: its class is the project's, or a ValueError/OSError raised by project code itself."""
    if type(exc).__module__.split(".")[0] in PROJECT:
        return True
    if isinstance(exc, (ValueError, OSError)) and not isinstance(exc, (UnicodeError,)):
        frames = traceback.extract_tb(exc.__traceback__)
        last = frames[-1].filename if frames else ""
        return any(f"/{p}/" in last for p in PROJECT)
    return False

def mutate(data: bytes, rng) -> bytes:
    b = bytearray(data)
    for _ in range(int(rng.integers(1, 8))):
        op = int(rng.integers(0, 5))
        if op == 0 and b:      # flip bytes
            i = int(rng.integers(0, len(b))); b[i] = int(rng.integers(0, 256))
        elif op == 1 and b:    # truncate
            del b[int(rng.integers(0, len(b))):]
        elif op == 2:          # insert junk
            i = int(rng.integers(0, len(b) + 1)); b[i:i] = bytes(rng.integers(0, 256, int(rng.integers(1, 64)),
                                                                             dtype=np.uint8))
        elif op == 3 and len(b) > 8:   # large numbers where small ones were (sizes, dims, counts)
            i = int(rng.integers(0, len(b) - 8)); b[i:i + 8] = bytes([0xFF] * 7 + [0x7F])
        elif op == 4 and b:    # duplicate a slice
            i = int(rng.integers(0, len(b))); j = min(len(b), i + int(rng.integers(1, 256))); b[i:i] = b[i:j]
    return bytes(b)

seed = open(seed_path, "rb").read()
rng = np.random.default_rng(1234)
outcomes = {"ok": 0, "project error": 0}
bad = []
for case in range(n_cases):
    data = mutate(seed, rng)
    path = os.path.join(workdir, f"case{case}")
    with open(path, "wb") as f:
        f.write(data)
    try:
        if kind == "image":
            from simulator.replay import replay
            replay(path)
        elif kind == "onnx":
            from graph_pack.frontend_onnx import from_onnx
            from_onnx(path, batch=1)
        elif kind == "config":
            from hw_config import load_config
            load_config(path)
        elif kind == "log":
            from tuning.records import load_best, load_records
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                load_records(path)
                load_best(path, "pynq")
            if caught:   # bad lines are skipped with a warning, by design
                outcomes["warned"] = outcomes.get("warned", 0) + 1
                continue
        outcomes["ok"] += 1
    except Exception as e:   # noqa: BLE001 - classifying is the point
        if clean(e):
            outcomes["project error"] += 1
        else:
            bad.append(f"case {case}: {type(e).__module__}.{type(e).__name__}: {str(e)[:200]} "
                       f"at {traceback.extract_tb(e.__traceback__)[-1].filename}")
    os.unlink(path)
print(json.dumps({"outcomes": outcomes, "bad": bad[:10], "n_bad": len(bad)}))
'''


def _seed_files(tmp_path: Path) -> dict[str, Path]:
    from hw_config import load_config
    from tuning.measure import MeasureResult
    from tuning.records import RecordLog, make_record
    from tuning.task import alu_task
    seeds = {"image": GOLDEN_DIR / "gemm_1.npz", "onnx": ROOT / "tests" / "data" / "digits_cnn.onnx",
             "config": ROOT / "hw_config" / "presets" / "pynq.json"}
    task = alu_task(load_config("pynq"), "add", (1, 32, 8, 8))
    log = RecordLog(tmp_path / "seed.jsonl")
    log.append([make_record(task, MeasureResult(task.space[i], 900 - i)) for i in range(4)])
    seeds["log"] = log.path
    return seeds


@pytest.mark.parametrize("kind", ["image", "onnx", "config", "log"])
def test_mutated_inputs_end_in_success_or_a_project_error(kind, tmp_path):
    need("golden")
    if kind == "onnx":
        need("onnx")
    seed = _seed_files(tmp_path)[kind]
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_CHILD), kind, str(MEMORY_CEILING),
                           str(CASES_PER_KIND), str(work), str(seed)], capture_output=True, text=True, timeout=600,
                          check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["n_bad"] == 0, report["bad"]
    assert sum(report["outcomes"].values()) == CASES_PER_KIND
    refused = report["outcomes"]["project error"] + report["outcomes"].get("warned", 0)
    assert refused > CASES_PER_KIND // 4   # the mutations really produce bad inputs
