"""What a run holds in memory per process (one GPU, or one CPU process), before it starts.

The planner behind scripts/plan_memory.py and train.py's start-up line; scripts/bench/bench_memory.py sets
it beside measured peaks. N = world size, P = parameters, P_t = trainable ones (LoRA: the adapters),
b = bytes of the compute dtype (bf16 on GPU, fp32 on CPU). A step has two phases, and the peak is the
larger of the two; what each holds: docs/throughput.md, 'The memory planner's model'.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

GIB = 2**30
CPU_RUNTIME = 0.48 * GIB  # RSS after `import train` (torch, transformers): 0.42-0.50 GiB on the 2-core machines (scripts/bench/bench_memory.py)
GPU_RUNTIME = 2.0 * GIB  # CUDA context + NCCL + cuBLAS workspaces: an estimate, not measured here
TORCH_SAMPLER_BATCH = 128  # TorchSampler's max_batch_size: sequences whose KV cache exists at once
VLLM_BATCHED_TOKENS = 8192  # vLLM's profile batch: its activation reserve is taken for this many tokens
VLLM_MAX_SEQS = 256


@dataclass
class Shape:
    """What the planner needs of a decoder-only HF model; `shape_of` builds it."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    params: int  # all parameters, tied ones once
    root_params: int  # outside the decoder layers: embeddings, final norm, an untied lm_head
    layer_params: int  # one decoder layer
    llama_like: bool  # the per-token activation count (docs/throughput.md) is written for this layer layout

    def kv_bytes_per_token(self, b: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * b

    def activation_bytes_per_token_layer(self, b: int) -> int:  # what autograd keeps: docs/throughput.md
        h, i, q, kv = self.hidden, self.intermediate, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return 2 * (4 * h + 4 + 2 * b * h) + b * (q + 2 * kv) + 4 * self.heads + b * q + 4 * b * i


def shape_of(hf_config) -> Shape:
    """From a transformers config (parameters counted on a meta-device build: nothing is allocated)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    layers = model.model.layers
    total = sum(p.numel() for p in model.parameters())
    per_layer = sum(p.numel() for p in layers[0].parameters())
    heads = hf_config.num_attention_heads
    layer = layers[0]
    llama_like = all(hasattr(layer, a) for a in ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")) and \
        all(hasattr(layer.mlp, a) for a in ("gate_proj", "up_proj", "down_proj"))
    return Shape(layers=len(layers), hidden=hf_config.hidden_size, intermediate=hf_config.intermediate_size, heads=heads,
                 kv_heads=getattr(hf_config, "num_key_value_heads", None) or heads,
                 head_dim=getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads,
                 vocab=hf_config.vocab_size, params=total, root_params=total - per_layer * len(layers),
                 layer_params=per_layer, llama_like=llama_like)


@dataclass
class Plan:
    rows: list[tuple[str, float, str]]  # (what, bytes, how it is counted)
    state: float  # weights + gradients + AdamW (the update; the generation holds weights + AdamW)
    activations: float  # the update's transient memory: gathered parameters, activations, lm_head chunk
    runtime: float
    update: float  # the update phase's total
    generation: float  # the generation phase's total
    budget: float | None  # the device's memory (None: not given)
    kv_capacity_tokens: int | None = None  # vLLM on GPU: tokens its KV cache holds
    kv_demand_tokens: int | None = None  # the step's tokens on this rank, prompts shared within a group

    @property
    def peak(self) -> float:
        return max(self.update, self.generation)

    @property
    def fits(self) -> bool | None:
        return None if self.budget is None else self.peak <= self.budget

    def summary(self) -> str:
        s = (f"peak {self.peak / GIB:.1f} GiB per process (update {self.update / GIB:.1f}: weights + grads + AdamW "
             f"{self.state / GIB:.1f}, activations {self.activations / GIB:.1f}; generation {self.generation / GIB:.1f})")
        if self.budget is not None:
            s += f" of {self.budget / GIB:.1f} GiB: " + ("fits" if self.fits else "DOES NOT FIT")
        if self.kv_capacity_tokens is not None and self.kv_demand_tokens:
            share = self.kv_capacity_tokens / self.kv_demand_tokens
            s += (f"; vLLM's KV cache holds {self.kv_capacity_tokens:,} tokens of a step's {self.kv_demand_tokens:,}"
                  + ("" if share >= 1 else f" ({100 * share:.0f}%: it generates in waves; raise vllm_gpu_memory_utilization)"))
        return s

    def table(self) -> str:
        lines = ["| what | GiB | how |", "| --- | ---: | --- |"]
        lines += [f"| {what} | {n / GIB:.2f} | {how} |" for what, n, how in self.rows]
        lines += [f"| **update** | **{self.update / GIB:.2f}** | weights + gradients + AdamW + the above + sampler (asleep) + runtime |",
                  f"| **generation** | **{self.generation / GIB:.2f}** | weights + AdamW + sampler + runtime |"]
        return "\n".join(lines)


def micro_batch_tokens(cfg, seqs: int, seq_len: int) -> int:
    """Tokens in the largest micro-batch: padded rows hold micro_batch_size sequences, a packed row
    micro_batch_tokens (a longer sequence gets a row of its own)."""
    per_row = max(cfg.micro_batch_tokens // seq_len, 1) if cfg.micro_batch_tokens > 0 else cfg.micro_batch_size
    return min(per_row, seqs) * seq_len


def plan(cfg, shape: Shape, world: int = 1, device: str = "cpu", prompt_tokens: int = 256,
         completion_tokens: int | None = None, gpu_mem: float | None = None, sampler: bool = True) -> Plan:
    """The memory plan of `cfg` on `world` processes; prompt_tokens: the longest prompt; completions at
    max_new_tokens unless given. gpu_mem: bytes per device (None: the fit is not judged). sampler=False:
    the trainer alone (what scripts/bench/bench_memory.py runs)."""
    gpu = device == "cuda"
    b = 2 if (cfg.dtype in ("bfloat16", "float16") or (cfg.dtype == "auto" and gpu)) else 4
    n = completion_tokens or cfg.max_new_tokens
    P, N = shape.params, world
    lora = shape.layers * len(cfg.lora_targets) * cfg.lora_rank * 2 * max(shape.hidden, shape.intermediate)
    P_t = lora if cfg.lora_rank else P  # LoRA: an upper bound
    seqs = cfg.prompts_per_step // world * cfg.group_size  # this rank's completions
    seq_len = prompt_tokens + n
    T = micro_batch_tokens(cfg, seqs, seq_len)  # tokens of the largest micro-batch
    K = T * n // seq_len  # of them completion tokens (the lm_head's positions)
    micro_batches = math.ceil(seqs * seq_len / T)

    weights, adam = 4 * P / N, 8 * P_t / N
    unsharded = cfg.grad_accumulation == "unsharded" and micro_batches > 1
    grads = 4 * P_t if unsharded else 4 * P_t / N + 4 * shape.layer_params * (P_t == P)  # + a layer's in flight
    gathered = b * (shape.root_params + 2 * shape.layer_params) if N > 1 or gpu else b * shape.root_params
    per_layer = shape.activation_bytes_per_token_layer(b)
    outside = 8 + 2 * shape.head_dim * b + 4 * shape.hidden + 4 + 2 * b * shape.hidden  # ids, rotary, final norm
    if cfg.activation_checkpointing:
        kept = T * (shape.layers * b * shape.hidden + outside)
        in_backward = 2 * T * per_layer  # the recomputed layer and its gradients
    else:
        kept = T * (shape.layers * per_layer + outside)
        in_backward = T * per_layer  # the gradients of one layer's activations
    kept += K * (b * shape.hidden + 8)  # the lm_head's inputs and targets
    chunk = 3 * 4 * min(cfg.logprob_chunk, max(K, 1)) * shape.vocab
    activations = gathered + kept + in_backward + chunk

    rows = [
        ("weights", weights, f"fp32 shards: 4 x {P / 1e6:.0f}M params / {N}"),
        ("gradients", grads, "fp32, unsharded until the last micro-batch (grad_accumulation = unsharded)" if unsharded
         else f"fp32 shards: 4 x {P_t / 1e6:.0f}M / {N}, and one layer's unsharded while it is reduce-scattered"),
        ("AdamW", adam, f"2 fp32 moments: 8 x {P_t / 1e6:.0f}M / {N}"),
        ("gathered parameters", gathered, f"{b}-byte root" + (" + 2 layers" if N > 1 or gpu else "")),
        ("activations kept", kept, f"{T:,} tokens per micro-batch ({micro_batches} micro-batches), "
         + ("checkpointed: each layer's input" if cfg.activation_checkpointing else f"{per_layer / 1024:.0f} KiB per token per layer")),
        ("backward", in_backward, "one layer " + ("recomputed + its gradients" if cfg.activation_checkpointing else "of gradients")),
        ("lm_head chunk", chunk, f"fp32 logits, softmax and gradient of {min(cfg.logprob_chunk, max(K, 1))} positions"),
    ]

    # the sampler: (generation phase, update phase)
    kv_capacity = kv_demand = None
    prompts = cfg.prompts_per_step // world
    if not sampler:
        gen_s = upd_s = 0.0
    elif cfg.sampler == "vllm" and gpu:
        budget = cfg.vllm_gpu_memory_utilization * (gpu_mem or 0)
        reserve = VLLM_BATCHED_TOKENS * (2 * shape.intermediate + 4 * shape.hidden) * 2 + VLLM_MAX_SEQS * shape.vocab * 4
        kv_capacity = int(max(budget - 2 * P - reserve, 0) // shape.kv_bytes_per_token(2)) if gpu_mem else None
        kv_demand = prompts * (prompt_tokens + cfg.group_size * n)  # prefix caching: one prompt per group
        gen_s, upd_s = budget, 0.0
        rows.append(("vLLM", budget, f"gpu_memory_utilization {cfg.vllm_gpu_memory_utilization} of the card, during "
                                     "generation (asleep in the update)"))
    elif cfg.sampler == "vllm":
        gen_s = upd_s = b * P + cfg.vllm_kv_cache_gb * GIB
        rows.append(("vLLM (CPU)", gen_s, f"weights {b} x P + vllm_kv_cache_gb {cfg.vllm_kv_cache_gb}"))
    else:
        kv = min(TORCH_SAMPLER_BATCH, prompts * cfg.group_size) * seq_len * shape.kv_bytes_per_token(b)
        copies = 2 if (not gpu and b == 4) else 1  # CPU fp32: oneDNN's packed copy of its linears' weights beside them
        gen_s, upd_s = copies * b * P + kv, copies * b * P
        rows.append(("PyTorch sampler", gen_s, f"its own weights ({copies} x {b} x P{': packed for oneDNN' if copies > 1 else ''})"
                                               f" + KV cache of {TORCH_SAMPLER_BATCH} sequences (during generation)"))
    runtime = GPU_RUNTIME if gpu else CPU_RUNTIME
    rows.append(("runtime", runtime, "CUDA context, NCCL, cuBLAS (estimate)" if gpu else "Python, torch, transformers (measured)"))

    return Plan(rows, weights + grads + adam, activations, runtime, update=weights + adam + grads + activations + upd_s + runtime,
                generation=weights + adam + gen_s + runtime, budget=gpu_mem, kv_capacity_tokens=kv_capacity,
                kv_demand_tokens=kv_demand)


def device_budget(device: torch.device) -> float:
    """Bytes one process may use: its GPU's memory, or this machine's RAM shared by the node's processes."""
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return ram / int(os.environ.get("LOCAL_WORLD_SIZE", 1))
