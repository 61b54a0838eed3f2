"""scripts/generate.py on the committed warm tiny model: rejection sampling keeps exactly the generations
math-verify accepts (checked against an unfiltered run with the same seed); a run killed mid-write resumes
to the uninterrupted result with no duplicates; --sft writes one chat row per kept generation."""

import importlib.util
import json
from pathlib import Path

import pytest

from nanogrpo import rewards

ROOT = Path(__file__).parent.parent


def gen():
    spec = importlib.util.spec_from_file_location("generate", ROOT / "scripts" / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def task(tmp_path):
    path = tmp_path / "sums.jsonl"
    path.write_text("".join(json.dumps({"problem": f"{a}+{a + 11}=", "answer": str(2 * a + 11)}) + "\n"
                            for a in range(120, 130)))
    return str(path)


def args(task, model, out, *extra):
    return [task, "--model", model, "--out", str(out), "--n", "3", "--batch", "4", "--template", "raw",
            "--sampler", "torch", "--device", "cpu", "--temperature", "1.0", "--max-new-tokens", "6", *extra]


def test_verify_keeps_exactly_the_correct_generations_and_resume_is_exact(task, warm_model_dir, tmp_path):
    g = gen()
    everything = g.main(args(task, warm_model_dir, tmp_path / "all.jsonl"))
    assert [r["index"] for r in everything] == list(range(10)) and all(len(r["generations"]) == 3 for r in everything)
    kept = g.main(args(task, warm_model_dir, tmp_path / "ok.jsonl", "--verify", "--sft", str(tmp_path / "sft.jsonl")))
    n_kept = 0
    for full, ok in zip(everything, kept):
        want = [x for x, c in zip(full["generations"], full["correct"]) if c]
        assert ok["generations"] == want and ok["n_generated"] == 3 and all(ok["correct"])
        for text, c in zip(full["generations"], full["correct"]):  # the verdicts are math-verify's
            assert (rewards.math_reward(text, full["answer"]) == 1.0) == c
        n_kept += len(want)
    assert 0 < n_kept < 30  # some right, some wrong: the filter did something
    sft_rows = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert len(sft_rows) == n_kept and sft_rows[0]["messages"][1]["role"] == "assistant"

    # killed during the second batch's write: the first batch whole, the next line torn
    out = tmp_path / "resumed.jsonl"
    lines = (tmp_path / "ok.jsonl").read_text().splitlines(True)
    out.write_text("".join(lines[:4]) + lines[4][:25])
    resumed = g.main(args(task, warm_model_dir, out, "--verify"))
    assert resumed == kept
    assert [json.loads(x)["index"] for x in out.read_text().splitlines()] == list(range(10))  # no duplicates
    # other settings on the same file are refused, not mixed in
    with pytest.raises(SystemExit, match="was written with"):
        g.main(args(task, warm_model_dir, out, "--n", "2"))
