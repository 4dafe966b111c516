"""Word-level tokenizer of the toy language, wrapped for TransformerLens.

Text is lowercased and split on whitespace and punctuation; every encoding starts with
``<bos>``. ``<pad>`` pads batches on the right; words outside the vocabulary become ``<unk>``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from circuitlasso.cache import atomic_path
from circuitlasso.data.hf import lens_tokenizer

BOS, PAD, UNK = "<bos>", "<pad>", "<unk>"
SPECIAL_TOKENS = (BOS, PAD, UNK)
TOKENIZER_FILE = "tokenizer.json"


def build_tokenizer(words: Sequence[str]) -> PreTrainedTokenizerFast:
    """A tokenizer with ids 0, 1, 2 for ``<bos>``, ``<pad>``, ``<unk>`` and then ``words``."""
    clashes = sorted(w for w, n in Counter((*SPECIAL_TOKENS, *words)).items() if n > 1)
    if clashes:
        raise ValueError(f"words must be unique and not special tokens; repeated: {clashes[:5]}")
    vocab = {token: i for i, token in enumerate((*SPECIAL_TOKENS, *words))}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation("isolated")]
    )
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, vocab[BOS])]
    )
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    return _wrap(tokenizer)


def _wrap(tokenizer: Tokenizer) -> PreTrainedTokenizerFast:
    """The wrapper TransformerLens reads (the post-processor has already added the BOS)."""
    return lens_tokenizer(tokenizer, "circuitlasso-toyworld", bos=BOS, pad=PAD, unk=UNK)


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, path: Path) -> None:
    """Write ``tokenizer.json`` to ``path``, atomically."""
    with atomic_path(path) as tmp:
        tokenizer.backend_tokenizer.save(str(tmp))


def load_tokenizer(path: Path) -> PreTrainedTokenizerFast:
    """Read a tokenizer written by ``save_tokenizer``."""
    if not path.is_file():
        raise FileNotFoundError(f"no toy tokenizer at {path}")
    return _wrap(Tokenizer.from_file(str(path)))
