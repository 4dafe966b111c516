"""The weight layout every converted decoder gets (circuitlasso.data.hf.lay_out_for_linear)."""

from __future__ import annotations

import copy

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from circuitlasso.data.hf import LINEAR_WEIGHTS, lay_out_for_linear


def _model(*, gated: bool) -> HookedTransformer:
    torch.manual_seed(0)
    cfg = HookedTransformerConfig(
        n_layers=2, d_model=32, n_heads=4, d_head=8, d_mlp=64, d_vocab=50, n_ctx=16,
        act_fn="silu" if gated else "gelu", gated_mlp=gated,
        normalization_type="RMS" if gated else "LN", positional_embedding_type="rotary",
    )  # fmt: skip
    return HookedTransformer(cfg).eval()


def _linear(model: HookedTransformer) -> dict[str, torch.nn.Parameter]:
    return {n: p for n, p in model.named_parameters() if n.endswith(LINEAR_WEIGHTS)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_gated_model_gives_the_same_logits_without_copying_its_linear_weights(dtype) -> None:
    model = _model(gated=True)
    tokens = torch.randint(0, 50, (3, 9))
    before = model(tokens)
    laid = lay_out_for_linear(copy.deepcopy(model)).to(dtype)
    weights = _linear(laid)
    assert len(weights) == 3 * 2 + 1  # gate, in and out of each block, and the unembedding
    for name, weight in weights.items():
        assert weight.T.contiguous().data_ptr() == weight.data_ptr(), name  # a view, no copy
        assert weight.shape == dict(model.named_parameters())[name].shape
    after = laid(tokens)
    if dtype == torch.float32:
        assert torch.equal(after, before)  # the same layout F.linear was given: the same bits
    else:
        torch.testing.assert_close(after.float(), before, atol=1e-4, rtol=1e-4)


def test_a_model_without_gated_mlps_keeps_its_mlp_weights_as_they_are() -> None:
    model = lay_out_for_linear(_model(gated=False))
    for name, weight in _linear(model).items():
        # its MLP multiplies W_in as stored; only the unembedding is handed over transposed
        assert weight.T.is_contiguous() == name.endswith("unembed.W_U"), name
