"""The IOI, subject-verb agreement, pronoun and capital generators: seeded, disjoint splits,
single-token answers, counterfactuals that differ where they should and nowhere else, clear
errors; the model's own score on a split against logits read by hand; on SmolLM2 (slow) its
accuracy on every task."""

import re
import typing
from pathlib import Path

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from circuitlasso.data import models
from circuitlasso.data.counterfactual_tasks import (
    ALL_TASKS,
    CAPITAL_PAIRS,
    CAPITAL_TEMPLATES,
    HELDOUT_TASKS,
    IOI_NAMES,
    PRONOUN_FEMALE_NAMES,
    PRONOUN_KIN,
    PRONOUN_MALE_NAMES,
    PRONOUN_TEMPLATES,
    SVA_ATTRACTORS,
    SVA_SUBJECTS,
    TASKS,
    TaskItem,
    TaskName,
    TaskTokens,
    capital_items,
    encode_for_model,
    encode_items,
    ioi_items,
    pronoun_items,
    single_token_words,
    sva_items,
    task_items,
    task_score,
    task_splits,
)

torch.set_num_threads(1)


class WordTokenizer:
    """A stand-in tokenizer: each word (with its leading space) or punctuation mark is one token,
    except the words of ``split``, which become one token per character."""

    def __init__(self, split: set[str] = frozenset()):  # type: ignore[assignment]
        self.split = split
        self.vocab: dict[str, int] = {}

    def _id(self, piece: str) -> int:
        return self.vocab.setdefault(piece, len(self.vocab))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = []
        for piece in re.findall(r" ?\w+|[^\w\s]", text):
            if piece.strip() in self.split:
                ids.extend(self._id(ch) for ch in piece)
            else:
                ids.append(self._id(piece))
        return ids


def _differing_positions(a: torch.Tensor, b: torch.Tensor) -> list[int]:
    return torch.nonzero(a != b).flatten().tolist()


@pytest.fixture(scope="module")
def gpt2_tokenizer(gpt2_tokenizer_dir: Path):
    return models.gpt2_tokenizer(gpt2_tokenizer_dir)


def test_development_and_heldout_tasks():
    assert TASKS == ("ioi", "sva") and HELDOUT_TASKS == ("pronoun", "capital")
    assert ALL_TASKS == TASKS + HELDOUT_TASKS == typing.get_args(TaskName)
    assert len(PRONOUN_TEMPLATES) >= 6 and len(CAPITAL_TEMPLATES) >= 6


@pytest.mark.parametrize("task", ALL_TASKS)
def test_generators_are_seeded(task):
    tok = WordTokenizer()
    assert task_items(task, tok, 40, seed=3) == task_items(task, tok, 40, seed=3)
    assert task_items(task, tok, 40, seed=3) != task_items(task, tok, 40, seed=4)
    prompts = [i.prompt for i in task_items(task, tok, 200, seed=0)]
    assert len(set(prompts)) == 200


@pytest.mark.parametrize("task", ALL_TASKS)
def test_splits_are_disjoint_seeded_and_sized(task):
    tok = WordTokenizer()
    splits = task_splits(task, tok, n_train=120, n_test=60, seed=1)
    assert (len(splits.train), len(splits.test)) == (120, 60)
    assert not {i.prompt for i in splits.train} & {i.prompt for i in splits.test}
    assert splits == task_splits(task, tok, n_train=120, n_test=60, seed=1)
    assert splits.test != task_splits(task, tok, n_train=120, n_test=60, seed=2).test


def test_ioi_counterfactual_replaces_only_the_repeated_subject():
    tok = WordTokenizer()
    items = ioi_items(tok, 100, seed=0)
    tokens = encode_items(tok, items)
    for k, item in enumerate(items):
        where = _differing_positions(tokens.clean[k], tokens.counterfactual[k])
        assert len(where) == 1, item
        (pos,) = where
        assert int(tokens.clean[k, pos]) == int(tokens.wrong[k])  # S2 is the subject
        name = tok.encode(item.counterfactual)[pos]
        assert name not in (int(tokens.answer[k]), int(tokens.wrong[k]))
        words = item.prompt.split()
        io, s = item.answer.strip(), item.wrong.strip()
        assert words.count(io) == 1 and sum(w.strip(",.") == s for w in words) == 2
        assert item.prompt.endswith(" to")
    orders = {item.prompt.index(item.answer.strip()) < item.prompt.index(item.wrong.strip())
              for item in items}  # fmt: skip
    assert orders == {True, False}  # ABBA and BABA both drawn


def test_ioi_keeps_only_single_token_names_and_says_when_too_few():
    split = set(IOI_NAMES[:40])
    tok = WordTokenizer(split=split)
    items = ioi_items(tok, 50, seed=0)
    used = {i.answer.strip() for i in items} | {i.wrong.strip() for i in items}
    assert used and not used & split
    assert single_token_words(tok, ["Mary", "Zed", "Zed"], what="names") == ["Zed"]
    with pytest.raises(ValueError, match=r"only 2 of 60 IOI names are a single token"):
        ioi_items(WordTokenizer(split=set(IOI_NAMES[2:])), 10)


def test_ioi_names_are_single_gpt2_tokens(gpt2_tokenizer):
    items = ioi_items(gpt2_tokenizer, 60, seed=0)
    tokens = encode_items(gpt2_tokenizer, items, bos_id=gpt2_tokenizer.bos_token_id)
    assert bool((tokens.clean[:, 0] == gpt2_tokenizer.bos_token_id).all())
    for k in range(len(items)):
        assert len(_differing_positions(tokens.clean[k], tokens.counterfactual[k])) == 1
        assert gpt2_tokenizer.decode(tokens.answer[k]) == items[k].answer


@pytest.mark.parametrize("attractor", ["opposite", "same", "random"])
def test_sva_counterfactual_flips_only_the_subjects_number(attractor):
    tok = WordTokenizer()
    items = sva_items(tok, 150, seed=0, attractor=attractor)
    tokens = encode_items(tok, items)
    singular = {s for s, _ in SVA_SUBJECTS}
    plural_attractors = {p for _, p in SVA_ATTRACTORS}
    agree = []
    for k, item in enumerate(items):
        where = _differing_positions(tokens.clean[k], tokens.counterfactual[k])
        assert len(where) == 1, item
        changed = [(a, b) for a, b in zip(item.prompt.split(), item.counterfactual.split(),
                                          strict=True) if a != b]  # fmt: skip
        assert len(changed) == 1
        is_singular = changed[0][0] in singular
        assert (changed[0][1] in singular) != is_singular
        answer, wrong = item.answer.strip(), item.wrong.strip()
        assert (answer in ("is", "was", "has")) == is_singular
        assert {answer, wrong} in ({"is", "are"}, {"was", "were"}, {"has", "have"})
        attractor_plural = item.prompt.split()[-1] in plural_attractors
        agree.append(attractor_plural != is_singular)
    if attractor == "opposite":
        assert not any(agree)
    elif attractor == "same":
        assert all(agree)
    else:
        assert 0 < sum(agree) < len(agree)


def test_sva_keeps_nouns_single_token_in_both_numbers():
    tok = WordTokenizer(split={"keys", "men", "children"})
    items = sva_items(tok, 80, seed=0)
    assert not any(re.search(r"\b(keys?|men|man|child|children)\b near", i.prompt) for i in items)
    assert not any(f" {w} " in i.prompt + " " for i in items for w in ("key", "man", "child"))
    with pytest.raises(ValueError, match="only 0 of 30 subject nouns"):
        sva_items(WordTokenizer(split={p for _, p in SVA_SUBJECTS}), 10)
    with pytest.raises(ValueError, match="no verb pair"):
        sva_items(WordTokenizer(split={"are", "were", "have"}), 10)


def _changed_words(item: TaskItem) -> list[tuple[str, str]]:
    pairs = zip(item.prompt.split(), item.counterfactual.split(), strict=True)
    return [(a, b) for a, b in pairs if a != b]


def test_pronoun_counterfactual_flips_only_the_subjects_gender():
    tok = WordTokenizer()
    items = pronoun_items(tok, 200, seed=0)
    tokens = encode_items(tok, items)
    female = set(PRONOUN_FEMALE_NAMES) | {f for f, _ in PRONOUN_KIN}
    male = set(PRONOUN_MALE_NAMES) | {m for _, m in PRONOUN_KIN}
    kin = {w for pair in PRONOUN_KIN for w in pair}
    kinds = set()
    for k, item in enumerate(items):
        assert len(_differing_positions(tokens.clean[k], tokens.counterfactual[k])) == 1, item
        (changed,) = _changed_words(item)
        subject, swapped = changed
        assert (subject in female and swapped in male) or (subject in male and swapped in female)
        assert item.answer == (" she" if subject in female else " he")
        assert {item.answer, item.wrong} == {" she", " he"}
        if subject in kin:  # a kin noun is swapped for its counterpart, after "my"
            assert (subject, swapped) in PRONOUN_KIN or (swapped, subject) in PRONOUN_KIN
            assert f"my {subject}" in item.prompt
        kinds.add((subject in kin, item.answer))
        assert item.prompt.split()[0] != subject
    assert kinds == {(True, " she"), (True, " he"), (False, " she"), (False, " he")}


def test_capital_counterfactual_names_the_wrong_answers_country():
    tok = WordTokenizer()
    items = capital_items(tok, 200, seed=0)
    tokens = encode_items(tok, items)
    capital_of = dict(CAPITAL_PAIRS)
    for k, item in enumerate(items):
        assert len(_differing_positions(tokens.clean[k], tokens.counterfactual[k])) == 1, item
        (changed,) = _changed_words(item)
        country, other = (w.strip(",?") for w in changed)
        assert country != other
        assert (item.answer, item.wrong) == (" " + capital_of[country], " " + capital_of[other])
    assert len({i.answer for i in items}) > len(CAPITAL_PAIRS) // 2
    assert len({i.template for i in items}) == len(CAPITAL_TEMPLATES)


def test_heldout_tasks_keep_only_single_token_words_and_say_when_too_few():
    split = set(PRONOUN_FEMALE_NAMES[:20]) | {"mother", "father", "sister"}
    items = pronoun_items(WordTokenizer(split=split), 100, seed=0)
    used = {w for i in items for pair in _changed_words(i) for w in pair}
    assert used and not used & split
    with pytest.raises(ValueError, match=r"only 2 of 40 male names are a single token"):
        pronoun_items(WordTokenizer(split=set(PRONOUN_MALE_NAMES[2:])), 10)
    with pytest.raises(ValueError, match=r"kin noun pairs are a single token"):
        pronoun_items(WordTokenizer(split={f for f, _ in PRONOUN_KIN}), 10)
    with pytest.raises(ValueError, match="not one"):
        pronoun_items(WordTokenizer(split={"he"}), 10)
    gone = {"Paris", "Germany", "Rome"}
    items = capital_items(WordTokenizer(split=gone), 100, seed=0)
    used = {w.strip(",?") for i in items for pair in _changed_words(i) for w in pair}
    assert used and not used & gone and not {i.answer.strip() for i in items} & gone
    assert not any("France" in i.prompt + i.counterfactual for i in items)
    with pytest.raises(ValueError, match=r"only 3 of \d+ \(country, capital\) pairs"):
        capital_items(WordTokenizer(split={c for c, _ in CAPITAL_PAIRS[3:]}), 10)


@pytest.mark.parametrize("task", HELDOUT_TASKS)
def test_heldout_words_are_single_gpt2_tokens(gpt2_tokenizer, task):
    items = task_items(task, gpt2_tokenizer, 100, seed=0)
    tokens = encode_items(gpt2_tokenizer, items, bos_id=gpt2_tokenizer.bos_token_id)
    for k in range(len(items)):
        assert len(_differing_positions(tokens.clean[k], tokens.counterfactual[k])) == 1
        assert gpt2_tokenizer.decode(tokens.wrong[k]) == items[k].wrong


def test_bad_input_is_a_clear_error():
    tok = WordTokenizer()
    with pytest.raises(ValueError, match="unknown task"):
        task_items("mcqa", tok, 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one"):
        ioi_items(tok, 0)
    with pytest.raises(ValueError, match="both splits"):
        task_splits("ioi", tok, 10, 0)
    with pytest.raises(ValueError, match=r"needs \{S\} exactly once"):
        ioi_items(tok, 5, templates=["{A} and {B} met; then one gave it to"])
    with pytest.raises(ValueError, match=r"needs \{subject\} exactly once"):
        pronoun_items(tok, 5, templates=["After Mary finished the {object},"])
    with pytest.raises(ValueError, match=r"needs \{country\} exactly once"):
        capital_items(tok, 5, templates=["The capital of {country} or {country} is"])
    with pytest.raises(ValueError, match="distinct capital prompts"):  # 8 countries, 1 template
        capital_items(tok, 20, pairs=CAPITAL_PAIRS[:8], templates=["Capital of {country}:"])
    with pytest.raises(ValueError, match="unknown attractor"):
        sva_items(tok, 5, attractor="near")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="distinct IOI prompts"):  # 8 names: under 200 prompts
        ioi_items(tok, 200, templates=["When {A} and {B} left, {S} gave it to"],
                  names=IOI_NAMES[:8], min_names=3)  # fmt: skip


def test_encoding_pads_right_marks_last_tokens_and_refuses_mismatches():
    tok = WordTokenizer()
    first = ("The key near the cabinets", "The keys near the cabinets", " is", " are")
    second = (
        "Apparently, the dog by the tree",
        "Apparently, the dogs by the tree",
        " was",
        " were",
    )
    items = [TaskItem("sva", "t", *first), TaskItem("sva", "t", *second)]
    tokens = encode_items(tok, items, bos_id=99, pad_id=98)
    assert tokens.clean.shape == (2, 8) and tokens.last.tolist() == [5, 7]
    assert tokens.clean[0, 6:].tolist() == [98, 98] and bool((tokens.clean[:, 0] == 99).all())
    assert tokens.last_mask.sum(1).tolist() == [1, 1] and bool(tokens.last_mask[0, 5])
    assert tokens.real_mask.sum(1).tolist() == [5, 7] and not bool(tokens.real_mask[:, 0].any())
    assert tokens.answer.tolist() == tok.encode(" is") + tok.encode(" was")
    assert len(tokens.rows(slice(1, 2))) == 1
    with pytest.raises(ValueError, match="differ in token length"):
        encode_items(tok, [TaskItem("sva", "t", "The key", "The big keys", " is", " are")])
    with pytest.raises(ValueError, match="not one"):
        encode_items(WordTokenizer(split={"is"}), items)
    with pytest.raises(ValueError, match="no items"):
        encode_items(tok, [])


def _tiny_model(d_vocab: int) -> HookedTransformer:
    cfg = HookedTransformerConfig(n_layers=1, d_model=8, n_ctx=16, d_head=4, n_heads=2, d_mlp=16,
                                  d_vocab=d_vocab, act_fn="relu", seed=0)  # fmt: skip
    return HookedTransformer(cfg)


def test_task_score_reads_each_prompt_at_its_last_token():
    tok = WordTokenizer()
    items = task_items("sva", tok, 30, seed=0)
    tokens = encode_items(tok, items, bos_id=0)
    model = _tiny_model(len(tok.vocab) + 1)
    with torch.no_grad():
        clean, counter = model(tokens.clean), model(tokens.counterfactual)
    rows = torch.arange(30)
    diff = clean[rows, tokens.last, tokens.answer] - clean[rows, tokens.last, tokens.wrong]
    cdiff = counter[rows, tokens.last, tokens.answer] - counter[rows, tokens.last, tokens.wrong]
    score = task_score(model, tokens, batch_size=7)
    assert score.n == 30
    assert score.accuracy == pytest.approx(float((diff > 0).double().mean()))
    assert score.mean_logit_diff == pytest.approx(float(diff.mean()), abs=1e-5)
    assert score.counterfactual_logit_diff == pytest.approx(float(cdiff.mean()), abs=1e-5)
    # right padding is invisible to a causal model at the last real token
    alone = task_score(model, tokens.rows(slice(0, 1)))
    assert alone.mean_logit_diff == pytest.approx(float(diff[0]), abs=1e-5)
    with pytest.raises(ValueError, match="no tokenizer"):
        encode_for_model(model, items)
    assert isinstance(tokens, TaskTokens)


@pytest.mark.slow
def test_smollm2_does_both_tasks(smollm2_model):
    """SmolLM2-135M's own accuracy and logit difference on 64 test items of each task (the IOI
    benchmark's split size)."""
    model = smollm2_model
    for task, floor in (("ioi", 0.9), ("sva", 0.8)):
        split = task_splits(task, model.tokenizer, n_train=64, n_test=64, seed=0).test
        tokens = encode_for_model(model, split)
        assert bool((tokens.clean[:, 0] == model.tokenizer.bos_token_id).all())
        score = task_score(model, tokens)
        print(task, score)
        assert score.accuracy > floor
        assert score.mean_logit_diff > 0
        assert score.counterfactual_logit_diff < score.mean_logit_diff


@pytest.mark.slow
def test_smollm2_does_the_heldout_tasks(smollm2_model):
    """SmolLM2-135M's own accuracy on 64 items of each held-out task; the counterfactual swaps
    the answer's and the wrong token's roles, so its logit difference changes sign."""
    model = smollm2_model
    for task in HELDOUT_TASKS:
        tokens = encode_for_model(model, task_items(task, model.tokenizer, 64, seed=0))
        score = task_score(model, tokens)
        print(task, score)
        assert score.accuracy >= 0.9
        assert score.mean_logit_diff > 1 and score.counterfactual_logit_diff < -1
