"""Memory and speed of the SAE-feature collector on a problem whose dense form does not fit in RAM.

A GPT-2-architecture model with random weights (``circuitlasso.data.models.tiny_gpt2``) and one wide
random TopK SAE per layer (``D = 32768``, ``k = 32``, the shape of OpenAI's GPT-2 SAEs) encode
many prompts of random English words. The per-token features, held dense, would take
``layers * M * tokens * D * 4`` bytes (``dense_equivalent_gib``: about 29 GiB by default, one
layer); the collector streams them and keeps only the sparse token averages ``Z: (M, D)``.

Peak memory is the process's peak resident set size (``VmHWM`` in ``/proc/self/status``),
reset just before the collection by writing ``5`` to ``/proc/self/clear_refs``, minus the
resident size at that moment: it counts every allocation the collection touches, torch's
included (``tracemalloc`` sees Python's allocator only). Where ``/proc`` cannot be reset the
benchmark falls back to the growth of ``ru_maxrss``, which can only under-count.

Run ``python benchmarks/collector.py`` (about two minutes on one core) or ``--quick``. The last
line printed is one JSON object: ``peak_gib``, ``dense_equivalent_gib``, ``prompts_per_second``.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
from sae_lens import TopKSAE, TopKSAEConfig
from sae_lens.saes.sae import SAEMetadata

from circuitlasso.collect import collect_sae_features
from circuitlasso.data.models import gpt2_tokenizer, tiny_gpt2
from circuitlasso.timing import Stopwatch

GIB = 2**30
DEFAULT_TOKENIZER = Path(__file__).resolve().parents[2] / "shared" / "data" / "gpt2-tokenizer"
WORDS = (
    "the of and to in is was he for it with as his on be at by had are but from or have an they "
    "which one you were her all she there would their we him been has when who will more no if "
    "out so said what up its about into than them can only other new some could time these two "
    "may then do first any my now such like our over man me even most made after also did many "
    "before must through back years where much your way well down should because each just "
    "those people how too little state good very make world still own see men work long get here "
    "between both life being under never day same another know while last might us great old "
    "year off come since against go came right used take three himself herself themselves"
).split()


def _resident_kib(field: str) -> int | None:
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    match = re.search(rf"^{field}:\s+(\d+) kB", status, re.MULTILINE)
    return int(match[1]) if match else None


class PeakMemory:
    """Peak resident memory above the resident memory at ``start()``, in bytes."""

    def start(self) -> None:
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
            self.method = "VmHWM after clear_refs"
        except OSError:
            self.method = "ru_maxrss growth"
        self.baseline_kib = _resident_kib("VmRSS") or 0
        self.maxrss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def peak_total(self) -> int:
        if self.method.startswith("VmHWM"):
            return 1024 * (_resident_kib("VmHWM") or 0)
        return 1024 * resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def peak_above_baseline(self) -> int:
        if self.method.startswith("VmHWM"):
            return self.peak_total() - 1024 * self.baseline_kib
        return self.peak_total() - 1024 * self.maxrss_kib


def make_prompts(n: int, min_words: int, max_words: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_words, max_words + 1, size=n)
    return [" ".join(rng.choice(WORDS, size=length)).capitalize() + "." for length in lengths]


def make_saes(n_layers: int, d_model: int, d_sae: int, k: int, seed: int) -> dict[int, TopKSAE]:
    saes = {}
    for layer in range(n_layers):
        torch.manual_seed(seed + layer)
        hook = f"blocks.{layer}.hook_resid_post"
        cfg = TopKSAEConfig(d_in=d_model, d_sae=d_sae, k=k, metadata=SAEMetadata(hook_name=hook))
        saes[layer] = TopKSAE(cfg).eval()
    return saes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=7168, help="M")
    parser.add_argument("--min-words", type=int, default=24)
    parser.add_argument("--max-words", type=int, default=40)
    parser.add_argument("--layers", type=int, default=1, help="model layers, one SAE each")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--d-sae", type=int, default=32768, help="D")
    parser.add_argument("--k", type=int, default=32, help="TopK SAE: active features per token")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", type=Path, default=None, help="GPT-2 tokenizer folder")
    parser.add_argument("--quick", action="store_true", help="256 prompts: a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.prompts = 256
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    torch.set_num_threads(args.threads)

    tokenizer_dir = args.tokenizer or (DEFAULT_TOKENIZER if DEFAULT_TOKENIZER.is_dir() else None)
    tokenizer = gpt2_tokenizer(tokenizer_dir)
    model = tiny_gpt2(
        n_layers=args.layers, d_model=args.d_model, n_heads=4, n_ctx=128, tokenizer=tokenizer
    )
    saes = make_saes(args.layers, args.d_model, args.d_sae, args.k, args.seed)
    prompts = make_prompts(args.prompts, args.min_words, args.max_words, args.seed)
    tokens = sum(len(ids) for ids in tokenizer(prompts, add_special_tokens=False)["input_ids"])
    m, d = len(prompts), args.d_sae

    memory = PeakMemory()
    with tempfile.TemporaryDirectory() as cache_dir:
        memory.start()
        clock = Stopwatch()
        z = collect_sae_features(
            model, saes, prompts, batch_size=args.batch_size, cache_dir=cache_dir
        )
        cold_s = clock.lap("run")
        peak_total, peak = memory.peak_total(), memory.peak_above_baseline()
        clock = Stopwatch()
        collect_sae_features(
            model, saes, prompts, batch_size=args.batch_size, cache_dir=cache_dir, progress=False
        )
        warm_s = clock.lap("run")

    sparse_bytes = sum(x.data.nbytes + x.indices.nbytes + x.indptr.nbytes for x in z.values())
    nnz_per_row = np.mean([x.nnz / m for x in z.values()])
    dense_tokens_gib = len(z) * tokens * d * 4 / GIB  # all layers' (M, tokens, D) float32
    dense_md_gib = len(z) * m * d * 4 / GIB  # all layers' (M, D) float32
    rows = [
        ("prompts M", f"{m}"),
        ("real tokens (all prompts)", f"{tokens} ({tokens / m:.1f} per prompt)"),
        ("layers x D (TopK k)", f"{len(z)} x {d} (k={args.k})"),
        ("batch size, torch threads", f"{args.batch_size}, {args.threads}"),
        ("dense M x tokens x D, all layers", f"{dense_tokens_gib:.2f} GiB"),
        ("dense M x D, all layers", f"{dense_md_gib:.3f} GiB"),
        ("sparse Z (CSR), all layers", f"{sparse_bytes / GIB:.3f} GiB ({nnz_per_row:.0f} nnz/row)"),
        ("baseline resident memory", f"{memory.baseline_kib / 2**20:.2f} GiB"),
        ("peak resident memory", f"{peak_total / GIB:.2f} GiB ({memory.method})"),
        ("peak above baseline", f"{peak / GIB:.2f} GiB"),
        ("collection time (cold)", f"{cold_s:.1f} s ({m / cold_s:.1f} prompts/s)"),
        ("rerun from cache", f"{warm_s:.2f} s"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    result = {
        "peak_gib": round(peak / GIB, 3),
        "dense_equivalent_gib": round(dense_tokens_gib, 2),
        "prompts_per_second": round(m / cold_s, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
