"""The distillation loop closed on CPU: generate -> keep the verified traces -> SFT -> held-out accuracy.

    OMP_NUM_THREADS=2 python scripts/bench/bench_distill.py [--model .cache/smollm2-135m-instruct] [--problems 200]
        [--n 8] [--sft-seeds 0,1] [--epochs 2] [--lr 2e-5] [--out runs/bench-distill]

Rejection-sampling fine-tuning, as open-r1 builds its SFT data, but with the model as its own teacher:
  1. eval.py: greedy held-out accuracy of the model as it is (the first --eval-size rows of the built-in
     `word_problems` task's held-out split, eval.py's math prompt, as configs/word_problems_smollm2.toml
     scores it);
  2. scripts/generate.py: --n samples for each of --problems train-split problems, only the correct ones kept
     (math-verify), written as chat rows;
  3. sft.py on those rows (configs/word_problems_smollm2.toml's model, prompt and batch), once per SFT seed,
     checkpointed at the end;
  4. eval.py again on each SFT model.
Every stage is a subprocess running the command a user would type (printed before it runs; its log under
OUT/), and is skipped when its output already exists, so a killed run resumes with the same command. The
held-out problems never occur in training (their templates and numbers are held out: word_problems.py).
Prints a table: the stages' times, the traces kept, and accuracy before and after SFT per seed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from nanogrpo import tasks  # noqa: E402

CONFIG = ROOT / "configs" / "word_problems_smollm2.toml"
MAX_NEW_TOKENS = 200  # as the GRPO recipe: a longer answer is cut and scores 0


def run(cmd: list[str], log: Path) -> float:
    """Run one stage, its output to `log`; returns its seconds. A failure stops the script, naming the log."""
    print("$ " + " ".join(str(c) for c in cmd), flush=True)
    t0 = time.monotonic()
    with log.open("w") as f:
        rc = subprocess.call([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    if rc:
        sys.exit(f"bench_distill: exit {rc}, see {log}")
    return time.monotonic() - t0


def accuracy(results: Path) -> float:
    task = json.loads(results.read_text())["tasks"]["word_problems"]
    return task["metrics"]["pass@1:n=1"]


def evaluate(model: Path | str, out: Path, heldout: Path, args) -> tuple[float, float]:
    """(held-out greedy accuracy, seconds; 0 when already measured) of one model."""
    seconds = 0.0
    if not out.exists():
        seconds = run([sys.executable, "eval.py", "--model", model, "--tasks", f"word_problems={heldout}",
                       "--n", "1", "--temperature", "0", "--max-new-tokens", MAX_NEW_TOKENS,
                       "--sampler", args.sampler, "--out", out], out.with_suffix(".log"))
    return accuracy(out), seconds


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=".cache/smollm2-135m-instruct")
    ap.add_argument("--problems", type=int, default=200, help="train-split problems to sample traces for")
    ap.add_argument("--n", type=int, default=8, help="samples per problem")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--sft-seeds", default="0,1")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--rows-per-step", type=int, default=8)
    ap.add_argument("--eval-size", type=int, default=200)
    ap.add_argument("--sampler", default="vllm", choices=["torch", "vllm"])
    ap.add_argument("--out", default="runs/bench-distill")
    args = ap.parse_args(argv)
    out = (ROOT / args.out) if not Path(args.out).is_absolute() else Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.sft_seeds.split(",") if s.strip()]
    times: dict[str, float] = {}

    heldout = out / "heldout.jsonl"
    rows = tasks.load_rows("word_problems", split="test")[: args.eval_size]
    heldout.write_text("".join(json.dumps(r) + "\n" for r in rows))
    before, times["eval, before"] = evaluate(args.model, out / "eval-before.json", heldout, args)

    traces, sft_rows = out / "traces.jsonl", out / "sft.jsonl"
    if not sft_rows.exists():
        times["generate"] = run([sys.executable, "scripts/generate.py", "word_problems", "--model", args.model,
                                 "--split", "train", "--limit", args.problems, "--n", args.n, "--verify",
                                 "--template", "math_eval", "--temperature", args.temperature,
                                 "--max-new-tokens", MAX_NEW_TOKENS, "--sampler", args.sampler, "--batch", 25,
                                 "--out", traces, "--sft", sft_rows], out / "generate.log")
    kept = sft_rows.read_text().count("\n")
    if not kept:
        sys.exit(f"bench_distill: no verified trace in {traces}: nothing to fine-tune on")
    per_epoch = math.ceil(kept / args.rows_per_step)

    after: dict[int, float] = {}
    steps = per_epoch * args.epochs
    for seed in seeds:
        run_dir = out / f"sft-seed{seed}"
        final = run_dir / "checkpoints" / f"step_{steps:06d}"
        if not final.exists():
            times[f"sft, seed {seed}"] = run(
                [sys.executable, "sft.py", CONFIG, f"task={sft_rows}", f"out_dir={run_dir}", f"seed={seed}",
                 f"steps={steps}", f"prompts_per_step={args.rows_per_step}", f"lr={args.lr}",
                 "lr_schedule=constant", "warmup_steps=2", "save_every=0", "save_final=true", "eval_every=0"],
                out / f"sft-seed{seed}.log")
        after[seed], times[f"eval, seed {seed}"] = evaluate(final, out / f"eval-seed{seed}.json", heldout, args)

    gen = [json.loads(line) for line in traces.read_text().splitlines()]
    drawn = sum(r["n_generated"] for r in gen)
    print(f"\n{args.model}: {len(gen)} train problems x {args.n} samples at temperature {args.temperature}: "
          f"{kept} of {drawn} kept ({kept / max(drawn, 1):.1%}; {sum(bool(r['generations']) for r in gen)} problems "
          f"with at least one), SFT {args.epochs} epochs x {per_epoch} steps of {args.rows_per_step} rows, lr {args.lr}\n")
    accs = [after[s] for s in seeds]
    print(f"| held-out accuracy ({len(rows)} problems, greedy) | " + " | ".join(f"SFT seed {s}" for s in seeds)
          + " | mean | min | max |")
    print("| --- |" + " --- |" * (len(seeds) + 3))
    print("| before | " + " | ".join(f"{before:.1%}" for _ in seeds) + f" | {before:.1%} | {before:.1%} | {before:.1%} |")
    print(f"| after SFT ({args.epochs} epochs) | " + " | ".join(f"{a:.1%}" for a in accs)
          + f" | {statistics.mean(accs):.1%} | {min(accs):.1%} | {max(accs):.1%} |")
    print("\n| stage | minutes |\n| --- | --- |")
    for stage, sec in times.items():
        print(f"| {stage} | {sec / 60:.1f} |" if sec else f"| {stage} | (done earlier) |")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    main()
