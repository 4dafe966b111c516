"""TopK SAEs on the residual stream of Gemma-3-270M (base), trained here, shipped in the package.

No SAE of this decoder (:mod:`circuitlasso.data.gemma3`) is published for its GGUF weights, so
they are trained here as SmolLM2's are (:mod:`circuitlasso.data.decoder_saes`: the output of a
block at the real tokens of CoLA's 8,551 training sentences, the quality on CoLA's in-domain dev
sentences); :data:`GEMMA3_SAES` names this set there.

Layers (:data:`SAE_LAYERS`): blocks 5, 11 and 17 (0-indexed) of 18, the three whose attention
sees the whole context (the other layers attend to a sliding window), evenly spaced, the last
the residual stream the unembedding reads. Three SAEs of width 1536 on d_model 640 take about
12 MB in float16 (3.9 MB a layer).

Tokens: Gemma's ``<bos>`` opens every sentence and is left out as a special id; no real token
is a sink here (the median norm of a sentence's first real token over the others' is 0.7 to
1.0). The residual stream's norm grows with depth (a median of about 3,500 after block 5 and
36,000 after block 17, the embedding scaled by sqrt(d_model)), with no massive tokens (the
largest norm under twice the median), so the decoder bias starts at the activations' mean.

``circuitlasso real decoder-saes --model gemma3-270m --ship`` builds and ships them into the
package (``gemma3_built/``).
"""

from __future__ import annotations

from circuitlasso.data.decoder_saes import DecoderSAEs
from circuitlasso.data.gemma3 import GGUF_SHA256, N_LAYERS, NAME, load_gemma3
from circuitlasso.data.sae_training import SAEConfig

SAE_LAYERS = (5, 11, 17)
"""The blocks whose output has an SAE (module docstring)."""
SAE_CONFIG = SAEConfig(k=64, training_tokens=300_000, b_dec_init="mean")
"""The SAEs' setting, the same for every layer: width 1536, k 64, 300,000 training tokens (about
3.8 passes over CoLA's 79,323 training tokens) in 3 rounds, batches of 512, learning rate 1e-2,
the decoder bias started at the activations' mean. The cheapest setting tried that meets the bars
(explained variance 0.8, at most 10 % dead) on every layer, about 50 s a layer on one core:
SmolLM2's setting (k 48) explained 0.803, 0.822 and 0.790 on blocks 5, 11 and 17, with 9.5 %
of block 5's latents dead; k 64 explained 0.920, 0.840 and 0.810 (7.8 %, 0.8 % and 0.1 % dead);
k 48 on twice the tokens 0.920, 0.848 and 0.814 (6.3 % dead at most), at twice the cost."""
GEMMA3_SAES = DecoderSAEs(
    model=NAME,
    layers=SAE_LAYERS,
    n_layers=N_LAYERS,
    config=SAE_CONFIG,
    shipped_dir="gemma3_built",
    build_dir="gemma3-saes",
    command="circuitlasso real decoder-saes --model gemma3-270m --ship",
    model_sha256=GGUF_SHA256,
    load=load_gemma3,
)
"""Gemma-3-270M's SAE set (:mod:`circuitlasso.data.decoder_saes` builds, ships and loads it)."""
