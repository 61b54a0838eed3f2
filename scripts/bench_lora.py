"""LoRA against full fine-tuning on the same recipe: optimizer memory, step time, held-out accuracy.

    OMP_NUM_THREADS=1 nice -n 19 python scripts/bench_lora.py [--steps 6] [--eval-size 50] [--modes full,lora]

For each mode it runs `train.py CONFIG` (default configs/word_problems_smollm2.toml, SmolLM2-135M-Instruct:
see docs/eval.md for the conversion) for the same number of steps, with a held-out eval at the start
and the end (`eval_size` problems, the recipe's greedy eval), in its own process, and reads the run's
metrics.jsonl. Separately, in this process, it builds each mode's policy and optimizer and takes one
optimizer step on zero gradients to count what AdamW really holds (its state tensors' bytes).
Prints one markdown table. The two modes differ only in lora_rank / lora_alpha / lr.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nanogrpo import config as C  # noqa: E402


def optimizer_memory(cfg: C.Config, lora_rank: int, lora_alpha: float) -> dict:
    """Trainable parameters and the bytes AdamW keeps for them, on this mode's policy (CPU, fp32)."""
    from nanogrpo import dist
    from nanogrpo import model as M

    dist.init("cpu")
    policy = M.make_policy(cfg.model, torch.device("cpu"), torch.float32, cfg.logprob_chunk, False, lora_rank=lora_rank,
                           lora_alpha=lora_alpha, lora_targets=cfg.lora_targets)
    trainable = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-5, fused=True)  # as train.py builds it
    for p in trainable:
        p.grad = torch.zeros_like(p)
    opt.step()  # AdamW allocates its state on the first step
    state = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values() if torch.is_tensor(t))
    n_trainable = sum(p.numel() for p in trainable)
    n_total = sum(p.numel() for p in policy.parameters())
    del opt, policy, trainable
    return {"trainable": n_trainable, "total": n_total, "optim_bytes": state, "grad_bytes": 4 * n_trainable}


def run(mode: str, args, extra: list[str]) -> dict:
    """One training run in its own process; its metrics.jsonl summarised."""
    out = Path(args.out) / mode
    if (out / "metrics.jsonl").exists():
        print(f"[{mode}] reusing the finished run in {out}", flush=True)
    else:
        cmd = [sys.executable, str(ROOT / "train.py"), args.config, f"out_dir={out}", f"steps={args.steps}",
               f"eval_every={args.steps}", f"eval_size={args.eval_size}", "save_every=0", "save_final=false", *extra]
        print(f"[{mode}] {' '.join(cmd)}", flush=True)
        t0 = time.time()
        subprocess.run(cmd, check=True, cwd=ROOT)
        print(f"[{mode}] {time.time() - t0:.0f} s", flush=True)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "time_step" in r]
    evals = [r for r in rows if "heldout_accuracy" in r]
    mean = lambda k: sum(r[k] for r in steps) / len(steps)  # noqa: E731
    return {"steps": len(steps), "time_step": mean("time_step"), "time_train": mean("time_train"),
            "time_generate": mean("time_generate"), "time_sync": mean("time_sync"),
            "acc_start": evals[0]["heldout_accuracy"] if evals else float("nan"),
            "acc_end": evals[-1]["heldout_accuracy"] if len(evals) > 1 else float("nan"),
            "train_accuracy": mean("accuracy")}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/word_problems_smollm2.toml")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--eval-size", type=int, default=50)
    ap.add_argument("--modes", default="full,lora")
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--lora-alpha", type=float, default=16.0)
    ap.add_argument("--lora-lr", type=float, default=1e-4, help="LoRA usually wants ~10x the full fine-tuning lr")
    ap.add_argument("--out", default="runs/bench-lora")
    ap.add_argument("--memory-only", action="store_true", help="only count the optimizer state, no training runs")
    a = ap.parse_args(argv)
    cfg = C.load([a.config])
    modes = {"full": (0, a.lora_alpha, []),
             "lora": (a.lora_rank, a.lora_alpha, [f"lora_rank={a.lora_rank}", f"lora_alpha={a.lora_alpha}", f"lr={a.lora_lr}"])}
    chosen = [m for m in a.modes.split(",") if m]
    mem = {m: optimizer_memory(cfg, modes[m][0], modes[m][1]) for m in chosen}
    res = {} if a.memory_only else {m: run(m, a, modes[m][2]) for m in chosen}
    child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # GiB (Linux: KiB)

    print(f"\n{cfg.model}, {a.config}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print("| mode | trainable params | AdamW state | grads | step s | update s | generate s | sync s | held-out start | held-out end | train acc |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for m in chosen:
        x, r = mem[m], res.get(m)
        line = (f"| {m}{'' if m == 'full' else f' r={a.lora_rank}'} | {x['trainable'] / 1e6:.2f} M of {x['total'] / 1e6:.1f} M "
                f"| {x['optim_bytes'] / 2**20:.1f} MiB | {x['grad_bytes'] / 2**20:.1f} MiB")
        if r:
            line += (f" | {r['time_step']:.1f} | {r['time_train']:.1f} | {r['time_generate']:.1f} | {r['time_sync']:.2f} "
                     f"| {r['acc_start']:.3f} | {r['acc_end']:.3f} | {r['train_accuracy']:.3f} |")
        else:
            line += " | - | - | - | - | - | - | - |"
        print(line)
    if res:
        print(f"\nsteps per run: {a.steps}; held-out: {a.eval_size} problems; step times are means over the steps; "
              f"largest child RSS {child_rss:.2f} GiB")


if __name__ == "__main__":
    main()
