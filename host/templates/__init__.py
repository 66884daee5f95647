"""Tunable host (CPU) operator templates compiled through llvmlite: AutoTVM's x86 and ARM template families.

    t = host_template_of("conv2d_NCHWc.x86").parse("conv2d_NCHWc.x86", None, (), {"data_shape": (1, 64, 56, 56),
                                                  "kernel_shape": (64, 64, 3, 3), "padding": (1, 1)})
    kernel = t.build(t.space()[5])          # or t.build() for the default config
    y = kernel(x, w)

Each template has the accelerator templates' interface (parse, space, check, default_config, estimate,
reference, random_inputs, task_workload), so tuning's tuners, records and cost model take it as they are.
"""

from host.templates import conv2d, dense, depthwise, spatial_pack  # noqa: F401 - importing them registers the templates
from host.templates.base import (
    EPILOGUES,
    HOST_TEMPLATE_VERSION,
    HOST_TEMPLATES,
    HostKernel,
    HostTemplate,
    host_template_of,
)
from host.templates.graph import (
    CONV_TEMPLATES,
    DENSE_TEMPLATES,
    DEPTHWISE_TEMPLATES,
    host_workload,
    tuned_config,
    tuned_kernel,
)
from host.templates.target import AARCH64, ARMV7, CROSS, CpuTarget, host, object_code

__all__ = ["AARCH64", "ARMV7", "CONV_TEMPLATES", "CROSS", "DENSE_TEMPLATES", "DEPTHWISE_TEMPLATES", "EPILOGUES", "HOST_TEMPLATES",
           "HOST_TEMPLATE_VERSION", "CpuTarget", "HostKernel", "HostTemplate", "host", "host_template_of",
           "host_workload", "object_code", "tuned_config", "tuned_kernel"]
