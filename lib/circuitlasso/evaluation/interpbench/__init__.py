"""The InterpBench harness: circuit-discovery methods run against the tasks' known circuits.

``evaluate`` runs each method on a task's model and prompts and scores its circuit, ``ioi`` does the
same for the trained IOI model, and ``report`` turns a run into tables, means and speedups.
"""

from circuitlasso.evaluation.interpbench.evaluate import (
    METHODS,
    RunSettings,
    evaluate_case,
    evaluate_model,
    evaluate_task,
    run_method,
)
from circuitlasso.evaluation.interpbench.ioi import evaluate_ioi
from circuitlasso.evaluation.interpbench.report import (
    case_means,
    median_speedups,
    parity,
    run_cases,
    speedup_table,
    summary,
)

__all__ = [
    "METHODS",
    "RunSettings",
    "case_means",
    "evaluate_case",
    "evaluate_ioi",
    "evaluate_model",
    "evaluate_task",
    "median_speedups",
    "parity",
    "run_cases",
    "run_method",
    "speedup_table",
    "summary",
]
