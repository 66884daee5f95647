"""The families table of docs/networks.md and docs/benchmarks.md (written by bench/families.py) lists every model
file of tests/data/onnx, so a family added there cannot be left out of the measured table. Reads files only."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "data" / "onnx"
BEGIN, END = "<!-- families table -->", "<!-- /families table -->"


def table_families(doc: Path) -> set[str]:
    """The model names in the first column of ``doc``'s families table (a "(dense quantized)" row names its model)."""
    text = doc.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, f"{doc.name}: one {BEGIN} ... {END} pair expected"
    rows = text.split(BEGIN, 1)[1].split(END, 1)[0].splitlines()
    cells = [row.split("|")[1].strip() for row in rows if row.startswith("| ") and not row.startswith("| family")]
    return {cell.split(" (")[0] for cell in cells}


def family_files() -> set[str]:
    """Every model of tests/data/onnx, its TorchScript export (``_ts17``) counted as the family's."""
    return {p.stem.removesuffix("_ts17") for p in MODELS.glob("*.onnx")}


@pytest.mark.parametrize("doc", ["networks.md", "benchmarks.md"])
def test_the_families_table_lists_every_model_file(doc: str) -> None:
    files, listed = family_files(), table_families(ROOT / "docs" / doc)
    assert len(files) >= 14
    assert files == listed, f"not in docs/{doc}'s table: {sorted(files - listed)}; not a model file: " \
                            f"{sorted(listed - files)} (rerun python bench/families.py --write)"
