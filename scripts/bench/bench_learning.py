"""Does the default GRPO run learn, from every warm start and every seed? One row per run, then mean / min / std.

    python scripts/bench/bench_learning.py                              # the default run once (committed model, seed 0)
    python scripts/bench/bench_learning.py --seeds 5 --grpo-seeds 2     # the sweep: 5 warm starts x 2 GRPO seeds
    python scripts/bench/bench_learning.py --nproc 2                    # each run under torchrun, 2 ranks (gloo)
    python scripts/bench/bench_learning.py --seeds 5 --plot docs/reward_curve.png  key=value ...  (overrides go to train.py)
    python scripts/bench/bench_learning.py --config configs/rg_letter_counting.toml --model DIR --grpo-seeds 3
        [--first-seed 100] [--target 0.2]        # another recipe and its model, GRPO seeds 100..102

Warm start 0 is the committed default model (models/tiny-arithmetic); warm starts 1..N-1 are built here by
`scripts/models/build_tiny_model.py --seed S` (the same recipe on this machine's kernels, so the sweep also says whether
the recipe learns from starts it was not tuned on). Each run is `train.py CONFIG model=... seed=G` (CONFIG:
--config, default configs/tiny_arithmetic.toml; with --model, that model and no warm starts) in a subprocess (1
and N ranks take the same path), `--jobs` of them at a time with the cores split between them; its log is
OUT/ws{S}-g{G}/train.log. Held-out accuracy is read from metrics.jsonl (the default recipe: sampled at temperature 1
on 500 held-out sums never seen in training or in any warm start). Per run: the completion tokens generated (dropped
groups of dynamic sampling included), the wall time, and minutes per held-out point gained.
A run that fails stops the sweep: no new run starts, the runs going finish and are tabled, and the script exits
non-zero naming the failed one. `--jobs N` holds N models at once: a SmolLM2-135M run takes about 10 GB here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = ROOT / "models" / "tiny-arithmetic"
sys.path.insert(0, str(ROOT))
TARGET_GAIN = 0.30  # the bar: every run gains at least +30 held-out points within 10 minutes


def warm_start(seed: int, out: Path, threads: int, committed: Path = DEFAULT_MODEL, build_args: tuple = (),
               quiet: bool = False) -> Path:
    """The warm-started model for this seed: the committed one for 0, else built here by
    scripts/models/build_tiny_model.py [build_args] (kept for re-use). scripts/bench/bench_tools.py uses it too."""
    if seed == 0:
        return committed
    path = out / f"warm-start-{seed}"
    if not (path / "warm_start.json").is_file():  # written last: a build that was cut off is redone
        print(f"building warm start {seed} -> {path}", flush=True)
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        subprocess.run([sys.executable, str(ROOT / "scripts" / "models" / "build_tiny_model.py"), *build_args, "--out", str(path),
                        "--seed", str(seed)], check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL if quiet else None)
    return path


DEFAULT_CONFIG = ROOT / "configs" / "tiny_arithmetic.toml"


def command(nproc: int, model: Path, seed: int, out_dir: Path, overrides: list[str],
            config: Path = DEFAULT_CONFIG) -> list[str]:
    args = [str(ROOT / "train.py"), str(config), f"model={model}", f"seed={seed}", f"out_dir={out_dir}", *overrides]
    if nproc > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *args]
    return [sys.executable, *args]


def read_metrics(out_dir: Path) -> list[dict]:
    path = out_dir / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def heldout(rows: list[dict], key: str = "heldout_accuracy") -> list[tuple[int, float]]:
    """(step, value) of each held-out eval: its accuracy, or another of its metrics (heldout_top_answer)."""
    return [(r["step"], r[key]) for r in rows if r.get(key) is not None]


def read_config(out_dir: Path) -> dict:
    import tomllib

    path = out_dir / "config.toml"
    return tomllib.loads(path.read_text()) if path.is_file() else {}


def run_constant_answer(out_dir: Path) -> tuple[str, float] | None:
    """What one answer for every question scores on the held-out rows a finished run measured (nanogrpo/evaluate.py
    `constant_answer`; its config.toml, read as train.py reads it). An 'after' at or near it may be a policy that
    learned that answer, not the task."""
    from nanogrpo import config
    from nanogrpo.evaluate import constant_answer, heldout_rows

    return constant_answer(heldout_rows(config.load([str(out_dir / "config.toml")], here=False)))


def model_name(model: Path, ws: int, given: bool) -> str:
    """The table's model column: a given model's directory name, or the warm start with its steps."""
    if given:
        return model.name
    info = json.loads((model / "warm_start.json").read_text())
    tries = len(info.get("attempts", [])) or 1  # build_tiny_model.py retries a run that missed its target
    return (f"{ws}{' (committed)' if ws == 0 else ''} ({info['steps_run']}"
            f"{f', attempt {tries}' if tries > 1 else ''}{'' if info['reached_target'] else ', target missed'})")


def plot(runs: list[dict], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)")
        return
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=110)
    for i, run in enumerate(runs):
        ev = heldout(run["metrics"])
        ax.plot([s for s, _ in ev], [a for _, a in ev], "o-", ms=3, lw=1.2, color=f"C{run['ws'] % 10}",
                alpha=0.85, label=f"warm start {run['ws']}" if run["g"] == 0 else None)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("held-out accuracy (sampled, T=1)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=7)
    ax.set_title(f"nanogrpo default run, CPU: {len(runs)} runs (each warm start x each GRPO seed)", fontsize=9)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=1, help="warm starts 0..N-1 (0 = the committed default model)")
    ap.add_argument("--grpo-seeds", type=int, default=1, help="GRPO seeds 0..G-1 from each warm start")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time (the cores are split between them)")
    ap.add_argument("--nproc", type=int, default=1, help="ranks per run (torchrun, gloo)")
    ap.add_argument("--out", default="runs/bench-learning", help="warm starts and runs go here (runs are redone)")
    ap.add_argument("--plot", default="", help="write the held-out accuracy curves of every run here (PNG)")
    ap.add_argument("--config", default=str(DEFAULT_CONFIG), help="the recipe every run trains")
    ap.add_argument("--model", default="", help="train this model (no warm starts: --seeds 1)")
    ap.add_argument("--first-seed", type=int, default=0, help="GRPO seeds first..first+G-1 (re-runs: seeds never used)")
    ap.add_argument("--target", type=float, default=TARGET_GAIN, help="report when each run first gained this much")
    args, overrides = ap.parse_known_args()
    for name in ("seeds", "grpo_seeds", "jobs", "nproc"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.model and args.seeds != 1:
        ap.error("--model trains one model: no warm starts (--seeds 1)")
    committed = Path(args.model) if args.model else DEFAULT_MODEL
    if not (committed / "model.safetensors").is_file():
        sys.exit(f"error: {committed} is missing" + ("" if args.model else " (it is committed: git checkout models/)"))
    out = Path(args.out) if Path(args.out).is_absolute() else ROOT / args.out
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // (args.jobs * args.nproc)))

    models = {s: warm_start(s, out, int(threads) * args.jobs, committed) for s in range(args.seeds)}
    seeds = range(args.first_seed, args.first_seed + args.grpo_seeds)
    queue = [dict(ws=s, g=g) for s in range(args.seeds) for g in seeds]
    running, done, failed, last_progress = [], [], [], time.time()
    while queue or running:
        while queue and len(running) < args.jobs:
            run = queue.pop(0)
            run["dir"] = out / f"ws{run['ws']}-g{run['g']}"
            shutil.rmtree(run["dir"], ignore_errors=True)  # a fresh run each time (train.py refuses to overwrite)
            run["dir"].mkdir(parents=True)
            log = open(run["dir"] / "train.log", "w")
            cmd = command(args.nproc, models[run["ws"]], run["g"], run["dir"], overrides, Path(args.config))
            run["t0"] = time.time()
            run["proc"] = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                           env={**os.environ, "OMP_NUM_THREADS": threads})
            running.append(run)
            print(f"started warm start {run['ws']} x GRPO seed {run['g']}: {run['dir'] / 'train.log'}", flush=True)
        time.sleep(2)
        for run in running:  # when did the run first gain TARGET_GAIN? (to within this loop's period)
            if "to_target" not in run:
                ev = heldout(read_metrics(run["dir"]))
                if ev and ev[-1][1] - ev[0][1] >= args.target:
                    run["to_target"] = (time.time() - run["t0"], ev[-1][0])
        for run in [r for r in running if r["proc"].poll() is not None]:
            running.remove(run)
            run["seconds"] = time.time() - run["t0"]
            if run["proc"].returncode:  # no new runs; those going finish and are tabled (none is left orphaned)
                failed.append(f"error: run ws{run['ws']}-g{run['g']} failed (exit {run['proc'].returncode}); "
                              f"see {run['dir'] / 'train.log'}")
                print(failed[-1], flush=True)
                queue.clear()
                continue
            run["metrics"] = read_metrics(run["dir"])
            ev = heldout(run["metrics"])
            run["before"], run["after"] = ev[0][1], ev[-1][1]
            top = heldout(run["metrics"], "heldout_top_answer")
            run["top"] = f"{top[-1][1]:.2f}" if top else "-"  # the last eval's share of its most common answer
            done.append(run)
            print(f"finished warm start {run['ws']} x GRPO seed {run['g']}: held-out {run['before']:.3f} -> "
                  f"{run['after']:.3f} in {run['seconds'] / 60:.1f} min", flush=True)
        if running and time.time() - last_progress > 60:  # progress: where each running job is
            last_progress = time.time()
            print("  " + " | ".join(f"ws{r['ws']}-g{r['g']} step {max([m['step'] for m in read_metrics(r['dir'])] or [0])}"
                                    for r in running), flush=True)

    if not done:
        sys.exit("\n".join(failed))
    done.sort(key=lambda r: (r["ws"], r["g"]))
    gains = [100 * (r["after"] - r["before"]) for r in done]
    steps = max(m["step"] for m in done[0]["metrics"])
    print()
    cfg = read_config(done[0]["dir"])
    print(f"{len(done)} runs of {steps} steps of {Path(args.config).name}, {args.nproc} rank(s) each, {args.jobs} at a "
          f"time, OMP_NUM_THREADS={threads}; held-out accuracy on {cfg.get('eval_size')} held-out problems of "
          f"{cfg.get('eval_task') or cfg.get('task')}, one sample each at T={cfg.get('eval_temperature')}")
    const = run_constant_answer(done[0]["dir"])
    if const is not None:
        print(f"one answer for every question, always {const[0]!r}, scores {const[1]:.3f} on this held-out set: an "
              "'after' at or below it may be a policy that learned that answer, not the task")
    print()
    print(f"| model | GRPO seed | held-out before | after | gain | after - constant | top answer, after | first "
          f"+{100 * args.target:.0f} pts at | wall time | tokens generated | min per point |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r, gain in zip(done, gains):
        hit = f"step {r['to_target'][1]}, {r['to_target'][0] / 60:.1f} min" if "to_target" in r else "never"
        tokens = sum(m.get("generated_tokens", 0) for m in r["metrics"])
        per_point = f"{r['seconds'] / 60 / gain:.1f}" if gain > 0 else "-"
        above = f"{100 * (r['after'] - const[1]):+.1f} pts" if const is not None else "-"
        print(f"| {model_name(models[r['ws']], r['ws'], bool(args.model))} | {r['g']} | {r['before']:.3f} | "
              f"{r['after']:.3f} | {gain:+.1f} pts | {above} | {r['top']} | {hit} | {r['seconds'] / 60:.1f} min | {tokens:,} | {per_point} |")
    std = statistics.stdev(gains) if len(gains) > 1 else 0.0
    hits = [r["to_target"][0] / 60 for r in done if "to_target" in r]
    print(f"| **all runs** | | | | mean {statistics.mean(gains):+.1f}, min {min(gains):+.1f}, max {max(gains):+.1f}, "
          f"std {std:.1f} pts | | | {len(hits)} of {len(done)}{f', latest {max(hits):.1f} min' if hits else ''} "
          f"| max {max(r['seconds'] for r in done) / 60:.1f} min | | |")
    if args.plot:
        plot(done, args.plot)
    if failed:
        sys.exit("\n".join(failed))


if __name__ == "__main__":
    main()
