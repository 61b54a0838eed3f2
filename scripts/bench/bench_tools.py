"""Does GRPO learn to use the tool? A tool recipe with and without tools, over warm starts and GRPO seeds.

    python scripts/bench/bench_tools.py --seeds 3 --grpo-seeds 1 --steps 100    # 3 warm starts x 1 GRPO seed x 2 arms
    python scripts/bench/bench_tools.py --seeds 3 --jobs 2 key=value ...        # overrides go to train.py
    python scripts/bench/bench_tools.py --task word_problems --seeds 1 --grpo-seeds 3 --jobs 2   # SmolLM2

--task multiply (default): the tiny model on 5-digit products, configs/multiply_tools.toml. Warm start 0 is the
committed model (models/tiny-multiply-tools); 1..N-1 are built here by `scripts/models/build_tiny_model.py --tools --seed S`.
--task word_problems: SmolLM2-135M-Instruct on "word_problems_large", configs/word_problems_smollm2_tools.toml; warm
start S is built here by `scripts/models/smollm2_tools_warm_start.py --seed S` (kept in OUT/warm-start-S for re-use).

Each run is `train.py CONFIG model=... seed=G tools=true|false` in a subprocess (log: OUT/ws{S}-g{G}-{arm}.log).
Held-out accuracy is greedy, on the recipe's 200 held-out problems, which no training row or warm start
contains; held-out tool use is the share of those answers that ran code. The "no tools" arm is the same recipe
with code blocks left as plain text, and the same prompt (a chat model keeps the tool instruction it was warm-
started with: the difference between the arms is only whether the code runs).
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
import bench_learning  # noqa: E402
from bench_learning import read_metrics  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
DEFAULT_MODEL = ROOT / "models" / "tiny-multiply-tools"
CONFIGS = {"multiply": ROOT / "configs" / "multiply_tools.toml",
           "word_problems": ROOT / "configs" / "word_problems_smollm2_tools.toml"}


def warm_start(task: str, seed: int, out: Path, threads: int) -> Path:
    if task == "multiply":
        return bench_learning.warm_start(seed, out, threads, DEFAULT_MODEL, ("--tools",), quiet=True)
    path = out / f"warm-start-{seed}"
    if not (path / "warm_start.json").is_file():  # written last: a build that was cut off is redone
        print(f"building warm start {seed} -> {path}", flush=True)
        with open(out / f"warm-start-{seed}.log", "w") as log:
            subprocess.run([sys.executable, str(ROOT / "scripts" / "models" / "smollm2_tools_warm_start.py"), "--out", str(path),
                            "--seed", str(seed)], check=True, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                           env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    return path


def no_tools_overrides(task: str) -> list[str]:
    """The comparison arm: code stays text. A chat template keeps the system message the tools arm gets."""
    if task == "multiply":
        return ["tools=false"]
    from nanogrpo.tools import ToolConfig, system_prompt

    return ["tools=false", f"system_prompt={system_prompt(ToolConfig())}"]


def summary(out_dir: Path) -> dict:
    rows = read_metrics(out_dir)
    evals = [r for r in rows if r.get("heldout_accuracy") is not None]
    steps = [r for r in rows if r["step"] >= 0 and "time_step" in r]
    first, last = steps[:5], steps[-5:]
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    use = lambda rs: mean([r["tool_use_frac"] for r in rs if "tool_use_frac" in r])  # noqa: E731  None without tools
    mid = evals[len(evals) // 2] if len(evals) > 2 else None  # eval_every = steps / 2: the half-way point too
    return {"acc_start": evals[0]["heldout_accuracy"], "acc_end": evals[-1]["heldout_accuracy"],
            "acc_mid": mid and mid["heldout_accuracy"], "mid_step": mid and mid["step"],
            "use_start": evals[0].get("heldout_tool_use"), "use_end": evals[-1].get("heldout_tool_use"),
            "train_use_first": use(first), "train_use_last": use(last),
            "time_tools": mean([r.get("time_tools", 0.0) for r in steps]), "time_step": mean([r["time_step"] for r in steps])}


def pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def pct1(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def stats(xs: list[float]) -> str:
    return (f"mean {100 * statistics.mean(xs):.1f} | min {100 * min(xs):.1f} | max {100 * max(xs):.1f} | "
            f"std {100 * (statistics.stdev(xs) if len(xs) > 1 else 0.0):.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=sorted(CONFIGS), default="multiply")
    ap.add_argument("--seeds", type=int, default=3, help="warm starts (multiply: 0 = the committed model)")
    ap.add_argument("--grpo-seeds", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0, help="GRPO steps (0: the recipe's)")
    ap.add_argument("--mid-eval", action=argparse.BooleanOptionalAction, default=None,
                    help="a held-out eval half-way too (default: multiply yes, word_problems no)")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time (cores split between them)")
    ap.add_argument("--out", default="runs/bench-tools-TASK")
    ap.add_argument("overrides", nargs="*", help="key=value, passed to every train.py run")
    args = ap.parse_args()
    from nanogrpo import config as C

    recipe = CONFIGS[args.task]
    steps = args.steps or C.load([str(recipe)]).steps
    mid = args.mid_eval if args.mid_eval is not None else args.task == "multiply"
    out = ROOT / args.out if args.out != ap.get_default("out") else ROOT / f"runs/bench-tools-{args.task}"
    out.mkdir(parents=True, exist_ok=True)
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}

    runs = []  # (warm seed, grpo seed, arm, out dir, command)
    for s in range(args.seeds):
        model = warm_start(args.task, s, out, threads)
        for g in range(args.grpo_seeds):
            for arm, flags in (("tools", ["tools=true"]), ("no tools", no_tools_overrides(args.task))):
                d = out / f"ws{s}-g{g}-{arm.replace(' ', '')}"
                cmd = [sys.executable, str(ROOT / "train.py"), str(recipe), f"model={model}", f"seed={g}", *flags,
                       f"steps={steps}", f"eval_every={steps // 2 if mid else steps}", f"out_dir={d}", "save_final=false",
                       *args.overrides]
                runs.append((s, g, arm, d, cmd))
    todo = [r for r in runs if not (r[3] / "metrics.jsonl").is_file() or len(read_metrics(r[3])) < steps + 1]
    running, t0, minutes, failed = [], time.time(), {}, []
    while todo or running:
        while todo and len(running) < args.jobs:
            s, g, arm, d, cmd = todo.pop(0)
            if d.exists():
                import shutil

                shutil.rmtree(d)  # an interrupted run starts over (its log would be refused by train.py)
            d.mkdir(parents=True)
            log = open(d.parent / f"{d.name}.log", "w")
            running.append((subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT), d, time.time()))
            print(f"started {d.name}", flush=True)
        for p, d, start in list(running):
            if p.poll() is not None:
                running.remove((p, d, start))
                minutes[d] = (time.time() - start) / 60
                print(f"finished {d.name} (exit {p.returncode}, {minutes[d]:.1f} min)", flush=True)
                if p.returncode:  # the runs already going finish (their results stay for the next try); no new ones
                    failed.append(f"{d.name} failed (exit {p.returncode}): see {d.parent / (d.name + '.log')}")
                    todo.clear()
        time.sleep(2)
    if failed:
        sys.exit("\n".join(failed))

    print(f"\n{args.task}: {steps} GRPO steps per run; held-out: 200 problems, greedy. Wall {(time.time() - t0) / 60:.1f} min.\n")
    print("| warm start | GRPO seed | arm | held-out acc start -> half-way -> end | held-out tool use start -> end | "
          "train tool use first 5 -> last 5 steps | s/step (in tools) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    ends, mids = {"tools": [], "no tools": []}, {"tools": [], "no tools": []}
    for s, g, arm, d, _ in runs:
        m = summary(d)
        ends[arm].append(m["acc_end"])
        if m["acc_mid"] is not None:
            mids[arm].append(m["acc_mid"])
        print(f"| {s} | {g} | {arm} | {pct1(m['acc_start'])} -> {pct1(m['acc_mid'])} -> {pct1(m['acc_end'])} | "
              f"{pct(m['use_start'])} -> {pct(m['use_end'])} | {pct(m['train_use_first'])} -> {pct(m['train_use_last'])} | "
              f"{m['time_step']:.2f} ({m['time_tools']:.2f}) |")
    print()
    for arm in ends:
        if mids[arm]:
            print(f"{arm}: held-out accuracy half-way, {len(mids[arm])} runs: {stats(mids[arm])}")
        print(f"{arm}: held-out accuracy at the end, {len(ends[arm])} runs: {stats(ends[arm])}")
    # paired: each (warm start, GRPO seed) runs both arms, so the gap is measured run against run
    gaps = [t - n for t, n in zip(ends["tools"], ends["no tools"])]
    print(f"tools - no tools at the end, per (warm start, GRPO seed): {', '.join(f'{100 * x:+.1f}' for x in gaps)}; "
          f"{stats(gaps)}")


if __name__ == "__main__":
    main()
