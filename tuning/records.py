"""Tuning records: an append-only JSON-lines log, one measured config per line.

Each line holds the workload key, the op, the config, the result (cycles, board latency, error, whether the
output was checked, the device that measured it), the hardware config's fingerprint, the template version, the
time and the tuner that proposed the config (``tuner``; absent in logs written before it existed).
Lines are appended and fsync'ed per batch, so a killed run loses at most the batch in flight; a truncated
last line is skipped with a warning. Records made for another hardware config or template version are
never applied silently: ``load_best`` skips them and says how many it skipped.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import threading
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from graph_pack.schedule_log import beats_untuned, record_rank
from graph_pack.untuned import is_untuned
from host.templates import HOST_TEMPLATE_VERSION, CpuTarget, host
from hw_config import HwConfig
from hw_config.checks import is_whole
from hw_config.reading import bounded_lines, no_json_constant, regular_file
from hw_config.writing import write_atomic
from simulator.files import check_output_path, write_lock
from tuning.measure import MeasureResult
from tuning.task import TEMPLATE_VERSION, Task, _canonical, task_of
from vta.environment import config_of
from vta.runtime import ScheduleError

FORMAT_VERSION = 1
FIELDS = ("workload", "op", "config", "result", "hw", "template", "time")
MAX_LINE_BYTES = 64 << 10   # a record is a few hundred bytes; longer lines are skipped unread
MAX_BAD_EXAMPLES = 3         # unreadable lines quoted in the warning; the rest are only counted


class RecordWarning(UserWarning):
    """A log line was skipped (unreadable, or from another hardware config / template version)."""


@dataclass
class Record:
    workload: str                 # workload_key of the task
    op: str
    config: dict[str, Any]
    result: dict[str, Any]        # MeasureResult fields except the config
    hw: str                       # HwConfig.fingerprint
    template: str = TEMPLATE_VERSION
    time: float = 0.0
    version: int = FORMAT_VERSION
    tuner: str = ""               # the tuner that proposed it ("" in older logs, and for records made by hand)

    @property
    def ok(self) -> bool:
        """A successful measurement (no error, cycles > 0): one ``rank`` orders."""
        return record_rank(self.result) is not None

    @property
    def cycles(self) -> int:
        return int(self.result.get("cycles", 0))

    @property
    def rank(self) -> tuple[int, float]:
        """The objective the tuners minimise, for ordering records of one workload and config: ``record_rank``
        (board latency where the record has one, else cycles), the rule ``build`` reads logs by; a failed
        record ranks after every successful one."""
        rank = record_rank(self.result)
        return rank if rank is not None else (2, math.inf)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))


def make_record(task: Task, result: MeasureResult, tuner: str = "") -> Record:
    res = result.to_dict()
    res.pop("config")
    return Record(task.key, task.op, _plain(result.config), res, task.cfg.fingerprint, task.template_version,
                  time.time(), tuner=tuner)


def _plain(config: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()}


def _is_number(v: Any) -> bool:
    return (is_whole(v) or isinstance(v, float)) and math.isfinite(v)


def _check_schema(obj: dict) -> None:
    """Every field of a record has the type and range a writer gives it (a log may be edited or poisoned)."""
    for name in ("workload", "op", "hw", "template"):
        if not isinstance(obj[name], str):
            raise ValueError(f"{name} must be a string, got {type(obj[name]).__name__}")  # noqa: TRY004 - a bad line
    if not _is_number(obj["time"]):
        raise ValueError("time must be a finite number")
    if not isinstance(obj.get("tuner", ""), str):
        raise ValueError("tuner must be a string")  # noqa: TRY004 - a bad line is a ValueError for the reader
    if "version" in obj and obj["version"] != FORMAT_VERSION:
        raise ValueError(f"format version {obj['version']!r}; this reader knows version {FORMAT_VERSION}")
    config, result = obj["config"], obj["result"]
    if not isinstance(config, dict) or not isinstance(result, dict):
        raise ValueError("config and result must be JSON objects")  # noqa: TRY004 - a bad line is a ValueError
    for knob, value in config.items():
        if not (is_whole(value) or (isinstance(value, list) and value and all(is_whole(v) for v in value))):
            raise ValueError(f"config knob {knob!r} must be an integer or a list of integers")
    cycles = result.get("cycles", 0)
    if not is_whole(cycles) or cycles < 0:
        raise ValueError(f"result cycles must be a non-negative integer, got {cycles!r}"[:200])
    for name in ("latency_s", "wall_s", "std_s"):
        if name in result and (not _is_number(result[name]) or result[name] < 0):
            raise ValueError(f"result {name} must be a non-negative finite number")
    if result.get("error") is not None and not isinstance(result["error"], str):
        raise ValueError("result error must be a string or null")
    if "checked" in result and not isinstance(result["checked"], bool):
        raise ValueError("result checked must be true or false")
    if "device" in result and not isinstance(result["device"], str):
        raise ValueError("result device must be a string")


def parse_line(line: str) -> Record:
    """One log line as a Record; ValueError naming what is wrong."""
    if len(line) > MAX_LINE_BYTES:
        raise ValueError(f"longer than {MAX_LINE_BYTES} bytes")
    try:
        obj = json.loads(line, parse_constant=no_json_constant)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON ({e.msg})") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")  # noqa: TRY004 - a bad line is a ValueError for the reader
    missing = [f for f in FIELDS if f not in obj]
    if missing:
        raise ValueError(f"missing field(s) {missing}")
    _check_schema(obj)
    return Record(**{k: obj[k] for k in (*FIELDS, "version", "tuner") if k in obj})


def check_log_path(path: str | os.PathLike, what: str = "record log") -> None:
    """Refuse, before any work, a log path that is not (or cannot become) a JSON-lines text file: an empty
    name, a directory, or an existing file whose first bytes are binary (an image, an archive)."""
    if not str(path):
        raise ValueError(f"{what}: an empty path; give a file name such as tune.jsonl")
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{what} {p}: is a directory; give a file name such as {p / 'tune.jsonl'}")
    regular_file(p, what, missing_ok=True)   # a device (/dev/zero) or FIFO is never a log
    check_output_path(p, what)   # its directory exists and takes new files
    if p.is_file():
        with open(p, "rb") as f:
            head = f.read(4096)
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as e:   # (a cut multi-byte character at the end is still text)
            if e.start < len(head) - 3:
                raise ValueError(f"{what} {p}: not a JSON-lines record log (binary content); give a new "
                                 "file or an existing .jsonl log") from None
        if b"\0" in head or (head and not head.lstrip().startswith(b"{")):
            raise ValueError(f"{what} {p}: not a JSON-lines record log (it does not start with a JSON object); "
                             "give a new file or an existing .jsonl log")


def move_aside(path: str | os.PathLike) -> Path | None:
    """Rename the log at ``path`` to the first free ``<stem>.old-<n><suffix>`` beside it (never over a file) and
    return the new path; None when there is no log. Nothing is deleted: a fresh start keeps the old records."""
    p = Path(path)
    if not p.is_file():
        return None
    for n in range(1, 10_000):
        aside = p.with_name(f"{p.stem}.old-{n}{p.suffix}")
        try:
            os.link(p, aside)   # fails if the name exists: never replaces a file
        except FileExistsError:
            continue
        os.unlink(p)
        return aside
    raise ValueError(f"{p}: 9999 logs are already set aside beside it; move some away")


LOG_BUSY_HINT = ("a tuning run into it is still going (the same command twice?); wait for it to finish (a run "
                 "resumes from its records), or give another log")
_LOCKED: dict[str, tuple[int, int]] = {}   # log (real path) -> (thread holding it, depth) in this process
_LOCKED_GUARD = threading.Lock()


@contextlib.contextmanager
def log_lock(path: str | os.PathLike, what: str = "log", hint: str = LOG_BUSY_HINT) -> Iterator[None]:
    """One tuning run per log at a time, as ``vta dse`` locks its records (``simulator.files.write_lock``): while
    the body runs, another process (or thread) that asks for the same log gets a ValueError at once,
    ``"{what} {path}: another process (pid N) is writing it; {hint}"``. The thread that holds it may ask again
    (``vta tune`` takes it before the model is loaded, ``tune_tasks`` inside). The lock dies with its process, so a
    run killed with ``kill -9`` leaves none behind; a log this created and nothing was written into is removed."""
    key = os.path.realpath(path)
    me = threading.get_ident()
    with _LOCKED_GUARD:
        holder, depth = _LOCKED.get(key, (me, 0))
        if holder != me:
            raise ValueError(f"{what} {path}: another thread of this process is writing it; {hint}")
        _LOCKED[key] = (me, depth + 1)
    try:
        if depth:
            yield
            return
        with write_lock(path, what, hint, discard_empty=True):
            yield
    finally:
        with _LOCKED_GUARD:
            if depth:
                _LOCKED[key] = (me, depth)
            else:
                del _LOCKED[key]


class RecordLog:
    """An append-only JSON-lines file of records."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def append(self, records: Iterable[Record]) -> None:
        """Append whole lines, fsync'ed; a Ctrl-C meanwhile takes effect once they are written."""
        lines = "".join(r.to_json() + "\n" for r in records)
        if not lines:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _sigint_deferred(), open(self.path, "a", encoding="utf-8") as f:
            if f.tell() > 0 and not _ends_with_newline(self.path):
                f.write("\n")  # a killed writer left half a line: start ours on a fresh one
            f.write(lines)
            f.flush()
            os.fsync(f.fileno())

    def read(self) -> list[Record]:
        return load_records(self.path)


@contextlib.contextmanager
def _sigint_deferred():
    """Hold SIGINT (Ctrl-C) back while the body runs, in the main thread of a POSIX process: it is delivered, and
    raises KeyboardInterrupt, as soon as the body is done (elsewhere the body simply runs)."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def count_records(path: str | os.PathLike) -> int:
    """The non-empty lines of a log (0 when there is none): what a run has saved, cheaply. ValueError for a
    path that is not a regular file (a directory, /dev/zero)."""
    if not regular_file(path, "record log", missing_ok=True):
        return 0
    try:
        with open(path, "rb") as f:
            return sum(1 for line in f if line.strip())
    except FileNotFoundError:
        return 0


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def load_records(path: str | os.PathLike, *, task: Task | None = None, cfg: HwConfig | None = None,
                 template: str | None = TEMPLATE_VERSION) -> list[Record]:
    """The readable records of a log (unreadable lines skipped with a RecordWarning naming the line).
    ``task`` keeps that task's workload; ``cfg`` / ``template`` keep matching records and warn how many
    others were skipped. A missing file is an empty log (a run resuming into a new log); a path that is not a
    regular file (a directory, a device such as /dev/zero, a FIFO) is refused with a ValueError naming it. The
    warning quotes the first few unreadable lines and counts the rest (never a list of them all)."""
    path = Path(path)
    if not regular_file(path, "record log", missing_ok=True):
        return []
    if task is not None and template == TEMPLATE_VERSION:
        template = task.template_version   # a host template's task: its own version
    hw = cfg.fingerprint if cfg is not None else (task.cfg.fingerprint if task is not None else None)
    records, bad, n_bad, foreign = [], [], 0, 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in bounded_lines(f, MAX_LINE_BYTES):
            if line is None:
                n_bad += 1
                if len(bad) < MAX_BAD_EXAMPLES:
                    bad.append(f"line {number}: longer than {MAX_LINE_BYTES} bytes")
                continue
            if not line.strip():
                continue
            try:
                rec = parse_line(line)
            except ValueError as e:
                n_bad += 1
                if len(bad) < MAX_BAD_EXAMPLES:
                    bad.append(f"line {number}: {e}"[:300])
                continue
            if task is not None and rec.workload != task.key:
                continue
            if (hw is not None and rec.hw != hw) or (template is not None and rec.template != template):
                # a log may hold the accelerator's and the host CPU's records side by side: only records of the
                # same kind made elsewhere (another config, CPU or version) are worth a word
                foreign += hw is None or rec.hw.startswith("cpu:") == hw.startswith("cpu:")
                continue
            records.append(rec)
    if n_bad:
        warnings.warn(f"{path}: skipped {n_bad} unreadable line(s): {'; '.join(bad)}"
                      + (" ..." if n_bad > len(bad) else ""), RecordWarning, stacklevel=2)
    if foreign:
        warnings.warn(f"{path}: skipped {foreign} record(s) made for another hardware config or template "
                      f"version (they are never applied to this one)", RecordWarning, stacklevel=2)
    return records


def best_records(records: Iterable[Record]) -> dict[str, Record]:
    """The fastest successful record per workload (by ``Record.rank``: board latency, else cycles)."""
    best: dict[str, Record] = {}
    for r in records:
        if r.ok and (r.workload not in best or r.rank < best[r.workload].rank):
            best[r.workload] = r
    return best


def load_best(path: str | os.PathLike, env) -> dict[str, dict]:
    """``{workload_key: config}`` of the fastest valid record per workload for ``env``'s hardware config:
    the ``schedules`` argument of ``graph_pack.build``. A record whose config the template refuses (an
    edited or copied log) is skipped with a RecordWarning, and the next fastest one is taken.

    ``env="cpu"`` (or a ``CpuTarget``): the host templates' records made on this CPU (that one), for
    ``build``'s ``host_schedules``. A missing log is FileNotFoundError naming it (a mistyped name would
    otherwise build untuned), a directory or device ValueError."""
    regular_file(path, "record log")
    cfg = target_of(env)
    version = HOST_TEMPLATE_VERSION if isinstance(cfg, CpuTarget) else TEMPLATE_VERSION
    by_workload: dict[str, list[Record]] = {}
    for r in load_records(path, cfg=cfg, template=version):
        if r.ok:
            by_workload.setdefault(r.workload, []).append(r)
    best, refused = {}, []
    for key, records in by_workload.items():
        task = _task_of(key, cfg)
        untuned = min((r.rank for r in records if is_untuned(r.config)), default=None)
        for r in sorted((r for r in records if not is_untuned(r.config) and beats_untuned(r.rank, untuned)),
                        key=lambda r: r.rank):
            reason = task if isinstance(task, str) else task.check(r.config)
            if reason is None:
                best[key] = r.config
                break
            refused.append(f"{r.op} {r.config}: {reason}"[:300])
    if refused:
        warnings.warn(f"{path}: skipped {len(refused)} record(s) whose config the template refuses: "
                      f"{'; '.join(refused[:2])}" + (" ..." if len(refused) > 2 else ""), RecordWarning, stacklevel=2)
    return best


def target_of(env) -> HwConfig | CpuTarget:
    """The hardware config of ``env``, or the CPU target for "cpu" (this machine) or a ``CpuTarget``."""
    if isinstance(env, CpuTarget):
        return env
    return host() if env == "cpu" else config_of(env)


def _task_of(key: str, cfg: HwConfig) -> Task | str:
    """The task of a record's workload key, or why no template takes it (the template's own reason: e.g. a
    dimension past its limit, which is refused before any knob space is built)."""
    try:
        workload = json.loads(key, parse_constant=no_json_constant)
        if not isinstance(workload, dict) or not isinstance(workload.get("op"), str):
            return "not a workload of any template"
        task = task_of(_canonical(workload), cfg)
        task.space  # noqa: B018 - compiles the default: refuses shapes the template does not take
    except (ValueError, TypeError, KeyError, RecursionError, ScheduleError) as e:
        return f"not a workload of any template ({e})"[:200]
    return task


def pick_best(in_path: str | os.PathLike, out_path: str | os.PathLike) -> int:
    """Write the best record of every (hardware config, workload) of ``in_path`` to ``out_path``
    (replacing it atomically, through a fresh temporary file: never through a planted one); returns how
    many were written. A missing ``in_path`` is FileNotFoundError, a directory or device ValueError."""
    regular_file(in_path, "record log")
    by_hw: dict[tuple[str, str], Record] = {}
    for r in load_records(in_path, template=None):
        k = (r.hw, r.workload)
        if r.ok and (k not in by_hw or r.rank < by_hw[k].rank):
            by_hw[k] = r
    text = "".join(r.to_json() + "\n" for r in by_hw.values()).encode()
    write_atomic(out_path, lambda f: f.write(text))
    return len(by_hw)
