"""Will a config fit? Per-GPU (or per CPU process) memory of a run, before it starts.

    python scripts/plan_memory.py configs/math_qwen2.5_1.5b.toml --gpus 8 --gpu-mem 80
    python scripts/plan_memory.py configs/code_qwen2.5_7b.toml --gpus 8 --gpu-mem 80 --shape qwen2.5-7b
    python scripts/plan_memory.py configs/word_problems_smollm2.toml            # CPU, one process, this machine's RAM

Prints what each part takes (weights, gradients, AdamW, activations of one micro-batch, the sampler:
vLLM's share of the card and its KV cache, the runtime), the peak and the phase it falls in, and
whether it fits; when it does not, the first of a few standard changes that would. The model's shape
comes from its config.json (`model` a local directory or a Hub id already in the HF cache), or from
--shape: a config JSON file (configs/shapes/ holds Qwen2.5-0.5B's and 1.5B's) or one of
scripts/bench/bench_train.py's published shapes. How each part is counted: nanogrpo/memory.py. Checked
against measured peaks by scripts/bench/bench_memory.py.
Exit status: 0 fits, 1 does not fit, 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nanogrpo import config as C  # noqa: E402
from nanogrpo import memory  # noqa: E402

GIB = memory.GIB


def hf_config(cfg: C.Config, shape: str):
    from transformers import AutoConfig

    if shape and Path(shape).is_file():  # a config.json, or a shape file such as configs/shapes/qwen2.5-1.5b.json
        return AutoConfig.from_pretrained(shape), f"{shape}"
    if shape:
        sys.path.insert(0, str(ROOT / "scripts" / "bench"))
        import bench_train

        if shape not in bench_train.SHAPES:
            raise C.ConfigError(f"--shape {shape!r}: not a config.json path nor one of {', '.join(bench_train.SHAPES)}")
        return bench_train.hf_config(shape), f"--shape {shape} (its published config)"
    from nanogrpo import hub

    try:
        directory = hub.model_dir(cfg.model)
        return AutoConfig.from_pretrained(directory), directory
    except (OSError, ValueError, FileNotFoundError) as e:
        raise C.ConfigError(f"model {cfg.model!r} is not here ({e}); give its shape: --shape CONFIG.json or a name") from None


def longest_prompt(cfg: C.Config, rows: int = 256) -> int | None:
    """The longest of the task's first `rows` prompts as train.py encodes them; None when the task or the
    tokenizer is not on this machine."""
    try:
        import train
        from nanogrpo import model as M
        from nanogrpo.rollout import encode_prompts

        tokenizer = M.load_tokenizer(cfg.model)
        return max(len(p) for p in encode_prompts(train.load_task(cfg)[0][:rows], tokenizer, cfg))
    except Exception:  # noqa: BLE001 - any reason the data is not here: the caller says so and uses a default
        return None


def ram_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("overrides", nargs="*", help="key=value, as train.py takes them")
    ap.add_argument("--gpus", type=int, default=0, help="GPUs (processes) in the run; 0: CPU")
    ap.add_argument("--gpu-mem", type=float, default=80.0, help="GiB per GPU (default 80)")
    ap.add_argument("--nproc", type=int, default=1, help="CPU: processes on this machine (they share its RAM)")
    ap.add_argument("--shape", default="", help="config.json path or a published shape name, when the model is not here")
    ap.add_argument("--prompt-tokens", type=int, default=0, help="longest prompt (default: measured on the task, else 512)")
    a = ap.parse_args()
    try:
        cfg = C.load([a.config, *a.overrides], here=False)
        hf, source = hf_config(cfg, a.shape)
    except C.ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    gpu = a.gpus > 0
    world = a.gpus if gpu else a.nproc
    if cfg.prompts_per_step % world:
        print(f"error: prompts_per_step={cfg.prompts_per_step} is not divisible by {world} processes", file=sys.stderr)
        return 2
    prompt = a.prompt_tokens or longest_prompt(cfg)
    prompt_note = "given" if a.prompt_tokens else "the longest of the task's first 256, measured"
    if prompt is None:
        prompt, prompt_note = 512, "the task or tokenizer is not here: assumed (--prompt-tokens to set it)"
    budget = a.gpu_mem * GIB if gpu else ram_bytes() / world
    shape = memory.shape_of(hf)
    plan = memory.plan(cfg, shape, world=world, device="cuda" if gpu else "cpu", prompt_tokens=prompt, gpu_mem=budget)
    where = f"{a.gpus} x {a.gpu_mem:g} GiB GPUs" if gpu else f"CPU, {world} process(es), {budget / GIB:.1f} GiB RAM each"
    print(f"# {a.config} {' '.join(a.overrides)} on {where}")
    print(f"# model: {source}: {shape.params / 1e9:.2f}B params, {shape.layers} layers, hidden {shape.hidden}, vocab {shape.vocab}"
          + ("" if shape.llama_like else " (not a Llama-style layer: activations are the Llama-style estimate)"))
    print(f"# per step and process: {cfg.prompts_per_step // world} prompts x {cfg.group_size}, prompts up to {prompt} tokens "
          f"({prompt_note}), completions up to {cfg.max_new_tokens}")
    print(plan.table())
    print(plan.summary())
    if plan.fits:
        return 0
    # packed micro-batches are sized by micro_batch_tokens, padded ones by micro_batch_size
    key, size = (("micro_batch_tokens", cfg.micro_batch_tokens) if cfg.micro_batch_tokens > 0
                 else ("micro_batch_size", cfg.micro_batch_size))
    smaller = [[f"{key}={max(size // d, 1)}"] for d in (2, 4, 8) if size // d >= 1]
    for change in (["activation_checkpointing=true"], ["activation_checkpointing=true", "grad_accumulation=sharded"],
                   *(["activation_checkpointing=true", "grad_accumulation=sharded", *c] for c in smaller)):
        alt = C.load([a.config, *a.overrides, *change], here=False)
        p = memory.plan(alt, shape, world=world, device="cuda" if gpu else "cpu", prompt_tokens=prompt, gpu_mem=budget)
        if p.fits:
            print(f"would fit with {' '.join(change)}: {p.summary()}")
            break
    else:
        print("none of activation checkpointing and smaller micro-batches makes it fit: more GPUs, LoRA, or shorter completions")
    return 1


if __name__ == "__main__":
    sys.exit(main())
