"""The built-in task "multiply": 5-digit multiplication, where a tool is the way to the answer.

"48213*90127=" -> "4345293451". The tiny CPU model cannot multiply 5-digit numbers in its head, but
it can write the product as code and copy what the sandbox prints (the transcript: docs/tools.md).

Scored exactly on the text after the last tool output; the held-out split (5% of pairs, by a fixed hash): docs/data.md,
"Built-in tasks". The tool model's warm-start rows: scripts/models/tool_rows.py.
"""

from __future__ import annotations

import random

from nanogrpo.tasks.arithmetic import _is_heldout  # the same fixed hash of the pair, the same 5% held out

LO, HI = 10_000, 99_999


def multiply_rows(split: str, n: int, seed: int = 0) -> list[dict]:
    """n rows, deterministic in (split, n, seed); test rows are distinct held-out pairs."""
    rng = random.Random(f"multiply-{split}-{seed}" if split == "train" else "multiply-test")
    rows, seen = [], set()
    while len(rows) < n:
        a, b = rng.randint(LO, HI), rng.randint(LO, HI)
        if _is_heldout(a, b) != (split == "test") or (split == "test" and (a, b) in seen):
            continue
        seen.add((a, b))
        rows.append({"problem": f"{a}*{b}=", "answer": str(a * b)})
    return rows

