"""The micro-batches of an update: which sequences go together (`plan`, sft.py's packing too), and their tensors
(`Batch`, padded or packed). Which completions count and their weights are the algorithm's (grpo.make_batches
passes them in); this file only lays them out.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def plan(lengths: list[int], budget: int) -> list[list[int]]:
    """Group sequence indices into micro-batches of at most `budget` tokens each (first-fit decreasing: few
    micro-batches, filled evenly). A sequence longer than the budget gets one of its own (a sequence is never split:
    its tokens attend to each other). Indices keep their order inside each, so the layout is deterministic."""
    if budget < 1:
        raise ValueError(f"token budget must be >= 1, got {budget}")
    if any(n < 1 for n in lengths):
        raise ValueError("every packed sequence needs at least one token")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins: list[list[int]] = []
    room: list[int] = []
    for i in order:
        for b, free in enumerate(room):
            if lengths[i] <= free:
                bins[b].append(i)
                room[b] -= lengths[i]
                break
        else:
            bins.append([i])
            room.append(budget - lengths[i])
    return [sorted(b) for b in bins]


@dataclass
class Batch:
    """One micro-batch, in one of two layouts.

    Padded (`micro_batch_tokens = 0`): one right-padded prompt + completion row per rollout; the loss
    tensors are (B, T-1) and index t is the prediction of token t+1.
    Packed (`micro_batch_tokens > 0`): a single row (B = 1) holding N sequences back to back, no
    padding, `position_ids` restarting at 0 per sequence and no attention mask (the model's per-sequence
    attention keeps them apart: nanogrpo/model.py); the loss tensors are (N, L), one row per completion.
    In both, only the K completion tokens go through the lm_head (prompt and padding positions need
    no log-prob): `positions` says where they are predicted in the model's flattened (B*(T-1))
    outputs, `dest` where each lands in the flattened loss layout."""

    input_ids: torch.Tensor  # (B, T)
    attention_mask: torch.Tensor | None  # (B, T); None for a packed row
    loss_mask: torch.Tensor  # (B, T-1) padded | (N, L) packed; float: 1 where a counted completion token is predicted
    advantages: torch.Tensor  # (B,) | (N,)
    sampler_logp: torch.Tensor  # like loss_mask, 0 outside the completion
    seq_weight: torch.Tensor  # (B,) | (N,) per-completion token weight w (see loss_norm)
    position_ids: torch.Tensor | None = None  # (1, T) packed only
    positions: torch.Tensor | None = None  # (K,) None: every position goes through the lm_head
    dest: torch.Tensor | None = None  # (K,)


def make_batches(rollouts: list, counted: list[bool], weights: list[float], micro_batch_size: int, pad_id: int,
                 micro_batch_tokens: int = 0) -> list[Batch]:
    """Micro-batches of the rollouts (grpo.Rollout: prompt_ids, completion_ids, sampler_logprobs, advantage,
    sampled()): packed rows of at most `micro_batch_tokens` tokens when that is > 0 (padding-free), else
    right-padded rows, `micro_batch_size` sequences per micro-batch. counted[i]: rollout i carries loss;
    weights[i]: its per-token weight w."""
    if any(not r.prompt_ids for r in rollouts):
        raise ValueError("a rollout has an empty prompt: the first completion token needs a prefix to be predicted from")
    if micro_batch_tokens > 0:
        lengths = [len(r.prompt_ids) + len(r.completion_ids) for r in rollouts]
        return [_packed_batch([rollouts[i] for i in group], [counted[i] for i in group], [weights[i] for i in group])
                for group in plan(lengths, micro_batch_tokens)]
    batches = []
    for start in range(0, len(rollouts), micro_batch_size):
        chunk = rollouts[start : start + micro_batch_size]
        loss_on = counted[start : start + micro_batch_size]
        T = max(len(r.prompt_ids) + len(r.completion_ids) for r in chunk)
        ids = torch.full((len(chunk), T), pad_id, dtype=torch.long)  # (B, T)
        attn = torch.zeros((len(chunk), T), dtype=torch.long)
        loss_mask = torch.zeros((len(chunk), T - 1))  # (B, T-1)
        sampler_logp = torch.zeros((len(chunk), T - 1))
        positions = []
        for i, r in enumerate(chunk):
            p, c = len(r.prompt_ids), len(r.completion_ids)
            ids[i, : p + c] = torch.tensor(r.prompt_ids + r.completion_ids)
            attn[i, : p + c] = 1
            # token p+j is predicted at index p+j-1 of the shifted log-probs; only sampled tokens need one
            js = torch.tensor(r.sampled(), dtype=torch.long)
            if loss_on[i]:
                loss_mask[i, p - 1 + js] = 1
            sampler_logp[i, p - 1 : p - 1 + c] = torch.tensor(r.sampler_logprobs, dtype=torch.float32)
            positions += (i * (T - 1) + p - 1 + js).tolist()
        pos = _nonempty(positions)
        w = torch.tensor(weights[start : start + micro_batch_size], dtype=torch.float32)
        batches.append(Batch(ids, attn, loss_mask, _advantages(chunk), sampler_logp, w, None, pos, pos))
    return batches


def _packed_batch(chunk: list, counted: list[bool], weights: list[float]) -> Batch:
    """One row: the sequences back to back, positions restarting per sequence, (N, L) loss tensors."""
    L = max(max(len(r.completion_ids) for r in chunk), 1)
    ids, pos, positions, dest = [], [], [], []
    loss_mask = torch.zeros((len(chunk), L))  # (N, L)
    sampler_logp = torch.zeros((len(chunk), L))
    for i, r in enumerate(chunk):
        p, c, start = len(r.prompt_ids), len(r.completion_ids), len(ids)
        ids += r.prompt_ids + r.completion_ids
        pos += range(p + c)
        # completion token j sits at start+p+j in the row, so it is predicted at start+p+j-1; the
        # prediction across a sequence boundary (last token -> next sequence's first) is never used
        js = r.sampled()
        positions += [start + p - 1 + j for j in js]
        dest += [i * L + j for j in js]
        if counted[i]:
            loss_mask[i, js] = 1
        sampler_logp[i, :c] = torch.tensor(r.sampler_logprobs, dtype=torch.float32)
    row = torch.tensor([ids], dtype=torch.long)  # (1, T)
    return Batch(row, None, loss_mask, _advantages(chunk), sampler_logp, torch.tensor(weights, dtype=torch.float32),
                 torch.tensor([pos], dtype=torch.long), _nonempty(positions), _nonempty(dest))


def _nonempty(idx: list[int]) -> torch.Tensor:
    """(K,) indices; with no completion token at all, slot 0 (masked) stands in, so that the forward
    and backward still run (and with them FSDP's collectives)."""
    return torch.tensor(idx or [0], dtype=torch.long)


def _advantages(chunk: list) -> torch.Tensor:
    return torch.tensor([r.advantage for r in chunk], dtype=torch.float32)
