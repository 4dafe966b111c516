"""Quality report of a toy world: LM next-token metrics, SAE quality per layer, a linear probe
on final-layer SAE features, and features whose top-activating tokens are a planted category.

Held-out data: the LM is scored on toy-CoLA's acceptable test sentences and toy Bias in Bios'
balanced test biographies (neither seen in training); the SAEs on all toy-CoLA test sentences
(acceptable or not) and the same biographies, at every non-special token (``<bos>``/``<pad>``
excluded, as in SAE training).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sae_lens import SAE
from sklearn.linear_model import LogisticRegression
from transformer_lens import HookedTransformer

from circuitlasso.data.sae_training import sae_quality
from circuitlasso.data.toyworld.artifacts import (
    load_toy_model,
    load_toy_saes,
    model_config,
    toy_dir,
)
from circuitlasso.data.toyworld.datasets import load_toy_bias_in_bios, load_toy_cola, minimal_pairs
from circuitlasso.data.toyworld.grammar import VIOLATIONS, token_categories
from circuitlasso.data.toyworld.lm import (
    encode_documents,
    evaluate_lm,
    resid_hook,
    residuals,
    sequence_log_probs,
    tokenizer_of,
)

THRESHOLDS = {"explained_variance_min": 0.85, "dead_fraction_max": 0.10}
MINIMAL_PAIRS = 500
TOP_K = 20
ENCODE_BATCH = 4096


@torch.no_grad()
def encode(sae: SAE, x: torch.Tensor) -> torch.Tensor:
    """SAE features ``(n_tokens, d_sae)`` of ``x: (n_tokens, d_in)``, batched."""
    return torch.cat([sae.encode(x[i : i + ENCODE_BATCH]) for i in range(0, len(x), ENCODE_BATCH)])


def minimal_pair_accuracy(model: HookedTransformer, seed: int) -> dict[str, float]:
    """Per violation type, the share of minimal pairs where the LM gives the acceptable
    sentence the higher total log-probability (a BLiMP-style grammar check)."""
    accuracy = {}
    tokenizer = tokenizer_of(model)
    for violation in VIOLATIONS:
        pairs = minimal_pairs(seed, violation, MINIMAL_PAIRS)
        good, bad = (
            sequence_log_probs(model, encode_documents(tokenizer, list(s), model.cfg.n_ctx))
            for s in zip(*pairs, strict=True)
        )
        accuracy[violation] = float((good > bad).float().mean())
    return accuracy


def mean_pool(features: torch.Tensor, owners: torch.Tensor, n_documents: int) -> torch.Tensor:
    """Per-document mean ``(n_documents, d)`` of token ``features: (n_tokens, d)``."""
    sums = torch.zeros(n_documents, features.shape[1]).index_add_(0, owners, features)
    counts = torch.bincount(owners, minlength=n_documents).clamp(min=1)
    return sums / counts[:, None]


def probe(model: HookedTransformer, sae: SAE, layer: int, seed: int) -> dict[str, Any]:
    """Logistic regression on mean-pooled ``layer`` SAE features: toy-CoLA train -> test. It is
    the l2 probe of :func:`circuitlasso.evaluation.debias.probes.fit_probe` (scikit-learn's
    default l2 penalty), called here directly because ``data`` may not import from a later stage;
    the circuit's l1 readout is :func:`circuitlasso.circuits.features.fit_label`."""
    splits = {s: load_toy_cola(s, seed) for s in ("train", "test")}
    pooled = {}
    for split, frame in splits.items():
        docs = encode_documents(tokenizer_of(model), frame["sentence"].tolist(), model.cfg.n_ctx)
        acts, _, owners = residuals(model, docs, [layer])
        pooled[split] = mean_pool(encode(sae, acts[layer]), owners, len(docs)).numpy()
    classifier = LogisticRegression(max_iter=5000).fit(pooled["train"], splits["train"]["label"])
    test = splits["test"]
    predicted = classifier.predict(pooled["test"])
    recall = {
        kind: float((predicted[mask] == test["label"].to_numpy()[mask]).mean())
        for kind in sorted(test["violation"].unique())
        for mask in [test["violation"].to_numpy() == kind]
    }
    return {
        "train_accuracy": float(classifier.score(pooled["train"], splits["train"]["label"])),
        "test_accuracy": float((predicted == test["label"].to_numpy()).mean()),
        "chance_accuracy": float(max(test["label"].mean(), 1 - test["label"].mean())),
        "recall_by_violation": recall,
    }


def top_activating_tokens(features: torch.Tensor, k: int = TOP_K) -> dict[int, np.ndarray]:
    """For each feature with at least ``k`` activations, the token rows of its ``k`` largest
    activations, from ``features: (n_tokens, d_sae)``."""
    token_rows, feature_cols = features.nonzero(as_tuple=True)
    values = features[token_rows, feature_cols].numpy()
    rows, cols = token_rows.numpy(), feature_cols.numpy()
    order = np.lexsort((-values, cols))
    rows, cols = rows[order], cols[order]
    starts = np.flatnonzero(np.r_[True, cols[1:] != cols[:-1]])
    ends = np.r_[starts[1:], len(cols)]
    return {int(cols[s]): rows[s : s + k] for s, e in zip(starts, ends, strict=True) if e - s >= k}


def category_features(
    top_rows: dict[int, np.ndarray], words: np.ndarray, categories: dict[str, set[str]]
) -> list[dict[str, Any]]:
    """Per category, the feature whose top-activating tokens are most often in the category
    (ties: more distinct category words), with its precision and top words."""
    examples = []
    for name, members in categories.items():
        best, best_key = None, (-1.0, -1)
        for feature, rows in top_rows.items():
            top_words = words[rows]
            inside = np.isin(top_words, list(members))
            key = (float(inside.mean()), len(set(top_words[inside])))
            if key > best_key:
                best, best_key = feature, key
        if best is None:
            continue
        counts = Counter(words[top_rows[best]].tolist()).most_common(6)
        examples.append(
            {
                "category": name,
                "feature": best,
                "precision": best_key[0],
                "top_tokens": [[word, count] for word, count in counts],
            }
        )
    return examples


def _held_out_documents(seed: int) -> dict[str, list[str]]:
    test = load_toy_cola("test", seed)
    bios = load_toy_bias_in_bios(seed)["balanced_test"]["text"].tolist()
    return {
        "acceptable_sentences": test.loc[test["label"] == 1, "sentence"].tolist(),
        "all_sentences": test["sentence"].tolist(),
        "biographies": bios,
    }


def toy_report(path: Path | str | None = None) -> dict[str, Any]:
    """The quality report of the toy world at ``path`` (default: the one shipped in the package)."""
    root = toy_dir(path)
    seed = int(model_config(root)["seed"])
    model = load_toy_model(root)
    saes = load_toy_saes(path=root)
    layers = sorted(saes)
    held_out = _held_out_documents(seed)
    encoded = {
        k: encode_documents(tokenizer_of(model), v, model.cfg.n_ctx) for k, v in held_out.items()
    }
    lm_texts = ("acceptable_sentences", "biographies")
    lm_overall = evaluate_lm(model, encoded[lm_texts[0]] + encoded[lm_texts[1]])
    lm_by_text = {
        k: evaluate_lm(model, encoded[k]) | {"documents": len(encoded[k])} for k in lm_texts
    }
    eval_docs = encoded["all_sentences"] + encoded["biographies"]
    acts, ids, _ = residuals(model, eval_docs, layers)
    words = np.array(tokenizer_of(model).convert_ids_to_tokens(ids.tolist()))
    sae_rows = [
        {"layer": layer, "hook": resid_hook(layer), "d_sae": saes[layer].cfg.d_sae}
        | sae_quality(saes[layer], acts[layer])
        for layer in layers
    ]
    final = layers[-1]
    top_rows = top_activating_tokens(encode(saes[final], acts[final]))
    probe_result = probe(model, saes[final], final, seed)
    return {
        "lm_next_token_loss": lm_overall["loss"],
        "lm_next_token_accuracy": lm_overall["accuracy"],
        "lm_by_text": lm_by_text,
        "lm_minimal_pair_accuracy": minimal_pair_accuracy(model, seed),
        "saes": sae_rows,
        "sae_eval_tokens": len(ids),
        "sae_explained_variance_min": min(r["explained_variance"] for r in sae_rows),
        "sae_dead_fraction_max": max(r["dead_fraction"] for r in sae_rows),
        "probe_layer": final,
        "probe_test_accuracy": probe_result["test_accuracy"],
        "probe": probe_result,
        "category_features_layer": final,
        "category_features": category_features(top_rows, words, token_categories()),
        "thresholds": THRESHOLDS,
    }


def report_summary(report: dict[str, Any]) -> dict[str, Any]:
    """The report's headline numbers, the keys of ``notebooks/reference/toy.yaml``'s toyworld
    section: the LM's next-token accuracy and loss, its minimal-pair accuracy per violation, the
    probe's test accuracy and recall per violation, ``sae_explained_variance`` and
    ``sae_dead_fraction`` as {layer (str): value}, and ``category_precision`` as
    {category: precision of its best feature}."""
    keys = ("lm_next_token_accuracy", "lm_next_token_loss", "lm_minimal_pair_accuracy")
    summary = {key: report[key] for key in (*keys, "probe_test_accuracy")}
    summary["probe_recall_by_violation"] = report["probe"]["recall_by_violation"]
    for key in ("explained_variance", "dead_fraction"):
        summary[f"sae_{key}"] = {str(sae["layer"]): sae[key] for sae in report["saes"]}
    summary["category_precision"] = {
        c["category"]: c["precision"] for c in report["category_features"]
    }
    return summary


def format_report(report: dict[str, Any]) -> str:
    """The report as plain-text tables."""
    lines = ["Toy world report", "", "Language model (held-out next-token prediction)"]
    lines.append(f"  {'text':<22}{'documents':>10}{'loss':>9}{'accuracy':>10}")
    for text, row in report["lm_by_text"].items():
        lines.append(
            f"  {text:<22}{row['documents']:>10}{row['loss']:>9.3f}{row['accuracy']:>10.3f}"
        )
    lines.append(
        f"  {'all':<22}{'':>10}{report['lm_next_token_loss']:>9.3f}"
        f"{report['lm_next_token_accuracy']:>10.3f}"
    )
    lines.append(
        f"  prefers the acceptable sentence of {MINIMAL_PAIRS} same-length minimal pairs: "
        + ", ".join(f"{k} {v:.3f}" for k, v in report["lm_minimal_pair_accuracy"].items())
    )
    limits = report["thresholds"]
    lines += [
        "",
        f"SAEs on hook_resid_post ({report['sae_eval_tokens']} held-out tokens; targets: "
        f"explained variance >= {limits['explained_variance_min']}, "
        f"dead fraction <= {limits['dead_fraction_max']})",
        f"  {'layer':<7}{'d_sae':>7}{'L0':>8}{'expl. var.':>12}{'dead':>8}",
    ]
    for row in report["saes"]:
        lines.append(
            f"  {row['layer']:<7}{row['d_sae']:>7}{row['l0']:>8.1f}"
            f"{row['explained_variance']:>12.3f}{row['dead_fraction']:>8.3f}"
        )
    probe_result = report["probe"]
    lines += [
        "",
        f"Probe: logistic regression on mean-pooled layer-{report['probe_layer']} SAE features, "
        "toy-CoLA train -> test",
        f"  test accuracy {probe_result['test_accuracy']:.3f} "
        f"(train {probe_result['train_accuracy']:.3f}; "
        f"majority class {probe_result['chance_accuracy']:.3f})",
        "  accuracy by violation: "
        + ", ".join(f"{k} {v:.3f}" for k, v in probe_result["recall_by_violation"].items()),
        "",
        f"Planted categories: best layer-{report['category_features_layer']} feature by precision "
        f"of its top {TOP_K} activating tokens",
        f"  {'category':<20}{'feature':>8}{'precision':>11}  top tokens",
    ]
    for row in report["category_features"]:
        tokens = ", ".join(f"{w} x{n}" for w, n in row["top_tokens"])
        lines.append(
            f"  {row['category']:<20}{row['feature']:>8}{row['precision']:>11.2f}  {tokens}"
        )
    return "\n".join(lines)
