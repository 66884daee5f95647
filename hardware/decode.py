"""Instruction fields as Amaranth values, sliced where hw_config's layout table puts them."""

from __future__ import annotations

from amaranth import Value

from hw_config.layout import Format


def field_values(fmt: Format, word: Value) -> dict[str, Value]:
    """Every field of ``fmt`` as a slice of ``word`` (signed fields as signed values)."""
    out = {}
    for f in fmt.fields:
        part = word[f.offset:f.offset + f.width]
        out[f.name] = part.as_signed() if f.signed else part
    return out
