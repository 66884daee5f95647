"""The presets' cost table of docs/co-design.md ("What the presets cost"), from the analytic resource model.

Each row is ``vta hw estimate``'s figures for a preset on a part (the model, with the DSP fallback of a part that
has too few DSP slices and each preset's default DSP packing). The table depends on hardware/fpga/coefficients.py:
rerun this after bench/fpga_fit.py (``--write`` replaces the table in docs/co-design.md; without it, it is
printed). tests/test_fpga_estimate.py holds the table to the model.

    python bench/fpga_preset_costs.py [--write]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from _host import header, run_main

from hardware.fpga import estimate
from hw_config import load_config

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "co-design.md"
SECTION, NEXT = "### What the presets cost", "### Accuracy and cost"

# (configs, parts, how the first column describes them): configs sharing a row have the same figures
ROWS = [
    (("pynq",), ("xc7z020",), "pynq (1x16x16, capability set without ALU MUL)"),
    (("pynq",), ("xczu3eg",), "pynq"),
    (("sim",), ("xc7z020",), "sim (pynq with the whole ISA: MUL on 16 ALU lanes; not a Xilinx board: no packing)"),
    (("block32",), ("xc7z020",), "block32 (1x32x32)"),
    (("block32",), ("xczu7ev",), "block32"),
    (("ultra96",), ("xczu3eg",), "ultra96"),
    (("zcu104",), ("xczu7ev",), "zcu104"),
]


def _row(configs: tuple[str, ...], parts: tuple[str, ...], label: str) -> str:
    reports = [estimate(load_config(c), part=p) for c, p in zip(configs, parts, strict=True)]
    figures = {tuple(round(v[0], 1) for v in r.usage().values()) for r in reports}
    if len(figures) != 1:
        raise SystemExit(f"{' / '.join(configs)} on {' / '.join(parts)} differ: give them a row each")
    r = reports[0]
    u = r.usage()
    lut = f"{round(u['lut'][0]):,}" + (f" ({u['lut'][0] / u['lut'][1]:.0%})".replace("%", " %")
                                        if len(configs) == 1 and u["lut"][0] <= u["lut"][1] else "")
    bram = f"{u['bram36'][0]:g}" + (f" of {u['bram36'][1]:,}" if len(configs) == 1 else "")
    moved = r.split["gemm"].dsp * (2 if r.dsp_packing else 1)
    products = r.cfg.BATCH * r.cfg.BLOCK_IN * r.cfg.BLOCK_OUT
    dsp = f"{round(u['dsp'][0]):,}"
    if len(configs) == 1:
        dsp += f" of {u['dsp'][1]:,}"
        if moved < products:
            dsp += f" ({products - moved:,} products in LUTs)"
        elif r.dsp_packing and configs[0] == "pynq" and parts[0] == "xc7z020":
            dsp += " (2 products per DSP)"
    fits = "yes" if r.fits else "**no**"
    return f"| {label} | {' / '.join(parts)} | {lut} | {round(u['ff'][0]):,} | {bram} | {dsp} | {fits} |"


def table() -> str:
    return "\n".join(["| config | part | LUT | FF | BRAM36 | DSP | fits |", "|---|---|---|---|---|---|---|",
                      *(_row(*spec) for spec in ROWS)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"replace the table in {DOC.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    text = table()
    if not args.write:
        print(header("fpga_preset_costs.py", "the presets' cost table (analytic model)"))
        print(text)
        return 0
    doc = DOC.read_text()
    start, end = doc.index(SECTION), doc.index(NEXT)
    section = doc[start:end]
    old = re.search(r"^\| config \| part .*?(?=\n\n)", section, flags=re.DOTALL | re.MULTILINE)
    if old is None:
        raise SystemExit(f"no table under {SECTION!r} in {DOC.relative_to(ROOT)}")
    DOC.write_text(doc[:start] + section[:old.start()] + text + section[old.end():] + doc[end:])
    print(f"wrote the table in {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    run_main(main)
