"""The minimal-pair metric (a decoder's own log p(good) - log p(bad)) through node ablation and
integrated gradients, on the committed toy LM and its SAEs (and once on SmolLM2-135M with its
shipped SAEs, marked slow).

References: :func:`circuitlasso.evaluation.acceptability.minimal_pair_table`, the unspliced
model's margins (nothing ablated); the log-probabilities computed by hand, one sentence at a
time, from the logits of a run with splice hooks written out below (features ablated); the
completeness of integrated gradients against the ablation of one layer; the errors the metric
raises where it cannot be measured.
"""

from __future__ import annotations

import copy
from functools import partial

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from sae_lens import SAE
from transformer_lens import HookedEncoder, HookedTransformer, HookedTransformerConfig

from circuitlasso.circuits.features import LabelFit
from circuitlasso.data.minimal_pairs import MinimalPair, load_minimal_pairs
from circuitlasso.data.models import load_model, load_saes
from circuitlasso.data.toyworld.datasets import load_toy_cola, minimal_pairs
from circuitlasso.data.toyworld.grammar import VIOLATIONS
from circuitlasso.estimator import CircuitLasso
from circuitlasso.evaluation import faithfulness as fa
from circuitlasso.evaluation.ablate import feature_means, metric_with_ablation, node_ablation_sweep
from circuitlasso.evaluation.acceptability import minimal_pair_table
from circuitlasso.evaluation.attribution import (
    DEVIATION,
    DIRECT,
    attribution_scores,
    forward_scores,
)
from circuitlasso.evaluation.metrics import MinimalPairMargin, Readout

torch.set_num_threads(1)

LAST = 3


@pytest.fixture(scope="module")
def toy() -> tuple[HookedTransformer, dict[int, SAE]]:
    model = load_model("toy")
    return model, load_saes("toy", range(LAST + 1), model=model)


@pytest.fixture(scope="module")
def pairs() -> list[MinimalPair]:
    """Two toy minimal pairs of each violation: 8 pairs, 16 sentences of several lengths."""
    return [MinimalPair(v, good, bad) for v in VIOLATIONS for good, bad in minimal_pairs(0, v, 2)]


@pytest.fixture(scope="module")
def lasso(hand_readout) -> CircuitLasso:
    """A CircuitLasso reading the last layer with every coefficient 1 (the readout's metric)."""
    label_fit = LabelFit(LAST, np.ones(2048), 0.0, 1.0, True)
    return hand_readout({LAST: sp.csr_matrix(np.eye(4, 2048))}, label_fit)


@pytest.fixture(scope="module")
def evaluation(pairs, lasso) -> tuple[MinimalPairMargin, fa.Sentences]:
    reference = list(load_toy_cola("train")["sentence"][:64])
    sentences = fa.Sentences(["unused ."], [1], reference)
    # the readout is not read by this metric
    metric, evaluated = fa.evaluation_metric("minimal_pairs", lasso, sentences, pairs=pairs)
    assert isinstance(metric, MinimalPairMargin)
    return metric, evaluated


@pytest.fixture(scope="module")
def means(toy, evaluation) -> dict[int, torch.Tensor]:
    model, saes = toy
    return feature_means(model, saes, evaluation[1].reference)


def hook_name(sae: SAE) -> str:
    return str(sae.cfg.metadata.hook_name)


def log_prob_by_hand(model, saes, sentence: str, ablated, means) -> float:
    """log p(sentence) from one run of ``model`` on ``BOS + sentence`` with every SAE of ``saes``
    spliced in: the features ``ablated[layer]`` set to their means at the sentence's tokens, the
    error term kept; each token's log-probability read from the logits at the position before."""
    tokenizer = model.tokenizer
    ids = [tokenizer.bos_token_id, *model.to_tokens(sentence, prepend_bos=False)[0].tolist()]
    tokens = torch.tensor([ids])

    def splice(x, hook, layer):
        sae = saes[layer]
        z = sae.encode(x)
        edited = z.clone()
        chosen = torch.tensor(sorted(ablated.get(layer, ())), dtype=torch.long)
        edited[0, 1:, chosen] = means[layer][chosen]  # every token but the BOS
        return sae.decode(edited) + (x - sae.decode(z))

    hooks = [(hook_name(sae), partial(splice, layer=layer)) for layer, sae in saes.items()]
    with torch.inference_mode():
        logits = model.run_with_hooks(tokens, fwd_hooks=hooks)[0].double()
    log_p = logits.log_softmax(-1)
    return float(sum(log_p[t - 1, ids[t]] for t in range(1, len(ids))))


def margin_by_hand(model, saes, pairs, ablated, means) -> float:
    """Mean over ``pairs`` of log p(good) - log p(bad), each by :func:`log_prob_by_hand`."""
    return float(np.mean([
        log_prob_by_hand(model, saes, p.good, ablated, means)
        - log_prob_by_hand(model, saes, p.bad, ablated, means)
        for p in pairs
    ]))  # fmt: skip


# ---------------------------------------------------------------- the metric of node ablation


def test_unablated_minimal_pair_metric_is_the_mean_margin(toy, pairs, evaluation) -> None:
    model, saes = toy
    metric, evaluated = evaluation
    assert evaluated.prompts == [p.good for p in pairs] + [p.bad for p in pairs]
    assert evaluated.labels == [1] * 8 + [0] * 8
    expected = float(minimal_pair_table(model, pairs)["margin"].mean())
    # one batch: the shorter sentences padded beside the longest
    found = metric_with_ablation(model, saes, metric, evaluated.prompts, labels=evaluated.labels,
                                 batch_size=16)  # fmt: skip
    # float32 runs, spliced and padded against the unspliced model (measured 5.1e-7 nats)
    assert found == pytest.approx(expected, abs=1e-4)
    assert expected > 5  # the toy LM prefers the good sentences (measured 10.36 nats a pair)
    # the weights travel with their sentences: any order, the same mean
    reordered = metric_with_ablation(model, saes, metric, evaluated.prompts[::-1],
                                     labels=evaluated.labels[::-1], batch_size=3)  # fmt: skip
    assert reordered == pytest.approx(found, abs=1e-5)


def test_ablated_minimal_pair_metric_matches_log_probs_by_hand(
    toy, pairs, evaluation, means
) -> None:
    model, saes = toy
    metric, evaluated = evaluation
    prompts, labels = evaluated.prompts, evaluated.labels
    everything = {layer: range(sae.cfg.d_sae) for layer, sae in saes.items()}
    empty = metric_with_ablation(model, saes, metric, prompts, {}, labels=labels, means=means,
                                 batch_size=5)  # fmt: skip
    full = metric_with_ablation(model, saes, metric, prompts, labels=labels)
    # float32 runs, batched and padded against one sentence at a time (measured 4.0e-7 nats)
    assert empty == pytest.approx(margin_by_hand(model, saes, pairs, everything, means), abs=1e-4)
    assert full - empty > 5  # every feature at its mean: 10.36 nats fall to 3.64 (measured)
    # a partial circuit, its features ablated inside it, through the sweep
    circuit = {layer: set(range(0, 2048, 7)) for layer in saes}
    ranking = [(layer, f) for layer in saes for f in sorted(circuit[layer])]
    row = node_ablation_sweep(model, saes, metric, prompts, ranking, [len(ranking)], means,
                              labels=labels, batch_size=5).iloc[0]  # fmt: skip
    outside = {layer: set(range(2048)) - circuit[layer] for layer in saes}
    kept = margin_by_hand(model, saes, pairs, outside, means)
    removed = margin_by_hand(model, saes, pairs, circuit, means)
    # batches of 5 against 32 (m_full) and the same batches (m_empty): measured 4.4e-7 and 0
    assert row["m_full"] == pytest.approx(full, abs=1e-5)
    assert row["m_empty"] == pytest.approx(empty, abs=1e-9)
    # by hand: measured differences 1.3e-6 and 5.8e-7 nats (kept 3.33, removed 9.46)
    assert row["m_circuit"] == pytest.approx(kept, abs=1e-4)
    assert row["m_complement"] == pytest.approx(removed, abs=1e-4)
    assert row["faithfulness"] == pytest.approx((kept - empty) / (full - empty), abs=1e-4)


def test_minimal_pair_attribution_of_each_layer_is_complete(toy, evaluation, means) -> None:
    """The IG scores of layer l sum to m(clean) - m(layer l at its means), the other layers
    computed by the model: the log-probabilities are smooth along the path (one SAE spliced,
    its decoder linear), so only the midpoint rule's error remains."""
    model, saes = toy
    metric, evaluated = evaluation
    prompts, labels = evaluated.prompts, evaluated.labels
    scores = attribution_scores(model, saes, metric, prompts, means, labels=labels, steps=24,
                                batch_size=8).scores  # fmt: skip
    full = metric_with_ablation(model, saes, metric, prompts, labels=labels)
    for layer, sae in saes.items():
        alone = metric_with_ablation(model, {layer: sae}, metric, prompts, {}, labels=labels,
                                     means=means)  # fmt: skip
        # measured effects 8.5 to 9.0 nats; the sums within 0.08 % of them at 24 steps (6 % at
        # 6 steps)
        assert full - alone > 5
        assert scores[layer].sum() == pytest.approx(full - alone, rel=5e-3)


def test_the_faithfulness_helpers_take_either_metric(toy, evaluation, means, lasso) -> None:
    model, saes = toy
    metric, evaluated = evaluation
    baseline = fa.attribution_baseline(model, saes, metric, evaluated, steps=2, batch_size=8)
    direct = attribution_scores(model, saes, metric, evaluated.prompts, baseline.means,
                                labels=evaluated.labels, steps=2, batch_size=8)  # fmt: skip
    for layer in saes:
        np.testing.assert_allclose(baseline.scores[layer], direct.scores[layer], atol=1e-9)
    ranking = [(LAST, 5), (2, 7)]
    node = fa.node_sweep(model, saes, metric, evaluated, {"a": ranking}, means, batch_size=8)
    expected = float(minimal_pair_table(model, evaluation_pairs(evaluated))["margin"].mean())
    assert node["m_full"].iloc[0] == pytest.approx(expected, abs=1e-4)
    # the readout by name: the label fit's readout on the sentences as they are
    readout, same = fa.evaluation_metric("readout", lasso, evaluated)
    assert isinstance(readout, Readout) and same is evaluated
    assert (readout.layer, readout.intercept) == (LAST, 0.0)
    np.testing.assert_array_equal(readout.coef, np.ones(2048))
    assert (readout.name, metric.name) == ("readout", "minimal_pairs")
    assert (readout.layer, metric.layer) == (LAST, None)


def features_by_hand(model, saes, sentence: str) -> tuple[dict[int, torch.Tensor], list[int]]:
    """``{layer: (P, D)}`` each SAE's features of ``BOS + sentence`` from the plain model's cached
    activations, and its token ids."""
    tokenizer = model.tokenizer
    ids = [tokenizer.bos_token_id, *model.to_tokens(sentence, prepend_bos=False)[0].tolist()]
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.tensor([ids]))
        return {layer: sae.encode(cache[hook_name(sae)])[0] for layer, sae in saes.items()}, ids


def direct_effect_by_hand(model, sae, sentence: str, weight: float, mean) -> torch.Tensor:
    """``(D,)`` the exact first-order effect on ``weight * log p(sentence)`` of moving each
    feature of ``sae`` (spliced at the last block's output) from its ``mean`` to its value, by
    autograd through the spliced model with the final LayerNorm's scale held fixed: there, the
    residual stream is the only path to the logits."""
    z_all, ids = features_by_hand(model, {LAST: sae}, sentence)
    z = z_all[LAST].detach().clone().requires_grad_(True)

    def splice(x, hook):
        return sae.decode(z[None]) + (x - sae.decode(z[None]).detach())

    hooks = [(hook_name(sae), splice), ("ln_final.hook_scale", lambda x, hook: x.detach())]
    logits = model.run_with_hooks(torch.tensor([ids]), fwd_hooks=hooks)[0].double()
    log_p = logits.log_softmax(-1)
    value = weight * sum(log_p[t - 1, ids[t]] for t in range(1, len(ids)))
    (gradient,) = torch.autograd.grad(value, z)
    return ((z - mean) * gradient)[1:].sum(0).detach().double()  # every token but the BOS


def test_forward_scores_are_the_deviation_and_the_exact_direct_effect_at_the_last_block(
    toy, evaluation, means, lasso
) -> None:
    model, saes = toy
    metric, evaluated = evaluation
    prompts, labels = evaluated.prompts, evaluated.labels
    found = forward_scores(model, saes, metric, prompts, labels, means, batch_size=5)
    weights = metric.weights(labels, len(prompts))
    deviation = {
        layer: torch.zeros(sae.cfg.d_sae, dtype=torch.float64) for layer, sae in saes.items()
    }
    direct = torch.zeros(saes[LAST].cfg.d_sae, dtype=torch.float64)
    for sentence, weight in zip(prompts, weights, strict=True):
        z, _ = features_by_hand(model, saes, sentence)
        for layer in saes:
            deviation[layer] += (z[layer][1:] - means[layer]).abs().sum(0).double()
        direct += direct_effect_by_hand(model, saes[LAST], sentence, float(weight), means[LAST])
    for layer in saes:
        # float32 features, batched and padded, against one sentence at a time
        np.testing.assert_allclose(found.deviation[layer], deviation[layer], rtol=1e-4, atol=1e-4)
    assert found.direct is not None
    assert np.abs(direct.numpy()).max() > 1  # the last block carries the margin (measured 6.6)
    np.testing.assert_allclose(found.direct[LAST], direct.numpy(), rtol=1e-3, atol=1e-3)
    assert list(found.rankings()) == [DIRECT, DEVIATION]
    assert found.rankings()[DIRECT][0] == (LAST, int(np.abs(direct.numpy()).argmax()))
    # a metric of features has no logits to read back from: the deviation control alone
    readout, _ = fa.evaluation_metric("readout", lasso, evaluated)
    on_features = forward_scores(model, saes, readout, prompts, labels, means)
    assert on_features.direct is None and list(on_features.rankings()) == [DEVIATION]
    for layer in saes:
        np.testing.assert_allclose(on_features.deviation[layer], found.deviation[layer], rtol=1e-5)
    with pytest.raises(ValueError, match="as many good sentences as bad ones"):
        forward_scores(model, saes, metric, prompts, [1] * 9 + [0] * 7, means)


def evaluation_pairs(sentences: fa.Sentences) -> list[MinimalPair]:
    """The pairs back from the prompts of :func:`fa.evaluation_metric`: goods, then bads."""
    n = len(sentences.prompts) // 2
    return [MinimalPair("", g, b) for g, b in zip(sentences.prompts[:n], sentences.prompts[n:],
                                                    strict=True)]  # fmt: skip


# ---------------------------------------------------------------- refused


def test_minimal_pair_metric_refuses_what_it_cannot_measure(toy, evaluation, means, lasso) -> None:
    model, saes = toy
    metric, evaluated = evaluation
    prompts, labels = evaluated.prompts, evaluated.labels
    cfg = HookedTransformerConfig(n_layers=1, d_model=8, n_ctx=8, d_head=4, n_heads=2, d_mlp=16,
                                  d_vocab=12, act_fn="gelu")  # fmt: skip
    encoder = HookedEncoder(cfg)
    with pytest.raises(ValueError, match="needs a HookedTransformer, not a HookedEncoder"):
        metric_with_ablation(encoder, saes, metric, prompts, labels=labels)  # type: ignore[arg-type]
    no_bos = copy.deepcopy(model)
    no_bos.tokenizer.bos_token = None
    assert no_bos.tokenizer.bos_token_id is None
    for call in (
        lambda m: metric_with_ablation(m, saes, metric, prompts, labels=labels),
        lambda m: attribution_scores(m, saes, metric, prompts, means, labels=labels),
        lambda m: fa.attribution_baseline(m, saes, metric, evaluated),
        lambda m: fa.node_sweep(m, saes, metric, evaluated, {"a": [(0, 1)]}, means),
    ):
        with pytest.raises(ValueError, match="the model's tokenizer has no BOS token"):
            call(no_bos)
    no_prepend = copy.deepcopy(model)
    no_prepend.cfg.default_prepend_bos = False
    with pytest.raises(ValueError, match="does not prepend its BOS"):
        metric_with_ablation(no_prepend, saes, metric, prompts, labels=labels)
    with pytest.raises(ValueError, match="needs labels: 1 for each good sentence"):
        metric_with_ablation(model, saes, metric, prompts)
    with pytest.raises(ValueError, match="as many good sentences as bad ones: labels mark 9 good"):
        metric_with_ablation(model, saes, metric, prompts, labels=[1] * 9 + [0] * 7)
    with pytest.raises(ValueError, match="labels must be 16 values in"):
        metric_with_ablation(model, saes, metric, prompts, labels=[1] * 8 + [0] * 7)
    with pytest.raises(ValueError, match="a sentence starts without a BOS"):
        tokens = torch.tensor([[5, 6, 7]])
        metric(torch.zeros(1, 3, 10), tokens, torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="unknown metric 'logits'; the metrics are readout, "):
        fa.evaluation_metric("logits", lasso, evaluated)
    with pytest.raises(ValueError, match="no minimal pairs given"):
        fa.evaluation_metric("minimal_pairs", lasso, evaluated, pairs=[])


# ---------------------------------------------------------------- a real decoder


@pytest.mark.slow
def test_smollm2_with_its_saes_spliced_keeps_its_minimal_pair_margin(smollm2_model) -> None:
    model = smollm2_model
    saes = load_saes("smollm2-135m", [4, 9, 14, 19, 24, 29], model=model)
    pairs = load_minimal_pairs()[::12]  # one pair of each phenomenon
    expected = float(minimal_pair_table(model, pairs)["margin"].mean())
    metric = MinimalPairMargin()
    prompts = [p.good for p in pairs] + [p.bad for p in pairs]
    labels = [1] * len(pairs) + [0] * len(pairs)
    found = metric_with_ablation(model, saes, metric, prompts, labels=labels, batch_size=3)
    # float32 through 30 blocks, six splices and padding against the plain model (measured
    # 1.9e-5 nats on margins of a few nats)
    assert found == pytest.approx(expected, abs=1e-3)
