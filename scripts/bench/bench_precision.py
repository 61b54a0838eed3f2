"""The default recipe in fp32, bf16 and fp16 (trainer and sampler), several GRPO seeds each: does it learn, and
how far apart are the sampler's and the trainer's log-probs?

    python scripts/bench/bench_precision.py                                   # 3 dtypes x 3 seeds, 500 steps each
    python scripts/bench/bench_precision.py --steps 1500 --seeds 5 --jobs 2   # more; key=value ... goes to train.py

Each run is `train.py configs/tiny_arithmetic.toml dtype=D seed=S steps=N eval_every=N save_final=false` in a
subprocess (the committed model; with fewer steps than the recipe's 1500 the cosine schedule is the recipe's,
compressed to N steps), `--jobs` at a time; its log is OUT/D-seedS/train.log. dtype=bfloat16 / float16: FSDP2's
MixedPrecisionPolicy (fp32 master weights and gradient reduction, compute in the dtype) and a sampler whose
weights are in the dtype. Per run: held-out accuracy before and after (500 held-out sums, sampled at T=1, by
the run's own sampler), `logprob_gap` (mean |trainer - sampler| log-prob of the trained tokens) over the run
and in its first and last quarter of steps (growth = last / first), and seconds per step. Then per dtype:
gain mean / min / max, and the gap. Results: docs/precision.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_learning import DEFAULT_MODEL, ROOT, command, heldout, read_metrics  # noqa: E402

DTYPES = ("float32", "bfloat16", "float16")


def summarise(run: dict) -> dict:
    """Held-out before / after, the gap over the run and its quarters, seconds per step."""
    rows = run["metrics"]
    ev = heldout(rows)
    steps = [r for r in rows if r["step"] >= 1 and "time_step" in r]
    gaps = [r["logprob_gap"] for r in steps if r.get("logprob_gap") is not None]  # None: no token trained that step
    q = max(len(gaps) // 4, 1)
    first, last = statistics.mean(gaps[:q]), statistics.mean(gaps[-q:])
    return {"before": ev[0][1], "after": ev[-1][1], "gain": 100 * (ev[-1][1] - ev[0][1]), "gap": statistics.mean(gaps),
            "gap_max": max(gaps), "gap_first": first, "gap_last": last, "growth": last / first if first else float("inf"),
            "s_step": statistics.mean(r["time_step"] for r in steps), "measured": len(gaps), "steps": len(steps)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated, of " + ", ".join(DTYPES))
    ap.add_argument("--seeds", type=int, default=3, help="GRPO seeds 0..N-1 per dtype")
    ap.add_argument("--steps", type=int, default=500, help="steps per run (the recipe has 1500)")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time (the cores are split between them)")
    ap.add_argument("--out", default="runs/bench-precision", help="runs go here (redone each time)")
    args, overrides = ap.parse_known_args()
    dtypes = [d for d in args.dtypes.split(",") if d]
    if bad := [d for d in dtypes if d not in DTYPES]:
        ap.error(f"unknown dtype(s) {bad}: expected some of {', '.join(DTYPES)}")
    for name in ("seeds", "steps", "jobs"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1")
    out = Path(args.out) if Path(args.out).is_absolute() else ROOT / args.out
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // args.jobs))
    # the slowest first (fp16 has no fast matmul on most CPUs), so that --jobs > 1 ends with the short runs
    order = sorted(dtypes, key=lambda d: DTYPES.index(d), reverse=True)
    queue = [dict(dtype=d, seed=s) for d in order for s in range(args.seeds)]
    per_run = [f"steps={args.steps}", f"eval_every={args.steps}", "eval_size=500", "save_final=false"]
    running, done, t_all = [], [], time.time()
    while queue or running:
        while queue and len(running) < args.jobs:
            run = queue.pop(0)
            run["dir"] = out / f"{run['dtype']}-seed{run['seed']}"
            shutil.rmtree(run["dir"], ignore_errors=True)  # a fresh run each time (train.py refuses to overwrite)
            run["dir"].mkdir(parents=True)
            cmd = command(1, DEFAULT_MODEL, run["seed"], run["dir"], [f"dtype={run['dtype']}", *per_run, *overrides])
            run["t0"] = time.time()
            run["proc"] = subprocess.Popen(cmd, cwd=ROOT, stdout=open(run["dir"] / "train.log", "w"),
                                           stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": threads})
            running.append(run)
            print(f"started {run['dtype']} seed {run['seed']}: {run['dir'] / 'train.log'}", flush=True)
        time.sleep(2)
        for run in [r for r in running if r["proc"].poll() is not None]:
            running.remove(run)
            run["seconds"] = time.time() - run["t0"]
            if run["proc"].returncode:
                sys.exit(f"error: run {run['dir'].name} failed (exit {run['proc'].returncode}); see {run['dir'] / 'train.log'}")
            run["metrics"] = read_metrics(run["dir"])
            run.update(summarise(run))
            done.append(run)
            print(f"finished {run['dtype']} seed {run['seed']}: held-out {run['before']:.3f} -> {run['after']:.3f}, "
                  f"mean gap {run['gap']:.2e}, {run['seconds'] / 60:.1f} min", flush=True)

    done.sort(key=lambda r: (DTYPES.index(r["dtype"]), r["seed"]))
    print()
    print(f"{len(done)} runs of {args.steps} steps (configs/tiny_arithmetic.toml, committed model), {args.jobs} at a "
          f"time, OMP_NUM_THREADS={threads}, {(time.time() - t_all) / 60:.0f} min in all; held-out accuracy on 500 "
          "held-out sums sampled at T=1; gap = logprob_gap, mean |trainer - sampler| log-prob per trained token"
          + (f"; overrides: {' '.join(overrides)}" if overrides else ""))
    print()
    print("| dtype | seed | held-out before | after | gain | mean gap | max gap | gap first quarter | last quarter "
          "| growth | s/step | wall |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in done:
        print(f"| {r['dtype']} | {r['seed']} | {r['before']:.3f} | {r['after']:.3f} | {r['gain']:+.1f} pts | "
              f"{r['gap']:.2e} | {r['gap_max']:.2e} | {r['gap_first']:.2e} | {r['gap_last']:.2e} | {r['growth']:.2f}x | "
              f"{r['s_step']:.2f} | {r['seconds'] / 60:.1f} min |")
    print()
    print("| dtype | runs | gain mean | min | max | mean gap | max gap | gap first quarter -> last quarter | s/step |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for d in DTYPES:
        rs = [r for r in done if r["dtype"] == d]
        if not rs:
            continue
        gains = [r["gain"] for r in rs]
        first, last = statistics.mean(r["gap_first"] for r in rs), statistics.mean(r["gap_last"] for r in rs)
        print(f"| {d} | {len(rs)} | {statistics.mean(gains):+.1f} pts | {min(gains):+.1f} | {max(gains):+.1f} | "
              f"{statistics.mean(r['gap'] for r in rs):.2e} | {max(r['gap_max'] for r in rs):.2e} | "
              f"{first:.2e} -> {last:.2e} ({last / first:.2f}x) | {statistics.mean(r['s_step'] for r in rs):.2f} |")


if __name__ == "__main__":
    main()
