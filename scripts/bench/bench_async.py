"""Async GRPO and dynamic sampling: steps per hour side by side, and what each arm learns over GRPO seeds.

    python scripts/bench/bench_async.py speed --recipe default --steps 300 --repeats 2     # async_steps 0, 1, 2
    python scripts/bench/bench_async.py speed --recipe tools --steps 4                     # the SmolLM2 tools recipe
    python scripts/bench/bench_async.py speed --async-steps 0,1,s0,s1                      # sN: split placement
    python scripts/bench/bench_async.py learn --seeds 5 --arms sync,async1,dynamic --jobs 2

speed: each arm is `train.py RECIPE async_steps=K` in a subprocess, the arms interleaved (0, 1, 2, 0, 1, 2, ...)
so the machine's noise falls on all of them; one row per arm: steps per hour over the steps after the first (its
sampling is never overlapped), the ratio to async_steps = 0, and where a step's time goes: the update
(time_train), the main thread waiting for rollouts (time_wait), and the rollout thread's own generate / reward
time (with async they run during the update). An arm `sK` is the split placement with async_steps = K: torchrun
with two processes, one trainer rank and one sampler rank (sampler_ranks = 1), one thread each; its peak memory is
the two processes' together. --recipe default: the default run (train.py's own defaults);
--recipe tools: configs/word_problems_smollm2_tools.toml with sampler=torch (async needs it), its model built by
scripts/models/smollm2_tools_warm_start.py into .cache/smollm2-135m-tools.

learn: the default recipe (configs/tiny_arithmetic.toml, the committed warm start) under each arm for GRPO seeds
0..N-1: held-out accuracy before and after, and the completion tokens generated (dropped groups included) until
the held-out accuracy first stood +30 points above its start (read at the evaluations, every 100 steps).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_learning import DEFAULT_MODEL, TARGET_GAIN, command, heldout, read_metrics  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ARMS = {  # name -> train.py overrides
    "sync": [],
    "async1": ["async_steps=1", "tis_cap=2"],
    "async2": ["async_steps=2", "tis_cap=2"],
    "async1_uncorrected": ["async_steps=1", "tis_cap=0"],  # the rejected alternative: stale rollouts as on-policy
    "dynamic": ["dynamic_sampling=true"],
    "dynamic_async1": ["dynamic_sampling=true", "async_steps=1", "tis_cap=2"],
}
TIMES = ("time_train", "time_wait", "time_generate", "time_reward", "time_sync")
# runs train.py as __main__ and writes the process's peak resident memory (KiB) to the file named first (+ its rank)
PEAK = ("import atexit, os, resource, runpy, sys; out = sys.argv.pop(1) + os.environ.get('RANK', ''); "
        "atexit.register(lambda: open(out, 'w').write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))); "
        "sys.argv = sys.argv[1:]; sys.path.insert(0, os.getcwd()); runpy.run_path(sys.argv[0], run_name='__main__')")


def recipe(name: str) -> list[str]:
    if name == "default":
        return [str(ROOT / "train.py")]
    model = ROOT / ".cache" / "smollm2-135m-tools"
    if not (model / "config.json").is_file():
        sys.exit(f"error: {model} is missing: build it with `python scripts/models/smollm2_tools_warm_start.py --out {model}`")
    return [str(ROOT / "train.py"), str(ROOT / "configs" / "word_problems_smollm2_tools.toml"), f"model={model}",
            "sampler=torch"]


def speed(args, overrides: list[str]) -> None:
    out = Path(args.out)
    rows: dict[str, list[dict]] = {arm: [] for arm in args.async_steps}
    (out / "peak.py").write_text(PEAK)
    for rep in range(args.repeats):
        for arm in args.async_steps:
            k, split = int(arm.removeprefix("s")), arm.startswith("s")
            run = out / f"speed-{args.recipe}-{arm}-r{rep}"
            subprocess.run(["rm", "-rf", str(run), *map(str, out.glob(f"{run.name}.peak*"))], check=True)
            launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"] if split \
                else [sys.executable]
            cmd = [*launcher, str(out / "peak.py"), f"{run}.peak", *recipe(args.recipe), f"steps={args.steps}",
                   "eval_every=0", "save_final=false", f"out_dir={run}", f"async_steps={k}",
                   *(["tis_cap=2"] if k else []), *(["sampler_ranks=1"] if split else []), *overrides]
            print(f"{arm} (repeat {rep + 1}/{args.repeats}): {run}/train.log", flush=True)
            with open(f"{run}.log", "w") as log:
                t0 = time.time()
                subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True)
            steps = [m for m in read_metrics(run) if "time_step" in m][1:]  # the first step overlaps nothing
            peaks = [int(f.read_text()) for f in out.glob(f"{run.name}.peak*")]  # KiB, one per process
            rows[arm].append({"wall": time.time() - t0, "per_step": sum(m["time_step"] for m in steps) / len(steps),
                              "peak_gib": sum(peaks) / 2**20,
                              **{t: statistics.mean(m.get(t, 0.0) for m in steps) for t in TIMES}})
    base = statistics.mean(r["per_step"] for r in rows[args.async_steps[0]])
    threads = os.environ.get("OMP_NUM_THREADS", f"unset ({os.cpu_count()} cores)")
    print(f"\n{args.recipe} recipe, {args.steps} steps x {args.repeats} repeats per arm, interleaved; "
          f"OMP_NUM_THREADS={threads}; per-step means over steps 2..{args.steps}\n")
    print("| async_steps | steps / hour | vs async_steps=" + f"{args.async_steps[0]} | " + " | ".join(TIMES)
          + " | peak memory |")
    print("| --- | ---: | ---: | " + " | ".join("---:" for _ in TIMES) + " | ---: |")
    for arm, rs in rows.items():
        per = statistics.mean(r["per_step"] for r in rs)
        print(f"| {arm.removeprefix('s') + (' split' if arm.startswith('s') else '')} | {3600 / per:,.0f} | {base / per:.2f}x | "
              + " | ".join(f"{statistics.mean(r[t] for r in rs):.3f} s" for t in TIMES)
              + f" | {max(r['peak_gib'] for r in rs):.2f} GiB |")


def tokens_to_target(metrics: list[dict]) -> int | None:
    """Completion tokens generated until the first evaluation TARGET_GAIN above the start (None: never)."""
    ev = heldout(metrics)
    spent = 0
    for m in metrics:
        spent += m.get("generated_tokens", 0)
        if m.get("heldout_accuracy") is not None and m["step"] > 0 and m["heldout_accuracy"] - ev[0][1] >= TARGET_GAIN:
            return spent
    return None


def learn(args, overrides: list[str]) -> None:
    out = Path(args.out)
    queue = [(arm, g) for g in range(args.seeds) for arm in args.arms]
    running, done = [], {}
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // args.jobs))
    if args.no_run:  # tabulate the runs already in --out
        done = {(arm, g): summary(read_metrics(out / f"learn-{arm}-g{g}"), 0.0) for arm, g in queue}
        queue = []
    while queue or running:
        while queue and len(running) < args.jobs:
            arm, g = queue.pop(0)
            run = out / f"learn-{arm}-g{g}"
            subprocess.run(["rm", "-rf", str(run)], check=True)
            run.mkdir(parents=True)
            cmd = command(1, DEFAULT_MODEL, g, run, [*ARMS[arm], *overrides])
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=open(run / "train.log", "w"), stderr=subprocess.STDOUT,
                                    env={**os.environ, "OMP_NUM_THREADS": threads})
            running.append((arm, g, run, proc, time.time()))
            print(f"started {arm} seed {g}: {run / 'train.log'}", flush=True)
        time.sleep(2)
        for item in [r for r in running if r[3].poll() is not None]:
            running.remove(item)
            arm, g, run, proc, t0 = item
            if proc.returncode:
                sys.exit(f"error: {arm} seed {g} failed (exit {proc.returncode}); see {run / 'train.log'}")
            done[arm, g] = summary(read_metrics(run), (time.time() - t0) / 60)
            print(f"finished {arm} seed {g}: held-out {done[arm, g]['before']:.3f} -> {done[arm, g]['after']:.3f}",
                  flush=True)
    print(f"\n{args.seeds} GRPO seeds per arm from the committed warm start; OMP_NUM_THREADS={threads}, {args.jobs} "
          f"at a time; held-out accuracy on 500 held-out sums at T=1\n")
    print(f"| arm | overrides | gain per seed (pts) | mean | min | spread | tokens to +{100 * TARGET_GAIN:.0f} pts "
          "(mean, runs that got there) | tokens generated in the run | trained completion length | generate calls per "
          "step | tokens generated per step |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for arm in args.arms:
        rs = [done[arm, g] for g in range(args.seeds)]
        gains = [r["gain"] for r in rs]
        hit = [r["tokens"] for r in rs if r["tokens"] is not None]
        print(f"| {arm} | {' '.join(ARMS[arm]) or '-'} | {', '.join(f'{x:+.1f}' for x in gains)} | "
              f"{statistics.mean(gains):+.1f} | {min(gains):+.1f} | {max(gains) - min(gains):.1f} | "
              f"{f'{statistics.mean(hit):,.0f}' if hit else 'never'} ({len(hit)}/{len(rs)}) | "
              f"{statistics.mean(r['all_tokens'] for r in rs):,.0f} | {statistics.mean(r['length'] for r in rs):.3f} | "
              f"{statistics.mean(r['rounds'] for r in rs):.2f} | {statistics.mean(r['step_tokens'] for r in rs):,.0f} |")


def summary(m: list[dict], minutes: float) -> dict:
    ev = heldout(m)
    steps = [x for x in m if "completion_len_mean" in x]
    return {"gain": 100 * (ev[-1][1] - ev[0][1]), "before": ev[0][1], "after": ev[-1][1], "minutes": minutes,
            "tokens": tokens_to_target(m), "all_tokens": sum(x.get("generated_tokens", 0) for x in m),
            "length": statistics.mean(x["completion_len_mean"] for x in steps),  # per step, over the run
            "rounds": statistics.mean(x.get("sampling_rounds", 1) for x in steps),  # dynamic sampling's generate calls
            "step_tokens": statistics.mean(x.get("generated_tokens", 0) for x in steps)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["speed", "learn"])
    ap.add_argument("--recipe", choices=["default", "tools"], default="default", help="speed: which recipe")
    ap.add_argument("--steps", type=int, default=300, help="speed: steps per run")
    ap.add_argument("--repeats", type=int, default=2, help="speed: runs per arm, interleaved")
    ap.add_argument("--async-steps", default="0,1,2", help="speed: the arms' async_steps, the first is the baseline; "
                    "sK: K with the split placement (one trainer rank, one sampler rank)")
    ap.add_argument("--seeds", type=int, default=5, help="learn: GRPO seeds 0..N-1 per arm")
    ap.add_argument("--arms", default="sync,async1,dynamic", help=f"learn: of {', '.join(ARMS)}")
    ap.add_argument("--jobs", type=int, default=1, help="learn: runs at a time (the cores split between them)")
    ap.add_argument("--out", default=str(ROOT / "runs" / "bench-async"))
    ap.add_argument("--no-run", action="store_true", help="learn: tabulate the runs already in --out")
    args, overrides = ap.parse_known_args()
    args.async_steps = args.async_steps.split(",")
    for arm in args.async_steps:
        if not arm.removeprefix("s").isdigit():
            ap.error(f"--async-steps: {arm!r} is neither K nor sK")
    args.arms = args.arms.split(",")
    for arm in args.arms:
        if arm not in ARMS:
            ap.error(f"unknown arm {arm!r}: {', '.join(ARMS)}")
    if min(args.steps, args.repeats, args.seeds, args.jobs) < 1 or args.steps < 2:
        ap.error("--steps must be >= 2; --repeats, --seeds, --jobs >= 1")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (speed if args.what == "speed" else learn)(args, overrides)


if __name__ == "__main__":
    main()
