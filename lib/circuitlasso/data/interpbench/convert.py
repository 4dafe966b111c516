"""tracr assembled model -> TransformerLens ``HookedTransformer``, exact or with distractor heads.

The converted model has the hook flags circuit discovery needs (``use_attn_result``,
``use_split_qkv_input``, ``use_hook_mlp_in``), no LayerNorm, ReLU MLPs and bidirectional attention,
like tracr's own forward pass. Its logits are the residual stream projected on the program's output
space: argmax for categorical programs, the single value for numerical ones.

The ``distractors`` variant pads every layer to at least 4 heads. Head slots tracr left empty get
random weights: they read the whole residual stream but write only into extra residual dimensions
that no compiled component and not the unembedding reads, so the model's output is unchanged while
the extra heads are active.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from circuitlasso.data.interpbench.compile import COMPILER_BOS, CompiledTask
from circuitlasso.data.interpbench.programs import Value

Variant = Literal["exact", "distractors"]
VARIANTS: tuple[Variant, ...] = ("exact", "distractors")
DISTRACTOR_HEADS_PER_LAYER = 4


def _params(compiled: CompiledTask) -> dict[str, dict[str, np.ndarray]]:
    return {
        module: {name: np.array(value, dtype=np.float32) for name, value in weights.items()}
        for module, weights in compiled.assembled.params.items()
    }


def _unembedding(compiled: CompiledTask) -> np.ndarray:
    """Projection of the residual stream on the output space: (d_model, d_vocab_out)."""
    residual = compiled.assembled.residual_labels
    sink = compiled.graph.nodes[compiled.sink_label]
    outputs = [str(direction) for direction in sink["OUTPUT_BASIS"]]
    w_u = np.zeros((len(residual), len(outputs)), dtype=np.float32)
    for j, label in enumerate(outputs):
        w_u[residual.index(label), j] = 1.0
    return w_u


def _pad(matrix: np.ndarray, rows: int, cols: int) -> torch.Tensor:
    """``matrix`` in the top-left corner of a (rows, cols) float32 zero matrix."""
    out = np.zeros((rows, cols), dtype=np.float32)
    out[: matrix.shape[0], : matrix.shape[1]] = matrix
    return torch.from_numpy(out)


def _config(compiled: CompiledTask, n_heads: int, d_model: int, seed: int, name: str):
    tracr = compiled.assembled.model_config
    return HookedTransformerConfig(
        n_layers=tracr.num_layers,
        d_model=d_model,
        n_ctx=compiled.task.max_seq_len + 1,
        d_head=tracr.key_size,
        n_heads=n_heads,
        d_mlp=tracr.mlp_hidden_size,
        d_vocab=len(compiled.assembled.input_encoder.encoding_map),
        d_vocab_out=len(compiled.graph.nodes[compiled.sink_label]["OUTPUT_BASIS"]),
        act_fn="relu",
        normalization_type=None,
        attention_dir="causal" if tracr.causal else "bidirectional",
        positional_embedding_type="standard",
        default_prepend_bos=False,
        use_attn_result=True,
        use_split_qkv_input=True,
        use_hook_mlp_in=True,
        init_weights=False,
        seed=seed,
        model_name=name,
    )


def _tracr_weights(compiled: CompiledTask, cfg: HookedTransformerConfig) -> dict[str, torch.Tensor]:
    """The assembled model's weights under TransformerLens names, zero-padded to ``cfg``."""
    params = _params(compiled)
    d_model, d_head, d_mlp = (
        cfg.d_model,
        cfg.d_head,
        compiled.assembled.model_config.mlp_hidden_size,
    )
    weights = {
        "embed.W_E": _pad(params["token_embed"]["embeddings"], cfg.d_vocab, d_model),
        "pos_embed.W_pos": _pad(params["pos_embed"]["embeddings"], cfg.n_ctx, d_model),
        "unembed.W_U": _pad(_unembedding(compiled), d_model, cfg.d_vocab_out),
    }
    for layer in range(cfg.n_layers):
        attn, mlp = f"transformer/layer_{layer}/attn", f"transformer/layer_{layer}/mlp"
        per_head: dict[str, list[torch.Tensor]] = {"W_Q": [], "W_K": [], "W_V": [], "W_O": []}
        for head in range(cfg.n_heads):
            cols = slice(head * d_head, (head + 1) * d_head)
            for ours, theirs in (("W_Q", "query"), ("W_K", "key"), ("W_V", "value")):
                w = params[f"{attn}/{theirs}"]["w"][:, cols]  # empty beyond tracr's heads
                per_head[ours].append(_pad(w, d_model, d_head))
            per_head["W_O"].append(_pad(params[f"{attn}/linear"]["w"][cols, :], d_head, d_model))
        for name, mats in per_head.items():
            weights[f"blocks.{layer}.attn.{name}"] = torch.stack(mats)
        weights[f"blocks.{layer}.mlp.W_in"] = _pad(params[f"{mlp}/linear_1"]["w"], d_model, d_mlp)
        weights[f"blocks.{layer}.mlp.b_in"] = torch.from_numpy(params[f"{mlp}/linear_1"]["b"])
        weights[f"blocks.{layer}.mlp.W_out"] = _pad(params[f"{mlp}/linear_2"]["w"], d_mlp, d_model)
        weights[f"blocks.{layer}.mlp.b_out"] = _pad(
            params[f"{mlp}/linear_2"]["b"][None], 1, d_model
        )[0]
    return weights


def _add_distractor_heads(
    weights: dict[str, torch.Tensor], free_slots: list[tuple[int, int]], d_read: int, seed: int
) -> None:
    """Random heads in ``free_slots`` (layer, head): read all dims, write dims >= ``d_read``."""
    rng = np.random.default_rng(seed)
    for layer, head in free_slots:
        for name in ("W_Q", "W_K", "W_V"):
            w = weights[f"blocks.{layer}.attn.{name}"][head]
            w.copy_(torch.from_numpy(rng.standard_normal(tuple(w.shape)).astype(np.float32)))
        w_o = weights[f"blocks.{layer}.attn.W_O"][head]
        d_head, d_extra = w_o.shape[0], w_o.shape[1] - d_read
        extra = rng.standard_normal((d_head, d_extra)) / np.sqrt(d_head)
        w_o[:, d_read:] = torch.from_numpy(extra.astype(np.float32))


def to_hooked_transformer(
    compiled: CompiledTask, variant: Variant = "exact", seed: int = 0
) -> HookedTransformer:
    """The compiled task as a ``HookedTransformer`` (see module docstring for ``variant``)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
    tracr = compiled.assembled.model_config
    d_model = len(compiled.assembled.residual_labels)
    n_heads, d_extra = tracr.num_heads, 0
    if variant == "distractors":
        n_heads = max(DISTRACTOR_HEADS_PER_LAYER, tracr.num_heads)
        d_extra = max(4, tracr.key_size)
    name = f"tracr-case-{compiled.task.case_id}-{variant}"
    cfg = _config(compiled, n_heads, d_model + d_extra, seed, name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = HookedTransformer(cfg)
    weights = _tracr_weights(compiled, cfg)
    if variant == "distractors":
        used = {n for parts in compiled.components.values() for n in parts if "." in n}
        free = [
            (layer, head)
            for layer in range(cfg.n_layers)
            for head in range(n_heads)
            if f"a{layer}.h{head}" not in used
        ]
        _add_distractor_heads(weights, free, d_model, seed)
    state = model.state_dict()  # keeps the attention buffers (masks) as TransformerLens made them
    for param_name, _ in model.named_parameters():
        state[param_name] = weights.get(param_name, torch.zeros_like(state[param_name]))
    model.load_state_dict(state)
    model.eval()
    return model


def encode_inputs(compiled: CompiledTask, inputs: Sequence[Sequence[Value]]) -> torch.Tensor:
    """Token ids with the compiler BOS prepended: (n, max_seq_len + 1) int64.

    Raises ValueError naming the first value outside the task's vocabulary.
    """
    encoding = compiled.assembled.input_encoder.encoding_map
    rows = []
    for seq in inputs:
        if len(seq) != compiled.task.max_seq_len:
            raise ValueError(
                f"input length {len(seq)} != max_seq_len {compiled.task.max_seq_len}: {seq!r}"
            )
        unknown = [v for v in seq if v not in compiled.task.vocab]
        if unknown:
            raise ValueError(f"value {unknown[0]!r} is not in the vocabulary of the task")
        rows.append([encoding[COMPILER_BOS], *(encoding[v] for v in seq)])
    return torch.tensor(rows, dtype=torch.long)


def decode_outputs(compiled: CompiledTask, logits: torch.Tensor) -> list[list[Value]]:
    """Program outputs at the non-BOS positions from logits (batch, pos, d_vocab_out)."""
    content = logits[:, 1:, :]
    if not compiled.categorical_output:
        return content[..., 0].tolist()
    decoder = compiled.assembled.output_encoder
    return [decoder.decode(row) for row in content.argmax(-1).tolist()]
