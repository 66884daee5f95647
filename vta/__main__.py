"""``python -m vta``: the same as the ``vta`` command."""

from vta.cli import main

raise SystemExit(main())
