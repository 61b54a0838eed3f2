"""The optimizer and learning-rate schedule both entry points use (train.py, sft.py): AdamW over the
trainable parameters, linear warm-up, then constant / cosine / linear decay to min_lr_ratio * lr over the
run's optimizer steps."""

from __future__ import annotations

import math

import torch


def make_optimizer(parameters, cfg, total_updates: int):
    """(AdamW, LambdaLR) over the parameters that require grad (with LoRA: the adapters only, so no optimizer
    state is kept for frozen weights). fused: one kernel over all parameters (measured ~7x faster than the
    foreach default on CPU, SmolLM2-135M)."""
    optimizer = torch.optim.AdamW([q for q in parameters if q.requires_grad], lr=cfg.lr,
                                  betas=(cfg.adam_beta1, cfg.adam_beta2), weight_decay=cfg.weight_decay, fused=True)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg, total_updates))


def lr_lambda(cfg, total_updates: int):
    """LambdaLR's factor for optimizer step i (cfg: warmup_steps, lr_schedule, min_lr_ratio)."""
    def f(i: int) -> float:
        if i < cfg.warmup_steps:
            return (i + 1) / cfg.warmup_steps
        if cfg.lr_schedule == "constant":
            return 1.0
        progress = min((i - cfg.warmup_steps) / max(total_updates - cfg.warmup_steps, 1), 1.0)
        shape = 0.5 * (1 + math.cos(math.pi * progress)) if cfg.lr_schedule == "cosine" else 1 - progress
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * shape

    return f
