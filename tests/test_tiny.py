import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from nanogrpo.tasks.arithmetic import arithmetic_rows, heldout_pairs
from tiny import build_tokenizer, curriculum_rows, evaluate_accuracy, sample, tiny_config

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def random_model(tok, seed=0):
    torch.manual_seed(seed)
    cfg = tiny_config(len(tok))
    cfg.eos_token_id, cfg.pad_token_id = tok.eos_token_id, tok.pad_token_id
    from transformers import Qwen2ForCausalLM

    return Qwen2ForCausalLM(cfg).eval()


def test_tokenizer_splits_digits(tok):
    ids = tok("347+589=936", add_special_tokens=False)["input_ids"]
    assert len(ids) == 11 and tok.decode(ids) == "347+589=936"
    # prompt tokens + answer tokens == tokens of the concatenation (no merge across "=")
    assert ids == tok("347+589=")["input_ids"] + tok("936")["input_ids"]


def test_random_model_dir_loads(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert model.config.head_dim >= 32 and model.config.eos_token_id == tokenizer.eos_token_id


def test_greedy_sample_matches_hf_generate_and_ignores_padding(tok):
    model = random_model(tok, seed=1)
    prompts = ["347+589=", "5+7=", "12+345="]  # different lengths: left padding in a batch
    ours = sample(model, tok, prompts, temperature=0.0, max_new_tokens=6)
    for p, got in zip(prompts, ours):
        ids = torch.tensor([tok(p)["input_ids"]])
        ref = model.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id)[0, ids.shape[1]:].tolist()
        if tok.eos_token_id in ref:
            ref = ref[: ref.index(tok.eos_token_id)]
        assert got == tok.decode(ref)
        assert sample(model, tok, [p], temperature=0.0, max_new_tokens=6) == [got]


@pytest.mark.slow
def test_evaluate_accuracy_counts_exact_matches(tok):
    model = random_model(tok, seed=2)
    rows = arithmetic_rows("test", 8)
    texts = sample(model, tok, [r["problem"] for r in rows], temperature=0.0)
    # relabel half the rows with what the model says: exactly those count as correct
    fake = [dict(r, answer=t.strip() if i % 2 == 0 else r["answer"]) for i, (r, t) in enumerate(zip(rows, texts))]
    expected = sum(t.strip() == r["answer"] for t, r in zip(texts, fake)) / len(rows)
    assert expected >= 0.5
    assert evaluate_accuracy(model, tok, fake, temperature=0.0, batch_size=3) == expected
    # sampling is seeded
    assert evaluate_accuracy(model, tok, rows, 1.0, n=2, seed=4) == evaluate_accuracy(model, tok, rows, 1.0, n=2, seed=4)


@pytest.fixture(scope="module")
def builder():
    import sys

    sys.path.insert(0, str(ROOT / "scripts" / "models"))
    import build_tiny_model

    return build_tiny_model


@pytest.mark.slow
def test_warm_start_is_an_sft_run_that_writes_a_loadable_seeded_model(builder, tmp_path):
    """scripts/models/build_tiny_model.py: the random model, then sft.py on the curriculum rows; OUT is an HF
    directory holding the last checkpoint's weights, and the same seed gives the same bytes."""
    from tiny import build_random_model_dir

    m = builder.warm_start(tmp_path / "a", seed=3, steps=4, target=0.0, keep_build=True, attempts=3)
    assert m["steps_run"] == 4 and m["sft_loss"] > 0 and "heldout_accuracy" in m
    assert [a["sft_seed"] for a in m["attempts"]] == [3]  # target 0 is reached at once: no second attempt
    assert m["reached_target"]
    run = tmp_path / "a.build" / "sft-1"
    assert len([json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]) == 5  # start eval + 4 steps
    ckpt = run / "checkpoints" / "step_000004" / "model.safetensors"
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == ckpt.read_bytes()
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "a")
    rand = AutoModelForCausalLM.from_pretrained(build_random_model_dir(tmp_path / "r", seed=3))
    assert not torch.equal(model.model.embed_tokens.weight, rand.model.embed_tokens.weight)  # it trained
    builder.warm_start(tmp_path / "b", seed=3, steps=4, target=0.0)
    assert (tmp_path / "b" / "model.safetensors").read_bytes() == (tmp_path / "a" / "model.safetensors").read_bytes()
    assert not (tmp_path / "b.build").exists()


@pytest.mark.slow
def test_a_warm_start_that_misses_its_target_is_retried_with_the_rows_in_another_order(builder, tmp_path):
    """An unreachable target: every attempt runs to the cap, each from the same random model with another sft
    seed; OUT holds the last attempt's weights, and the first attempt is the run a single attempt would be."""
    one = builder.warm_start(tmp_path / "one", seed=3, steps=2, target=1.0)
    m = builder.warm_start(tmp_path / "two", seed=3, steps=2, target=1.0, keep_build=True, attempts=2)
    assert [(a["sft_seed"], a["steps_run"]) for a in m["attempts"]] == [(3, 2), (1003, 2)]
    assert m["attempts"][0] == one["attempts"][0] and m["heldout_accuracy"] < 1.0 and not m["reached_target"]
    runs = tmp_path / "two.build"
    first, last = (runs / f"sft-{k}" / "checkpoints" / "step_000002" / "model.safetensors" for k in (1, 2))
    weights = (tmp_path / "two" / "model.safetensors").read_bytes()
    assert weights == last.read_bytes() != first.read_bytes()  # another order: other weights
    assert first.read_bytes() == (tmp_path / "one" / "model.safetensors").read_bytes()


def test_curriculum_rows_are_correct_and_never_held_out():
    rows = curriculum_rows(4000, seed=3, easy_frac=0.5)
    heldout = {r["problem"] for r in arithmetic_rows("test", len(heldout_pairs()))}
    easy = 0
    for r in rows:
        a, b = (int(x) for x in r["problem"].rstrip("=").split("+"))
        assert r["answer"] == str(a + b) and r["problem"] not in heldout
        easy += not (100 <= a <= 999 and 100 <= b <= 999)
    assert 0.45 < easy / len(rows) < 0.55  # easy_frac, and an easy row is never a 3-digit pair
    assert curriculum_rows(50, seed=3) == rows[:50]  # seeded, and a prefix of a longer draw


def test_committed_default_model_leaves_room_for_rl(warm_model_dir):
    """The default run's starting point: low but non-zero held-out accuracy, as recorded when it was built."""
    info = json.loads((Path(warm_model_dir) / "warm_start.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(warm_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(warm_model_dir)
    test = arithmetic_rows("test", info["heldout_rows"])
    greedy = evaluate_accuracy(model, tokenizer, test, temperature=0.0)
    # greedy decoding is the same on any CPU unless two logits tie to rounding: allow a few rows
    assert abs(greedy - info["heldout_greedy"]) <= 0.01, (greedy, info)
    assert info["reached_target"] and 0.05 <= info["heldout_sampled_t1_n4"] <= 0.35, info
