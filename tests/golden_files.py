"""Where VTA's golden programs live (shared/golden beside the repository), for every test that uses them."""

from __future__ import annotations

from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "shared" / "golden"
SKIP_REASON = f"golden programs not found at {GOLDEN_DIR} (they live next to the repository, in shared/golden)"
requires_golden = pytest.mark.skipif(not GOLDEN_DIR.is_dir(), reason=SKIP_REASON)


def golden_path(name: str) -> Path:
    """The path of a golden file; skips the calling test when it is not there."""
    path = GOLDEN_DIR / name
    if not path.exists():
        pytest.skip(SKIP_REASON)
    return path
