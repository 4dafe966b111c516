"""Node ablation, attribution and edge ablation against direct computations.

Node ablation runs on the committed toy model and SAEs; its references are the unhooked model,
the collector's token-averaged features and the label fit's own ``predict_proba``. The surrogate
tests build layer-pair fits by hand and compare with a dense recursion written out with explicit
intercepts and residuals.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso.ablate import (
    Surrogate,
    attribution_scores,
    edge_ablation_sweep,
    feature_means,
    metric_with_ablation,
    node_ablation_sweep,
    rank_features,
    splice_hooks,
)
from circuitlasso.collect import collect_sae_features
from circuitlasso.datasets.toyworld import load_toy_cola
from circuitlasso.feature_circuits import LabelFit, LayerPairFit, fit_label
from circuitlasso.models import load_model, load_saes
from circuitlasso.trace import LayerRegressions, node_name, trace_circuit

torch.set_num_threads(1)

LAST = 3
N_TRAIN, N_REFERENCE, N_PROMPTS = 300, 64, 12


@pytest.fixture(scope="module")
def toy() -> tuple[HookedTransformer, dict[int, SAE]]:
    model = load_model("toy")
    return model, load_saes("toy", range(LAST + 1), model=model)


@pytest.fixture(scope="module")
def cola() -> dict[str, list]:
    train = load_toy_cola("train").iloc[: N_TRAIN + N_REFERENCE]
    test = load_toy_cola("test")
    unacceptable = test[test["label"] == 0].iloc[:N_PROMPTS]
    test = test.iloc[:N_PROMPTS]
    return {
        "train": list(train["sentence"][:N_TRAIN]),
        "y": list(train["label"][:N_TRAIN]),
        "reference": list(train["sentence"][N_TRAIN:]),
        "prompts": list(test["sentence"]),
        "unacceptable": list(unacceptable["sentence"]),
    }


@pytest.fixture(scope="module")
def label_fit(toy, cola, tmp_path_factory: pytest.TempPathFactory) -> LabelFit:
    model, saes = toy
    Z = collect_sae_features(model, {LAST: saes[LAST]}, cola["train"],
                             cache_dir=tmp_path_factory.mktemp("z"), progress=False)  # fmt: skip
    return fit_label(Z[LAST], cola["y"], lam=1e-4, layer=LAST, min_prompts=5)


@pytest.fixture(scope="module")
def means(toy, cola) -> dict[int, torch.Tensor]:
    model, saes = toy
    return feature_means(model, saes, cola["reference"])


def tokens_and_real(model: HookedTransformer, prompts: list[str]) -> tuple[torch.Tensor, ...]:
    tokens = model.to_tokens(prompts, padding_side="right")
    tokenizer = model.tokenizer
    assert tokenizer is not None
    special = [tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id]
    return tokens, ~torch.isin(tokens, torch.tensor(special))


# ---------------------------------------------------------------- node ablation in the model


def test_unablated_splice_reproduces_the_logits(toy, cola) -> None:
    model, saes = toy
    tokens, real = tokens_and_real(model, cola["prompts"])
    with torch.inference_mode():
        clean = model(tokens)
        spliced = model.run_with_hooks(tokens, fwd_hooks=splice_hooks(saes, real))
        # the splice does change the activations when the error term is left out
        lossy = model.run_with_hooks(
            tokens,
            fwd_hooks=[(str(saes[1].cfg.metadata.hook_name), lambda x, hook: saes[1](x))],
        )
    torch.testing.assert_close(spliced, clean, atol=1e-4, rtol=0)  # float32
    assert (lossy - clean).abs().max() > 1e-2


def test_unablated_metric_is_the_label_fit_on_collected_features(
    toy, cola, label_fit, tmp_path: Path
) -> None:
    model, saes = toy
    Z = collect_sae_features(model, {LAST: saes[LAST]}, cola["prompts"], cache_dir=tmp_path,
                             progress=False)  # fmt: skip
    expected = float(np.mean(2 * label_fit.predict_proba(Z[LAST]) - 1))
    got = metric_with_ablation(model, saes, label_fit, cola["prompts"], batch_size=5)
    assert got == pytest.approx(expected, abs=1e-5)


def test_labels_sign_the_metric_per_prompt(toy, cola, label_fit, tmp_path: Path) -> None:
    model, saes = toy
    prompts = cola["prompts"]
    y = np.arange(len(prompts)) % 2
    Z = collect_sae_features(model, {LAST: saes[LAST]}, prompts, cache_dir=tmp_path,
                             progress=False)  # fmt: skip
    expected = float(np.mean((2 * y - 1) * (2 * label_fit.predict_proba(Z[LAST]) - 1)))
    got = metric_with_ablation(model, saes, label_fit, prompts, labels=y, batch_size=5)
    assert got == pytest.approx(expected, abs=1e-5)
    with pytest.raises(ValueError, match="labels must be 12 values in"):
        metric_with_ablation(model, saes, label_fit, prompts, labels=y[:-1])
    with pytest.raises(ValueError, match="labels must be 12 values in"):
        metric_with_ablation(model, saes, label_fit, prompts, labels=2 * y)


def test_feature_means_average_over_real_tokens(toy, cola, means) -> None:
    model, saes = toy
    tokens, real = tokens_and_real(model, cola["reference"])
    with torch.inference_mode():
        _, cache = model.run_with_cache(tokens, names_filter=str(saes[2].cfg.metadata.hook_name))
        z = saes[2].encode(cache[str(saes[2].cfg.metadata.hook_name)])
    torch.testing.assert_close(means[2], z[real].mean(0), atol=1e-5, rtol=1e-5)


def test_ablating_dead_features_changes_nothing(
    toy, cola, label_fit, means, tmp_path: Path
) -> None:
    model, saes = toy
    Z = collect_sae_features(model, saes, cola["prompts"], cache_dir=tmp_path, progress=False)
    dead = {
        layer: set(np.flatnonzero((np.asarray(Z[layer].sum(0)).ravel() == 0)
                                  & (means[layer].numpy() == 0))[:50].tolist())
        for layer in saes
    }  # fmt: skip
    assert all(len(f) == 50 for f in dead.values())
    full = metric_with_ablation(model, saes, label_fit, cola["prompts"])
    ablated = metric_with_ablation(model, saes, label_fit, cola["prompts"], dead,
                                   ablate_inside=True, means=means)  # fmt: skip
    assert ablated == pytest.approx(full, abs=1e-6)


def test_ablating_the_top_label_features_moves_m_to_empty(toy, cola, label_fit, means) -> None:
    model, saes = toy
    # unacceptable prompts: m(M) is far from m(empty), the mean features reading as acceptable
    prompts = cola["unacceptable"]
    top = {LAST: set(np.argsort(-np.abs(label_fit.coef))[:60].tolist())}
    full = metric_with_ablation(model, saes, label_fit, prompts)
    empty = metric_with_ablation(model, saes, label_fit, prompts, {}, means=means)
    ablated = metric_with_ablation(model, saes, label_fit, prompts, top, ablate_inside=True,
                                   means=means)  # fmt: skip
    assert empty - full > 0.5
    # measured: completeness 0.26 (m moves three quarters of the way); margin: below 0.5
    assert (ablated - empty) / (full - empty) < 0.5


def test_faithfulness_of_everything_is_one_and_of_nothing_zero(toy, cola, label_fit, means) -> None:
    model, saes = toy
    everything = [(layer, f) for layer, sae in saes.items() for f in range(sae.cfg.d_sae)]
    table = node_ablation_sweep(model, saes, label_fit, cola["prompts"][:4], everything,
                                [0, len(everything)], means)  # fmt: skip
    assert table["faithfulness"].tolist() == pytest.approx([0.0, 1.0], abs=1e-9)
    assert table["completeness"].tolist() == pytest.approx([1.0, 0.0], abs=1e-9)


# ---------------------------------------------------------------- attribution


def test_integrated_gradients_match_ablation_at_the_readout_layer(
    toy, cola, label_fit, means, tmp_path: Path
) -> None:
    model, saes = toy
    only = {LAST: saes[LAST]}
    prompts = cola["prompts"][:6]
    result = attribution_scores(model, only, label_fit, prompts, means, steps=10)
    scores = result.scores[LAST]
    assert result.seconds > 0
    # by hand at the readout layer: m_i(alpha) = 2 sigmoid(a.(mu + alpha (zbar_i - mu)) + b) - 1
    zbar = collect_sae_features(model, only, prompts, cache_dir=tmp_path, progress=False)[LAST]
    a, mu = label_fit.coef, means[LAST].double().numpy()
    diff = zbar.toarray() - mu
    alphas = (np.arange(10) + 0.5) / 10
    p = 1 / (1 + np.exp(-((mu @ a) + np.outer(diff @ a, alphas) + label_fit.intercept)))
    expected = (diff * a * (2 * p * (1 - p)).mean(1, keepdims=True)).mean(0)
    np.testing.assert_allclose(scores, expected, atol=1e-6)
    full = metric_with_ablation(model, only, label_fit, prompts)
    empty = metric_with_ablation(model, only, label_fit, prompts, {}, means=means)
    # completeness of integrated gradients: the scores sum to m(M) - m(empty), up to the
    # 10-step midpoint rule (measured relative error 2e-3)
    assert scores.sum() == pytest.approx(full - empty, rel=1e-2)
    # the top feature's score estimates the effect of ablating it alone (measured: 0.21 vs 0.16;
    # the sigmoid makes the two differ)
    layer, feature = rank_features(result.scores)[0]
    drop = full - metric_with_ablation(model, only, label_fit, prompts, {layer: {feature}},
                                       ablate_inside=True, means=means)  # fmt: skip
    assert np.sign(scores[feature]) == np.sign(drop)
    assert scores[feature] == pytest.approx(drop, rel=0.5)


def test_signed_attribution_is_the_label_weighted_sum(toy, cola, label_fit, means) -> None:
    model, saes = toy
    only = {LAST: saes[LAST]}
    prompts = cola["prompts"][:4]
    y = np.array([1, 0, 0, 1])
    per_prompt = [attribution_scores(model, only, label_fit, [p], means, steps=3).scores[LAST]
                  for p in prompts]  # fmt: skip
    signed = attribution_scores(model, only, label_fit, prompts, means, labels=y, steps=3)
    expected = np.mean(
        [(2 * label - 1) * s for label, s in zip(y, per_prompt, strict=True)], axis=0
    )
    np.testing.assert_allclose(signed.scores[LAST], expected, atol=1e-7)


def test_attribution_covers_every_layer(toy, cola, label_fit, means) -> None:
    model, saes = toy
    result = attribution_scores(model, saes, label_fit, cola["prompts"][:2], means, steps=2)
    assert sorted(result.scores) == sorted(saes)
    assert all(np.isfinite(s).all() and np.abs(s).max() > 0 for s in result.scores.values())


# ---------------------------------------------------------------- edge ablation in the surrogate


def hand_fit(parent: int, child: int, coef: np.ndarray, children: list[int]) -> LayerPairFit:
    k = len(children)
    return LayerPairFit(parent, child, np.array(children), sp.csc_matrix(coef), np.zeros(k),
                        np.ones(k, dtype=bool))  # fmt: skip


@pytest.fixture
def chain() -> tuple[dict[int, sp.csr_matrix], dict[int, dict[int, LayerPairFit]], LabelFit]:
    """Layers 0, 1, 2 of 4 features; fitted columns 1.{0, 2} on layer 0 and 2.{1, 3} on 1."""
    rng = np.random.default_rng(0)
    Z = {layer: sp.csr_matrix(rng.exponential(1.0, (20, 4)) * (rng.random((20, 4)) < 0.7))
         for layer in range(3)}  # fmt: skip
    A1 = np.array([[0.5, 0.0], [-1.0, 0.3], [0.0, 0.0], [0.2, 0.7]])
    A2 = np.array([[0.4, 0.0], [0.0, -0.6], [1.1, 0.0], [0.0, 0.9]])
    fit1, fit2 = hand_fit(0, 1, A1, [0, 2]), hand_fit(1, 2, A2, [1, 3])
    columns = {1: {0: fit1, 2: fit1}, 2: {1: fit2, 3: fit2}}
    label = LabelFit(2, np.array([0.3, -0.8, 0.5, 1.2]), -0.2, 0.0, True)
    return Z, columns, label


def reference(Z, columns, label, zeroed) -> tuple[dict[int, np.ndarray], float]:
    """Dense recursion with explicit intercepts and residuals held fixed."""
    dense = {layer: z.toarray() for layer, z in Z.items()}
    new = {layer: z.copy() for layer, z in dense.items()}
    for layer in (1, 2):
        fit = next(iter(columns[layer].values()))
        A = fit.coef.toarray()
        A_zeroed = A.copy()
        for j, child in enumerate(fit.children):
            for p in range(A.shape[0]):
                if (node_name(layer - 1, p), node_name(layer, int(child))) in zeroed:
                    A_zeroed[p, j] = 0.0
        parent, target = dense[layer - 1], dense[layer][:, fit.children]
        intercept = target.mean(0) - parent.mean(0) @ A
        residual = target - parent @ A - intercept
        new[layer][:, fit.children] = new[layer - 1] @ A_zeroed + intercept + residual
    logits = new[2] @ label.coef + label.intercept
    return new, float(np.mean(2 / (1 + np.exp(-logits)) - 1))


def test_surrogate_without_zeroed_edges_is_the_observation(chain) -> None:
    Z, columns, label = chain
    surrogate = Surrogate(Z, columns, label)
    values = surrogate.propagate()
    for layer, fit in ((1, [0, 2]), (2, [1, 3])):
        np.testing.assert_array_equal(values[layer], Z[layer][:, fit].toarray())
    observed = float(np.mean(2 * label.predict_proba(Z[2]) - 1))
    assert surrogate.metric() == pytest.approx(observed, abs=1e-14)
    assert len(surrogate.edges()) == 9  # nonzero coefficients of A1 and A2
    y = np.arange(20) % 3 == 0
    signed = Surrogate(Z, columns, label, labels=y.astype(int))
    expected = float(np.mean(np.where(y, 1, -1) * (2 * label.predict_proba(Z[2]) - 1)))
    assert signed.metric() == pytest.approx(expected, abs=1e-14)


def test_zeroing_every_edge_propagates_zero_coefficients(chain) -> None:
    Z, columns, label = chain
    surrogate = Surrogate(Z, columns, label)
    values = surrogate.propagate(surrogate.edges())
    dense = {layer: z.toarray() for layer, z in Z.items()}
    # by hand: with A' = 0 a fitted column is its intercept plus residual, Z_l - Z_p A
    A1 = columns[1][0].coef.toarray()
    A2 = columns[2][1].coef.toarray()
    np.testing.assert_allclose(values[1], dense[1][:, [0, 2]] - dense[0] @ A1, atol=1e-12)
    np.testing.assert_allclose(values[2], dense[2][:, [1, 3]] - dense[1] @ A2, atol=1e-12)
    z2 = dense[2].copy()
    z2[:, [1, 3]] = dense[2][:, [1, 3]] - dense[1] @ A2
    expected = np.mean(2 / (1 + np.exp(-(z2 @ label.coef + label.intercept))) - 1)
    assert surrogate.metric(surrogate.edges()) == pytest.approx(expected, abs=1e-12)


def test_partial_zeroing_matches_the_dense_recursion(chain) -> None:
    Z, columns, label = chain
    surrogate = Surrogate(Z, columns, label)
    edges = surrogate.edges()
    for zeroed in (set(edges[::2]), {("z0.1", "z1.0"), ("z1.2", "z2.1")}, {("z0.3", "z1.2")}):
        expected, m_hat = reference(Z, columns, label, zeroed)
        values = surrogate.propagate(zeroed)
        np.testing.assert_allclose(values[1], expected[1][:, [0, 2]], atol=1e-12)
        np.testing.assert_allclose(values[2], expected[2][:, [1, 3]], atol=1e-12)
        assert surrogate.metric(zeroed) == pytest.approx(m_hat, abs=1e-12)
    with pytest.raises(ValueError, match="not in the surrogate"):
        surrogate.propagate({("z0.2", "z1.0")})  # a zero coefficient is no edge


def test_node_effects_and_edge_ranking_follow_the_chain(chain) -> None:
    Z, columns, label = chain
    surrogate = Surrogate(Z, columns, label)
    std = {layer: z.toarray().std(0) for layer, z in Z.items()}
    A1 = columns[1][0].coef.toarray()
    A2 = columns[2][1].coef.toarray()
    e2 = np.abs(label.coef) * std[2]
    # layer 1: through the fitted children 2.1 and 2.3; layer 0: through 1.0 and 1.2
    e1 = np.abs(A2) @ (e2[[1, 3]] / std[2][[1, 3]]) * std[1]
    e0 = np.abs(A1) @ (e1[[0, 2]] / std[1][[0, 2]]) * std[0]
    expected = {(2, f): e2[f] for f in range(4)}
    expected |= {(1, f): e1[f] for f in range(4) if e1[f]}
    expected |= {(0, f): e0[f] for f in range(4) if e0[f]}
    effects = surrogate.node_effects()
    assert effects.keys() == expected.keys()
    assert [effects[n] for n in expected] == pytest.approx(list(expected.values()), rel=1e-12)
    assert surrogate.rank_nodes() == sorted(expected, key=lambda n: -expected[n])
    share = {(node_name(0, p), node_name(1, c)): e1[c] / std[1][c] * abs(A1[p, j]) * std[0][p]
             for j, c in enumerate((0, 2)) for p in range(4) if A1[p, j]}  # fmt: skip
    share |= {(node_name(1, p), node_name(2, c)): e2[c] / std[2][c] * abs(A2[p, j]) * std[1][p]
              for j, c in enumerate((1, 3)) for p in range(4) if A2[p, j]}  # fmt: skip
    assert surrogate.rank_edges() == sorted(share, key=lambda e: -share[e])


def test_edge_sweep_on_a_traced_circuit() -> None:
    rng = np.random.default_rng(1)
    z0 = rng.exponential(1.0, (200, 12)) * (rng.random((200, 12)) < 0.5)
    A1 = rng.normal(0, 1, (12, 10)) * (rng.random((12, 10)) < 0.3)
    z1 = np.maximum(z0 @ A1 + 0.1 * rng.normal(size=(200, 10)), 0)
    z2 = np.maximum(z1 @ rng.normal(0, 1, (10, 8)) + 0.1 * rng.normal(size=(200, 8)), 0)
    Z = {layer: sp.csr_matrix(z) for layer, z in enumerate((z0, z1, z2))}
    label = fit_label(Z[2], (z2[:, 0] > np.median(z2[:, 0])).astype(int), 1e-3, layer=2)
    regressions = LayerRegressions(Z, lam_ratio=0.1)
    graph = trace_circuit(label, regressions, roots=3, k=2)
    surrogate = Surrogate.from_circuit(graph, regressions, label)
    assert set(graph.edges) <= set(surrogate.edges())
    n_all = len(surrogate.edges())
    table = edge_ablation_sweep(surrogate, surrogate.rank_edges(), [0, n_all])
    assert table["faithfulness"].tolist() == pytest.approx([0.0, 1.0], abs=1e-9)
    assert table["completeness"].tolist() == pytest.approx([1.0, 0.0], abs=1e-9)
    in_graph = [e for e in surrogate.rank_edges() if graph.has_edge(*e)]
    circuit = edge_ablation_sweep(surrogate, in_graph, [graph.number_of_edges()])
    assert np.isfinite(circuit["faithfulness"]).all()
