"""InterpBench tasks compiled with tracr, converted to TransformerLens, with known circuits.

``programs`` defines the 16 RASP tasks, ``heldout`` a held-out suite of other RASP tasks,
``compile`` compiles them and derives the ground truth, ``convert`` builds the HookedTransformer
(exact or with distractor heads), ``prompts`` pairs clean and corrupted inputs, ``hub`` loads the
trained hub models and ``ioi`` writes IOI prompts for the hub's IOI model. Running methods on them
is :mod:`circuitlasso.evaluation.interpbench`.
"""

from circuitlasso.data.interpbench.compile import CompiledTask, compile_case, compile_task
from circuitlasso.data.interpbench.convert import (
    VARIANTS,
    decode_outputs,
    encode_inputs,
    to_hooked_transformer,
)
from circuitlasso.data.interpbench.heldout import HELDOUT_IDS, HELDOUT_TASKS
from circuitlasso.data.interpbench.hub import HubCase, load_hub_case
from circuitlasso.data.interpbench.ioi import IOIPair, encode_ioi, ioi_prompts
from circuitlasso.data.interpbench.programs import CASE_IDS, CASES, TracrTask, get_task
from circuitlasso.data.interpbench.prompts import PromptPairs, make_prompts

__all__ = [
    "CASES",
    "CASE_IDS",
    "HELDOUT_IDS",
    "HELDOUT_TASKS",
    "VARIANTS",
    "CompiledTask",
    "HubCase",
    "IOIPair",
    "PromptPairs",
    "TracrTask",
    "compile_case",
    "compile_task",
    "decode_outputs",
    "encode_inputs",
    "encode_ioi",
    "get_task",
    "ioi_prompts",
    "load_hub_case",
    "make_prompts",
    "to_hooked_transformer",
]
