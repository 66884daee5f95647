"""What a config's accelerator costs on an FPGA: LUT, FF, block RAM, DSP per module, against a part.

Two tiers, both Yosys estimates (vendor tools differ):

- ``synth``: Yosys ``synth_xilinx`` of the generated Verilog (YoWASP, from PyPI), parsed per module; a minute
  to several per config, cached in ~/.cache/vta-stack/synth;
- ``model``: an analytic model of the same (memories mapped exactly as Yosys maps them, DSPs counted, the rest
  linear per module class with coefficients fitted to Yosys by bench/fpga_fit.py); milliseconds.

``estimate(cfg, part=None, synth=False)`` gives a ``Report`` (``render(report)`` is the table ``vta hw estimate``
prints); ``PARTS`` holds the parts.
"""

from __future__ import annotations

from hardware.fpga.parts import PARTS, Part, UnknownPart, get_part, part_for_target
from hardware.fpga.report import Report, build, render
from hardware.fpga.resources import Resources

__all__ = ["PARTS", "Part", "Report", "Resources", "UnknownPart", "estimate", "get_part", "part_for_target",
           "render"]


def estimate(cfg, part: str | Part | None = None, synth: bool = False, progress=None,
             dsp_packing: bool | None = None) -> Report:
    """The resources of ``cfg``'s RTL on ``part`` (default: the config's board's part), per module: the analytic
    model, or with ``synth=True`` Yosys's synthesis (cached; minutes the first time; ``progress(text)`` hears
    how it goes). ``dsp_packing``: the generator's option (two int8 products per DSP; None: the config's default,
    on for Xilinx boards)."""
    from hw_config import HwConfig, load_config
    if not isinstance(synth, bool):      # "no" is truthy: it would start minutes of synthesis
        raise TypeError(f"synth must be True or False, not {synth!r}")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a function of one str or None, not {progress!r}")
    if dsp_packing is not None and not isinstance(dsp_packing, bool):
        raise TypeError(f"dsp_packing must be True, False or None (the config's default), not {dsp_packing!r}")
    return build(cfg if isinstance(cfg, HwConfig) else load_config(cfg), part, synth, progress, dsp_packing)
