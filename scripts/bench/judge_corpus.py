"""The answer judge's labelled corpus (data/judge/corpus.jsonl): write it, and score the judge on it.

    python scripts/bench/judge_corpus.py                    # score: the confusion table per class and per reward
    python scripts/bench/judge_corpus.py --write            # regenerate data/judge/corpus.jsonl (deterministic)
    python scripts/bench/judge_corpus.py --qwen DIR         # also Qwen2.5-Math's grader, from a local checkout of
                                                      # QwenLM/Qwen2.5-Math (its evaluation/ folder; not shipped)
    python scripts/bench/judge_corpus.py --port-math-verify DIR   # re-port Math-Verify's test cases from a checkout's tests/

A row is {"class", "reward" ("math" | "number"), "answer" (the completion), "gold", "label" (1 right, 0 wrong),
"source"}; Math-Verify's own cases also carry "mv_expected" (its test's expectation) and, where the label differs
from it, "why". The table counts, per class: right answers scored 0, wrong answers scored 1.0, answers scored None;
and how often math-verify alone (the lenient score, `nanogrpo.answer.judge_lenient`) and, with --qwen, Qwen2.5-Math's
`math_equal` agree with the label. Targets (docs/judge.md): no wrong -> 1.0, no -> None, right -> 0 at most 1% overall.

The rows come from: Math-Verify's tests (data/judge/math_verify_cases.jsonl, ported as data, each naming its file);
every MATH-500, AMC23, AIME24 and GSM8K gold in data/benchmarks/ answered in several right and close wrong spellings
(`benchmark_rows`); and the adversarial classes (spellings a policy finds that broke the old judge), each a rule tried over many numbers (`adversarial_rows`).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from collections import defaultdict
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
CORPUS = ROOT / "data" / "judge" / "corpus.jsonl"
MV_CASES = ROOT / "data" / "judge" / "math_verify_cases.jsonl"
BENCH = ROOT / "data" / "benchmarks"


# ---------------------------------------------------------------- Math-Verify's own test cases (ported as data)


def port_math_verify(tests_dir: str) -> list[dict]:
    """(gold, pred, expected) of every parametrized case in Math-Verify's tests/, with the test it came from and
    the options it ran with (`compare_strings(..., match_types=.., precision=..)`)."""
    import ast
    import math

    rows = []
    for f in sorted(Path(tests_dir).glob("test_*.py")):
        tree = ast.parse(f.read_text())
        for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
            for d in fn.decorator_list:
                if not (isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "parametrize"):
                    continue
                names = [n.strip() for n in ast.literal_eval(d.args[0]).split(",")]
                if "gold" not in names:
                    continue
                try:
                    values = ast.literal_eval(d.args[1])
                except ValueError:  # an f-string of math.sqrt(..): evaluated with math only
                    values = eval(compile(ast.Expression(d.args[1]), str(f), "eval"), {"math": math})  # noqa: S307
                call = next((c for c in ast.walk(fn) if isinstance(c, ast.Call)
                             and "compare_strings" in ast.unparse(c.func)), None)
                options = {k.arg: ast.unparse(k.value) for k in call.keywords} if call else {"parse": "defaults"}
                for v in values:
                    case = dict(zip(names, v))
                    extra = {k: case[k] for k in case if k not in ("gold", "pred", "expected", "result")}
                    rows.append({"class": "math-verify", "reward": "math", "answer": case["pred"],
                                 "gold": case["gold"], "mv_expected": int(case.get("expected", case.get("result"))),
                                 "source": f"huggingface/Math-Verify tests/{f.name}::{fn.name} {options} {extra or ''}"
                                 .strip()})
    return rows


# Where this judge disagrees with a Math-Verify test on purpose (docs/judge.md), matched on (answer, gold): the label
# is then the judge's rule, and "why" says which.
TRUNCATED = "a decimal is the exact rational it spells: a truncated decimal never equals an irrational or repeating gold"
DISAGREE = [
    (r"^\$?1 \+ \\frac\{1\}\{\\mathrm\{e\}\}", "", "1 + 1/e is not 1 - 1/e (math-verify misreads \\mathrm{e} in a \\frac)"),
    (r"^.{0,40}\\approx.{0,10}$", "", "an approximation mark never equals a gold without one"),
    (r"^(?:\$?0\.0833333333333333|\$?\\begin\{pmatrix\}0\.33|\$?\(0\.6,2\.6667\])", "", TRUNCATED),
    (r"^(?:1000,99|1\.22|Soucis : 2,74 \$ a\.\.)$", "",
     "a comma is a list or a thousands separator, never a decimal point (MATH and GSM8K write points)"),
    (r"^Answer (?:\$|\\\() \n 9", "", "the answer is 9 (math-verify's case pins its own regex, not the answer)"),
    (r"^\$\\boxed\{1,2\}\$$", r"no no no", "several boxes in a gold are read together, as its list"),
    (r"^(?:\$x = 5\+5\+1 = 7 =11|\$z = 3\+3 = 2|Answer \$ \\frac\{1\}\{2\} \\\$ = \\frac\{10\}\{9\} )\$$", "", "a chain whose sides differ (5+5+1 = 7, 3+3 = 2) is false, "
                                                       "not its last side"),
    (r"^\$f\(y\)\$$", "", "variables are not renamed: f(y) is not f(x) (math-verify's strict=False case)"),
    (r"\\boxed\{255\}", r"10455", "a box followed by a different final answer is a hedge (two answers)"),
    (r"^\$-2 \\\\le x", r"^\$x \\in", "an inequality in one variable is the interval it describes, so it answers an "
                                       "interval gold (math-verify says so with allow_set_relation_comp=True)"),
]


def math_verify_rows() -> list[dict]:
    rows = [json.loads(line) for line in MV_CASES.read_text().splitlines() if line.strip()]
    for r in rows:
        r["label"] = r["mv_expected"]
        for answer, gold, why in DISAGREE:
            if re.search(answer, r["answer"]) and re.search(gold, r["gold"]):
                r["label"], r["why"] = int(why.startswith(("the answer is", "several", "an inequality"))), why
    return rows


# ---------------------------------------------------------------- exact spellings of numbers


def decimal_of(x: Fraction) -> str | None:
    """The exact decimal of a terminating fraction (`3/4` -> `0.75`), None for one that does not terminate."""
    d = x.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    if d != 1:
        return None
    k = 0
    while (x * 10 ** k).denominator != 1:
        k += 1
    s = f"{abs(x.numerator) * 10 ** k // x.denominator:0{k + 1}d}"
    s = s if k == 0 else s[:-k] + "." + s[-k:]
    return ("-" if x < 0 else "") + s


def truncated(x: float, places: int = 6) -> str:
    """`x` cut (not rounded) to `places` decimals: what a model writes for an irrational or repeating value."""
    s = f"{abs(x):.{places + 3}f}"[: -3]
    return ("-" if x < 0 else "") + s


def dfrac(x: Fraction) -> str:
    sign = "-" if x < 0 else ""
    return f"{sign}\\dfrac{{{abs(x.numerator)}}}{{{x.denominator}}}"


def with_commas(n: int) -> str:
    return f"{n:,}"


# ---------------------------------------------------------------- the benchmarks' golds, in many spellings

SAY = "Therefore, the final answer is: $\\boxed{%s}$. I hope it is correct."
THINK = "<think>\nLet me try. Maybe \\boxed{%s}? No, recheck.\n</think>\n\n**Final Answer**\n\\boxed{%s}"


def _value(gold: str):
    """(exact Fraction or None, float or None) of a gold, through the judge's own reading and sympy."""
    from nanogrpo import answer as A

    g = A.gold_of(gold)
    if g.value is not None:
        return g.value, float(g.value)
    if g.answer is None or g.equation or re.search(r"[a-zA-Z]", re.sub(r"\\(?:frac|sqrt|pi|dfrac|cdot)", "", g.answer.core)):
        return None, None
    try:
        from math_verify import parse

        e = parse("$" + g.answer.core + "$")
        v = complex(e[0].evalf()) if e and not isinstance(e[0], str) else None
        return None, (v.real if v is not None and abs(v.imag) < 1e-12 else None)
    except Exception:
        return None, None


def _bump(gold: str) -> str | None:
    """The gold with its last integer raised by one: a close wrong answer of the same shape."""
    found = list(re.finditer(r"(?<![\d.])\d+(?![\d.])", gold))
    if not found:
        return None
    m = found[-1]
    return gold[: m.start()] + str(int(m.group()) + 1) + gold[m.end() :]


def _name_for(gold: str) -> str:
    used = set(re.findall(r"[a-zA-Z]", re.sub(r"\\[a-zA-Z]+", "", gold)))
    return next(n for n in ("x", "y", "n", "k", "N", "A", "t") if n not in used)


def math_rows(name: str, rows: list[dict]) -> list[dict]:
    """Right and close wrong spellings of each math gold (reward "math")."""
    from nanogrpo import answer as A

    out = []

    def add(cls, answer, gold, label):
        out.append({"class": f"{name}:{cls}", "reward": "math", "answer": answer, "gold": gold, "label": label,
                    "source": f"data/benchmarks/{name}"})

    for r in rows:
        gold = str(r["answer"])
        g = A.gold_of(gold)
        exact, approx = _value(gold)
        add("right-as-written", SAY % gold, gold, 1)
        if g.prose is not None:
            add("right-words", THINK % ("no idea", "\\text{" + gold.replace("\\text{", "").rstrip("}").title() + "}"),
                gold, 1)
            add("right-words", "The answer is $\\textbf{" + g.prose + "}$.", gold, 1)
            add("wrong-words", SAY % ("\\text{" + g.prose[::-1] + "x}"), gold, 0)
            add("wrong-hedge", "\\boxed{" + gold + "} or maybe \\boxed{\\text{" + g.prose + "s}}", gold, 0)
            add("wrong-words", SAY % ("\\text{not " + g.prose + "}"), gold, 0)
            continue
        if exact is not None:
            dec = decimal_of(exact)
            if dec is not None and dec != gold.strip():
                add("right-exact-decimal", THINK % (exact + 1, dec), gold, 1)
            if exact.denominator != 1:
                add("right-dfrac", THINK % (exact + 1, dfrac(exact)), gold, 1)
            else:
                add("right-spacing", THINK % (exact + 1, "\\textbf{" + str(exact) + "}"), gold, 1)
            if not g.answer.angle and not g.answer.unit:
                add("right-units", SAY % (str(dec or dfrac(exact)) + "\\text{ units}"), gold, 1)
        else:
            add("right-spacing", THINK % ("0", gold.replace(" ", "") if " " in gold else " " + gold + " "), gold, 1)
        if not g.equation and "," not in g.answer.core and "\\begin" not in gold and "=" not in gold:
            add("right-named", SAY % (_name_for(gold) + " = " + gold), gold, 1)
        wrong = _bump(gold)
        if wrong is not None:
            add("wrong-off-by-one", SAY % wrong, gold, 0)
        else:
            add("wrong-off-by-one", SAY % ("(" + gold + ") + 1"), gold, 0)
        if approx is not None and (exact is None or decimal_of(exact) is None):
            add("wrong-truncated-decimal", SAY % truncated(approx), gold, 0)
            add("wrong-relation", SAY % (gold + " \\approx " + truncated(approx)), gold, 0)
        elif approx is not None:
            add("wrong-truncated-decimal", SAY % truncated(approx + 1e-6), gold, 0)
        add("wrong-hedge", "\\boxed{" + (wrong or "0") + "}\n\nso the answer is \\boxed{" + gold + "}", gold, 0)
        add("wrong-relation", SAY % ((wrong or "0") + " = " + gold) if not g.equation else SAY % (gold + " \\to 0"),
            gold, 0)
    return out


def number_rows(name: str, golds: list[str]) -> list[dict]:
    """Right and close wrong spellings of each number gold (reward "number": GSM8K, AIME)."""
    out = []

    def add(cls, answer, gold, label):
        out.append({"class": f"{name}:{cls}", "reward": "number", "answer": answer, "gold": gold, "label": label,
                    "source": f"data/benchmarks/{name}"})

    units = ["apples", "\\text{ dollars}", "\\text{ cm}", "miles", "\\mbox{ minutes}"]
    for i, gold in enumerate(golds):
        n = int(gold.replace(",", ""))
        grouped = with_commas(n)
        minus = "\u2212" if n < 0 else ""
        spelled = minus + f"{abs(n):,}".replace(",", ["{,}", "\\,", ",\\!", ",", "\\ "][i % 5])
        add("right-boxed", SAY % str(n), gold, 1)
        add("right-separators", THINK % (n + 1, spelled), gold, 1)
        add("right-units", ["The answer is %s %s." % (grouped, units[i % 5].strip()),
                            "\\boxed{\\$%s}" % grouped, "#### %s" % grouped,
                            "\\boxed{x = %d}" % n, "\\boxed{\\textbf{%s}}" % grouped][i % 5], gold, 1)
        add("wrong-off-by-one", SAY % str(n + 1 if i % 2 else n - 1), gold, 0)
        add("wrong-truncated-decimal", SAY % f"{n}.{(i % 9) + 1}", gold, 0)
        add("wrong-hedge", ["\\boxed{%d} or \\boxed{%d}" % (n, n + 1), "\\boxed{%d}\n\nSo \\boxed{%d}" % (n + 2, n),
                            "I think \\boxed{%d} is wrong; final answer is %d" % (n, n + 3),
                            "\\boxed{%d} wait, \\boxed{%d" % (n + 1, n)][i % 4], gold, 0)
        add("wrong-unevaluated" if i % 5 == 0 else "wrong-relation", SAY % [
            f"{n + 7} - 7", f"{n + 1} = {n}", f"\\approx {n}", f"{n + 1} \\to {n}", f"{n} < {n + 1}"][i % 5], gold, 0)
    return out


def benchmark_rows() -> list[dict]:
    from nanogrpo.tasks import benchmarks

    out = []
    for name in ("math500", "amc23"):
        out += math_rows(name, benchmarks.load_task(name).rows)
    for name in ("gsm8k", "aime24"):
        out += number_rows(name, [r["answer"] for r in benchmarks.load_task(name).rows])
    return out


# ---------------------------------------------------------------- the issue's adversarial classes, as rules


def adversarial_rows(seed: int = 0) -> list[dict]:
    """Each adversarial class, tried over many numbers: a rule, not a list of strings."""
    rnd = random.Random(seed)
    out = []

    def add(cls, reward, answer, gold, label):
        out.append({"class": cls, "reward": reward, "answer": answer, "gold": gold, "label": label,
                    "source": "adversarial"})

    for _ in range(25):
        p, q = rnd.randint(1, 9), rnd.choice([2, 4, 5, 8, 10, 20, 25])
        x = Fraction(p, q)
        dec = decimal_of(x)
        short = f"\\frac{p}{q}" if q < 10 else f"\\frac{{{p}}}{{{q}}}"
        for gold in (short, f"\\frac {p}{q}" if q < 10 else f"\\tfrac{{{p}}}{{{q}}}", f"{p}/{q}"):
            add("fraction-as-decimal", "math", f"\\boxed{{{dec}}}", gold, 1)
        k = rnd.randint(1, 6)
        add("fraction-as-decimal", "math", f"\\boxed{{{decimal_of(Fraction(1, 2 ** k))}}}", f"2^{{-{k}}}", 1)
        add("fraction-as-decimal", "math", f"\\boxed{{{decimal_of(Fraction(1, 10 ** k))}}}", f"10^{{-{k}}}", 1)
        w = rnd.randint(1, 30)
        add("fraction-as-decimal", "math", f"\\boxed{{{decimal_of(w + Fraction(1, 2))}}}", f"{w}\\frac{{1}}{{2}}", 1)
        add("fraction-as-decimal", "math", f"\\boxed{{{decimal_of(w + Fraction(1, 4))}}}", f"{w} \\frac{{1}}{{4}}", 1)
        d = rnd.choice([3, 6, 7, 9, 11, 12])
        y = Fraction(rnd.randint(1, d - 1), d)
        if decimal_of(y) is None:
            add("repeating-decimal", "math", f"\\boxed{{{truncated(float(y), 4)}}}", f"\\frac{{{y.numerator}}}"
                f"{{{y.denominator}}}", 0)
            add("repeating-decimal", "math", f"\\boxed{{{truncated(float(y), 6)}}}", f"\\frac{{{y.numerator}}}"
                f"{{{y.denominator}}}", 0)
        n = rnd.randint(2, 500)
        add("named-answer", "math", f"\\boxed{{a+b={n}}}", str(n), 1)
        add("named-answer", "math", f"\\boxed{{AB = {n}}}", str(n), 1)
        add("named-answer", "math", f"\\boxed{{\\theta=\\frac{{\\pi}}{{{n}}}}}", f"\\frac{{\\pi}}{{{n}}}", 1)
        add("named-answer", "math", f"\\boxed{{\\angle ABC={n % 180}^\\circ}}", f"{n % 180}^\\circ", 1)
        add("named-answer", "math", f"\\boxed{{x = {n} \\text{{ or }} x = {n + 3}}}", f"{n}, {n + 3}", 1)
        add("named-answer", "math", f"\\boxed{{m \\angle A = {n % 180}}}", f"{n % 180}^\\circ", 1)
        add("named-answer", "math", f"\\boxed{{x = {n + 1}}}", str(n), 0)
        add("named-answer", "math", f"\\boxed{{x = {n}, x = {n + 1}}}", str(n), 0)
        a, b = rnd.randint(1, 9), rnd.randint(10, 20)
        add("tuple-answer", "math", f"\\boxed{{(x, y) = ({a}, {b}) \\quad\\text{{and}}\\quad ({b}, {a})}}",
            f"({a},{b}),({b},{a})", 1)
        add("tuple-answer", "math", f"\\boxed{{x = {a}, y = {b}}}", f"({a}, {b})", 1)
        add("tuple-answer", "math", f"\\boxed{{({a}, {truncated(3.141592653589793 / a)})}}",
            f"\\left( {a}, \\frac{{\\pi}}{{{a}}} \\right)", 0)
        add("tuple-answer", "math", f"\\boxed{{({a}, \\frac{{\\pi}}{{{a}}})}}", f"\\left( {a}, \\frac{{\\pi}}{{{a}}} \\right)",
            1)
        pct = rnd.randint(1, 99)
        add("percent", "math", f"\\boxed{{{pct}\\%}}", str(pct), 1)
        add("percent", "math", f"\\boxed{{{pct}}}", f"{pct}\\%", 1)
        add("percent", "math", f"\\boxed{{{decimal_of(Fraction(pct, 100))}}}", str(pct), 0)
        add("percent", "number", f"\\boxed{{{pct}\\%}}", str(pct), 1)
        add("percent", "number", f"The answer is {pct} percent.", str(pct), 1)
        add("percent", "number", f"\\boxed{{{decimal_of(Fraction(pct, 100))}}}", str(pct), 0)
        m = rnd.randint(2, 9999)
        for ans in (f"{m} \\text{{ cm}}", f"{m} \\text{{ apples}}", f"{m} miles", f"{m} apples", f"\\textbf{{{m}}}", f"x = {m}", f"k = {m}",
                    f"{m}^\\circ", f"\\${m}"):
            add("number-spellings", "number", f"\\boxed{{{ans}}}", str(m), 1)
        add("number-spellings", "number", f"\\boxed{{\u2212{m}}}", f"-{m}", 1)
        big = rnd.randint(1000, 999999)
        add("number-spellings", "number", f"\\boxed{{{big // 1000} {big % 1000:03d}}}", str(big), 1)
        add("number-spellings", "math", f"\\boxed{{{big // 1000} {big % 1000:03d}}}", str(big), 1)
        add("number-spellings", "number", f"\\boxed{{{m} \\text{{ cm}}}}", str(m + 1), 0)
        add("number-spellings", "number", f"\\boxed{{{m}.5 apples}}", str(m), 0)
        add("number-spellings", "number", f"\\boxed{{{m}abc}}", str(m), 0)  # letters against the number: the answer
        r = rnd.randint(2, 9)
        approx = truncated(3.141592653589793 / r)
        gold = f"\\frac{{\\pi}}{{{r}}}"
        for ans in (f"\\fbox{{{approx}}}", f"\\boxed {{{approx}}}", f"\\boxed{{{{{approx}}}}}",
                    f"\\boxed{{\\left({approx}\\right)}}", f"\\boxed{{+{approx}}}", f"\\boxed{{{approx}\\,}}",
                    f"\\boxed{{\\approx {approx}}}", f"\\boxed{{{approx}3\\ldots}}", f"\\boxed{{{approx}...}}"):
            add("wrapped-approximation", "math", ans, gold, 0)
        add("wrapped-approximation", "math", f"\\fbox{{{gold}}}", gold, 1)
        add("wrapped-approximation", "math", f"\\boxed {{{gold}}}", gold, 1)
        v = rnd.randint(10, 999)
        for ans in (f"\\fbox{{{v - 1} = {v}}}", f"\\boxed{{{v - 1} \\equiv {v}}}", f"\\boxed{{{v + 1} \\to {v}}}",
                    f"\\boxed{{{v + 1} \\coloneqq {v}}}", f"\\boxed{{{v + 1} := {v}}}", f"\\boxed{{{v} \\Rightarrow {v + 1}}}",
                    f"\\boxed{{{v} \\le {v}}}"):
            add("relation", "math", ans, str(v), 0)
            add("relation", "number", ans, str(v), 0)
        add("angle-units", "math", f"\\boxed{{{v % 180} \\text{{ rad}}}}", f"{v % 180}^\\circ", 0)
        add("angle-units", "math", f"\\boxed{{{v % 180} \\text{{ radians}}}}", f"{v % 180}^\\circ", 0)
        add("angle-units", "math", f"\\boxed{{{v % 180}^{{\\circ}}}}", f"{v % 180}^\\circ", 1)
        add("angle-units", "math", f"\\boxed{{{v % 180} \\text{{ degrees}}}}", f"{v % 180}^\\circ", 1)
        add("angle-units", "math", f"\\boxed{{{v % 180}}}", f"{v % 180}^\\circ", 1)
        add("hedge", "math", f"I think \\boxed{{{v}}} is wrong; final answer is {v + 1}", str(v), 0)
        add("hedge", "math", f"I think \\boxed{{{v}}} is wrong; final answer is {v + 1}", str(v + 1), 0)
        add("hedge", "math", f"\\boxed{{{v}}} or \\boxed{{{v + 1}}}", str(v), 0)
        add("hedge", "math", f"\\boxed{{{v + 1}}} so \\boxed{{{v}", str(v), 0)
        add("hedge", "number", f"\\boxed{{{v}}} or \\boxed{{{v + 1}}}", str(v + 1), 0)
        add("hedge", "number", f"\\boxed{{{v + 1}}} so \\boxed{{{v}", str(v), 0)
        add("hedge", "number", f"I think \\boxed{{{v}}} is wrong; final answer is {v + 1}", str(v), 0)
        add("hedge", "math", f"\\boxed{{{v}}}\n\nThe final answer is $\\boxed{{{v}}}$.", str(v), 1)
        add("hedge", "number", f"\\boxed{{{v}}}. The final answer is {v}.", str(v), 1)
        add("think", "math", f"<think>maybe \\boxed{{{v}}}</think> The answer is {v + 1}.", str(v + 1), 1)
        add("think", "math", f"<think>maybe \\boxed{{{v}}}</think> The answer is {v + 1}.", str(v), 0)
        add("think", "number", f"<think>maybe \\boxed{{{v}}}</think> \\boxed{{{v + 1}}}", str(v), 0)
        digits = rnd.randint(4400, 6000)
        add("huge-number", "math", "\\boxed{0." + "3" * digits + "}", "\\frac{1}{3}", 0)
        add("huge-number", "math", "\\boxed{" + "9" * digits + "}", str(v), 0)
        add("huge-number", "number", "\\boxed{" + "9" * digits + "}", str(v), 0)
        add("huge-number", "number", "\\boxed{1." + "0" * digits + "1}", "1", 0)
    return out


# ---------------------------------------------------------------- every gold in every place

# Where a completion puts its answer: each a template for the answer text G.
PLACES = {
    "box": "So the result follows.\n\n$\\boxed{%s}$",
    "answer-tag": "<think>\nworking\n</think>\n<answer>%s</answer>",
    "answer-tag-math": "<think>\nworking\n</think>\n<answer>$%s$</answer>",
    "minerva": "Final Answer: The final answer is $%s$. I hope it is correct.",
    "statement": "The answer is $%s$.",
    "bold": "**Answer: $%s$**",
    "bold-final": "**The final answer is $%s$.**",
    "think-then-box": "<think>\nmaybe \\boxed{0}\n</think>\n\nThe final answer is $\\boxed{%s}$.",
}
NUMBER_PLACES = dict(PLACES, **{"hash": "Adding up, she has that many.\n#### %s", "bold-number": "The answer is **%s**.",
                                "plain-statement": "The answer is %s."})


def part(gold: str) -> str:
    """"held-out" for a quarter of the golds, "tuning" for the rest: by a hash of the gold (spaced, `\\dfrac`,
    `\\left(` or not: one gold), never of the row or its layout, so every row of one gold lands in one part. No rule
    is written against the held-out part: it is read only as a score."""
    import hashlib

    key = re.sub(r"\s+|\\(?:left|right)(?![a-zA-Z])", "", re.sub(r"\\[dt]frac", r"\\frac", str(gold)))
    return "held-out" if hashlib.sha256(key.encode()).digest()[0] % 4 == 0 else "tuning"


def _spellings(gold: str) -> list[str]:
    """Right spellings the gold admits: as written, `\\dfrac`, `\\left(..\\right)`, the exact decimal."""
    from nanogrpo import answer as A

    out = [gold]
    if "\\frac" in gold:
        out.append(gold.replace("\\frac", "\\dfrac"))
    if gold.startswith("(") and gold.endswith(")"):
        out.append("\\left" + gold[:-1] + "\\right)")
    g = A.gold_of(gold)
    if g.value is not None and g.value.denominator != 1 and decimal_of(g.value):
        out.append(decimal_of(g.value))
    return out


def places_rows() -> list[dict]:
    """Every benchmark gold in every answer place, right (its spellings, rotating) and wrong (its near miss)."""
    from nanogrpo.tasks import benchmarks

    out = []
    for name, reward in (("math500", "math"), ("amc23", "math"), ("gsm8k", "number"), ("aime24", "number")):
        places = PLACES if reward == "math" else NUMBER_PLACES
        for i, r in enumerate(benchmarks.load_task(name).rows):
            gold = str(r["answer"])
            if reward == "math" and re.search(r"[a-zA-Z]{3,}", re.sub(r"\\[a-zA-Z]+", "", gold)):
                continue  # prose golds: their own class (`benchmark_rows`)
            spell = _spellings(gold) if reward == "math" else [gold, with_commas(int(gold.replace(",", "")))]
            wrong = _bump(gold) or ("(" + gold + ") + 1")
            for j, (place, template) in enumerate(sorted(places.items())):
                if reward == "number" and (i + j) % 4:
                    continue  # GSM8K's 1,319 golds: each in a quarter of the places, every place over many golds
                out.append({"class": f"place:{place}", "reward": reward, "answer": template % spell[(i + j) % len(spell)],
                            "gold": gold, "label": 1, "source": f"data/benchmarks/{name}"})
                if (i + j) % 3 == 0:
                    out.append({"class": f"place:{place}", "reward": reward, "answer": template % wrong, "gold": gold,
                                "label": 0, "source": f"data/benchmarks/{name}"})
    return out


# The review's classes as templates over random numbers: (class, rewards, completion, gold, label); {a} a number,
# {b} = a + 1 (a wrong answer next to it), {p}/{q} a fraction.
ISSUE_CLASSES = [
    ("false-chain", "mn", "\\boxed{{x = {b} = {a}}}", "{a}", 0),
    ("false-chain", "mn", "We get ${b} = {a}$.", "{a}", 0),
    ("false-chain", "mn", "Therefore {b} = {a}", "{a}", 0),
    ("false-chain", "mn", "The answer is {c} + {e} = {b}.", "{b}", 0),
    ("true-chain", "mn", "The answer is {c} + {e} = {a}.", "{a}", 1),
    ("true-chain", "mn", "The final answer is {a} * 2 = {f}.", "{f}", 1),
    ("true-chain", "mn", "The answer is {a} x 2 = {f}.", "{f}", 1),
    ("true-chain", "mn", "\\boxed{{2 \\times {a} = {f}}}", "{f}", 1),
    ("relation", "mn", "\\boxed{{{b} \\Leftrightarrow {a}}}", "{a}", 0),
    ("relation", "mn", "\\boxed{{{b} \\hookrightarrow {a}}}", "{a}", 0),
    ("relation", "mn", "\\boxed{{{b} \\Longleftarrow {a}}}", "{a}", 0),
    ("relation", "mn", "\\boxed{{{b} \\asymp {a}}}", "{a}", 0),
    ("relation", "mn", "\\boxed{{{b} \\longmapsto {a}}}", "{a}", 0),
    ("relation", "mn", "\\boxed{{{b} \u21d4 {a}}}", "{a}", 0),
    ("relation", "mn", "\\boxed{{{b} \u2261 {a}}}", "{a}", 0),
    ("relation", "mn", "\\boxed{{\\cancel{{{b}}} {a}}}", "{a}", 0),
    ("relation", "mn", "\\boxed{{f({b}) = {a}}}", "{a}", 0),
    ("after-box", "mn", "\\boxed{{{a}}}\n\n**Final Answer**\n{b}", "{a}", 0),
    ("after-box", "mn", "\\boxed{{{a}}}. My final answer would be {b}.", "{a}", 0),
    ("negation", "mn", "The answer is not {a}; it is {b}.", "{a}", 0),
    ("negation", "mn", "The answer is definitely not {a}.", "{a}", 0),
    ("negation", "mn", "The answer is not $\\boxed{{{a}}}$ but {b}.", "{a}", 0),
    ("correction", "mn", "The answer is {a}. Wait, I forgot one, so {b} in total.", "{a}", 0),
    ("correction", "mn", "The answer is {a}. Wait, I forgot one, so {b} in total.", "{b}", 1),
    ("correction", "mn", "The answer is {f}. Actually, {a} more than {a}.", "{f}", 1),
    ("correction", "mn", "The answer is {f}. Actually, {a} more than {a}.", "{a}", 0),
    ("letters-after", "mn", "\\boxed{{{a}xy}}", "{a}", 0),
    ("letters-after", "mn", "\\boxed{{{a} \\text{{ squared}}}}", "{a}", 0),
    ("letters-after", "mn", "\\boxed{{{a} \\text{{ dozen}}}}", "{a}", 0),
    ("letters-after", "mn", "\\boxed{{{a} pq}}", "{a}", 0),
    ("count-noun", "mn", "So she has {a} pencils.", "{a}", 1),
    ("count-noun", "mn", "\\boxed{{{a} \\text{{ pencils}}}}", "{a}", 1),
    ("count-noun", "mn", "\\boxed{{{a} pencils}}", "{a}", 1),
    ("factorial", "mn", "\\boxed{{{a}!}}", "{a}", 0),
    ("set-tuple", "m", "\\boxed{{\\{{{a}, {b}\\}}}}", "({a}, {b})", 0),
    ("set-tuple", "m", "\\boxed{{({a}, {b})}}", "\\{{{a}, {b}\\}}", 0),
    ("power-tower", "m", "\\boxed{{{g}^{{{g}^{{{g}^{{{g}}}}}}}}}", "{a}", 0),
    ("power-tower", "m", "\\boxed{{(10^{{{g}0000}})!}}", "{a}", 0),
    ("answer-tag", "m", "<answer>\\frac{{{p}}}{{{q}}}</answer>", "\\frac{{{p}}}{{{q}}}", 1),
    ("answer-tag", "m", "<answer>\\sqrt{{{a}}}</answer>", "\\sqrt{{{a}}}", 1),
    ("answer-tag", "m", "<answer>{g}\\pi</answer>", "{g}\\pi", 1),
    ("bold", "mn", "**Answer: {a}**", "{a}", 1),
    ("bold", "mn", "Answer: **{a}**", "{a}", 1),
    ("bold", "mn", "The answer is **{a}**.", "{a}", 1),
    ("bold", "mn", "**{a}**", "{a}", 1),
    ("units", "mn", "\\boxed{{{a}\\text{{ km/h}}}}", "{a}", 1),
    ("units", "mn", "\\boxed{{{a} \\text{{ m/s}}}}", "{a}", 1),
    ("units", "mn", "The answer is {a} km/h.", "{a}", 1),
    ("scale", "mn", "The answer is {a} thousand.", "{a}000", 1),
    ("scale", "mn", "\\boxed{{{a}.5 \\text{{ million}}}}", "{a}500000", 1),
    ("scale", "mn", "\\boxed{{{a}.5 \\text{{ million}}}}", "{a}.5", 0),
    ("connective", "mn", "The answer is double {a}, which is {f}.", "{f}", 1),
    ("connective", "mn", "The answer is 2 times {a}, so {f}.", "{f}", 1),
    ("space-thousands", "mn", "She has {a} 345 coins.", "{a}345", 1),
    ("bracketed-negative", "mn", "\\boxed{{(-{a})}}", "-{a}", 1),
    ("repeating-decimal", "m", "\\boxed{{0.\\overline{{{hh}}}}}", "\\frac{{{hh}}}{{99}}", 1),
    ("factorial", "m", "\\boxed{{{k}!}}", "{kf}", 1),
    ("named-order", "m", "\\boxed{{b={b}, a={a}}}", "a={a}, b={b}", 1),
    ("named-order", "m", "\\boxed{{y={b}, x={a}}}", "({a}, {b})", 1),
    ("decimal-comma", "m", "\\boxed{{{a}}}", "0,{a}", 0),
]


def issue_rows(seed: int = 7, per_class: int = 12) -> list[dict]:
    """The review's classes, each template over `per_class` random numbers."""
    import math

    rnd = random.Random(seed)
    out = []
    for _ in range(per_class):
        a = rnd.randint(11, 899)
        c = rnd.randint(1, a - 1)
        k = rnd.randint(3, 7)
        v = dict(a=a, b=a + 1, c=c, e=a - c, f=2 * a, g=rnd.randint(3, 9),
                 hh=rnd.choice([n for n in range(10, 99) if n % 3 and n % 11]),  # hh/99 in lowest terms
                 p=rnd.randint(1, 6), q=rnd.choice([7, 11, 13]), k=k, kf=math.factorial(k))
        for cls, rewards, template, gold, label in ISSUE_CLASSES:
            for reward in [("math" if r == "m" else "number") for r in rewards]:
                out.append({"class": f"review:{cls}", "reward": reward, "answer": template.format(**v),
                            "gold": gold.format(**v), "label": label, "source": "review classes"})
    return out


def build() -> list[dict]:
    rows = math_verify_rows() + benchmark_rows() + adversarial_rows() + places_rows() + issue_rows()
    for r in rows:
        r["part"] = part(r["gold"])
    return rows


# ---------------------------------------------------------------- scoring


def strict_verdicts(rows: list[dict]) -> list[float | None]:
    """The landed judge, through the rewards' public API (so the same script scores an older checkout); a row's
    `problem`, where it has one, goes with it (to a judge that reads questions)."""
    import inspect

    from nanogrpo import rewards

    asks = "problems" in inspect.signature(rewards.math_rewards).parameters
    out: list[float | None] = [None] * len(rows)
    math_idx = [i for i, r in enumerate(rows) if r["reward"] == "math"]
    extra = {"problems": [rows[i].get("problem") for i in math_idx]} if asks else {}
    for i, v in zip(math_idx, rewards.math_rewards([rows[i]["answer"] for i in math_idx],
                                                   [rows[i]["gold"] for i in math_idx], **extra)):
        out[i] = v
    for i, r in enumerate(rows):
        if r["reward"] == "number":
            out[i] = rewards.number_reward(r["answer"], r["gold"], *([r.get("problem")] if asks else []))
    return out


def lenient_verdicts(rows: list[dict]) -> list[float | None] | None:
    try:
        from nanogrpo.answer import judge_lenient
    except ImportError:  # an older checkout
        return None
    return judge_lenient([r["answer"] for r in rows], [r["gold"] for r in rows])


def qwen_verdicts(rows: list[dict], checkout: str, timeout_s: int = 10) -> list[float | None]:
    """Qwen2.5-Math's grader (evaluation/grader.py `math_equal` on evaluation/parser.py's `extract_answer` and
    `strip_string`), run from a local checkout in a child process, each pair under SIGALRM; its own latex2sympy,
    or math-verify's latex2sympy2_extended where that cannot load."""
    import subprocess

    child = r'''
import json, os, signal, sys, types
out = os.fdopen(os.dup(1), "w")  # the answers; whatever the grader prints goes to stderr
sys.stdout = sys.stderr
sys.path[:0] = [sys.argv[1] + "/evaluation", sys.argv[1] + "/evaluation/latex2sympy"]
try:
    import latex2sympy2  # the checkout's own (ANTLR 4.11 code; it warns under math-verify's 4.13 runtime)
except Exception:
    import latex2sympy2_extended
    sys.modules["latex2sympy2"] = types.SimpleNamespace(latex2sympy=latex2sympy2_extended.latex2sympy)
try:
    import word2number  # noqa: F401
except Exception:
    sys.modules["word2number"] = types.SimpleNamespace(w2n=types.SimpleNamespace(word_to_num=lambda s: int(s)))
from parser import extract_answer, strip_string
from grader import math_equal
def alarm(*_):
    raise TimeoutError
signal.signal(signal.SIGALRM, alarm)
for line in sys.stdin:
    text, gold = json.loads(line)
    try:
        signal.alarm(int(sys.argv[2]))
        pred = extract_answer(text, "math")
        ok = float(math_equal(pred, strip_string(gold)))
    except BaseException:
        ok = 0.0
    finally:
        signal.alarm(0)
    out.write(json.dumps(ok) + "\n")
    out.flush()
'''
    p = subprocess.run([sys.executable, "-W", "ignore", "-c", child, checkout, str(timeout_s)], text=True,
                       capture_output=True,
                       input="".join(json.dumps([r["answer"][-100_000:], r["gold"]]) + "\n" for r in rows))
    got = [json.loads(x) for x in p.stdout.splitlines()]
    if len(got) != len(rows):
        raise RuntimeError(f"the Qwen2.5-Math grader stopped after {len(got)} of {len(rows)} rows: {p.stderr[-2000:]}")
    return got


def table(rows, strict, lenient=None, qwen=None) -> str:
    """Markdown: per reward and class, n, right -> 0, wrong -> 1.0, -> None, and agreement with the labels."""
    groups = defaultdict(list)
    for i, r in enumerate(rows):
        groups[(r["reward"], r["class"])].append(i)
    head = "| reward | class | rows | right | right -> 0 | wrong -> 1.0 | -> None | strict agrees |"
    head += " MV alone: right -> 0 | MV alone: wrong -> 1.0 | math-verify alone agrees |" if lenient else ""
    head += " Qwen2.5-Math agrees |" if qwen else ""
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    summary = []

    def agree(v, idx):
        return f"{sum((v[i] == 1.0) == (rows[i]['label'] == 1) for i in idx) / len(idx):.1%}"

    def row(reward, cls, idx):
        right = [i for i in idx if rows[i]["label"] == 1]
        r0 = sum(strict[i] == 0.0 for i in right)
        w1 = sum(strict[i] == 1.0 for i in idx if rows[i]["label"] == 0)
        none = sum(strict[i] is None for i in idx)
        line = f"| {reward} | {cls} | {len(idx)} | {len(right)} | {r0} | {w1} | {none} | {agree(strict, idx)} |"
        if lenient:
            mv_r0 = sum(lenient[i] != 1.0 for i in right)
            mv_w1 = sum(lenient[i] == 1.0 for i in idx if rows[i]["label"] == 0)
            line += f" {mv_r0} | {mv_w1} | {agree(lenient, idx)} |"
        line += f" {agree(qwen, idx)} |" if qwen else ""
        return line

    for (reward, cls), idx in sorted(groups.items()):
        lines.append(row(reward, cls, idx))
    for reward in ("math", "number"):
        idx = [i for i, r in enumerate(rows) if r["reward"] == reward]
        if idx:
            lines.append(row(f"**{reward}**", "all", idx))
            wrong = [i for i in idx if rows[i]["label"] == 0]
            right = [i for i in idx if rows[i]["label"] == 1]
            rates = (f"{reward}: right -> 0 {sum(strict[i] == 0.0 for i in right) / max(1, len(right)):.2%}, "
                     f"wrong -> 1.0 or None {sum(strict[i] != 0.0 for i in wrong) / max(1, len(wrong)):.2%}")
            if lenient:
                rates += (f"; math-verify alone: right -> 0 {sum(lenient[i] != 1.0 for i in right) / max(1, len(right)):.2%}"
                          f", wrong -> 1.0 {sum(lenient[i] == 1.0 for i in wrong) / max(1, len(wrong)):.2%}")
            summary.append(rates)
    lines.append(row("**both**", "all", list(range(len(rows)))))
    return "\n".join(lines + [""] + summary)


def targets(rows, strict) -> list[str]:
    """What misses docs/judge.md's targets, as sentences (empty: all met)."""
    bad = []
    w1 = [r for r, v in zip(rows, strict) if r["label"] == 0 and v == 1.0]
    nones = [r for r, v in zip(rows, strict) if v is None]
    right = [(r, v) for r, v in zip(rows, strict) if r["label"] == 1]
    r0 = [r for r, v in right if v == 0.0]
    if w1:
        bad.append(f"{len(w1)} wrong answers scored 1.0, e.g. {w1[0]}")
    if nones:
        bad.append(f"{len(nones)} answers scored None, e.g. {nones[0]}")
    for reward in ("math", "number"):  # the targets: at most 1% per reward, right -> 0 and wrong -> 1.0 or None
        right_r = [v for r, v in right if r["reward"] == reward]
        miss = sum(v == 0.0 for v in right_r)
        if miss > 0.01 * len(right_r):
            bad.append(f"{reward}: {miss} of {len(right_r)} right answers scored 0 (over 1%)")
    named = [r for r in r0 if not r["class"].startswith(("math-verify", "place:", "math500:", "amc23:"))]
    if named:
        bad.append(f"{len(named)} right answers in a named class scored 0, e.g. {named[0]}")
    mv = [(r, v) for r, v in zip(rows, strict) if "mv_expected" in r and "why" not in r]
    agree = sum((v == 1.0) == (r["mv_expected"] == 1) for r, v in mv)
    if mv and agree < round(0.92 * len(mv)):  # where the judge does not disagree on purpose (a row's "why")
        bad.append(f"the judge agrees with {agree} of {len(mv)} Math-Verify test cases (fewer than 92%)")
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help=f"regenerate {CORPUS.relative_to(ROOT)}")
    ap.add_argument("--port-math-verify", metavar="DIR", help="re-port the cases of a Math-Verify checkout's tests/")
    ap.add_argument("--qwen", metavar="DIR", help="a local checkout of QwenLM/Qwen2.5-Math: also score its grader")
    ap.add_argument("--classes", default="", help="only classes matching this regex")
    ap.add_argument("--part", default="", help="only this part: tuning or held-out")
    ap.add_argument("--no-lenient", action="store_true", help="skip math-verify alone")
    ap.add_argument("--details", type=int, default=0, help="print up to N misses")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.port_math_verify:
        rows = port_math_verify(args.port_math_verify)
        MV_CASES.parent.mkdir(parents=True, exist_ok=True)
        MV_CASES.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        print(f"{len(rows)} cases -> {MV_CASES.relative_to(ROOT)}", file=sys.stderr)
    if args.write:
        rows = build()
        CORPUS.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        print(f"{len(rows)} rows -> {CORPUS.relative_to(ROOT)}", file=sys.stderr)
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines()]
    rows = [r for r in rows if re.search(args.classes, r["class"]) and args.part in ("", r.get("part"))]
    t0 = time.monotonic()
    strict = strict_verdicts(rows)
    took = time.monotonic() - t0
    lenient = None if args.no_lenient else lenient_verdicts(rows)
    qwen = qwen_verdicts(rows, args.qwen) if args.qwen else None
    for name in ("tuning", "held-out"):
        idx = [i for i, r in enumerate(rows) if r.get("part", part(r["gold"])) == name]
        pick = lambda v: None if v is None else [v[i] for i in idx]  # noqa: E731
        print(f"\n## {name} part ({len(idx)} rows)\n")
        print(table([rows[i] for i in idx], pick(strict), pick(lenient), pick(qwen)))
        for b in targets([rows[i] for i in idx], pick(strict)):
            print(f"MISSED ({name}): " + b[:600])
    mv = [i for i, r in enumerate(rows) if "mv_expected" in r]
    if mv:
        print(f"\nMath-Verify's own test cases: the strict judge agrees with {sum((strict[i] == 1.0) == (rows[i]['mv_expected'] == 1) for i in mv)} of {len(mv)}"
              + (f", math-verify alone (as configured here) with {sum((lenient[i] == 1.0) == (rows[i]['mv_expected'] == 1) for i in mv)}" if lenient else ""))
    print(f"strict judge: {len(rows)} rows in {took:.1f}s")
    misses = [(r, v) for r, v in zip(rows, strict) if (v == 1.0) != (r["label"] == 1)]
    for r, v in misses[: args.details]:
        print(f"  {v} label={r['label']} [{r['class']}] gold={r['gold']!r} answer={r['answer'][:160]!r}")
    bad = targets(rows, strict)
    for b in bad:
        print("MISSED: " + b[:600])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
