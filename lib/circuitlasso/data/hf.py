"""What the loaders of Hugging Face models share: a tokenizer wrapped as TransformerLens uses it,
the sizes a Hugging Face config names alike, transformers' loading bars as plain text, and, for
the GGUF decoders (:mod:`circuitlasso.data.smollm2`, :mod:`circuitlasso.data.gemma3`), their
dequantized weights cached as a Hugging Face folder and converted weights loaded into a
``HookedTransformer``, laid out for its linear layers. The model modules import it; it imports
none of them."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from safetensors.torch import save_model
from tokenizers import Tokenizer
from tqdm.std import tqdm as plain_tqdm
from transformer_lens import HookedTransformer
from transformers import PretrainedConfig, PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

from circuitlasso.cache import atomic_path


def lens_tokenizer(
    tokenizer: Tokenizer, name: str, *, bos: str, pad: str | None = None, unk: str | None = None
) -> PreTrainedTokenizerFast:
    """``tokenizer`` wrapped as TransformerLens uses it: ``bos`` is also EOS, and PAD and UNK
    where those are not given; ``add_bos_token`` says that ``encode`` starts with BOS; batches
    pad on the right."""
    special = {"bos_token": bos, "eos_token": bos, "pad_token": pad or bos, "unk_token": unk or bos}
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        name_or_path=name,
        add_bos_token=True,
        padding_side="right",
        **special,
    )


def hf_dimensions(c: PretrainedConfig) -> dict[str, Any]:
    """The ``HookedTransformerConfig`` sizes a Hugging Face config of a BERT, a Llama or a
    Gemma 3 names alike: layers, widths, heads (``d_head``: the config's ``head_dim`` where it
    has one, else the width over the heads; Gemma 3's heads are wider), vocabulary, context and
    the MLP's activation (Gemma's ``hidden_activation``, else ``hidden_act``)."""
    return dict(
        n_layers=c.num_hidden_layers,
        d_model=c.hidden_size,
        n_heads=c.num_attention_heads,
        d_head=getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
        d_mlp=c.intermediate_size,
        d_vocab=c.vocab_size,
        n_ctx=c.max_position_embeddings,
        act_fn=getattr(c, "hidden_activation", None) or c.hidden_act,
    )


HF_WEIGHTS = "model.safetensors"  # written last into a cached HF folder: there, it is whole


def save_hf_folder(folder: Path, model: Any, tokenizer: Any) -> Path:
    """Write a model read from a GGUF file (dequantized to float32) and its tokenizer as a
    Hugging Face folder, each file atomically and the weights (:data:`HF_WEIGHTS`, tied ones
    once) last, so that a folder holding them is whole; the GGUF's quantization left out of the
    config."""
    folder.mkdir(parents=True, exist_ok=True)
    config = model.config.to_dict()
    config.pop("quantization_config", None)  # dequantized: plain float32 weights now
    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        type(model.config).from_dict(config).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        save_model(model, str(Path(tmp) / HF_WEIGHTS), metadata={"format": "pt"})
        names = sorted(p.name for p in Path(tmp).iterdir() if p.is_file())
        for name in [n for n in names if n != HF_WEIGHTS] + [HF_WEIGHTS]:
            with atomic_path(folder / name, mode=0o644) as dest:
                shutil.move(Path(tmp) / name, dest)
    return folder


def hooked_from_state(
    cfg: Any, state: dict[str, torch.Tensor], tokenizer: Any = None
) -> HookedTransformer:
    """A ``HookedTransformer`` of config ``cfg`` holding the converted weights ``state``;
    ValueError where a weight is missing or left over (the buffers the config builds, rotary
    tables and masks, aside)."""
    model = HookedTransformer(cfg, tokenizer=tokenizer, move_to_device=False)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k not in dict(model.named_buffers())]
    if missing or unexpected:
        raise ValueError(f"weights do not fit: missing {missing}, unexpected {unexpected}")
    return lay_out_for_linear(model)


# the weights TransformerLens hands to ``F.linear`` as ``W.T.contiguous()`` on every forward
# (gated MLPs and the unembedding, to match Hugging Face's memory layout)
LINEAR_WEIGHTS = ("mlp.W_gate", "mlp.W_in", "mlp.W_out", "unembed.W_U")


def lay_out_for_linear(model: HookedTransformer) -> HookedTransformer:
    """``model`` with each weight of :data:`LINEAR_WEIGHTS` that a forward transposes into a
    contiguous copy stored already so (the transpose of a contiguous tensor: same shape, same
    values), so that the copy is a view: the same logits, bit for bit, without copying every
    such weight on every forward (SmolLM2's unembedding alone is 113 MB, Gemma 3's 671 MB: on a
    few short prompts, most of a pass). Strides survive ``.to(device)`` and ``.to(dtype)``."""
    gated = bool(model.cfg.gated_mlp)
    for name, parameter in model.named_parameters():
        linear = name.endswith(LINEAR_WEIGHTS[3]) or (gated and name.endswith(LINEAR_WEIGHTS[:3]))
        if linear and not parameter.T.is_contiguous():
            parameter.data = parameter.data.T.contiguous().T
    return model


@contextmanager
def hf_progress(*, show: bool) -> Iterator[None]:
    """transformers' progress bars (loading weights, reading a GGUF file) as plain text
    (``tqdm.std``: a line updated with ``\\r``) when ``show``, else none; never as notebook
    widgets. transformers draws them with ``tqdm.auto``, which in a kernel draws ipywidgets: an
    executed notebook keeps them and its rendered page then loads require.js and the widgets'
    HTML manager from a CDN. Bars turned off in transformers stay off; what it had is restored
    on exit."""

    def bar(*args: Any, **kwargs: Any) -> plain_tqdm:
        return plain_tqdm(*args, **{**kwargs, "disable": kwargs.get("disable") or not show})

    def hook(factory: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        plain = bar if hf_logging.is_progress_bar_enabled() else factory
        return previous(plain, args, kwargs) if previous is not None else plain(*args, **kwargs)

    # the GGUF reader imports tqdm.auto's bar itself, outside transformers' switch
    import transformers.modeling_gguf_pytorch_utils as gguf_reader

    previous = hf_logging.set_tqdm_hook(hook)
    try:
        with mock.patch.object(gguf_reader, "tqdm", bar):
            yield
    finally:
        hf_logging.set_tqdm_hook(previous)
