"""The PyTorch sampler (`TorchSampler`): batched sampling from an HF causal LM with a KV cache written in place.

It computes what nanogrpo/sampler.py's `reference_generate` states in a few plain lines (read that first;
tests/test_sampler.py holds the two equal token for token): this file is how the same tokens come fast. It holds its
own plain (unsharded) copy of the model, so every rank generates on its own with no collectives; the trainer pushes
new weights with `sync_weights`. How one `generate` call runs (continuous batching, the model's own decoder layers with
attention through `KV_ATTENTION`) and its speed against the roofline (scripts/bench/bench_sampler.py):
docs/throughput.md, 'How the PyTorch sampler runs'.

The log-probs come from the decode's kernels (~5e-7 per token from the trainer's in fp32; `exact_logprobs`
recomputes them in the trainer).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.masking_utils import AttentionMaskInterface

from nanogrpo.logprobs import fp32_head, logp_moments
from nanogrpo.sampler import Completion, Progress, SamplingParams, Used, check_request, decode, eos_ids, uniforms

# Model types whose forward is embed_tokens -> rotary_emb -> layers -> norm -> lm_head, each layer taking
# (hidden, attention_mask, position_ids, past_key_values, position_embeddings) and returning the hidden states.
ARCHITECTURES = ("llama", "qwen2", "qwen3", "mistral")
PREFILL_TOKENS = 4096  # prompt tokens (padded) per prefill forward: 1.6x the tokens/s of one 16k-token forward on CPU


# ---- sampling ----

_BLOCK = 256  # tokens per block of the two-level inverse CDF
_TOP_K = 1024  # top-p: the nucleus is looked for among the top k tokens first (a full sort only when it is larger)


def sample_next(logits: torch.Tensor, temperature: float, top_p: float, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row from fp32 `logits` (B, V) with one uniform `u` (B,) per row; returns
    (tokens (B,), their log-probs (B,)) under log_softmax(logits / temperature), before top-p.

    The draw inverts the CDF in two levels, so no pass over the vocabulary is a cumulative sum: the mass of each
    block of _BLOCK tokens (float64), the block the draw falls in, then the CDF inside that block. Top-p ranks
    only the top _TOP_K tokens (torch.topk) unless the nucleus reaches past them. About 3 passes over (B, V)
    where log_softmax + a float64 cumsum took 6 (or a full sort): 18 -> 2 ms a step at 64 x 49,152
    (torch.multinomial: 48 ms)."""
    if temperature == 0:
        tokens = logits.argmax(dim=-1)  # (B,)
        return tokens, logits.gather(-1, tokens[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    z = logits / temperature if temperature != 1.0 else logits  # (B, V)
    B, V = z.shape
    top = z.amax(dim=-1, keepdim=True)  # (B, 1)
    e = (z - top).exp_()  # (B, V): unnormalised probabilities, the largest is 1
    full = V // _BLOCK * _BLOCK
    # (B, V / _BLOCK): each block's mass, summed in fp32 (256 terms: ~1e-7 relative), carried on in float64
    mass = e[:, :full].view(B, -1, _BLOCK).sum(-1).double()
    if full < V:
        mass = torch.cat([mass, e[:, full:].sum(-1, keepdim=True).double()], dim=1)
    total = mass.sum(-1, keepdim=True)  # (B, 1)
    if top_p < 1.0:
        tokens = _nucleus_pick(e, total, top_p, u)
    else:
        tokens = _cdf_pick(e, mass, u[:, None] * total)
    logp = (z.gather(-1, tokens[:, None]) - top).double() - total.log()  # log_softmax(z) at the tokens
    return tokens, logp.squeeze(-1).float()


def _cdf_pick(e: torch.Tensor, mass: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The token where each row's CDF of `e` (B, V) passes `x` (B, 1), through the block masses `mass` (B, nb)."""
    V = e.shape[1]
    cdf = mass.cumsum(dim=-1)  # (B, nb)
    block = torch.searchsorted(cdf, x, right=True).clamp(max=mass.shape[1] - 1)  # (B, 1): the block x falls in
    x = x - (cdf.gather(-1, block) - mass.gather(-1, block))  # (B, 1): what is left of x inside that block
    ids = block * _BLOCK + torch.arange(_BLOCK, device=e.device)  # (B, _BLOCK): the block's token ids
    inner = e.gather(-1, ids.clamp(max=V - 1)).double().masked_fill_(ids >= V, 0.0).cumsum(dim=-1)
    pick = torch.searchsorted(inner, x, right=True).clamp(max=_BLOCK - 1)  # (B, 1); rounding at the edge
    return ids.gather(-1, pick).clamp(max=V - 1).squeeze(-1)


def _nucleus_pick(e: torch.Tensor, total: torch.Tensor, top_p: float, u: torch.Tensor) -> torch.Tensor:
    """Top-p: draw among the most likely tokens while the mass ranked above them is still short of top_p (so the
    most likely token is always kept, and a tiny top_p keeps only it)."""
    p, ids = e.topk(min(_TOP_K, e.shape[1]), dim=-1)  # (B, k), descending
    if bool((p.sum(-1, keepdim=True, dtype=torch.float64) < top_p * total).any()):  # a nucleus past the top k
        p, ids = e.sort(dim=-1, descending=True)
    p = p.double() / total
    cdf = p.cumsum(dim=-1)  # (B, k)
    kept = ((cdf - p) < top_p).sum(dim=-1, keepdim=True)  # (B, 1) >= 1
    pick = torch.searchsorted(cdf, u[:, None] * cdf.gather(-1, kept - 1), right=True)
    return ids.gather(-1, torch.minimum(pick, kept - 1)).squeeze(-1)


# ---- the KV cache and the attention that reads it ----

KV_ATTENTION = "nanogrpo_kv_cache"


def _kv_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, sliding_window=None,
                  **kwargs):
    """query (B, H, T, D) and the keys / values the cache returned -> (B, T, H, D).

    Prefill (`attention_mask` None): key / value (B, KV, T, D) of right-padded prompts, causal SDPA.
    Decode (T = 1): KVCache hands the keys transposed, (B, KV, D, L), and the values (B, KV, L, D);
    `attention_mask` (B, 1, 1, L) is 0 on each row's filled cache columns and -inf elsewhere. The H query
    heads are grouped by kv head, (B, KV, H/KV, D), so each kv head is read once for its group. Two matmuls and a
    softmax, K stored (D, L): faster than q @ K^T from a (L, D) cache and than SDPA's CPU kernel on these 1-token
    queries (measured: docs/throughput.md)."""
    if sliding_window and value.shape[2] > sliding_window:
        raise ValueError(f"the PyTorch sampler has no sliding window and this model's is {sliding_window} tokens, "
                         f"shorter than the {value.shape[2]}-token sequence: use sampler = 'vllm'")
    B, H, T, D = query.shape
    if attention_mask is None:
        out = F.scaled_dot_product_attention(query, key, value, is_causal=T > 1, scale=scaling,
                                             enable_gqa=H != key.shape[1])
        return out.transpose(1, 2), None
    KV = key.shape[1]
    q = query.reshape(B, KV, H // KV, D) * (D**-0.5 if scaling is None else scaling)
    scores = torch.matmul(q, key).add_(attention_mask)  # (B, KV, H/KV, L)
    out = torch.matmul(scores.softmax(dim=-1, dtype=torch.float32).to(value.dtype), value)  # (B, KV, H/KV, D)
    return out.reshape(B, 1, H, D), None


AttentionInterface.register(KV_ATTENTION, _kv_attention)
AttentionMaskInterface.register(KV_ATTENTION, lambda *args, **kwargs: None)  # the decode loop passes its own mask


class _PrefillCache:
    """What a prefill forward's layers hand `update`: kept as they are, to be copied into the slots."""

    def __init__(self, layers: int):
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] = [None] * layers  # type: ignore[list-item]

    def update(self, key, value, layer_idx, *args, **kwargs):
        self.kv[layer_idx] = (key, value)
        return key, value


class KVCache:
    """Keys and values of `slots` rows, per layer: keys (slots, kv_heads, head_dim, length), transposed so that
    decode's q @ K reads them row by row, and values (slots, kv_heads, length, head_dim); filled in place.

    Running rows occupy slots [0, rows); slot r holds its prompt and generated tokens in columns [0, lens[r]).
    `length` grows by half (up to `max_length`) when a row reaches it, one layer at a time, so memory follows the
    longest row so far and a growth holds one layer twice (docs/throughput.md). Zero-initialised: masked columns are
    never NaN (a masked score gets weight 0, and 0 * NaN would still be NaN)."""

    def __init__(self, layers, slots, kv_heads, head_dim, max_length, dtype, device):
        self.max_length, self.dtype, self.device = max_length, dtype, device
        self.k = [torch.zeros((slots, kv_heads, head_dim, 0), dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.zeros((slots, kv_heads, 0, head_dim), dtype=dtype, device=device) for _ in range(layers)]
        self.lens = torch.zeros(slots, dtype=torch.long, device=device)  # (slots,)
        self.rows = 0
        self.width = 0  # columns the next decode step attends over: max(lens[:rows]) + 1

    def reserve(self, length: int) -> None:
        have = self.v[0].shape[2]
        if length <= have:
            return
        new = min(self.max_length, max(length, have + have // 2, 32))
        for layer in range(len(self.v)):
            k, v = self.k[layer], self.v[layer]
            self.k[layer] = k.new_zeros((*k.shape[:3], new))
            self.k[layer][..., :have] = k
            self.v[layer] = v.new_zeros((*v.shape[:2], new, v.shape[3]))
            self.v[layer][:, :, :have] = v

    def fill(self, layer_kv: list[tuple[torch.Tensor, torch.Tensor]], src: torch.Tensor, lens: list[int]) -> None:
        """Append rows: prefill rows `src` (R,) of each layer's (U, KV, T, D) keys / values, with lengths `lens`."""
        r0, R, T = self.rows, len(lens), layer_kv[0][0].shape[2]
        self.reserve(max(lens) + 1)
        for layer, (k, v) in enumerate(layer_kv):
            self.k[layer][r0 : r0 + R, :, :, :T] = k[src].transpose(-1, -2)
            self.v[layer][r0 : r0 + R, :, :T] = v[src]
        self.lens[r0 : r0 + R] = torch.tensor(lens, device=self.device)
        self.rows += R

    def remove(self, gone: list[int]) -> list[int]:
        """Free the slots in `gone`: the last running rows move into the holes below the new row count.
        Returns the new order as old slot indices (new slot i holds what old slot order[i] held)."""
        keep = self.rows - len(gone)
        order = list(range(self.rows))
        gone_set = set(gone)
        holes = [s for s in gone if s < keep]
        movers = [s for s in range(keep, self.rows) if s not in gone_set]
        if holes:
            dst, src = torch.tensor(holes, device=self.device), torch.tensor(movers, device=self.device)
            width = int(self.lens[src].max()) + 1
            for k, v in zip(self.k, self.v):
                k[dst, ..., :width] = k[src, ..., :width]
                v[dst, :, :width] = v[src, :, :width]
            self.lens[dst] = self.lens[src]
            for h, m in zip(holes, movers):
                order[h] = m
        self.rows = keep
        return order[:keep]

    def step(self, dtype: torch.dtype) -> torch.Tensor:
        """Before a decode step: make room for one more token per row; returns the (rows, 1, 1, width) additive
        mask, 0 where a row attends (its cached tokens and the one written now) and -inf elsewhere."""
        lens = self.lens[: self.rows]
        self.width = int(lens.max()) + 1
        self.reserve(self.width)
        mask = torch.zeros((self.rows, 1, 1, self.width), dtype=dtype, device=self.device)
        return mask.masked_fill_(torch.arange(self.width, device=self.device) > lens[:, None, None, None], float("-inf"))

    def update(self, key, value, layer_idx, *args, **kwargs):
        """The decoder layer's hook: write this step's (rows, KV, 1, D) key / value at each row's length; returns
        the keys (rows, KV, D, width) and values (rows, KV, width, D) the attention reads (_kv_attention)."""
        rows, lens = self.rows, self.lens[: self.rows]
        at = torch.arange(rows, device=self.device)
        k, v = self.k[layer_idx], self.v[layer_idx]
        k[at, :, :, lens] = key[:, :, 0]
        v[at, :, lens] = value[:, :, 0]
        return k[:rows, ..., : self.width], v[:rows, :, : self.width]


def _onednn_linear(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """module(x) through oneDNN's fp32 GEMM on the weight packed in its blocked layout (`module._onednn`): the
    private ops inductor emits for CPU linears (torch.ops.mkldnn._reorder_linear_weight / _linear_pointwise,
    tested with torch 2.13.0; tests/test_sampler.py pins them to F.linear). Why: torch's own fp32 matmul calls
    MKL, which takes its AVX2 path on AMD CPUs; on this project's AVX-512 machines (AMD EPYC, Zen 5) oneDNN's
    GEMM runs 2.4x faster at decode batch sizes (490 against 200 GFLOP/s at 64 rows; packing is 11% of that,
    docs/throughput.md). Same fp32 arithmetic in another summation order (~1e-6 relative)."""
    return torch.ops.mkldnn._linear_pointwise(x, module._onednn[1], module.bias, "none", [], "")


ONEDNN_MIN_WEIGHT = 2**16  # smaller linears keep MKL: a oneDNN call costs ~15 us more, their whole GEMM ~3 us


@contextlib.contextmanager
def cpu_gemms(model: torch.nn.Module, on: bool):
    """While generating, every nn.Linear of `model` runs `_onednn_linear` (`on`: fp32 on CPU; else nothing
    changes). A weight is packed again when it changed since it was packed (its in-place version counter: every
    sync_weights), so the packed copy (one more copy of the weights) is never stale. Outside this block the model
    is the plain HF model: nanogrpo/checks runs the trainer's kernels on it."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and "forward" not in vars(m)
               and m.weight.numel() >= ONEDNN_MIN_WEIGHT] if on else []
    for m in linears:
        version = m.weight._version
        if getattr(m, "_onednn", (None,))[0] != version:
            m._onednn = (version, torch.ops.mkldnn._reorder_linear_weight(m.weight.detach(), 64))
        m.forward = functools.partial(_onednn_linear, m)
    try:
        yield
    finally:
        for m in linears:
            del m.forward


@dataclass
class _Row:
    prompt: int  # index of its prompt in the call
    sample: int  # which of the prompt's n samples
    tokens: list[int]
    logprobs: list[float]
    reason: str = ""  # "" while running, then "stop" | "length"
    calibration: tuple[float, float] = (0.0, 0.0)  # SamplingParams.moments: Σ log p - E[log p], Σ Var[log p]


class TorchSampler:
    """Pure-PyTorch sampler; see the module docstring."""

    def __init__(self, model_dir: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                 max_batch_size: int = 128, lm_head_fp32: bool = False):
        if not (Path(model_dir) / "config.json").is_file():
            raise FileNotFoundError(f"sampler: {model_dir!r} is not a Hugging Face model directory (no config.json)")
        if max_batch_size < 1:
            raise ValueError(f"sampler: max_batch_size must be >= 1, got {max_batch_size}")
        self.device = torch.device(device)
        self.max_batch_size = max_batch_size  # rows decoded at once (cache slots)
        kind = AutoConfig.from_pretrained(model_dir).model_type
        if kind not in ARCHITECTURES:
            raise ValueError(f"sampler: the PyTorch sampler runs {', '.join(ARCHITECTURES)} models (its decode loop "
                             f"drives their decoder layers: nanogrpo/torch_sampler.py); {model_dir!r} is a {kind!r} model: "
                             "use sampler = 'vllm'")
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation=KV_ATTENTION)
        self.model = self.model.to(self.device).eval()
        cfg = self.model.config
        self.eos_ids = eos_ids(self.tokenizer, self.model.generation_config.eos_token_id, cfg.eos_token_id)
        if lm_head_fp32:  # the trainer's `lm_head_fp32`: logits computed in fp32, never rounded to bf16 / fp16
            head = self.model.get_output_embeddings()
            head.forward = functools.partial(fp32_head, head)  # the instance's forward: parameter names unchanged
        # Padding is never attended to (right-padded prefill, masked decode), so the pad id only has to be a valid index.
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids)
        self.kv_heads, self.head_dim = cfg.num_key_value_heads, self.model.model.layers[0].self_attn.head_dim
        # oneDNN's GEMMs for the fp32 linears on CPU (cpu_gemms); lm_head_fp32's head keeps its own forward
        self.onednn = self.device.type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available()
        self.used: Used | None = None  # the last generate call's prompts and settings (nanogrpo/checks)

    # ---- the model ----

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, cache, mask, last: torch.Tensor) -> torch.Tensor:
        """ids, pos (B, T) -> fp32 logits (B, V) at the positions `last` (B,)."""
        m = self.model.model
        x = m.embed_tokens(ids)  # (B, T, H)
        rope = m.rotary_emb(x, pos)
        for layer in m.layers:
            x = layer(x, attention_mask=mask, position_ids=pos, past_key_values=cache, position_embeddings=rope)
        x = m.norm(x[torch.arange(len(last), device=x.device), last])  # (B, H): the final norm of the last tokens only
        return self.model.lm_head(x).float()  # (B, V)

    def _prefill(self, prompts: list[list[int]]) -> tuple[torch.Tensor, _PrefillCache]:
        """One forward over right-padded prompts -> (logits at each one's last token (U, V), their keys / values)."""
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)  # (U, T)
        for r, p in enumerate(prompts):
            ids[r, : len(p)] = torch.tensor(p, dtype=torch.long)
        pos = torch.arange(width).expand(len(prompts), width)  # (U, T)
        last = torch.tensor([len(p) - 1 for p in prompts])
        cache = _PrefillCache(len(self.model.model.layers))
        return self._forward(ids.to(self.device), pos.to(self.device), cache, None, last.to(self.device)), cache

    # ---- generation ----

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], n: int, params: SamplingParams,
                 progress: Progress | None = None) -> list[list[Completion]]:
        check_request(prompts, n, params)
        if not prompts:
            return []
        self.wake()  # after sleep(): weights back on the device (as the vLLM sampler does in generate)
        self.used = Used([list(p) for p in prompts], n, params.temperature, params.top_p)  # as run below
        with cpu_gemms(self.model, self.onednn):
            return self._generate(prompts, n, params, progress)

    def _generate(self, prompts, n, params, progress) -> list[list[Completion]]:
        seed = params.seed if params.seed is not None else int(torch.randint(0, 2**62, ()).item())
        dev, max_new = self.device, params.max_new_tokens
        longest = max(len(p) for p in prompts)
        slots = min(self.max_batch_size, n * len(prompts))
        cache = KVCache(self.model.config.num_hidden_layers, slots, self.kv_heads, self.head_dim, longest + max_new,
                        self.model.dtype, dev)

        # Waiting work, longest prompts first (similar lengths prefill together): (prompt, first sample, count).
        queue = []
        for i in sorted(range(len(prompts)), key=lambda i: -len(prompts[i])):
            queue += [(i, j, min(slots, n - j)) for j in range(0, n, slots)]
        queue.reverse()  # popped from the end
        rows: list[_Row] = []  # the running rows, in slot order
        done: list[_Row] = []
        logits = None  # (rows, V) fp32: the next token's logits of every running row
        stop_window = 4 * max((len(s) for s in params.stop), default=0) + 8
        while True:
            # admit waiting prompts into free slots: prefill them, then copy each prompt's cache into its samples' slots
            new: list[tuple[int, int, int]] = []
            while queue and cache.rows + sum(c for _, _, c in new) + queue[-1][2] <= slots:
                new.append(queue.pop())
            while new:  # one forward per piece of at most PREFILL_TOKENS padded tokens (longest prompts first)
                take = max(1, min(len(new), PREFILL_TOKENS // len(prompts[new[0][0]])))
                part, new = new[:take], new[take:]
                plogits, pcache = self._prefill([prompts[i] for i, _, _ in part])
                src = torch.repeat_interleave(torch.arange(len(part)), torch.tensor([c for _, _, c in part])).to(dev)
                cache.fill(pcache.kv, src, [len(prompts[i]) for i, _, c in part for _ in range(c)])
                rows += [_Row(i, j + k, [], []) for i, j, c in part for k in range(c)]
                logits = plogits[src] if logits is None else torch.cat([logits, plogits[src]])
                del pcache
            if not rows:
                break
            # sample one token per running row, from its own stream
            streams = torch.tensor([r.prompt * n + r.sample for r in rows], device=dev)
            counters = torch.tensor([len(r.tokens) for r in rows], device=dev)
            tok, lp = sample_next(logits, params.temperature, params.top_p, uniforms(seed, streams, counters))
            tok_list, lp_list = tok.tolist(), lp.tolist()
            if params.moments and params.temperature:  # of the distribution asked for, apart from the draw
                mean, var = (x.tolist() for x in logp_moments(logits, params.temperature, params.top_p))
                for r, l, m, v in zip(rows, lp_list, mean, var):
                    r.calibration = (r.calibration[0] + l - m, r.calibration[1] + v)
            for r, t, l in zip(rows, tok_list, lp_list):
                r.tokens.append(t)
                r.logprobs.append(l)
                if t in self.eos_ids:
                    r.reason = "stop"
            if params.stop:
                self._hit_stop(rows, params.stop, stop_window)
            for r in rows:
                if not r.reason and len(r.tokens) == max_new:
                    r.reason = "length"
            gone = [s for s, r in enumerate(rows) if r.reason]
            if progress is not None:
                progress(len(gone), len(rows))
            if gone:
                done += [rows[s] for s in gone]
                order = cache.remove(gone)
                rows = [rows[s] for s in order]
                at = torch.tensor(order, device=dev, dtype=torch.long)
                tok = tok[at]
            if not rows:
                logits = None
                continue
            # decode: the running rows' last tokens, at their own positions, through the cache
            mask = cache.step(self.model.dtype)
            pos = cache.lens[: cache.rows, None]  # (rows, 1): the position of the token written now
            logits = self._forward(tok[:, None], pos, cache, mask, torch.zeros(cache.rows, dtype=torch.long, device=dev))
            cache.lens[: cache.rows] += 1

        results: list[list[Completion | None]] = [[None] * n for _ in prompts]
        for r, text in zip(done, decode(self.tokenizer, [r.tokens for r in done], self.eos_ids)):
            results[r.prompt][r.sample] = Completion(r.tokens, r.logprobs, text, r.reason,
                                                     calibration=r.calibration if params.moments else None)
        return results  # type: ignore[return-value]

    def _hit_stop(self, rows: list[_Row], stops: tuple[str, ...], window: int) -> None:
        """Mark the rows whose new text now contains a stop string as finished ("stop")."""
        # Only the tail can hold a stop string that just completed: every token adds >= 1 byte and a
        # char is <= 4 bytes, so 4 * len(stop) + slack tokens cover it; decoding the tail keeps each
        # step O(1) in the completion length. Earlier occurrences would have stopped earlier steps.
        check = [r for r in rows if not r.reason]
        if not check:
            return
        tails = self.tokenizer.batch_decode([r.tokens[-window:] for r in check], skip_special_tokens=False,
                                            clean_up_tokenization_spaces=False)
        for r, text in zip(check, tails):
            if any(s in text for s in stops):
                r.reason = "stop"

    # ---- weights and memory ----

    @torch.no_grad()
    def sync_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy (HF state-dict name, full tensor) pairs into the model in place, one at a time. A tied lm_head and
        embedding are one tensor, so either name updates it. Every name is consumed before an error is raised: the
        trainer's iterator runs collectives that all ranks must finish."""
        params = dict(self.model.named_parameters(remove_duplicate=False))  # a tied tensor under both names
        problems, updated = [], set()
        for name, tensor in weights:
            param = params.get(name)
            if param is None or param.shape != tensor.shape:
                problems.append(f"unknown parameter name {name}" if param is None else
                                f"shape mismatch {name}: got {tuple(tensor.shape)}, expected {tuple(param.shape)}")
            else:
                param.copy_(tensor)  # casts dtype and moves device as needed
                updated.add(id(param))
        problems += [f"parameter not sent {name}" for name, p in self.model.named_parameters() if id(p) not in updated]
        if problems:
            raise ValueError("sampler.sync_weights: " + "; ".join(problems))

    def held_weights(self) -> Iterable[tuple[str, torch.Tensor]]:
        """(HF name, tensor) of every weight the decode reads, a tied one under both its names: what
        nanogrpo/checks checks against the trainer's weights."""
        return self.model.named_parameters(remove_duplicate=False)

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
