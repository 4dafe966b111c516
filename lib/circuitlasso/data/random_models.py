"""GPT-2-family models with seeded random weights, and random prompt pairs to run them on.

`ModelShape` is a transformer's size in the paper's Proposition 2 terms; `gpt2_family` is GPT-2's
shape at another depth and width; `build_model` a HookedTransformer of a shape with seeded random
weights (the component graph's hooks on); `random_prompt_pairs` clean and corrupted prompts of
uniform random tokens. The cost measurements and the tests of the solvers and the component graph
run on them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from circuitlasso.data.prompt_pairs import PromptPairs

HEAD_WIDTH = 64  # GPT-2's d_model / n_heads


@dataclass(frozen=True)
class ModelShape:
    """Transformer size in Proposition 2's terms: S blocks, width d, h heads, MLP factor f."""

    name: str
    S: int
    d: int
    h: int
    f: float
    source: str


def gpt2_family(n_layers: int, d_model: int) -> ModelShape:
    """GPT-2's shape at another size: heads of width 64 (h = d_model / 64) and MLP factor 4."""
    if n_layers < 1 or d_model < HEAD_WIDTH or d_model % HEAD_WIDTH:
        raise ValueError(
            f"need n_layers >= 1 and d_model a positive multiple of {HEAD_WIDTH}, "
            f"got {n_layers}, {d_model}"
        )
    return ModelShape(
        f"GPT-2 family {n_layers}x{d_model}",
        S=n_layers,
        d=d_model,
        h=d_model // HEAD_WIDTH,
        f=4.0,
        source="GPT-2's config at n_layer, n_embd; n_head = n_embd / 64, n_inner = 4 n_embd",
    )


def build_model(
    shape: ModelShape, n_ctx: int, d_vocab: int | None = None, seed: int = 0
) -> HookedTransformer:
    """A GPT-2-style HookedTransformer of `shape` with seeded random weights, on the CPU.

    GELU (gelu_new) MLPs of width f d, LayerNorm, learned positions for `n_ctx` tokens and a
    vocabulary of `d_vocab` tokens (GPT-2's is 50257), by default d: the output node's
    activation is the logits, so every component location is then d wide, as in
    Proposition 2. The component graph's hooks are switched on.
    """
    d_vocab = shape.d if d_vocab is None else d_vocab
    if shape.d % shape.h or n_ctx < 1 or d_vocab < 2:
        raise ValueError(
            f"need d divisible by h, n_ctx >= 1 and d_vocab >= 2, "
            f"got d={shape.d}, h={shape.h}, n_ctx={n_ctx}, d_vocab={d_vocab}"
        )
    cfg = HookedTransformerConfig(
        n_layers=shape.S,
        d_model=shape.d,
        n_heads=shape.h,
        d_head=shape.d // shape.h,
        d_mlp=int(shape.f * shape.d),
        d_vocab=d_vocab,
        n_ctx=n_ctx,
        act_fn="gelu_new",
        normalization_type="LN",
        positional_embedding_type="standard",
        use_attn_result=True,
        use_split_qkv_input=True,
        use_hook_mlp_in=True,
        seed=seed,
        device="cpu",
    )
    return HookedTransformer(cfg).eval()


def random_prompt_pairs(n_prompts: int, n_tokens: int, d_vocab: int, seed: int = 0) -> PromptPairs:
    """`n_prompts` clean and corrupted prompts of `n_tokens` uniform random tokens: (M, P) each;
    every position counts."""
    if n_prompts < 1 or n_tokens < 1:
        raise ValueError(f"need n_prompts, n_tokens >= 1, got {n_prompts}, {n_tokens}")
    generator = torch.Generator().manual_seed(seed)
    clean, corrupted = torch.randint(d_vocab, (2, n_prompts, n_tokens), generator=generator)
    return PromptPairs(clean, corrupted, torch.ones(n_tokens, dtype=torch.bool))
