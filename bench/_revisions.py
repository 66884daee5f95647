"""Other revisions of this repository checked out beside it, for benchmarks that compare them in one run.

``checkouts(revs)`` yields ``{rev: path}`` plus ``"now": the checkout running the script``: each revision in a
temporary git worktree with its C simulator built in place, removed on exit, on Ctrl-C and on SIGTERM (a timeout,
CI); a run killed harder leaves a registration the next run prunes (``git worktree prune``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str) -> None:
    subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, check=False)


def worktree_of(rev: str, path: Path) -> Path:
    """``rev`` checked out in a git worktree at ``path``, its C simulator built in place."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev], check=True,
                   capture_output=True)
    subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=path, check=True,
                   capture_output=True)
    return path


def _terminated(signum: int, _frame) -> None:
    """SIGTERM as an exit, so that the worktrees are removed (``finally``)."""
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def checkouts(revs: list[str]) -> Iterator[dict[str, Path]]:
    """``{rev: worktree}`` for each of ``revs`` and ``{"now": ROOT}``, removed when the block ends."""
    previous = signal.signal(signal.SIGTERM, _terminated)
    _git("worktree", "prune")   # registrations of worktrees an earlier run could not remove (SIGKILL)
    paths: dict[str, Path] = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for rev in revs:
                paths[rev] = Path(tmp) / rev.replace("/", "_")   # before `git worktree add`: an exit during it removes it
                try:
                    worktree_of(rev, paths[rev])
                except subprocess.CalledProcessError as e:
                    raise SystemExit(f"cannot check out and build {rev}: {(e.stderr or b'').decode()[-400:]}")
            yield {**paths, "now": ROOT}
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)   # a second SIGTERM does not stop the cleanup
            for path in paths.values():
                _git("worktree", "remove", "--force", str(path))
                shutil.rmtree(path, ignore_errors=True)   # one `git worktree add` left half made
            _git("worktree", "prune")
            signal.signal(signal.SIGTERM, previous)


def run_in(checkout: Path, module: str, call: str, env: dict[str, str] | None = None) -> dict:
    """``module.call`` (a bench script of this checkout, e.g. ``"measure(7)"``) in a subprocess importing the
    packages of ``checkout`` (its directory first on the path): its JSON answer, which must carry ``vta``'s path
    (checked to be ``checkout``'s, so a side never measures another's code)."""
    here = str(Path(__file__).parent)   # on the path only while the script is imported: bench/tuning.py would
    code = (f"import sys, json; sys.path.insert(0, {here!r}); import {module}; sys.path.remove({here!r}); "
            f"print(json.dumps({module}.{call}))")   # shadow the tuning package
    done = subprocess.run([sys.executable, "-c", code], cwd=checkout, capture_output=True, text=True, check=False,
                          env={**os.environ, **(env or {}), "PYTHONPATH": str(checkout)})
    if done.returncode:
        raise SystemExit(f"measuring {checkout} failed:\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not Path(result["vta"]).resolve().is_relative_to(checkout.resolve()):
        raise SystemExit(f"measuring {checkout} imported vta from {result['vta']}")
    return result
