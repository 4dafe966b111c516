"""The forward-pass toolkit shared by collection, ablation and attribution: prompt checks,
tokenization into right-padded batches with a mask of the real tokens, how far to run the model,
and SAEs spliced into the forward pass. Decoders (``HookedTransformer``) and encoders
(``HookedEncoder``) run through one function, :func:`run_with_hooks`; an encoder attends to every
token but padding.

A *real token* is one whose id is not the tokenizer's BOS, EOS, PAD, CLS or SEP id
(:func:`special_token_ids`); every average over a prompt's tokens in this library is over its
real tokens, computed by :func:`mean_over_real`.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np
import torch
from sae_lens import SAE
from transformer_lens import HookedEncoder, HookedTransformer

Hook = tuple[str | Callable[..., Any], Callable[..., Any]]  # TransformerLens forward hook
Model = HookedTransformer | HookedEncoder


def check_prompts(prompts: Sequence[str]) -> list[str]:
    if isinstance(prompts, str):
        raise TypeError("prompts must be a sequence of strings, not a single string")
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts is empty: need at least one prompt")
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, str):
            raise TypeError(f"prompt {i} is a {type(prompt).__name__}, not a string: {prompt!r}")
    return prompts


def special_token_ids(model: Model) -> list[int]:
    """The model's tokenizer's BOS, EOS, PAD, CLS and SEP ids (:func:`special_ids`)."""
    if model.tokenizer is None:
        raise ValueError("the model has no tokenizer attached (model.set_tokenizer(...))")
    return special_ids(model.tokenizer)


def special_ids(tokenizer: Any) -> list[int]:
    """A tokenizer's BOS, EOS, PAD, CLS and SEP ids: the positions left out of the token
    average."""
    names = ("bos", "eos", "pad", "cls", "sep")
    ids = {getattr(tokenizer, f"{name}_token_id", None) for name in names}
    return sorted(i for i in ids if i is not None)


def real_token_mask(model: Model, tokens: torch.Tensor) -> torch.Tensor:
    """``tokens``' shape, bool: True where the id is no special id (:func:`special_token_ids`)."""
    special = torch.tensor(special_token_ids(model), dtype=tokens.dtype, device=tokens.device)
    return ~torch.isin(tokens, special)


def mean_over_real(
    x: torch.Tensor, real: torch.Tensor, *, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """``(B, d)`` mean, in ``dtype``, of each row's values at the positions ``real: (B, P)`` marks.

    ``x`` holds the values at every position, ``(B, P, d)``, or only those at the real ones,
    ``(T, d)`` with ``T = real.sum()`` in row-major order (``x_full[real]``), as a caller that
    computes nothing at the other positions has them. On ``x``'s device; differentiable.
    """
    real = real.to(x.device)
    if real.dtype != torch.bool or real.ndim != 2 or (x.ndim == 3 and x.shape[:2] != real.shape):
        raise ValueError(
            f"real must be a (B, P) bool mask matching x: {real.dtype} {tuple(real.shape)}, "
            f"x {tuple(x.shape)}"
        )
    counts = real.sum(1)
    if not bool(counts.all()):
        raise ValueError(f"row {int((counts == 0).nonzero()[0, 0])} has no real position")
    values = x[real] if x.ndim == 3 else x
    if values.ndim != 2 or len(values) != int(counts.sum()):
        raise ValueError(f"x must be (B, P, d) or ({int(counts.sum())}, d), got {tuple(x.shape)}")
    rows = real.nonzero()[:, 0]
    sums = torch.zeros(len(real), values.shape[1], dtype=dtype, device=x.device)
    return sums.index_add(0, rows, values.to(dtype)) / counts.to(dtype)[:, None]


def to_tokens(model: Model, prompts: list[str]) -> torch.Tensor:
    """Right-padded ``(B, P)`` token ids of ``prompts``, on the CPU, as the model reads them
    (a decoder's BOS prepended where its ``cfg.default_prepend_bos`` says so, an encoder's
    ``[CLS] ... [SEP]``), not truncated."""
    if isinstance(model, HookedEncoder):
        if model.tokenizer is None:
            raise ValueError("the model has no tokenizer attached (model.set_tokenizer(...))")
        encoded = model.tokenizer(prompts, padding=True, padding_side="right", return_tensors="pt")
        return encoded["input_ids"]
    return model.to_tokens(prompts, padding_side="right", truncate=False, move_to_device=False)


def prompt_ids(model: Model, prompt: str) -> torch.Tensor:
    """``(T,)`` token ids of one prompt as the model reads it, on the CPU."""
    return to_tokens(model, [prompt])[0]


def token_strings(model: Model, ids: torch.Tensor) -> list[str]:
    """Each token of ``ids: (T,)`` as text: a decoder's decoded pieces (leading spaces kept), an
    encoder's WordPiece tokens with a word's continuation ``##self`` shown as ``-self``."""
    if isinstance(model, HookedEncoder):
        assert model.tokenizer is not None
        pieces = model.tokenizer.convert_ids_to_tokens(ids.tolist())
        return [f"-{p[2:]}" if p.startswith("##") else p for p in pieces]
    return [str(t) for t in model.to_str_tokens(ids)]


def single_token_id(model: Model, text: str) -> int:
    """The id of ``text`` as one token of the model's vocabulary (ValueError unless it is one);
    an encoder also reads a continuation piece as :func:`token_strings` writes it (``-self``)."""
    if isinstance(model, HookedEncoder):
        assert model.tokenizer is not None
        piece = f"##{text[1:]}" if text.startswith("-") and len(text) > 1 else text
        found = model.tokenizer.convert_tokens_to_ids(piece)
        if found is None or found == model.tokenizer.unk_token_id:
            raise ValueError(f"{text!r} is not a single token of the model's vocabulary")
        return int(found)
    try:
        return int(model.to_single_token(text))
    except AssertionError:  # TransformerLens asserts
        raise ValueError(f"{text!r} is not a single token of the model's vocabulary") from None


def run_with_hooks(
    model: Model,
    tokens: torch.Tensor,
    hooks: Sequence[Hook],
    *,
    stop_at_layer: int | None = None,
) -> torch.Tensor | None:
    """Run ``model`` on right-padded ``tokens: (B, P)`` with forward ``hooks``.

    A decoder stops before block ``stop_at_layer`` (None: runs to the logits, returned). An
    encoder attends to every position but padding and returns its MLM logits only when
    ``stop_at_layer`` is None; otherwise it runs its blocks (they are few: all of them) and not
    its MLM head, whose projection onto the vocabulary costs about as much as the blocks
    (``HookedEncoder.forward`` computes it even when asked for no output).
    """
    tokens = tokens.to(model.cfg.device)
    if isinstance(model, HookedEncoder):
        assert model.tokenizer is not None
        attend = (tokens != model.tokenizer.pad_token_id).long()
        with model.hooks(fwd_hooks=list(hooks)):
            if stop_at_layer is None:
                return model(tokens, one_zero_attention_mask=attend)
            model.encoder_output(tokens, one_zero_attention_mask=attend)
            return None
    return model.run_with_hooks(tokens, fwd_hooks=list(hooks), stop_at_layer=stop_at_layer)


def read_logits(
    model: HookedTransformer, tokens: torch.Tensor, hooks: Sequence[Hook], read: torch.Tensor
) -> torch.Tensor:
    """``(B, P, V)`` logits of a decoder's pass on ``tokens: (B, P)`` with forward ``hooks``,
    unembedded only where ``read: (B, P)`` is True (zeros elsewhere): a metric that reads a few
    positions needs no other, and unembedding a large vocabulary at every position is a good
    share of a small model's pass."""
    tokens = tokens.to(model.cfg.device)
    resid = model.run_with_hooks(tokens, fwd_hooks=list(hooks), stop_at_layer=model.cfg.n_layers)
    read = read.to(resid.device)
    logits = resid.new_zeros(*tokens.shape, model.cfg.d_vocab_out)
    final = resid[read][:, None]  # (K, 1, d_model)
    if model.cfg.normalization_type is not None:
        final = model.ln_final(final)
    logits[read] = model.unembed(final)[:, 0]
    return logits


def hook_activations(
    model: Model,
    tokens: torch.Tensor,
    hooks: Sequence[str],
    *,
    stop_at_layer: int | None = None,
) -> dict[str, torch.Tensor]:
    """``{hook: (B, P, d)}`` activations of ``model`` on ``tokens`` at each named hook
    (:func:`run_with_hooks`, on the model's device)."""
    saved: dict[str, torch.Tensor] = {}

    def save(x: torch.Tensor, hook: Any) -> None:
        saved[hook.name] = x

    run_with_hooks(model, tokens, [(name, save) for name in hooks], stop_at_layer=stop_at_layer)
    return saved


def tokenize_batch(
    model: Model, prompts: list[str], first: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``tokens: (B, P)`` of prompts ``first...`` and ``real: (B, P)``
    (:func:`real_token_mask`); an error names a prompt with no real token or too many."""
    tokens = to_tokens(model, prompts)
    real = real_token_mask(model, tokens)
    n_ctx = model.cfg.n_ctx
    too_long = real[:, n_ctx:].any(1).nonzero()[:, 0]
    if len(too_long):
        row = int(too_long[0])
        raise ValueError(
            f"prompt {first + row} is longer than the model's context of {n_ctx} tokens: "
            f"{prompts[row][:80]!r}"
        )
    empty = (~real.any(1)).nonzero()[:, 0]
    if len(empty):
        row = int(empty[0])
        raise ValueError(
            f"prompt {first + row} has no token to average over (only BOS, EOS or padding): "
            f"{prompts[row]!r}"
        )
    return tokens[:, :n_ctx], real[:, :n_ctx]


def stop_at_layer(hooks: Sequence[str]) -> int | None:
    """The ``stop_at_layer`` that runs the model just far enough to reach every hook."""
    last = -1
    for hook in hooks:
        match = re.match(r"blocks\.(\d+)\.", hook)
        if match:
            last = max(last, int(match[1]))
        elif not hook.startswith("hook_"):  # ln_final, unembed: the whole model runs
            return None
    return last + 1


def to_dense(z: torch.Tensor) -> torch.Tensor:
    """``z`` as a dense tensor (sae-lens SAEs may encode to a sparse one)."""
    return z.to_dense() if z.is_sparse else z


_BLOCK_HOOK = re.compile(r"blocks\.(\d+)\.")


SAEMap: TypeAlias = Mapping[int, SAE] | Mapping[str, SAE] | Mapping[int | str, SAE]
"""SAEs keyed by TransformerLens hook name or by the int layer of their hook."""


def sae_layers(saes: SAEMap) -> dict[int, SAE]:
    """The SAEs of ``saes`` keyed by the layer of their hook, each key checked.

    A key is a TransformerLens hook name, ``"blocks.{L}.hook_resid_post"``, which must be the
    hook the SAE reads (``sae.cfg.metadata.hook_name``), or its shorthand, the int layer ``L``,
    which must be the block of that hook. The features of one SAE per layer make a circuit, so
    two SAEs of one layer (say ``resid_pre`` and ``resid_post``) are an error: an int could not
    say which one it means. A hook outside the blocks (``hook_embed``, ``ln_final...``) has no
    layer: only an int key can place it. Anything else (a key of another type, a hook name
    that is not the SAE's) is a ``ValueError`` naming the key and the hook.
    """
    layers: dict[int, SAE] = {}
    for key, sae in saes.items():
        hook = str(sae.cfg.metadata.hook_name)
        match = _BLOCK_HOOK.match(hook)
        if isinstance(key, str):
            if key != hook:
                raise ValueError(f"the SAE under hook key {key!r} reads hook {hook!r}")
            if match is None:
                raise ValueError(
                    f"hook {hook!r} is outside the blocks: key its SAE by the int layer it "
                    "stands for"
                )
            layer = int(match[1])
        elif isinstance(key, bool) or not isinstance(key, numbers.Integral):
            raise ValueError(f"SAE key {key!r} (hook {hook!r}) is neither a hook name nor a layer")
        else:
            layer = int(key)
            if match is not None and int(match[1]) != layer:
                raise ValueError(
                    f"the SAE under layer key {key} reads hook {hook!r}, a hook of layer "
                    f"{int(match[1])}: key each SAE by its hook name or the layer of its hook"
                )
        if layer in layers:
            other = str(layers[layer].cfg.metadata.hook_name)
            raise ValueError(
                f"two SAEs of layer {layer} (hooks {other!r} and {hook!r}): a circuit reads one "
                "SAE per layer"
            )
        layers[layer] = sae
    return layers


def splice_hooks(
    saes: SAEMap,
    real: torch.Tensor,
    ablate: Mapping[int, torch.Tensor] | None = None,
    means: Mapping[int, torch.Tensor] | None = None,
    record: dict[int, torch.Tensor] | None = None,
) -> list[Hook]:
    """Forward hooks splicing each SAE into the model at its hook point.

    ``real: (B, P)`` bool marks the real tokens; ``ablate[layer]: (D,)`` bool the features set
    to ``means[layer]: (D,)`` at real tokens; ``record[layer]`` receives the (ablated) features
    ``(B, P, D)``. The hook returns ``decode(z') + (x - decode(z))``: ``x`` itself, without a
    decode, at a layer with no feature to ablate. Each SAE is keyed by its
    hook name or the layer of its hook (:func:`sae_layers`); ``ablate``, ``means`` and
    ``record`` are keyed by layer.
    """
    saes = sae_layers(saes)
    ablate = ablate or {}
    hooks: list[Hook] = []
    for layer, sae in saes.items():

        def splice(x: torch.Tensor, hook: Any, layer: int = layer, sae: SAE = sae) -> torch.Tensor:
            mask = ablate.get(layer)
            edits = mask is not None and bool(mask.any())
            if not edits and record is None:
                return x  # decode(z) + (x - decode(z)), without encoding
            z = edited = to_dense(sae.encode(x))
            if edits:
                assert mask is not None and means is not None
                where = real.to(z.device)[:, :, None] & mask.to(z.device)
                edited = torch.where(where, means[layer].to(z), z)
            if record is not None:
                record[layer] = edited
            return sae.decode(edited) + (x - sae.decode(z)) if edits else x

        hooks.append((str(sae.cfg.metadata.hook_name), splice))
    return hooks


def prompt_batches(
    model: Model, prompts: Sequence[str], batch_size: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Right-padded ``(tokens, real)`` per batch of prompts, as the collector tokenizes them."""
    prompts = check_prompts(prompts)
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    return [
        tokenize_batch(model, prompts[s : s + batch_size], s)
        for s in range(0, len(prompts), batch_size)
    ]


def length_order(model: Model, prompts: Sequence[str], batch_size: int) -> torch.Tensor:
    """``(n,)`` permutation of ``prompts``, fewest real tokens first, ties by their text: the same
    prompts in any order are put in the same order (and cut into the same batches).

    Batches cut from this order pad little: on CoLA's training sentences in input order, a batch
    of 64 runs about twice the tokens it reads. Checks every prompt as :func:`tokenize_batch`
    does, naming it by its place in ``prompts``.
    """
    lengths = torch.cat([real.sum(1) for _, real in prompt_batches(model, prompts, batch_size)])
    length = lengths.tolist()
    return torch.tensor(sorted(range(len(prompts)), key=lambda i: (length[i], prompts[i])))


def batches_by_length(
    model: Model, prompts: Sequence[str], batch_size: int
) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], np.ndarray]:
    """:func:`prompt_batches` of the prompts shortest first (:func:`length_order`), and
    ``order: (n,)``, the place in ``prompts`` of each row of the batches stacked: per-prompt
    inputs ``x`` go in as ``x[order]``, per-prompt results ``r`` come back as
    ``r[np.argsort(order)]``."""
    prompts = check_prompts(prompts)
    order = length_order(model, prompts, batch_size).numpy()
    return prompt_batches(model, [prompts[i] for i in order], batch_size), order


def stop_for_saes(saes: SAEMap) -> int | None:
    """The ``stop_at_layer`` that runs the model just far enough for every SAE's hook."""
    return stop_at_layer([str(sae.cfg.metadata.hook_name) for sae in saes.values()])


def residual_gradient(
    model: HookedTransformer,
    logits: torch.Tensor,
    value: Callable[[torch.Tensor], torch.Tensor],
    scale: torch.Tensor | None,
) -> torch.Tensor:
    """``(B, P, d_model)`` float64 gradient of the scalar ``value(logits)`` with respect to the
    final residual stream, read back from the ``logits: (B, P, V)`` through ``W_U`` and the
    final LayerNorm with its ``scale: (B, P, 1)`` held fixed (None: a model without one), its
    weight where not folded into ``W_U``, and its centring: the metric's gradient alone, with no
    backward pass through the model. A direction ``d`` added to the final residual stream at a
    position moves ``value`` by about ``d @ gradient[b, p]``."""
    leaf = logits.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        (gradient,) = torch.autograd.grad(value(leaf), leaf)
    direction = gradient.double() @ model.W_U.detach().double().T
    weight = getattr(getattr(model, "ln_final", None), "w", None)  # None: folded into W_U
    if isinstance(weight, torch.Tensor):
        direction = direction * weight.detach().double()
    if model.cfg.normalization_type in ("LN", "LNPre"):
        direction = direction - direction.mean(-1, keepdim=True)
    return direction if scale is None else direction / scale.double()
