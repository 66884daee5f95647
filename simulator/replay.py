"""Replay of program images: map the image's DRAM, run its stream, collect the final segments."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from simulator.errors import SimulatorError
from simulator.image import ProgramImage, ReplayResult, load_image
from simulator.stats import RunStats

if TYPE_CHECKING:
    from simulator.core import Simulator


def replay_with_stats(sim: Simulator, image: ProgramImage | str | Path,
                      **run_options) -> tuple[ReplayResult, RunStats]:
    """Run ``image`` in ``sim``; its segments (and instruction area) are mapped only for the run."""
    if not isinstance(image, ProgramImage):
        image = load_image(image)
    if sim.cfg.fingerprint != image.config.fingerprint:
        raise SimulatorError(f"image is for {image.config.model} (fingerprint {image.config.fingerprint}) but this "
                             f"simulator is {sim.cfg.model} (fingerprint {sim.cfg.fingerprint}); use "
                             f"simulator.replay(image) to get a simulator of the image's config")
    mapped: list[int] = []
    try:
        for addr, data in image.segments:
            sim.map(addr, data)
            mapped.append(addr)
        if image.insn_addr:
            sim.map(image.insn_addr, image.insns)
            mapped.append(image.insn_addr)
        stats = sim.run(image.insns, **run_options)
        segments = [(addr, sim.read(addr, data.size)) for addr, data in image.segments]
    finally:
        for addr in mapped:
            sim.free(addr)
    return ReplayResult(segments=segments, stats=stats.to_dict()), stats


def replay_into(sim: Simulator, image: ProgramImage | str | Path, **run_options) -> ReplayResult:
    """Run ``image`` in ``sim`` and return the final segments with the stats."""
    return replay_with_stats(sim, image, **run_options)[0]


def replay(image: ProgramImage | str | Path, **run_options) -> ReplayResult:
    """Run an image on a fresh simulator of its own config (platform defaults from its TARGET)."""
    from simulator.core import Simulator

    if not isinstance(image, ProgramImage):
        image = load_image(image)
    return replay_into(Simulator(image.config), image, **run_options)
