"""Rewards against known answers: MATH-500 golds, AIME padding, timeouts, the R1 format."""

import contextlib
import json
import random
import shutil
import time
from pathlib import Path

import pytest

from nanogrpo import answer, rewards
from nanogrpo.rewards import exact_reward, math_reward, math_rewards
from nanogrpo.rewards import Batch
from nanogrpo.shaping import think_format_reward

MATH500 = Path(__file__).resolve().parents[1] / "data" / "benchmarks" / "math500.jsonl"  # committed

# MATH-500 gold solutions that math-verify 0.9 cannot match against their own `answer` field.
# Measured 2026-11-22 with math-verify 0.9.0: all 500 match, so the list is empty. A future version that
# breaks one must either be fixed or add the problem's unique_id here with the reason.
KNOWN_MATH500_EXCEPTIONS: dict[str, str] = {}


def _math500():
    return [json.loads(line) for line in MATH500.open()]


# ~6 s each way on 2 workers (measured): the slow tier (the full suite, what CI runs), not the fast one.
@pytest.mark.slow
def test_math500_gold_solutions_score_one_and_shuffled_golds_score_zero():
    rows = _math500()
    solutions, answers = [r["solution"] for r in rows], [r["answer"] for r in rows]

    t0 = time.monotonic()
    same = math_rewards(solutions, answers)
    t_same = time.monotonic() - t0
    failed = {r["unique_id"]: s for r, s in zip(rows, same) if s != 1.0}
    assert set(failed) == set(KNOWN_MATH500_EXCEPTIONS), f"unexpected verdicts: {failed}"

    # Shuffled golds: a solution only matches another problem's answer when the two answers are the
    # same string (e.g. both "3"); every other pair must score 0.
    perm = list(range(len(rows)))
    random.Random(0).shuffle(perm)
    other = [answers[j] for j in perm]
    t0 = time.monotonic()
    shuffled = math_rewards(solutions, other)
    t_shuffled = time.monotonic() - t0
    for i, s in enumerate(shuffled):
        identical = answers[i].replace(" ", "") == other[i].replace(" ", "")
        assert s == (1.0 if identical else 0.0), (rows[i]["unique_id"], answers[i], other[i], s)
    assert sum(shuffled) < 0.05 * len(rows)
    print(f"math-verify on MATH-500: {t_same:.1f}s matched, {t_shuffled:.1f}s shuffled")


@pytest.mark.parametrize(
    "completion,answer,expected",
    [
        ("so the answer is \\boxed{25}", "025", 1.0),  # AIME golds are zero-padded
        ("\\boxed{025}", "025", 1.0),
        ("\\boxed{025}", "25", 1.0),
        ("The final answer is 25", "025", 1.0),
        ("\\boxed{24}", "025", 0.0),
        ("\\boxed{204}", "204", 1.0),
        ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("nothing here", "7", 0.0),
        ("", "7", 0.0),
        # the gold is parsed whole: a tuple is not its first element
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)", 1.0),
        ("\\boxed{3}", "\\left( 3, \\frac{\\pi}{2} \\right)", 0.0),
        # boxed first: the boxed answer beats a later bare number
        ("\\boxed{12} and then I wrote 13", "12", 1.0),
    ],
)
def test_math_reward_cases(completion, answer, expected):
    assert math_reward(completion, answer) == expected


@pytest.mark.parametrize("gold", ["", "}{", "\\text{}"])
def test_unparseable_gold_is_none(gold):
    assert math_reward("\\boxed{1}", gold) is None


@pytest.mark.slow
def test_pathological_expression_times_out_as_zero_and_pool_recovers():
    # sympy evaluates this factorial in C; SIGALRM inside the worker cannot stop it, the hard kill must (a power tower
    # of literals no longer gets there: the rules refuse it before math-verify).
    t0 = time.monotonic()
    assert math_reward("\\boxed{(10^{100000})!}", "3", timeout_s=2.0) == 0.0
    assert time.monotonic() - t0 < 10
    assert math_reward("\\boxed{3}", "3") == 1.0  # the killed worker was replaced


@pytest.mark.slow
def test_dead_worker_is_none_not_zero(monkeypatch):
    pool = answer._pool()
    assert math_reward("\\boxed{\\sqrt{1}}", "1") == 1.0  # make sure worker 0 is up (sympy decides: a worker item)
    for i, p in enumerate(pool.procs):
        if p is not None:
            p.kill()
            p.wait()
    # killed between items: the pool restarts them, nothing is lost
    assert math_reward("\\boxed{\\sqrt{4}}", "2") == 1.0

    # a worker that cannot start at all: infrastructure -> None
    monkeypatch.setattr(pool, "_start", lambda i: (_ for _ in ()).throw(OSError("no fork")))
    pool.close()
    assert math_rewards(["\\boxed{\\sqrt{1}}", "\\boxed{\\sqrt{4}}"], ["1", "2"]) == [None, None]


@pytest.mark.slow
def test_worker_killed_mid_item_is_none(monkeypatch):
    import threading

    # a slow item to kill mid-work: the rules refuse this factorial at once (answer._too_big), so let it through
    monkeypatch.setattr(answer, "_too_big", lambda core: False)
    pool = answer._pool()
    out = {}
    t = threading.Thread(target=lambda: out.update(r=math_rewards(["\\boxed{(10^{100000})!}"], ["3"], timeout_s=60)))
    t.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(p is not None and p.poll() is None for p in pool.procs):
        time.sleep(0.05)
    time.sleep(1.0)  # let the item reach a worker
    for p in list(pool.procs):
        if p is not None:
            p.kill()  # an OOM kill, say: the worker dies while busy
    t.join(timeout=30)
    assert out["r"] == [None]  # infrastructure, not the model: None, never 0


@pytest.mark.slow
def test_a_starved_worker_is_none_and_a_computing_one_zero():
    # Workers stopped (SIGSTOP: a machine too loaded to run them) compute nothing: after STARVED x the timeout of the
    # clock the item is None, not the 0.0 of an expression too costly to check.
    import os
    import signal

    pool = answer._pool()
    assert math_reward("\\boxed{\\sqrt{9}}", "3") == 1.0  # every worker up
    stopped = [p.pid for p in pool.procs if p is not None]
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        assert math_reward("\\boxed{\\sqrt{9}}", "3", timeout_s=1.0) is None
        assert time.monotonic() - t0 >= answer.STARVED * 0.5  # waited out the starved clock, not the CPU one
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert math_reward("\\boxed{\\sqrt{9}}", "3") == 1.0  # replaced


def _burn(seconds):
    t = time.thread_time()
    while time.thread_time() - t < seconds:
        pass


@pytest.mark.slow
def test_the_clocks_count_cpu_time_not_the_wall(monkeypatch):
    # The rules' clock: a reading that waits (a collector's pause, a descheduled thread) keeps its verdict; one that
    # computes past RULES_S twice is 0.
    planned = answer._planned
    monkeypatch.setattr(answer, "_planned", lambda *a: (time.sleep(answer.RULES_S + 0.2), planned(*a))[1])
    assert math_reward("\\boxed{17}", "17") == 1.0
    monkeypatch.setattr(answer, "_planned", lambda *a: (_burn(answer.RULES_S + 0.1), planned(*a))[1])
    assert math_reward("\\boxed{17}", "17") == 0.0
    # The worker's own clock (SIGPROF): sleeping past it is no cost, computing past it is 0.
    monkeypatch.setattr(answer, "_sympy_equal", lambda *a: (time.sleep(1.2), 1.0)[1])
    assert answer._work(["equal", "17", "17"], 1) == 1.0
    monkeypatch.setattr(answer, "_sympy_equal", lambda *a: (_burn(10.0), 1.0)[1])  # 1.0 only if never stopped
    assert answer._work(["equal", "17", "17"], 1) == 0.0  # (the alarm came 1.4 s of CPU late once, under load)


def test_math_rewards_length_mismatch_is_a_clear_error():
    with pytest.raises(ValueError, match="completions"):
        math_rewards(["a"], [])


def test_exact_reward():
    assert exact_reward(" 936\n", "936") == 1.0
    assert exact_reward("9360", "936") == 0.0
    assert exact_reward("", "936") == 0.0

@pytest.mark.parametrize("completion, answer, expected", [
    ("Therefore, the final answer is: $\\boxed{168}$.", "168", 1.0),
    ("$\\boxed{22 * 46 - 844}$", "168", 0.0),  # an unevaluated expression is not the number (math-verify: 1.0)
    ("so \\boxed{1,056}", "1056", 1.0),
    ("\\boxed{\\$42}", "42", 1.0),
    ("\\boxed{1.50}", "1.5", 1.0),
    ("\\boxed{-3}", "-3", 1.0),
    ("\\boxed{168 apples}", "168", 1.0),  # a unit word is not part of the number
    ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),  # a fraction in lowest terms is a computed number
    ("\\boxed{\\frac{2}{4}}", "0.5", 0.0),  # one that is not is division left undone
    ("\\boxed{12} wait, \\boxed{13}", "13", 0.0),  # two different boxed answers: a hedge
    ("\\boxed{12} wait, \\boxed{13}", "12", 0.0),
    ("12 * 14 = 168\nThe answer is 168.", "168", 1.0),  # no box: the last number, as GSM8K's graders
    ("168 apples and 7 left", "168", 0.0),
    ("no number", "5", 0.0),
    ("\\boxed{168}", "x + 1", None),  # the gold is not a number: unscored, never 0
])
def test_number_reward(completion, answer, expected):
    assert rewards.number_reward(completion, answer) == expected


@pytest.mark.slow
def test_math_verify_accepts_an_unevaluated_expression_that_number_refuses():
    """The reason the number reward exists: math-verify evaluates what it parses."""
    text = "Therefore, the final answer is: $\\boxed{22 * 46 - 844}$."
    assert math_reward(text, "168") == 1.0
    total, parts = score_batch([text, text.replace("22 * 46 - 844", "168")], [{"answer": "168"}] * 2, ["number"])
    assert total == [0.0, 1.0] and parts["accuracy"] == [0.0, 1.0]


@pytest.mark.parametrize(
    "completion,prefilled,expected",
    [
        ("<think>\nadd them\n</think>\nThe answer is \\boxed{5}.", False, 1.0),
        ("  <think>a</think>b", False, 1.0),
        ("add them\n</think>\n\\boxed{5}", True, 1.0),  # template ended the prompt with <think>
        ("add them\n</think>\n\\boxed{5}", False, 0.0),  # no opening tag
        ("<think>\nx\n</think>\n\\boxed{5}", True, 0.0),  # prefilled, and the model opened another
        ("<think>x</think>", False, 0.0),  # no answer
        ("<think>   </think>5", False, 0.0),  # no reasoning
        ("<think>x</think>5</think>", False, 0.0),  # trailing junk: a second close tag
        ("<think>x</think>5<think>more", False, 0.0),  # trailing junk: it kept thinking
        ("<think>x</think>5<|im_end|>junk", False, 0.0),  # trailing junk: template tokens
        ("The answer is 5", False, 0.0),
        ("", False, 0.0),
    ],
)
def test_think_format_reward(completion, prefilled, expected):
    assert think_format_reward(completion, prefilled_think=prefilled) == expected


def score_batch(texts, rows, names, weights=None, task_reward=rewards.by_row):
    """A reward list (rewards.Scoring) on completions whose answers are the whole texts."""
    return rewards.scoring(names, weights or [], task_reward)(Batch(texts, texts, rows))


def test_score_batch_weights_components_and_none():
    comps = ["<think>a</think>\\boxed{4}", "\\boxed{4}", "<think>a</think>\\boxed{5}", "\\boxed{1}"]
    rows = [{"answer": "4"}, {"answer": "4"}, {"answer": "4"}, {"answer": "}{"}]
    total, parts = score_batch(comps, rows, ["math", "think_format"], [1.0, 0.5])
    assert parts["accuracy"] == [1.0, 1.0, 0.0, None]
    assert parts["think_format"] == [1.0, 0.0, 1.0, 0.0]
    assert total == [1.5, 1.0, 0.5, None]

    total, parts = score_batch(["936", "9"], [{"answer": "936"}, {"answer": "936"}], ["exact"])
    assert total == [1.0, 0.0]


def test_score_batch_bad_arguments():
    with pytest.raises(ValueError, match="unknown reward"):
        score_batch(["x"], [{"answer": "1"}], ["maths"])
    with pytest.raises(ValueError, match="1 completions, 1 answers and 0 rows"):
        score_batch(["x"], [], ["exact"])
    with pytest.raises(ValueError, match="2 weights for 1 rewards"):
        score_batch(["x"], [{"answer": "1"}], ["exact"], [1.0, 2.0])


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")
def test_score_batch_code_is_the_fraction_of_tests_passed_and_none_when_the_sandbox_fails(monkeypatch):
    import nanogrpo.sandbox as sandbox

    # `half` prints n+n: right for n=2 and n=0, wrong for n=3, so 2 of the 3 tests pass
    row = {"id": "sq", "problem": "print n*n", "language": "python", "mode": "stdio", "fn_name": "",
           "starter_code": "", "time_limit_s": 6, "memory_limit_mb": 1024,
           "tests": [{"input": "2\n", "output": "4\n"}, {"input": "0\n", "output": "0\n"},
                     {"input": "3\n", "output": "9\n"}]}
    half = "```python\nn = int(input())\nprint(n + n)\n```"
    right = "```python\nn = int(input())\nprint(n * n)\n```"
    total, parts = score_batch([half, right, "no code"], [row] * 3, ["code"])
    assert parts["accuracy"] == [pytest.approx(2 / 3), 1.0, 0.0] and total == parts["accuracy"]

    broken = sandbox.SandboxPool(concurrency=1, retries=0, python="/nonexistent/python3")
    monkeypatch.setattr(sandbox, "get_pool", lambda **opts: broken)
    try:
        total, parts = score_batch([half, right], [row] * 2, ["code"])
    finally:
        broken.close()
    assert parts["accuracy"] == [None, None] and total == [None, None]  # infrastructure: None, never 0
