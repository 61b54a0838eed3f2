"""The trainer's rollout half: a Config's prompts, its sampler and its rewards.

train.py's data path reads top-down through here: prompts (encoded as the config's template says) ->
the sampler (`trainer_sampler`: PyTorch or vLLM, wrapped in the tool loop when `tools` is on) ->
rewards (`score_rollouts`) -> nanogrpo/grpo.py. nanogrpo/evaluate.py (eval.py, the held-out evals)
uses the same pieces, so a number from training means the same as one from evaluation.
"""

from __future__ import annotations

import math

import torch

from nanogrpo import data, rewards, tools
from nanogrpo.sampler import Sampler, TorchSampler


def make_sampler(kind: str, model_dir: str, device: str, dtype: torch.dtype, **kwargs) -> Sampler:
    """The sampler named by `kind`: "torch" (nanogrpo/sampler.py), "vllm" (imported only when asked for),
    or "auto": vLLM where it is installed and the device is a GPU, the PyTorch sampler otherwise.

    It lives here, not in sampler.py, because vllm_sampler.py imports sampler.py's types: a factory in
    sampler.py that imports vllm_sampler.py would make the two import each other."""
    if kind == "auto":
        try:
            import vllm  # noqa: F401

            kind = "vllm" if str(device).startswith("cuda") else "torch"
        except ImportError:
            kind = "torch"
    if kind == "torch":
        return TorchSampler(model_dir, device=device, dtype=dtype, **kwargs)
    if kind == "vllm":
        from nanogrpo.vllm_sampler import VLLMSampler

        return VLLMSampler(model_dir, device=device, dtype=dtype, **kwargs)
    raise ValueError(f"unknown sampler kind {kind!r}: expected 'torch', 'vllm' or 'auto'")


def trainer_sampler(cfg, weights: str, device, dtype: torch.dtype) -> Sampler:
    """The sampler a trainer generates with (`sampler`), wrapped in the tool loop when `tools` is on; the
    sandbox starts now, before any compute."""
    memory = {"gpu_memory_utilization": cfg.vllm_gpu_memory_utilization, "kv_cache_gb": cfg.vllm_kv_cache_gb}
    own = memory if cfg.sampler == "vllm" else {"lm_head_fp32": cfg.lm_head_fp32}
    sampler = make_sampler(cfg.sampler, weights, str(device), dtype, **own)
    if cfg.tools:  # rollouts run code mid-answer (nanogrpo/tools.py)
        tool_cfg = tools.ToolConfig.from_config(cfg)
        sampler = tools.ToolSampler(sampler, tool_cfg, tools.make_cells(tool_cfg, cfg.sandbox, cfg.sandbox_concurrency,
                                                                         cfg.allow_unsandboxed))
    return sampler


def encode_prompts(rows: list[dict], tokenizer, cfg) -> list[list[int]]:
    system = cfg.system_prompt
    if cfg.tools and cfg.template != "raw":  # a chat model is told how to run code (and which functions it has)
        system = tools.system_prompt(tools.ToolConfig.from_config(cfg), cfg.system_prompt)
    return [data.encode_prompt(r, tokenizer, cfg.template, system_prompt=system or None) for r in rows]


def code_opts(cfg) -> dict:
    return {"backend": cfg.sandbox, "concurrency": cfg.sandbox_concurrency or None, "binary": cfg.code_binary,
            "allow_unsandboxed": cfg.allow_unsandboxed}


def score_rollouts(completions: list, rows: list[dict], cfg, prefilled_think: bool = False):
    """Rewards (None = could not be computed) and per-component values; `correct` is the main reward == 1.
    With tools the accuracy reward reads the text after the last tool output, and a rollout whose
    sandbox failed gets None."""
    total, parts = rewards.score_batch([c.text for c in completions], rows, cfg.reward, cfg.format_weight,
                                       prefilled_think=prefilled_think, code_opts=code_opts(cfg),
                                       answer_texts=[tools.answer_text(c) for c in completions])
    for i, c in enumerate(completions):
        if getattr(c, "failed", False):
            total[i] = parts["accuracy"][i] = None
    main = parts.get("accuracy", total)
    correct = [None if r is None else float(r == 1.0) for r in main]
    return total, parts, correct


def mean_valid(xs) -> float:
    v = [x for x in xs if x is not None]
    return sum(v) / len(v) if v else math.nan
