"""Checks every device (the simulator, the RTL, a remote board, a Pynq board) must pass the same way."""

from __future__ import annotations

import pytest


def assert_alloc_and_free_refuse_what_is_not_a_size_or_a_buffer(dev) -> None:
    """alloc takes a whole number of bytes >= 0 (a negative one gave a Buffer of -1 bytes), free a Buffer (an int
    gave an AttributeError); refused before anything is allocated or freed, and the device goes on."""
    for bad in (-1, 1.5, True, "8", None):
        with pytest.raises(ValueError, match=r"alloc\(nbytes=.*\): nbytes must be a whole number of bytes >= 0"):
            dev.alloc(bad)
    with pytest.raises(TypeError, match="expected a Buffer from this device's alloc"):
        dev.free(12345)
    empty, buf = dev.alloc(0), dev.alloc(16)
    assert (empty.nbytes, buf.nbytes) == (0, 16) and empty.addr != buf.addr
    dev.free(empty)
    dev.free(buf)
