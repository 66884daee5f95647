"""Program images on a device whose buffers it chooses itself (a board): relocation and replay.

An image (``simulator.image``) places its DRAM segments at fixed physical addresses and its instructions
carry those addresses. A board hands out buffers at addresses of its own, so replaying an image there
allocates one buffer per segment and rewrites every LOAD/STORE's ``dram_base`` from the segment's old base
to its buffer (element offsets inside the segment are unchanged, buffers are page aligned). A transfer that
lies in no segment is left as it is, and the device's program check then refuses it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from hw_config import HwConfig
from simulator.image import ProgramImage, ReplayResult
from vta.isa import MemInsn, assemble, decode_program

Move = tuple[int, int, int]   # (old base, size, new base)


def relocate(insns: np.ndarray, cfg: HwConfig, moves: list[Move]) -> np.ndarray:
    """``insns`` with each LOAD/STORE inside an old segment pointed at the same bytes of its new place."""
    out = []
    for insn in decode_program(insns, cfg):
        if isinstance(insn, MemInsn) and insn.x_size and insn.y_size:
            elem = cfg.elem_bytes(insn.memory_type)
            first = insn.dram_base * elem
            end = first + ((insn.y_size - 1) * insn.x_stride + insn.x_size) * elem
            for old, size, new in moves:
                if old <= first and end <= old + size:
                    moved = new + (first - old)
                    if moved % elem:
                        raise ValueError(f"segment 0x{old:x} moved to 0x{new:x} breaks the {elem}-byte alignment "
                                         f"of a transfer at 0x{first:x}")
                    insn = replace(insn, dram_base=moved // elem)
                    break
        out.append(insn)
    return assemble(out, cfg)


def replay_on_device(device, image: ProgramImage, **run_options) -> tuple[ReplayResult, object]:
    """Run ``image`` on ``device`` (alloc/copy_in/run/copy_out, e.g. a ``PynqDevice``).

    Returns the final segments under the image's own addresses (comparable with a simulator replay) and the
    run's stats. Buffers are freed afterwards, even on failure.
    """
    cfg = device.cfg
    if cfg.fingerprint != image.config.fingerprint:
        raise ValueError(f"image is for {image.config.model}, the device runs {cfg.model}")
    buffers = []
    try:
        for _, data in image.segments:
            buffers.append(device.alloc(data.size))
        moves = [(addr, data.size, buf.addr) for (addr, data), buf in zip(image.segments, buffers, strict=True)]
        for (_, data), buf in zip(image.segments, buffers, strict=True):
            device.copy_in(buf, data)
        stats = device.run(relocate(image.insns, cfg, moves), **run_options)
        segments = [(addr, device.copy_out(buf, data.size))
                    for (addr, data), buf in zip(image.segments, buffers, strict=True)]
    finally:
        for buf in buffers:
            device.free(buf)
    return ReplayResult(segments=segments, stats=stats.to_dict()), stats
