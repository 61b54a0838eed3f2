"""scripts/generate.py on the committed warm tiny model: rejection sampling keeps exactly the generations
math-verify accepts (checked against an unfiltered run with the same seed); a run killed mid-write resumes
to the uninterrupted result with no duplicates; --sft writes one chat row per kept generation."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

from nanogrpo import rewards
from nanogrpo.sandbox.local import bwrap_available

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


@pytest.mark.slow
def test_verify_keeps_exactly_the_correct_generations_and_resume_is_exact(task, warm_model_dir, tmp_path):
    g = gen()
    everything = g.main(args(task, warm_model_dir, tmp_path / "all.jsonl"))
    assert [r["index"] for r in everything] == list(range(10)) and all(len(r["generations"]) == 3 for r in everything)
    kept = g.main(args(task, warm_model_dir, tmp_path / "ok.jsonl", "--verify", "--sft", str(tmp_path / "sft.jsonl")))
    n_kept = 0
    for full, ok in zip(everything, kept):
        want = [x for x, c in zip(full["generations"], full["correct"]) if c]
        assert ok["generations"] == want and ok["n_generated"] == 3 and all(ok["correct"])
        # what was not kept: wrong (rejected), or not checkable (None), the two counted apart
        unscored = sum(rewards.math_reward(t, full["answer"]) is None for t in full["generations"])
        assert (ok["n_rejected"], ok["n_unscored"]) == (3 - len(want) - unscored, unscored)
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
    with pytest.raises(SystemExit) as e:
        g.main(args(task, warm_model_dir, out, "--n", "2"))
    assert e.value.code == 2


# -- code rows: --verify runs each generation against the row's tests in the (real, local) sandbox -------------

RIGHT = "```python\nprint(sum(map(int, input().split())))\n```"
HALF = "```python\na, b = map(int, input().split())\nprint(a + b if a else 0)\n```"  # fails the a = 0 test
WRONG = "```python\nprint(-1)\n```"
NO_CODE = "The sum of the two numbers."
FLAKY = RIGHT.replace("\n```", "  # the sandbox fails on this one\n```")
ANSWERS = [RIGHT, HALF, WRONG, NO_CODE, FLAKY]  # n = 5: each problem gets each answer once, in some order


def code_task(tmp_path, language="python"):
    path = tmp_path / f"add_{language}.jsonl"
    path.write_text("".join(json.dumps({
        "id": f"add{i}", "problem": f"Read two integers ({i}), print their sum.", "language": language,
        "mode": "stdio", "time_limit_s": 5,
        "tests": [{"input": f"0 {i}\n", "output": f"{i}\n"}, {"input": f"2 {i}\n", "output": f"{i + 2}\n"}]}) + "\n"
        for i in range(1, 4)))
    return str(path)


class AnswerWheel:
    """A Sampler whose n answers to a prompt are ANSWERS, rotated by the prompt (so batches differ in order)."""

    def generate(self, prompts, n, params, progress=None):
        from nanogrpo.sampler import Completion

        return [[Completion([1, 2], [0.0, 0.0], ANSWERS[(sum(p) + j) % len(ANSWERS)], "stop") for j in range(n)]
                for p in prompts]

    def close(self):
        pass


@pytest.mark.slow
@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (apt-get install bubblewrap) missing")
def test_code_rows_keep_exactly_the_passing_programs_and_count_sandbox_failures_apart(tiny_model_dir, tmp_path,
                                                                                      monkeypatch):
    """The verdicts are the sandbox's (rewards.code_rewards -> judge_many, local bubblewrap backend); a
    sandbox failure (simulated for the FLAKY program: judge_many answers None, as when a worker dies) is
    `n_unscored`, never a wrong answer, and --verify drops it without counting it as rejected."""
    import nanogrpo.sandbox as sandbox

    g = gen()
    real_judge = sandbox.judge_many
    monkeypatch.setattr(sandbox, "judge_many", lambda codes, problems, **kw: [
        None if c and "sandbox fails" in c else v for c, v in zip(codes, real_judge(codes, problems, **kw))])
    monkeypatch.setattr(g.rollout, "make_sampler", lambda *a, **k: AnswerWheel())
    task = code_task(tmp_path)
    def run(out, *extra):
        return g.main([task, "--model", tiny_model_dir, "--out", str(out), "--kind", "code", "--n", "5",
                       "--batch", "2", "--template", "raw", "--device", "cpu", *extra])

    everything = run(tmp_path / "all.jsonl")
    want = {RIGHT: 1.0, HALF: 0.5, WRONG: 0.0, NO_CODE: 0.0, FLAKY: None}
    for rec in everything:
        assert sorted(rec["generations"]) == sorted(ANSWERS) and "answer" not in rec
        assert [want[x] for x in rec["generations"]] == rec["rewards"]
        assert rec["correct"] == [r == 1.0 for r in rec["rewards"]]
        assert (rec["n_generated"], rec["n_rejected"], rec["n_unscored"]) == (5, 3, 1)

    kept = run(tmp_path / "ok.jsonl", "--verify", "--sft", str(tmp_path / "sft.jsonl"))
    assert [r["id"] for r in kept] == ["add1", "add2", "add3"]
    for rec in kept:
        assert rec["generations"] == [RIGHT] and rec["rewards"] == [1.0] and rec["correct"] == [True]
        assert (rec["n_generated"], rec["n_rejected"], rec["n_unscored"]) == (5, 3, 1)
    sft_rows = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert [r["messages"][-1]["content"] for r in sft_rows] == [RIGHT] * 3


def test_code_prompt_is_evals_and_bad_code_settings_are_refused(tmp_path):
    from nanogrpo.tasks import benchmarks

    g = gen()
    user, system = g.prompts("code", "chat")  # eval.py's LiveCodeBench prompt, with its system message
    row = {"problem": "Add.", "starter_code": "def add(a, b):"}
    assert user(row) == benchmarks.lcb_prompt(row) and system == benchmarks.LCB_SYSTEM
    assert g.prompts("code", "raw")[0](row) == "Add." and g.prompts("code", "raw")[1] is None
    for bad, why in (([code_task(tmp_path, "cpp")], "asks for Python"), (["arithmetic"], "built-in"),
                     ([code_task(tmp_path), "--template", "math_eval"], "--template chat or raw")):
        with pytest.raises(SystemExit):
            g.main([*bad, "--model", "m", "--out", str(tmp_path / "x.jsonl"), "--kind", "code"])
    assert not (tmp_path / "x.jsonl").exists()


# -- bad input: every one named, exit 2, before any compute, no file changed ------------------------------------
def snapshot(d: Path) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in d.rglob("*") if p.is_file()}


OK = ["{d}/sums.jsonl", "--model", "{m}", "--out", "{d}/o.jsonl"]
BAD = {  # name: (argv with {d} = a folder of inputs and {m} = the model, what the error says)
    "missing model dir": ([*OK[:2], "{d}/nope", *OK[3:]], "--model: model directory not found"),
    "model dir without config.json": ([*OK[:2], "{d}/empty", *OK[3:]], "--model: .* has no config.json"),
    "missing input file": (["{d}/missing.jsonl", *OK[1:]], "TASK .*missing.jsonl.*no such file"),
    "malformed JSONL row": (["{d}/bad.jsonl", *OK[1:]], r"bad.jsonl:2: not valid JSON"),
    "row without an answer": (["{d}/noanswer.jsonl", *OK[1:]], r"noanswer.jsonl:1: math row has no 'answer'"),
    "unknown --kind": ([*OK, "--kind", "poetry"], "--kind: invalid choice"),
    "--n 0": ([*OK, "--n", "0"], "--n and --batch must be >= 1"),
    "--n two": ([*OK, "--n", "two"], "--n: invalid int value"),
    "--batch 0": ([*OK, "--batch", "0"], "--n and --batch must be >= 1"),
    "--temperature -1": ([*OK, "--temperature", "-1"], "--temperature must be"),
    "--temperature nan": ([*OK, "--temperature", "nan"], "--temperature must be"),
    "--top-p 0": ([*OK, "--top-p", "0"], r"--top-p must be in \(0, 1\]"),
    "--max-new-tokens 0": ([*OK, "--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
    "--limit 0": ([*OK, "--limit", "0"], "--limit must be >= 1"),
    "--device gpu": ([*OK, "--device", "gpu"], "--device must be"),
    "--out read-only": ([*OK[:4], "/proc/self/o.jsonl"], "--out '/proc/self/o.jsonl': cannot write"),
    "--out a directory": ([*OK[:4], "{d}"], "--out .*: is a directory"),
    "--out is the input": ([*OK[:4], "{d}/sums.jsonl"], "--out .*: is the input"),
    "--out another data file": ([*OK[:4], "{d}/other.jsonl"], "line 1 is not a generate.py record"),
    "--out from other settings": ([*OK[:4], "{d}/old.jsonl"], "was written with"),
    "--sft is the input": ([*OK, "--sft", "{d}/sums.jsonl"], "--sft .*: is the input"),
    "--sft is --out": ([*OK, "--sft", "{d}/o.jsonl"], "--sft .*: is --out"),
    "--sft read-only": ([*OK, "--sft", "/proc/self/s.jsonl"], "--sft .*: cannot write"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_named_exit_2_before_compute_and_no_file_changes(case, tmp_path, warm_model_dir, monkeypatch,
                                                                     capsys):
    argv, named = BAD[case]
    g = gen()
    monkeypatch.setattr(g.rollout, "make_sampler", lambda *a, **k: pytest.fail("a sampler was built despite bad input"))
    d = tmp_path / "in"
    d.mkdir()
    (d / "empty").mkdir()
    (d / "sums.jsonl").write_text('{"problem": "1+1=", "answer": "2"}\n{"problem": "2+2=", "answer": "4"}')  # no final \n
    (d / "bad.jsonl").write_text('{"problem": "1+1=", "answer": "2"}\n{not json\n')
    (d / "noanswer.jsonl").write_text('{"problem": "1+1="}\n')
    (d / "other.jsonl").write_text('{"problem": "3+3=", "answer": "6"}\n{"problem": "4+4=", "answer": "8"}')
    (d / "old.jsonl").write_text(json.dumps({"index": 0, "settings": {"model": "another"}, "generations": []}) + "\n")
    before = snapshot(d)
    with pytest.raises(SystemExit) as e:
        g.main([a.format(d=d, m=warm_model_dir) for a in argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and re.search(named, err), err
    assert "Traceback" not in err and snapshot(d) == before
