"""The built-in task "word_problems": GSM8K-style one- and two-step word problems, generated.

It exists to show GRPO working on a real pretrained model on CPU with nothing to download: a
135M chat model (SmolLM2-135M-Instruct) solves a fraction of these, GSM8K itself is nearly out of
its reach (1-3%). Problems use small whole numbers and have a whole-number answer.

Held-out split: an instance (template, numbers) is held out by a fixed integer hash, so no train
row with any seed ever has the numbers of a held-out row under the same template. There are about
1,000 held-out instances; templates with few number choices run out first, so a large test set
leans towards the templates with many.
"""

from __future__ import annotations

import random

NAMES = [("Ava", "she"), ("Ben", "he"), ("Chloe", "she"), ("Diego", "he"), ("Emma", "she"), ("Farid", "he"),
         ("Grace", "she"), ("Hiro", "he"), ("Isla", "she"), ("Jamal", "he"), ("Keiko", "she"), ("Liam", "he"),
         ("Maya", "she"), ("Noah", "he"), ("Olga", "she"), ("Pedro", "he")]
ITEMS = ["apples", "marbles", "stickers", "cookies", "pencils", "cards", "shells", "balloons", "stamps", "beads"]
HELDOUT_PERCENT = 10


def _templates():
    """(text with {n} {p} {m} {item} {a} {b} {c}, operand sampler, answer) per template."""
    return [
        ("{n} has {a} {item}. {P} gets {b} more {item} from {m}. How many {item} does {n} have now?",
         lambda r: (r.randint(2, 40), r.randint(2, 30), 0), lambda a, b, c: a + b),
        ("{n} had {a} {item}. {P} gave {b} of them to {m}. How many {item} does {n} have left?",
         lambda r: (lambda b: (b + r.randint(1, 30), b, 0))(r.randint(2, 30)), lambda a, b, c: a - b),
        ("{n} buys {a} bags of {item}. Each bag holds {b} {item}. How many {item} did {n} buy?",
         lambda r: (r.randint(2, 9), r.randint(2, 9), 0), lambda a, b, c: a * b),
        ("{n} has {a} {item} and puts them into {b} equal piles. How many {item} are in each pile?",
         lambda r: (lambda q, b: (q * b, b, 0))(r.randint(2, 9), r.randint(2, 9)), lambda a, b, c: a // b),
        ("{n} buys {a} boxes of {item} with {b} {item} in each box. {P} gives {c} of them to {m}. "
         "How many {item} does {n} have left?",
         lambda r: (lambda a, b: (a, b, r.randint(1, a * b - 1)))(r.randint(2, 5), r.randint(2, 6)),
         lambda a, b, c: a * b - c),
        ("{n} earns {a} dollars an hour and works {b} hours on Saturday. Then {p} spends {c} dollars on lunch. "
         "How many dollars of Saturday's pay does {n} have left?",
         lambda r: (lambda a, b: (a, b, r.randint(1, min(a * b - 1, 20))))(r.randint(5, 12), r.randint(2, 6)),
         lambda a, b, c: a * b - c),
        ("{n} reads {a} pages on Monday, {b} pages on Tuesday and {c} pages on Wednesday. "
         "How many pages does {n} read in the three days?",
         lambda r: (r.randint(2, 20), r.randint(2, 20), r.randint(2, 20)), lambda a, b, c: a + b + c),
        ("{m} has {a} {item}. {n} has {b} times as many {item} as {m}. How many {item} do they have together?",
         lambda r: (r.randint(2, 10), r.randint(2, 4), 0), lambda a, b, c: a + a * b),
    ]


TEMPLATES = _templates()


def _is_heldout(t: int, a: int, b: int, c: int) -> bool:
    # A fixed integer hash (not Python's salted hash()), the same in every process and for every seed.
    h = ((((t * 1_000_003 + a) * 1_000_033 + b) * 1_000_037 + c) * 2_654_435_761) % (1 << 32)
    return (h >> 8) % 100 < HELDOUT_PERCENT


def _instance(rng: random.Random) -> tuple[int, int, int, int]:
    t = rng.randrange(len(TEMPLATES))
    return (t, *TEMPLATES[t][1](rng))


def _row(t: int, a: int, b: int, c: int, rng: random.Random) -> dict:
    text, _, answer = TEMPLATES[t]
    (n, p), (m, _) = rng.sample(NAMES, 2)
    problem = text.format(n=n, p=p, P=p.capitalize(), m=m, item=rng.choice(ITEMS), a=a, b=b, c=c)
    return {"problem": problem, "answer": str(answer(a, b, c))}


def word_problem_rows(split: str, n: int, seed: int = 0) -> list[dict]:
    """n rows, deterministic in (split, n, seed). Train: drawn with replacement from instances that are
    not held out. Test: distinct held-out instances."""
    if split not in ("train", "test"):
        raise ValueError(f"word_problems split must be 'train' or 'test', got {split!r}")
    if n <= 0:
        raise ValueError(f"word_problems: n must be positive, got {n}")
    rng = random.Random(f"word_problems-{split}-{seed}")
    rows, seen, misses = [], set(), 0
    while len(rows) < n:
        if misses > 100_000:  # the held-out instances are finite (about 1,000): say so instead of spinning
            raise ValueError(f"word_problems: only {len(rows)} distinct test rows, asked for {n}")
        inst = _instance(rng)
        misses += 1
        if _is_heldout(*inst) != (split == "test") or (split == "test" and inst in seen):
            continue
        seen.add(inst)
        misses = 0
        rows.append({**_row(*inst, rng), "id": f"wp-{split}-{len(rows)}"})
    return rows
