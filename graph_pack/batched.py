"""A network's consecutive accelerator groups run through one call into the simulator (simulator/batch.py):
issue 44's "bookkeeping in C". Without it each group costs a device copy of its micro-ops, a simulator run and
their Python wrapping (~130 us per group on an Intel Xeon, 19 groups in ResNet-18).

``plan(steps, device)`` keeps the module's steps in order and puts each stretch of consecutive ``AccelStep``s
into one ``AccelBatch`` where the device is the simulator (other devices run step by step). A batch copies each
group's staged inputs that are not in place already (values from host steps) just before the group, as
``AccelStep.run`` does; a stretch ends where a group would read an earlier group's output of the same stretch from
another buffer than the one it was stored in (a host copy between them, which the batch cannot do).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.stats import RunStats
from vta.device import SimDevice
from vta.runtime import combine_stats

if TYPE_CHECKING:
    from graph_pack.build import AccelStep, GraphModule


class AccelBatch:
    """Consecutive accelerator groups, prepared once and run in one simulator call per module run."""

    def __init__(self, steps: list[AccelStep], device: SimDevice):
        from graph_pack.build import DeviceTensor
        from simulator.batch import BatchStep  # loads the C simulator: not when graph_pack is imported

        self.steps = steps
        self.device = device
        items: list[BatchStep] = []
        self._open: list[tuple[int, str, Any, str]] = []   # (item, value, buffer, dtype) copied at each run
        self._streams: list[int] = []                       # streams per group
        for step in steps:
            for value, buf, dtype in step.staged:
                if not any(s.output == value for s in steps[:steps.index(step)]):   # else in place (split_points)
                    self._open.append((len(items), value, buf, dtype))
                    items.append(BatchStep(copy_addr=buf.addr, copy_bytes=buf.nbytes))
            program = step.op.program
            for stream in program.streams:
                words = stream.uop_words if stream.uop_words.size else None
                items.append(BatchStep(insns=stream.insns, copy_addr=program.uop_buffer.addr, copy_data=words))
            self._streams.append(len(program.streams))
        self._batch = device.sim.batch(items)
        self._outputs = [DeviceTensor(s.op.buffers.out, s.out_shape, "int8") for s in steps]

    def run(self, m: GraphModule, compute: bool) -> list[RunStats]:
        """Run every group; each group's stats (as its ``AccelStep.run`` returns them), in order."""
        from graph_pack.build import DeviceTensor

        batch = self._batch
        for item, value, buf, dtype in self._open:
            v = m.values[value]
            if isinstance(v, DeviceTensor):
                if v.buffer == buf:
                    batch.set_copy(item, None)
                    continue
                v = m.host_value(value)
            data = np.ascontiguousarray(v, dtype=dtype)
            if data.nbytes > buf.nbytes:
                raise ValueError(f"copy of {data.nbytes} bytes at offset 0 overruns a {buf.nbytes}-byte buffer")
            batch.set_copy(item, data)
        runs = batch.run(compute=compute)
        out, k = [], 0
        for step, n, tensor in zip(self.steps, self._streams, self._outputs):
            if n == 1:
                out.append(runs[k])
            else:
                total = combine_stats(runs[k:k + n])
                total.trace = None
                out.append(total)
            k += n
            m.values[step.output] = tensor
        if out:
            self.device.last_stats = out[-1]
        return out


def _stretches(steps: list) -> list[list]:
    """The steps cut into stretches of consecutive AccelSteps (each a list) and single other steps; a stretch is
    also cut before a group that reads an earlier member's output from another buffer than its own output's."""
    from graph_pack.build import AccelStep

    out: list[list] = []
    for step in steps:
        if not isinstance(step, AccelStep):
            out.append([step])
            continue
        current = out[-1] if out and isinstance(out[-1][0], AccelStep) else None
        if current is not None:
            stored = {s.output: s.op.buffers.out for s in current}
            if any(value in stored and stored[value] != buf for value, buf, _ in step.staged):
                current = None
        if current is None:
            out.append([step])
        else:
            current.append(step)
    return out


def plan(steps: list, device: Any) -> list:
    """``steps`` with each stretch of consecutive accelerator groups as one AccelBatch where ``device`` is the
    simulator as it comes (a subclass that redefines ``run``, to count or trace the groups, gets each group
    through its ``run``); the steps themselves elsewhere."""
    from graph_pack.build import AccelStep

    if not isinstance(device, SimDevice) or type(device).run is not SimDevice.run:
        return list(steps)
    return [AccelBatch(part, device) if isinstance(part[0], AccelStep) else part[0] for part in _stretches(steps)]
