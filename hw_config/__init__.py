"""Hardware configuration: JSON presets, validation, and every derived parameter."""

from hw_config.config import (
    DEFAULT_PRESET,
    LATENCY_KEYS,
    PLATFORM_KEYS,
    VTA_KEYS,
    ConfigError,
    HwConfig,
    config_from_dict,
    describe_overrides,
    load_config,
    presets,
)
from hw_config.layout import ALU_OPCODES, MEM_TYPES, OPCODES, Field, Format

__all__ = ["ALU_OPCODES", "DEFAULT_PRESET", "LATENCY_KEYS", "MEM_TYPES", "OPCODES", "PLATFORM_KEYS", "VTA_KEYS", "ConfigError",
           "Field", "Format", "HwConfig", "config_from_dict", "describe_overrides", "load_config", "presets"]
