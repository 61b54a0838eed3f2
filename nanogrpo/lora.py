"""LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models"), by hand.

A chosen linear layer y = W x + b becomes

    y = W x + b + (alpha / r) · B (A x)        A: (r, in), kaiming-uniform; B: (out, r), zeros

so at initialisation the model is the base model, exactly. W and b (and every other base parameter)
are frozen; only A and B train, and the optimizer is built from the trainable parameters only.

How it fits the rest (FSDP2 sharding, merged weights for the sampler and checkpoints, the reference as the base with
the adapters off, resume): docs/architecture.md, "LoRA".
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from nanogrpo import ConfigError  # a bad lora_targets / lora_rank is named as any bad config value

ADAPTERS_FILE = "lora/adapters.safetensors"  # in a sub-directory: vLLM loads every *.safetensors at the top


class LoRALinear(nn.Module):
    """A frozen nn.Linear plus a trainable low-rank update. Takes over the base layer's own weight and
    bias Parameters (no copy), so the state-dict names of the base stay what they were."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight
        self.register_parameter("bias", base.bias)
        kw = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.lora_A = nn.Parameter(torch.empty(rank, self.in_features, **kw))  # (r, in)
        self.lora_B = nn.Parameter(torch.zeros(self.out_features, rank, **kw))  # (out, r): the update starts at 0
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # nn.Linear's own init, as in the paper's code
        self.scaling = alpha / rank
        self.enabled = True  # False: the base layer only (the reference model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight, self.bias)
        if not self.enabled:
            return y
        return y + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scaling

    def merge(self, weight: torch.Tensor, lora_A: torch.Tensor, lora_B: torch.Tensor) -> torch.Tensor:
        """W + (alpha/r)·B A from full tensors (callers gather them from their FSDP shards)."""
        return weight + (lora_B @ lora_A) * self.scaling

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, r={self.lora_A.shape[0]}, scaling={self.scaling}"


def add_adapters(model: nn.Module, rank: int, alpha: float, targets: list[str]) -> list[str]:
    """Freeze every parameter of `model` and put adapters on the nn.Linear layers whose attribute name
    is in `targets` (e.g. "q_proj"). Returns the adapted module names. Call before sharding."""
    if rank < 1 or not targets:
        raise ConfigError(f"LoRA needs a rank >= 1 and at least one target layer; got lora_rank {rank}, lora_targets "
                          f"{targets}")
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    found = [(name, module) for name, module in model.named_modules() if isinstance(module, nn.Linear)
             and module is not head]  # the trainer's log-prob kernel reads the lm_head's weight directly
    model.requires_grad_(False)
    chosen = [(name, module) for name, module in found if name.rsplit(".", 1)[-1] in targets]
    missing = set(targets) - {name.rsplit(".", 1)[-1] for name, _ in chosen}
    if missing:  # a typo would otherwise train fewer layers than asked, silently
        have = sorted({name.rsplit(".", 1)[-1] for name, _ in found})
        raise ConfigError(f"config key 'lora_targets': {sorted(missing)} match no linear layer of the model; its linear "
                          f"layers: {have}")
    for name, module in chosen:
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, LoRALinear(module, rank, alpha))
    return [name for name, _ in chosen]


def lora_modules(model: nn.Module) -> dict[str, LoRALinear]:
    """{module name: LoRALinear}; empty without LoRA."""
    return {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}


def is_adapter(param_name: str) -> bool:
    return param_name.endswith((".lora_A", ".lora_B"))


def merged_params(model: nn.Module, full) -> Iterator[tuple[str, torch.Tensor]]:
    """model.iter_full_params with adapters (`full`: a parameter's full tensor, an all-gather)."""
    adapted = {f"{name}.weight": m for name, m in lora_modules(model).items()}
    for name, p in model.named_parameters():
        if is_adapter(name):
            continue  # folded into its layer's weight
        t = full(p)
        if name in adapted:
            m = adapted[name]
            t = m.merge(t, full(m.lora_A), full(m.lora_B))
        yield name, t.detach()


@contextmanager
def disabled(model: nn.Module):
    """The base model: every adapter off inside the block."""
    modules = list(lora_modules(model).values())
    for m in modules:
        m.enabled = False
    try:
        yield
    finally:
        for m in modules:
            m.enabled = True


class BaseModel:
    """The policy with its adapters off, called like the policy: the reference model for beta > 0.
    The frozen base is the initial policy, so the KL to it needs no second copy of the weights."""

    def __init__(self, policy: nn.Module):
        self.policy = policy

    def __call__(self, *args, **kwargs):
        with disabled(self.policy):
            return self.policy(*args, **kwargs)


def adapter_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every adapter as a full CPU tensor, gathered from its FSDP shards (a collective: every rank calls
    it; all ranks get the tensors)."""
    return {name: (p.full_tensor() if hasattr(p, "full_tensor") else p.data).detach().cpu().clone()
            for name, p in model.named_parameters() if is_adapter(name)}


def save_adapters(directory: str | Path, state: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    path = Path(directory) / ADAPTERS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path))


def load_adapters(model: nn.Module, directory: str | Path) -> None:
    """Copy saved adapters into an unsharded model that already has them (same targets and rank)."""
    from safetensors.torch import load_file

    path = Path(directory) / ADAPTERS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: the checkpoint was not written by a LoRA run (lora_rank > 0)")
    saved = load_file(str(path))
    params = {name: p for name, p in model.named_parameters() if is_adapter(name)}
    if set(saved) != set(params):
        raise ConfigError(f"{path}: the saved adapters do not match lora_targets "
                         f"(missing {sorted(set(params) - set(saved))[:4]}, unexpected {sorted(set(saved) - set(params))[:4]})")
    with torch.no_grad():
        for name, p in params.items():
            if saved[name].shape != p.shape:
                raise ConfigError(f"{path}: {name} has shape {tuple(saved[name].shape)}, expected {tuple(p.shape)} "
                                  "(lora_rank?)")
            p.copy_(saved[name])
