"""Stale-sampler faults, injected into the PyTorch sampler by monkeypatching it (nothing raises): each one
makes the sampler generate from other weights, another dtype or other settings than the trainer asked for.
tests/test_stale_sampler.py and scripts/bench/bench_stale_sampler.py run them.

`inject(mp, name, onset)`: the fault hits the rollouts of step `onset` (1-based) and every later step. A fault
in sync_weights starts with the sync after step onset - 1 (the first sync follows step 1, so onset >= 2).
"""
from dataclasses import replace

import torch
import torch.nn as nn

from nanogrpo.torch_sampler import TorchSampler

BOS = 2  # the tiny model's tokenizer has no BOS: any id the prompts do not start with

# name -> (where, how it is injected, what the check must name)
FAULTS = {
    "no-op sync": ("sync", "sync_weights reads the weights and copies nothing", "STALE WEIGHTS"),
    "partial sync": ("sync", "only the first half of the tensors are copied", "STALE WEIGHTS"),
    "one stale layer": ("sync", "layer 1's tensors are not copied", "STALE WEIGHTS: model.layers.1."),
    "stale lm_head": ("sync", "the decode's lm_head keeps the old weights (untied from the embedding)",
                      "STALE WEIGHTS: lm_head.weight (tied to model.embed_tokens.weight"),
    "tied weights stale": ("sync", "the embedding, and so the lm_head tied to it, is not copied",
                           "STALE WEIGHTS: model.embed_tokens.weight"),
    "LoRA never merged": ("sync", "lora_rank=4: the adapted layers keep the base weights W, not W + BA",
                          "STALE WEIGHTS: model.layers.0.self_attn.q_proj.weight"),
    "one step old": ("sync", "each sync copies the weights of the sync before", "a step behind"),
    "sampler dtype": ("generate", "the sampler's weights are cast to another dtype (bf16 <-> fp32) before it samples",
                      "DTYPE: the sampler holds"),
    "temperature": ("generate", "sampled at temperature 0.7 (the trainer asked for 1.0)",
                    "SAMPLING: the sampler sampled with temperature = 0.7"),
    "top-p": ("generate", "sampled with top_p 0.9 (the trainer asked for 1.0)",
              "SAMPLING: the sampler sampled with top_p = 0.9"),
    "extra BOS": ("generate", "a BOS token put before every prompt", "PROMPTS: the sampler's prompt 0"),
}


def _faulty_sync(self, weights, name, real):
    if name == "no-op sync":
        for _ in weights:
            pass
    elif name == "partial sync":
        pairs = list(weights)
        keep = {n for n, _ in pairs[: len(pairs) // 2]}
        _copy(self, [(n, t) for n, t in pairs if n in keep])
    elif name == "one stale layer":
        _copy(self, [(n, t) for n, t in weights if ".layers.1." not in n])
    elif name == "tied weights stale":
        _copy(self, [(n, t) for n, t in weights if "embed_tokens" not in n])
    elif name == "LoRA never merged":
        _copy(self, [(n, t) for n, t in weights if not n.endswith("_proj.weight")])
    elif name == "stale lm_head":
        head = self.model.get_output_embeddings()
        old = head.weight.detach().clone()
        head.weight = self.model.get_input_embeddings().weight  # tied again for the real sync
        real(self, weights)
        head.weight = nn.Parameter(old, requires_grad=False)  # and the decode's head left behind
    elif name == "one step old":
        now = [(n, t.detach().clone()) for n, t in weights]
        if getattr(self, "_older", None) is not None:  # the first faulty sync after step 1: nothing older to copy
            real(self, self._older)
        self._older = now


@torch.no_grad()
def _copy(sampler, pairs) -> None:
    params = dict(sampler.model.named_parameters(remove_duplicate=False))
    for n, t in pairs:
        params[n].copy_(t)


def inject(mp, name: str, onset: int, dtype: torch.dtype = torch.float32) -> None:
    """Monkeypatch (pytest's MonkeyPatch `mp`) TorchSampler with fault `name` from step `onset` on."""
    where = FAULTS[name][0]
    if where == "sync":
        assert onset >= 2, "a sync fault first shows in the step after the sync"
        real, calls = TorchSampler.sync_weights, [0]

        def sync(self, weights):
            calls[0] += 1
            if calls[0] < onset - 1:
                if name == "one step old":
                    weights = self._older = [(n, t.detach().clone()) for n, t in weights]
                return real(self, weights)
            return _faulty_sync(self, weights, name, real)

        mp.setattr(TorchSampler, "sync_weights", sync)
        return
    real_gen, calls = TorchSampler.generate, [0]

    def generate(self, prompts, n, params, progress=None):
        calls[0] += 1
        if calls[0] >= onset:
            if name == "sampler dtype":
                self.model.to(torch.float32 if dtype != torch.float32 else torch.bfloat16)
            elif name == "temperature":
                params = replace(params, temperature=0.7)
            elif name == "top-p":
                params = replace(params, top_p=0.9)
            elif name == "extra BOS":
                prompts = [[BOS, *p] for p in prompts]
        return real_gen(self, prompts, n, params, progress)

    mp.setattr(TorchSampler, "generate", generate)


# Faults the sampler check cannot see: the sampler reports the trainer's settings (`used`) and log-probs under them,
# but draws its tokens from another distribution (an engine whose sampling temperature or top-p is not the one its
# log-probs use). Only the calibration check (nanogrpo/checks's sample_z) reads the draws themselves.
# name -> (what is injected, the draw's setting: a temperature or a top_p)
HIDDEN = {
    "hidden temperature": ("drawn at temperature 0.7, log-probs and settings reported at 1.0", 0.7),
    "hidden top-p": ("drawn from the top_p 0.9 nucleus, log-probs and settings reported at top_p 1.0", 0.9),
}


def inject_hidden(mp, name: str, onset: int, value: float | None = None) -> None:
    """Monkeypatch the PyTorch sampler's draw (sampler.sample_next) with hidden fault `name` from the `onset`-th
    generate call on (1-based): tokens drawn at the fault's setting (or `value`), log-probs at the asked one."""
    import nanogrpo.torch_sampler as S

    value = HIDDEN[name][1] if value is None else value
    real_next, real_gen, calls = S.sample_next, TorchSampler.generate, [0]

    def generate(self, prompts, n, params, progress=None):
        calls[0] += 1
        return real_gen(self, prompts, n, params, progress)

    def sample_next(logits, temperature, top_p, u):
        if calls[0] < onset or temperature == 0:
            return real_next(logits, temperature, top_p, u)
        drawn = (value, top_p) if name == "hidden temperature" else (temperature, value)
        tokens, _ = real_next(logits, *drawn, u)
        logp = torch.log_softmax(logits.double() / temperature, -1).gather(-1, tokens[:, None]).squeeze(-1)
        return tokens, logp.float()

    mp.setattr(TorchSampler, "generate", generate)
    mp.setattr(S, "sample_next", sample_next)
