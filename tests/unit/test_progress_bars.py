"""Progress bars are plain text (``tqdm.std``), the library's own and those of the libraries it
calls while loading a model or training an SAE: ``tqdm.auto`` draws ipywidgets in a kernel, which
an executed notebook keeps and its rendered page loads require.js and the widgets' HTML manager
for, from a CDN (the book offline)."""

from __future__ import annotations

import nbformat
import pytest
import torch
import transformers.modeling_gguf_pytorch_utils as gguf_reader
from nbclient import NotebookClient
from sae_lens.training import sae_trainer
from tqdm.std import tqdm as plain_tqdm
from transformers.utils import logging as hf_logging

from circuitlasso.data import minilm_cola, sae_training
from circuitlasso.data.hf import hf_progress

WIDGET = "application/vnd.jupyter.widget-view+json"


def test_the_librarys_bars_are_plain_text() -> None:
    assert sae_training.tqdm is plain_tqdm and minilm_cola.tqdm is plain_tqdm


def test_transformers_bars_are_plain_text_or_off_while_a_model_loads() -> None:
    before = gguf_reader.tqdm
    with hf_progress(show=True):
        bars = [hf_logging.tqdm(range(2)), gguf_reader.tqdm(range(2))]
        assert all(type(bar) is plain_tqdm and not bar.disable for bar in bars)
    with hf_progress(show=False):
        assert all(bar.disable for bar in [hf_logging.tqdm(range(2)), gguf_reader.tqdm(range(2))])
    assert gguf_reader.tqdm is before
    assert hf_logging.set_tqdm_hook(None) is None  # none was set before: none is left


def test_bars_turned_off_in_transformers_stay_off() -> None:
    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with hf_progress(show=True):
            assert isinstance(hf_logging.tqdm(range(2)), hf_logging.EmptyTqdm)
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def test_sae_lens_trains_with_a_plain_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    fit = sae_trainer.SAETrainer.fit

    def watched(self):
        seen.append(sae_trainer.tqdm)  # the bar sae-lens's trainer draws with
        return fit(self)

    monkeypatch.setattr(sae_trainer.SAETrainer, "fit", watched)
    before = sae_trainer.tqdm
    cfg = sae_training.SAEConfig(width=16, k=2, training_tokens=512, rounds=1, batch_tokens=256)
    sae_training.train_layer_sae(torch.randn(512, 8), 0, cfg, "blocks.0.hook_resid_post")
    assert seen == [plain_tqdm] and sae_trainer.tqdm is before


@pytest.mark.slow
def test_a_notebook_gets_no_widget_from_a_model_load() -> None:
    """In a kernel, transformers' bar is a widget (the check sees one) but not while loading."""
    bar = "for _ in hf_logging.tqdm(range(3), desc='Loading weights'): pass"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("from transformers.utils import logging as hf_logging\n" + bar),
        nbformat.v4.new_code_cell(
            "import transformers.modeling_gguf_pytorch_utils as gguf_reader\n"
            "from circuitlasso.data.hf import hf_progress\n"
            f"with hf_progress(show=True):\n    {bar}\n"
            "    for _ in gguf_reader.tqdm(range(3), desc='GGUF tensors'): pass"
        ),
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    widgets = [sum(WIDGET in o.get("data", {}) for o in cell.outputs) for cell in nb.cells]
    text = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    assert widgets == [1, 0]
    assert "Loading weights: 100%" in text and "GGUF tensors: 100%" in text
