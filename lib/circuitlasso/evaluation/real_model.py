"""The real model's report: its SAEs, its conversion, and what its features know of CoLA.

For all-MiniLM-L6-v2 (:mod:`circuitlasso.data.minilm`) with the SAEs trained here
(:mod:`circuitlasso.data.minilm_saes`), and for the same encoder fine-tuned on CoLA
(:mod:`circuitlasso.data.minilm_cola`, which adds its own dev accuracy and MCC): each SAE's
explained variance and dead share on CoLA's in-domain dev sentences (from the build's report),
the largest difference of the converted ``HookedEncoder``'s hidden states from the HF model's
carrying the same weights, and the label readout ``A_{L,y}`` fitted on the last layer's
token-averaged features of the training sentences, scored on the dev sentences against the
majority class and by Matthews correlation (CoLA's GLUE metric).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch
from sklearn.metrics import matthews_corrcoef
from sklearn.model_selection import GridSearchCV
from transformer_lens import HookedEncoder, HookedTransformer

from circuitlasso.collect import collect_sae_features
from circuitlasso.collect.layers import LayerFeatures
from circuitlasso.data.cola import load_cola
from circuitlasso.data.decoder_saes import decoder_saes_report
from circuitlasso.data.gemma3 import load_hf_gemma3
from circuitlasso.data.minilm import N_LAYERS, max_abs_diff_vs_hf
from circuitlasso.data.minilm_cola import encoder_weights, finetune_report, finetuned_saes_report
from circuitlasso.data.minilm_saes import minilm_saes_report
from circuitlasso.data.minimal_pairs import load_minimal_pairs
from circuitlasso.data.models import (
    DECODER_NAME,
    ENCODER_NAME,
    FINETUNED_NAME,
    GEMMA3_NAME,
    decoder_sae_set,
    load_model,
    load_saes,
)
from circuitlasso.data.smollm2 import load_hf_smollm2
from circuitlasso.data.smollm2_saes import CIRCUIT_LAYERS
from circuitlasso.estimator import CircuitLasso
from circuitlasso.evaluation.acceptability import minimal_pair_accuracy, minimal_pair_table
from circuitlasso.forward import Model, SAEMap, prompt_batches

HEADLINE = (
    "sae_explained_variance_min",
    "sae_dead_fraction_max",
    "readout_test_accuracy",
    "readout_majority_baseline",
    "readout_test_mcc",
    "hidden_state_max_abs_diff_vs_hf",
)
FINETUNED_HEADLINE = ("finetuned_dev_accuracy", "finetuned_dev_mcc", *HEADLINE)
DECODER_HEADLINE = (
    "logit_max_abs_diff_vs_hf",
    "minimal_pair_accuracy",
    "sae_explained_variance_min",
    "sae_dead_fraction_max",
    "readout_test_accuracy",
    "readout_majority_baseline",
    "readout_test_mcc",
)
GEMMA3_HEADLINE = DECODER_HEADLINE[:4]
"""The second decoder's headline: its conversion, minimal pairs and SAEs (no CoLA readout)."""
HF_LOADERS = {DECODER_NAME: load_hf_smollm2, GEMMA3_NAME: load_hf_gemma3}
"""Each real decoder's HF model and tokenizer, loaded offline."""


LAM_RATIOS = (0.02, 0.05, 0.1, 0.2, 0.5)


def cola_readout(
    model: Model,
    saes: SAEMap,
    *,
    layer: int | None = None,
    lam_ratios: tuple[float, ...] = LAM_RATIOS,
    progress: bool = True,
) -> dict[str, Any]:
    """The paper's CoLA readout: ``A_{L,y}`` fitted on the token-averaged features of one layer
    of ``saes`` on CoLA's training sentences, its penalty chosen among ``lam_ratios`` by 3-fold
    cross-validation (a ``GridSearchCV`` of :class:`~circuitlasso.estimator.CircuitLasso`),
    scored on the in-domain dev sentences: accuracy, the majority class, MCC, and its number of
    nonzero coefficients. Fitted on every layer of ``saes`` (one forward pass collects them
    all): ``readout_by_layer`` holds each layer's; the headline keys are those of ``layer``
    (default: the last)."""
    train, dev = load_cola("train"), load_cola("dev")
    Z_train = collect_sae_features(model, saes, list(train.sentence), progress=progress)
    Z_dev = collect_sae_features(model, saes, list(dev.sentence), progress=progress)
    layer = max(Z_train) if layer is None else layer
    if layer not in Z_train:
        raise ValueError(f"no SAE on layer {layer} for the readout; layers: {sorted(Z_train)}")
    y_train, y_dev = train.label.to_numpy(), dev.label.to_numpy()
    by_layer = {}
    for read in Z_train:
        search = GridSearchCV(CircuitLasso(), {"label_lam_ratio": list(lam_ratios)}, cv=3)
        readout = search.fit(LayerFeatures({read: Z_train[read]}), y_train).best_estimator_
        dev_features = LayerFeatures({read: Z_dev[read]})
        by_layer[read] = {
            "readout_lam_ratio": readout.label_lam_ratio,
            "readout_test_accuracy": readout.score(dev_features, y_dev),
            "readout_test_mcc": float(matthews_corrcoef(y_dev, readout.predict(dev_features))),
            "readout_features": int(np.count_nonzero(readout.coef_)),
        }
    majority = float(max(y_dev.mean(), 1 - y_dev.mean()))
    return {**by_layer[layer], "readout_layer": layer, "readout_majority_baseline": majority,
            "readout_by_layer": by_layer}  # fmt: skip


def real_model_report(
    model_name: str = ENCODER_NAME,
    *,
    lam_ratios: tuple[float, ...] = LAM_RATIOS,
    progress: bool = True,
) -> dict[str, Any]:
    """The report of the sentence model (``"all-minilm-l6-v2"``) or the one fine-tuned on CoLA
    (``"all-minilm-l6-v2-cola"``, whose report adds its own dev accuracy and MCC) as a dict:
    the :data:`HEADLINE` numbers, ``layers`` (per-layer SAE quality), the readout's penalty
    (``readout_lam_ratio``, chosen among ``lam_ratios`` by 3-fold cross-validation on the
    training sentences, a ``GridSearchCV`` of the :class:`~circuitlasso.estimator.CircuitLasso`)
    and its ``readout_features`` (nonzero coefficients)."""
    if model_name not in (ENCODER_NAME, FINETUNED_NAME):
        raise ValueError(f"no report for {model_name!r}: {ENCODER_NAME} or {FINETUNED_NAME}")
    finetuned = model_name == FINETUNED_NAME
    model = load_model(model_name)
    assert isinstance(model, HookedEncoder)
    layer = N_LAYERS - 1
    saes = load_saes(model_name, [layer])
    dev = load_cola("dev")
    report = finetuned_saes_report() if finetuned else minilm_saes_report()
    report.update(cola_readout(model, saes, lam_ratios=lam_ratios, progress=progress))
    report["hidden_state_max_abs_diff_vs_hf"] = max_abs_diff_vs_hf(
        model, list(dev.sentence), weights=encoder_weights() if finetuned else None
    )
    if finetuned:
        tuned = finetune_report()
        report["finetuned_dev_accuracy"] = tuned["dev_accuracy"]
        report["finetuned_dev_mcc"] = tuned["dev_mcc"]
        report["finetune"] = tuned
    return report


def format_real_model_report(report: dict[str, Any]) -> str:
    """The per-layer SAE table (with the readout on each layer it was fitted on) and the
    headline readout (where the report has one), as text."""
    table = pd.DataFrame(report["layers"]).T
    table.index = table.index.astype(int)
    if "readout_by_layer" in report:
        readouts = pd.DataFrame(report["readout_by_layer"]).T.rename(
            columns=lambda name: name.replace("readout_test_", "readout_")
        )
        table = table.join(readouts, how="left")
    cfg = report["config"]
    lines = [
        f"SAEs: TopK, width {cfg['width']}, k as l0 below, trained on "
        f"{report['train_tokens']} tokens of CoLA train, scored on {report['dev_tokens']} "
        "tokens of CoLA in-domain dev",
        table.rename_axis("layer").to_string(float_format=lambda v: f"{v:.3f}"),
    ]
    if "readout_layer" in report:
        lines.append(
            f"readout on layer {report['readout_layer']} ({report['readout_features']} features, "
            f"lam = {report['readout_lam_ratio']:g} lam_max): dev accuracy "
            f"{report['readout_test_accuracy']:.3f} (MCC {report['readout_test_mcc']:.3f}), "
            f"majority class {report['readout_majority_baseline']:.3f}"
        )
    lines.append(
        "hidden states vs the HF model: max abs diff "
        f"{report['hidden_state_max_abs_diff_vs_hf']:.2e}"
    )
    return "\n".join(lines)


@torch.no_grad()
def logit_max_abs_diff_vs_hf(
    model: HookedTransformer,
    sentences: list[str],
    *,
    name: str = DECODER_NAME,
    batch_size: int = 16,
) -> float:
    """Largest absolute difference between the converted decoder ``name``'s logits and the HF
    model's (:data:`HF_LOADERS`) at every real position of ``sentences``, in right-padded
    batches (causal attention: padding on the right changes no earlier position)."""
    hf, _ = HF_LOADERS[name]()
    worst = 0.0
    for tokens, real in prompt_batches(model, sentences, batch_size):
        ours = model(tokens.to(model.cfg.device), return_type="logits").float().cpu()
        diff = (ours - hf(input_ids=tokens).logits)[real].abs().max()
        worst = max(worst, float(diff))
    return worst


def decoder_report(
    name: str = DECODER_NAME,
    *,
    lam_ratios: tuple[float, ...] = LAM_RATIOS,
    progress: bool = True,
) -> dict[str, Any]:
    """The report of real decoder ``name`` as a dict: its conversion against the HF model on
    CoLA's dev sentences, its own judgement of the project's minimal pairs by log-probability,
    its SAEs' worst layer and ``layers`` (per-layer SAE quality), ``minimal_pairs`` (accuracy
    by phenomenon); for SmolLM2 (:data:`DECODER_HEADLINE`) also the CoLA readout on the last
    layer its circuits keep (:data:`~circuitlasso.data.smollm2_saes.CIRCUIT_LAYERS`),
    ``readout_by_layer`` (on every layer with an SAE) and the readout's penalty and size;
    Gemma-3's headline is :data:`GEMMA3_HEADLINE`."""
    model = load_model(name)
    assert isinstance(model, HookedTransformer)
    sae_set = decoder_sae_set(name)
    report = decoder_saes_report(sae_set)
    if name == DECODER_NAME:
        saes = load_saes(name, sae_set.layers, model=model)
        report.update(cola_readout(model, saes, layer=CIRCUIT_LAYERS[-1], lam_ratios=lam_ratios,
                                   progress=progress))  # fmt: skip
    pairs = minimal_pair_table(model, load_minimal_pairs())  # after the model's BOS
    report["minimal_pairs"] = minimal_pair_accuracy(pairs)
    report["minimal_pair_accuracy"] = report["minimal_pairs"]["all"]
    dev = list(load_cola("dev").sentence)
    report["logit_max_abs_diff_vs_hf"] = logit_max_abs_diff_vs_hf(model, dev[:64], name=name)
    return report


def format_decoder_report(report: dict[str, Any]) -> str:
    """The decoder's report (:func:`decoder_report`) as text: its SAEs and readout as
    :func:`format_real_model_report` writes them, then its own judgement of minimal pairs."""
    sae_and_readout = format_real_model_report(
        {**report, "hidden_state_max_abs_diff_vs_hf": report["logit_max_abs_diff_vs_hf"]}
    ).replace("hidden states vs the HF model", "logits vs the HF model")
    pairs = ", ".join(f"{name} {share:.2f}" for name, share in report["minimal_pairs"].items())
    return f"{sae_and_readout}\nminimal pairs judged by log-probability: {pairs}"
