"""What every sampler is: the `Sampler` protocol, `SamplingParams`, `Completion`, and what the PyTorch sampler
computes, read plainly (`reference_generate`).

The trainer asks a sampler for `n` completions of each prompt (`generate`), pushes its weights after every update
(`sync_weights`), and lends it the device between (`sleep` / `wake`). The two samplers: nanogrpo/torch_sampler.py
and nanogrpo/vllm_sampler.py.

Sampling: each token's log-prob is log_softmax(logits / temperature) at that token, computed before top-p
truncation: the quantity the trainer recomputes. Greedy (temperature == 0) reports log_softmax(logits) at the
argmax token. A token is drawn by inverting the (nucleus') CDF with one uniform number, taken from a
counter-based stream keyed by (seed, prompt, sample, token index) (`uniforms`): a sample's draws do not depend on
which other rows share its batch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

import torch


@dataclass
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    stop: tuple[str, ...] = ()  # stop strings; EOS always stops
    seed: int | None = None  # None: drawn from torch's global RNG (reproducible under torch.manual_seed)
    moments: bool = False  # also sum each draw's log p - E[log p] and Var[log p] (Completion.calibration), if it can

    def check(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if isinstance(self.stop, str) or any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"SamplingParams.stop must be a tuple of non-empty strings, got {self.stop!r}")


@dataclass
class Completion:
    """One sampled completion, from every sampler. The tool loop (nanogrpo/tools.py) fills the fields after
    finish_reason; without tools they keep their defaults, so every reader reads them plainly."""
    token_ids: list[int]  # generated tokens; includes the EOS / the token that completed a stop string
    logprobs: list[float]  # log_softmax(logits / temperature) of each token, before top-p truncation
    text: str  # decoded token_ids without the EOS token (stop string kept)
    finish_reason: str  # "stop" (EOS or stop string) | "length"
    mask: list[int] | None = None  # per token: 1 sampled by the model, 0 tool output; None: all sampled
    final_text: str | None = None  # what the model wrote after its last tool output; None: no tool loop
    calls: int = 0  # tool calls run
    errors: int = 0  # cells that raised or ended their interpreter
    timeouts: int = 0
    tool_seconds: float = 0.0  # sandbox execution time of this rollout's cells
    failed: bool = False  # the sandbox itself failed: the reward must be None
    # (Σ log p - E_q[log p], Σ Var_q[log p]) over every token it drew, q the distribution drawn from (temperature,
    # top_p), when asked (SamplingParams.moments) and the sampler computes them (the PyTorch one): the checks'
    # calibration test reads them (nanogrpo/checks SampleGate); None: not computed
    calibration: tuple[float, float] | None = None

    @property
    def answer_text(self) -> str:
        """The text a verifier reads: after the last tool output with tools, the whole text without."""
        return self.text if self.final_text is None else self.final_text


@dataclass
class Used:
    """What a generate call really ran with (`sampler.used`, replaced by each call), for the trainer to compare
    with what it asked for (nanogrpo/checks/sampler.py's CheckedSampler): a sampler that changed the prompts or the
    sampling settings on the way is caught at that step."""
    prompts: list[list[int]]
    n: int
    temperature: float
    top_p: float


# progress(samples, tokens): called during generate with the samples finished and tokens generated since its last
# call (increments), so a caller can show progress within one long call
Progress = Callable[[int, int], None]


class Sampler(Protocol):
    def generate(
        self, prompts: list[list[int]], n: int, params: SamplingParams, progress: Progress | None = None
    ) -> list[list[Completion]]: ...
    def sync_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None: ...
    def sleep(self) -> None: ...
    def wake(self) -> None: ...
    def close(self) -> None: ...  # release engines and memory; the sampler is not used after it


def check_request(prompts: list[list[int]], n: int, params: SamplingParams) -> None:
    """What every sampler refuses before it generates: settings out of range, n < 1, an empty prompt."""
    params.check()
    if n < 1:
        raise ValueError(f"sampler: n must be >= 1, got {n}")
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"sampler: prompt {i} is empty (a prompt needs at least one token)")


def decode(tokenizer, token_lists: list[list[int]], eos: set[int]) -> list[str]:
    """Each completion's text (`Completion.text`, every sampler's): its tokens but a final EOS, special tokens kept."""
    return tokenizer.batch_decode([t[:-1] if t and t[-1] in eos else t for t in token_lists],
                                  skip_special_tokens=False, clean_up_tokenization_spaces=False)


def eos_ids(tokenizer, *values) -> set[int]:
    """Every id that ends a completion: the tokenizer's and `values`, the eos_token_id of the model's generation
    config (it may be a list) and of its config (the PyTorch sampler reads the model's, vLLM's the files)."""
    ids: set[int] = set()
    for value in (*values, tokenizer.eos_token_id):
        if value is not None:
            ids.update([value] if isinstance(value, int) else value)
    if not ids:
        raise ValueError("the model has no eos_token_id (generation_config, config or tokenizer)")
    return ids


def unwrap(sampler):
    """The sampler that generates and holds the weights: the one its wrappers wrap (each keeps it as `.sampler`: the
    tool loop's tools.ToolSampler, the sampler check's checks.CheckedSampler), else the sampler itself."""
    while getattr(sampler, "sampler", None) is not None:
        sampler = sampler.sampler
    return sampler


# ---- the plain reading ----


@torch.inference_mode()
def reference_generate(model, tokenizer, prompts: list[list[int]], n: int,
                       params: SamplingParams) -> list[list[Completion]]:
    """What `TorchSampler.generate` computes, read plainly: one sample and one token at a time, each token from a
    forward over the whole sequence (no cache, no batch), drawn with the uniform of stream prompt i * n + sample j.
    tests/test_sampler.py holds TorchSampler to this, token for token. Needs `params.seed` when temperature > 0."""
    eos = eos_ids(tokenizer, model.generation_config.eos_token_id, model.config.eos_token_id)
    decode = functools.partial(tokenizer.decode, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    out = []
    for i, prompt in enumerate(prompts):
        out.append([])
        for j in range(n):
            tokens, logprobs, reason = [], [], "length"
            while reason == "length" and len(tokens) < params.max_new_tokens:
                logits = model(torch.tensor([prompt + tokens], device=model.device)).logits[0, -1].double()
                draw = torch.tensor([i * n + j]), torch.tensor([len(tokens)])  # (stream, counter)
                u = float(uniforms(params.seed, *draw)) if params.temperature else 0.0
                token, logp = _pick(logits, params.temperature, params.top_p, u)
                tokens.append(token)
                logprobs.append(logp)
                if token in eos or any(s in decode(tokens) for s in params.stop):
                    reason = "stop"
            out[-1].append(Completion(tokens, logprobs, decode(tokens[:-1] if tokens[-1] in eos else tokens), reason))
    return out


def _pick(logits: torch.Tensor, temperature: float, top_p: float, u: float) -> tuple[int, float]:
    """The token whose CDF interval holds u, and its log_softmax(logits / temperature); the argmax at temperature 0.
    Top-p: the CDF runs over the tokens from the most likely down, cut before the first whose mass ranked above it
    reaches top_p (the most likely is always kept); without top-p, in token id order."""
    if temperature == 0:
        token = int(logits.argmax())
        return token, float(torch.log_softmax(logits, -1)[token])
    logp = torch.log_softmax(logits / temperature, -1)
    order = torch.arange(len(logp)) if top_p == 1 else logp.argsort(descending=True)
    p = logp[order].exp()
    cdf = p.cumsum(0)
    kept = len(p) if top_p == 1 else int(((cdf - p) < top_p).sum())
    k = int(torch.searchsorted(cdf[:kept], u * cdf[kept - 1], right=True))
    token = int(order[min(k, kept - 1)])
    return token, float(logp[token])


# ---- the random stream ----


def _signed(c: int) -> int:
    """A 64-bit constant as torch's int64 holds it (two's complement)."""
    c &= (1 << 64) - 1
    return c - (1 << 64) if c >> 63 else c


_GOLDEN, _MIX1, _MIX2 = _signed(0x9E3779B97F4A7C15), _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def _mix64(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 tensors (products wrap mod 2**64; `>>` is arithmetic, so masked)."""
    x = (x ^ ((x >> 30) & ((1 << 34) - 1))) * _MIX1
    x = (x ^ ((x >> 27) & ((1 << 37) - 1))) * _MIX2
    return x ^ ((x >> 31) & ((1 << 33) - 1))


def hash64(x: torch.Tensor) -> torch.Tensor:
    """(int64) well-mixed 64-bit values of int64 counters `x`, the same on every device (splitmix64)."""
    return _mix64(x * _GOLDEN)


def uniforms(seed: int, streams: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """(B,) float64 in [0, 1): the `counters`-th draw of each of the `streams` (int64 ids) of `seed`; counter + 1,
    as splitmix64 maps 0 to 0 (seed 0's stream 0 drew u = 0: the lowest token id with any mass, e^-85 at T = 0.1)."""
    x = _mix64(_mix64(streams * _GOLDEN + _signed(seed)) + (counters + 1) * _GOLDEN)
    return ((x >> 11) & ((1 << 53) - 1)).double() * 2.0**-53
