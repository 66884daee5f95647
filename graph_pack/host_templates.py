"""The old import path of the host templates, which live in ``host.templates`` (issue 43: the host compiler's one
home). This module *is* ``host.templates`` (the same module object: ``graph_pack.host_templates.host_template_of``
and the other public names still work; its submodules are imported as ``host.templates.conv2d`` etc.)."""

import sys

from host import templates

sys.modules[__name__] = templates
