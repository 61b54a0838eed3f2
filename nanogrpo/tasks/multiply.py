"""The built-in task "multiply": 5-digit multiplication, where a tool is the way to the answer.

"48213*90127=" -> "4345293451". The tiny CPU model cannot multiply 5-digit numbers in its head, but
it can write the product as code and copy what the sandbox prints (the transcript: docs/tools.md).

Scored exactly on the text after the last tool output; `warm_start_rows` (the tool model's warm start) and the
held-out split (5% of pairs, by a fixed hash): docs/data.md, "Built-in tasks".
"""

from __future__ import annotations

import random

from nanogrpo.tasks.arithmetic import _is_heldout  # the same fixed hash of the pair, the same 5% held out

LO, HI = 10_000, 99_999


def row(a: int, b: int) -> dict:
    return {"problem": f"{a}*{b}=", "answer": str(a * b)}


def operands(r: dict) -> tuple[int, int]:
    """(a, b) of a row made by `row`: "48213*90127=" -> (48213, 90127)."""
    a, b = r["problem"][:-1].split("*")
    return int(a), int(b)


def multiply_rows(split: str, n: int, seed: int = 0) -> list[dict]:
    """n rows, deterministic in (split, n, seed); test rows are distinct held-out pairs."""
    rng = random.Random(f"multiply-{split}-{seed}" if split == "train" else "multiply-test")
    rows, seen = [], set()
    while len(rows) < n:
        a, b = rng.randint(LO, HI), rng.randint(LO, HI)
        if _is_heldout(a, b) != (split == "test") or (split == "test" and (a, b) in seen):
            continue
        seen.add((a, b))
        rows.append(row(a, b))
    return rows


def tool_transcript(a: int, b: int, tool_cfg) -> list[tuple[str, bool]]:
    """The completion of a tool-using answer as (text, sampled by the model) segments, built with the
    same tags and output wrapping that nanogrpo/tools.py uses when it runs the code."""
    from nanogrpo.tools import output_block

    code = f"{tool_cfg.open}\nprint({a}*{b})\n{tool_cfg.close}\n"
    return [(code, True), (output_block(tool_cfg, f"{a * b}\n"), False), (str(a * b), True)]


def warm_start_rows(n: int, seed: int, tool_frac: float, tool_cfg) -> list[dict]:
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
            segs = tool_transcript(*operands(r), tool_cfg)
        else:
            segs = [(r["answer"], True)]
        out.append({"problem": r["problem"], "segments": segs})
    return out
