"""What exact_logprobs costs: the default run with it off and on, side by side, in one script run.

    python scripts/bench_exact_logprobs.py                        # 3 rounds x (off, on), 150 steps each
    python scripts/bench_exact_logprobs.py --rounds 2 --steps 300 key=value ...   (overrides go to train.py)

Each run is `train.py configs/tiny_arithmetic.toml steps=N eval_every=0 save_final=false exact_logprobs=...` (the
committed model, seed 0) in a subprocess, one at a time; the two arms alternate (off, on, off, on, ...), so that a
shared machine's load falls on both alike. Per arm: seconds per step (the step's wall time, `time_step`) and in the
update (`time_train`, where the recompute runs), median over every step but the first of every round, and the
sampler/trainer gap. Results: docs/precision.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_learning import DEFAULT_MODEL, ROOT, command, read_metrics  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of (off, on)")
    ap.add_argument("--steps", type=int, default=150, help="steps per run")
    ap.add_argument("--out", default="runs/bench-exact-logprobs", help="runs go here (redone each time)")
    args, overrides = ap.parse_known_args()
    out = Path(args.out) if Path(args.out).is_absolute() else ROOT / args.out
    threads = os.environ.get("OMP_NUM_THREADS") or "1"
    arms = {"off": [], "on": []}
    for rnd in range(args.rounds):
        for arm in arms:
            run_dir = out / f"round{rnd}-{arm}"
            shutil.rmtree(run_dir, ignore_errors=True)
            run_dir.mkdir(parents=True)
            cmd = command(1, DEFAULT_MODEL, 0, run_dir, [f"steps={args.steps}", "eval_every=0", "save_final=false",
                                                        f"exact_logprobs={'true' if arm == 'on' else 'false'}", *overrides])
            with open(run_dir / "train.log", "w") as log:
                subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True,
                               env={**os.environ, "OMP_NUM_THREADS": threads})
            rows = [r for r in read_metrics(run_dir) if r["step"] >= 2]  # step 1 warms up
            arms[arm] += rows
            print(f"round {rnd} exact_logprobs {arm}: {statistics.median(r['time_step'] for r in rows):.3f} s/step", flush=True)
    print()
    print(f"{args.rounds} rounds x {args.steps} steps per arm, alternating, OMP_NUM_THREADS={threads}"
          + (f"; overrides: {' '.join(overrides)}" if overrides else ""))
    print()
    print("| exact_logprobs | s/step (median) | mean | update s/step (median) | generate s/step (median) | mean gap | max gap |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    med = {}
    for arm, rows in arms.items():
        gaps = [r["logprob_gap"] for r in rows if r.get("logprob_gap") is not None]
        med[arm] = statistics.median(r["time_step"] for r in rows)
        print(f"| {arm} | {med[arm]:.3f} | {statistics.mean(r['time_step'] for r in rows):.3f} | "
              f"{statistics.median(r['time_train'] for r in rows):.3f} | "
              f"{statistics.median(r['time_generate'] for r in rows):.3f} | {statistics.mean(gaps):.2e} | {max(gaps):.2e} |")
    print()
    print(f"exact_logprobs on / off: {med['on'] / med['off']:.2f}x the time per step (median)")


if __name__ == "__main__":
    main()
