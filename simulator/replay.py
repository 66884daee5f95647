"""Replay of program images: map the image's DRAM, run its stream, collect the final segments."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from simulator.errors import MemoryAccessError, SimulatorError
from simulator.image import ImageLimits, ProgramImage, ReplayResult, load_image
from simulator.stats import RunStats
from simulator.trace import DEFAULT_MAX_TRACE_EVENTS, check_trace_events

if TYPE_CHECKING:
    from simulator.core import Simulator


def _loaded(image: ProgramImage | str | Path, limits: ImageLimits | None) -> tuple[ProgramImage, str]:
    if isinstance(image, ProgramImage):
        return image, "program image"
    return load_image(image, limits), f"program image {image}"


def replay_with_stats(sim: Simulator, image: ProgramImage | str | Path, *, limits: ImageLimits | None = None,
                      max_trace_events: int = DEFAULT_MAX_TRACE_EVENTS,
                      **run_options) -> tuple[ReplayResult, RunStats]:
    """Run ``image`` in ``sim``; its segments (and instruction area) are mapped only for the run.

    ``limits`` bound what an image read from a file may declare (``ImageLimits``); with ``trace=True`` a
    stream longer than ``max_trace_events`` is refused before the run.
    """
    image, where = _loaded(image, limits)
    if sim.cfg.fingerprint != image.config.fingerprint:
        raise SimulatorError(f"image is for {image.config.model} (fingerprint {image.config.fingerprint}) but this "
                             f"simulator is {sim.cfg.model} (fingerprint {sim.cfg.fingerprint}); use "
                             f"simulator.replay(image) to get a simulator of the image's config")
    if run_options.get("trace"):
        check_trace_events(len(image.insns), max_trace_events, where)
    mapped: list[int] = []
    try:
        for addr, data in image.segments:
            try:
                sim.map(addr, data)
            except MemoryAccessError as e:   # the image's addresses are fixed: they must be free in this simulator
                raise MemoryAccessError(f"{e}: the image's segments need their own addresses, which this simulator "
                                        "has allocated; replay on a fresh Simulator, or simulator.replay(image)") from None
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


def replay_into(sim: Simulator, image: ProgramImage | str | Path, **options) -> ReplayResult:
    """Run ``image`` in ``sim`` and return the final segments with the stats (options as replay_with_stats)."""
    return replay_with_stats(sim, image, **options)[0]


def replay(image: ProgramImage | str | Path, *, limits: ImageLimits | None = None, **options) -> ReplayResult:
    """Run an image on a fresh simulator of its own config (platform defaults from its TARGET)."""
    from simulator.core import Simulator

    image, _ = _loaded(image, limits)
    return replay_into(Simulator(image.config), image, **options)
