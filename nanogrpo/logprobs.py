"""Token log-probs under the lm_head: the kernel every training step runs (`chunked_logprobs`), which computes what
model.reference_logprobs computes in plain autograd without the (positions, vocab) fp32 logits ever existing at
once: at a 150k vocabulary and 16k positions they are 10 GB, which autograd keeps (with their softmax) for backward.
tests/test_model.py holds the two equal, values and gradients; `_HeadLogprobs` says how.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def fp32_head(lm_head: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """lm_head(h) computed in fp32: the hidden state and the (low-precision) weight upcast, so the logits are
    never rounded to bf16 / fp16 (8 / 11 bits: a logit of 10 would be off by up to 0.03 in bf16). The
    trainer (`lm_head_fp32`) and the PyTorch sampler run this same function (`_head_logits`)."""
    return _head_logits(h, lm_head.weight.float(), getattr(lm_head, "bias", None))


class _HeadLogprobs(torch.autograd.Function):
    """log p(target) and entropy, (B, T) each, of (B, T, H) hidden states under an lm_head, `chunk` positions
    at a time, with a hand-written backward. Only one chunk's (C, V) fp32 logits exist at once, in forward and in
    backward, which recomputes them from h (one matmul) instead of keeping them.

    Why by hand: autograd through logsumexp + gather ran about ten passes over each (C, V) chunk, as costly as the
    lm_head's matmuls at a 49k vocabulary (docs/throughput.md). Here backward is d logp / d z = onehot - softmax(z),
    written into the recomputed logits in place, then the two matmuls into buffers every chunk reuses (a fresh
    (C, V) tensor per chunk is ~100 MB of new pages to fault in). The entropy is a metric: it gets no gradient."""

    @staticmethod
    def forward(ctx, h, weight, bias, targets, temperature: float, chunk: int, with_entropy: bool, fp32: bool,
                sampling: tuple[float, int] | None = None):
        scale = 1.0 / temperature if temperature > 0 and temperature != 1.0 else 1.0
        w = weight.float() if fp32 else weight  # the dtype the head's matmul runs in
        kw = {"dtype": torch.float32, "device": h.device}
        cols = () if sampling is None else (3,)  # sampling: entropy, E_q[log p], Var_q[log p] (sampling_moments)
        out = torch.empty(targets.shape, **kw), torch.zeros(targets.shape + cols, **kw)  # not views: FSDP hooks them
        logp, stats = out[0].view(-1), out[1].view(targets.numel(), -1)
        hs, ts = h.reshape(-1, h.shape[-1]), targets.reshape(-1)
        N = hs.shape[0]
        logz = torch.empty_like(logp)
        z = h.new_empty(min(chunk, N), weight.shape[0], dtype=torch.float32)  # reused by every chunk
        e = torch.empty_like(z) if with_entropy or sampling else z  # exp(z - max); over z itself when z is not read after
        for s in range(0, N, chunk):
            n = min(chunk, N - s)
            zc, ec = _head_logits(hs[s : s + n], w, bias, scale, z[:n]), e[:n]
            m = zc.amax(-1)
            target = zc.gather(-1, ts[s : s + n, None])[:, 0]
            total = torch.sub(zc, m[:, None], out=ec).exp_().sum(-1)
            logz[s : s + n] = m + total.log()
            logp[s : s + n] = target - logz[s : s + n]
            if with_entropy or sampling:  # logz - E_p[z], p = exp(z - max) / total
                mean = _rowdot(ec, zc) / total
                stats[s : s + n, 0] = logz[s : s + n] - mean
            if sampling:  # last: it may overwrite zc and ec
                mean, var = sampling_moments(zc, ec, total, mean, *sampling)
                stats[s : s + n, 1], stats[s : s + n, 2] = mean - logz[s : s + n], var
        ctx.save_for_backward(h, weight, bias, targets, logz)
        ctx.scale, ctx.chunk, ctx.fp32 = scale, chunk, fp32
        return out

    @staticmethod
    def backward(ctx, g, _g_entropy):
        h, weight, bias, targets, logz = ctx.saved_tensors
        hs, ts, g = h.reshape(-1, h.shape[-1]), targets.reshape(-1), g.reshape(-1)
        scale, chunk, N = ctx.scale, ctx.chunk, hs.shape[0]
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        w = weight.float() if ctx.fp32 else weight
        gh = torch.empty(hs.shape, dtype=w.dtype, device=h.device) if need_h else None
        gw = torch.zeros(weight.shape, dtype=w.dtype, device=weight.device) if need_w else None
        gb = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device) if need_b else None
        z = h.new_empty(min(chunk, N), weight.shape[0], dtype=torch.float32)
        for s in range(0, N, chunk):
            n = min(chunk, N - s)
            hc, gc = hs[s : s + n].to(w.dtype), g[s : s + n] * scale
            # d logp / d logits = scale * (onehot(target) - softmax(z)), built in the recomputed logits
            d = _head_logits(hc, w, bias, scale, z[:n]).sub_(logz[s : s + n, None]).exp_()
            d = d.mul_(-gc[:, None]).scatter_add_(1, ts[s : s + n, None], gc[:, None]).to(w.dtype)
            if need_h:
                torch.mm(d, w, out=gh[s : s + n])
            if need_w:  # in place over the chunks: no (V, H) temporary per chunk
                gw.addmm_(d.t(), hc)
            if need_b:
                gb.add_(d.float().sum(0))
        return (gh.view(h.shape).to(h.dtype) if need_h else None, gw.to(weight.dtype) if need_w else None,
                gb.to(bias.dtype) if need_b else None, None, None, None, None, None, None)


def _head_logits(h: torch.Tensor, w: torch.Tensor, bias, scale: float = 1.0, out: torch.Tensor | None = None):
    """fp32 logits / temperature with the matmul in w's dtype (from a bf16 matmul: its result upcast, which
    is what lm_head(h).float() computes), written into `out` when given."""
    h = h.to(w.dtype)
    if out is not None and w.dtype == torch.float32 and h.dim() == 2:
        z = torch.mm(h, w.t(), out=out)
        if bias is not None:
            z.add_(bias.float())
    else:
        z = F.linear(h, w, None if bias is None else bias.to(w.dtype)).float()
        z = out.copy_(z) if out is not None else z
    return z.mul_(scale) if scale != 1.0 else z


def _rowdot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(n,) the dot product of each row of a and b (n, V): one batched GEMV (3x faster than linalg.vecdot on CPU)."""
    return torch.bmm(a.unsqueeze(1), b.unsqueeze(2)).view(-1)


def sampling_moments(z: torch.Tensor, e: torch.Tensor, total: torch.Tensor, mean: torch.Tensor, top_p: float = 1.0,
                     top_k: int = 0):
    """(E_q[z], Var_q[z]), each (n,) fp32, for the (n, V) logits z (already divided by the temperature) under q, the
    distribution the sampler draws from: softmax(z), truncated to the top_k most likely tokens (0: all) and to the
    nucleus top_p (the tokens whose mass ranked above them is short of top_p, as nanogrpo/sampler.py draws), and
    renormalised. e = exp(z - max), total = its row sums and mean = E_p[z], as the kernel has them. Var_q[log p] =
    Var_q[z] and E_q[log p] = E_q[z] - logz. Untruncated: three passes over z and e, which it overwrites (scratch
    buffers), the variance taken about the mean (no E[z^2] - E[z]^2 cancellation); truncated: the top 1,024 tokens
    of 64 rows at a time (a full sort only for a nucleus past them, as the PyTorch sampler draws)."""
    if top_p >= 1.0 and top_k <= 0:
        d = z.sub_(mean[:, None])
        return mean, _rowdot(e.mul_(d), d) / total
    mean, var = torch.empty_like(total), torch.empty_like(total)
    k = min(z.shape[1], top_k if top_k > 0 else 1024)
    for r in range(0, z.shape[0], 64):
        p, order = e[r : r + 64].topk(k, dim=-1)  # (b, k), descending
        if top_k <= 0 and k < z.shape[1] and bool((p.sum(-1, dtype=torch.float64) < top_p * total[r : r + 64]).any()):
            p, order = e[r : r + 64].sort(dim=-1, descending=True)
        p = p.double() / total[r : r + 64, None]
        q = torch.where((p.cumsum(-1) - p) < top_p, p, 0.0)  # the most likely token is always kept
        q = q / q.sum(-1, keepdim=True)
        zs = z[r : r + 64].gather(-1, order).double()
        mu = (q * zs).sum(-1)
        mean[r : r + 64], var[r : r + 64] = mu, (q * (zs - mu[:, None]) ** 2).sum(-1)
    return mean, var


def logp_moments(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(E_q[log p], Var_q[log p]), each (n,) fp32, of log p = log_softmax(logits / temperature) under q, the
    distribution the sampler draws from (`sampling_moments`), for (n, V) fp32 logits left unchanged: what the
    PyTorch sampler reports with each draw (SamplingParams.moments) for the checks' calibration test."""
    z = logits / temperature  # a new tensor: overwritten below
    d = z.sub_(z.amax(-1, keepdim=True))  # log p + logz, <= 0
    e = d.exp()
    total = e.sum(-1)
    mean = torch.linalg.vecdot(e, d) / total
    if top_p < 1.0:
        mean, var = sampling_moments(d, e, total, mean, top_p)
    else:  # sampling_moments' own untruncated lines, with vecdot: its batched GEMV is 4x slower at 64 rows of 49k
        var = torch.linalg.vecdot(e.mul_(d.sub_(mean[:, None])), d) / total  # (the trainer's 512 rows: faster)
    return mean - total.log(), var


def chunked_logprobs(lm_head: nn.Module, h: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0,
                     with_entropy: bool = False, chunk_size: int = 512, head_fp32: bool = False,
                     sampling: tuple[float, int] | None = None):
    """(logp, entropy), each (B, T) fp32, of `targets` under lm_head(h), chunk_size positions at a time
    (`_HeadLogprobs`: the (B*T, V) fp32 logits never exist, in forward or backward). `sampling` = (top_p, top_k):
    the second output is (B, T, 3) instead: the entropy, then E_q[log p] and Var_q[log p] under the distribution the
    sampler draws from (`sampling_moments`), for the sampler's calibration check (nanogrpo/checks)."""
    if type(lm_head) is not nn.Linear:
        raise TypeError(f"the lm_head must be a plain nn.Linear (its weight is read directly); got {type(lm_head).__name__}")
    return _HeadLogprobs.apply(h, lm_head.weight, lm_head.bias, targets, temperature, chunk_size, with_entropy,
                               head_fp32, sampling)
