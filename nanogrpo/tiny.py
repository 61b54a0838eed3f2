"""A tiny Qwen2 model and BPE tokenizer built locally, for tests and the CPU default run.

Nothing here touches the network: the tokenizer is trained on a small generated corpus and the
model is initialised at random. For the default run, `build_tiny_model` (CLI:
`scripts/build_tiny_model.py`) then gives it a short supervised warm start on the built-in
3-digit addition task ("347+589=" -> "936" EOS) and stops while it still makes carry mistakes,
so that GRPO starts from a low but non-zero held-out accuracy. The result is committed
(models/tiny-arithmetic), so every machine starts the default run from the same bytes.
`evaluate_accuracy` measures accuracy with a plain KV-cache decoding loop independent of
nanogrpo.sampler.

Why the warm start looks the way it does (measured, docs/learning.md): supervised training on
3-digit sums alone sits on a loss plateau (~1.1) before it learns carries, and how long depends on
the seed (one seed was still on it after 1,650 steps, another left it at 700). GRPO cannot move a
model on the plateau (0.016 -> 0.004 held-out), while a model that has left it learns fast. Half
the warm-start rows are therefore easier sums (1- to 3-digit operands, never both 3-digit), which got
that slow seed off the plateau in ~1,000 steps (not a guarantee: seeds took 1,010 to 2,520 steps); and
the stop is decided on a sampled accuracy measured on 512 rows, only after the loss has left the
plateau, with up to 3,000 steps so that a slow seed still gets there.
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
# Supervised warm start on the arithmetic task, and held-out accuracy.


def _encode_batch(tokenizer, rows: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded prompt + completion + EOS ids, and labels that score only the completion and EOS.

    The completion is the row's "answer", or its "segments": [(text, scored)], where unscored text
    (a tool's output, which the model reads but never writes) is context only."""
    seqs, labels = [], []
    for row in rows:
        p = tokenizer(row["problem"], add_special_tokens=False)["input_ids"]
        seq, lab = list(p), [-100] * len(p)
        for text, scored in row.get("segments") or [(row["answer"], True)]:
            t = tokenizer(text, add_special_tokens=False)["input_ids"]
            seq += t
            lab += t if scored else [-100] * len(t)
        seqs.append(seq + [tokenizer.eos_token_id])
        labels.append(lab + [tokenizer.eos_token_id])
    T = max(len(s) for s in seqs)
    # Right padding needs no attention mask: pads come after EOS, and causal attention never lets
    # a scored position see them.
    ids = torch.full((len(rows), T), tokenizer.pad_token_id, dtype=torch.long)  # (B, T)
    lab = torch.full((len(rows), T), -100, dtype=torch.long)  # (B, T)
    for i, (s, l) in enumerate(zip(seqs, labels)):
        ids[i, : len(s)] = torch.tensor(s)
        lab[i, : len(l)] = torch.tensor(l)
    return ids, lab


def curriculum_rows(n: int, seed: int, easy_frac: float = 0.5) -> list[dict]:
    """Warm-start rows: the task's 3-digit train rows, with `easy_frac` of them replaced by easier sums
    whose operands have 1-3 digits (never both 3: those are the task's own rows, held-out pairs included)."""
    from nanogrpo.data import arithmetic_rows

    rng = random.Random(f"warm-start-{seed}")
    rows = arithmetic_rows("train", n, seed=seed)
    for i in range(n):
        if rng.random() < easy_frac:
            da, db = rng.choice([(x, y) for x in (1, 2, 3) for y in (1, 2, 3) if (x, y) != (3, 3)])
            a, b = rng.randint(0, 10**da - 1), rng.randint(0, 10**db - 1)
            rows[i] = {"problem": f"{a}+{b}=", "answer": str(a + b)}
    return rows


def warm_start(
    model, tokenizer, steps: int, batch_size: int = 64, lr: float = 1e-3, seed: int = 0,
    target_acc: float | None = None, eval_every: int = 10, val_size: int = 512, easy_frac: float = 0.5,
    log_every: int = 0,
) -> list[float]:
    """Plain supervised training on curriculum rows (above); returns the loss of every step run.

    With `target_acc`, training stops at the first check where the sampled (temperature 1) accuracy on
    `val_size` 3-digit rows of the *train* split reaches it: the model then has the format and many sums
    right but still makes carry mistakes, the starting point GRPO improves on. Checks start once the
    smoothed loss has left the ~1.1 plateau (< 0.95); before that accuracy is ~0 and a check is wasted."""
    from nanogrpo.data import arithmetic_rows

    torch.manual_seed(seed)
    val = arithmetic_rows("train", val_size, seed=10_000 + seed)

    def reached(step: int, ema: float) -> bool:
        if target_acc is None or (step + 1) % eval_every or ema >= 0.95:
            return False
        acc = evaluate_accuracy(model, tokenizer, val, temperature=1.0, seed=step)
        if log_every:
            print(f"warm start step {step:4d}  train-split sampled accuracy {acc:.3f}", flush=True)
        return acc >= target_acc

    return supervised(model, tokenizer, curriculum_rows(steps * batch_size, seed, easy_frac), steps, batch_size, lr,
                      log_every, reached)


def supervised(model, tokenizer, rows: list[dict], steps: int, batch_size: int, lr: float, log_every: int = 0,
               stop=None) -> list[float]:
    """Plain next-token training on `rows` (_encode_batch), batch after batch; `stop(step, ema_loss)`
    ends it early. Returns the loss of every step run; the model is left in eval mode."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    warmup = min(50, max(1, steps // 10))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    losses, ema = [], None
    for step in range(steps):
        model.train()
        ids, lab = _encode_batch(tokenizer, rows[step * batch_size : (step + 1) * batch_size])
        loss = model(input_ids=ids, labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        ema = loss.item() if ema is None else 0.9 * ema + 0.1 * loss.item()
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"warm start step {step:4d}  loss {loss.item():.4f}", flush=True)
        if stop is not None and stop(step, ema):
            break
    model.eval()
    return losses


def build_tiny_model(
    out_dir: str | Path, steps: int = 3000, target_acc: float | None = 0.15, seed: int = 0, log_every: int = 0
) -> tuple[Path, object, object, list[float]]:
    """Random tiny model + warm start, written as an HF directory. Returns (dir, model, tokenizer, losses)."""
    out = build_random_model_dir(out_dir, seed=seed)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(out)
    model = Qwen2ForCausalLM.from_pretrained(out)
    losses = warm_start(model, tokenizer, steps, seed=seed, target_acc=target_acc, log_every=log_every)
    model.save_pretrained(out)
    return out, model, tokenizer, losses


def build_tool_model(
    out_dir: str | Path, max_steps: int = 1500, tool_frac: float = 0.2, seed: int = 0, target_acc: float = 0.04,
    batch_size: int = 64, lr: float = 1e-3, log_every: int = 0,
) -> tuple[Path, object, object, list[float]]:
    """The tool task's model (nanogrpo/multiply.py): a random tiny model, warm-started on multiplication
    rows of which `tool_frac` show the tool format (code, its output as context only, the copied answer)
    and the rest answer directly. Returns (dir, model, tokenizer, losses).

    It stops once the sampled (temperature 1) accuracy with the tool, on 256 train-split products run
    through the real tool loop (tools.ToolSampler, local sandbox), reaches `target_acc`; checked every
    50 steps from step 200. A fixed 300 steps left one seed of three copying no product right (every
    GRPO reward 0, nothing learned), while the other two learned (README "With tools")."""
    from nanogrpo.multiply import multiply_rows, warm_start_rows
    from nanogrpo.tools import ToolConfig

    out = build_random_model_dir(out_dir, seed=seed)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(out)
    model = Qwen2ForCausalLM.from_pretrained(out)
    torch.manual_seed(seed)
    rows = warm_start_rows(max_steps * batch_size, seed, tool_frac, ToolConfig())
    val = multiply_rows("train", 256, seed=20_000 + seed)

    def reached(step: int, ema: float) -> bool:
        if (step + 1) % 50 or step + 1 < 200:
            return False
        model.save_pretrained(out)
        acc, use = tool_accuracy(out, val, temperature=1.0, seed=step)
        if log_every:
            print(f"warm start step {step:4d}  sampled accuracy with the tool {acc:.3f} (tool use {use:.2f})", flush=True)
        return acc >= target_acc

    losses = supervised(model, tokenizer, rows, max_steps, batch_size, lr, log_every, reached)
    model.save_pretrained(out)
    return out, model, tokenizer, losses


def tool_accuracy(model_dir, rows: list[dict], temperature: float, seed: int = 0, max_new_tokens: int = 96):
    """(exact-match accuracy of the answer after the last tool output, share of answers that ran code),
    one sample per row through the real tool loop (PyTorch sampler, local sandbox)."""
    from nanogrpo import tools
    from nanogrpo.sampler import SamplingParams, TorchSampler

    cfg = tools.ToolConfig()
    sampler = tools.ToolSampler(TorchSampler(str(model_dir)), cfg, tools.make_cells(cfg))
    prompts = [sampler.tokenizer.encode(r["problem"]) for r in rows]
    outs = [g[0] for g in sampler.generate(prompts, 1, SamplingParams(max_new_tokens, temperature, seed=seed))]
    acc = sum(tools.answer_text(c).strip() == r["answer"] for c, r in zip(outs, rows)) / len(rows)
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
