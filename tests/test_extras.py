"""A test's declared needs: skipped with the install hint on a developer machine, a failure under CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# xgboost made unimportable in the child, as on a machine without the tuning extra
_RUN = ("import sys; sys.modules['xgboost'] = None; import pytest; "
        "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-rs', sys.argv[1], '-k', sys.argv[2]]))")


def _pytest_without_xgboost(ci: bool, select: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-c", _RUN, str(TESTS / "test_tuners.py"), select], cwd=TESTS.parent,
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def test_a_missing_extra_skips_with_the_hint_outside_ci():
    done = _pytest_without_xgboost(False, "make_tuner_errors or load_history_counts")
    assert done.returncode == 0, done.stdout[-3000:]
    assert "1 passed, 1 skipped" in done.stdout and "vta-stack[tuning]" in done.stdout


def test_a_missing_extra_fails_under_ci():
    done = _pytest_without_xgboost(True, "make_tuner_errors or load_history_counts")
    assert done.returncode == 1, done.stdout[-3000:]
    assert "1 passed" in done.stdout and "1 error" in done.stdout   # fails in setup, before the test body
    assert "CI is set and a test need is missing: xgboost" in done.stdout
