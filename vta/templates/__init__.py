"""Operator templates: one module per template, each a ``Template`` class registered by operator name.

``compile_op`` looks the operator up in ``TEMPLATES``; tuning and graph_pack ask the same registry. Adding an
operator is adding one module with a ``@register``-ed class (docs/architecture.md, "Adding an operator").
"""

from vta.templates import alu, batch_matmul, conv  # importing them registers the built-in templates
from vta.templates.base import (
    TEMPLATES,
    CompiledOp,
    Template,
    compile_op,
    compile_template,
    random_inputs,
    register,
    registered,
    template_of,
)

CONV_OPS = conv.ConvTemplate.ops
ALU_OPS = alu.AluTemplate.ops
BATCH_MATMUL_OPS = batch_matmul.BatchMatmulTemplate.ops
# the version of the templates' programs, written into tuning records: bump when a template's emitted program
# changes for the same config, so records measured on the old programs are never applied to the new ones
TEMPLATE_VERSION = "1"

__all__ = ["ALU_OPS", "BATCH_MATMUL_OPS", "CONV_OPS", "TEMPLATES", "TEMPLATE_VERSION", "CompiledOp", "Template", "compile_op",
           "compile_template", "random_inputs", "register", "registered", "template_of"]
