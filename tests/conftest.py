"""pytest hooks: a test's declared needs (tests/extras.py) are checked before it runs; the quick subset
(tests/quick.py) is marked."""

from __future__ import annotations

import extras
import pytest
import quick


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "needs(*names): optional parts the test needs (see tests/extras.py)")
    config.addinivalue_line("markers", "quick: the contributor's subset, `pytest -m quick` (see tests/quick.py)")


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        module, _, name = item.nodeid.partition("::")
        if quick.is_quick(module.rpartition("/")[2], name):
            item.add_marker(pytest.mark.quick)


def pytest_runtest_setup(item) -> None:
    extras.check_marked(item)
