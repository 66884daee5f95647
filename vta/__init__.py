"""The compiler back end: ISA, runtime, operator templates, devices and the ``vta`` command line."""

from vta.environment import Environment, get_env
from vta.templates import compile_op

__all__ = ["Environment", "compile_op", "get_env"]
