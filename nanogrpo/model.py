"""Load an HF causal LM, shard it with FSDP2, and run it: decoder, then token log-probs (nanogrpo/logprobs.py).

`Policy` wraps the HF model so that one FSDP root forward computes the decoder and the chunked lm_head +
log-softmax: calling the submodules from outside the root would skip FSDP's all-gather of the root's parameters
(embeddings, final norm, lm_head).

Attention in the trainer (`pick_attention`): flash_attention_2 (varlen kernels) or `SEGMENT_SDPA`: torch's causal
SDPA, one call per sequence of a packed row, never a (T, T) mask (transformers' "sdpa" built one, costing the square
of the row: docs/throughput.md). tests/test_packing.py pins packed == padded and tests/test_model.py pins
SEGMENT_SDPA == transformers' sdpa.

The policy stays in eval mode: no dropout, so the trainer's log-probs are the sampler's. Activation checkpointing is
therefore ours (`_recomputed`), not transformers' `gradient_checkpointing_enable`, which only acts in train mode.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import checkpoint
from transformers import AttentionInterface, AutoModelForCausalLM, AutoTokenizer
from transformers.masking_utils import AttentionMaskInterface
from transformers.utils import logging as hf_logging

from nanogrpo import dist, files, lora
from nanogrpo.logprobs import chunked_logprobs

hf_logging.disable_progress_bar()  # a bar per weight load drowns the training log


class ModelError(ValueError):
    """A model directory that cannot be loaded as it is: the message names the file and what is wrong."""


# Any one of these makes a tokenizer (fast tokenizer.json, sentencepiece, BPE vocab, WordPiece vocab).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")


def _check_safetensors(f: Path) -> None:
    """The header parses and the file is as long as the header says (a truncated download is named here,
    not in a traceback from deep inside the loader)."""
    size = f.stat().st_size
    try:
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            if size < 8 or n > size - 8:
                raise ValueError(f"header length {n} does not fit in {size} bytes")
            header = files.loads(fh.read(n))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        raise ModelError(f"{f} is not a valid safetensors file ({e}); re-download or re-save the model") from None
    if 8 + n + end > size:
        raise ModelError(f"{f} is truncated: {size} bytes, its header describes {8 + n + end}; "
                         "re-download or re-save the model")


def check_model_dir(path: str) -> None:
    """Raise FileNotFoundError / ModelError naming what is missing or broken in a model directory."""
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"model directory not found: {path!r} (the default tiny model is committed as "
                                f"models/tiny-arithmetic; another one is built by "
                                f"`python scripts/models/build_tiny_model.py --out {path}`)")
    if not (p / "config.json").is_file():
        raise FileNotFoundError(f"{path!r} is not a Hugging Face model directory: it has no config.json")
    try:
        arch = files.loads((p / "config.json").read_bytes()).get("architectures") or []
    except (ValueError, AttributeError) as e:  # AttributeError: valid JSON that is not an object
        raise ModelError(f"{p / 'config.json'} is not a valid model config ({e})") from None
    if arch and not any(a.endswith("ForCausalLM") for a in arch):
        raise ModelError(f"{path!r} holds {arch}, not a causal LM")
    weights = sorted(p.glob("*.safetensors"))
    if not weights and not any(p.glob("*.bin")):
        raise ModelError(f"{path!r} has no weights (no *.safetensors or *.bin file)")
    for f in weights:
        _check_safetensors(f)


def check_tokenizer_files(path: str) -> None:
    if not any((Path(path) / f).is_file() for f in TOKENIZER_FILES):
        raise ModelError(f"{path!r} has no tokenizer files (one of {', '.join(TOKENIZER_FILES)}); copy them "
                         "from the base model (a checkpoint written by train.py has them)")


def load_tokenizer(path: str):
    check_model_dir(path)
    check_tokenizer_files(path)
    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token_id is None:  # Llama-style tokenizers ship no pad token; padding is masked anyway
        tok.pad_token = tok.eos_token
    return tok


def load_model(path: str, dtype: torch.dtype = torch.float32, device="cpu", attn_implementation: str = "sdpa"):
    """A plain (unsharded) HF causal LM in `dtype` on `device`."""
    check_model_dir(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attn_implementation)
    return model.to(device)


SEGMENT_SDPA = "nanogrpo_segment_sdpa"


def _segment_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, segments=None,
                  **kwargs):
    """Causal attention without a mask: query (B, H, T, D), key / value (B, KV, T, D) -> (B, T, H, D).

    `segments` None: one causal SDPA call over each row. The trainer's rows are right-padded, so every
    real token only sees real tokens before it; what the padding positions compute is never read.
    `segments` (S+1,) (packed row, B = 1): the sequences' boundaries; one causal call per sequence."""
    if getattr(module, "sliding_window", None):  # a window the causal call would not apply
        raise ValueError(f"attention {SEGMENT_SDPA!r} has no sliding window; use attention=flex_attention "
                         "or flash_attention_2 for this model")
    sdpa = functools.partial(F.scaled_dot_product_attention, dropout_p=dropout, scale=scaling, is_causal=True,
                             enable_gqa=query.shape[1] != key.shape[1])
    if segments is None:
        out = sdpa(query, key, value)
    else:
        # split, not one slice per sequence: a slice's backward writes its gradient into a zeroed tensor of the
        # whole row (S full-size tensors summed per layer); split's backward is one cat
        n = (segments[1:] - segments[:-1]).tolist()
        out = torch.cat([sdpa(q, k, v) for q, k, v in zip(query.split(n, 2), key.split(n, 2), value.split(n, 2))], 2)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(SEGMENT_SDPA, torch.compiler.disable(_segment_sdpa))  # compile: a graph break, not a recompile per layout
AttentionMaskInterface.register(SEGMENT_SDPA, lambda *args, **kwargs: None)  # the mask is the segments: none is built


def pick_attention(name: str, device: torch.device) -> str:
    """The transformers attention implementation for the config's `attention`. "auto": flash_attention_2
    on GPU when flash-attn is installed (varlen kernels), else SEGMENT_SDPA; "sdpa" is SEGMENT_SDPA too."""
    if name == "auto" and torch.device(device).type == "cuda":
        try:
            import flash_attn  # noqa: F401

            return "flash_attention_2"
        except ImportError:
            pass
    return SEGMENT_SDPA if name in ("auto", "sdpa") else name


def _segment_bounds(position_ids: torch.Tensor) -> torch.Tensor:
    """(S+1,) start of each sequence of a packed (1, T) row (where its position restarts at 0), then T."""
    starts = (position_ids[0] == 0).nonzero().flatten()
    return torch.cat([starts, starts.new_tensor([position_ids.shape[1]])])


def _right_padded(attention_mask: torch.Tensor) -> bool:
    return bool((attention_mask[:, 1:] <= attention_mask[:, :-1]).all() and attention_mask[:, 0].all())


class Policy(nn.Module):
    """The HF model plus chunked token log-probs in one forward (the FSDP root)."""

    def __init__(self, hf_model: nn.Module, chunk_size: int = 512, lm_head_fp32: bool = False):
        super().__init__()
        self.hf = hf_model
        self.chunk_size = chunk_size
        self.lm_head_fp32 = lm_head_fp32  # the lm_head matmul in fp32 (see fp32_head); a no-op for fp32 weights
        self.adapted = bool(lora.lora_modules(hf_model))  # LoRA (nanogrpo/lora.py): its weights go out merged

    def forward(self, input_ids, attention_mask, temperature: float = 1.0, with_entropy: bool = False, position_ids=None,
                positions=None, sampling: tuple[float, int] | None = None):
        """(logp, entropy), each (B, T-1) fp32: log p(input_ids[:, t+1] | input_ids[:, :t+1]).

        A packed row: attention_mask None, position_ids (1, T) restarting at 0 per sequence; the
        entries that predict the next sequence's first token are meaningless (callers never use them).
        `positions` (K,): only these slots of the flattened (B*(T-1)) predictions go through the
        lm_head (the completion tokens; prompt and padding need none), and the result is (1, K).
        `sampling`: the entropy is (..., 3) with the moments of log p the checks read (logprobs.chunked_logprobs)."""
        kw = {}
        if self.hf.config._attn_implementation == SEGMENT_SDPA:
            if position_ids is not None:
                kw["segments"] = _segment_bounds(position_ids)
            elif attention_mask is not None and not _right_padded(attention_mask):
                raise ValueError("the trainer's padded rows must be right-padded (real tokens first, then padding)")
            attention_mask = None  # packed: the segments; right-padded: causal alone (see _segment_sdpa)
        # use_cache=False: with a KV cache object transformers skips the packed-sequence mask
        h = self.hf.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          use_cache=False, **kw).last_hidden_state  # (B, T, H)
        h, targets = h[:, :-1], input_ids[:, 1:]
        if positions is not None:
            h = h.reshape(-1, h.shape[-1])[positions].unsqueeze(0)  # (1, K, H)
            targets = targets.reshape(-1)[positions].unsqueeze(0)  # (1, K)
        return chunked_logprobs(self.hf.get_output_embeddings(), h, targets, temperature, with_entropy, self.chunk_size,
                                self.lm_head_fp32, sampling)


def reference_logprobs(lm_head: nn.Module, h: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0,
                       head_fp32: bool = False):
    """(logp, entropy), each (B, T) fp32, of `targets` under lm_head(h): the whole logits, autograd through
    log_softmax. What `Policy.forward`'s kernel (logprobs.chunked_logprobs) computes a chunk of positions at a time,
    with a hand-written backward; read this one first (tests/test_model.py holds them equal, values and gradients)."""
    w, b = lm_head.weight, lm_head.bias
    if head_fp32:  # the matmul itself in fp32 (`lm_head_fp32`), not only its result
        w, b = w.float(), None if b is None else b.float()
    logits = F.linear(h.to(w.dtype), w, b).float()
    if temperature > 0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, -1)
    entropy = -(logp.exp() * logp).sum(-1).detach()
    return logp.gather(-1, targets[..., None])[..., 0], entropy


def make_policy(path: str, device: torch.device, dtype: torch.dtype, chunk_size: int, activation_checkpointing: bool,
                trainable: bool = True, compile: bool = False, attention: str = "auto",
                reshard_after_forward: bool = True, lora_rank: int = 0, lora_alpha: float = 16.0,
                lora_targets: list[str] | tuple[str, ...] = (), adapters_from: str | None = None,
                lm_head_fp32: bool = False) -> Policy:
    """The sharded Policy of the model at `path`, built so that no rank holds the whole model on its device.

    Every rank builds the model on the meta device, shards it (FSDP2 on each decoder layer and the root) and
    allocates only its own shards; rank 0 alone loads the checkpoint, fp32 on CPU, and broadcasts it one tensor at
    a time into every rank's shards (set_model_state_dict, broadcast_from_rank0): a node holds one full CPU copy,
    a GPU never more than its shards plus one tensor. The same path at world size 1. lora_rank > 0: `path` is the
    frozen base; adapters go on `lora_targets`, loaded from the checkpoint `adapters_from` when resuming."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from transformers import AutoConfig, GenerationConfig

    check_model_dir(path)  # on every rank: a bad directory stops them all before any collective
    attn = pick_attention(attention, device)
    full, error = None, None
    if dist.is_main():
        try:
            full = load_model(path, torch.float32, "cpu", attn)
            if lora_rank > 0:
                lora.add_adapters(full, lora_rank, lora_alpha, list(lora_targets))
                if adapters_from is not None:
                    lora.load_adapters(full, adapters_from)
            bad = next((n for n, p in full.named_parameters() if not bool(torch.isfinite(p).all())), None)
            if bad is not None:  # every weight it touches would turn NaN: a named error, not a run that learns nothing
                raise ModelError(f"{path}: the weight {bad!r} holds values that are not finite (NaN or inf)")
        except Exception as e:  # noqa: BLE001 - re-raised below, after the other ranks have heard of it
            error = e
    failed = dist.broadcast_object(None if error is None else f"{type(error).__name__}: {error}")
    if error is not None:
        raise error
    if failed:
        raise ModelError(f"rank 0 could not load {path!r}: {failed}")
    with torch.device("meta"):
        hf = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), attn_implementation=attn,
                                              dtype=torch.float32)
    try:  # as from_pretrained does: the checkpoint's own generation settings (EOS ids), saved with every checkpoint
        hf.generation_config = GenerationConfig.from_pretrained(path)
    except OSError:
        pass
    if lora_rank > 0:
        lora.add_adapters(hf, lora_rank, lora_alpha, list(lora_targets))
    policy = wrap_policy(hf, dtype, chunk_size, activation_checkpointing, trainable, compile, reshard_after_forward,
                         lm_head_fp32)
    policy.to_empty(device=device)  # this rank's shards, uninitialised
    set_model_state_dict(hf, full.state_dict() if full is not None else {},
                         options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    # buffers that are not in a state dict (rotary inv_freq): recomputed by from_pretrained on rank 0 only
    source = dict(full.named_buffers()) if full is not None else {}
    with torch.no_grad():
        for name, buf in hf.named_buffers():
            if full is not None:
                buf.copy_(source[name])
            dist.broadcast(buf)
    return policy


def wrap_policy(hf: nn.Module, dtype: torch.dtype, chunk_size: int, activation_checkpointing: bool,
                trainable: bool = True, compile: bool = False, reshard_after_forward: bool = True,
                lm_head_fp32: bool = False) -> Policy:
    """An HF model (already on its device) as a sharded Policy.

    Parameters stay fp32 (the optimizer's master copy); compute runs in `dtype` (bf16 / fp16, on GPU and CPU alike)
    with fp32 gradient reduction: FSDP2 all-gathers the parameters in `dtype` and reduce-scatters the gradients in
    fp32 (checked under gloo: tests/test_precision.py, docs/precision.md). `compile` compiles each decoder layer's
    forward (the layer object stays, so FSDP's hooks run outside the graph and parameter names stay the HF ones).
    Resharding and prefetch, and why: docs/throughput.md, 'FSDP2 settings'."""
    hf.config.use_cache = False
    mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32) if dtype != torch.float32 else MixedPrecisionPolicy()
    for layer in hf.model.layers:
        if compile:
            layer.forward = torch.compile(layer.forward)
        if activation_checkpointing:
            layer.forward = _recomputed(layer.forward)
        fully_shard(layer, mp_policy=mp, reshard_after_forward=reshard_after_forward)
    policy = Policy(hf, chunk_size, lm_head_fp32).eval()  # no dropout: see the module docstring
    fully_shard(policy, mp_policy=mp)
    if not trainable:
        policy.requires_grad_(False)
    return policy


def _recomputed(forward):
    """A decoder layer's forward that keeps only its inputs for backward and runs again there (activation
    checkpointing): the layer's activations exist for one layer at a time. It sits inside the layer's
    __call__, so FSDP's hooks (all-gather before, reshard after) stay outside it."""

    @functools.wraps(forward)
    def run(*args, **kwargs):
        if not torch.is_grad_enabled():
            return forward(*args, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    return run


def iter_full_params(policy: Policy) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF state-dict name, full tensor) for every parameter, gathered one parameter at a time.

    Every rank must consume the whole iterator: each `full_tensor()` is an all-gather. At most one full tensor is
    alive here at a time. Tied weights appear once (under the embedding's name). With LoRA an adapted weight is
    sent merged (W + alpha/r·B A), the adapters not: the receiver sees the plain HF model."""
    full = lambda q: q.full_tensor() if hasattr(q, "full_tensor") else q.data  # noqa: E731
    if policy.adapted:
        yield from lora.merged_params(policy.hf, full)
        return
    for name, p in policy.hf.named_parameters():
        yield name, full(p).detach()


def full_state_dict_cpu(policy: Policy) -> dict[str, torch.Tensor]:
    """The whole model as full CPU tensors (rank 0 keeps them; other ranks get an empty dict)."""
    return {name: t.cpu().clone() for name, t in iter_full_params(policy) if dist.is_main()}  # every rank gathers
