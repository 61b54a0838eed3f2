"""The sampler's calibration check (`max_sample_z`, nanogrpo/checks' SampleGate): false alarms, detection, cost.

    OMP_NUM_THREADS=1 python scripts/bench/bench_sample_z.py clean --runs default:0,default:1,default:2 --jobs 2
    OMP_NUM_THREADS=1 python scripts/bench/bench_sample_z.py clean --runs tools,smollm2 --steps 40
    OMP_NUM_THREADS=1 python scripts/bench/bench_sample_z.py faults --steps 30 --onsets 1,750
    OMP_NUM_THREADS=1 python scripts/bench/bench_sample_z.py cost --steps 100 --rounds 3
    python scripts/bench/bench_sample_z.py selection --steps 20 --runs-per-setting 500

clean: each run is `train.py RECIPE` with the check at its default (a stop is a false alarm), in a subprocess; one row
per run: the steps it ran, whether the check stopped it, the mean and spread of `sample_z`, its largest |value| and
the largest CUSUM the gate reached (its limit: max_sample_z). Recipes: default[:SEED] (train.py's defaults,
eval_every=0), tools (configs/multiply_tools.toml), smollm2 (configs/word_problems_smollm2.toml at its temperature
0.7, sampler=torch, the model from --smollm2), each for --steps steps (default: the recipe's own).
faults: the default recipe with each hidden fault of tests/helpers/sampler_faults.py (a sampler that draws at
temperature 0.7, or from the top_p 0.9 nucleus, and reports the trainer's settings and log-probs at 1.0: the sampler
check and the gap gate pass it) from step ONSET on, in float32 and bfloat16: the step the check stopped the run and
how many steps after the onset, or "never" within --steps (the run to ONSET - 1 is stopped cleanly, as by SIGTERM,
and resumed with the fault: the same steps as a run with it from the start). Any key=value is passed to every run.
cost: the default recipe with the check off (max_sample_z=0: not computed) and on, alternating, --rounds each: the
update's time per step (time_train) and the whole step's, median over the steps after the first.
selection: why dynamic sampling's kept groups are not what the check may read (a simulation, no model): each token
is drawn from a distribution with one likely token and mass EPS over 50 others; a group (8 completions of 7 tokens)
has a signal when one of its tokens is a rare one; a step keeps 8 groups with a signal from up to 3 rounds of 8,
topped up with dropped ones. sample_z over the kept groups against over the first round's: mean, sd, the share of
steps below -3, and the share of --runs-per-setting runs of --steps steps the gate (limit 6) stops.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from nanogrpo import config as C  # noqa: E402
from nanogrpo.checks import SampleGate  # noqa: E402

RECIPES = {  # name -> train.py arguments before the run's own
    "default": ["eval_every=0"],
    "tools": [str(ROOT / "configs" / "multiply_tools.toml"), "eval_every=0"],
    "smollm2": [str(ROOT / "configs" / "word_problems_smollm2.toml"), "sampler=torch", "eval_every=0"],
}


def metrics(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []


def replay(zs: list[float], limit: float) -> float:
    """The largest CUSUM the gate reached over these steps' sample_z (its own arithmetic, without stopping)."""
    gate, top = SampleGate(math.inf), 0.0
    for i, z in enumerate(zs):
        gate(i, z)
        top = max(top, gate.up, gate.down)
    return top


def clean(args) -> None:
    out = Path(args.out)
    runs, running, done = [r.strip() for r in args.runs.split(",") if r.strip()], [], {}
    limit = C.Config().max_sample_z
    while runs or running:
        while runs and len(running) < args.jobs:
            name = runs.pop(0)
            recipe, _, seed = name.partition(":")
            run = out / f"clean-{name.replace(':', '-')}"
            shutil.rmtree(run, ignore_errors=True)
            run.mkdir(parents=True)
            cmd = [sys.executable, str(ROOT / "train.py"), *RECIPES[recipe], f"out_dir={run}", "save_final=false",
                   f"seed={seed or 0}", *([f"steps={args.steps}"] if args.steps else []), *args.extra,
                   *([f"model={args.smollm2}"] if recipe == "smollm2" else [])]
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=open(run / "train.log", "w"), stderr=subprocess.STDOUT)
            running.append((name, run, proc, time.time()))
            print(f"started {name}: {run / 'train.log'}", flush=True)
        time.sleep(5)
        for item in [r for r in running if r[2].poll() is not None]:
            running.remove(item)
            name, run, proc, t0 = item
            log = (run / "train.log").read_text()
            if proc.returncode and "SAMPLER DISTRIBUTION" not in log:
                sys.exit(f"error: {name} failed (exit {proc.returncode}); see {run / 'train.log'}")
            zs = [m["sample_z"] for m in metrics(run) if m.get("sample_z") is not None]
            done[name] = (len(zs), "SAMPLER DISTRIBUTION" in log, zs, (time.time() - t0) / 60)
            print(f"finished {name}: {len(zs)} steps in {done[name][3]:.0f} min", flush=True)
    print(f"\nclean runs, the check at its default (max_sample_z = {limit:g}, slack {SampleGate.SLACK:g} per step)\n")
    print("| run | steps | stopped (a false alarm) | mean sample_z | sd | largest abs | largest CUSUM |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for name in [r.strip() for r in args.runs.split(",") if r.strip()]:
        n, stopped, zs, _ = done[name]
        print(f"| {name} | {n} | {'yes' if stopped else 'no'} | {statistics.mean(zs):+.3f} | "
              f"{statistics.stdev(zs):.3f} | {max(abs(z) for z in zs):.2f} | {replay(zs, limit):.2f} |")


def train_until(argv: list[str], stop_after: int, fault: str | None = None) -> str:
    """train.main(argv) in this process, stopped cleanly (as by SIGTERM: saved, resumable) after `stop_after` steps
    of this process, with hidden `fault` from its first step: "step N" when the check stopped it, else ""."""
    import pytest
    import train
    from helpers.sampler_faults import inject_hidden
    from nanogrpo import checkpoint, checks

    calls = [0]

    def requested(self) -> str:
        calls[0] += 1
        return "SIGTERM" if calls[0] >= stop_after else ""

    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        mp.setattr(checkpoint.StopSignals, "requested", requested)
        if fault:
            inject_hidden(mp, fault, 1)
        try:
            train.main(argv)
        except checks.SamplerDistributionError as e:
            return str(e).split(":")[0]
    return ""


def faults(args) -> None:
    """Each hidden fault from step ONSET on: the default run (1,500 steps, its schedule) is stopped cleanly after
    step ONSET - 1 and resumed with the fault, once per fault, for at most --steps steps."""
    from helpers.sampler_faults import HIDDEN

    out = Path(args.out) / "faults"
    onsets = [int(x) for x in args.onsets.split(",")]
    rows = []
    for fault, (how, _) in HIDDEN.items():
        for dtype in ("float32", "bfloat16"):
            cells = []
            for onset in onsets:
                prefix = out / f"prefix-{dtype}-{onset}"
                base = [f"steps={C.Config().steps}", "eval_every=0", "save_final=false", f"dtype={dtype}", *args.extra]
                if onset > 1 and not (prefix / "checkpoints").is_dir():
                    shutil.rmtree(prefix, ignore_errors=True)
                    train_until([f"out_dir={prefix}", *base], onset - 1)
                run = out / f"{fault.replace(' ', '-')}-{dtype}-{onset}"
                shutil.rmtree(run, ignore_errors=True)
                if onset > 1:
                    shutil.copytree(prefix, run)
                stopped = train_until([f"out_dir={run}", *base, *(["resume=true"] if onset > 1 else [])], args.steps,
                                      fault)
                n = int(stopped.removeprefix("step ")) if stopped else 0
                cells.append(f"{stopped} (+{n - onset + 1})" if stopped else f"never in {args.steps}")
                print(f"{fault} {dtype} from step {onset}: {cells[-1]}", flush=True)
            rows.append(f"| {fault} | {how} | {dtype} | " + " | ".join(cells) + " |")
    print(f"\ndefault recipe; each fault from step ONSET on (the run stopped cleanly before it and resumed with the "
          f"fault), for at most {args.steps} steps; the step the check stopped the run (+ steps since the onset, "
          "counting it)\n")
    print("| fault | injected | dtype | " + " | ".join(f"from step {o}" for o in onsets) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in onsets) + " |")
    print("\n".join(rows))


def cost(args) -> None:
    out = Path(args.out) / "cost"
    arms = {"off (max_sample_z=0)": ["max_sample_z=0"], "on (default)": []}
    got = {a: {"time_train": [], "time_step": []} for a in arms}
    for r in range(args.rounds):
        for arm, extra in arms.items():
            run = out / f"{r}-{arm.split()[0]}"
            shutil.rmtree(run, ignore_errors=True)
            cmd = [sys.executable, str(ROOT / "train.py"), f"out_dir={run}", f"steps={args.steps}", "eval_every=0",
                   "save_final=false", *extra, *args.extra]
            subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
            ms = [m for m in metrics(run) if "time_train" in m][1:]
            for k in got[arm]:
                got[arm][k] += [m[k] for m in ms]
            print(f"round {r + 1} {arm}: time_train median {statistics.median(m['time_train'] for m in ms):.4f} s",
                  flush=True)
    base = statistics.median(got["off (max_sample_z=0)"]["time_train"])
    print(f"\ndefault recipe, {args.steps} steps x {args.rounds} rounds per arm, alternating; medians over the steps "
          f"after the first; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}\n")
    print("| check | time_train (s) | vs off | time_step (s) |")
    print("| --- | ---: | ---: | ---: |")
    for arm in arms:
        t = statistics.median(got[arm]["time_train"])
        print(f"| {arm} | {t:.4f} | {t / base:.3f}x | {statistics.median(got[arm]['time_step']):.4f} |")


def selection(args) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    groups, g, t, rounds = 8, 8, 7, 3
    print("| EPS | entropy per token | read | mean sample_z | sd | steps below -3 | runs stopped (limit 6) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for eps in (0.002, 0.01, 0.05):
        p = np.r_[1 - eps, np.full(50, eps / 50)]
        lp = np.log(p)
        mean, var = (p * lp).sum(), (p * (lp - (p * lp).sum()) ** 2).sum()
        z, norm = {"kept groups": [], "first draw": []}, math.sqrt(var * groups * g * t)
        for _ in range(args.sim_runs * args.steps):
            rare = rng.random((groups * rounds, g, t)) < eps
            dev = np.where(rare, lp[1] - mean, lp[0] - mean).sum(axis=(1, 2))  # per group
            signal = rare.any(axis=(1, 2))
            kept = [i for i in range(groups * rounds) if signal[i]][:groups]
            kept += [i for i in range(groups * rounds) if not signal[i]][: groups - len(kept)]
            z["kept groups"].append(dev[kept].sum() / norm)
            z["first draw"].append(dev[:groups].sum() / norm)
        for read, zs in z.items():
            stopped = sum(replay(zs[r * args.steps:(r + 1) * args.steps], 6.0) > 6.0 for r in range(args.sim_runs))
            a = np.array(zs)
            print(f"| {eps} | {-(p * lp).sum():.3f} | {read} | {a.mean():+.2f} | {a.std():.2f} | {np.mean(a < -3):.3f} "
                  f"| {stopped / args.sim_runs:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["clean", "faults", "cost", "selection"])
    ap.add_argument("--runs", default="default:0,default:1,default:2",
                    help=f"clean: comma-separated RECIPE[:SEED] of {', '.join(RECIPES)}")
    ap.add_argument("--steps", type=int, default=0, help="clean: steps per run (0: the recipe's); faults: steps "
                    "after the onset (default 40); cost: steps per run (default 100)")
    ap.add_argument("--onsets", default="1,750", help="faults: the steps the fault starts at")
    ap.add_argument("--rounds", type=int, default=3, help="cost: runs per arm, alternating")
    ap.add_argument("--runs-per-setting", dest="sim_runs", type=int, default=500, help="selection: simulated runs")
    ap.add_argument("--jobs", type=int, default=1, help="clean: runs at a time")
    ap.add_argument("--smollm2", default=str(ROOT / ".cache" / "smollm2-135m-instruct"),
                    help="clean: the SmolLM2-135M-Instruct directory (scripts/models/smollm2_to_hf.py makes it)")
    ap.add_argument("--out", default=str(ROOT / "runs" / "bench-sample-z"))
    args, args.extra = ap.parse_known_args()  # key=value: train.py overrides for every run
    if args.what != "clean":
        args.steps = args.steps or {"faults": 30, "cost": 100, "selection": 20}[args.what]
    {"clean": clean, "faults": faults, "cost": cost, "selection": selection}[args.what](args)


if __name__ == "__main__":
    main()
