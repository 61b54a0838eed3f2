"""What exact_logprobs costs: the default run with it off and on, side by side, in one script run.

    python scripts/bench/bench_exact_logprobs.py                        # 6 rounds x (off, on), 100 steps each
    python scripts/bench/bench_exact_logprobs.py --rounds 2 --steps 300 key=value ...   (overrides go to train.py)

Each run is `train.py configs/tiny_arithmetic.toml steps=N eval_every=0 save_final=false exact_logprobs=...` (the
committed model, seed 0) in a subprocess, one at a time; the two arms alternate (off, on, off, on, ...), so that a
shared machine's load falls on both alike. Per arm: seconds per step (the step's wall time, `time_step`) and in the
update (`time_train`, where the recompute runs), median over every step but the first of every round, and the
sampler/trainer gap; the on/off ratio of each round (its two runs ran back to back) and their median; and, timed
inside the same steps as the rest and so immune to the load changing between runs, the recompute's own time
(`time_recompute`) as a share of the step and of the update. Results: docs/precision.md.
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
    ap.add_argument("--rounds", type=int, default=6, help="rounds of (off, on)")
    ap.add_argument("--steps", type=int, default=100, help="steps per run")
    ap.add_argument("--out", default="runs/bench-exact-logprobs", help="runs go here (redone each time)")
    args, overrides = ap.parse_known_args()
    out = Path(args.out) if Path(args.out).is_absolute() else ROOT / args.out
    threads = os.environ.get("OMP_NUM_THREADS") or "1"
    arms = {"off": [], "on": []}
    ratios = []
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
        last = {arm: statistics.median(r["time_step"] for r in rows[-(args.steps - 1):]) for arm, rows in arms.items()}
        ratios.append(last["on"] / last["off"])
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
    on = arms["on"]
    share_step = statistics.median(r["time_recompute"] / r["time_step"] for r in on)
    share_train = statistics.median(r["time_recompute"] / r["time_train"] for r in on)
    print()
    print(f"exact_logprobs on / off, time per step (medians): {med['on'] / med['off']:.2f}x over all steps; per round "
          f"{', '.join(f'{x:.2f}' for x in ratios)} (median {statistics.median(ratios):.2f}x)")
    print(f"the recompute, timed in the same steps: {statistics.median(r['time_recompute'] for r in on):.3f} s, "
          f"{100 * share_step:.1f}% of the step and {100 * share_train:.1f}% of the update (medians), so without it "
          f"a step would take {1 - share_step:.3f} of its time: {1 / (1 - share_step):.2f}x for the mode")


if __name__ == "__main__":
    main()
