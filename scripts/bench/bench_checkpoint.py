"""Checkpoint save and resume times (what the checkpoints' SHA-256 hashes cost): a table per model.

    python scripts/bench/bench_checkpoint.py [--model DIR ...] [--repeats 3]

For each model: the policy and AdamW after one step (the moments exist, as in a run), then `checkpoint.save` (weights,
optimizer shards, trainer state, the manifest with each file's size and hash) and the resume a run makes
(`checkpoint.open_run`, which checks every file, then `checkpoint.resume`, which reads the optimizer and trainer
state back), each timed `--repeats` times (the median is shown). Run it at two commits for a before / after; the
files are written under a temporary directory on the same disk as /tmp. One process, one thread per OMP_NUM_THREADS.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

from nanogrpo import checkpoint, data, dist  # noqa: E402
from nanogrpo import model as M  # noqa: E402


def bench(model_dir: str, repeats: int) -> dict:
    from transformers import AutoTokenizer

    policy = M.make_policy(model_dir, torch.device("cpu"), torch.float32, 512, False)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1.0)
    for p in policy.parameters():  # one step: AdamW's moments exist, as in a run's checkpoint
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    stream = data.PromptStream([{"problem": "1+1", "answer": "2"}], 1)
    saves, resumes, size = [], [], 0
    with tempfile.TemporaryDirectory() as out:
        (open(os.path.join(out, "metrics.jsonl"), "w")).close()  # a run there: resume=true is what it takes
        for step in range(1, repeats + 1):
            t = time.perf_counter()
            path = checkpoint.save(out, step, policy, optimizer, scheduler, tokenizer, {"data": stream.state_dict()},
                                   keep=1)
            saves.append(time.perf_counter() - t)
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            os.sync()
            t = time.perf_counter()
            ckpt = checkpoint.open_run(out, True)
            checkpoint.resume(ckpt, policy, optimizer, scheduler, stream)
            resumes.append(time.perf_counter() - t)
    return {"params": sum(p.numel() for p in policy.parameters()), "mb": size / 2**20,
            "save": statistics.median(saves), "resume": statistics.median(resumes)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", default=None, help="model directory (repeatable; default: the tiny one)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    dist.init("cpu")
    print("| model | parameters | checkpoint MB | save s | resume s (open_run + resume) |\n|---|---|---|---|---|")
    for model_dir in args.model or ["models/tiny-arithmetic"]:
        r = bench(model_dir, args.repeats)
        print(f"| {os.path.basename(model_dir.rstrip('/'))} | {r['params'] / 1e6:.1f}M | {r['mb']:.0f} | "
              f"{r['save']:.2f} | {r['resume']:.2f} |", flush=True)
    dist.close()


if __name__ == "__main__":
    main()
