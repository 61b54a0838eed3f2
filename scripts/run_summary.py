"""Summarise a finished (or resumed) run from its metrics.jsonl: held-out evals, early vs late steps, time.

    python scripts/run_summary.py runs/smollm2-word-problems [--window 10]

Prints a markdown table: every held-out / benchmark eval logged, then the mean of each step metric
over the first and the last `--window` steps, then the seconds spent per phase over all steps.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TRENDS = ("accuracy", "reward_mean", "zero_std_frac", "completion_len_mean", "truncated_frac", "entropy")
PHASES = ("time_generate", "time_reward", "time_train", "time_sync", "time_step")


def mean(xs: list) -> float:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else float("nan")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--window", type=int, default=10, help="steps averaged at each end")
    a = ap.parse_args(argv)
    path = Path(a.run_dir) / "metrics.jsonl"
    if not path.is_file():
        sys.exit(f"error: {path} not found (is {a.run_dir!r} a run's out_dir?)")
    if a.window < 1:
        sys.exit("error: --window must be >= 1")
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    steps = [m for m in lines if "time_step" in m]
    if not steps:
        sys.exit(f"error: {path} holds no training step yet")

    print("| after step | eval | value |\n| --- | --- | --- |")
    for m in lines:
        for k, v in m.items():
            if k == "heldout_accuracy" or k.startswith("eval/"):
                print(f"| {m['step']} | {k} | {v:.3f} |")  # step 0: before training

    w = min(a.window, len(steps))
    first, last = steps[:w], steps[-w:]
    print(f"\n| metric | steps {first[0]['step']}-{first[-1]['step']} (mean) | steps {last[0]['step']}-{last[-1]['step']} "
          f"(mean) | all {len(steps)} steps (mean) |\n| --- | --- | --- | --- |")
    for k in TRENDS:
        print(f"| {k} | {mean([m.get(k) for m in first]):.4g} | {mean([m.get(k) for m in last]):.4g} | "
              f"{mean([m.get(k) for m in steps]):.4g} |")

    print("\n| phase | minutes over all steps |\n| --- | --- |")
    for k in PHASES:
        print(f"| {k.removeprefix('time_')} | {sum(m.get(k) or 0.0 for m in steps) / 60:.1f} |")


if __name__ == "__main__":
    main()
