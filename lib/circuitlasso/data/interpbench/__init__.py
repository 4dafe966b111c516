"""InterpBench tasks compiled with tracr, converted to TransformerLens, with known circuits.

``programs`` defines the 16 RASP tasks, ``heldout`` a held-out suite of other RASP tasks,
``compile`` compiles them and derives the ground truth, ``convert`` builds the HookedTransformer
(exact or with distractor heads), ``prompts`` pairs clean and corrupted inputs, ``hub`` loads the
trained hub models and ``ioi`` writes IOI prompts for the hub's IOI model. Running methods on them
is :mod:`circuitlasso.evaluation.interpbench`.

The names below load on first use: tracr and JAX, which compiling needs, are imported only by
the modules that compile (``compile``, ``convert``, ``heldout``, ``programs``, ``prompts``), so
that IOI prompts and the hub loader (``ioi``, ``hub``) come without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from circuitlasso._lazy import lazy_names

_EXPORTS = {
    "CompiledTask": ".compile",
    "compile_case": ".compile",
    "compile_task": ".compile",
    "VARIANTS": ".convert",
    "decode_outputs": ".convert",
    "encode_inputs": ".convert",
    "to_hooked_transformer": ".convert",
    "HELDOUT_IDS": ".heldout",
    "HELDOUT_TASKS": ".heldout",
    "HubCase": ".hub",
    "load_hub_case": ".hub",
    "IOIPair": ".ioi",
    "encode_ioi": ".ioi",
    "ioi_prompts": ".ioi",
    "CASE_IDS": ".programs",
    "CASES": ".programs",
    "TracrTask": ".programs",
    "get_task": ".programs",
    "make_prompts": ".prompts",
}

__all__ = [
    "CASES",
    "CASE_IDS",
    "CompiledTask",
    "HELDOUT_IDS",
    "HELDOUT_TASKS",
    "HubCase",
    "IOIPair",
    "TracrTask",
    "VARIANTS",
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

if TYPE_CHECKING:
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
    from circuitlasso.data.interpbench.prompts import make_prompts


__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
