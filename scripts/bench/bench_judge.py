"""Time the answer judge on 1 MB and short hostile texts and on the labelled corpus, and print the max and p99 ms per
call. Hostile texts: one judge call per text, the math reward (through its warm worker pool) and the number reward,
the slowest of --repeat calls each. The corpus (data/judge/corpus.jsonl): the rules alone (`_plan`, what runs in the
caller) on every row, and the whole math reward on --sample rows. Target (docs/judge.md): every call under 50 ms,
with the verdict unchanged. What the policy writes is untrusted: each hostile text is built to defeat a step (the
box scan, the statement search, the last number, the rewrites, the chain and size checks).

    python scripts/bench/bench_judge.py [--repeat 3] [--size 1000000] [--sample 300]
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
        "factorial of a power (short)": "\\boxed{(10^{100000})!}",
        "factorial in an exponent (short)": "\\boxed{x^{(10^{500})!}}",
        "tower in brackets (short)": "\\boxed{2^{(3^{90})}}",
        "sum of 40 names (short)": "\\boxed{" + "+".join(["ab"] * 40) + "}",
        "names, no box (short)": "+".join(["ab"] * 60),
        "chain of products (short)": "The answer is " + " x ".join(["9"] * 60) + " = 1.",
        "units and scale words": fill("5 km/h per thousand "),
        "answers before 'is the answer'": fill("1 is the answer ", "2 is the final answer."),
        "statements in boxes": fill("\\boxed{\\text{The answer is } 5} "),
        "end-of-turn markers": fill("5</s>"),
        "chain of values (short)": "\\boxed{" + " = ".join(f"\\sqrt{{{k}}}" for k in range(2, 100)) + "}",
        "unfinished working": fill("7 and ", "the"),
        "answers in two number formats": fill("respuesta 1.000,5 "),
        "few-shot examples": fill("The answer is 5.\nQ: next?\nA: "),
        "listed options": fill("(A) 1 (B) 2 ", "The answer is (B)."),
        "table answer rows": fill("| Answer | | 5 |\n"),
        "marks and bullets": fill("- \u2705 5 \u2713\n\u2192 "),
        "asides": fill("5 (the other root 9) "),
        "either-or sentences": fill("either 1 or 2 "),
        "inequalities": "\\boxed{" + fill("1 < x \\le ", "2}"),
        "code fences": fill("```python\nx = 1  # 5\n"),
        "questions then working": fill("So maybe the answer is 4? "),
        "repetition loop": fill("The answer is 5. "),
        "claims": fill("We claim the answer is 5. ", "as claimed"),
        "answer tags of many names": fill("<final>1</final><result>2</result><ans>"),
        "quoted answer fields": fill("{'answer': '5', "),
        "box spam": fill("\\boxed{4}\n"),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--sample", type=int, default=300, help="corpus rows timed through the whole math reward")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from nanogrpo import rewards

    rewards.math_reward("\\boxed{\\sqrt{4}}", "2")  # start the worker pool (not timed: startup, not judging)
    rows, worst, every = [], 0.0, []
    for name, text in hostile(args.size).items():
        times = {}
        for reward, call in (("math", lambda: rewards.math_reward(text, "\\frac{1}{2}")),
                             ("number", lambda: rewards.number_reward(text, "5"))):
            took, got = [], None
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                got = call()
                took.append(time.perf_counter() - t0)
            every += took
            times[reward] = (max(took), got)
            worst = max(worst, max(took))
        rows.append((name, len(text), times))
    print(f"| hostile text | chars | math reward ms | verdict | number reward ms | verdict |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, n, t in rows:
        print(f"| {name} | {n:,} | {1000 * t['math'][0]:.1f} | {t['math'][1]} | {1000 * t['number'][0]:.1f} | "
              f"{t['number'][1]} |")
    print(f"\nhostile texts: slowest call {1000 * worst:.1f} ms, p99 {p99(every):.1f} ms (target: under 50 ms); the "
          f"slowest of {args.repeat} calls each")
    worst = max(worst, corpus(args.sample))
    return 0 if worst < 0.05 else 1


def p99(times: list[float]) -> float:
    return 1000 * sorted(times)[min(len(times) - 1, int(0.99 * len(times)))]


def corpus(sample: int) -> float:
    """The rules (`_plan`) on every corpus row, and the whole math reward on `sample` rows: max and p99 ms per call,
    and how many verdicts differ from the label (the corpus' targets: docs/judge.md). The slowest rules call."""
    import json
    import random

    from nanogrpo import answer as A, rewards

    rows = [json.loads(x) for x in (Path(__file__).resolve().parents[2] / "data/judge/corpus.jsonl").open()]
    times, off = [], 0
    for r in rows:
        t0 = time.perf_counter()
        try:
            verdict, todo = A._plan(r["answer"], r["gold"], r["reward"] == "number")
        except Exception:  # a gold the rules cannot read: None, as the rewards say
            verdict, todo = None, []
        times.append(time.perf_counter() - t0)
        off += not todo and verdict != float(r["label"])
    print(f"corpus, rules alone ({len(rows)} rows): max {1000 * max(times):.1f} ms, p99 {p99(times):.1f} ms; "
          f"{off} rules verdicts differ from the label")
    whole = []
    for r in random.Random(0).sample([r for r in rows if r["reward"] == "math"], sample):
        t0 = time.perf_counter()
        rewards.math_reward(r["answer"], r["gold"])
        whole.append(time.perf_counter() - t0)
    if whole:
        print(f"corpus, whole math reward ({sample} rows, math-verify in the pool): max {1000 * max(whole):.1f} ms, "
              f"p99 {p99(whole):.1f} ms")
    return max(times)


if __name__ == "__main__":
    sys.exit(main())
