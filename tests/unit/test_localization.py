"""The localization comparison's pieces on a tiny random GPT-2 with GPT-2's mirrored tokenizer:
CircuitLasso's averaged tokens, the settings' checks, a scoring's top heads, and the heads'
direct effects against ablating a last-layer head with the final norm's scale held fixed."""

import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from circuitlasso.circuits.components import component_circuit
from circuitlasso.data import models
from circuitlasso.data.counterfactual_tasks import encode_for_model, logit_difference, task_splits
from circuitlasso.evaluation import localization
from circuitlasso.evaluation.head_roles import candidates_in_circuits, direct_effects
from circuitlasso.evaluation.localization import LocalizationSettings
from circuitlasso.evaluation.mib import mib_edges
from circuitlasso.presentation import plots

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tokenizer(gpt2_tokenizer_dir: Path):
    return models.gpt2_tokenizer(gpt2_tokenizer_dir)


def _model(tokenizer, n_layers: int = 1):
    model = models.tiny_gpt2(n_layers=n_layers, d_model=16, n_heads=2, n_ctx=32,
                             tokenizer=tokenizer)  # fmt: skip
    model.set_use_split_qkv_input(True)
    model.set_use_hook_mlp_in(True)
    return model


def test_lasso_positions_choose_the_tokens_circuitlasso_averages(tokenizer):
    model = _model(tokenizer)
    train = encode_for_model(model, task_splits("ioi", tokenizer, 6, 1).train)
    answers = torch.stack([train.answer, train.wrong], 1)
    tokens = torch.cat([train.clean, train.counterfactual])
    method = "circuitlasso-linear-read"
    found = {}
    for positions, mask in (("last", train.last_mask), ("real", train.real_mask)):
        settings = LocalizationSettings(lasso_positions=positions, memory_gib=1.0)
        found[positions] = localization.find_scores(method, model, train, settings)
        reference = component_circuit(
            model,
            tokens,
            torch.cat([mask, mask]),
            read_projection=True,
            answers=torch.cat([answers, answers]),
        )
        assert found[positions] == reference.scores
    assert found["last"] != found["real"]


def test_random_scores_are_a_seeded_score_for_every_mib_edge(tokenizer):
    model = _model(tokenizer)
    train = encode_for_model(model, task_splits("ioi", tokenizer, 2, 1).train)
    found = [
        localization.find_scores("random", model, train, LocalizationSettings(seed=seed))
        for seed in (0, 0, 1)
    ]
    assert list(found[0]) == mib_edges(model)
    noise = np.random.default_rng(0).standard_normal(len(found[0]))
    np.testing.assert_array_equal(list(found[0].values()), noise)
    assert found[0] == found[1] and found[0] != found[2]


def test_patching_flags_are_on_inside_and_the_callers_after_even_on_error(tokenizer):
    model = models.tiny_gpt2(n_layers=1, d_model=16, n_heads=2, n_ctx=32, tokenizer=tokenizer)
    model.set_use_hook_mlp_in(True)
    before = {flag: getattr(model.cfg, flag) for flag in localization.PATCHING_FLAGS}
    with pytest.raises(RuntimeError, match="inside"):
        with localization.patching_flags(model) as flagged:
            assert all(getattr(flagged.cfg, flag) for flag in localization.PATCHING_FLAGS)
            raise RuntimeError("inside")
    assert {flag: getattr(model.cfg, flag) for flag in localization.PATCHING_FLAGS} == before


def test_settings_refuse_what_cannot_run():
    with pytest.raises(ValueError, match="subset of"):
        LocalizationSettings(methods=["acdc"])
    with pytest.raises(ValueError, match="increase strictly"):
        LocalizationSettings(fractions=[0.1, 0.05])
    with pytest.raises(ValueError, match="increase strictly"):
        LocalizationSettings(fractions=[0.5, 2.0])
    with pytest.raises(ValueError, match="n_train and n_test"):
        LocalizationSettings(n_test=0)
    with pytest.raises(ValueError, match="lasso_positions"):
        LocalizationSettings(lasso_positions="first")  # type: ignore[arg-type]
    settings = LocalizationSettings(methods=["eap"], fractions=[0.5, 1])
    assert settings.methods == ("eap",) and settings.fractions == (0.5, 1.0)


def test_head_scores_sum_the_edges_a_head_sends(tokenizer):
    model = _model(tokenizer, n_layers=2)
    scores = {
        ("a0.h1", "a1.h0.q"): -3.0,  # |score|: a head's edges count by magnitude
        ("a0.h1", "output"): 1.0,
        ("a0.h0", "m0"): 2.5,
        ("m0", "output"): 9.0,  # not a head
        ("input", "a0.h0.v"): 7.0,  # received, not sent
    }
    top = localization.head_scores(model, scores, n=3)
    assert top == [("a0.h1", 4.0), ("a0.h0", 2.5), ("a1.h0", 0.0)]


def test_direct_effect_of_a_last_layer_head_is_its_ablation_with_the_scale_fixed(tokenizer):
    """With the last block's MLP output and the final norm's scale held at the clean run's, a
    last-layer head reaches the logits only directly: zeroing its output moves the mean logit
    difference by minus its direct effect."""
    model = _model(tokenizer, n_layers=2)
    tokens = encode_for_model(model, task_splits("ioi", tokenizer, 5, 1).train)
    effects = direct_effects(model, tokens, batch_size=2).set_index("head")
    assert len(effects) == 4
    whole = direct_effects(model, tokens)  # one batch, sorted largest first
    assert whole["direct_effect"].is_monotonic_decreasing
    assert whole.set_index("head")["direct_effect"].to_dict() == pytest.approx(
        effects["direct_effect"].to_dict(), abs=1e-6
    )
    with torch.no_grad():
        names = ("ln_final.hook_scale", "blocks.1.hook_mlp_out")
        _, cache = model.run_with_cache(tokens.clean, names_filter=lambda name: name in names)
        clean = float(logit_difference(model(tokens.clean), tokens).mean())
    held = [(name, lambda act, hook: cache[hook.name]) for name in names]
    for head in range(2):

        def zero(act, hook, head=head):
            act[:, :, head] = 0.0
            return act

        with torch.no_grad():
            logits = model.run_with_hooks(
                tokens.clean,
                fwd_hooks=[("blocks.1.attn.hook_z", zero), *held],
            )
        ablated = float(logit_difference(logits, tokens).mean())
        expected = effects.loc[f"a1.h{head}", "direct_effect"]
        assert abs(expected) > 1e-4
        assert clean - ablated == pytest.approx(expected, abs=1e-4)


def test_attention_to_the_answer_reads_the_pattern_at_the_answers_positions(tokenizer):
    model = _model(tokenizer, n_layers=1)
    tokens = encode_for_model(model, task_splits("ioi", tokenizer, 3, 1).train)
    effects = direct_effects(model, tokens).set_index("head")
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens.clean, names_filter="blocks.0.attn.hook_pattern")
    pattern = cache["blocks.0.attn.hook_pattern"]  # (B, H, Q, K)
    for head in range(2):
        answer, wrong = [], []
        for i in range(len(tokens)):
            row = pattern[i, head, int(tokens.last[i])]
            ids = tokens.clean[i].tolist()
            answer.append(sum(float(row[k]) for k, t in enumerate(ids) if t == tokens.answer[i]))
            wrong.append(sum(float(row[k]) for k, t in enumerate(ids) if t == tokens.wrong[i]))
        assert effects.loc[f"a0.h{head}", "attention_answer"] == pytest.approx(
            sum(answer) / len(answer), abs=1e-6
        )
        assert effects.loc[f"a0.h{head}", "attention_wrong"] == pytest.approx(
            sum(wrong) / len(wrong), abs=1e-6
        )
    assert (effects["attention_answer"] > 0).all()  # the IO name appears in every prompt


def test_candidates_are_ranked_in_each_methods_heads():
    effects = pd.DataFrame(
        {
            "head": ["a3.h1", "a2.h0", "a1.h1"],
            "direct_effect": [2.0, 1.0, 0.5],
            "attention_answer": [0.6, 0.2, 0.1],
            "attention_wrong": [0.1, 0.3, 0.2],
        }
    )
    table = candidates_in_circuits(effects, {"eap": ["a2.h0", "a3.h1"], "lasso": ["a0.h0"]}, n=2)
    assert list(table["head"]) == ["a3.h1", "a2.h0"]
    assert table["eap"].tolist() == [2, 1]
    assert table["lasso"].isna().all()
    with pytest.raises(ValueError, match="n must be"):
        candidates_in_circuits(effects, {}, n=0)


def test_compare_methods_tables_summary_and_store(tokenizer, tmp_path: Path):
    model = models.tiny_gpt2(n_layers=2, d_model=16, n_heads=2, n_ctx=32, tokenizer=tokenizer)
    settings = LocalizationSettings(["eap", "eap-ig"], 4, 3, (0.1, 0.5, 1.0), ig_steps=2)
    flags = localization.PATCHING_FLAGS
    assert not any(getattr(model.cfg, flag) for flag in flags)
    run = localization.compare_methods(model, ["ioi", "sva"], settings, store=tmp_path,
                                       progress=False)  # fmt: skip
    assert not any(getattr(model.cfg, flag) for flag in flags)  # the caller's flags, restored
    assert [(r.task, r.method) for r in run.table.itertuples()] == [
        ("ioi", "eap"), ("ioi", "eap-ig"), ("sva", "eap"), ("sva", "eap-ig")
    ]  # fmt: skip
    assert run.n_edges == 2 * 3 * 1 + 3 + 2 * 3 * 4 + 6 + 7  # as the benchmark's test counts
    assert all(f[-1] == pytest.approx(1.0) for f in run.table["faithfulness"])
    curves = run.curves()
    assert len(curves) == 4 * 3 and set(curves["fraction"]) == {0.1, 0.5, 1.0}
    assert list(run.summary_table().columns[-3:]) == ["f@0.1", "f@0.5", "f@1"]
    models_table = run.model_table()
    assert list(models_table["split"]) == ["train", "test", "train", "test"]
    assert (models_table["items"] == [4, 3, 4, 3]).all()
    heads = run.top_heads_table(n=3)
    assert heads.shape == (3, 4) and heads.index.name == "rank"
    assert run.top_heads("ioi")["eap"] == [h for h, _ in run.table.loc[0, "top_heads"]]
    candidates = run.candidates(model, n=2)
    assert candidates.index.names == ["task", "head"] and len(candidates) == 4
    summary = run.summary(candidates)
    assert summary["edges"] == run.n_edges and summary["items"] == {"train": 4, "test": 3}
    for task in ("ioi", "sva"):
        assert summary[task]["model_accuracy"] == run.model_scores[task]["test"].accuracy
        attending = (
            candidates.loc[task, "attention_answer"] > candidates.loc[task, "attention_wrong"]
        )
        assert summary[task]["candidates_attending_answer"] == attending.sum()
        for method in ("eap", "eap-ig"):
            row = summary[task][method]
            assert set(row["faithfulness"]) == {"0.1", "0.5", "1"}
            # a 2-layer model has 4 heads and a method's list keeps up to ten: every one
            assert row["candidates_in_top_heads"] == 2
            layers = [int(h[1]) for h, _ in run.table.set_index(["task", "method"]).loc[
                (task, method), "top_heads"][:5]]  # fmt: skip
            assert row["median_top_head_layer"] == statistics.median(layers)
    again = localization.compare_methods(model, ["ioi", "sva"], settings, store=tmp_path,
                                         progress=False)  # fmt: skip
    assert again.table["seconds"].tolist() == run.table["seconds"].tolist()  # read back
    figure = plots.localization_curves(curves)
    assert [ax.get_title() for ax in figure.axes] == ["ioi", "sva"]
    assert figure.axes[0].get_xscale() == "log"
    with pytest.raises(ValueError, match="lack columns"):
        plots.localization_curves(curves.drop(columns="f"))
    with pytest.raises(ValueError, match="tasks must be"):
        localization.compare_methods(model, ["copy"], settings)
