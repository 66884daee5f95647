"""The old import path of the host's fixed JIT kernels, which live in ``host.jit`` (issue 43: the host compiler's
one home). This module *is* ``host.jit`` (the same module object), so ``graph_pack.jit.MAX_CACHED_KERNELS = n``
still sets the cache's limit; new code imports ``host.jit``."""

import sys

from host import jit

sys.modules[__name__] = jit
