"""InterpBench tasks compiled with tracr, converted to TransformerLens, with known circuits.

``programs`` defines the 16 RASP tasks, ``compile`` compiles them and derives the ground truth,
``convert`` builds the HookedTransformer (exact or with distractor heads), ``hub`` loads the trained
hub models, and ``evaluate`` runs circuit-discovery methods against the ground truth.
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
from circuitlasso.datasets.interpbench.programs import CASE_IDS, CASES, TracrTask, get_task

__all__ = [
    "CASES",
    "CASE_IDS",
    "METHODS",
    "VARIANTS",
    "CompiledTask",
    "HubCase",
    "PromptPairs",
    "TracrTask",
    "compile_case",
    "compile_task",
    "decode_outputs",
    "encode_inputs",
    "evaluate_case",
    "evaluate_model",
    "evaluate_task",
    "get_task",
    "load_hub_case",
    "make_prompts",
    "to_hooked_transformer",
]
