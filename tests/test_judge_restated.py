"""What the judge reads in the row's question (docs/judge.md, "The question restated"): an expression of the
question's own states no answer, though sympy finds it equal to the gold; `E = v` for an E the question asks about
answers v; a unit the question asks in is the one the answer must use. Without the question the judge cannot tell,
which is what the cases below pin both ways."""

import sys
from pathlib import Path

import pytest

from nanogrpo import rewards

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "bench"))
import judge_restated  # noqa: E402

# (question, completion, gold): the question's expression boxed or stated as it stands, value-equal to the gold
RESTATED = [
    ("Compute $\\dbinom{9}{3}$.", "So the answer is $\\boxed{\\binom{9}{3}}$.", "84"),
    ("Simplify $\\sqrt{98}$.", "\\boxed{\\sqrt{98}}", "7\\sqrt{2}"),
    ("Write $\\frac{7}{8}$ as a decimal.", "The answer is $\\dfrac{7}{8}$.", "0.875"),
    ("Express $0.\\overline{5}$ as a common fraction.", "\\boxed{0.\\overline{5}}", "\\frac{5}{9}"),
    ("Factor $x^2+5x+6$.", "<answer>x^2 + 5x + 6</answer>", "(x+2)(x+3)"),
    ("Rationalize the denominator: $\\frac{1}{\\sqrt{3}}$.", "\\boxed{x = \\frac{1}{\\sqrt{3}}}", "\\frac{\\sqrt{3}}{3}"),
    ("Evaluate $\\left\\lceil \\frac{17}{4} \\right\\rceil$.", "\\boxed{\\lceil\\frac{17}{4}\\rceil}", "5"),
    ("Simplify $\\sqrt{300}$.", "Answer: sqrt(300)", "10\\sqrt{3}"),  # in plain text (probe 17)
    ("Factor the expression $xy+3y+4x+12$.", "\\boxed{xy+4x+3y+12}", "(x+3)(y+4)"),  # its terms reordered (probe 20)
]

# (question, completion, gold): right with the question too
KEPT = [
    ("Compute $\\dbinom{9}{3}$.", "\\boxed{84}", "84"),
    ("Simplify $4x+12+xy+3y$.", "\\boxed{xy+3y+4x+12}", "xy+3y+4x+12"),  # the gold's terms, in any order, answer
    ("Expand $(x+2)(x+3)$.", "\\boxed{6+5x+x^2}", "x^2+5x+6"),
    ("Simplify $\\sqrt{98}$.", "$\\sqrt{98} = \\sqrt{49 \\cdot 2}$, so \\boxed{7\\sqrt2}", "7\\sqrt{2}"),
    # the question boxed first, then its value: the copy states nothing, the value answers
    ("Evaluate $2^5-3^2$.", "We need $\\boxed{2^5-3^2}$ as written: $32 - 9 = \\boxed{23}$.", "23"),
    ("Evaluate $2^5-3^2$.", "$2^5-3^2 = 23$", "23"),  # a chain from the question to its value
    # the gold's own spelling in the question (a comparison, a choice) is the answer
    ("Which is larger, $\\frac{5}{7}$ or $\\frac{7}{10}$?", "\\boxed{\\dfrac57}", "\\frac{5}{7}"),
    # a number of the question may be the answer (no restatement): `0.5` is the probability asked for
    ("A coin lands heads with probability $0.5$. What is the probability it lands tails?", "\\boxed{0.5}", "\\frac12"),
    ("Write $\\frac{7}{8}$ as a decimal.", "\\boxed{0.875}", "0.875"),
]


@pytest.mark.parametrize("question,completion,gold", RESTATED)
def test_the_question_restated_is_no_answer(question, completion, gold):
    assert rewards.math_reward(completion, gold, problem=question) == 0.0
    assert rewards.math_reward(completion, gold) == 1.0  # without the question: equal in value, paid


@pytest.mark.parametrize("question,completion,gold", KEPT)
def test_a_worked_answer_stays_right_with_the_question(question, completion, gold):
    assert rewards.math_reward(completion, gold, problem=question) == 1.0


def test_the_number_reward_reads_the_question_too():
    # a fraction in lowest terms is a number the model computed, unless it is the question's own
    assert rewards.number_reward("\\boxed{\\frac{7}{8}}", "0.875") == 1.0
    assert rewards.number_reward("\\boxed{\\frac{7}{8}}", "0.875", "Write $\\frac{7}{8}$ as a decimal.") == 0.0
    assert rewards.number_reward("\\boxed{0.875}", "0.875", "Write $\\frac{7}{8}$ as a decimal.") == 1.0


def test_the_verifiers_take_the_rows_problem_column():
    """Training and eval.py call the verifiers with the rows' columns: `problem` is the question."""
    rows = [{"problem": "Simplify $\\sqrt{98}$.", "answer": "7\\sqrt{2}"}] * 2
    completions = ["\\boxed{\\sqrt{98}}", "\\boxed{7\\sqrt{2}}"]
    assert rewards.judge(rewards.math, completions, rows) == [0.0, 1.0]
    rows = [{"problem": "Write $\\frac{7}{8}$ as a decimal.", "answer": "0.875"}] * 2
    assert rewards.judge(rewards.number, ["\\boxed{\\frac78}", "\\boxed{0.875}"], rows) == [0.0, 1.0]
    assert rewards.judge(rewards.math, ["\\boxed{\\frac78}"], [{"answer": "0.875"}]) == [1.0]  # no question: paid


@pytest.mark.slow
def test_no_math500_question_pays_a_copy_of_itself_and_every_reference_solution_stays_right():
    """Every MATH-500 question's own expressions boxed: 32 are paid without the question (measured), none with
    it; the 500 reference solutions are right either way."""
    counts = judge_restated.measure(["math500"])[0]["math500"]
    assert counts["copy paid, no question"] >= 25  # the hole is there to close (a test that cannot fail otherwise)
    assert counts["copy paid, with it"] == 0
    assert counts["solution right, no question"] == counts["solution right, with it"] == counts["solutions"] == 500


def test_the_unit_the_question_asks_in():
    question = "Each dog takes 0.5 hours a day. How many hours a week does he spend on 10 dogs?"
    assert rewards.number_reward("He spends 35 minutes a week.", "35", question) == 0.0
    assert rewards.number_reward("He spends 35 minutes a week.", "35") == 1.0  # no question: no unit asked
    assert rewards.number_reward("He spends 35 hours a week.", "35", question) == 1.0
    assert rewards.math_reward("\\boxed{35 \\text{ min}}", "35", problem=question) == 0.0
    assert rewards.number_reward("He spends 35 a week.", "35", "How many bags can he fill?") == 1.0  # bags: no unit


def test_a_value_of_what_the_question_asks_for():
    question = "Let $g(x) = 2x + 1$. Find $g(4)$."
    assert rewards.math_reward("So $g(4) = 9$", "9", problem=question) == 1.0
    assert rewards.math_reward("So $g(4) = 9$", "9") == 0.0  # without it `g(4) = 9` is a relation the gold lacks
    assert rewards.math_reward("So $g(5) = 9$", "9", problem=question) == 0.0
    # working that rewrites the question's expression, still in its unknowns, is no value of it
    factor = "Factor the expression $ab+5b+2a+10$."
    assert rewards.math_reward("Proof. We have $ab+5b+2a+10 = ab + 5b + 2a + 2\\cdot 5$.", "(a+5)(b+2)", problem=factor) == 0.0
