"""Summarise a finished (or resumed) run from its metrics.jsonl: held-out evals, early vs late steps, time.

    python scripts/run_summary.py runs/smollm2-word-problems [--window 10]
    python scripts/run_summary.py runs/smollm2-seed1 runs/smollm2-seed2 ...     # several seeds side by side

Prints a markdown table: every held-out / benchmark eval logged, then the mean of each step metric
over the first and the last `--window` steps, then the seconds spent per phase over all steps.
With several run directories (seeds of one recipe): one row per run with its held-out accuracy at the
start and at its last eval, and the mean / min / max / std of the gain.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

TRENDS = ("accuracy", "reward_mean", "zero_std_frac", "completion_len_mean", "truncated_frac", "entropy")
PHASES = ("time_generate", "time_reward", "time_train", "time_sync", "time_step")


def mean(xs: list) -> float:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else float("nan")


def fail(message: str):
    """Bad input: named, exit 2 (as every entry point does)."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def read(run_dir: str) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        fail(f"{path} not found (is {run_dir!r} a run's out_dir?)")
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def compare(run_dirs: list[str]) -> None:
    """One row per run: held-out accuracy before and at the last eval; then the spread of the gains."""
    print("| run | held-out before | after (step) | gain |\n| --- | --- | --- | --- |")
    gains = []
    for d in run_dirs:
        ev = [(m["step"], m["heldout_accuracy"]) for m in read(d) if m.get("heldout_accuracy") is not None]
        if len(ev) < 2:
            fail(f"{d} has fewer than two held-out evals")
        gains.append(100 * (ev[-1][1] - ev[0][1]))
        print(f"| {d} | {ev[0][1]:.3f} | {ev[-1][1]:.3f} ({ev[-1][0]}) | {gains[-1]:+.1f} pts |")
    std = statistics.stdev(gains) if len(gains) > 1 else 0.0
    print(f"| **{len(gains)} runs** | | | mean {statistics.mean(gains):+.1f}, min {min(gains):+.1f}, "
          f"max {max(gains):+.1f}, std {std:.1f} pts |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", nargs="+")
    ap.add_argument("--window", type=int, default=10, help="steps averaged at each end")
    a = ap.parse_args(argv)
    if a.window < 1:
        fail("--window must be >= 1")
    if len(a.run_dir) > 1:
        return compare(a.run_dir)
    path = Path(a.run_dir[0]) / "metrics.jsonl"
    lines = read(a.run_dir[0])
    steps = [m for m in lines if "time_step" in m]
    if not steps:
        fail(f"{path} holds no training step yet")

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
