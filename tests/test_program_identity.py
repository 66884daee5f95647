"""The #14 refactor changed nothing the compiler emits: programs, feature vectors, task keys and network
outputs equal the digests recorded before it (``tests/program_digests.py``)."""

from __future__ import annotations

import json

import program_digests


def test_emitted_programs_and_network_outputs_equal_the_recorded_digests():
    recorded = json.loads(program_digests.DIGEST_FILE.read_text())["digests"]
    now = program_digests.compute()
    assert set(now) == set(recorded)
    changed = sorted(k for k in now if now[k] != recorded[k])
    assert not changed, f"{len(changed)} digest(s) changed, e.g. {changed[:5]}"
