"""Rewards as a weighted list: the open-r1 / TRL / DAPO / Kimi shaping terms (nanogrpo/shaping.py) against
hand-worked values from their definitions, the weighted sum and its metrics, and the task's own verifier and
template as the defaults."""

import json
import math
import time

import pytest

from nanogrpo import config as C
from nanogrpo import rewards, shaping
from nanogrpo.rollout import run_scoring, task_template

R1 = "<think>\nadd 2 and 2\n</think>\n<answer>\n4\n</answer>"


def score_batch(texts, rows, names, weights=None, task_reward=rewards.by_row, group_size=1, token_counts=(), cfg=None):
    """rewards.Scoring of a reward list on a batch of completions (the answers the whole texts)."""
    scoring = rewards.scoring(names, weights or [], task_reward)
    return scoring(rewards.Batch(texts, texts, rows, list(token_counts), group_size, False, cfg))


# -- format, tag_count, code_format: the <think>/<answer> layout ---------------------------------------
@pytest.mark.parametrize("text, want", [
    (R1, 1.0),
    (R1 + "\n", 1.0),  # trailing whitespace is not content
    (R1 + "\nP.S. also 5", 0.0),  # open-r1's `$` under MULTILINE accepts this; nothing may follow the answer
    ("<think>add</think><answer>4</answer>", 1.0),  # open-r1's tests pass it without newlines
    ("<think>\nadd\n</think>\n\n<answer>4</answer>\n", 1.0),
    ("<think>add</think>so<answer>4</answer>", 0.0),  # text between the blocks
    ("<think>add</answer><answer>4</think>", 0.0),  # tags out of order
    ("<think>only thinking</think>", 0.0), ("<answer>only answering</answer>", 0.0),
    ("<think>\nadd\n</think>\n4", 0.0),  # no answer tags
    ("<think>\n\n</think>\n<answer>\n4\n</answer>", 0.0),  # empty reasoning
    ("<think>\nadd\n</think>\n<answer> </answer>", 0.0),  # blank answer
    (R1.replace("4", "4\n</answer>\n<answer>\n5"), 0.0),  # two answers
    ("Sure! " + R1, 0.0),
])
def test_format_is_the_whole_layout(text, want):
    assert shaping.format_reward(text) == want


def test_format_with_a_prefilled_think_judges_what_the_model_wrote():
    written = R1[len("<think>\n"):]
    assert shaping.format_reward(written) == 0.0 and shaping.format_reward(written, prefilled_think=True) == 1.0


@pytest.mark.parametrize("text, want", [
    (R1, 1.0),
    ("<think>\nx\n</think>\n", 0.5),
    (R1.replace("<answer>\n4", "<answer>\n\n<answer>\n4"), 0.75),  # `\n<answer>\n` twice: that tag earns nothing
    ("no tags at all", 0.0),
])
def test_tag_count_pays_a_quarter_per_tag_seen_once(text, want):
    assert shaping.tag_count_reward(text) == want


def test_code_format_needs_a_fenced_block_of_the_rows_language_inside_the_answer():
    code = "<think>\nloop\n</think>\n<answer>\n```python\nprint(1)\n```\n</answer>"
    assert shaping.code_format_reward(code) == 1.0
    assert shaping.code_format_reward(code, "cpp") == 0.0
    assert shaping.code_format_reward(code.replace("```\n</answer>", "\n</answer>")) == 0.0  # unclosed fence
    assert shaping.code_format_reward("```python\nprint(1)\n```") == 0.0  # no layout
    total, parts = score_batch([code, code.replace("python", "cpp")], [{"language": "python"}, {"language": "cpp"}],
                               ["code_format"], task_reward=rewards.exact)
    assert parts["code_format"] == [1.0, 1.0]  # each row's own language


# -- reasoning_steps, repetition_penalty ----------------------------------------------------------------
@pytest.mark.parametrize("text, want", [
    ("Step 1: read. Step 2: add. Step 3: check.", 1.0),
    ("First, add. Next, check.", 2 / 3),
    ("First, read it.\nSecond, add.\nFinally, check.", 1.0), ("Step 1: add", 1 / 3),
    ("We add:\n1. two\n2. two more", 2 / 3),  # numbered lines anywhere (open-r1's pattern only sees the first line)
    ("- one\n* two\n- three\n- four", 1.0),  # capped at 1
    ("the answer is 4", 0.0),
])
def test_reasoning_steps_counts_markers_over_three(text, want):
    assert shaping.reasoning_steps_reward(text) == pytest.approx(want)


def test_repetition_penalty_is_the_share_of_repeated_ngrams():
    assert shaping.repetition_penalty_reward("a b c a b c", 3, -1.0) == pytest.approx(-0.25)  # abc bca cab abc
    assert shaping.repetition_penalty_reward("A b C a B c", 3, -1.0) == pytest.approx(-0.25)  # words lowercased
    assert shaping.repetition_penalty_reward("go " * 100, 2, -0.5) == pytest.approx(-0.5 * (1 - 1 / 99))
    assert shaping.repetition_penalty_reward("a b", 3, -1.0) == 0.0  # fewer words than n
    assert shaping.repetition_penalty_reward("", 2, -1.0) == 0.0
    assert shaping.repetition_penalty_reward("so so so so so", 2, -1.0) == pytest.approx(-0.75)  # 1 of 4 distinct
    assert shaping.repetition_penalty_reward("one two one two", 3, -1.0) == 0.0  # 2 distinct of 2
    got = shaping.repetition_penalty_reward("one two three four", 3, -1.0)
    assert got == 0.0 and math.copysign(1, got) == 1.0  # no -0.0 in the logs


def test_distinct_ngrams_equal_the_set_of_tuples_for_any_n():
    """The doubling ids (O(len · log n): repetition_n_grams = 1,000 on a 1 MiB completion took 15.7 s with tuples)
    count what the set of n-word tuples counts, on texts of few words (many repeats) and every n up to their length."""
    import random

    rng = random.Random(0)
    for _ in range(300):
        words = [rng.choice("a b c d e"[: rng.randint(1, 5) * 2 - 1].split()) for _ in range(rng.randint(1, 80))]
        for n in {1, 2, 3, rng.randint(1, len(words)), len(words)}:
            want = len({tuple(words[i : i + n]) for i in range(len(words) - n + 1)})
            assert shaping.distinct_ngrams(words, n) == want, (words, n)


# -- cosine, length, soft overlong: hand-worked from the papers' formulas ---------------------------------
def naive_cosine(n, correct, lo_wrong=-1.0, hi_wrong=-0.5, lo_right=0.5, hi_right=1.0, max_len=1000):
    """Demystifying Long CoT, eq. 1: r = r_L + (r_0 - r_L)(1 + cos(pi t / T)) / 2, t clipped to T."""
    r0, rL = (hi_right, lo_right) if correct else (lo_wrong, hi_wrong)
    return rL + (r0 - rL) * (1 + math.cos(math.pi * min(n, max_len) / max_len)) / 2


@pytest.mark.parametrize("n", [0, 1, 250, 500, 999, 1000, 1500, 5000])
@pytest.mark.parametrize("correct", [0.0, 1.0])
def test_cosine_against_the_papers_formula(n, correct):
    cfg = C.Config()
    assert shaping.cosine_reward(n, correct, cfg) == pytest.approx(naive_cosine(n, correct))


def test_cosine_ends_and_its_none():
    cfg = C.Config()
    assert shaping.cosine_reward(0, 1.0, cfg) == 1.0 and shaping.cosine_reward(1000, 1.0, cfg) == pytest.approx(0.5)
    assert shaping.cosine_reward(0, 0.0, cfg) == -1.0 and shaping.cosine_reward(1000, 0.0, cfg) == pytest.approx(-0.5)
    assert shaping.cosine_reward(2000, 1.0, cfg) == shaping.cosine_reward(1000, 1.0, cfg)  # no turn back up
    assert shaping.cosine_reward(10, None, cfg) is None
    assert shaping.cosine_reward(10, 0.5, cfg) == naive_cosine(10, False)  # a partial code pass is not correct


def test_length_is_kimis_per_group_lambda():
    # lambda = 0.5 - (len - min) / (max - min): 0.5, 0, -0.5; correct keep it, wrong keep min(0, it)
    assert shaping.length_rewards([10, 20, 30], [1.0, 1.0, 0.0]) == [0.5, 0.0, -0.5]
    assert shaping.length_rewards([10, 30], [0.0, 1.0]) == [0.0, -0.5]
    assert shaping.length_rewards([7, 7, 7], [1.0, 0.0, None]) == [0.0, 0.0, None]
    # in a batch: each group on its own lengths (a long group does not make a short one look short)
    texts = ["aa", "aaaa", "a" * 100, "a" * 200]
    _, parts = score_batch(texts, [{"answer": t} for t in texts], ["length"], task_reward=rewards.exact, group_size=2)
    assert parts["length"] == [0.5, -0.5, 0.5, -0.5]


@pytest.mark.parametrize("n, want", [(0, 0.0), (80, 0.0), (81, -0.05), (90, -0.5), (100, -1.0), (101, -1.0), (10**6, -1.0)])
def test_soft_overlong_is_dapo_eq13(n, want):
    assert shaping.soft_overlong_reward(n, 100, 20) == pytest.approx(want)


def test_soft_overlong_limits_default_to_max_new_tokens_and_a_quarter():
    from nanogrpo.shaping import overlong_limits

    assert overlong_limits(C.Config(max_new_tokens=400)) == (400, 100)
    assert overlong_limits(C.Config(max_new_tokens=400, max_completion_len=300, soft_punish_cache=0)) == (300, 0)
    assert shaping.soft_overlong_reward(300, 300, 0) == 0.0 and shaping.soft_overlong_reward(301, 300, 0) == -1.0


@pytest.mark.parametrize("fn", [
    lambda t: shaping.format_reward(t), lambda t: shaping.tag_count_reward(t),
    lambda t: shaping.reasoning_steps_reward(t), lambda t: shaping.code_format_reward(t),
    lambda t: shaping.repetition_penalty_reward(t, 3, -1.0)])
def test_policy_text_costs_linear_time(fn):
    hostile = ["<think>\n" * 200_000, "\n- " * 300_000, "Step 1:" * 150_000, "```python" * 100_000,
               "<think>\n" + "x\n</think>\n<answer>\n" * 50_000]
    t0 = time.perf_counter()
    for text in hostile:
        fn(text)
    assert time.perf_counter() - t0 < 5.0


# -- the weighted list ----------------------------------------------------------------------------------
def test_total_is_the_weighted_sum_and_each_part_is_reported():
    texts = [R1.replace("4", "\\boxed{4}"), "\\boxed{4}", R1.replace("4", "\\boxed{5}")]
    rows = [{"answer": "4"}] * 3
    total, parts = score_batch(texts, rows, ["number", "format", "tag_count"], [1.0, 0.5, 0.25], token_counts=[5] * 3)
    assert parts["number"] == parts["accuracy"] == [1.0, 1.0, 0.0]
    assert parts["format"] == [1.0, 0.0, 1.0] and parts["tag_count"] == [1.0, 0.0, 1.0]
    assert total == [1.0 + 0.5 + 0.25, 1.0, 0.75]
    assert set(parts) == {"accuracy", "number", "format", "tag_count"}


def test_a_verifier_none_makes_the_total_none_and_cosine_none():
    total, parts = score_batch(["\\boxed{4}", "\\boxed{4}"], [{"answer": "4"}, {}], ["number", "cosine"],
                               cfg=C.Config())
    assert parts["cosine"][1] is None and total[1] is None
    assert total[0] == pytest.approx(1.0 + naive_cosine(len("\\boxed{4}"), True))


def test_shaping_alone_still_computes_the_tasks_verifier_for_correct():
    total, parts = score_batch(["4", "5"], [{"answer": "4"}] * 2, ["tag_count"], task_reward=rewards.exact)
    assert parts["accuracy"] == [1.0, 0.0] and total == [0.0, 0.0]


# -- the task's own reward and template ----------------------------------------------------------------
@pytest.mark.parametrize("task, verifier", [("arithmetic", rewards.exact), ("multiply", rewards.exact),
                                            ("word_problems", rewards.number), ("word_problems_large", rewards.number)])
def test_a_builtin_task_brings_its_verifier(task, verifier):
    assert run_scoring(C.load([f"task={task}"])).verdict is verifier
    assert run_scoring(C.load([f"task={task}", "rewards=math,format"])).verdict is rewards.math  # a named one wins


def test_a_dataset_is_judged_by_its_rows(tmp_path, monkeypatch):
    import train

    math_f, code_f = tmp_path / "m.jsonl", tmp_path / "c.jsonl"
    math_f.write_text(json.dumps({"problem": "1+1", "answer": "2"}) + "\n")
    code_f.write_text(json.dumps({"id": "sq", "problem": "print n*n", "language": "python", "mode": "stdio",
                                  "tests": [{"input": "2\n", "output": "4\n"}]}) + "\n")
    assert run_scoring(C.load([f"task={math_f}"])).verdict is rewards.by_row  # each row's own
    rows, _ = train.load_task(C.load([f"task={code_f}"]))
    assert "tests" in rows[0]  # loaded as code rows, not refused as math rows without an answer
    monkeypatch.setattr(rewards, "SANDBOX", {"allow_unsandboxed": False})
    _, parts = score_batch(["2", "```python\nprint(5)\n```"], [{"answer": "2"}, rows[0]], ["accuracy"])
    assert parts["accuracy"][0] == 1.0  # math-verify on the math row
    assert parts["accuracy"][1] in (0.0, None)  # the sandbox on the code row (None only where bwrap is missing)


def test_the_template_is_the_tasks_own(tiny_model_dir):
    from nanogrpo import model as M

    tok = M.load_tokenizer(tiny_model_dir)  # no chat template
    assert task_template(C.load(["task=arithmetic"]), tok, {}) == "raw"
    assert task_template(C.load(["task=word_problems"]), tok, {}) == "raw"  # math_eval needs a chat template
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert task_template(C.load(["task=word_problems"]), tok, {}) == "math_eval"
    assert task_template(C.load(["task=x.jsonl"]), tok, {"tests": []}) == "chat"
    assert task_template(C.load(["task=x.jsonl"]), tok, {"answer": "1"}) == "math_eval"
    assert task_template(C.load(["task=word_problems", "template=raw"]), tok, {}) == "raw"  # a set one wins


def test_a_reward_is_a_function_never_a_name_that_falls_back(tmp_path):
    """A task whose reward is a name (the old `verifier = "number"`), or a verifier name nobody registered, is an
    error when the config loads: nothing is scored by another reward in its place."""
    f = tmp_path / "mine.py"
    f.write_text("from nanogrpo.tasks import Task\nmine = Task(lambda split, n, seed: [{'problem': '1+1='}] * n, "
                 "'numbr', 'raw')\n")
    with pytest.raises(C.ConfigError, match="config key 'task': .*its reward 'numbr' is not a function"):
        C.load([f"task={f}:mine"])
    with pytest.raises(C.ConfigError, match="unknown reward 'numbr'"):
        C.load(["rewards=numbr"])
    from nanogrpo.tasks import TASKS, benchmarks

    assert all(callable(t.reward) for t in TASKS.values())
    with pytest.raises(ValueError, match="eval task 'x': its reward 'math' is not a function"):
        benchmarks.Task("x", "math", [{"problem": "1+1", "answer": "2"}], 1, str)  # eval.py's tasks too


@pytest.mark.parametrize("args, match", [
    (["reward=math"], "'reward' was replaced: write rewards"),
    (["format_weight=0.2"], "'format_weight' was replaced"),
    (["rewards=accuracy,math"], "2 verifiers"),
    (["rewards=format,format"], "twice"),
    (["rewards=accuracy,format", "reward_weights=1"], "1 weights for rewards"),
    (["rewards=cosinus"], r"unknown reward 'cosinus'"),
    (["repetition_max_penalty=0.5"], "repetition_max_penalty"),
    (["reward_weights=1,nan"], "reward_weights"),
])
def test_bad_reward_lists_are_named(args, match):
    with pytest.raises(C.ConfigError, match=match):
        C.load(args)


def test_a_toml_reward_list_with_integer_weights(tmp_path):
    f = tmp_path / "r.toml"
    f.write_text('rewards = ["accuracy", "format"]\nreward_weights = [1, 0.2]\n')
    cfg = C.load([str(f)])
    assert cfg.reward_weights == [1.0, 0.2] and C.load([str(f)]).rewards == ["accuracy", "format"]


@pytest.mark.slow
def test_train_logs_every_reward_and_sums_them_with_weights(tiny_model_dir, tmp_path):
    import train

    out = tmp_path / "out"
    train.main([f"model={tiny_model_dir}", f"out_dir={out}", "prompts_per_step=4", "group_size=2", "eval_every=0",
                "micro_batch_size=8", "max_new_tokens=4", "steps=2", "save_final=false",
                "rewards=accuracy,soft_overlong_punishment,repetition_penalty", "reward_weights=1,0.5,2",
                "soft_punish_cache=2", "repetition_n_grams=1"])
    for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()):
        parts = {k: m[f"reward/{k}"] for k in ("accuracy", "soft_overlong_punishment", "repetition_penalty")}
        assert m["reward_mean"] == pytest.approx(parts["accuracy"] + 0.5 * parts["soft_overlong_punishment"]
                                                 + 2 * parts["repetition_penalty"])
    assert 'rewards = ["accuracy", "soft_overlong_punishment", "repetition_penalty"]' in (out / "config.toml").read_text()
