"""pytest hooks: a test's declared needs (tests/extras.py) are checked before it runs; the quick subset
(tests/quick.py) is marked."""

from __future__ import annotations

import extras
import pytest
import quick


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "needs(*names): optional parts the test needs (see tests/extras.py)")
    config.addinivalue_line("markers", "quick: the contributor's subset, `pytest -m quick` (see tests/quick.py)")


def pytest_ignore_collect(collection_path, config) -> bool | None:
    """Under ``-m quick``, a test file without a quick test is not imported at all (collecting the whole suite
    costs about a fifth of the subset's time)."""
    name = collection_path.name
    if name.startswith("test_") and name.endswith(".py") and quick.only_quick(config.option.markexpr):
        return True if not quick.has_quick_tests(name) else None
    return None


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        module, _, name = item.nodeid.partition("::")
        if quick.is_quick(module.rpartition("/")[2], name):
            item.add_marker(pytest.mark.quick)


def pytest_runtest_setup(item) -> None:
    extras.check_marked(item)
