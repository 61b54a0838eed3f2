"""A recipe's GRPO step, phase by phase, for several variants side by side in one run.

    python scripts/bench/bench_step.py configs/tiny_arithmetic.toml "torch: sampler=torch" "vllm: sampler=vllm"
    python scripts/bench/bench_step.py configs/tiny_arithmetic.toml "after:" "before@/tmp/before:" --steps 40
    python scripts/bench/bench_step.py configs/word_problems_smollm2_tools.toml "torch: sampler=torch" "vllm:" --steps 4

A variant is `NAME[@DIR]: key=value ...`: train.py's overrides, run in this checkout or in DIR (another checkout, e.g.
`git worktree add /tmp/before <commit>`: the before of a before/after). Every variant runs `train.py CONFIG
steps=N eval_every=0 save_final=false out_dir=TMP <overrides>` in a subprocess, the variants take turns for
--rounds rounds, and the table gives per variant the median over every step after the first --skip of each run
(warm-up: first calls, page faults) of each phase's seconds (metrics.jsonl's time_generate, time_reward,
time_train, time_sync, time_step), the tokens the sampler produced per second of generation (completion tokens,
tool outputs included with tools = true), and the step time against the first variant's.
Run it with nothing else on the machine: the ratios, not the seconds, are what carries to another machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_learning import read_metrics  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
PHASES = ("time_generate", "time_reward", "time_train", "time_sync", "time_step")


def parse_variant(spec: str) -> tuple[str, Path, list[str]]:
    head, _, overrides = spec.partition(":")
    name, _, checkout = head.strip().partition("@")
    return name, Path(checkout).resolve() if checkout else ROOT, overrides.split()


def run(config: Path, checkout: Path, overrides: list[str], steps: int, out: Path, log: Path) -> list[dict]:
    cmd = [sys.executable, "train.py", str(config), f"steps={steps}", "eval_every=0", "save_final=false",
           f"out_dir={out}", *overrides]
    with open(log, "w") as f:
        done = subprocess.run(cmd, cwd=checkout, stdout=f, stderr=subprocess.STDOUT, env=os.environ)
    if done.returncode != 0:
        sys.exit(f"bench_step: {' '.join(cmd)} (in {checkout}) failed with exit code {done.returncode}; see {log}")
    return read_metrics(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("variants", nargs="+", help='"NAME[@DIR]: key=value ..."')
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--skip", type=int, default=2, help="warm-up steps of each run left out")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    config = Path(args.config).resolve()
    if not config.is_file():
        sys.exit(f"bench_step: no config file {args.config}")
    if args.steps <= args.skip:
        sys.exit(f"bench_step: --steps {args.steps} leaves nothing after --skip {args.skip}")
    variants = [parse_variant(v) for v in args.variants]
    for name, checkout, _ in variants:
        if not (checkout / "train.py").is_file():
            sys.exit(f"bench_step: variant {name!r}: {checkout} has no train.py")
    from nanogrpo import config as C

    # completions per step of each variant (an override may change it): the generated tokens/s column
    per_step = {}
    for name, _, overrides in variants:
        c = C.load([str(config), *overrides], here=False)
        per_step[name] = c.prompts_per_step * c.group_size
    rows = {name: [] for name, _, _ in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, checkout, overrides in variants:
                out = Path(tmp) / f"{name}-{r}"
                metrics = run(config, checkout, overrides, args.steps, out, Path(tmp) / f"{name}-{r}.log")
                rows[name] += metrics[args.skip:]
                m = metrics[args.skip:]
                print(f"round {r + 1}/{args.rounds} {name}: step {statistics.median(x['time_step'] for x in m):.3f} s, "
                      f"generate {statistics.median(x['time_generate'] for x in m):.3f} s", file=sys.stderr, flush=True)

    print(f"\n# {config.name}, {args.steps} steps x {args.rounds} rounds per variant, medians over the steps after the "
          f"first {args.skip} of each run; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print("| variant | generate s | reward s | train s | sync s | step s | generated tok/s | step vs first |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    first = None
    for name, checkout, overrides in variants:
        med = {p: statistics.median(x[p] for x in rows[name]) for p in PHASES}
        tps = statistics.median(x["completion_len_mean"] * per_step[name] / x["time_generate"] for x in rows[name])
        first = first or med["time_step"]
        label = name + (f" ({' '.join(overrides)})" if overrides else "")
        print(f"| {label} | {med['time_generate']:.3f} | {med['time_reward']:.3f} | {med['time_train']:.3f} | "
              f"{med['time_sync']:.3f} | {med['time_step']:.3f} | {tps:.0f} | {med['time_step'] / first:.2f}x |")


if __name__ == "__main__":
    main()
