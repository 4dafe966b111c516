"""The integrated-gradients path integral through SAE features, on the committed toy model.

References: for a metric quadratic in one layer's token-averaged features, the midpoint rule is
exact and the scores have a closed form in the collector's token-averaged features and the
baseline, signed per prompt; a metric read below a layer does not depend on it. The attribution
baseline and SHIFT, which call this routine, are checked against their own references in
``test_ablate.py`` and ``test_debias.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso.collect import collect_sae_features
from circuitlasso.data.models import load_model, load_saes
from circuitlasso.data.toyworld.datasets import load_toy_cola
from circuitlasso.evaluation.attribution import integrated_gradients
from circuitlasso.forward import mean_over_real

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def toy() -> tuple[HookedTransformer, dict[int, SAE]]:
    model = load_model("toy")
    return model, load_saes("toy", range(4), model=model)


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return list(load_toy_cola("test")["sentence"][:6])


def test_a_quadratic_metric_gets_its_exact_path_integral_from_any_baseline(
    toy, prompts, tmp_path: Path
) -> None:
    """``m = (w . zbar)^2``: on the path ``zbar(alpha) = base + alpha (zbar - base)``,
    ``dm/dz_t = 2 (w . zbar(alpha)) w / count``, linear in ``alpha``, so the midpoint rule is exact
    and the score of feature ``f`` is ``(zbar_f - base_f) w_f (w . (zbar + base))``."""
    model, saes = toy
    layer, sae = 2, saes[2]
    g = torch.Generator().manual_seed(0)
    weights = torch.randn(sae.cfg.d_sae, generator=g, dtype=torch.float64)
    base = 0.1 * torch.rand(sae.cfg.d_sae, generator=g)
    signs = np.array([1.0, -1.0, 1.0, 1.0, -1.0, 1.0])

    def metric(at: int, z: torch.Tensor, seen, real: torch.Tensor) -> torch.Tensor:
        assert at == layer
        return (mean_over_real(z, real) @ weights) ** 2

    scores = integrated_gradients(model, {layer: sae}, prompts, metric, baselines={layer: base},
                                  signs=signs, steps=2, batch_size=4)  # fmt: skip
    Z = collect_sae_features(model, {layer: sae}, prompts, cache_dir=tmp_path, progress=False)
    zbar, b, w = Z[layer].toarray().astype(np.float64), base.double().numpy(), weights.numpy()
    expected = (signs[:, None] * (zbar - b) * w * ((zbar + b) @ w)[:, None]).mean(0)
    assert np.abs(expected).max() > 1e-2
    np.testing.assert_allclose(scores[layer], expected, rtol=1e-4, atol=1e-5)
    # completeness: the scores sum to the mean signed m(clean) - m(base)
    total = np.mean(signs * ((zbar @ w) ** 2 - (b @ w) ** 2))
    assert scores[layer].sum() == pytest.approx(total, rel=1e-4)


def test_a_layer_above_what_the_metric_reads_scores_zero(toy, prompts) -> None:
    model, saes = toy
    hook = "blocks.2.hook_resid_post"
    w = torch.randn(model.cfg.d_model, generator=torch.Generator().manual_seed(1))

    def metric(layer: int, z: torch.Tensor, seen, real: torch.Tensor) -> torch.Tensor:
        return mean_over_real(seen[hook], real) @ w.double()

    scores = integrated_gradients(model, {1: saes[1], 3: saes[3]}, prompts, metric, reads=[hook],
                                  steps=2)  # fmt: skip
    assert np.abs(scores[1]).max() > 1e-3
    assert not scores[3].any()


def test_bad_inputs_are_named(toy, prompts) -> None:
    model, saes = toy

    def metric(layer, z, seen, real):
        return z.sum((1, 2))

    with pytest.raises(ValueError, match="saes is empty"):
        integrated_gradients(model, {}, prompts, metric)
    with pytest.raises(ValueError, match="steps must be at least 1, got 0"):
        integrated_gradients(model, saes, prompts, metric, steps=0)
    with pytest.raises(ValueError, match=r"baselines has no values for layers \[1, 3\]"):
        integrated_gradients(model, saes, prompts, metric, baselines={0: 0, 2: 0})
    with pytest.raises(ValueError, match=r"6 prompts but signs of shape \(5,\)"):
        integrated_gradients(model, saes, prompts, metric, signs=np.ones(5))
