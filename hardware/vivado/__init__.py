"""A Vivado project for a config: the IP packaging, block-design and build scripts of ``vta hw vivado``.

``write_scripts(cfg, manifest, out, board, part)`` writes everything but the core's Verilog (which the command
copies from the RTL cache into ``out/rtl``), so the scripts can be written and checked without generating it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hardware.vivado import scripts, wrapper
from hardware.vivado.boards import BOARDS, DEFAULT_BOARD, Board, choose_board
from hw_config import HwConfig
from hw_config.writing import write_text_atomic

__all__ = ["BOARDS", "DEFAULT_BOARD", "SCRIPTS", "choose_board", "sidecar", "write_scripts"]

SCRIPTS = ("package_ip.tcl", "block_design.tcl", "build.tcl")


def sidecar(cfg: HwConfig, board: Board, part: str) -> dict[str, Any]:
    """What the bitstream implements, for the board side to compare with the config it runs (``vta_config.json``,
    copied beside the ``.bit`` as ``<bitstream>.json``)."""
    return {"config": cfg.to_dict(), "name": cfg.name, "fingerprint": cfg.fingerprint,
            "board": board.name, "part": part, "written_by": "vta hw vivado"}


def write_scripts(cfg: HwConfig, manifest: dict[str, Any], out: Path, board: Board, part: str) -> list[str]:
    """Write the wrapper, the three scripts, the config sidecar and the README into ``out``; return the names."""
    fam = board.family
    files = {
        f"rtl/{wrapper.TOP}.v": wrapper.verilog(manifest, fam.axprot, fam.axcache, int(cfg.COHERENT)),
        "package_ip.tcl": scripts.package_ip(cfg, manifest, board, part),
        "block_design.tcl": scripts.block_design(cfg, board, part),
        "build.tcl": scripts.build(cfg, board, part),
        "vta_config.json": json.dumps(sidecar(cfg, board, part), indent=2) + "\n",
    }
    names = [f"rtl/{manifest['top']}.v", "rtl/manifest.json", *files, "README.md"]
    files["README.md"] = scripts.readme(cfg, board, part, names)
    (out / "rtl").mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        write_text_atomic(out / name, text)
    return names
