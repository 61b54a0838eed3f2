"""The built-in tasks "word_problems" and "word_problems_large": GSM8K-style one- and two-step word problems,
generated.

"word_problems" shows GRPO on a real pretrained model on CPU with nothing to download; "word_problems_large" (larger
numbers) is a chat model's tool task. Each template carries its solution as steps (TEMPLATES), from which
scripts/models/tool_rows.py writes worked answers; an instance is held out by a fixed hash. Why each, and the
held-out split: docs/data.md, "Built-in tasks".
"""

from __future__ import annotations

import random

NAMES = [("Ava", "she"), ("Ben", "he"), ("Chloe", "she"), ("Diego", "he"), ("Emma", "she"), ("Farid", "he"),
         ("Grace", "she"), ("Hiro", "he"), ("Isla", "she"), ("Jamal", "he"), ("Keiko", "she"), ("Liam", "he"),
         ("Maya", "she"), ("Noah", "he"), ("Olga", "she"), ("Pedro", "he")]
ITEMS = ["apples", "marbles", "stickers", "cookies", "pencils", "cards", "shells", "balloons", "stamps", "beads"]
HELDOUT_PERCENT = 10

# Per template: its text ({n} {p} {P} {m} {item} with the operands {a} {b} {c}), its solution as steps
# (x, op, y) where x, y are operands or "r" (the previous step's result), and its operand samplers, small and
# large. Division is exact by construction.
TEMPLATES = [
    ("{n} has {a} {item}. {P} gets {b} more {item} from {m}. How many {item} does {n} have now?",
     [("a", "+", "b")],
     lambda r: (r.randint(2, 40), r.randint(2, 30), 0),
     lambda r: (r.randint(100, 999), r.randint(100, 999), 0)),
    ("{n} had {a} {item}. {P} gave {b} of them to {m}. How many {item} does {n} have left?",
     [("a", "-", "b")],
     lambda r: (lambda b: (b + r.randint(1, 30), b, 0))(r.randint(2, 30)),
     lambda r: (lambda b: (b + r.randint(100, 999), b, 0))(r.randint(100, 500))),
    ("{n} buys {a} bags of {item}. Each bag holds {b} {item}. How many {item} did {n} buy?",
     [("a", "*", "b")],
     lambda r: (r.randint(2, 9), r.randint(2, 9), 0),
     lambda r: (r.randint(12, 99), r.randint(12, 99), 0)),
    ("{n} has {a} {item} and puts them into {b} equal piles. How many {item} are in each pile?",
     [("a", "/", "b")],
     lambda r: (lambda q, b: (q * b, b, 0))(r.randint(2, 9), r.randint(2, 9)),
     lambda r: (lambda q, b: (q * b, b, 0))(r.randint(12, 99), r.randint(3, 19))),
    ("{n} buys {a} boxes of {item} with {b} {item} in each box. {P} gives {c} of them to {m}. "
     "How many {item} does {n} have left?",
     [("a", "*", "b"), ("r", "-", "c")],
     lambda r: (lambda a, b: (a, b, r.randint(1, a * b - 1)))(r.randint(2, 5), r.randint(2, 6)),
     lambda r: (lambda a, b: (a, b, r.randint(1, a * b - 1)))(r.randint(12, 60), r.randint(12, 48))),
    ("{n} earns {a} dollars an hour and works {b} hours on Saturday. Then {p} spends {c} dollars on lunch. "
     "How many dollars of Saturday's pay does {n} have left?",
     [("a", "*", "b"), ("r", "-", "c")],
     lambda r: (lambda a, b: (a, b, r.randint(1, min(a * b - 1, 20))))(r.randint(5, 12), r.randint(2, 6)),
     lambda r: (lambda a, b: (a, b, r.randint(1, min(a * b - 1, 200))))(r.randint(12, 45), r.randint(3, 12))),
    ("{n} reads {a} pages on Monday, {b} pages on Tuesday and {c} pages on Wednesday. "
     "How many pages does {n} read in the three days?",
     [("a", "+", "b"), ("r", "+", "c")],
     lambda r: (r.randint(2, 20), r.randint(2, 20), r.randint(2, 20)),
     lambda r: (r.randint(20, 300), r.randint(20, 300), r.randint(20, 300))),
    ("{m} has {a} {item}. {n} has {b} times as many {item} as {m}. How many {item} do they have together?",
     [("a", "*", "b"), ("a", "+", "r")],
     lambda r: (r.randint(2, 10), r.randint(2, 4), 0),
     lambda r: (r.randint(20, 200), r.randint(3, 9), 0)),
]
OPS = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y, "/": lambda x, y: x // y}


def solve(t: int, a: int, b: int, c: int) -> list[tuple[int, str, int, int]]:
    """The worked solution of an instance: (x, op, y, result) per step; the last result is the answer."""
    values, out = {"a": a, "b": b, "c": c}, []
    for x, op, y in TEMPLATES[t][1]:
        xv, yv = values[x], values[y]
        values["r"] = OPS[op](xv, yv)
        out.append((xv, op, yv, values["r"]))
    return out


def _is_heldout(t: int, a: int, b: int, c: int) -> bool:
    # A fixed integer hash (not Python's salted hash()), the same in every process and for every seed.
    h = ((((t * 1_000_003 + a) * 1_000_033 + b) * 1_000_037 + c) * 2_654_435_761) % (1 << 32)
    return (h >> 8) % 100 < HELDOUT_PERCENT


def _row(t: int, a: int, b: int, c: int, rng: random.Random) -> dict:
    (n, p), (m, _) = rng.sample(NAMES, 2)
    problem = TEMPLATES[t][0].format(n=n, p=p, P=p.capitalize(), m=m, item=rng.choice(ITEMS), a=a, b=b, c=c)
    return {"problem": problem, "answer": str(solve(t, a, b, c)[-1][3])}


def _instances(split: str, n: int, seed: int, large: bool, name: str):
    """n (instance, row) pairs, deterministic in (split, n, seed, large). Train: drawn with replacement from
    instances that are not held out. Test: distinct held-out instances."""
    rng = random.Random(f"{name}-{split}-{seed}")
    out, seen, misses = [], set(), 0
    while len(out) < n:
        if misses > 100_000:  # the held-out instances are finite: say so instead of spinning
            raise ValueError(f"{name}: only {len(out)} distinct test rows, asked for {n}")
        t = rng.randrange(len(TEMPLATES))
        inst = (t, *TEMPLATES[t][3 if large else 2](rng))
        misses += 1
        if _is_heldout(*inst) != (split == "test") or (split == "test" and inst in seen):
            continue
        seen.add(inst)
        misses = 0
        out.append((inst, {**_row(*inst, rng), "id": f"{'wpl' if large else 'wp'}-{split}-{len(out)}"}))
    return out


def word_problem_rows(split: str, n: int, seed: int = 0) -> list[dict]:
    """The "word_problems" rows (small numbers): n rows, deterministic in (split, n, seed)."""
    return [row for _, row in _instances(split, n, seed, False, "word_problems")]


def large_word_problem_rows(split: str, n: int, seed: int = 0) -> list[dict]:
    """The "word_problems_large" rows: n rows, deterministic in (split, n, seed)."""
    return [row for _, row in _instances(split, n, seed, True, "word_problems_large")]

