"""One-command, seeded build of the toy world: tokenizer, language model, one SAE per layer,
report and manifest, written to a staging folder and swapped into place when complete; and a
second SAE build of the shipped world (:func:`retrained_toy_saes`: the same model and texts,
the SAEs trained again by another seed)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from circuitlasso.cache import cache_root
from circuitlasso.data.artifacts import (
    MANIFEST_FILE,
    REPORT_FILE,
    staged_folder,
    write_json,
    write_manifest,
)
from circuitlasso.data.sae_training import SAEConfig
from circuitlasso.data.toyworld.artifacts import (
    MODEL_DIR,
    default_toy_dir,
    load_toy_model,
    save_model,
)
from circuitlasso.data.toyworld.datasets import lm_training_texts
from circuitlasso.data.toyworld.grammar import vocabulary
from circuitlasso.data.toyworld.lm import (
    LMConfig,
    architecture,
    encode_documents,
    make_model,
    train_lm,
)
from circuitlasso.data.toyworld.report import toy_report
from circuitlasso.data.toyworld.saes import sae_texts, train_saes
from circuitlasso.data.toyworld.tokenizer import TOKENIZER_FILE, build_tokenizer, save_tokenizer


@dataclass(frozen=True)
class BuildConfig:
    """Corpus size, language model and SAE settings of a build (``sae.seed`` is the build's)."""

    n_sentences: int
    n_biographies: int
    lm: LMConfig
    sae: SAEConfig
    sae_texts: int
    """Training texts, drawn at random, on whose real tokens the SAEs train."""


FULL = BuildConfig(
    n_sentences=60_000,
    n_biographies=12_000,
    lm=LMConfig(),
    sae=SAEConfig(width=2048, training_tokens=1_000_000, rounds=5, batch_tokens=2048, lr=4e-3),
    sae_texts=20_000,
)
QUICK = BuildConfig(
    n_sentences=4_000,
    n_biographies=800,
    lm=LMConfig(
        n_layers=2, d_model=32, n_heads=2, d_mlp=128, epochs=1, batch_tokens=1024, warmup_steps=10
    ),
    sae=SAEConfig(width=512, training_tokens=40_000, rounds=2),
    sae_texts=2_000,
)


def build_command(out_dir: Path, seed: int, quick: bool) -> str:
    """The ``circuitlasso`` command line that makes this build."""
    parts = ["circuitlasso", "toy", "build"]
    if out_dir.resolve() != default_toy_dir().resolve():
        parts += ["--out", str(out_dir)]
    parts += ["--seed", str(seed)] + (["--quick"] if quick else [])
    return " ".join(parts)


@contextmanager
def _deterministic() -> Iterator[None]:
    """Deterministic kernels on one thread (sums do not depend on the machine's core count)."""
    previous = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous[0])
        torch.set_num_threads(previous[1])


def _make_readable(root: Path) -> None:
    """Files 0644 and folders 0755 (some writers create private temporary files)."""
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def build_toy_world(out_dir: Path | str | None = None, seed: int = 0, quick: bool = False) -> Path:
    """Generate the corpus, train the LM and one SAE per layer, and write everything (plus
    ``report.json`` and ``manifest.json``) to ``out_dir`` (default: :func:`default_toy_dir`)."""
    out = Path(out_dir) if out_dir is not None else default_toy_dir()
    base = QUICK if quick else FULL
    cfg = replace(base, sae=replace(base.sae, seed=seed))
    with _deterministic(), staged_folder(out) as stage:
        tokenizer = build_tokenizer(vocabulary())
        save_tokenizer(tokenizer, stage / TOKENIZER_FILE)
        texts = lm_training_texts(seed, cfg.n_sentences, cfg.n_biographies)
        documents = encode_documents(tokenizer, texts, cfg.lm.n_ctx)
        arch = architecture(cfg.lm, len(tokenizer))
        torch.manual_seed(seed)
        model = make_model(arch, tokenizer)
        train_lm(model, documents, cfg.lm, seed)
        save_model(model, arch, seed, stage)
        train_saes(model, sae_texts(texts, cfg.sae_texts, seed), cfg.sae, stage)
        write_json(stage / REPORT_FILE, toy_report(stage))
        _make_readable(stage)
        write_manifest(
            stage,
            {
                "command": build_command(out, seed, quick),
                "seed": seed,
                "quick": quick,
                "config": asdict(cfg),
            },
        )
    return out


def retrained_toy_saes(
    sae_seed: int, out_dir: Path | str | None = None, source: Path | str | None = None
) -> Path:
    """A toy world holding ``source``'s (default: the shipped one's) tokenizer and language model
    and SAEs trained again on the same texts with the SAE seed ``sae_seed`` (the source's SAEs
    have its build seed): a second SAE build, to tell a result that the SAEs make from one the
    model makes. Written to ``out_dir`` (default: ``toy_saes/seed-<sae_seed>`` in the cache) with
    a manifest when complete; a complete one there is returned as it is. Load its SAEs with
    ``load_toy_saes(path=...)``. They train on the stored model (its weights rounded to
    float16), the source's on the model as it trained. Minutes on one core with the full build's
    SAE settings."""
    source = default_toy_dir() if source is None else Path(source)
    out = Path(out_dir) if out_dir is not None else cache_root() / "toy_saes" / f"seed-{sae_seed}"
    if (out / MANIFEST_FILE).is_file():
        return out
    shipped = json.loads((source / MANIFEST_FILE).read_text())
    seed, cfg = shipped["seed"], QUICK if shipped["quick"] else FULL
    with _deterministic(), staged_folder(out) as stage:
        shutil.copytree(source / MODEL_DIR, stage / MODEL_DIR)
        shutil.copy(source / TOKENIZER_FILE, stage / TOKENIZER_FILE)
        model = load_toy_model(source)
        texts = lm_training_texts(seed, cfg.n_sentences, cfg.n_biographies)
        train_saes(model, sae_texts(texts, cfg.sae_texts, seed), replace(cfg.sae, seed=sae_seed),
                   stage)  # fmt: skip
        write_manifest(stage, {"retrained_from": shipped["command"], "build_seed": seed,
                               "sae_seed": sae_seed, "sae": asdict(cfg.sae)})  # fmt: skip
    return out
