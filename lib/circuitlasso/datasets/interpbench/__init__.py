"""InterpBench tasks compiled with tracr, converted to TransformerLens, with known circuits.

``programs`` defines the 16 RASP tasks, ``compile`` compiles them and derives the ground truth,
``convert`` builds the HookedTransformer (exact or with distractor heads), ``hub`` loads the trained
hub models, ``ioi`` writes IOI prompts for the hub's IOI model, ``evaluate`` runs circuit-discovery
methods against the ground truth, and ``report`` turns a run into tables.
"""

from circuitlasso.datasets.interpbench.compile import CompiledTask, compile_case, compile_task
from circuitlasso.datasets.interpbench.convert import (
    VARIANTS,
    decode_outputs,
    encode_inputs,
    to_hooked_transformer,
)
from circuitlasso.datasets.interpbench.evaluate import (
    METHODS,
    PromptPairs,
    evaluate_case,
    evaluate_model,
    evaluate_task,
    make_prompts,
)
from circuitlasso.datasets.interpbench.hub import HubCase, load_hub_case
from circuitlasso.datasets.interpbench.ioi import IOIPair, encode_ioi, evaluate_ioi, ioi_prompts
from circuitlasso.datasets.interpbench.programs import CASE_IDS, CASES, TracrTask, get_task
from circuitlasso.datasets.interpbench.report import (
    case_means,
    median_speedups,
    parity,
    run_cases,
    speedup_table,
    summary,
)

__all__ = [
    "CASES",
    "CASE_IDS",
    "METHODS",
    "VARIANTS",
    "CompiledTask",
    "HubCase",
    "IOIPair",
    "PromptPairs",
    "TracrTask",
    "compile_case",
    "compile_task",
    "case_means",
    "decode_outputs",
    "encode_inputs",
    "encode_ioi",
    "evaluate_case",
    "evaluate_ioi",
    "evaluate_model",
    "evaluate_task",
    "get_task",
    "ioi_prompts",
    "load_hub_case",
    "make_prompts",
    "median_speedups",
    "parity",
    "run_cases",
    "speedup_table",
    "summary",
    "to_hooked_transformer",
]
