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
from nanogrpo.tasks import TASKS


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
    template = task_template(cfg, tokenizer, rows[0] if rows else {})
    system = cfg.system_prompt
    if cfg.tools and template != "raw":  # a chat model is told how to run code (and which functions it has)
        system = tools.system_prompt(tools.ToolConfig.from_config(cfg), cfg.system_prompt)
    return [data.encode_prompt(r, tokenizer, template, system_prompt=system or None) for r in rows]


def code_opts(cfg) -> dict:
    return {"backend": cfg.sandbox, "concurrency": cfg.sandbox_concurrency or None, "binary": cfg.code_binary,
            "allow_unsandboxed": cfg.allow_unsandboxed}


def task_verifier(cfg) -> str | None:
    """The reward that judges this run's answers: the verifier `rewards` names, else the built-in task's,
    else None (each row its own: code rows the sandbox, math rows math-verify)."""
    return rewards.verifier_of(cfg.rewards, TASKS[cfg.task].verifier if cfg.task in TASKS else None)


def row_kind(cfg) -> tuple[str, object]:
    """(kind, gold_check) for data.load_rows: the rows the verifier reads, and the math reward's own gold
    reader where math-verify judges (a gold it cannot read stops the load naming the row, not None every step)."""
    verifier = task_verifier(cfg)
    kind = {"code": "code", None: "auto"}.get(verifier, "math")
    return kind, (rewards.gold_error if verifier in ("math", None) else None)


def task_template(cfg, tokenizer, row: dict) -> str:
    """`template`, or the task's own when it is "": a built-in's, else math_eval for math rows and chat for
    code rows; raw on a model without a chat template (its only choice)."""
    if cfg.template:
        return cfg.template
    own = TASKS[cfg.task].template if cfg.task in TASKS else ("chat" if data.is_code_row(row) else "math_eval")
    return own if own == "raw" or getattr(tokenizer, "chat_template", None) else "raw"


def score_rollouts(completions: list, rows: list[dict], cfg, prefilled_think: bool = False, group_size: int = 1):
    """Rewards (None = could not be computed) and per-component values; `correct` is the verifier's == 1.
    With tools the verifier reads the text after the last tool output, and a rollout whose sandbox failed
    gets None. group_size: consecutive completions of one prompt (the `length` reward compares within one)."""
    total, parts = rewards.score_batch([c.text for c in completions], rows, cfg.rewards or ["accuracy"],
                                       cfg.reward_weights or None, task_verifier(cfg), prefilled_think,
                                       code_opts=code_opts(cfg), answer_texts=[c.answer_text for c in completions],
                                       token_counts=[len(c.token_ids) for c in completions], group_size=group_size,
                                       shaping_cfg=cfg)
    for i, c in enumerate(completions):
        if c.failed:
            total[i] = parts["accuracy"][i] = None
    correct = [None if r is None else float(r == 1.0) for r in parts["accuracy"]]
    return total, parts, correct


def mean_valid(xs) -> float:
    v = [x for x in xs if x is not None]
    return sum(v) / len(v) if v else math.nan
