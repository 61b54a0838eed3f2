"""The changes users make most, done from user code with no library file edited (docs/architecture.md
"Where a change goes"): a reward of one's own, weighted into the list, and a task of one's own, judged by the
verifier it names."""

import json
import random

import pytest

import train
from nanogrpo import shaping, tasks


def small(model, out, *extra):
    return [f"model={model}", f"out_dir={out}", "prompts_per_step=4", "group_size=2", "eval_every=0",
            "micro_batch_size=8", "max_new_tokens=4", "steps=2", "save_final=false", *extra]


def test_a_reward_of_ones_own_is_one_registry_entry(tiny_model_dir, tmp_path, monkeypatch):
    # shorter is better: 1 - characters / 10, a batch at a time (what every shaping reward receives)
    monkeypatch.setitem(shaping.SHAPING, "brevity", lambda b: [1.0 - len(t) / 10 for t in b.texts])
    out = tmp_path / "out"
    train.main(small(tiny_model_dir, out, "rewards=accuracy,brevity", "reward_weights=1,0.5"))
    for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()):
        assert -1.0 < m["reward/brevity"] <= 1.0
        assert m["reward_mean"] == pytest.approx(m["reward/accuracy"] + 0.5 * m["reward/brevity"])


def test_a_reward_that_returns_the_wrong_number_of_values_is_named(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(shaping.SHAPING, "broken", lambda b: [0.0])
    with pytest.raises(ValueError, match="reward 'broken' gave 1 values for 8"):
        train.main(small(tiny_model_dir, tmp_path / "out", "rewards=accuracy,broken"))


def sums_to_ten(split: str, n: int, seed: int) -> list[dict]:
    """A task of one's own: two digits that sum to at most 10, the answer a number."""
    rng = random.Random(f"{split}-{seed}")
    rows = []
    for _ in range(n):
        a, b = rng.randint(0, 5), rng.randint(0, 5)
        rows.append({"problem": f"{a}+{b}=", "answer": str(a + b)})
    return rows


def test_a_task_of_ones_own_brings_its_verifier_and_template(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(tasks.TASKS, "sums_to_ten", tasks.Task(sums_to_ten, "number", "raw"))
    out = tmp_path / "out"
    res = train.main(small(tiny_model_dir, out, "task=sums_to_ten", "eval_every=2", "eval_size=8"))
    assert 0.0 <= res["heldout_accuracy_end"] <= 1.0  # its own held-out split, scored by its verifier
    assert 'task = "sums_to_ten"' in (out / "config.toml").read_text()
    assert 'template = "raw"' in (out / "config.toml").read_text()  # "" became the task's own
