"""Files read whole or a line at a time are bounded before the memory is spent (hw_config.reading): a co-design
space (``vta dse --space``), co-design records (``records.jsonl``) and calibrate's measurements, each given an
8 GB sparse file of one line or ``/dev/zero``.

Oracle: the process runs under RLIMIT_AS (3 GiB), so an unbounded read fails the test with a MemoryError
instead of taking the machine; the sparse files take no disk space.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from hw_config.reading import bounded_lines, read_bounded

ROOT = Path(__file__).resolve().parents[1]
AS_LIMIT = 3 << 30
BIG = 8 << 30


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def limited(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}   # this checkout's code
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, env=env, check=False,
                          preexec_fn=_limit_memory)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vta: error: "), proc.stderr[-2000:]
    return lines[0]


def sparse(path: Path, size: int = BIG) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def test_a_file_is_refused_by_its_size_before_reading_and_a_device_after_one_byte_past(tmp_path):
    with pytest.raises(ValueError, match=r"^big: 8,589,934,592 bytes; at most 100$"):
        read_bounded(sparse(tmp_path / "big"), 100, "big", "at most 100")
    with pytest.raises(ValueError, match=r"^zero: more than 100 bytes; at most 100$"):
        read_bounded("/dev/zero", 100, "zero", "at most 100")
    (tmp_path / "ok").write_bytes(b"x" * 100)
    assert read_bounded(tmp_path / "ok", 100, "ok", "at most 100") == b"x" * 100


def test_a_long_line_is_none_and_the_next_line_is_read_whole(tmp_path):
    path = tmp_path / "lines"
    path.write_text("short\n" + "y" * 25 + "\n" + "z" * 10 + "\nlast")
    with open(path) as f:
        assert list(bounded_lines(f, 10)) == [(1, "short\n"), (2, None), (3, "z" * 10 + "\n"), (4, "last")]


@pytest.mark.parametrize("space, message", [
    ("big.json", "--space big.json: 8,589,934,592 bytes; a space file is at most 1,048,576 bytes"),
    ("/dev/zero", "--space /dev/zero: more than 1,048,576 bytes; a space file is at most 1,048,576 bytes"),
])
def test_vta_dse_refuses_a_huge_space_file_before_reading_it(tmp_path, space, message):
    sparse(tmp_path / "big.json")
    proc = limited([sys.executable, "-m", "vta", "dse", "resnet-18", "--space", space, "--out", "out"], tmp_path)
    assert message in one_error_line(proc)
    assert not (tmp_path / "out").exists()


def test_vta_calibrate_refuses_a_huge_line_after_reading_its_bound(tmp_path):
    sparse(tmp_path / "big.jsonl")
    proc = limited([sys.executable, "-m", "vta", "calibrate", "big.jsonl"], tmp_path)
    assert "big.jsonl, line 1: longer than 65,536 bytes; not a record" in one_error_line(proc)


READ_RECORDS = """
import json, sys
from pathlib import Path
from tuning.dse import Search, read_records
search = Search("resnet-18", "pynq", "xc7z020", trials=1, image_size=32)
path = Path(sys.argv[1])
with open(path, "r+b") as f:   # after the huge line, one record of this search
    f.seek(0, 2)
    f.write(b"\\n" + json.dumps({"search": search.key, "point": {"LOG_BLOCK": 4}, "status": "invalid",
                                 "reason": "r"}).encode() + b"\\n")
print(json.dumps(list(read_records(path, search))))
"""


def test_dse_records_with_a_huge_line_are_read_past_it_in_bounded_memory(tmp_path):
    """A line longer than the bound (here 4 GiB of NULs, as a sparse records.jsonl) is passed over in bounded
    pieces, and the record after it is read."""
    path = sparse(tmp_path / "records.jsonl", 4 << 30)
    proc = limited([sys.executable, "-c", READ_RECORDS, str(path)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == ['{"LOG_BLOCK": 4}']


def test_dse_records_that_are_not_a_file_are_refused(tmp_path):
    """(/dev/zero would be read forever, a bounded piece at a time; /dev/null stands for it safely.)"""
    from tuning.dse import Search, read_records
    (tmp_path / "records.jsonl").symlink_to("/dev/null")
    with pytest.raises(ValueError, match="records.jsonl: not a regular file"):
        read_records(tmp_path / "records.jsonl", Search("resnet-18"))


def test_load_best_of_dev_zero_is_refused_not_read_forever(tmp_path):
    """/dev/zero is one line that never ends: read a bounded piece at a time, forever (and /dev/urandom's bad
    lines piled up in a list); a log that is not a regular file is refused before it is opened."""
    code = ("import tuning\ntry:\n    tuning.load_best('/dev/zero', 'pynq')\nexcept ValueError as e:\n    print(e)")
    proc = limited([sys.executable, "-c", code], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "record log /dev/zero: not a regular file (a device, FIFO or socket); give a file"


@pytest.mark.parametrize("reader", ["load_best", "load_records", "count_records", "pick_best", "check_log_path",
                                    "read_schedules", "read_measurements"])
def test_log_readers_refuse_a_device(tmp_path, reader):
    """(/dev/null stands for /dev/zero safely: it was read as an empty log.)"""
    from graph_pack.schedule_log import read_schedules
    from tuning import records
    from vta.calibrate import read_measurements
    from vta.environment import config_of
    log = tmp_path / "r.jsonl"
    log.symlink_to("/dev/null")
    call = {"load_best": lambda: records.load_best(log, "pynq"), "load_records": lambda: records.load_records(log),
            "count_records": lambda: records.count_records(log),
            "pick_best": lambda: records.pick_best(log, tmp_path / "best.jsonl"),
            "check_log_path": lambda: records.check_log_path(log),
            "read_schedules": lambda: read_schedules(log, config_of("pynq")),
            "read_measurements": lambda: read_measurements(log, config_of("pynq"))}[reader]
    with pytest.raises(ValueError, match=r"r\.jsonl: not a regular file \(a device, FIFO or socket\)"):
        call()


def test_load_best_refuses_a_missing_log_or_a_directory_and_load_records_resumes_from_nothing(tmp_path):
    from tuning import records
    with pytest.raises(FileNotFoundError, match=r"record log .*typo\.jsonl: no such file"):
        records.load_best(tmp_path / "typo.jsonl", "pynq")
    with pytest.raises(FileNotFoundError, match=r"typo\.jsonl: no such file"):
        records.pick_best(tmp_path / "typo.jsonl", tmp_path / "best.jsonl")
    with pytest.raises(ValueError, match=r"not a regular file \(a directory\)"):
        records.load_best(tmp_path, "pynq")
    assert records.load_records(tmp_path / "new.jsonl") == []   # a run resuming into a new log


def test_load_records_keeps_a_few_bad_lines_and_counts_the_rest(tmp_path):
    """Memory for a log of bad lines stays bounded: the warning quotes 3 and counts them all."""
    import tracemalloc
    import warnings

    from tuning import records
    log = tmp_path / "r.jsonl"
    log.write_text("x\n" * 50_000)
    tracemalloc.start()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert records.load_records(log) == []
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    text = str(caught[0].message)
    assert "skipped 50000 unreadable line(s): line 1: " in text and text.count("line ") == 3 and text.endswith(" ...")
    assert peak < 2 << 20, peak
