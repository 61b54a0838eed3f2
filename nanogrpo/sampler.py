"""Batched sampling from an HF causal LM with a KV cache, in plain PyTorch.

`TorchSampler` is the fallback rollout engine where vLLM is absent (and the reference the vLLM
sampler is checked against). It holds its own plain (unsharded) copy of the model, so every rank
generates on its own with no collectives; the trainer pushes new weights with `sync_weights`.

How one `generate` call runs:
  1. The n samples of every prompt become rows; rows are cut into chunks of at most
     `max_batch_size` rows (and `max_batch_tokens` KV-cache tokens) so memory stays bounded.
  2. Per chunk, each distinct prompt is prefilled once (left-padded, position ids counted from the
     first real token), and its KV cache rows are then repeated for its samples.
  3. Decode one token per step for the rows still running; a row that finishes (EOS, stop string,
     or max_new_tokens) is dropped from the batch and its cache, so it is no longer extended.

Log-probs: each token's log-prob is log_softmax(logits / temperature) at that token, computed in
fp32 before top-p truncation: the quantity the trainer recomputes. Greedy decoding
(temperature == 0) reports log_softmax(logits) (temperature 1) at the argmax token. They come from the
decode's kernels (a KV cache, one token per row per call), which round differently from the trainer's
whole-sequence forward (~5e-7 per token in fp32); `exact_logprobs` has the trainer recompute them with
this sampler's weights instead (nanogrpo/parity.py). In bf16 / fp16 the weights are in that dtype;
`lm_head_fp32` computes the logits in fp32 from them, as the trainer does with the same key.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Protocol

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from nanogrpo.model import fp32_head


@dataclass
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    stop: tuple[str, ...] = ()  # stop strings; EOS always stops
    seed: int | None = None  # None: drawn from torch's global RNG (reproducible under torch.manual_seed)

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
    token_ids: list[int]  # generated tokens; includes the EOS / the token that completed a stop string
    logprobs: list[float]  # log_softmax(logits / temperature) of each token, before top-p truncation
    text: str  # decoded token_ids without the EOS token (stop string kept)
    finish_reason: str  # "stop" (EOS or stop string) | "length"


class Sampler(Protocol):
    def generate(self, prompts: list[list[int]], n: int, params: SamplingParams) -> list[list[Completion]]: ...
    def sync_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None: ...
    def sleep(self) -> None: ...
    def wake(self) -> None: ...
    def close(self) -> None: ...  # release engines and memory; the sampler is not used after it


def _eos_ids(model, tokenizer) -> set[int]:
    """Every id that ends a completion: generation_config's (may be a list), config's and the tokenizer's."""
    ids: set[int] = set()
    for value in (model.generation_config.eos_token_id, model.config.eos_token_id, tokenizer.eos_token_id):
        if value is None:
            continue
        ids.update([value] if isinstance(value, int) else value)
    if not ids:
        raise ValueError("the model has no eos_token_id (generation_config, config or tokenizer)")
    return ids


def sample_next(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row from fp32 `logits` (B, V); returns (tokens (B,), their log-probs (B,))."""
    if temperature == 0:
        tokens = logits.argmax(dim=-1)  # (B,)
        logp = torch.log_softmax(logits, dim=-1)
    else:
        logp = torch.log_softmax(logits / temperature, dim=-1)  # (B, V)
        probs = logp.exp()
        if top_p < 1.0:
            sorted_p, sorted_ids = probs.sort(dim=-1, descending=True)  # (B, V)
            # Nucleus: keep a token while the mass ranked above it is still short of top_p
            # (so the most likely token is always kept, and a tiny top_p keeps only it).
            drop = (sorted_p.cumsum(dim=-1) - sorted_p) >= top_p
            pick = torch.multinomial(sorted_p.masked_fill(drop, 0.0), 1, generator=generator)  # (B, 1)
            tokens = sorted_ids.gather(-1, pick).squeeze(-1)
        else:
            tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


class TorchSampler:
    """Pure-PyTorch sampler; see the module docstring."""

    def __init__(
        self,
        model_dir: str,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        max_batch_size: int = 64,
        max_batch_tokens: int | None = None,
        lm_head_fp32: bool = False,
    ):
        if not (Path(model_dir) / "config.json").is_file():
            raise FileNotFoundError(f"sampler: {model_dir!r} is not a Hugging Face model directory (no config.json)")
        if max_batch_size < 1:
            raise ValueError(f"sampler: max_batch_size must be >= 1, got {max_batch_size}")
        self.device = torch.device(device)
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens  # cap on rows * (prompt + new tokens) per chunk
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(self.device).eval()
        self.eos_ids = _eos_ids(self.model, self.tokenizer)
        if lm_head_fp32:  # the trainer's `lm_head_fp32`: logits computed in fp32, never rounded to bf16 / fp16
            head = self.model.get_output_embeddings()
            head.forward = functools.partial(fp32_head, head)  # the instance's forward: parameter names unchanged
        # Pad positions are masked out, so the pad id only has to be a valid embedding index.
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids)

    # ---- generation ----

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], n: int, params: SamplingParams) -> list[list[Completion]]:
        params.check()
        if n < 1:
            raise ValueError(f"sampler: n must be >= 1, got {n}")
        for i, p in enumerate(prompts):
            if len(p) == 0:
                raise ValueError(f"sampler: prompt {i} is empty (a prompt needs at least one token)")
        self.wake()  # after sleep(): weights back on the device (as the vLLM sampler does in generate)
        seed = params.seed if params.seed is not None else int(torch.randint(0, 2**62, ()).item())
        generator = torch.Generator(device=self.device).manual_seed(seed)

        # Longest prompts first: a chunk then holds prompts of similar length (little padding).
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        results: list[list[Completion | None]] = [[None] * n for _ in prompts]
        filled = [0] * len(prompts)  # samples of each prompt done so far (a prompt may span chunks)
        for chunk in self._chunks(order, n, prompts, params.max_new_tokens):
            uniq = [i for i, _ in chunk]
            outs = self._generate_chunk([prompts[i] for i in uniq], [c for _, c in chunk], params, generator)
            rows = [i for i, c in chunk for _ in range(c)]
            for i, out in zip(rows, outs):
                results[i][filled[i]] = out
                filled[i] += 1
        return results  # type: ignore[return-value]

    def _chunks(self, order: list[int], n: int, prompts: list[list[int]], max_new: int):
        """Yield chunks as [(prompt index, number of its samples in the chunk)], within the row/token caps."""
        chunk: list[tuple[int, int]] = []
        rows = 0
        for i in order:
            left = n
            while left:
                cap = self.max_batch_size
                if self.max_batch_tokens is not None:
                    # Prompts come longest first, so a chunk's padded length is its first prompt's.
                    width = len(prompts[chunk[0][0]] if chunk else prompts[i]) + max_new
                    cap = min(cap, max(1, self.max_batch_tokens // width))  # at least one row
                if rows >= cap:
                    yield chunk
                    chunk, rows = [], 0
                    continue
                take = min(left, cap - rows)
                chunk.append((i, take))
                rows += take
                left -= take
        if chunk:
            yield chunk

    def _generate_chunk(
        self, prompts: list[list[int]], counts: list[int], params: SamplingParams, generator: torch.Generator
    ) -> list[Completion]:
        dev = self.device
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)  # (U, Lp) left-padded
        mask = torch.zeros((len(prompts), width), dtype=torch.long)  # (U, Lp)
        for r, p in enumerate(prompts):
            ids[r, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[r, width - len(p) :] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        # Positions count real tokens only, so padding does not shift RoPE.
        pos = (mask.cumsum(-1) - 1).clamp(min=0)  # (U, Lp)

        cache = DynamicCache(config=self.model.config)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=pos,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,  # only the last position's logits are needed
        )
        # One prefill per distinct prompt, then its cache row is repeated for each of its samples.
        expand = torch.repeat_interleave(torch.arange(len(prompts)), torch.tensor(counts)).to(dev)  # (B,)
        cache.batch_select_indices(expand)
        logits = out.logits[:, -1].float()[expand]  # (B, V)
        mask = mask[expand]  # (B, Lp)
        next_pos = pos[expand, -1] + 1  # (B,)
        B = expand.numel()

        tokens: list[list[int]] = [[] for _ in range(B)]
        logprobs: list[list[float]] = [[] for _ in range(B)]
        reasons = ["length"] * B
        active = list(range(B))  # output row of each batch row still decoding
        stop_window = 4 * max((len(s) for s in params.stop), default=0) + 8
        for step in range(params.max_new_tokens):
            tok, lp = sample_next(logits, params.temperature, params.top_p, generator)
            tok_list, lp_list = tok.tolist(), lp.tolist()
            done: set[int] = set()  # batch rows that finish at this step
            for b, row in enumerate(active):
                tokens[row].append(tok_list[b])
                logprobs[row].append(lp_list[b])
                if tok_list[b] in self.eos_ids:
                    reasons[row] = "stop"
                    done.add(b)
            if params.stop:
                done |= self._hit_stop(active, done, tokens, reasons, params.stop, stop_window)
            if step == params.max_new_tokens - 1:
                break
            if done:
                keep = [b for b in range(len(active)) if b not in done]
                if not keep:
                    break
                keep_t = torch.tensor(keep, device=dev)
                cache.batch_select_indices(keep_t)
                mask, next_pos, tok = mask[keep_t], next_pos[keep_t], tok[keep_t]
                active = [active[b] for b in keep]
            mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)  # (B, L + 1)
            out = self.model(
                input_ids=tok[:, None],
                attention_mask=mask,
                position_ids=next_pos[:, None],
                past_key_values=cache,
                use_cache=True,
            )
            logits = out.logits[:, -1].float()  # (B, V)
            next_pos = next_pos + 1

        # The text leaves out a final EOS token (a stop string's token stays).
        texts = self.tokenizer.batch_decode(
            [t[:-1] if t[-1] in self.eos_ids else t for t in tokens],
            skip_special_tokens=False,
            clean_up_tokenization_spaces=False,
        )
        return [Completion(tokens[r], logprobs[r], texts[r], reasons[r]) for r in range(B)]

    def _hit_stop(self, active, done, tokens, reasons, stops, window) -> set[int]:
        """Batch rows whose new text now contains a stop string (marks them finished)."""
        check = [b for b in range(len(active)) if b not in done]
        if not check:
            return set()
        # Only the tail can hold a stop string that just completed: every token adds >= 1 byte and a
        # char is <= 4 bytes, so 4 * len(stop) + slack tokens cover it; decoding the tail keeps each
        # step O(1) in the completion length. Earlier occurrences would have stopped earlier steps.
        tails = self.tokenizer.batch_decode(
            [tokens[active[b]][-window:] for b in check], skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
        hits = set()
        for b, text in zip(check, tails):
            if any(s in text for s in stops):
                reasons[active[b]] = "stop"
                hits.add(b)
        return hits

    # ---- weights and memory ----

    @torch.no_grad()
    def sync_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy (HF state-dict name, full tensor) pairs into the model in place, one at a time.

        With tied embeddings `lm_head.weight` and `model.embed_tokens.weight` are one tensor, so
        either name updates it. Every name is consumed before an error is raised, because the
        trainer's iterator runs collectives that all ranks must finish.
        """
        # remove_duplicate=False: both names of a tied tensor map to the same Parameter.
        params = dict(self.model.named_parameters(remove_duplicate=False))
        unknown, bad_shape, updated = [], [], set()
        for name, tensor in weights:
            param = params.get(name)
            if param is None:
                unknown.append(name)
            elif param.shape != tensor.shape:
                bad_shape.append(f"{name}: got {tuple(tensor.shape)}, expected {tuple(param.shape)}")
            else:
                param.copy_(tensor)  # casts dtype and moves device as needed
                updated.add(id(param))
        missing = [name for name, p in self.model.named_parameters() if id(p) not in updated]
        problems = []
        if unknown:
            problems.append(f"unknown parameter names {unknown}")
        if bad_shape:
            problems.append(f"shape mismatches {bad_shape}")
        if missing:
            problems.append(f"parameters not sent {missing}")
        if problems:
            raise ValueError("sampler.sync_weights: " + "; ".join(problems))

    def sleep(self) -> None:
        """Free accelerator memory while the trainer trains (weights wait on the CPU). No-op on CPU."""
        if self.device.type != "cpu":
            self.model.to("cpu")
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    def wake(self) -> None:
        if self.device.type != "cpu":
            self.model.to(self.device)

    def close(self) -> None:  # nothing outside this process to release (the vLLM sampler's engine is)
        pass

