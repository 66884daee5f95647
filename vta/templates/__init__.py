"""Operator templates: each turns a workload plus knob values into an instruction stream."""
