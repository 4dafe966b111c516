"""The section's models, one run each: a model and the SAEs its comparison needs
(:func:`load_run`), compared in turn (:func:`compare_models`); on the toy world the automatic
gender-feature rule is also checked against the planted truth
(:func:`~circuitlasso.evaluation.debias.toy.rule_vs_toy_truth`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso.data.models import load_model, load_saes, sae_layers_of
from circuitlasso.evaluation.debias.compare import Comparison, ComparisonOptions, compare_methods
from circuitlasso.evaluation.debias.data import TOY_CONCEPTS
from circuitlasso.evaluation.debias.toy import TOY_MODEL, rule_vs_toy_truth


def load_run(
    model_name: str, layer: int, *, device: str = "cpu"
) -> tuple[HookedTransformer, dict[int, SAE]]:
    """The model ``model_name`` and its residual-stream SAEs up to ``layer`` (of every layer
    ``0..layer``, or of those it has, :func:`~circuitlasso.data.models.sae_layers_of`: SmolLM2's
    blocks 4, 9, ...), keyed by layer: what
    :func:`~circuitlasso.evaluation.debias.compare.compare_methods` needs to probe
    ``blocks.<layer>.hook_resid_post`` (SHIFT reads every SAE up to it). Hub models and SAE
    releases as :func:`~circuitlasso.data.models.load_model` and
    :func:`~circuitlasso.data.models.load_saes` name them (Pythia-70M-deduped: Marks et al.'s;
    Gemma-2: Gemma Scope's canonical 16k); each SAE is checked to fit the model."""
    if layer < 0:
        raise ValueError(f"layer must be >= 0, got {layer}")
    model = load_model(model_name, device=device)
    if not isinstance(model, HookedTransformer):
        raise ValueError(f"{model_name} is not a HookedTransformer, which compare_methods needs")
    if layer >= model.cfg.n_layers:
        raise ValueError(
            f"{model_name} has layers 0..{model.cfg.n_layers - 1}; cannot probe layer {layer}"
        )
    held = [s for s in sae_layers_of(model_name, model.cfg.n_layers) if s <= layer]
    if layer not in held:
        raise ValueError(
            f"{model_name} has SAEs on layers {sae_layers_of(model_name, model.cfg.n_layers)}; "
            f"the probes read layer {layer}, which has none"
        )
    saes = load_saes(model_name, held, "resid_post", device=device, model=model)
    return model, saes


def compare_models(
    runs: Mapping[str, int],
    splits: Mapping[str, pd.DataFrame],
    professions: Sequence[str],
    concepts: Mapping[str, Sequence[str]] | None,
    options: ComparisonOptions | None = None,
    *,
    device: str = "cpu",
    shift_gender: Mapping[str, Sequence[Sequence[int]]] | None = None,
    circuitlasso_gender: Mapping[str, Sequence[Sequence[int]]] | None = None,
) -> tuple[dict[str, Comparison], dict[str, pd.DataFrame]]:
    """:func:`~circuitlasso.evaluation.debias.compare.compare_methods` with ``options`` (default:
    :class:`~circuitlasso.evaluation.debias.compare.ComparisonOptions`' own) on each
    model of ``runs`` (model name -> the layer its probes read), CBP's ``concepts`` (None:
    :data:`~circuitlasso.evaluation.debias.data.TOY_CONCEPTS`), the model and its SAEs loaded
    by :func:`load_run` one at a time; the comparisons, and for the toy world the rule against
    its ground truth (:func:`~circuitlasso.evaluation.debias.toy.rule_vs_toy_truth`), by model.

    ``shift_gender`` / ``circuitlasso_gender``: manual gender features of each model, model name
    -> ``[layer, feature]`` pairs (a model not named: the automatic rule).
    """
    if not runs:
        raise ValueError("runs names no model; give at least one model name -> layer")
    options = options or ComparisonOptions()
    concepts = TOY_CONCEPTS if concepts is None else concepts
    comparisons, truths = {}, {}
    for name, layer in runs.items():
        model, saes = load_run(name, int(layer), device=device)
        comparisons[name] = compare_methods(
            model,
            saes,
            int(layer),
            splits,
            professions,
            concepts,
            options,
            shift_gender=(shift_gender or {}).get(name),
            circuitlasso_gender=(circuitlasso_gender or {}).get(name),
        )
        if name == TOY_MODEL:
            truths[name] = rule_vs_toy_truth(
                model, saes, comparisons[name], splits, batch_size=options.batch_size
            )
        del model, saes  # before the next model loads
    return comparisons, truths
