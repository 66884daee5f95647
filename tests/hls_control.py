"""One register script for Vivado HLS's ``ap_ctrl_hs`` interrupt registers (GIE 0x04, IER 0x08, ISR 0x0C), run on
the generated RTL (tests/test_rtl_control.py) and on the simulated board (tests/test_sim_board.py), each held to
the observations HLS's semantics give (``EXPECTED``), so the two agree with each other too.

The semantics (Vivado HLS's generated ``CONTROL_BUS`` slave; hardware/control.py): an ap_done event sets the ISR
bits IER enables *at that moment* (bit 0 ap_done, bit 1 ap_ready, which VTA's sequential blocks raise together);
writing 1 to an ISR bit toggles it; GIE keeps bit 0, IER bits 0-1; a block's interrupt output is GIE and (ISR bit
0 or 1). ``launch`` runs a program of no instructions of its own (VTA's ``Synchronize`` tail: a store NOP, a load
NOP, a compute NOP, FINISH), so every block finishes at least one instruction.
"""

from __future__ import annotations

from collections.abc import Callable

BLOCKS = ("fetch", "load", "compute", "store")
GIE, IER, ISR = 0x04, 0x08, 0x0C
DONE, READY = 0x1, 0x2
Observation = tuple[str, object]


def interrupt_script(read: Callable[[str, int], int], write: Callable[[str, int, int], None],
                     interrupts: Callable[[], dict[str, bool]], launch: Callable[[], None]) -> list[Observation]:
    """Drive the registers through ``read``/``write`` (block, offset[, value]) and return what was seen."""
    seen: list[Observation] = []

    def look(label: str) -> None:
        seen.append((label, {b: tuple(read(b, off) for off in (GIE, IER, ISR)) for b in BLOCKS}))
        seen.append((f"{label}: interrupts", interrupts()))

    look("reset")
    write("fetch", IER, DONE)
    write("fetch", GIE, 1)
    write("load", IER, READY | 0xFC)      # bits above 1 are not kept
    write("load", GIE, 0xFF)              # GIE keeps bit 0 only
    write("compute", IER, DONE | READY)   # GIE off: ISR rises, the interrupt does not
    write("store", GIE, 1)                # IER off: no ISR bit
    look("enabled")
    launch()
    look("after a run")
    write("fetch", ISR, DONE)             # toggle on write: clears bit 0
    look("fetch ISR bit 0 toggled")
    write("fetch", ISR, DONE | READY)     # sets bit 0 again, and bit 1 although IER never enabled it
    look("fetch ISR bits 0 and 1 toggled")
    write("fetch", GIE, 0)
    write("compute", GIE, 1)
    look("GIE moved from fetch to compute")
    for block in BLOCKS:                  # the usual handler: write back what ISR reads, then disable
        write(block, ISR, read(block, ISR))
        write(block, IER, 0)
    launch()
    write("compute", IER, DONE)           # enabled after the run: its events came before and set nothing
    look("a run with IER 0, then IER enabled")
    launch()
    look("a run with compute's IER bit 0")
    return seen


ALL_OFF = dict.fromkeys(BLOCKS, False)

EXPECTED: list[Observation] = [
    ("reset", dict.fromkeys(BLOCKS, (0, 0, 0))),
    ("reset: interrupts", ALL_OFF),
    ("enabled", {"fetch": (1, 1, 0), "load": (1, 2, 0), "compute": (0, 3, 0), "store": (1, 0, 0)}),
    ("enabled: interrupts", ALL_OFF),
    ("after a run", {"fetch": (1, 1, 1), "load": (1, 2, 2), "compute": (0, 3, 3), "store": (1, 0, 0)}),
    ("after a run: interrupts", {"fetch": True, "load": True, "compute": False, "store": False}),
    ("fetch ISR bit 0 toggled", {"fetch": (1, 1, 0), "load": (1, 2, 2), "compute": (0, 3, 3), "store": (1, 0, 0)}),
    ("fetch ISR bit 0 toggled: interrupts", {"fetch": False, "load": True, "compute": False, "store": False}),
    ("fetch ISR bits 0 and 1 toggled",
     {"fetch": (1, 1, 3), "load": (1, 2, 2), "compute": (0, 3, 3), "store": (1, 0, 0)}),
    ("fetch ISR bits 0 and 1 toggled: interrupts", {"fetch": True, "load": True, "compute": False, "store": False}),
    ("GIE moved from fetch to compute",
     {"fetch": (0, 1, 3), "load": (1, 2, 2), "compute": (1, 3, 3), "store": (1, 0, 0)}),
    ("GIE moved from fetch to compute: interrupts",
     {"fetch": False, "load": True, "compute": True, "store": False}),
    ("a run with IER 0, then IER enabled",
     {"fetch": (0, 0, 0), "load": (1, 0, 0), "compute": (1, 1, 0), "store": (1, 0, 0)}),
    ("a run with IER 0, then IER enabled: interrupts", ALL_OFF),
    ("a run with compute's IER bit 0",
     {"fetch": (0, 0, 0), "load": (1, 0, 0), "compute": (1, 1, 1), "store": (1, 0, 0)}),
    ("a run with compute's IER bit 0: interrupts", {"fetch": False, "load": False, "compute": True, "store": False}),
]
