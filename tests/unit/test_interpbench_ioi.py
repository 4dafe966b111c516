"""IOI prompts, and InterpBench's IOI case evaluated end to end from a local hub-format folder."""

import pickle
import warnings
from pathlib import Path

import pytest
import torch
from sklearn.metrics import roc_auc_score
from transformer_lens import HookedTransformer, HookedTransformerConfig

from circuitlasso import cache
from circuitlasso.circuits.circuit import Circuit
from circuitlasso.data.graph import Edge
from circuitlasso.data.interpbench import encode_ioi, ioi_prompts, load_hub_case
from circuitlasso.data.interpbench.ioi import name_token_ids, restrict_unembedding
from circuitlasso.data.models import gpt2_tokenizer
from circuitlasso.data.prompt_pairs import PromptPairs
from circuitlasso.evaluation.interpbench import RunSettings, evaluate, evaluate_ioi
from circuitlasso.evaluation.interpbench.evaluate import MethodRun

# ACDC-style records of a small circuit on a 2-layer model: input -> a0.h1 -> a1.h0 -> output.
IOI_EDGES = [
    (("blocks.0.hook_q_input", (None, None, 1)), ("blocks.0.hook_resid_pre", (None,))),
    (("blocks.1.hook_v_input", (None, None, 0)), ("blocks.0.attn.hook_result", (None, None, 1))),
    (("blocks.1.hook_resid_post", (None,)), ("blocks.1.attn.hook_result", (None, None, 0))),
]
IOI_CIRCUIT = Circuit([("input", "a0.h1"), ("a0.h1", "a1.h0"), ("a1.h0", "output")])


@pytest.fixture(scope="module")
def tokenizer(gpt2_tokenizer_dir: Path):
    return gpt2_tokenizer(gpt2_tokenizer_dir)


def write_ioi_case(root: Path, tokenizer_dir: Path) -> HookedTransformer:
    """A tiny random GPT-2-vocabulary model saved as the hub's ``ioi`` folder."""
    cfg = HookedTransformerConfig(
        n_layers=2,
        d_model=16,
        n_ctx=32,
        d_head=8,
        n_heads=2,
        d_mlp=32,
        d_vocab=50257,
        act_fn="gelu_new",
        normalization_type="LN",
        tokenizer_name="gpt2",  # as the hub's IOI config: the loader must not go online for it
        seed=3,
    )
    folder = root / "ioi"
    folder.mkdir(parents=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = HookedTransformer(cfg, tokenizer=gpt2_tokenizer(tokenizer_dir))
    torch.save(model.state_dict(), folder / "ll_model.pth")
    with open(folder / "ll_model_cfg.pkl", "wb") as f:
        pickle.dump(cfg.to_dict(), f)
    with open(folder / "edges.pkl", "wb") as f:
        pickle.dump(IOI_EDGES, f)
    return model


def test_prompts_are_seeded_and_follow_the_ioi_structure():
    pairs = ioi_prompts(200, seed=4)
    assert pairs == ioi_prompts(200, seed=4)
    assert pairs != ioi_prompts(200, seed=5)
    assert {p.order for p in pairs} == {"ABBA", "BABA"}
    assert len({p.template for p in pairs}) > 3
    for p in pairs:
        words = p.clean.replace(",", " ").replace(".", " ").split()
        assert p.io != p.s and words.count(p.io) == 1 and words.count(p.s) == 2
        assert p.target == " " + p.io and not p.clean.endswith(" ")
        first = p.clean.index(p.io) < p.clean.index(p.s)
        assert first == (p.order == "ABBA")
        a, b, s = p.corrupted_names  # ABC: three new distinct names, nothing repeated
        assert len({a, b, s, p.io, p.s}) == 5
        corrupted_words = p.corrupted.replace(",", " ").replace(".", " ").split()
        assert len(corrupted_words) == len(words)
        changed = [(c, d) for c, d in zip(words, corrupted_words, strict=True) if c != d]
        assert changed == list(zip(p.names, p.corrupted_names, strict=True))  # only the names


def test_swap_corruption_repeats_the_io_instead_of_the_subject():
    for p in ioi_prompts(50, seed=1, corruption="swap"):
        words = p.corrupted.replace(",", " ").replace(".", " ").split()
        assert words.count(p.io) == 2 and words.count(p.s) == 1
        assert p.corrupted_names[:2] == p.names[:2]


def test_encode_pads_right_and_marks_the_answer_position(tokenizer):
    pairs = ioi_prompts(40, seed=2)
    prompts = encode_ioi(pairs, tokenizer)
    assert isinstance(prompts, PromptPairs)
    m, width = prompts.clean.shape
    assert prompts.corrupted.shape == (m, width) == prompts.position_mask.shape
    assert (prompts.position_mask.sum(1) == 1).all()
    lengths = set()
    for i, pair in enumerate(pairs):
        ids = tokenizer.encode(pair.clean, add_special_tokens=False)
        n = len(ids) + 1
        lengths.add(n)
        assert prompts.clean[i, 0] == tokenizer.bos_token_id
        assert prompts.clean[i, 1:n].tolist() == ids
        assert prompts.position_mask[i].nonzero().item() == n - 1
        assert prompts.average_mask[i].tolist() == [0] + [1] * (n - 1) + [0] * (width - n)
        assert tokenizer.decode(prompts.corrupted[i, 1:n]) == pair.corrupted
        differ = (prompts.clean[i] != prompts.corrupted[i]).sum().item()
        assert differ == 3  # the three name tokens
    assert len(lengths) > 1 and max(lengths) == width  # templates differ in length
    stacked = prompts.lasso_mask()
    assert stacked.shape == (2 * m, width) and torch.equal(stacked[m:], prompts.average_mask)
    no_bos = encode_ioi(pairs[:3], tokenizer, prepend_bos=False)
    assert no_bos.clean[0, 0] != tokenizer.bos_token_id


def test_bad_ioi_inputs_are_clear_errors(tokenizer):
    with pytest.raises(ValueError, match="unknown corruption 'shuffle'"):
        ioi_prompts(3, corruption="shuffle")
    with pytest.raises(ValueError, match="at least 5 distinct names"):
        ioi_prompts(3, names=["Mary", "John", "Mary"])
    with pytest.raises(ValueError, match=r"\{S\}"):
        ioi_prompts(3, templates=["When {A} and {B} left,"])
    pairs = ioi_prompts(20, names=["Mary", "John", "Alice", "Bob", "Xylophonist"])
    with pytest.raises(ValueError, match="Xylophonist"):
        encode_ioi(pairs, tokenizer)


def test_restricted_unembedding_keeps_the_chosen_logits(tokenizer):
    cfg = HookedTransformerConfig(
        n_layers=1, d_model=8, n_ctx=8, d_head=4, n_heads=2, d_vocab=50, act_fn="relu", seed=0
    )
    model = HookedTransformer(cfg)
    torch.nn.init.normal_(model.unembed.b_U)
    ids = [7, 3, 41]
    small = restrict_unembedding(model, ids)
    tokens = torch.randint(0, 50, (3, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(small(tokens), model(tokens)[..., ids])
    assert small.cfg.d_vocab_out == 3 and small.cfg.d_vocab == 50
    with pytest.raises(ValueError, match="token ids"):
        restrict_unembedding(model, [50])
    mary = tokenizer.encode(" Mary", add_special_tokens=False)
    assert name_token_ids(tokenizer, ["Mary"]) == mary and len(mary) == 1


def _circuit_by_hand(scores: dict[Edge, float], threshold: float) -> set[Edge]:
    """The edges scoring above ``threshold`` on a path into the output (walked back from it)."""
    kept = {edge for edge, score in scores.items() if score > threshold}
    reached: set[str] = {"output"}
    while more := {parent for parent, child in kept if child in reached} - reached:
        reached |= more
    return {(parent, child) for parent, child in kept if child in reached}


def test_ioi_case_evaluates_end_to_end_from_a_hub_format_folder(
    tmp_path, offline_hub, gpt2_tokenizer_dir, monkeypatch: pytest.MonkeyPatch
):
    original = write_ioi_case(tmp_path / "interpbench", gpt2_tokenizer_dir)
    case = load_hub_case("ioi", source=tmp_path / "interpbench")  # tokenizer from our mirror
    assert Circuit(case.ground_truth) == IOI_CIRCUIT
    assert case.model.tokenizer is not None
    assert case.model.to_tokens("When Mary").tolist() == [[50256, 2215, 5335]]
    tokens = torch.randint(0, 50257, (2, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(case.model(tokens), original(tokens))

    runs: dict[str, MethodRun] = {}
    run_method = evaluate.run_method

    def kept(method, model, prompts, seed=0) -> MethodRun:
        runs[method] = run_method(method, model, prompts, seed)
        return runs[method]

    monkeypatch.setattr(evaluate, "run_method", kept)
    methods = ["eap", "eap-ig", "circuitlasso-linear"]
    table = evaluate_ioi(tmp_path / "interpbench", RunSettings(methods, n_prompts=8, trials=1))
    assert list(table["method"]) == methods
    assert (table["case"] == "ioi").all() and (table["variant"] == "trained").all()
    assert (table["n_true_edges"] == IOI_CIRCUIT.number_of_edges()).all()
    # each row scores its method's edges against the hub's circuit, as computed here
    for row in table.itertuples():
        run = runs[row.method]
        true = [edge in IOI_CIRCUIT.edges for edge in run.scores]
        assert sum(true) == 3 and row.edge_auroc == pytest.approx(
            roc_auc_score(true, list(run.scores.values())), abs=1e-12
        )
        found = _circuit_by_hand(run.scores, run.threshold)
        assert row.edge_shd == len(found ^ IOI_CIRCUIT.edges) and row.n_edges == len(found)
        assert row.total_s == run.collect_seconds + run.solve_seconds  # its one trial's

    # a planted scorer: the true edges above every other (AUROC 1, SHD 0) or below (AUROC 0)
    candidates = list(runs["eap"].scores)

    def planted(method, model, prompts, seed=0) -> MethodRun:
        above = method == "eap"
        scores = {edge: float((edge in IOI_CIRCUIT.edges) == above) for edge in candidates}
        return MethodRun(scores, 0.5, 0.0, 0.0)

    monkeypatch.setattr(evaluate, "run_method", planted)
    table = evaluate_ioi(tmp_path / "interpbench", RunSettings(["eap", "eap-ig"], 8, trials=1))
    right, reversed_ = table.iloc[0], table.iloc[1]
    assert (right["edge_auroc"], right["edge_shd"], right["best_edge_shd"]) == (1.0, 0, 0)
    assert reversed_["edge_auroc"] == 0.0 and reversed_["edge_shd"] > 0


def test_ioi_case_offline_and_not_cached_says_what_and_where(offline_hub):
    with pytest.raises(cache.ResourceUnavailableError) as info:
        evaluate_ioi(None, RunSettings(n_prompts=4, trials=1))
    message = str(info.value)
    assert "hf download cybershiptrooper/InterpBench --include 'ioi/*'" in message
    assert str(offline_hub / "models--cybershiptrooper--InterpBench") in message
