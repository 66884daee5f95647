"""The core on a Pynq-Z1/Z2 board's Python: 3.10, the PYNQ v3 image's numpy 1.21.5 and cffi 1.15.0, no llvmlite
(the venv of .ci/py310-venv.sh). The checkout is installed into a directory of its own with that venv's pip, as
on a board (--no-deps: the image's numpy and cffi are the dependencies; the C simulator compiles with cffi 1.15),
and tests/board_python_smoke.py runs there: a conv2d on the simulator against numpy, its program image replayed
by the CLI, ResNet-18 with every host layer on the numpy kernels and one notice saying so, and the board path's
imports.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from checkout_install import ROOT, install_checkout
from extras import need, needs

BOARD = {"numpy": "1.21.5", "cffi": "1.15.0"}   # Ubuntu 22.04's python3-numpy and python3-cffi (docs/deploy.md)

pytestmark = needs("py310-venv", "cc")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """(the venv's python, the directory the checkout is installed into)."""
    python = need("py310-venv")
    site = install_checkout(python, tmp_path_factory.mktemp("py310"))
    return python, site


def test_metadata_installs_on_the_board(installed: tuple[str, Path]) -> None:
    """Python 3.10 is allowed; on armv7l the core asks for nothing the image lacks (no llvmlite, whose
    absence would make pip try to build it) and accepts the image's numpy and cffi."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    _, site = installed
    (meta,) = site.glob("vta_stack-*.dist-info/METADATA")
    text = meta.read_text()
    requires_python = re.search(r"^Requires-Python: (.+)$", text, re.MULTILINE).group(1)
    assert SpecifierSet(requires_python).contains("3.10.12")
    reqs = [Requirement(line) for line in re.findall(r"^Requires-Dist: (.+)$", text, re.MULTILINE)]
    board = {"platform_machine": "armv7l", "python_version": "3.10", "extra": ""}
    core = {r.name: r for r in reqs if r.marker is None or r.marker.evaluate(board)}
    assert set(core) == set(BOARD), f"on a board the core would need {sorted(core)}"
    for name, version in BOARD.items():
        assert core[name].specifier.contains(version), f"{core[name]} refuses the image's {name} {version}"
    workstation = {**board, "platform_machine": "x86_64"}
    assert any(r.name == "llvmlite" and r.marker.evaluate(workstation) for r in reqs), "llvmlite left the core"


def test_core_and_board_path_run_on_the_boards_python(installed: tuple[str, Path], tmp_path: Path) -> None:
    python, site = installed
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VTA_SIM_"))}
    env["PYTHONPATH"] = str(site)
    cmd = [python, str(ROOT / "tests" / "board_python_smoke.py"), str(tmp_path / "work")]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False, env=env, cwd=tmp_path)
    report = f"{' '.join(cmd)}: exit {res.returncode}\n--- stdout\n{res.stdout}\n--- stderr\n{res.stderr[-6000:]}"
    print(res.stdout)
    assert res.returncode == 0, report
    assert re.search(r"^python 3\.10\.\d+, numpy 1\.21\.5, cffi 1\.15\.0$", res.stdout, re.MULTILINE), report
    assert f"package: {site}" in res.stdout, report   # the installed copy ran, not the checkout
    assert re.search(r"^board-python: [1-9]\d* passed, 0 failed$", res.stdout, re.MULTILINE), report
    # the host layers' fallback said so once, on stderr (the warning's text, and the line that built)
    notices = [line for line in res.stderr.splitlines() if "JitUnavailableWarning" in line]
    assert len(notices) == 1 and "numpy kernels" in notices[0], report
