"""Where VTA's golden programs live (shared/golden beside the repository), for every test that uses them."""

from __future__ import annotations

from pathlib import Path

from extras import need, needs

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "shared" / "golden"
SKIP_REASON = f"golden programs not found at {GOLDEN_DIR} (they live next to the repository, in shared/golden)"
requires_golden = needs("golden")


def golden_path(name: str) -> Path:
    """The path of a golden file; skips the calling test (fails it under CI) when the programs are absent."""
    need("golden")
    path = GOLDEN_DIR / name
    if not path.exists():
        raise FileNotFoundError(f"golden program {name} is not in {GOLDEN_DIR}")
    return path
