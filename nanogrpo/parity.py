"""Sampler/trainer log-prob agreement: the exact mode (`exact_logprobs`) and the gap gate (`max_logprob_gap`).

The update's importance ratio and `tis_cap` compare the trainer's log-probs with the sampler's. When
they drift apart (a weight sync that did not happen, a sampler in another precision, other kernels),
on-policy GRPO quietly becomes off-policy. Every step logs the mean |trainer - sampler| log-prob of the
trained tokens (`logprob_gap`, grpo.step); this module makes it exact where that is possible and stops
the run when it is too large for too long.

Exact mode (`exact_logprobs = true`, PyTorch sampler only). The sampler's log-prob of each sampled
token is recomputed with the sampler's own weights through the trainer's forward (`model.Policy`: the
trainer's attention implementation, its chunked fp32 log-softmax), in the update's own micro-batches,
right before the update (grpo.step's `behaviour`, alongside the reference and old log-probs). The
sampled tokens are not touched. Both forwards then run the same deterministic kernels on the same
input tensors, so the log-probs are equal bit for bit exactly when the weights are: the gap is 0, and
any gap means the sampler's weights differ from the trainer's (a sync that did not happen, a sampler
copy in another dtype).

Why this and not batch-invariant kernels on both sides. The sampler decodes with a KV cache: one token
per row per call, a (B, 1) query against a cache of varying length, batch shapes that change as rows
finish. The trainer computes whole sequences, padded or packed, many per call. Bit-equal results across
those shapes need every reduction (matmul, attention, norms, log-softmax) to be independent of the
batch size, the padding and the position in the batch. On this CPU they are not: MKL's fp32 matmul
gives other bits for 1-3 rows than for more (and with 2 threads for 5-11 rows as well), and attention
over a cache of n keys is not the same reduction as a causal call over the whole sequence (hence the
default run's ~6e-7 per token). Making
them so means our own matmul and attention kernels with fixed reduction orders in the sampler's
decode loop, slower for every generated token, for a property that the one call per step below gives
by construction. The recompute costs one no-grad forward of the trained micro-batches per step (on the
default run 22% of the update's time, 1.2x the time per step: docs/precision.md); it needs no kernel property
beyond determinism for equal shapes, and it does not hide a stale sampler, because the recompute runs
the sampler's weights, not the trainer's. What it gives up: the tokens were drawn from the decode
kernels' distribution, which differs from the recomputed one by the decode's rounding (~1e-7 in fp32);
the ratio the update sees is exactly 1 on-policy, as GRPO assumes. Not available with vLLM (its kernels
and weights are not a torch module the trainer's forward can run), LoRA (the sampler holds W + BA
merged, the trainer adds B·A·x to W·x: the sums round differently) or compile (other kernels).

The gap gate. A step whose gap is above `max_logprob_gap` prints a warning; `gap_patience` such steps
in a row stop the run with the likely cause, read from the gap's history: a gap already too large at
the first step of the process (sampler and trainer loaded the same weights, no sync has happened yet)
is precision or kernels; a gap that was small at first and grew is a sampler falling behind the
trainer's weights (the sync did not happen or did not take effect).
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn as nn

from nanogrpo import dist
from nanogrpo import model as M
from nanogrpo.config import ConfigError


class LogprobGapError(ConfigError):
    """The run stopped because the sampler's and the trainer's log-probs disagree (train.py exits 2 with it)."""


class SamplerPolicy(nn.Module):
    """The PyTorch sampler's weights run through the trainer's forward: a `model.Policy` over the
    sampler's own (unsharded) HF model, with the trainer's attention implementation, chunk size and
    lm_head precision. grpo.step calls it like the reference policy, under no_grad."""

    def __init__(self, sampler, trainer: M.Policy):
        super().__init__()
        inner = getattr(sampler, "sampler", sampler)  # the tool loop wraps the PyTorch sampler
        model = getattr(inner, "model", None)
        if not isinstance(model, nn.Module):
            raise ConfigError(f"exact_logprobs needs the PyTorch sampler (sampler=torch); {type(inner).__name__} "
                              "holds no torch module that the trainer's forward can run")
        self._sampler = inner  # not a Module: wake() before each forward (a sleeping GPU sampler is on the CPU)
        self.policy = M.Policy(model, trainer.chunk_size, trainer.lm_head_fp32)
        self.attention = trainer.hf.config._attn_implementation

    def forward(self, *args, **kwargs):
        self._sampler.wake()
        config = self.policy.hf.config
        own = config._attn_implementation  # the sampler decodes with its own (masks, KV cache); restored below
        config._attn_implementation = self.attention
        try:
            return self.policy(*args, **kwargs)
        finally:
            config._attn_implementation = own


# max_logprob_gap = -1: the limit by precision (docs/precision.md). fp32: healthy runs measure at most 6e-6 per
# step, a stale sampler 1.9e-2 after one missed sync on the default run, so 1e-3 is far from both. bf16 / fp16:
# our CPU runs measure at most 9.4e-4 per step, but bf16 GPU samplers (vLLM, SGLang) against bf16 trainers are
# reported at ~1e-2 on dense models; 0.1 leaves them a factor of 10.
AUTO_LIMIT = {torch.float32: 1e-3, torch.bfloat16: 0.1, torch.float16: 0.1}


def gap_limit(max_logprob_gap: float, dtype: torch.dtype, exact: bool) -> float | None:
    """The gate's limit: None = off (0), the value itself (> 0), or by precision (-1): 0 with exact_logprobs
    (any gap at all), else AUTO_LIMIT."""
    if max_logprob_gap == 0:
        return None
    if max_logprob_gap > 0:
        return max_logprob_gap
    return 0.0 if exact else AUTO_LIMIT.get(dtype, 0.1)


def sampler_dtype(sampler) -> torch.dtype | None:
    """The dtype the sampler's weights are in (None when it does not say)."""
    inner = getattr(sampler, "sampler", sampler)  # the tool loop wraps the sampler
    model = getattr(inner, "model", None)
    if isinstance(model, nn.Module):
        return next(model.parameters()).dtype
    return getattr(inner, "dtype", None)


class GapGate:
    """Watches `logprob_gap` step by step: warns above the limit, stops after `patience` such steps in a row.

    A step with no trained token (gap NaN) measured nothing: it neither counts nor breaks a streak."""

    def __init__(self, max_logprob_gap: float, patience: int, dtype: torch.dtype, sampler: str = "torch",
                 sampler_dtype: torch.dtype | None = None, exact: bool = False):
        self.limit = gap_limit(max_logprob_gap, dtype, exact)
        self.patience, self.dtype, self.sampler, self.exact = patience, dtype, sampler, exact
        self.sampler_dtype = sampler_dtype or dtype
        self.history: list[tuple[int, float]] = []  # (1-based step, gap) of every measured step of this process
        self.streak = 0

    def __call__(self, step: int, gap: float | None) -> None:
        """After step `step` (0-based) with its `logprob_gap`: warn, or raise LogprobGapError."""
        if self.limit is None or gap is None or math.isnan(gap):
            return
        self.history.append((step + 1, gap))
        if gap <= self.limit:
            self.streak = 0
            return
        self.streak += 1
        dist.print0(f"warning: step {step + 1}: logprob_gap {gap:.3g} > max_logprob_gap {self.limit:.3g} "
                    f"({self.streak} of gap_patience {self.patience} in a row; sampler and trainer disagree)",
                    file=sys.stderr)
        if self.streak >= self.patience:
            raise LogprobGapError(self.message())

    def cause(self) -> str:
        """What the history points to: "stale weights" when the first measured step was within the limit (the
        sampler and the trainer started from the same weights and agreed) and the gap rose since; else "dtype"
        when the two sides differ in precision or run a low one, "kernels" otherwise."""
        if self.history[0][1] <= self.limit:
            return "stale weights"
        low = self.dtype != torch.float32 and not self.exact
        return "dtype" if self.sampler_dtype != self.dtype or low else "kernels"

    def message(self) -> str:
        (s0, g0), (s1, g1) = self.history[0], self.history[-1]
        trainer, sampler = (str(d).removeprefix("torch.") for d in (self.dtype, self.sampler_dtype))
        trend = (f"logprob_gap (mean |trainer - sampler| log-prob per trained token) was {g0:.3g} at step {s0}, the "
                 f"first this process measured, and {g1:.3g} at step {s1}: above max_logprob_gap = {self.limit:.3g} "
                 f"for {self.streak} steps in a row (gap_patience = {self.patience}), so the run stops. ")
        if sampler != trainer:
            precision = f"the {self.sampler} sampler runs {sampler} weights, the trainer computes in {trainer}"
        else:
            precision = (f"both sides run {trainer}, each with its own kernels" + (
                ", and low-precision logits and sums round differently (lm_head_fp32 = true, dtype = float16 or "
                "float32 shrink it; or set max_logprob_gap to what your healthy run measures: docs/precision.md)"
                if trainer != "float32" else ": precision is unlikely to be the cause"))
        causes = {
            "stale weights": "STALE WEIGHTS: the sampler is not getting the trainer's weights (sync_weights did not "
                             "happen or did not take effect), so the rollouts come from an older policy; the gap "
                             f"was within the limit at step {s0}, when both sides had loaded the same weights, and grew",
            "dtype": f"DTYPE: {precision}",
            "kernels": "CHUNKING / KERNELS: the two sides compute the same weights differently (vLLM's kernels, LoRA's "
                       "merged weights, top_p < 1 with vLLM, an attention implementation or logprob_chunk that "
                       "changes the sums)" + ("; with exact_logprobs the recompute and the trainer's forward ran "
                                              "different kernels on this platform" if self.exact else
                                              "; exact_logprobs = true (sampler = torch) removes it"),
        }
        first = self.cause()
        rest = "; ".join(causes[c] for c in causes if c != first)
        return f"{trend}Likely cause: {causes[first]}. Otherwise: {rest}."
