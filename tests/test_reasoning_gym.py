"""Reasoning Gym as a task source (nanogrpo/tasks/reasoning_gym.py): any dataset by name, a bad name or setting named
before any compute, train and held-out rows that never share a seed or a question, the prompt and the verdict of
Reasoning Gym's own training scripts, and a verdict that stays bounded on hostile text."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym")

from nanogrpo import ConfigError, config, data, evaluate, rewards, tasks  # noqa: E402
from nanogrpo.tasks import reasoning_gym as rg  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SMALL = "reasoning_gym:chain_sum(max_terms=2, max_digits=2)"


def test_spec_settings_weights_and_prompts_parse():
    got = rg.parse("reasoning_gym:leg_counting(weight=2, max_animals=3, system_prompt=direct), "
                   "basic_arithmetic(operators=['+', '-'], format_style=simple, allow_parentheses=false)")
    assert [s.name for s in got] == ["leg_counting", "basic_arithmetic"]
    assert got[0] == rg.Source("leg_counting", 2.0, {"max_animals": 3}, "direct")
    assert got[1].settings == {"operators": ["+", "-"], "format_style": "simple", "allow_parentheses": False}
    assert got[1].weight == 1.0 and got[1].system_prompt == rg.SYSTEM_PROMPT


@pytest.mark.parametrize("spec, says", [
    ("reasoning_gym:leg_countin", "did you mean 'leg_counting'"),
    ("reasoning_gym:nope", "leg_counting, letter_counting"),  # the valid names, listed
    ("reasoning_gym:leg_counting(max_animal=3)", "has no setting 'max_animal'; its settings: min_animals"),
    ("reasoning_gym:leg_counting(min_animals=3, max_animals=2)", "refuses the settings"),
    ("reasoning_gym:decimal_arithmetic(max_num_decimal_places=1)", "cannot make a decimal_arithmetic item"),
    ("reasoning_gym:leg_counting(weight=0)", "weight of leg_counting must be a number > 0"),
    ("reasoning_gym:leg_counting(system_prompt=chatty)", "not one of Reasoning Gym's SYSTEM_PROMPTS"),
    ("reasoning_gym:leg_counting, leg_counting", "named twice"),
    ("reasoning_gym:leg_counting(max_animals=3", "without closing"),
    ("reasoning_gym:leg_counting(3)", "is not KEY=VALUE"),
    ("reasoning_gym:leg_counting(partial=no)", "partial of leg_counting must be true or false, got 'no'"),
])
def test_bad_spec_is_a_named_error(spec, says):
    with pytest.raises(ValueError) as e:
        rg.parse(spec)
    assert says in str(e.value)
    with pytest.raises(ConfigError, match="config key 'task'"):  # the config's path (train.py: `error: ...`, exit 2)
        tasks.get(spec)


@pytest.mark.slow
def test_a_dataset_this_project_never_tried_trains_and_scores():
    """Any name works: rows, prompts and verdicts of a dataset chosen for no reason but that nothing else here uses."""
    spec = "reasoning_gym:string_synthesis"
    task = tasks.get(spec)
    train, test = task.rows("train", 40, 3), task.rows("test", 6, 3)
    assert len(train) == 40 and len(test) == 6 and all(r["problem"] and r["answer"] for r in [*train, *test])
    rg.check_golds(spec, test)
    right = [f"thinking...\n<answer>{r['answer']}</answer>" for r in test]
    assert rewards.judge(task.reward, right, test) == [1.0] * 6  # through the trainer's and eval.py's entry
    assert rewards.judge(task.reward, ["no tags at all", "<answer></answer>"], test[:2]) == [0.0, 0.0]


def test_train_and_heldout_never_share_a_seed_or_a_question():
    """Item i of a dataset with seed s comes from Random(s + i): every train seed, for any run seed, lies below the
    held-out range; and a question is on one side only, also where the settings allow few questions."""
    n = 1000
    for seed in (0, 1, 7, 31337, 2**31 - 1, 10**12):
        base = rg.train_seed_base(seed)
        assert 0 <= base and base + n * rg.TRAIN_TRIES <= rg.HELDOUT_SEED
    test = rg.rows(SMALL, "test", 30)
    assert rg.rows(SMALL, "test", 30, seed=5) == test  # fixed by spec and size, whatever the run's seed
    assert rg.rows(SMALL, "test", 10) == test[:10]  # a smaller set is its prefix
    assert len({r["problem"] for r in test}) == 30  # distinct questions
    held = {r["problem"] for r in test}
    for seed in (0, 1):
        train = rg.rows(SMALL, "train", 400, seed)
        qs = [r["problem"] for r in train]
        assert not held & set(qs)
        assert not any(rg.is_heldout("chain_sum", q) for q in qs)
    assert [r["problem"] for r in rg.rows(SMALL, "train", 50, 0)] != [r["problem"] for r in rg.rows(SMALL, "train", 50, 1)]


def test_too_few_questions_for_the_heldout_set_is_an_error():
    with pytest.raises(ValueError, match="too few questions"):
        rg.rows("reasoning_gym:count_bits(max_n=16)", "test", 20)


def test_a_weighted_mix_draws_by_its_weights():
    rows = rg.rows("reasoning_gym:chain_sum(weight=3), products", "train", 400, 0)
    share = sum(r["reasoning_gym"]["dataset"] == "chain_sum" for r in rows) / len(rows)
    assert 0.68 < share < 0.82  # 3:1


def test_prompt_is_reasoning_gyms_own(tiny_model_dir):
    """RG's training scripts: [system: SYSTEM_PROMPTS[name], user: the question] through the chat template."""
    from transformers import AutoTokenizer
    from reasoning_gym.utils import SYSTEM_PROMPTS

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    row = rg.rows("reasoning_gym:products(system_prompt=direct)", "test", 1)[0]
    want = tok.apply_chat_template([{"role": "system", "content": SYSTEM_PROMPTS["direct"]},
                                    {"role": "user", "content": row["problem"]}], tokenize=False,
                                   add_generation_prompt=True)
    assert data.format_prompt(row, tok, "chat") == want
    other = data.format_prompt(row, tok, "chat", system_prompt="Be brief.")  # the config's system_prompt wins
    assert "Be brief." in other and SYSTEM_PROMPTS["direct"] not in other


@pytest.mark.parametrize("text", [
    "<answer>7</answer>", "a <answer> 7 </answer> b <answer>8</answer>", "<answer>7", "</answer><answer>x</answer>",
    "<answer>a<answer>b</answer>", "<answer>\n7\n</answer>", "<answer></answer>", "", "no tags",
    "<answer>1</answer><answer>2", "<answer>x</answer></answer>",
])
def test_extraction_is_reasoning_gyms(text):
    from reasoning_gym.utils import extract_answer

    assert rg.extract_answer(text) == extract_answer(text)


def test_extraction_is_linear_on_hostile_text():
    for text in ["<answer>" * 200_000, "<answer>x" * 100_000 + "</answer>", "</answer><answer>" * 100_000,
                 "<answer" * 200_000]:
        t = time.process_time()  # CPU time: a loaded machine stretches wall time, not this
        rg.extract_answer(text)
        assert time.process_time() - t < 2.0  # linear: about 0.1 s for the worst; RG's own regex takes 22 s on
        # 5,000 repeats of the first (quadratic), hours on these


@pytest.mark.slow
def test_verdict_is_bounded_and_none_only_for_infrastructure():
    """A huge answer is wrong unread; an answer that would never finish (sympy evaluating a power tower) is wrong
    after the timeout; model code the scorer evaluates cannot write files; a row no judge can read is None."""
    rows = rg.rows("reasoning_gym:countdown", "test", 1)
    texts = ["<answer>" + rows[0]["answer"] + "</answer>", "<answer>" + "1+" * 10**6 + "1</answer>",
             "<answer>9**9**9**9</answer>", "<answer>open('/tmp/nanogrpo-rg-pwn','w').write('x') or 1</answer>"]
    t = time.time()
    got = rg.score(texts, reasoning_gym=[rows[0]["reasoning_gym"]] * 4, answer=[rows[0]["answer"]] * 4, timeout_s=3)
    assert got[0] == 1.0 and got[1] == 0.0 and got[2] == 0.0 and got[3] < 1.0
    assert time.time() - t < 60 and not os.path.exists("/tmp/nanogrpo-rg-pwn")
    assert rewards.judge(rg.score, ["<answer>1</answer>"], [{"problem": "p", "answer": "1"}]) == [None]
    assert rg.score(["<answer>1</answer>"], reasoning_gym=[{"dataset": "nope"}], answer=["1"]) == [None]


@pytest.mark.slow
def test_partial_scores_are_reasoning_gyms():
    rows = rg.rows("reasoning_gym:leg_counting", "test", 1)  # ProceduralDataset.score_answer: partial credit
    gold = rows[0]["answer"]
    got = rewards.judge(rg.score, [f"<answer>{gold}</answer>", f"<answer>it is {gold}</answer>", "<answer>zzz</answer>"],
                        rows * 3)
    assert got[0] == 1.0 and got[2] == 0.0
    assert got[1] == pytest.approx(len(gold) / len(f"it is {gold}"))  # RG's default partial credit


@pytest.mark.slow
def test_partial_false_pays_only_a_right_answer():
    """The hedge a policy learns for the partial score (the count and more) earns its partial score by default and
    0 with partial=false; a right answer 1 either way, on the same held-out questions."""
    spec = "reasoning_gym:letter_counting(min_words=3, max_words=5, partial=false)"
    assert rg.parse(spec)[0].partial is False and rg.parse(spec)[0].settings == {"min_words": 3, "max_words": 5}
    rows = rg.rows(spec, "test", 1)
    gold = rows[0]["answer"]
    hedge = f"<answer>{gold} {int(gold) + 1}</answer>"
    partial_rows = rg.rows("reasoning_gym:letter_counting(min_words=3, max_words=5)", "test", 1)
    assert rows[0]["problem"] == partial_rows[0]["problem"]  # the same questions: only the reward differs
    assert rewards.judge(rg.score, [hedge], partial_rows)[0] == pytest.approx(len(gold) / len(hedge[8:-9]))
    got = rewards.judge(rg.score, [f"<answer>{gold}</answer>", hedge, "<answer>zzz</answer>"], rows * 3)
    assert got == [1.0, 0.0, 0.0]


@pytest.mark.parametrize("spec, says", [("reasoning_gym:leg_countin", "did you mean 'leg_counting'"),
                                         ("reasoning_gym:leg_counting(max_animal=3)", "has no setting 'max_animal'"),
                                         ("reasoning_gym:decimal_arithmetic(max_num_decimal_places=1)", "cannot make")])
def test_train_and_eval_stop_on_a_bad_name_or_setting_before_compute(tmp_path, capsys, spec, says):
    """The config refuses it as it loads (train.py prints `error: ...` and exits 2 on a ConfigError, before the
    model is read); eval.py exits 2 before generating."""
    import eval as eval_cli
    from nanogrpo import config as C

    with pytest.raises(ConfigError, match=f"config key 'task': .*{says}"):
        C.load([f"task={spec}", f"out_dir={tmp_path / 'r'}"])
    with pytest.raises(SystemExit) as e:
        eval_cli.main(["--model", "models/tiny-arithmetic", "--tasks", spec, "--out", str(tmp_path / "e.json")])
    assert e.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "r").exists() and not (tmp_path / "e.json").exists()


@pytest.mark.slow
def test_eval_runs_reasoning_gym_tasks_on_the_tiny_model(tiny_model_dir, tmp_path):
    """eval.py --tasks with two RG datasets (settings with commas inside): one result each, the held-out set
    described (package version, settings, seed, size), every sample judged."""
    import eval as eval_cli

    out = tmp_path / "r.json"
    spec = "reasoning_gym:products(max_digits=1, system_prompt=direct),reasoning_gym:gcd(max_value=20, system_prompt=direct)"
    eval_cli.main(["--model", tiny_model_dir, "--tasks", spec, "--limit", "4", "--max-new-tokens", "4", "--out", str(out)])
    res = json.loads(out.read_text())["tasks"]
    name = "reasoning_gym:products(max_digits=1, system_prompt=direct)"
    assert set(res) == {name, "reasoning_gym:gcd(max_value=20, system_prompt=direct)"}
    assert res[name]["problems"] == 4 and res[name]["unscored"] == 0 and "pass@1:n=1" in res[name]["metrics"]
    assert res[name]["heldout_seed"] == rg.HELDOUT_SEED and res[name]["size"] == 4
    assert res[name]["datasets"] == [{"name": "products", "weight": 1.0, "settings": {"max_digits": 1},
                                      "system_prompt": "direct"}]


@pytest.mark.slow
def test_a_mix_never_tried_here_trains_two_steps(tiny_model_dir, tmp_path, capsys):
    """train.py on a weighted mix of two datasets nothing else here uses: its rows, its reward (every completion
    judged, none None), its held-out accuracy on eval_size rows of the fixed held-out set, and what one answer for
    all of those rows would score (the bar the accuracy is read against)."""
    import train

    out = tmp_path / "out"
    res = train.main([f"model={tiny_model_dir}", f"out_dir={out}", "prompts_per_step=4", "group_size=2",
                      "micro_batch_size=8", "max_new_tokens=4", "steps=2", "save_final=false", "eval_every=2",
                      "eval_size=3", "task=reasoning_gym:power_function(weight=2), "
                      "decimal_arithmetic(max_terms=2)"])
    steps = [m for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "reward_mean" in m]
    assert len(steps) == 2 and all(m["none_frac"] == 0.0 for m in steps)
    assert 0.0 <= res["heldout_accuracy_end"] <= 1.0
    golds = [str(r["answer"]) for r in evaluate.heldout_rows(config.load([str(out / "config.toml")]))]
    top = max(golds, key=golds.count)  # the first of the most common, as Counter.most_common picks
    assert len(golds) == 3 and (f"3 held-out rows (one answer for all, {top[:20]!r}, scores "
                                f"{golds.count(top) / 3:.3f})") in capsys.readouterr().out


def test_a_scorer_that_denies_its_own_gold_stops_the_load(monkeypatch):
    """Each held-out gold (and the first train golds) must score 1.0 by its own scorer, in this process: a scorer
    that cannot run here is found at load, not as a reward of 0 (or None) on every step."""
    ds = rg._dataset("products", json.dumps({}, sort_keys=True), 0, 1)
    monkeypatch.setattr(type(ds), "score_answer", lambda self, answer, entry: 0.5)
    with pytest.raises(ValueError, match="gives its own answer"):
        rg.rows("reasoning_gym:products", "test", 3)
    with pytest.raises(ValueError, match="gives its own answer"):
        rg.rows("reasoning_gym:products", "train", 3)


@pytest.mark.slow
def test_entries_reach_the_scorer_unchanged():
    """The worker gets each entry through JSON; RG's metadata holds tuples (arc_agi's scorer compares grids as
    tuples) and int-keyed dicts (graph_color): both come back as they were, where plain JSON would not."""
    entry = {"answer": "x", "metadata": {"grid": ((1, 2), (3, 4)), "colors": {1: "red", 2: [(5,)]},
                                         "__tuple__": 1, "plain": [1, "a", None, 2.5]}}
    assert rg.wire(entry) == entry and json.loads(json.dumps(rg.to_wire(entry))) != entry
    rows = rg.rows("reasoning_gym:arc_agi", "test", 2)
    assert rewards.judge(rg.score, [f"<answer>{r['answer']}</answer>" for r in rows], rows) == [1.0, 1.0]


def test_a_checkout_under_tmp_stays_visible_to_the_confined_worker(monkeypatch):
    """The scorer's bubblewrap gives the worker its own /tmp: a clone (and its .venv) in /tmp is bound back, or every
    verdict of a user who cloned there would be None (the worker cannot start)."""
    if rg.confined(["python"]) == ["python"]:
        pytest.skip("no bubblewrap here")
    from nanogrpo import answer

    monkeypatch.setattr(answer, "CHECKOUT", "/tmp/clone")  # the directory holding nanogrpo/ (the workers' PYTHONPATH)
    argv = rg.confined(["python"])
    after = argv[argv.index("--tmpfs"):]
    assert ["--ro-bind", "/tmp/clone", "/tmp/clone"] in [after[i:i + 3] for i in range(len(after))], argv
