"""TopK SAEs on the residual stream of SmolLM2-135M-Instruct, trained here, shipped in the package.

No SAE of this decoder (:mod:`circuitlasso.data.smollm2`) is published, so they are trained here
on ``blocks.{l}.hook_resid_post`` (a block's output) at the real tokens of CoLA's 8,551 training
sentences, the English text available offline, with the training every model's SAEs share
(:func:`circuitlasso.data.sae_training.train_layer_sae`: sae-lens's ``SAETrainer`` on shuffled
token activations, in rounds, dead latents re-initialized between rounds). Their quality is
measured on CoLA's in-domain dev sentences, held out.

Layers (:data:`SAE_LAYERS`): every fifth block's output and the last, blocks 4, 9, 14, 19, 24
and 29 (0-indexed) of 30. Evenly spaced, so each layer-pair regression spans five blocks and the
circuit sees the whole depth; the last is the residual stream the unembedding reads (through the
final RMSNorm), where a readout of the label sits. Six SAEs of width 1536 fit the package's
budget for these weights (24 MB in float16, 3.5 MB a layer), where all 30 blocks would take
106 MB; a wider SAE (2048) would cost a layer.

The shared training, tokens, quality measures and build / ship / load steps are
:mod:`circuitlasso.data.decoder_saes`'s; :data:`SMOLLM2_SAES` names this set there. The model
reads each sentence after ``<|endoftext|>``, its BOS (:mod:`circuitlasso.data.smollm2`), which
becomes the decoder's attention sink: on CoLA its residual norm is 9 to 120 times the words'
after blocks 2, 4, 14, 19, 24 and 29 (twice after block 9). As a special id it is left out of
the mask, so neither training nor collection sees it. Read without it, the sentence's first word
is the sink, a real token, and held 69 % to 89 % of the variance of CoLA's dev tokens at blocks
4, 14, 19, 24 and 29: an SAE could pass the explained-variance bar by reconstructing that one
token. Among the words, block 4 has massive tokens of its own (most of them "the": 4 % of the
tokens, 70 % of the variance there).

``circuitlasso real decoder-saes --ship`` builds and ships them (BUILD_TIME) into the package
(``smollm2_built/``).
"""

from __future__ import annotations

from circuitlasso.data.decoder_saes import DecoderSAEs
from circuitlasso.data.sae_training import SAEConfig
from circuitlasso.data.smollm2 import GGUF_SHA256, N_LAYERS, NAME, load_smollm2

SAE_LAYERS = (4, 9, 14, 19, 24, 29)
"""The blocks whose output has an SAE (module docstring)."""
CIRCUIT_LAYERS = (4, 9, 14, 19)
"""The layers a CoLA circuit of this decoder keeps (the ``decoder`` profile's, the report's
readout): up to block 19, the last block where the readout clears the majority class by the
paper's own margin on GPT-2 (3.5 points). The readout on CoLA's 8,551 training sentences, scored
on the 527 in-domain dev ones (majority class 0.693), reaches 0.742 at block 14 (MCC 0.32) and
0.734 at block 19 (MCC 0.29), then falls: 0.715 at block 24 (MCC 0.22) and the majority class at
block 29 (0.694, MCC 0.08), where a dense probe of the residual stream (on 2,000 of the
sentences) does no better; at blocks 4 and 9 it stays at the majority class. The last blocks of
a language model serve the next token (``circuitlasso real report`` prints the readout on every
layer with an SAE). The forward pass of a circuit then stops after block 19."""
SAE_CONFIG = SAEConfig(k=48, training_tokens=300_000, b_dec_init="mean")
"""The SAEs' setting, the same for every layer: width 1536, k 48, 300,000 training tokens (about
3.7 passes over CoLA's training tokens) in 3 rounds, batches of 512, learning rate 1e-2, the
decoder bias started at the activations' mean. The cheapest setting of a sweep on the deepest
blocks that meets the bars (explained variance 0.8, at most 10 % dead) on every layer, in
2 x 300,000 tokens of one core's time: at k 32 blocks 19 and 24 explained 0.794 and 0.798; twice
the tokens gained block 29 as much as k 48 did (0.840 and 0.841 against 0.822); the bias started
at 0 left 26 % of block 29's latents dead (0.9 % from the mean)."""
SMOLLM2_SAES = DecoderSAEs(
    model=NAME,
    layers=SAE_LAYERS,
    n_layers=N_LAYERS,
    config=SAE_CONFIG,
    shipped_dir="smollm2_built",
    build_dir="smollm2-saes",
    command="circuitlasso real decoder-saes --ship",
    model_sha256=GGUF_SHA256,
    load=load_smollm2,
)
"""SmolLM2-135M's SAE set (:mod:`circuitlasso.data.decoder_saes` builds, ships and loads it)."""
