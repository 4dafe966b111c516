"""MIB's scoring: the area rule against curves integrated by hand, its edge count against MIB's
formula, pruning and top-n on hand-made circuits, and edge patching on small random transformers:
the empty and full circuits are the counterfactual and clean runs (f = 0 and 1), and removing one
edge matches the patch written out with a single hook."""

import math

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from circuitlasso.data.counterfactual_tasks import TaskTokens, logit_difference
from circuitlasso.data.graph import can_feed, graph_nodes
from circuitlasso.evaluation.eap import edge_attribution_patching, receiver_slots
from circuitlasso.evaluation.mib import (
    MIB_FRACTIONS,
    circuit_ends,
    circuit_logit_diff,
    circuits_logit_diff,
    cpr_cmd,
    edge_patched_logits,
    expand_scores,
    faithfulness,
    mib_edges,
    mib_score,
    mib_scores,
    prune,
    ranking_scores,
    top_edges,
    trapezoid_area,
)

torch.set_num_threads(1)
FLAGS = {"use_attn_result": True, "use_split_qkv_input": True, "use_hook_mlp_in": True}


def _model(n_layers=2, n_heads=2, normalization="LN", **extra) -> HookedTransformer:
    cfg = HookedTransformerConfig(n_layers=n_layers, d_model=8, n_ctx=6, d_head=4,
                                  n_heads=n_heads, d_mlp=16, d_vocab=11, act_fn="relu",
                                  normalization_type=normalization, seed=0, **FLAGS,
                                  **extra)  # fmt: skip
    return HookedTransformer(cfg)


def _tokens(m=12, p=6, seed=0) -> TaskTokens:
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(0, 11, (m, p), generator=g)
    counter = clean.clone()
    counter[:, 1] = torch.randint(0, 11, (m,), generator=g)  # one position changed per pair
    last = torch.randint(2, p, (m,), generator=g)
    answer = torch.randint(0, 11, (m,), generator=g)
    wrong = (answer + 1 + torch.randint(0, 10, (m,), generator=g)) % 11
    return TaskTokens(clean, counter, last, answer, wrong, bos=False)


def test_trapezoid_area_by_hand():
    assert trapezoid_area([0, 1, 3], [0, 2, 2]) == pytest.approx(1 + 4)
    # f at fractions 0.1, 0.5, 1: CPR = 0.4 (0.2 + 0.6) / 2 + 0.5 (0.6 + 1.4) / 2 = 0.66 and
    # |1 - f| = 0.8, 0.4, 0.4: CMD = 0.4 (1.2) / 2 + 0.5 (0.8) / 2 = 0.44
    assert cpr_cmd([0.1, 0.5, 1.0], [0.2, 0.6, 1.4]) == pytest.approx((0.66, 0.44))
    # a perfect curve over MIB's fractions: the axis' length, 1 - 0.001, and no distance to 1
    assert cpr_cmd(MIB_FRACTIONS, [1.0] * 10) == pytest.approx((0.999, 0.0))
    # f = 0 until 10 % then 1: only the trapezoid from 5 % to 10 % is partial
    f = [0, 0, 0, 0, 0, 0, 1, 1, 1, 1]
    cpr, cmd = cpr_cmd(MIB_FRACTIONS, f)
    assert cpr == pytest.approx(0.05 / 2 + 0.9)
    assert cmd == pytest.approx(0.049 + 0.05 / 2)


def test_area_refuses_bad_curves():
    with pytest.raises(ValueError, match="strictly increasing"):
        trapezoid_area([0.1, 0.1, 0.2], [0, 1, 1])
    with pytest.raises(ValueError, match="two or more"):
        trapezoid_area([0.1], [1])
    with pytest.raises(ValueError, match="two or more"):
        trapezoid_area([0.1, 0.2], [1, 1, 1])
    with pytest.raises(ValueError, match="finite"):
        trapezoid_area([0.1, 0.2], [1, math.nan])


@pytest.mark.parametrize(("n_layers", "n_heads"), [(1, 2), (2, 2), (3, 4)])
def test_edges_are_counted_as_mib_counts_them(n_layers, n_heads):
    model = _model(n_layers, n_heads)
    expected = 1 + n_layers * (n_heads + 1)  # into the logits: every node writing the stream
    for layer in range(n_layers):
        before = 1 + layer * (n_heads + 1)
        expected += 3 * n_heads * before + (before + n_heads)  # q, k, v of each head; the MLP
    edges = mib_edges(model)
    assert len(edges) == len(set(edges)) == expected
    assert ("a0.h1", "a1.h0.k") in edges if n_layers > 1 else True
    assert ("a0.h0", "a0.h1.q") not in edges and ("a0.h0", "m0") in edges


def test_node_edges_are_spread_over_a_heads_three_inputs():
    model = _model()
    scores = expand_scores(model, {("input", "a1.h0"): -2.0, ("m0", "a1.h1.v"): 1.5})
    assert [scores[("input", f"a1.h0.{x}")] for x in "qkv"] == [-2.0, -2.0, -2.0]
    assert scores[("m0", "a1.h1.v")] == 1.5 and scores[("m0", "a1.h1.q")] == 0.0
    with pytest.raises(ValueError, match="scored twice"):
        expand_scores(model, {("input", "a1.h0"): 1.0, ("input", "a1.h0.q"): 1.0})
    with pytest.raises(ValueError, match="not in the model's graph"):
        expand_scores(model, {("a1.h0", "a0.h0"): 1.0})


def test_pruning_keeps_only_edges_on_paths_from_input_to_output():
    model = _model()
    dangling = {("a0.h0", "m0")}  # m0 writes to nothing in the circuit
    orphan = {("a0.h0", "output")}  # a0.h0 reads nothing in the circuit
    path = {("input", "a0.h0.v"), ("a0.h0", "output")}
    assert prune(model, dangling) == frozenset()
    assert prune(model, orphan) == frozenset()
    assert prune(model, path) == frozenset(path)
    chain = {("input", "m0"), ("m0", "a1.h1.k"), ("a1.h1", "m1")}  # m1 reaches nothing
    assert prune(model, chain) == frozenset()
    assert prune(model, chain | {("m1", "output")}) == frozenset(chain | {("m1", "output")})
    with pytest.raises(ValueError, match="receiver slot"):
        prune(model, {("input", "a1.h0")})


def test_top_edges_rank_by_absolute_score_then_prune():
    model = _model()
    scores = {("input", "a0.h0.v"): 0.5, ("a0.h0", "output"): -3.0, ("m1", "output"): 0.1}
    assert top_edges(model, scores, 1, pruned=False) == {("a0.h0", "output")}
    assert top_edges(model, scores, 1) == frozenset()  # a0.h0 has no input yet
    assert top_edges(model, scores, 2) == {("input", "a0.h0.v"), ("a0.h0", "output")}
    ranked = ranking_scores([("a0.h0", "output"), ("input", "a0.h0")])
    assert top_edges(model, ranked, 4) == {("a0.h0", "output")} | {
        ("input", f"a0.h0.{x}") for x in "qkv"
    }
    with pytest.raises(ValueError, match="twice"):
        ranking_scores([("m0", "output"), ("m0", "output")])
    with pytest.raises(ValueError, match="n must be in"):
        top_edges(model, scores, len(mib_edges(model)) + 1)


def test_empty_and_full_circuits_are_the_counterfactual_and_clean_runs():
    model, tokens = _model(), _tokens()
    with torch.no_grad():
        clean, counter = model(tokens.clean), model(tokens.counterfactual)
    full = edge_patched_logits(model, tokens.clean, tokens.counterfactual, mib_edges(model))
    empty = edge_patched_logits(model, tokens.clean, tokens.counterfactual, ())
    # patching reads the heads at hook_z, so it runs without use_attn_result: the same logits
    # as the flagged run up to rounding, and exactly those of the plain forward pass
    model.set_use_attn_result(False)
    with torch.no_grad():
        plain = model(tokens.clean)
    model.set_use_attn_result(True)
    assert torch.equal(full, plain)
    torch.testing.assert_close(full, clean, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(empty, counter, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(clean, counter, atol=1e-3)

    eap = edge_attribution_patching(model, tokens.clean, tokens.counterfactual)
    score = mib_score(model, tokens, eap.slot_scores, batch_size=5)
    assert score.n_edges == len(mib_edges(model)) and score.fractions == MIB_FRACTIONS
    assert score.budgets[0] == 0 and score.budgets[-1] == score.n_edges
    assert score.faithfulness[0] == 0.0  # no edge: exactly the empty circuit
    assert score.faithfulness[-1] == 1.0  # every edge: exactly the full circuit
    assert score.m_full == pytest.approx(float(logit_difference(clean, tokens).mean()), abs=1e-6)
    assert score.m_empty == pytest.approx(float(logit_difference(counter, tokens).mean()), abs=1e-5)
    assert all(k <= b for k, b in zip(score.kept, score.budgets, strict=True))
    assert (score.cpr, score.cmd) == pytest.approx(cpr_cmd(MIB_FRACTIONS, score.faithfulness))
    # node-level scores (EAP's promoted ones, or CircuitLasso's) are scored the same way
    assert mib_score(model, tokens, eap.scores, fractions=(0.5, 1.0)).faithfulness[-1] == 1.0


def test_removing_one_edge_patches_only_that_receiver():
    """Against the same patch written as one hook: the receiver reads the sender's
    counterfactual output in place of its clean one."""
    model, tokens = _model(normalization=None), _tokens(seed=1)
    clean, counter = tokens.clean, tokens.counterfactual
    with torch.no_grad():
        _, clean_cache = model.run_with_cache(clean)
        _, counter_cache = model.run_with_cache(counter)
    every = set(mib_edges(model))
    cases = [
        (("a0.h1", "output"), "blocks.1.hook_resid_post", None, "blocks.0.attn.hook_result", 1),
        (("input", "a1.h0.q"), "blocks.1.hook_q_input", 0, "blocks.0.hook_resid_pre", None),
        (("m0", "a1.h1.k"), "blocks.1.hook_k_input", 1, "blocks.0.hook_mlp_out", None),
        (("a1.h0", "m1"), "blocks.1.hook_mlp_in", None, "blocks.1.attn.hook_result", 0),
    ]
    for edge, receiver, head, sender_hook, sender_head in cases:

        def sender(cache, hook=sender_hook, h=sender_head):
            return cache[hook] if h is None else cache[hook][:, :, h]

        delta = sender(counter_cache) - sender(clean_cache)

        def patch(act, hook, delta=delta, head=head):
            act = act.clone()
            if head is None:
                act += delta
            else:
                act[:, :, head] += delta
            return act

        with torch.no_grad():
            expected = model.run_with_hooks(clean, fwd_hooks=[(receiver, patch)])
        got = edge_patched_logits(model, clean, counter, every - {edge})
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5, msg=str(edge))
        assert not torch.allclose(got, model(clean), atol=1e-4), edge


def _plainly_patched_logits(model, clean, counter, circuit) -> torch.Tensor:
    """Edge patching written out plainly: each receiver slot adds, for every sender that can
    feed it by an edge outside ``circuit``, the sender's counterfactual output minus its output
    in this same pass."""
    nodes = graph_nodes(model)
    senders = [n for n in nodes if n.kind != "output"]
    with torch.no_grad():
        _, counter_cache = model.run_with_cache(counter)
    current = {}

    def value(cache, node):
        return cache[node.hook] if node.head is None else cache[node.hook][:, :, node.head]

    def record(act, hook):
        current[hook.name] = act.clone()

    def patch(act, hook):
        act = act.clone()
        for slot in receiver_slots(model, nodes):
            if slot.hook != hook.name:
                continue
            for u in senders:
                if can_feed(u, slot.node) and (u.name, slot.name) not in circuit:
                    delta = value(counter_cache, u) - value(current, u)
                    if slot.head is None:
                        act += delta
                    else:
                        act[:, :, slot.head] += delta
        return act

    hooks = [(h, record) for h in {u.hook for u in senders}]
    hooks += [(h, patch) for h in {r.hook for r in receiver_slots(model, nodes)}]
    with torch.no_grad():
        return model.run_with_hooks(clean, fwd_hooks=hooks)


@pytest.mark.parametrize("share", [0.02, 0.3, 0.7, 0.98])
def test_patching_any_circuit_matches_the_patch_written_out_plainly(share):
    """Small and large circuits alike (the patch sums whichever of a receiver's patched and
    kept senders is the smaller set)."""
    model, tokens = _model(n_layers=3, n_heads=3), _tokens(m=4, seed=2)
    edges = mib_edges(model)
    g = torch.Generator().manual_seed(int(share * 100))
    circuit = {e for e, u in zip(edges, torch.rand(len(edges), generator=g), strict=True)
               if u < share}  # fmt: skip
    got = edge_patched_logits(model, tokens.clean, tokens.counterfactual, circuit)
    expected = _plainly_patched_logits(model, tokens.clean, tokens.counterfactual, circuit)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        assert not torch.allclose(got, model(tokens.clean), atol=1e-3)
    several = circuits_logit_diff(model, tokens, [circuit, (), edges], batch_size=3)
    assert several[0] == pytest.approx(circuit_logit_diff(model, tokens, circuit), abs=1e-6)
    # the metric unembeds the last tokens alone: the logit difference of the whole logits
    whole = float(logit_difference(got, tokens).double().mean())
    assert several[0] == pytest.approx(whole, abs=1e-5)
    assert several[1:] == pytest.approx(
        [circuit_logit_diff(model, tokens, ()), circuit_logit_diff(model, tokens, edges)],
        abs=1e-6,
    )


def test_circuit_logit_diff_does_not_depend_on_the_batch():
    model, tokens = _model(), _tokens(m=10)
    circuit = top_edges(model, {("input", "a0.h0"): 1.0, ("a0.h0", "output"): 1.0}, 4)
    whole = circuit_logit_diff(model, tokens, circuit, batch_size=10)
    assert circuit_logit_diff(model, tokens, circuit, batch_size=3) == pytest.approx(
        whole, abs=1e-6
    )


def test_grouped_query_attention_is_patched_per_query_head_once_ungrouped():
    model = _model(n_heads=2, n_key_value_heads=1, normalization="RMS",
                   positional_embedding_type="rotary", rotary_dim=4)  # fmt: skip
    tokens = _tokens()
    with pytest.raises(ValueError, match="set_ungroup_grouped_query_attention"):
        edge_patched_logits(model, tokens.clean, tokens.counterfactual, ())
    with pytest.raises(ValueError, match="set_ungroup_grouped_query_attention"):  # EAP's too
        edge_attribution_patching(model, tokens.clean, tokens.counterfactual)
    model.set_ungroup_grouped_query_attention(True)
    with torch.no_grad():
        counter = model(tokens.counterfactual)
    empty = edge_patched_logits(model, tokens.clean, tokens.counterfactual, ())
    torch.testing.assert_close(empty, counter, atol=1e-5, rtol=1e-5)
    edges = set(mib_edges(model))
    one_key = edge_patched_logits(model, tokens.clean, tokens.counterfactual,
                                  edges - {("input", "a1.h0.k")})  # fmt: skip
    other_key = edge_patched_logits(model, tokens.clean, tokens.counterfactual,
                                    edges - {("input", "a1.h1.k")})  # fmt: skip
    assert not torch.allclose(one_key, other_key, atol=1e-5)


def test_bad_circuits_and_inputs_are_clear_errors():
    model, tokens = _model(), _tokens()
    with pytest.raises(ValueError, match="not in the model's graph"):
        edge_patched_logits(model, tokens.clean, tokens.counterfactual, {("a1.h0", "a0.h0.q")})
    with pytest.raises(ValueError, match="same shape"):
        edge_patched_logits(model, tokens.clean, tokens.counterfactual[:2], ())
    with pytest.raises(ValueError, match="undefined"):
        faithfulness(1.0, 2.0, 2.0)
    same = TaskTokens(tokens.clean, tokens.clean, tokens.last, tokens.answer, tokens.wrong, False)
    with pytest.raises(ValueError, match="undefined"):
        mib_score(model, same, {("input", "output"): 1.0}, fractions=(0.5, 1.0))
    with pytest.raises(ValueError, match="fractions"):
        mib_score(model, tokens, {}, fractions=(0.0, 1.0))
    cfg = HookedTransformerConfig(n_layers=1, d_model=8, n_ctx=6, d_head=4, n_heads=2,
                                  d_vocab=11, act_fn="relu")  # fmt: skip
    flagless = HookedTransformer(cfg)
    with pytest.raises(ValueError, match="use_split_qkv_input"):
        edge_patched_logits(flagless, tokens.clean, tokens.counterfactual, ())


def test_signed_and_absolute_rankings_differ_where_an_edge_pushes_the_wrong_way():
    model = _model()
    # a0.h0 -> output scores most in |.| but is negative: the absolute ranking takes it first,
    # the signed ranking last
    scores = {("input", "a0.h0.v"): 0.5, ("a0.h0", "output"): -3.0, ("input", "output"): 0.1}
    assert top_edges(model, scores, 1, pruned=False) == {("a0.h0", "output")}
    assert top_edges(model, scores, 1, pruned=False, absolute=False) == {("input", "a0.h0.v")}
    assert top_edges(model, scores, 2, absolute=False) == {("input", "output")}


def test_mib_scores_give_the_signed_cpr_and_the_absolute_cmd_computed_by_hand():
    model, tokens = _model(), _tokens()
    edges = mib_edges(model)
    scores = {edge: float(k % 7) - 3.0 for k, edge in enumerate(edges)}  # signs mixed
    fractions = (0.1, 0.5, 1.0)
    both = mib_scores(model, tokens, scores, fractions)
    n = [int(x * len(edges)) for x in fractions]
    by_signed = sorted(edges, key=lambda e: -scores[e])
    by_abs = sorted(edges, key=lambda e: -abs(scores[e]))
    m_empty, m_full = circuits_logit_diff(model, tokens, [(), edges])
    signed_m = circuits_logit_diff(model, tokens, [prune(model, by_signed[:k]) for k in n])
    abs_m = circuits_logit_diff(model, tokens, [prune(model, by_abs[:k]) for k in n])
    signed_f = [(m - m_empty) / (m_full - m_empty) for m in signed_m]
    abs_f = [(m - m_empty) / (m_full - m_empty) for m in abs_m]
    assert both.signed.faithfulness == pytest.approx(signed_f, abs=1e-9)
    assert both.absolute.faithfulness == pytest.approx(abs_f, abs=1e-9)
    assert signed_f != pytest.approx(abs_f, abs=1e-3)  # the case tells the two apart
    assert both.cpr == pytest.approx(cpr_cmd(fractions, signed_f)[0])
    assert both.cmd == pytest.approx(cpr_cmd(fractions, abs_f)[1])
    assert both.cpr_abs == pytest.approx(cpr_cmd(fractions, abs_f)[0])
    single = mib_score(model, tokens, scores, fractions, absolute=False)
    assert single.faithfulness == pytest.approx(signed_f, abs=1e-9)
    # the ends computed once for every scoring on these items give the same curves, and are
    # the ones the curves read
    ends = circuit_ends(model, tokens)
    assert ends == pytest.approx((m_empty, m_full), abs=1e-9)
    shared = mib_scores(model, tokens, scores, fractions, ends=ends)
    assert shared.signed.faithfulness == pytest.approx(signed_f, abs=1e-9)
    moved = mib_score(model, tokens, scores, fractions, absolute=False, ends=(m_empty, 2 * m_full))
    assert signed_f[1] != pytest.approx(0.0, abs=1e-3)
    assert moved.faithfulness[1] == pytest.approx((signed_m[1] - m_empty) / (2 * m_full - m_empty))
