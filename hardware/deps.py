"""Dependency flags: which token queue each flag pops or pushes in a module (hw_config.isa_rules.DEP_QUEUES)."""

from __future__ import annotations

from amaranth import Const, Module, Value
from amaranth.lib.wiring import Out

from hardware.interfaces import TOKEN
from hw_config.isa_rules import DEP_QUEUES


def token_members(module: str) -> dict[str, Out]:
    """The token ports of ``module``: ``pop_<queue>`` and ``push_<queue>`` for each queue it uses."""
    out = {}
    for flag, queue in DEP_QUEUES[module].items():
        if queue is not None:
            out[f"{flag.split('_')[0]}_{queue}"] = Out(TOKEN)
    return out


class Tokens:
    """The token moves one instruction's ``flags`` ask of ``module`` for one ``action`` ("pop" or "push");
    flags without a queue in ``module`` are ignored, as VTA's hardware does."""

    def __init__(self, component, module: str, flags: dict[str, Value], action: str):
        self.needed = [(flags[flag], getattr(component, f"{action}_{queue}"))
                       for flag, queue in DEP_QUEUES[module].items()
                       if queue is not None and flag.startswith(action)]

    @property
    def ready(self) -> Value:
        """1 when every needed token can move this cycle."""
        ok = Const(1)
        for want, port in self.needed:
            ok = ok & (~want | port.ready)
        return ok

    def fire(self, m: Module, enable: Value) -> None:
        """Move every needed token in a cycle where ``enable`` (which must imply ``ready``) is high: all at
        once, never some of them. Call it where the module's FSM decides."""
        for want, port in self.needed:
            m.d.comb += port.valid.eq(want & enable)
