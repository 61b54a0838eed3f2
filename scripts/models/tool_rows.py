"""The supervised rows of the tool models' warm starts: transcripts in the rollout format (`segments`: the code
written, the output read, the answer written), built with the same tags and output wrapping that nanogrpo/tools.py
uses when it runs the code.

`multiply_warm_start_rows`: the tiny tool model's (build_tiny_model.py --tools, task "multiply");
`word_problems_warm_start_rows`: SmolLM2's (smollm2_tools_warm_start.py, task "word_problems_large").
Why each looks as it does: docs/data.md, "Built-in tasks", and docs/tools.md.
"""

from __future__ import annotations

import random

from nanogrpo.tasks import word_problems as W
from nanogrpo.tasks.multiply import multiply_rows
from nanogrpo.tools import output_block

FINAL = "Therefore, the final answer is: $\\boxed{{{}}}$."  # the last line eval.py's math prompt asks for


def operands(r: dict) -> tuple[int, int]:
    """(a, b) of a multiply row: "48213*90127=" -> (48213, 90127)."""
    a, b = r["problem"][:-1].split("*")
    return int(a), int(b)


def multiply_transcript(a: int, b: int, tool_cfg) -> list[tuple[str, bool]]:
    """The completion of a tool-using answer to a*b as (text, sampled by the model) segments."""
    code = f"{tool_cfg.open}\nprint({a}*{b})\n{tool_cfg.close}\n"
    return [(code, True), (output_block(tool_cfg, f"{a * b}\n"), False), (str(a * b), True)]


def multiply_warm_start_rows(n: int, seed: int, tool_frac: float, tool_cfg) -> list[dict]:
    """Supervised rows: {"problem", "segments": [(text, scored)]}; `tool_frac` of them use the tool.

    The tool rows are half 9-digit and half 10-digit products (drawn uniformly, 85% have 10 digits). A warm
    start on uniform rows learned to copy the tool's output by position, right only for 10 digits: no 9-digit
    product was ever right, so GRPO had nothing to learn from there and every run ended at 85%
    (docs/results.md "With tools"; scripts/bench/probe_tool_copy.py measures the copy)."""
    rng = random.Random(f"multiply-warm-{seed}")
    rows = multiply_rows("train", n, seed=10_000 + seed)
    by_digits = {d: [r for r in rows if len(r["answer"]) == d] for d in (9, 10)}
    out = []
    for r in rows:
        if rng.random() < tool_frac:
            r = rng.choice(by_digits[rng.choice([d for d in (9, 10) if by_digits[d]])])
            segs = multiply_transcript(*operands(r), tool_cfg)
        else:
            segs = [(r["answer"], True)]
        out.append({"problem": r["problem"], "segments": segs})
    return out


def text_solution(t: int, a: int, b: int, c: int) -> str:
    """A worked answer to a word problem in text, one line per step, then the final line."""
    steps = W.solve(t, a, b, c)
    return "\n".join(f"{x} {op} {y} = {r}" for x, op, y, r in steps) + "\n" + FINAL.format(steps[-1][3])


def expression(t: int, a: int, b: int, c: int) -> str:
    """An instance's solution as one Python expression: "12 * 34 - 5" (division is exact, so // is the quotient)."""
    values, expr = {"a": str(a), "b": str(b), "c": str(c)}, ""
    for x, op, y in W.TEMPLATES[t][1]:  # no template needs brackets (tests/test_word_problems.py evaluates each)
        expr = f"{expr if x == 'r' else values[x]} {'//' if op == '/' else op} {expr if y == 'r' else values[y]}"
    return expr


def word_problems_transcript(t: int, a: int, b: int, c: int, tool_cfg) -> list[tuple[str, bool]]:
    """A tool-using answer to a word problem as (text, written by the model) segments: the expression as code, its
    output (context only), the final line."""
    answer = W.solve(t, a, b, c)[-1][3]
    code = f"{tool_cfg.open}\nprint({expression(t, a, b, c)})\n{tool_cfg.close}\n"
    return [(code, True), (output_block(tool_cfg, f"{answer}\n"), False), (FINAL.format(answer), True)]


def word_problems_warm_start_rows(n: int, seed: int, tool_frac: float, tool_cfg) -> list[dict]:
    """Supervised rows of "word_problems_large" train instances: {"problem", "answer", "segments"}; `tool_frac`
    of them answer with the tool, the rest in text. Never a held-out instance, and not the rows of a GRPO run
    with a small seed (the instances are drawn with seed 1,000,000 + seed)."""
    rng = random.Random(f"word_problems_large-warm-{seed}")
    out = []
    for inst, row in W._instances("train", n, 1_000_000 + seed, True, "word_problems_large"):
        if rng.random() < tool_frac:
            segs = word_problems_transcript(*inst, tool_cfg)
        else:
            segs = [(text_solution(*inst), True)]
        out.append({"problem": row["problem"], "answer": row["answer"], "segments": segs})
    return out
