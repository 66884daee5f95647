"""pytest hooks: a test's declared needs (tests/extras.py) are checked before it runs."""

from __future__ import annotations

import extras


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "needs(*names): optional parts the test needs (see tests/extras.py)")


def pytest_runtest_setup(item) -> None:
    extras.check_marked(item)
