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


def tokens(m: Module, component, module: str, flags: dict[str, Value], action: str) -> Value:
    """Drive the ``action`` ("pop" or "push") token ports of ``component`` for the instruction's ``flags``
    (flag name -> 1-bit value; flags without a queue in ``module`` are ignored, as VTA's hardware does).
    Returns a value that is 1 when every needed token moves this cycle (all at once, never some of them).
    Call it inside the FSM state that waits for the tokens."""
    needed = []
    for flag, queue in DEP_QUEUES[module].items():
        if queue is not None and flag.startswith(action):
            needed.append((flags[flag], getattr(component, f"{action}_{queue}")))
    ok = Const(1)
    for want, port in needed:
        ok = ok & (~want | port.ready)
    for want, port in needed:
        m.d.comb += port.valid.eq(want & ok)
    return ok
