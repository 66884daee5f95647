"""Install this checkout into a directory of its own with another venv's pip (--no-deps: that venv's packages are
the dependencies), as a user of that environment would get it: tests/test_py310.py (a Pynq board's Python) and
tests/test_onnx_newest.py (the newest onnx and protobuf) run the code there."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("hw_config", "simulator", "vta", "host", "graph_pack", "tuning")
TOP_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md")


def copy_checkout(dst: Path) -> Path:
    """The files an install reads, without build products (the checkout's own simulator build is not used)."""
    dst.mkdir()
    for name in TOP_FILES:
        shutil.copy2(ROOT / name, dst / name)
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc", "_vta_sim.c")
    for name in PACKAGES:
        shutil.copytree(ROOT / name, dst / name, ignore=skip)
    return dst


def install_checkout(python: str, tmp: Path) -> Path:
    """The checkout installed with ``python``'s pip into ``tmp``/site (its C simulator compiled there); the site."""
    src, site = copy_checkout(tmp / "src"), tmp / "site"
    cmd = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
           "--target", str(site), str(src)]
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_ROOT_USER_ACTION": "ignore"}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False, env=env)
    assert res.returncode == 0, f"{' '.join(cmd)}: exit {res.returncode}\n{res.stdout}{res.stderr}"
    return site
