"""A tiny Qwen2 model and BPE tokenizer built locally, for tests and the CPU default run.

Nothing here touches the network: the tokenizer is trained on a small generated corpus and the model is
initialised at random. The default run's model (models/tiny-arithmetic, committed so that every machine
starts from the same bytes) is that random model after a supervised warm start, an ordinary sft.py run
(scripts/models/build_tiny_model.py, configs/tiny_warm_start.toml) on `curriculum_rows` (below), stopped while it
still makes carry mistakes so that GRPO starts from a low but non-zero held-out accuracy.
`evaluate_accuracy` measures accuracy with a plain KV-cache decoding loop independent of nanogrpo.sampler.

Why the warm start looks the way it does (measured, docs/learning.md): supervised training on 3-digit
sums alone sits on a loss plateau (~1.1) before it learns carries, and how long depends on the seed (one
seed was still on it after 1,650 steps, another left it at 700). GRPO cannot move a model on the plateau
(0.016 -> 0.004 held-out), while a model that has left it learns fast. Half the warm-start rows are
therefore easier sums (1- to 3-digit operands, never both 3-digit), which got that slow seed off the
plateau in ~1,000 steps (not a guarantee: seeds took 1,010 to 2,520 steps); and the stop is decided on a
sampled accuracy measured on 512 train-split rows, with up to 3,000 steps so that a slow seed still gets there.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

EOS = "<|endoftext|>"
PAD = "<|pad|>"


def _corpus(n: int = 2000, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        a, b = rng.randint(0, 9999), rng.randint(0, 9999)
        lines.append(f"{a}+{b}={a + b}")
        lines.append(f"What is {a} plus {b}? The answer is {a + b}.")
    return lines


def build_tokenizer(vocab_size: int = 96) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on arithmetic text. Digits stay single tokens so numbers are easy to learn."""
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD)


def tiny_config(vocab_size: int, tie_word_embeddings: bool = True, **overrides) -> Qwen2Config:
    # head_dim 32: the smallest head vLLM's attention kernels accept.
    kw = dict(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=512,
        rope_theta=10000.0,
        tie_word_embeddings=tie_word_embeddings,
        torch_dtype="float32",
    )
    kw.update(overrides)
    return Qwen2Config(**kw)


def build_random_model_dir(
    out_dir: str | Path, tie_word_embeddings: bool = True, seed: int = 0, **config_overrides
) -> Path:
    """Write a randomly initialised tiny model + tokenizer as a normal HF directory; returns its path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    cfg = tiny_config(len(tokenizer), tie_word_embeddings, **config_overrides)
    cfg.eos_token_id = tokenizer.eos_token_id
    cfg.pad_token_id = tokenizer.pad_token_id
    cfg.bos_token_id = None
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


# ----------------------------------------------------------------------------------------------
# Warm-start rows, and held-out accuracy.


def curriculum_rows(n: int, seed: int, easy_frac: float = 0.5) -> list[dict]:
    """Warm-start rows: the task's 3-digit train rows, with `easy_frac` of them replaced by easier sums
    whose operands have 1-3 digits (never both 3: those are the task's own rows, held-out pairs included)."""
    from nanogrpo.tasks.arithmetic import arithmetic_rows

    rng = random.Random(f"warm-start-{seed}")
    rows = arithmetic_rows("train", n, seed=seed)
    for i in range(n):
        if rng.random() < easy_frac:
            da, db = rng.choice([(x, y) for x in (1, 2, 3) for y in (1, 2, 3) if (x, y) != (3, 3)])
            a, b = rng.randint(0, 10**da - 1), rng.randint(0, 10**db - 1)
            rows[i] = {"problem": f"{a}+{b}=", "answer": str(a + b)}
    return rows


def tool_accuracy(model_dir, rows: list[dict], temperature: float, seed: int = 0, max_new_tokens: int = 96):
    """(exact-match accuracy of the answer after the last tool output, share of answers that ran code),
    one sample per row through the real tool loop (PyTorch sampler, local sandbox)."""
    from nanogrpo import tools
    from nanogrpo.sampler import SamplingParams
    from nanogrpo.torch_sampler import TorchSampler

    cfg = tools.ToolConfig()
    sampler = tools.ToolSampler(TorchSampler(str(model_dir)), cfg, tools.make_cells(cfg))
    prompts = [sampler.tokenizer.encode(r["problem"]) for r in rows]
    outs = [g[0] for g in sampler.generate(prompts, 1, SamplingParams(max_new_tokens, temperature, seed=seed))]
    acc = sum(c.answer_text.strip() == r["answer"] for c, r in zip(outs, rows)) / len(rows)
    return acc, sum(c.calls > 0 for c in outs) / len(rows)


@torch.no_grad()
def sample(
    model, tokenizer, prompts: list[str], temperature: float = 1.0, max_new_tokens: int = 8, seed: int = 0
) -> list[str]:
    """A plain KV-cache decoding loop (greedy when temperature == 0); returns completion texts without EOS.

    Kept separate from nanogrpo.sampler on purpose: the benchmark measures the model with code that
    does not depend on the sampler under test."""
    gen = torch.Generator().manual_seed(seed)
    enc = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    B, T = len(enc), max(len(e) for e in enc)
    ids = torch.full((B, T), tokenizer.pad_token_id, dtype=torch.long)  # (B, T), left-padded
    mask = torch.zeros((B, T), dtype=torch.long)  # (B, T)
    for i, e in enumerate(enc):
        ids[i, T - len(e) :] = torch.tensor(e)
        mask[i, T - len(e) :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, T)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
    past, logits = out.past_key_values, out.logits[:, -1]  # (B, V)
    done = torch.zeros(B, dtype=torch.bool)
    tokens = []
    for _ in range(max_new_tokens):
        if temperature == 0:
            nxt = logits.argmax(-1)  # (B,)
        else:
            probs = torch.softmax(logits.float() / temperature, -1)
            nxt = torch.multinomial(probs, 1, generator=gen).squeeze(-1)  # (B,)
        nxt = torch.where(done, torch.full_like(nxt, tokenizer.pad_token_id), nxt)
        tokens.append(nxt)
        done |= nxt == tokenizer.eos_token_id
        if done.all():
            break
        mask = torch.cat([mask, torch.ones((B, 1), dtype=torch.long)], -1)
        pos = pos[:, -1:] + 1
        out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos, past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1]
    texts = []
    for row in torch.stack(tokens, 1).tolist():  # (B, new)
        if tokenizer.eos_token_id in row:
            row = row[: row.index(tokenizer.eos_token_id)]
        texts.append(tokenizer.decode([t for t in row if t != tokenizer.pad_token_id]))
    return texts


def evaluate_accuracy(
    model, tokenizer, rows: list[dict], temperature: float = 1.0, n: int = 1, max_new_tokens: int = 8,
    batch_size: int = 512, seed: int = 0,
) -> float:
    """Exact-match accuracy (completion.strip() == answer) averaged over n samples per row."""
    model.eval()
    hits, total = 0, 0
    for j in range(n):
        for s in range(0, len(rows), batch_size):
            chunk = rows[s : s + batch_size]
            texts = sample(model, tokenizer, [r["problem"] for r in chunk], temperature, max_new_tokens, seed + 1000 * j + s)
            hits += sum(t.strip() == r["answer"] for t, r in zip(texts, chunk))
            total += len(chunk)
    return hits / total
