"""The built-in "word_problems" task against a naive solver written from the problem text alone, and
its held-out split: no train row (any seed) shares a template and its numbers with a test row."""

import os
import re

import pytest
import torch

from nanogrpo import tasks
from nanogrpo.config import ConfigError
from nanogrpo.tasks.word_problems import ITEMS, NAMES, TEMPLATES, word_problem_rows

# What each template's wording asks for, computed from the numbers in the order they appear.
SOLVERS = [
    ("more", lambda a, b, c=0: a + b),
    ("gave", lambda a, b, c=0: a - b),
    ("Each bag holds", lambda a, b, c=0: a * b),
    ("equal piles", lambda a, b, c=0: a / b),
    ("in each box", lambda a, b, c: a * b - c),
    ("dollars an hour", lambda a, b, c: a * b - c),
    ("pages on Monday", lambda a, b, c: a + b + c),
    ("times as many", lambda a, b, c=0: a + a * b),
]


def solve(problem: str) -> float:
    numbers = [int(x) for x in re.findall(r"\d+", problem)]
    [fn] = [fn for phrase, fn in SOLVERS if phrase in problem]
    return fn(*numbers)


def instance_key(problem: str) -> tuple:
    """The template wording with names and items blanked, plus the numbers: what the split holds out."""
    text = problem
    for name, _ in NAMES:
        text = text.replace(name, "N")
    for item in ITEMS:
        text = text.replace(item, "I")
    text = re.sub(r"\b(He|She|he|she)\b", "P", text)
    return re.sub(r"\d+", "#", text), tuple(re.findall(r"\d+", problem))


def test_answers_match_a_naive_solver():
    rows = word_problem_rows("train", 2000, seed=1) + word_problem_rows("test", 500)
    assert len(SOLVERS) == len(TEMPLATES)
    for r in rows:
        assert float(r["answer"]) == solve(r["problem"]), r
        assert int(r["answer"]) > 0
    # every template shows up in both splits
    for phrase, _ in SOLVERS:
        assert any(phrase in r["problem"] for r in rows[:2000])
        assert any(phrase in r["problem"] for r in rows[2000:])


def test_deterministic_and_seeded():
    assert word_problem_rows("train", 50, seed=3) == word_problem_rows("train", 50, seed=3)
    assert word_problem_rows("train", 50, seed=3) != word_problem_rows("train", 50, seed=4)
    assert tasks.load_rows("word_problems", "math", "test", n=20) == word_problem_rows("test", 20)


@pytest.mark.slow
def test_splits_are_disjoint_and_test_rows_distinct():
    test = {instance_key(r["problem"]) for r in word_problem_rows("test", 500)}
    assert len(test) == 500
    templates = {k for k, _ in test}
    assert len(templates) == len(TEMPLATES)  # the key recovers the template, so the check below is real
    for seed in range(3):
        train = {instance_key(r["problem"]) for r in word_problem_rows("train", 20_000, seed=seed)}
        assert not train & test
        assert len(train) > 4_000  # many distinct instances, not a few repeated


def test_bad_arguments():
    with pytest.raises(ValueError, match="split"):
        tasks.load_rows("word_problems", split="valid", n=5)
    with pytest.raises(ValueError, match="n >= 1"):
        tasks.load_rows("word_problems", split="train", n=0)
    with pytest.raises(ConfigError, match="did you mean 'word_problems'"):
        tasks.load_rows("word_problem", "math")


# ----------------------------------------------------------------------------------------------
# "word_problems_large" and the worked answers of the SmolLM2 tool warm start

from nanogrpo.tasks import word_problems as W  # noqa: E402


def test_small_rows_are_unchanged_by_the_large_variant():
    """The small task's rows (so its held-out split and every figure measured on it) are byte for byte those
    of the commits before "word_problems_large" existed: the digest was taken from them."""
    import hashlib
    import json

    h = hashlib.sha256()
    for split in ("train", "test"):
        for seed in (0, 1, 7):
            h.update(json.dumps(word_problem_rows(split, 500 if split == "train" else 300, seed)).encode())
    assert h.hexdigest() == "6b7e13e9d71abc62f6ca11564df8028661b2af49c8f5fbbb4046b6dc87d0056a"


def test_large_rows_match_the_naive_solver_have_large_numbers_and_disjoint_splits():
    train, test = W.large_word_problem_rows("train", 3000, seed=2), W.large_word_problem_rows("test", 500)
    for r in train + test:
        assert float(r["answer"]) == solve(r["problem"]), r
        assert int(r["answer"]) > 0
    assert tasks.load_rows("word_problems_large", "math", "test", n=20) == test[:20]
    # larger than the small task: every problem has a number >= 12 and most answers have 3+ digits
    assert all(max(int(x) for x in re.findall(r"\d+", r["problem"])) >= 12 for r in train)
    assert sum(int(r["answer"]) >= 100 for r in train) / len(train) > 0.8
    held = {instance_key(r["problem"]) for r in test}
    assert len(held) == 500 and not held & {instance_key(r["problem"]) for r in train}
    assert len({k for k, _ in held}) == len(TEMPLATES)


def test_worked_answers_are_right_in_text_and_as_code():
    """Every template's solution, written from its steps: each text line is a true equation ending at the
    answer, and the tool's code prints the answer (run here as Python)."""
    import sys
    from pathlib import Path

    from nanogrpo.tools import ToolConfig, output_block

    sys.path.insert(0, str(Path(__file__).parent.parent / "scripts" / "models"))
    import tool_rows

    cfg = ToolConfig()
    rows = tool_rows.word_problems_warm_start_rows(400, 0, tool_frac=0.5, tool_cfg=cfg)
    kinds = {1: 0, 3: 0}
    for r in rows:
        segs, final = r["segments"], tool_rows.FINAL.format(r["answer"])
        kinds[len(segs)] += 1
        if len(segs) == 1:  # text: "x op y = r" lines, then the final line
            *lines, last = segs[0][0].split("\n")
            assert last == final and lines
            for line in lines:
                lhs, rhs = line.split(" = ")
                assert eval(lhs.replace("/", "//")) == int(rhs), line  # noqa: S307  our own digits and operators
            assert lines[-1].endswith(f"= {r['answer']}")
        else:  # the tool: code (written), its output (read), the final line (written)
            (code, w1), (out, w2), (last, w3) = segs
            assert (w1, w2, w3) == (True, False, True) and last == final
            assert code.startswith(cfg.open + "\n") and code.endswith("\n" + cfg.close + "\n")
            expr = code[len(cfg.open) + 1 : -len(cfg.close) - 2]
            assert expr.startswith("print(") and str(eval(expr[6:-1])) == r["answer"]  # noqa: S307
            assert out == output_block(cfg, r["answer"] + "\n")
    assert 150 < kinds[3] < 250 and kinds[1] + kinds[3] == 400
    heldout = {instance_key(r["problem"]) for r in W.large_word_problem_rows("test", 500)}
    assert not heldout & {instance_key(r["problem"]) for r in rows}


def test_the_no_tools_arm_sees_the_same_prompt_as_the_tools_arm(tmp_path):
    """scripts/bench/bench_tools.py's comparison arm changes only whether code runs: the prompt token ids are equal."""
    import sys
    from pathlib import Path

    from nanogrpo import config as C
    from nanogrpo.rollout import encode_prompts

    root = Path(__file__).parent.parent
    sys.path.insert(0, str(root / "scripts" / "bench"))
    import bench_tools

    class Tok:  # renders the messages so that any difference in the prompt shows
        chat_template = "x"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return "|".join(f"{m['role']}:{m['content']}" for m in messages) + "|assistant:"

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [ord(ch) for ch in text]}

    rows = W.large_word_problem_rows("test", 3)
    recipe = str(root / "configs" / "word_problems_smollm2_tools.toml")
    with_tools = encode_prompts(rows, Tok(), C.load([recipe], here=False))
    without = encode_prompts(rows, Tok(), C.load([recipe, *bench_tools.no_tools_overrides("word_problems")], here=False))
    assert with_tools == without
    assert "You can run Python code" in "".join(map(chr, with_tools[0]))


@pytest.mark.slow
def test_smollm2_tools_warm_start_script_end_to_end_on_the_tiny_chat_model(tiny_model_dir, tmp_path):
    """scripts/models/smollm2_tools_warm_start.py: rows -> sft.py (the real tool loop in its evals) -> OUT holds a model
    that loads, trained (weights changed), the rows it saw and warm_start.json; a missing model is named first."""
    import json
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from safetensors.torch import load_file

    from nanogrpo import model as M

    root = Path(__file__).parent.parent
    script = [sys.executable, str(root / "scripts" / "models" / "smollm2_tools_warm_start.py")]
    missing = subprocess.run([*script, "--model", str(tmp_path / "nope"), "--out", str(tmp_path / "x")],
                             capture_output=True, text=True, cwd=root)
    assert missing.returncode != 0 and "no model at" in missing.stderr and not (tmp_path / "x").exists()

    chat = tmp_path / "chat"
    shutil.copytree(tiny_model_dir, chat)
    tok = M.load_tokenizer(str(chat))
    tok.chat_template = ("{% for m in messages %}<|pad|>{{ m['role'] }}\n{{ m['content'] }}<|endoftext|>{% endfor %}"
                         "{% if add_generation_prompt %}<|pad|>assistant\n{% endif %}")
    tok.save_pretrained(chat)
    out = tmp_path / "ws"
    run = subprocess.run([*script, "--model", str(chat), "--out", str(out), "--rows", "8", "--tool-frac", "0.5",
                          "steps=2", "prompts_per_step=4", "eval_every=2", "eval_size=4", "max_new_tokens=24", "log_every=1"],
                         capture_output=True, text=True, cwd=root, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    info = json.loads((out / "warm_start.json").read_text())
    assert [e["step"] for e in info["evals"]] == [0, 2] and info["rows"] == 8
    assert all(e["heldout_tool_use"] is not None for e in info["evals"])
    assert len((out / "warm_start_rows.jsonl").read_text().splitlines()) == 8
    assert not (tmp_path / "ws.build").exists() and not (out / "optim").exists()
    before, after = load_file(chat / "model.safetensors"), load_file(out / "model.safetensors")
    assert before.keys() == after.keys() and any(not torch.equal(before[k], after[k]) for k in before)
    assert M.load_tokenizer(str(out)).chat_template == tok.chat_template
