"""Peak memory and time of one GRPO update for a config, over micro-batch layouts and activation checkpointing.

    python scripts/bench/bench_memory.py configs/word_problems_smollm2.toml               # the grid below
    python scripts/bench/bench_memory.py configs/tiny_arithmetic.toml --grid micro_batch_size=32,128
    python scripts/bench/bench_memory.py CONFIG key=value ... --grid KEY=V1,V2 --grid KEY2=V1,V2 --steps 3 --json out.json
    python scripts/bench/bench_memory.py CONFIG --grid micro_batch_tokens=4096 --profile 20   # + the 20 ops taking most time

Each point of the grid (every combination of the --grid values; default: padded and packed micro-batches,
activation checkpointing off and on) runs in a fresh process, because peak RSS is a process's high-water
mark. The process builds the trainer's model and optimizer as train.py does (`model.make_policy`,
`grpo.make_optimizer`), makes one step's rollouts (the config's first prompts_per_step prompts from its
task, encoded as train.py encodes them, group_size completions each of --completion-tokens random tokens,
default max_new_tokens: the longest a step can be; non-zero advantages, so every completion is in the
update), runs one warm-up update on the first group alone (it creates AdamW's state and touches every
kernel), then --steps updates on all of them (`grpo.step`, default 2); the time is the last one's, the peak
the process's high-water mark. The last, because the first update on all of them still pays one-time costs
(SmolLM2 recipe, packed: 86.8 s, then 74.9 s; a process's first update also keeps ~9 MiB for good,
tests/test_memory.py): the second is what every later step of a run costs.

Reported per point: peak memory (CPU: the process's peak RSS; GPU: max_memory_allocated), the planner's
figure for the same config (nanogrpo/memory.py: weights + gradients + AdamW + activations + runtime), the
update's seconds, and its model FLOP/s as a share of this machine's fp32 (CPU) / bf16 (GPU) matmul peak,
measured by the same process with the same threads right after its updates (on a shared machine the
peak moves from one point to the next). Model FLOPs = 6 x (decoder matmul parameters x every token +
lm_head x completion tokens: the trainer sends only completion positions through the lm_head) + causal
attention 6 x L^2 x d_attn x layers per sequence; recomputation (activation checkpointing) is not work.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import random
import resource
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
if "--worker" not in sys.argv:  # a worker imports the trainer from its PYTHONPATH (--repo)
    sys.path.insert(0, str(ROOT))

DEFAULT_GRID = ["micro_batch_tokens=0,4096", "activation_checkpointing=false,true"]
GIB = 2**30


def rss_peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def matmul_peak(device: str, n: int = 2048, repeats: int = 10) -> float:
    """Best FLOP/s of an (n, n) @ (n, n) matmul: fp32 on CPU, bf16 on GPU."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        a @ b
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def update_flops(hf_config, lengths: list[tuple[int, int]], matmul_params: int, lm_head_params: int) -> float:
    """Model FLOPs of one update on (prompt, completion) lengths (see the module docstring)."""
    heads = hf_config.num_attention_heads
    d_attn = heads * (getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads)
    tokens = sum(p + c for p, c in lengths)
    attention = sum(6 * (p + c) ** 2 * d_attn * hf_config.num_hidden_layers for p, c in lengths)
    return 6 * (matmul_params * tokens + lm_head_params * sum(c for _, c in lengths)) + attention


# ---------------------------------------------------------------------------------------------- one point


def worker(argv: list[str], steps: int, completion_tokens: int, seed: int, profile: int = 0) -> dict:
    """Runs in its own process: build, update `steps` times, report memory and times."""
    base = rss_peak()
    import train
    from nanogrpo import config as C
    from nanogrpo import dist, grpo
    from nanogrpo import model as M
    try:
        from nanogrpo.rollout import encode_prompts
    except ImportError:  # an older checkout (--repo): encode_prompts lived in evaluate.py
        from nanogrpo.evaluate import encode_prompts
    from nanogrpo.grpo import make_optimizer

    cfg = C.load(argv)
    # an older checkout (--repo) may predate cpu_allocator: it then runs with glibc's default allocator
    allocator = getattr(cfg, "cpu_allocator", None)
    device = dist.init(cfg.device, allocator) if allocator else dist.init(cfg.device)
    on_gpu = device.type == "cuda"
    dtype = torch.bfloat16 if (cfg.dtype == "bfloat16" or (cfg.dtype == "auto" and on_gpu)) else torch.float32
    torch.manual_seed(cfg.seed)
    imported = rss_peak()
    tokenizer = M.load_tokenizer(cfg.model)
    rows = train.load_task(cfg)[0][: cfg.prompts_per_step]
    prompts = encode_prompts(rows, tokenizer, cfg)
    policy = M.make_policy(cfg.model, device, dtype, cfg.logprob_chunk, cfg.activation_checkpointing,
                           compile=cfg.compile, attention=cfg.attention)
    optimizer, scheduler = make_optimizer(policy.parameters(), cfg, (steps + 1) * cfg.mu)
    n = completion_tokens or cfg.max_new_tokens
    rng = random.Random(seed)
    special = set(tokenizer.all_special_ids)
    vocab = [t for t in range(min(len(tokenizer), policy.hf.config.vocab_size)) if t not in special]
    rollouts = [grpo.Rollout(p, [rng.choice(vocab) for _ in range(n)], [0.0] * n, 1.0, False,
                             rng.choice([-1, 1]) * (0.1 + rng.random()))
                for p in prompts for _ in range(cfg.group_size)]
    loaded = rss_peak()
    grpo.step(policy, None, optimizer, scheduler, rollouts[: cfg.group_size], cfg, tokenizer.pad_token_id)  # warm-up
    times = []
    for _ in range(steps):
        if on_gpu:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if profile else nullcontext() as prof:
            grpo.step(policy, None, optimizer, scheduler, rollouts, cfg, tokenizer.pad_token_id)
        if on_gpu:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if profile:  # where the update's time goes, by op (self time: an op's own, not its children's)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=profile), file=sys.stderr)
    peak = torch.cuda.max_memory_allocated() if on_gpu else rss_peak()
    # this point's own matmul peak, right after its updates: on a shared machine the peak moves between points
    matmul = matmul_peak(device.type)
    hf_cfg = policy.hf.config
    lm_head = hf_cfg.vocab_size * hf_cfg.hidden_size
    matmul_params = sum(q.numel() for name, q in policy.hf.named_parameters()
                        if "embed_tokens" not in name and "lm_head" not in name and q.dim() == 2)
    lengths = [(len(r.prompt_ids), len(r.completion_ids)) for r in rollouts]
    out = {"peak_bytes": peak, "rss_base": base, "rss_imported": imported, "rss_loaded": loaded, "times": times,
           "micro_batches": len(grpo.make_batches(rollouts, cfg.micro_batch_size, 0, cfg, cfg.micro_batch_tokens)),
           "tokens": sum(p + c for p, c in lengths), "completion_tokens": n, "sequences": len(rollouts),
           "prompt_tokens_max": max(p for p, _ in lengths),
           "flops": update_flops(hf_cfg, lengths, matmul_params, lm_head), "device": device.type, "matmul_peak": matmul}
    try:  # the planner's figure for the same config and shapes (absent in older checkouts)
        from nanogrpo import memory

        plan = memory.plan(cfg, memory.shape_of(hf_cfg), world=dist.world_size(), device=device.type,
                           prompt_tokens=out["prompt_tokens_max"], completion_tokens=n, sampler=False)
        out["plan"] = {**dataclasses.asdict(plan), "peak": plan.peak, "fits": plan.fits}
    except ImportError:
        out["plan"] = None
    dist.close()
    return out


# ---------------------------------------------------------------------------------------------- the grid


def grid_points(specs: list[str]) -> list[list[str]]:
    axes = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        if not sep or not values:
            raise SystemExit(f"--grid takes KEY=V1,V2,...; got {spec!r}")
        axes.append([f"{key}={v}" for v in values.split(",")])
    return [list(p) for p in itertools.product(*axes)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", help="CONFIG.toml, then key=value overrides applied to every point")
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--grid", action="append", help=f"KEY=V1,V2 (repeatable); default: {' '.join(DEFAULT_GRID)}")
    ap.add_argument("--steps", type=int, default=2, help="updates per point after the warm-up; the last is reported (default 2)")
    ap.add_argument("--completion-tokens", type=int, default=0, help="tokens per completion (default: max_new_tokens)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="", help="also write every point's raw figures here")
    ap.add_argument("--repo", action="append", default=[], metavar="DIR",
                    help="also run every point with the trainer of this checkout (e.g. a git worktree of an older "
                         "commit), right after this one's: before/after side by side (repeatable)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="also print the N ops with the most self time of each point's timed updates (torch.profiler; "
                         "it slows the update, so read the times from a run without it)")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(json.loads(a.worker), a.steps, a.completion_tokens, a.seed, a.profile)))
        return
    from nanogrpo import config as C

    base = [a.config, *a.overrides]
    points = grid_points(a.grid or DEFAULT_GRID)
    for p in points:  # every point's config is valid before anything runs
        C.load(base + p)
    device = "cuda" if torch.cuda.is_available() and C.load(base).device != "cpu" else "cpu"
    where = torch.cuda.get_device_name() if device == "cuda" else f"{os.cpu_count()} CPUs"
    print(f"# {' '.join(base)} | {device} ({where}), torch {torch.__version__}, threads {torch.get_num_threads()} | "
          f"matmul peak: {'bf16' if device == 'cuda' else 'fp32'} 2048^3, best of 10, measured by each point after "
          "its updates", flush=True)
    repos = [("", ROOT)] + [(f"{Path(r).name}: ", Path(r).resolve()) for r in a.repo]
    for _, repo in repos[1:]:
        if not (repo / "nanogrpo" / "grpo.py").is_file():
            raise SystemExit(f"--repo {repo}: not a nanogrpo checkout")
    results = []
    for p in points:
        for label, repo in repos:  # this checkout, then each --repo: side by side, on the same machine state
            cmd = [sys.executable, str(Path(__file__).resolve()), a.config, "--worker", json.dumps(base + p), "--steps",
                   str(a.steps), "--completion-tokens", str(a.completion_tokens), "--seed", str(a.seed),
                   "--profile", str(a.profile)]
            t0 = time.time()
            # the worker imports the trainer of `repo` (its train.py, nanogrpo/); the config's paths stay ROOT's
            env = {**os.environ, "PYTHONPATH": str(repo)}
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
            name = label + " ".join(p)
            if r.returncode:
                print(f"  {name}: failed\n{r.stderr[-2000:]}", flush=True)
                continue
            if a.profile:
                print(r.stderr[r.stderr.find("---"):], flush=True)
            res = json.loads(r.stdout.strip().splitlines()[-1])
            res["point"] = [label.rstrip(": ")] * bool(label) + p
            results.append(res)
            print(f"  {name}: peak {res['peak_bytes'] / GIB:.2f} GiB, updates {['%.1f' % t for t in res['times']]} s "
                  f"({time.time() - t0:.0f} s with start-up)", flush=True)
    if not results:
        raise SystemExit("no point ran")
    r0 = results[0]
    print(f"\n{r0['sequences']} sequences, {r0['tokens']} tokens (prompts up to {r0['prompt_tokens_max']}, completions "
          f"{r0['completion_tokens']}); {r0['flops'] / 1e12:.2f} TFLOP of model work per update; process after imports "
          f"{r0['rss_imported'] / GIB:.2f} GiB")
    print("\n| point | micro-batches | peak GiB | planned GiB (weights + grads + AdamW / activations / runtime) | "
          "planned / measured | update s | GFLOP/s | matmul peak GFLOP/s | share of matmul peak |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for res in results:
        t = res["times"][-1]
        plan = res.get("plan")
        planned = "-" if not plan else (f"{plan['peak'] / GIB:.2f} ({plan['state'] / GIB:.2f} / "
                                        f"{plan['activations'] / GIB:.2f} / {plan['runtime'] / GIB:.2f})")
        ratio = f"{plan['peak'] / res['peak_bytes']:.2f}" if plan else "-"
        print(f"| {' '.join(res['point'])} | {res['micro_batches']} | {res['peak_bytes'] / GIB:.2f} | {planned} | {ratio} | "
              f"{t:.1f} | {res['flops'] / t / 1e9:.0f} | {res['matmul_peak'] / 1e9:.0f} | "
              f"{100 * res['flops'] / t / res['matmul_peak']:.0f}% |")
    if a.json:
        Path(a.json).write_text(json.dumps({"device": device, "points": results}, indent=1))


if __name__ == "__main__":
    main()
