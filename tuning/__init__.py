"""AutoTVM-style tuning of the operator templates: tasks, tuners, runners, records and the task scheduler.

    tasks = tuning.extract_tasks(packed, env)
    tuning.tune_tasks(tasks, tuner="xgb", n_trial=200, log="r18.jsonl")
    mod = graph_pack.build(packed, env, params, schedules=tuning.load_best("r18.jsonl", env))

Bound eagerly (no submodule shares a public name's name); xgboost and dask are imported only when an
``XGBTuner`` or a ``DaskRunner`` is made.
"""

from tuning.cpu import CpuRunner, CpuTask, cpu_task
from tuning.cpu_rpc import RPCCpuRunner  # also lets a `vta rpc server --device cpu` measure on its CPU
from tuning.measure import DaskRunner, LocalRunner, MeasureResult, dask_client
from tuning.records import load_best, load_records, pick_best
from tuning.rpc_runner import RPCRunner
from tuning.task import Task, alu_task, conv_task, extract_tasks
from tuning.tune import tune_tasks
from tuning.tuners import GATuner, GridSearchTuner, RandomTuner, Tuner, XGBTuner, make_tuner

__all__ = ["CpuRunner", "CpuTask", "DaskRunner", "GATuner", "GridSearchTuner", "LocalRunner", "MeasureResult",
           "RPCCpuRunner", "RPCRunner", "RandomTuner", "Task", "Tuner", "XGBTuner", "alu_task", "conv_task", "cpu_task",
           "dask_client", "extract_tasks", "load_best", "load_records", "make_tuner", "pick_best", "tune_tasks"]
