"""LoRA against full fine-tuning on the same recipe: optimizer memory, step time, held-out accuracy.

    OMP_NUM_THREADS=1 nice -n 19 python scripts/bench/bench_lora.py [--steps 6] [--eval-size 50] [--modes full,lora]

For each mode it runs `train.py CONFIG` (default configs/word_problems_smollm2.toml, SmolLM2-135M-Instruct:
see docs/eval.md for the conversion) for the same number of steps, with a held-out eval at the start
and the end (`eval_size` problems, the recipe's greedy eval), in its own process, and reads the run's
metrics.jsonl (a finished run in OUT/MODE is reused). The runs' update times depend on how many
completions had a non-zero advantage, which differs between runs after step 1; so, in this process, it
also builds each mode's policy and optimizer as train.py does and times grpo.step on the same fixed
rollouts, the modes interleaved, and counts what AdamW really holds (its state tensors' bytes).
Prints markdown tables. The two modes differ only in lora_rank / lora_alpha / lr.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from nanogrpo import config as C  # noqa: E402


def update_bench(cfg: C.Config, modes: dict, repeats: int, n_seqs: int, prompt_len: int, completion_len: int) -> dict:
    """Per mode: trainable parameters, the bytes AdamW really holds (its state after a step), and the time
    of one grpo.step on the same fixed rollouts (the update alone: forward, backward, optimizer step).
    The modes' steps are interleaved, `repeats` rounds, so a machine shared with other jobs slows both
    alike; the fastest round is reported."""
    from dataclasses import replace

    from nanogrpo import dist, grpo
    from nanogrpo import model as M
    from nanogrpo.grpo import make_optimizer

    from transformers import AutoConfig

    dist.init("cpu")
    g = torch.Generator().manual_seed(0)
    vocab = min(AutoConfig.from_pretrained(cfg.model).vocab_size, 20000)
    rollouts = []  # every advantage != 0, so every completion runs (no zero-advantage skip)
    for i in range(n_seqs):
        prompt = torch.randint(2, vocab, (prompt_len,), generator=g).tolist()
        comp = torch.randint(2, vocab, (completion_len,), generator=g).tolist()
        rollouts.append(grpo.Rollout(prompt, comp, [-1.0] * completion_len, float(i % 2), False, 1.0 if i % 2 else -1.0))
    built = {}
    for m, (rank, alpha, _) in modes.items():
        mcfg = replace(cfg, lora_rank=rank, lora_alpha=alpha)
        policy = M.make_policy(cfg.model, torch.device("cpu"), torch.float32, cfg.logprob_chunk, False, lora_rank=rank,
                               lora_alpha=alpha, lora_targets=cfg.lora_targets)
        trainable = [p for p in policy.parameters() if p.requires_grad]
        # as train.py builds it; a tiny constant lr: the rounds time the same update on (almost) the same weights
        opt, sched = make_optimizer(trainable, replace(mcfg, lr=1e-9, lr_schedule="constant", warmup_steps=0), 1)
        built[m] = (mcfg, policy, trainable, opt, sched, [])
    for _ in range(repeats):
        for m, (mcfg, policy, _, opt, sched, times) in built.items():
            t0 = time.perf_counter()
            grpo.step(policy, None, opt, sched, rollouts, mcfg, pad_id=0)
            times.append(time.perf_counter() - t0)
            print(f"[update] {m}: {times[-1]:.1f} s", flush=True)
    out = {}
    for m, (_, policy, trainable, opt, _, times) in built.items():
        state = sum(t.numel() * t.element_size() for st in opt.state.values() for t in st.values() if torch.is_tensor(t))
        n = sum(p.numel() for p in trainable)
        out[m] = {"trainable": n, "total": sum(p.numel() for p in policy.parameters()), "optim_bytes": state,
                  "grad_bytes": 4 * n, "update_s": min(times), "update_all": times}
    return out


def run(mode: str, args, extra: list[str]) -> dict:
    """One training run in its own process; its metrics.jsonl summarised."""
    out = Path(args.out) / mode
    if (out / "metrics.jsonl").exists():  # a run cut short is reported with the steps it logged
        print(f"[{mode}] reusing the run in {out}", flush=True)
    else:
        cmd = [sys.executable, str(ROOT / "train.py"), args.config, f"out_dir={out}", f"steps={args.steps}",
               f"eval_every={args.steps}", f"eval_size={args.eval_size}", "save_every=0", "save_final=false", *extra]
        print(f"[{mode}] {' '.join(cmd)}", flush=True)
        t0 = time.time()
        subprocess.run(cmd, check=True, cwd=ROOT)
        print(f"[{mode}] {time.time() - t0:.0f} s", flush=True)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "time_step" in r]
    tokens = sum(r["train_tokens"] for r in steps)
    evals = [r for r in rows if "heldout_accuracy" in r]
    mean = lambda k: sum(r[k] for r in steps) / len(steps)  # noqa: E731
    return {"steps": len(steps), "time_step": mean("time_step"), "time_train": mean("time_train"),
            "time_generate": mean("time_generate"), "time_sync": mean("time_sync"),
            "train_ms_per_token": 1000 * sum(r["time_train"] for r in steps) / max(tokens, 1),
            "step1_train": steps[0]["time_train"], "step1_tokens": steps[0]["train_tokens"],
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
    ap.add_argument("--update-repeats", type=int, default=2, help="interleaved rounds of the fixed-rollout update timing")
    ap.add_argument("--update-seqs", type=int, default=16, help="fixed rollouts: completions per update")
    ap.add_argument("--no-runs", action="store_true", help="only the memory / update measurement, no training runs")
    a = ap.parse_args(argv)
    cfg = C.load([a.config])
    modes = {"full": (0, a.lora_alpha, []),
             "lora": (a.lora_rank, a.lora_alpha, [f"lora_rank={a.lora_rank}", f"lora_alpha={a.lora_alpha}", f"lr={a.lora_lr}"])}
    modes = {m: modes[m] for m in a.modes.split(",") if m}
    res = {} if a.no_runs else {m: run(m, a, v[2]) for m, v in modes.items()}
    upd = update_bench(cfg, modes, a.update_repeats, a.update_seqs, 40, 64)

    print(f"\n{cfg.model}, {a.config}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print(f"\nmemory and the update alone ({a.update_seqs} fixed completions of 64 tokens after 40-token prompts, "
          f"fastest of {a.update_repeats} interleaved rounds):\n")
    print("| mode | trainable params | AdamW state | grads | update s |")
    print("| --- | --- | --- | --- | --- |")
    label = lambda m: m if m == "full" else f"{m} r={a.lora_rank} alpha={a.lora_alpha:g}"  # noqa: E731
    for m, x in upd.items():
        print(f"| {label(m)} | {x['trainable'] / 1e6:.2f} M of {x['total'] / 1e6:.1f} M | {x['optim_bytes'] / 2**20:.1f} MiB "
              f"| {x['grad_bytes'] / 2**20:.1f} MiB | {x['update_s']:.1f} ({', '.join(f'{t:.1f}' for t in x['update_all'])}) |")
    if res:
        print(f"\ntraining runs: {a.steps} steps each, held-out = {a.eval_size} problems (greedy); times are means per step\n")
        print("| mode | lr | steps done | step s | update s | update ms / trained token | step-1 update s (same rollouts) "
              "| generate s | sync s | train acc | held-out start | held-out end |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for m, r in res.items():
            lr = a.lora_lr if m == "lora" else cfg.lr
            print(f"| {label(m)} | {lr:g} | {r['steps']} | {r['time_step']:.1f} | {r['time_train']:.1f} | {r['train_ms_per_token']:.1f} "
                  f"| {r['step1_train']:.1f} ({r['step1_tokens']:.0f} tokens) | {r['time_generate']:.1f} | {r['time_sync']:.2f} "
                  f"| {r['train_accuracy']:.3f} | {r['acc_start']:.3f} | {r['acc_end']:.3f} |")


if __name__ == "__main__":
    main()
