"""Answers a policy can write to be paid for a wrong one: each scores 0 (never None, never 1.0), and reading
them costs time linear in their length. The right answers beside them still score 1."""

import time

import pytest

from nanogrpo.answer import final_text, number_gold_error
from nanogrpo.rewards import math_rewards, number_reward

THINK_DRAFT = "<think>maybe \\boxed{204}</think> The answer is 205."


def test_number_reward_reads_adversarial_boxes_in_linear_time():
    hostile = ["\\boxed{42" + " " * 4000 + "x}", "\\boxed{" + " " * 200_000 + "4" + " " * 200_000 + "x}",
               "\\boxed{$" + " " * 100_000 + "42" + " " * 100_000 + "$" + " " * 100_000 + "!}"]
    t0 = time.perf_counter()
    assert [number_reward(h, "42") for h in hostile] == [0.0, 0.0, 0.0]
    assert time.perf_counter() - t0 < 2.0  # the old pattern took 118 s on the first one alone
    assert number_reward("\\boxed{ $42$. }", "42") == 1.0 and number_reward("\\boxed{\\$1,056}", "1056") == 1.0


@pytest.mark.parametrize("text, gold, want", [
    (THINK_DRAFT, "204", 0.0), (THINK_DRAFT, "205", 1.0),  # the answer is after </think>
    ("<think>unfinished \\boxed{7}", "7", 1.0),  # no closed block: all of it answers
    ("\\boxed{1\\,000}", "1000", 1.0), ("\\boxed{1{,}000}", "1000", 1.0), ("\\boxed{1,\\!000}", "1000", 1.0),
    ("so 1\\,000 apples", "1000", 1.0), ("\\boxed{1\\,000}", "1", 0.0),
    ("\\boxed{18\\%}", "18", 0.0), ("\\boxed{22 * 46 - 844}", "168", 0.0),
])
def test_number_reward_answers(text, gold, want):
    assert number_reward(text, gold) == want


MATH_CASES = [
    # (completion, gold, score): wrong answers math-verify credits, then the right ones beside them
    (THINK_DRAFT, "204", 0.0), (THINK_DRAFT, "205", 1.0),
    ("\\boxed{203 = 204}", "204", 0.0), ("\\boxed{2 + 2 = 204}", "204", 0.0), ("\\boxed{205 \\to 204}", "204", 0.0),
    ("\\boxed{205 \\Rightarrow 204}", "204", 0.0), ("\\boxed{x = 204}", "204", 1.0), ("\\boxed{f(x) = 2x}", "2x", 1.0),
    ("\\boxed{18\\%}", "18", 0.0), ("\\boxed{18\\%}", "0.18", 0.0), ("\\boxed{18\\%}", "18\\%", 1.0),
    ("\\boxed{0.333333}", "\\frac{1}{3}", 0.0), ("\\boxed{1.414214}", "\\sqrt{2}", 0.0),
    ("\\boxed{3.141593}", "\\pi", 0.0), ("\\boxed{204.000001}", "204", 0.0),
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0), ("\\boxed{-0.25}", "-\\frac{1}{4}", 1.0), ("\\boxed{204.0}", "204", 1.0),
    ("\\boxed{0.33}", "0.33", 1.0), ("\\boxed{1000.5}", "1,000.5", 1.0),
    ("\\boxed{90 \\text{ radians}}", "90^\\circ", 0.0), ("\\boxed{90^\\circ}", "90^\\circ", 1.0),
    ("\\boxed{\\frac{\\pi}{2}}", "\\frac{\\pi}{2}", 1.0),
    ("\\boxed{x = \\frac{1}{2}, x = 3}", "$x = \\frac{1}{2}, x = 3$", 1.0),  # an equation gold keeps equations
]


def test_math_reward_scores_what_the_box_says_against_the_gold():
    got = math_rewards([c for c, _, _ in MATH_CASES], [g for _, g, _ in MATH_CASES])
    wrong = [(c, g, r, want) for (c, g, want), r in zip(MATH_CASES, got) if r != want]
    assert not wrong, wrong


def test_final_text_cuts_at_the_last_closing_think():
    assert final_text("a</think>b</think>c") == "c" and final_text("no block") == "no block"


def test_number_gold_check_names_golds_that_are_not_numbers():
    assert number_gold_error("1,056") is None and number_gold_error("025") is None
    assert number_gold_error("1\\,000") is None
    assert "needs a number" in number_gold_error("\\frac{1}{2}")


def test_eval_scores_gsm8k_and_aime_as_the_number_reward_does():
    """eval.py used math-verify on GSM8K: a boxed expression scored 1 there and 0 in training."""
    from nanogrpo.evaluate import score
    from nanogrpo.sampler import Completion
    from nanogrpo.tasks import benchmarks

    for name in ("gsm8k", "aime24"):
        task = benchmarks.load_task(name, limit=1)
        assert task.kind == "number"
        gold = task.rows[0]["answer"]
        expr = f"\\boxed{{{int(gold) + 1} - 1}}"
        done = [Completion([1], [0.0], f"so \\boxed{{{gold}}}", "stop"), Completion([1], [0.0], expr, "stop")]
        assert score(task, done, task.rows * 2) == [1.0, 0.0]
    assert benchmarks.load_task("math500", limit=1).kind == "math"
