"""The math reward reads a gold as it is written: bare LaTeX, `$..$` / `$$..$$`, `\\boxed{}`,
several solutions, intervals, sets, prose, thousands separators; and a gold it cannot read stops the load.

Every case is scored through the worker pool (`math_rewards`), as the trainer scores it."""

import json
import time

import pytest

from nanogrpo.data import DataError, load_rows
from nanogrpo.answer import gold_error
from nanogrpo.rewards import math_reward, math_rewards

E_GOLD = r"1 - \frac{1}{\mathrm{e}}"
ROOTS_DISPLAY = r"$$x = \frac{1}{2}, x = \frac{-1 \pm \sqrt{13}}{4}$$"
ROOTS_INLINE = r"$x = \frac{1}{2}, x = \frac{-1 \pm \sqrt{13}}{4}$"


def _check(cases):
    got = math_rewards([c for _, c, _ in cases], [g for g, _, _ in cases])
    wrong = [(g, c, want, s) for (g, c, want), s in zip(cases, got) if s != want]
    assert not wrong, wrong


# ------------------------------------------------------------------ the cases


@pytest.mark.slow
def test_gold_with_upright_e_scores_a_right_answer():
    _check([
        (E_GOLD, r"so \boxed{1 - \frac{1}{e}}", 1.0),
        (E_GOLD, r"\boxed{\frac{e - 1}{e}}", 1.0),
        (E_GOLD, r"\boxed{1 - e^{-1}}", 1.0),
        (E_GOLD, r"\boxed{1 - \frac{1}{\mathrm{e}}}", 1.0),  # the same spelling on the model's side
        (E_GOLD, r"\boxed{1 + \frac{1}{e}}", 0.0),
        (E_GOLD, r"\boxed{1}", 0.0),
    ])


@pytest.mark.slow
def test_display_gold_with_several_solutions_scores_a_right_answer():
    _check([
        (ROOTS_DISPLAY, r"\boxed{x = \frac{1}{2}, x = \frac{-1 \pm \sqrt{13}}{4}}", 1.0),
        (ROOTS_DISPLAY, r"\boxed{\frac{1}{2}, \frac{-1 + \sqrt{13}}{4}, \frac{-1 - \sqrt{13}}{4}}", 1.0),
        (ROOTS_DISPLAY, r"\boxed{x = \frac{-1 - \sqrt{13}}{4}, x = \frac12, x = \frac{-1 + \sqrt{13}}{4}}", 1.0),
        (ROOTS_DISPLAY, r"\boxed{x = \frac{1}{2} \text{ or } x = \frac{-1 \pm \sqrt{13}}{4}}", 1.0),
        (ROOTS_DISPLAY, r"\boxed{\frac{1}{2}, \frac{-1 + \sqrt{13}}{4}}", 0.0),  # a root missing
        (ROOTS_DISPLAY, r"\boxed{\frac{1}{2}, \frac{1 \pm \sqrt{13}}{4}}", 0.0),  # wrong sign
    ])


def test_inline_gold_with_several_solutions_refuses_one_root():
    _check([
        (ROOTS_INLINE, r"\boxed{\frac{1}{2}}", 0.0),
        (ROOTS_INLINE, r"\boxed{x = \frac{1}{2}}", 0.0),
        (ROOTS_INLINE, r"\boxed{\frac{-1 + \sqrt{13}}{4}}", 0.0),
        (ROOTS_INLINE, r"\boxed{\frac{1}{2}, \frac{-1 \pm \sqrt{13}}{4}}", 1.0),
    ])


def test_prose_golds_are_words_not_products_of_letters():
    _check([
        ("no", r"\boxed{on}", 0.0),
        ("forty two", r"\boxed{two forty}", 0.0),
        ("no", r"\boxed{no}", 1.0),
        ("no", r"\boxed{\text{No}}", 1.0),
        ("forty two", r"\boxed{\text{Forty two}}", 1.0),
        ("forty two", r"\boxed{forty  two}", 1.0),
        ("yes", r"The answer is \boxed{\textbf{yes}}.", 1.0),
        ("yes", r"\boxed{sey}", 0.0),
        ("yes", "yes", 1.0),  # a bare word answers a prose gold, as a bare number answers a number gold
        ("yes", "no", 0.0),
    ])


@pytest.mark.parametrize("spelling", [r"1,000", r"1{,}000", r"1,\!000", r"1\,000", r"1\ 000", r"1~000", r"1\!000",
                                      r"1\;000", "1\u2009000"])
def test_thousands_separators_in_the_answer(spelling):
    assert math_reward("\\boxed{" + spelling + "}", "1000") == 1.0


@pytest.mark.parametrize("spelling", [r"1{,}000", r"1,\!000", r"1\,000", r"1\ 000", r"1~000", r"1\!000"])
def test_thousands_separators_in_the_gold(spelling):
    assert math_reward(r"\boxed{1000}", spelling) == 1.0
    assert math_reward(r"\boxed{1}", spelling) == 0.0


def test_thousands_separators_only_between_groups_of_three():
    _check([
        (r"1\,000\,000", r"\boxed{1000000}", 1.0),
        (r"12{,}345.5", r"\boxed{12345.5}", 1.0),
        (r"1\,000", r"\boxed{100}", 0.0),
        ("1000", r"\boxed{1\,00}", 0.0),  # `1\,00` is no thousands spelling: not 100, not 1000
    ])


def test_unreadable_gold_stops_the_load_naming_the_row(tmp_path):
    f = tmp_path / "golds.jsonl"
    rows = [{"problem": "p1", "answer": "7"}, {"problem": "p2", "answer": "\\frac{1}{"}]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=r"golds\.jsonl:2: .*'answer'"):
        load_rows(str(f), "math", gold_check=gold_error)
    assert len(load_rows(str(f), "math", verbose=False)) == 2  # no check asked (reward exact / number): it loads


def test_train_checks_golds_only_for_the_math_reward(tmp_path):
    """train.py's load: math-verify as the verifier refuses the unreadable gold before any compute; exact takes it
    (its golds are strings, not LaTeX)."""
    import train
    from nanogrpo import config as C

    f = tmp_path / "golds.jsonl"
    f.write_text(json.dumps({"problem": "p1", "answer": "\\frac{1}{"}) + "\n")
    with pytest.raises(DataError, match="golds.jsonl:1: the math reward cannot read"):
        train.load_task(C.load([f"task={f}", "rewards=math"]))
    with pytest.raises(DataError, match="golds.jsonl:1: the math reward cannot read"):
        train.load_task(C.load([f"task={f}"]))  # a math dataset's own verifier is math-verify
    assert len(train.load_task(C.load([f"task={f}", "rewards=exact"]))[0]) == 1


def test_every_kind_of_readable_gold_loads(tmp_path):
    golds = ["7", "1,000", r"1\,000", E_GOLD, ROOTS_DISPLAY, ROOTS_INLINE, "no", "forty two", r"\text{Evelyn}",
             r"(0, 1]", r"\{1, 2\}", r"\boxed{5}", r"\$18.90", r"\left( 3, \frac{\pi}{2} \right)", "x = 3"]
    f = tmp_path / "golds.jsonl"
    f.write_text("".join(json.dumps({"problem": f"p{i}", "answer": g}) + "\n" for i, g in enumerate(golds)))
    assert [r["answer"] for r in load_rows(str(f), "math", verbose=False)] == golds


# ------------------------------------------------------------------ more golds, as written


def test_boxed_and_delimited_golds():
    _check([
        (r"\boxed{\frac{3}{4}}", r"\boxed{0.75}", 1.0),
        (r"$\frac{3}{4}$", r"\boxed{\frac34}", 1.0),
        (r"\[\frac{3}{4}\]", r"\boxed{3/4}", 1.0),
        (r"\(\sqrt{2}\)", r"\boxed{\sqrt 2}", 1.0),
        (r"$\frac{3}{4}$", r"\boxed{0.7}", 0.0),
        (r"The answer is $12$.", r"\boxed{12}", 1.0),
    ])


@pytest.mark.slow
def test_intervals_and_sets():
    _check([
        (r"(0, 1]", r"\boxed{(0, 1]}", 1.0),
        (r"(0, 1]", r"\boxed{[0, 1]}", 0.0),
        (r"$[2, \infty)$", r"\boxed{[2, \infty)}", 1.0),
        (r"$[2, \infty)$", r"\boxed{(2, \infty)}", 0.0),
        (r"\{1, 2, 3\}", r"\boxed{\{3, 1, 2\}}", 1.0),
        (r"\{1, 2, 3\}", r"\boxed{\{1, 2\}}", 0.0),
        ("2, 3", r"\boxed{3, 2}", 1.0),
        (r"\pm 3", r"\boxed{\pm 3}", 1.0),
        (r"\pm 3", r"\boxed{3}", 0.0),
    ])


def test_numbers_fractions_and_decimals():
    _check([
        ("42", r"\boxed{42}", 1.0),
        ("42", "so the final answer is 42", 1.0),
        ("42", r"\boxed{41}", 0.0),
        ("0.5", r"\boxed{\frac{1}{2}}", 1.0),
        (r"\frac{1}{2}", r"\boxed{0.5}", 1.0),
        (r"\frac{1}{3}", r"\boxed{0.34}", 0.0),
        (r"\$18.90", r"\boxed{\$18.90}", 1.0),  # a dollar sign, not a math delimiter
        (r"\$18.90", r"\boxed{18.9}", 1.0),
    ])


def test_text_and_choice_golds():
    _check([
        (r"\text{Evelyn}", r"\boxed{\text{Evelyn}}", 1.0),
        (r"\text{Evelyn}", r"\boxed{Evelyn}", 1.0),
        (r"\text{Evelyn}", r"\boxed{\text{Navin}}", 0.0),
        ("Evelyn", r"so the winner is $\text{Evelyn}$", 1.0),  # no box: math-verify reads `\text{}` itself
        ("Evelyn", r"so the winner is $\text{Navin}$", 0.0),
        ("no", r"The answer is $\textbf{No}$.", 1.0),
        ("A", r"\boxed{A}", 1.0),
        (r"\text{(C)}", r"\boxed{\text{(C)}}", 1.0),
        (r"\text{(C)}", r"\boxed{\text{(B)}}", 0.0),
    ])


def test_math_names_are_not_prose():
    _check([
        (r"\sin x", r"\boxed{\sin x}", 1.0),
        (r"\pi", r"\boxed{\pi}", 1.0),
        ("x", r"\boxed{x}", 1.0),
        # Letters alone cannot tell a word from a product: `xy` is read as written, like `no`.
        ("xy", r"\boxed{xy}", 1.0),
    ])


def test_rewrites_are_linear_on_policy_text():
    from nanogrpo.answer import final_answers, normalise

    nasty = [r"1\,000" * 200_000, "\\boxed{" * 100_000, "\\boxed{" + "x = 1 \\pm 2, " * 100_000 + "}",
             "$" * 500_000, "(" * 300_000 + "\\pm" + ")" * 300_000]
    for text in nasty:
        t0 = time.monotonic()
        [normalise(a) for _, a in final_answers(text) if a]  # an answer is at most ANSWER_CHARS long
        assert time.monotonic() - t0 < 2.0, text[:40]


def test_readers_say_which_kind_of_gold():
    from nanogrpo.answer import gold_error, gold_of

    assert gold_of("no").prose == "no"
    assert gold_of(r"\text{Forty  Two}").prose == "forty two"
    assert gold_of("3").prose is None and gold_of("3").value == 3
    assert gold_of("sin x").prose is None  # a math name and a letter: LaTeX, not words
    assert gold_error(r"\frac{1}{") is not None
    assert gold_error("12") is None and gold_error(E_GOLD) is None
    assert "no expression" in gold_error("}{")
