"""InterpBench's IOI case: circuit-discovery methods on the trained IOI model against its circuit.

The prompts are :mod:`circuitlasso.data.interpbench.ioi`'s; see its docstring for how EAP's
metric and CircuitLasso's averages read them and why the logits are restricted to name tokens.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from transformers import PreTrainedTokenizerBase

from circuitlasso.data.interpbench.hub import load_hub_case
from circuitlasso.data.interpbench.ioi import (
    IOI_CASE,
    Corruption,
    encode_ioi,
    ioi_prompts,
    name_token_ids,
    restrict_unembedding,
)
from circuitlasso.evaluation.interpbench.evaluate import (
    DEFAULT_SETTINGS,
    RunSettings,
    evaluate_model,
)


def evaluate_ioi(
    source: str | Path | None = None,
    settings: RunSettings = DEFAULT_SETTINGS,
    corruption: Corruption = "abc",
    revision: str | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    name_logits: bool = True,
) -> pd.DataFrame:
    """Evaluate the methods of ``settings`` on InterpBench's trained IOI model against its hub
    circuit.

    ``source`` is a local directory holding the ``ioi`` case folder in the hub's format, or
    ``None`` to download it (see :func:`circuitlasso.data.interpbench.load_hub_case`).
    ``name_logits`` reads the logits on the name tokens only (see module docstring). Rows as
    :func:`circuitlasso.evaluation.interpbench.evaluate_case`, with case ``"ioi"`` and variant
    ``"trained"``.
    """
    case = load_hub_case(IOI_CASE, source, revision, tokenizer=tokenizer)
    model = case.model
    if model.tokenizer is None:
        raise ValueError("the IOI model's config names no tokenizer; pass tokenizer=")
    prompts = encode_ioi(
        ioi_prompts(settings.n_prompts, settings.seed, corruption),
        model.tokenizer,
        prepend_bos=bool(model.cfg.default_prepend_bos),
    )
    if prompts.clean.shape[1] > model.cfg.n_ctx:
        raise ValueError(
            f"IOI prompts have {prompts.clean.shape[1]} tokens, more than the model's "
            f"n_ctx={model.cfg.n_ctx}"
        )
    if name_logits:
        model = restrict_unembedding(model, name_token_ids(model.tokenizer))
    table = evaluate_model(model, case.ground_truth, prompts, settings)
    table.insert(0, "variant", "trained")
    table.insert(0, "case", IOI_CASE)
    return table
