"""The built-in task "arithmetic": 3-digit addition with a held-out split ("347+589=" -> "936").

It needs no files: it is what the tiny CPU model is warm-started on (scripts/models/tiny.py) and what the
default GRPO run trains on.
"""

from __future__ import annotations

import functools
import random


ARITHMETIC_LO, ARITHMETIC_HI = 100, 999  # both operands have exactly 3 digits: prompts all 8 tokens long
HELDOUT_PER_MILLE = 50  # 5% of the 810,000 (a, b) pairs are held out and never generated for train


def _is_heldout(a: int, b: int) -> bool:
    # A fixed integer hash (not Python's hash(), not the seed) so the split is the same in every
    # process, every run and every seed: train rows drawn with any seed never hit a held-out pair.
    h = ((a * 1_000_003 + b) * 2_654_435_761) % (1 << 32)
    return (h >> 8) % 1000 < HELDOUT_PER_MILLE


def arithmetic_row(a: int, b: int) -> dict:
    return {"problem": f"{a}+{b}=", "answer": str(a + b)}


@functools.lru_cache(maxsize=1)
def heldout_pairs() -> tuple[tuple[int, int], ...]:
    """All held-out (a, b) pairs, in a fixed order (about 40,500 of them)."""
    r = range(ARITHMETIC_LO, ARITHMETIC_HI + 1)
    return tuple((a, b) for a in r for b in r if _is_heldout(a, b))


def arithmetic_rows(split: str, n: int, seed: int = 0) -> list[dict]:
    """n rows of the arithmetic task, deterministic in (split, n, seed). split: "train" | "test".

    Train rows are drawn with replacement from the pairs that are not held out; test rows are
    distinct held-out pairs in a seeded order."""
    rng = random.Random(f"arithmetic-{split}-{seed}")
    if split == "test":
        pairs = list(heldout_pairs())
        if n > len(pairs):
            raise ValueError(f"arithmetic: only {len(pairs)} distinct test rows, asked for {n}")
        rng.shuffle(pairs)
        return [arithmetic_row(a, b) for a, b in pairs[:n]]
    rows = []
    while len(rows) < n:
        a, b = rng.randint(ARITHMETIC_LO, ARITHMETIC_HI), rng.randint(ARITHMETIC_LO, ARITHMETIC_HI)
        if not _is_heldout(a, b):
            rows.append(arithmetic_row(a, b))
    return rows
