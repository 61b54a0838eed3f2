"""Answers a policy can write to be paid for a wrong one: each scores 0 (never None, never 1.0), and reading
them costs time linear in their length. The right answers beside them still score 1."""

import time

import pytest

from nanogrpo.answer import final_text, number_gold_error
from nanogrpo import rewards
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
    ("<think>unfinished \\boxed{7}", "7", 0.0),  # a think block never closed: cut off while thinking, its box a draft
    ("<think>done</think> \\boxed{7}", "7", 1.0),
    ("\\boxed{1\\,000}", "1000", 1.0), ("\\boxed{1{,}000}", "1000", 1.0), ("\\boxed{1,\\!000}", "1000", 1.0),
    ("so 1\\,000 apples", "1000", 1.0), ("\\boxed{1\\,000}", "1", 0.0),
    ("\\boxed{18\\%}", "18", 1.0), ("\\boxed{18\\%}", "0.18", 0.0), ("\\boxed{22 * 46 - 844}", "168", 0.0),
    # a fraction in lowest terms is a computed number; one that is not is division left undone
    ("\\boxed{\\frac{7}{4}}", "1.75", 1.0), ("\\boxed{7/4}", "1.75", 1.0), ("\\boxed{1\\frac{3}{4}}", "1.75", 1.0),
    ("\\boxed{\\frac{14}{8}}", "1.75", 0.0), ("\\boxed{\\frac{7}{4}}", "1.7", 0.0), ("\\boxed{\\frac{7}{1}}", "7", 0.0),
])
def test_number_reward_answers(text, gold, want):
    assert number_reward(text, gold) == want


MATH_CASES = [
    # (completion, gold, score): wrong answers math-verify credits, then the right ones beside them
    (THINK_DRAFT, "204", 0.0), (THINK_DRAFT, "205", 1.0),
    ("\\boxed{203 = 204}", "204", 0.0), ("\\boxed{2 + 2 = 204}", "204", 0.0), ("\\boxed{205 \\to 204}", "204", 0.0),
    ("\\boxed{205 \\Rightarrow 204}", "204", 0.0), ("\\boxed{x = 204}", "204", 1.0), ("\\boxed{f(x) = 2x}", "2x", 1.0),
    ("\\boxed{18\\%}", "18", 1.0), ("\\boxed{18\\%}", "0.18", 1.0), ("\\boxed{18\\%}", "18\\%", 1.0),  # a percent: both
    ("\\boxed{18}", "0.18", 0.0), ("\\boxed{0.18\\%}", "18", 0.0),
    ("\\boxed{0.333333}", "\\frac{1}{3}", 0.0), ("\\boxed{1.414214}", "\\sqrt{2}", 0.0),
    ("\\boxed{3.141593}", "\\pi", 0.0), ("\\boxed{204.000001}", "204", 0.0),
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0), ("\\boxed{-0.25}", "-\\frac{1}{4}", 1.0), ("\\boxed{204.0}", "204", 1.0),
    ("\\boxed{0.33}", "0.33", 1.0), ("\\boxed{1000.5}", "1,000.5", 1.0),
    ("\\boxed{90 \\text{ radians}}", "90^\\circ", 0.0), ("\\boxed{90^\\circ}", "90^\\circ", 1.0),
    ("\\boxed{\\frac{\\pi}{2}}", "\\frac{\\pi}{2}", 1.0),
    ("\\boxed{x = \\frac{1}{2}, x = 3}", "$x = \\frac{1}{2}, x = 3$", 1.0),  # an equation gold keeps equations
]


@pytest.mark.slow
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


@pytest.mark.slow
def test_eval_scores_gsm8k_and_aime_as_the_number_reward_does():
    """eval.py used math-verify on GSM8K: a boxed expression scored 1 there and 0 in training."""
    from nanogrpo.evaluate import score
    from nanogrpo.sampler import Completion
    from nanogrpo.tasks import benchmarks

    for name in ("gsm8k", "aime24"):
        task = benchmarks.load_task(name, limit=1)
        assert task.reward is rewards.number
        gold = task.rows[0]["answer"]
        expr = f"\\boxed{{{int(gold) + 1} - 1}}"
        done = [Completion([1], [0.0], f"so \\boxed{{{gold}}}", "stop"), Completion([1], [0.0], expr, "stop")]
        assert score(task, done, task.rows * 2) == [1.0, 0.0]
    assert benchmarks.load_task("math500", limit=1).reward is rewards.math


# ---- the answer judge: the judge's rules, both directions (docs/judge.md); each case failed on the judge before it

ISSUE_MATH = [
    # right answers in common spellings
    ("\\boxed{0.25}", "\\frac14", 1.0), ("\\boxed{0.75}", "\\frac 34", 1.0), ("\\boxed{0.5}", "2^{-1}", 1.0),
    ("\\boxed{0.001}", "10^{-3}", 1.0), ("\\boxed{3.5}", "3\\frac{1}{2}", 1.0), ("\\boxed{1.5}", "\\tfrac32", 1.0),
    ("\\boxed{1.2}", "\\frac65", 1.0), ("\\boxed{137.5}", "137 \\frac{1}{2}", 1.0),
    ("\\boxed{a+b=5}", "5", 1.0), ("\\boxed{AB=12}", "12", 1.0), ("\\boxed{\\theta=\\frac{\\pi}{4}}", "\\frac{\\pi}{4}", 1.0),
    ("\\boxed{\\angle ABC=30^\\circ}", "30^\\circ", 1.0), ("\\boxed{x=1 \\text{ or } x=2}", "1,2", 1.0),
    ("\\boxed{50\\%}", "50", 1.0), ("\\boxed{(x, y) = (5, 8) \\quad\\text{and}\\quad (8, 5)}", "(5, 8), (8, 5)", 1.0),
    ("\\boxed{x = 1, y = 2}", "(1, 2)", 1.0), ("\\boxed{\\$32,348}", "\\$32,\\!348", 1.0), ("\\boxed{52_8}", "52_{8}", 1.0),
    # wrong answers math-verify credits
    ("\\fbox{203 = 204}", "204", 0.0), ("\\fbox{1.570796}", "\\frac{\\pi}{2}", 0.0),
    ("\\boxed {1.570796}", "\\frac{\\pi}{2}", 0.0), ("\\boxed{{0.333333}}", "\\frac13", 0.0),
    ("\\boxed{\\left(1.570796\\right)}", "\\frac{\\pi}{2}", 0.0), ("\\boxed{+1.570796}", "\\frac{\\pi}{2}", 0.0),
    ("\\boxed{1.570796\\,}", "\\frac{\\pi}{2}", 0.0), ("\\boxed{\\approx 1.570796}", "\\frac{\\pi}{2}", 0.0),
    ("\\boxed{1.5707963\\ldots}", "\\frac{\\pi}{2}", 0.0), ("\\boxed{203 \\equiv 204}", "204", 0.0),
    ("\\boxed{205 \\to 204}", "204", 0.0), ("\\boxed{205 \\coloneqq 204}", "204", 0.0),
    ("\\boxed{90 \\text{ rad}}", "90^\\circ", 0.0), ("\\boxed{0." + "3" * 5000 + "}", "\\frac13", 0.0),
    ("I think \\boxed{204} is wrong; final answer is 205", "204", 0.0),
    ("I think \\boxed{204} is wrong; final answer is 205", "205", 0.0),
    ("\\boxed{(3, 1.570796)}", "(3, \\frac{\\pi}{2})", 0.0), ("\\boxed{204} or \\boxed{205}", "204", 0.0),
    ("\\boxed{x=6 = x=5}", "x=5", 0.0), ("\\boxed{52_9}", "52_8", 0.0), ("\\boxed{42}", "52_8", 0.0),
    ("\\boxed{864 \\text{ inches}^3}", "864 \\mbox{ inches}^2", 0.0), ("\\boxed{0.5}", "50", 0.0),
]




@pytest.mark.parametrize("text, gold, want", [
    ("\\boxed{5 \\text{ cm}}", "5", 1.0), ("\\boxed{5 \\text{ apples}}", "5", 1.0), ("\\boxed{5 apples}", "5", 1.0), ("\\boxed{\\textbf{5}}", "5", 1.0),
    ("\\boxed{x = 5}", "5", 1.0), ("\\boxed{k = 3}", "3", 1.0), ("\\boxed{\u22125}", "-5", 1.0),
    ("\\boxed{1 000}", "1000", 1.0), ("\\boxed{35\\%}", "35", 1.0), ("\\boxed{30^\\circ}", "30", 1.0),
    ("The answer is 1,250 dollars.", "1250", 1.0), ("#### 18", "18", 1.0), ("\\boxed{25}", "025", 1.0),
    ("\\boxed{12} wait, \\boxed{13}", "13", 0.0), ("\\boxed{12} so \\boxed{13", "13", 0.0),
    ("I think \\boxed{204} is wrong; final answer is 205", "204", 0.0), ("\\boxed{0.35}", "35", 0.0),
    ("\\boxed{" + "9" * 5000 + "}", "9", 0.0), ("\\boxed{1." + "0" * 5000 + "1}", "1", 0.0),
    ("\\boxed{204 \\approx 204}", "204", 0.0), ("\\boxed{203 = 204}", "204", 0.0),
    # the same classes with other numbers
    ("\\boxed{7 \\text{ cm}}", "7", 1.0), ("\\boxed{12 \\text{ apples}}", "12", 1.0), ("\\boxed{12 pencils}", "12", 1.0),
    ("\\boxed{12xyz}", "12", 0.0), ("\\boxed{12 xy}", "12", 0.0), ("\\textbf{9}", "9", 1.0),
    ("\\boxed{y = 6}", "6", 1.0), ("\\boxed{\u22124}", "-4", 1.0), ("\\boxed{2 000}", "2000", 1.0),
    ("\\boxed{25\\%}", "25", 1.0), ("\\boxed{4} \\boxed{5}", "5", 0.0), ("\\boxed{5", "5", 0.0), ("\\boxed{11}", "12", 0.0),
])
def test_number_reward_cases(text, gold, want):
    assert number_reward(text, gold) == want


# The same classes with other numbers (a judge tuned to the cases above could pass them and fail these)
OTHER_NUMBERS_MATH = [
    ("\\boxed{0.2}", "\\frac15", 1.0), ("\\boxed{0.375}", "\\frac 38", 1.0), ("\\boxed{0.125}", "2^{-3}", 1.0),
    ("\\boxed{4.25}", "4\\frac{1}{4}", 1.0), ("\\boxed{2.5}", "\\tfrac52", 1.0), ("\\boxed{m+n=7}", "7", 1.0),
    ("\\boxed{CD=9}", "9", 1.0), ("\\boxed{\\phi=\\frac{\\pi}{3}}", "\\frac{\\pi}{3}", 1.0),
    ("\\boxed{x=3 \\text{ or } x=4}", "3,4", 1.0), ("\\boxed{40\\%}", "40", 1.0),
    ("\\boxed{\\left(0.5\\right)}", "\\frac12", 1.0),
    ("\\boxed{0.142857}", "\\frac17", 0.0), ("\\fbox{7 = 8}", "8", 0.0), ("\\boxed {1.0471975}", "\\frac{\\pi}{3}", 0.0),
    ("\\boxed{\\approx 1.0471975}", "\\frac{\\pi}{3}", 0.0), ("\\boxed{307 \\equiv 308}", "308", 0.0),
    ("\\boxed{309 \\to 308}", "308", 0.0), ("\\boxed{" + "9" * 6000 + "}", "9", 0.0),
    ("I think \\boxed{5} is wrong; final answer is 6", "5", 0.0), ("\\boxed{(2, 1.0471975)}", "(2, \\frac{\\pi}{3})", 0.0),
    ("\\boxed{+0.333}", "\\frac13", 0.0),
]


@pytest.mark.slow
@pytest.mark.parametrize("cases", [ISSUE_MATH, OTHER_NUMBERS_MATH], ids=["pinned", "other_numbers"])
def test_math_reward_cases(cases):
    got = math_rewards([c for c, _, _ in cases], [g for _, g, _ in cases])
    wrong = [(c[:60], g, want, r) for (c, g, want), r in zip(cases, got) if r != want]
    assert not wrong, wrong


def test_one_number_boxed_in_two_spellings_is_one_answer():
    """MATH-500's own solution to number_theory/459 boxes 15 39/40 and 639/40: one answer, not a hedge."""
    text = "$d = \\boxed{15\\frac{39}{40}},$ or $\\boxed{\\frac{639}{40}}$ inches."
    assert math_rewards([text, text, "\\boxed{15.975} or \\boxed{16}"], ["\\frac{639}{40}", "16", "16"]) == [1.0, 0.0, 0.0]
