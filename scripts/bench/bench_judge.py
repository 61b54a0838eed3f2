"""Time the answer judge on 1 MB (and short) hostile texts and print a table: one judge call per text, the math reward
(through its warm worker pool) and the number reward, the slowest of --repeat calls each. Target
(docs/judge.md): every call under 50 ms. What the policy writes is untrusted: each text is built to defeat a
step (the box scan, the statement search, the last number, the rewrites), at 1 MB.

    python scripts/bench/bench_judge.py [--repeat 3] [--size 1000000]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def hostile(size: int) -> dict[str, str]:
    """name -> a text of about `size` characters that stresses one step of the judge."""
    def fill(unit: str, tail: str = "") -> str:
        return unit * (size // len(unit)) + tail

    return {
        "unclosed boxes": fill("\\boxed{"),
        "nested boxes": "\\boxed{" * (size // 14) + "5" + "}" * (size // 14),
        "many closed boxes": fill("\\boxed{7} "),
        "box then statements": "\\boxed{5}" + fill(" final answer is 5."),
        "statement near-misses": fill("the answers was "),
        "dollars": fill("$"),
        "brackets and pm": "(" * (size // 3) + "\\pm" + ")" * (size // 3),
        "numbers": fill("1 "),
        "thousands spellings": fill("1\\,000"),
        "digits then prose": "9" * (size // 2) + "x" * (size // 2),
        "one huge number": "\\boxed{" + "9" * (size - 8) + "}",
        "huge decimal in a box": "\\boxed{0." + "3" * (size - 10) + "}",
        "long think then answer": "<think>" + fill("let me think. ") + "</think> \\boxed{5}",
        "box inside 1 MB of prose": fill("word ", " so \\boxed{\\frac{1}{2}}"),
        "answer 1 MB long": "\\boxed{" + fill("x+") + "1}",
        "relations": fill("= \\approx \\to "),
        "boxed sum of names": "\\boxed{" + fill("mx+", "x}"),  # backtracked 2^terms before the rules were bounded
        "sum of names, no box": fill("ab+", "ab"),
        "answer tags": fill("<answer>"),
        "negated statements": fill("the answer is not "),
        "statement then corrections": "The answer is 5." + fill(" wait"),
        "arithmetic chain": fill("1 + 1 = ", "2"),
        "power tower (short)": "\\boxed{7^{7^{7^{7}}}}",
        "factorial (short)": "\\boxed{100000!}",
        "units and scale words": fill("5 km/h per thousand "),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from nanogrpo import rewards

    rewards.math_reward("\\boxed{\\sqrt{4}}", "2")  # start the worker pool (not timed: startup, not judging)
    rows, worst = [], 0.0
    for name, text in hostile(args.size).items():
        times = {}
        for reward, call in (("math", lambda: rewards.math_reward(text, "\\frac{1}{2}")),
                             ("number", lambda: rewards.number_reward(text, "5"))):
            took, got = [], None
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                got = call()
                took.append(time.perf_counter() - t0)
            times[reward] = (max(took), got)
            worst = max(worst, max(took))
        rows.append((name, len(text), times))
    print(f"| hostile text | chars | math reward ms | verdict | number reward ms | verdict |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, n, t in rows:
        print(f"| {name} | {n:,} | {1000 * t['math'][0]:.1f} | {t['math'][1]} | {1000 * t['number'][0]:.1f} | "
              f"{t['number'][1]} |")
    print(f"\nslowest call: {1000 * worst:.1f} ms (target: under 50 ms); the slowest of {args.repeat} calls each")
    return 0 if worst < 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
