"""Model loading errors, chunked log-probs against the straightforward full-logits computation."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nanogrpo import dist
from nanogrpo import model as M
from nanogrpo.model import reference_logprobs


def full_logprobs(hf, ids, attn, temperature):
    logits = hf(input_ids=ids, attention_mask=attn).logits[:, :-1].float() / temperature  # (B, T-1, V)
    logp = torch.log_softmax(logits, -1)
    ent = -(logp.exp() * logp).sum(-1)
    return logp.gather(-1, ids[:, 1:, None]).squeeze(-1), ent


@pytest.mark.parametrize("chunk", [1, 3, 7, 512])
def test_chunked_logprobs_equal_full(tiny_untied_model_dir, chunk):
    hf = M.load_model(tiny_untied_model_dir)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, 200, (3, 12), generator=g)
    attn = torch.ones_like(ids)
    attn[1, 9:] = 0  # right padding does not change the real tokens' log-probs
    want, want_ent = full_logprobs(hf, ids, attn, 0.7)
    got, ent = M.Policy(hf, chunk)(ids, attn, temperature=0.7, with_entropy=True)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent, want_ent, atol=1e-4, rtol=0)
    # gradients agree too (the chunks are recomputed in backward)
    got.sum().backward()
    g1 = {n: p.grad.clone() for n, p in hf.named_parameters()}
    hf.zero_grad()
    want.sum().backward()
    for n, p in hf.named_parameters():
        torch.testing.assert_close(g1[n], p.grad, atol=1e-5, rtol=1e-4, msg=n)


@pytest.mark.parametrize("dtype,fp32", [(torch.float32, False), (torch.bfloat16, False), (torch.bfloat16, True)])
@pytest.mark.parametrize("bias", [False, True])
def test_head_logprobs_and_gradients_equal_autograd_on_full_logits(dtype, fp32, bias):
    """The lm_head's hand-written backward (logprobs._HeadLogprobs) against the plain reference, autograd over
    the full logits (model.reference_logprobs):
    log-probs, entropy, and the gradients of h, the weight and the bias, with a temperature and a chunk
    that does not divide the positions; in bf16 with and without lm_head_fp32."""
    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=bias).to(dtype)
    h = torch.randn(2, 9, 16, generator=g).to(dtype)
    targets = torch.randint(0, 50, (2, 9), generator=g)
    weights = torch.randn(2, 9, generator=g)  # an arbitrary upstream gradient
    grads = []
    for run in ("got", "want"):
        x = h.clone().requires_grad_()
        head.zero_grad()
        if run == "got":
            logp, ent = M.chunked_logprobs(head, x, targets, 0.7, True, chunk_size=4, head_fp32=fp32)
        else:
            logp, ent = reference_logprobs(head, x, targets, 0.7, head_fp32=fp32)
        (logp * weights).sum().backward()
        grads.append((logp.detach(), ent.detach(), x.grad, head.weight.grad, head.bias.grad if bias else None))
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    for name, got, want in zip(("logp", "entropy", "grad h", "grad weight", "grad bias"), *grads):
        if want is not None:
            assert got.dtype == want.dtype, name
            torch.testing.assert_close(got.float(), want.float(), **tol, msg=name)


def test_head_logprobs_keep_no_logits_for_backward_and_skip_frozen_weights():
    """What backward keeps is the hidden states, the targets and one log-normaliser per position: no
    (positions, vocab) tensor, however many chunks. A frozen lm_head gets no gradient computed."""
    head = torch.nn.Linear(16, 500)
    h = torch.randn(1, 64, 16, requires_grad=True)
    targets = torch.randint(0, 500, (1, 64))
    saved = []

    def pack(t):
        if t is not head.weight and t is not head.bias:
            saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logp, _ = M.chunked_logprobs(head, h, targets, 1.0, True, chunk_size=8)
    assert sum(saved) <= h.numel() + 2 * targets.numel(), saved  # h, targets, logz: no 500-wide tensor
    head.requires_grad_(False)
    M.chunked_logprobs(head, h, targets, 1.0, False, chunk_size=8)[0].sum().backward()
    assert head.weight.grad is None and h.grad is not None
    with pytest.raises(TypeError, match="plain nn.Linear"):
        M.chunked_logprobs(torch.nn.Sequential(head), h, targets)


@pytest.mark.gpu
def test_sharded_policy_matches_plain_model(tiny_model_dir, device):
    """FSDP2 on `device` (NCCL on a GPU) against the plain model on the CPU."""
    device = dist.init(device.type)
    policy = M.make_policy(tiny_model_dir, device, torch.float32, chunk_size=4, activation_checkpointing=True)
    hf = M.load_model(tiny_model_dir)
    ids = torch.randint(2, 200, (2, 10), generator=torch.Generator().manual_seed(1))
    attn = torch.ones_like(ids)
    got, _ = policy(ids.to(device), attn.to(device))
    want, _ = full_logprobs(hf, ids, attn, 1.0)
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=0)
    names = [n for n, _ in M.iter_full_params(policy)]
    assert names == [n for n, _ in hf.named_parameters()]  # HF names, tied lm_head once


def test_missing_model_dir_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="model directory not found"):
        M.load_model(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        M.load_tokenizer(str(tmp_path / "empty"))
    (tmp_path / "enc").mkdir()
    (tmp_path / "enc" / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    with pytest.raises(ValueError, match="not a causal LM"):
        M.load_model(str(tmp_path / "enc"))


def _saved_bytes_per_token(policy, lengths: tuple[int, int]) -> tuple[float, int]:
    """Bytes of activations kept for backward per token (the slope between two lengths, so the weights
    the matmuls keep cancel out), and how many times each decoder layer's MLP ran in forward + backward."""
    calls = []
    # a pre-hook: a recompute stops as soon as it has what backward needs, before the MLP returns
    hooks = [layer.mlp.register_forward_pre_hook(lambda *a: calls.append(1)) for layer in policy.hf.model.layers]
    saved = []
    for T in lengths:
        ids = torch.randint(2, 200, (2, T), generator=torch.Generator().manual_seed(T))
        total, seen = 0, set()

        def pack(t):
            nonlocal total
            key = t.untyped_storage().data_ptr()
            if key not in seen:
                seen.add(key)
                total += t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logp, _ = policy(ids, torch.ones_like(ids))
        logp.sum().backward()
        saved.append(total)
    for h in hooks:
        h.remove()
    return (saved[1] - saved[0]) / (2 * (lengths[1] - lengths[0])), len(calls) // len(lengths)


@pytest.mark.slow
def test_activation_checkpointing_recomputes_each_layer_and_keeps_the_gradients(tiny_model_dir):
    """With the knob on, each decoder layer runs twice (forward, then again in backward) and keeps only its
    input: the activations kept per token shrink. The log-probs and the gradients are those without it."""
    device = dist.init("cpu")
    runs = {}
    for ckpt in (False, True):
        policy = M.make_policy(tiny_model_dir, device, torch.float32, chunk_size=4, activation_checkpointing=ckpt)
        per_token, mlp_calls = _saved_bytes_per_token(policy, (16, 48))
        policy.zero_grad()
        ids = torch.randint(2, 200, (3, 20), generator=torch.Generator().manual_seed(0))
        logp, _ = policy(ids, torch.ones_like(ids))
        (logp * torch.linspace(-1, 1, logp.shape[1])).sum().backward()
        grads = {n: q.grad.full_tensor().clone() for n, q in policy.named_parameters()}
        runs[ckpt] = (per_token, mlp_calls, logp.detach(), grads)
    layers = M.load_model(tiny_model_dir).config.num_hidden_layers
    hidden = M.load_model(tiny_model_dir).config.hidden_size
    assert runs[False][1] == layers  # each MLP once per forward + backward
    assert runs[True][1] == 2 * layers  # ... and once more in backward: recomputed
    # kept per token: each layer's input, the final norm's input and output, the lm_head's input (hidden
    # fp32 floats each), rotary cos / sin, and nothing inside a layer
    assert runs[True][0] <= (layers + 4) * hidden * 4, runs[True][0]
    assert runs[True][0] < runs[False][0] / 3, (runs[True][0], runs[False][0])
    torch.testing.assert_close(runs[True][2], runs[False][2], atol=0, rtol=0)
    for n, g in runs[False][3].items():
        torch.testing.assert_close(runs[True][3][n], g, atol=1e-6, rtol=1e-5, msg=n)


def test_segment_sdpa_equals_transformers_sdpa_without_a_mask(tiny_untied_model_dir, monkeypatch):
    """The trainer's attention (packed: one causal SDPA call per sequence; padded: one per micro-batch)
    gives transformers' SDPA log-probs, and never hands SDPA a mask."""
    device = dist.init("cpu")
    policy = M.make_policy(tiny_untied_model_dir, device, torch.float32, chunk_size=5, activation_checkpointing=False)
    assert policy.hf.config._attn_implementation == M.SEGMENT_SDPA
    reference = M.load_model(tiny_untied_model_dir)  # transformers' sdpa (a dense mask for packed rows)
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda q, k, v, **kw: calls.append((q.shape[2], kw.get("attn_mask"))) or sdpa(q, k, v, **kw))
    g = torch.Generator().manual_seed(2)
    lengths = [7, 3, 12, 5]
    seqs = [torch.randint(2, 200, (n,), generator=g) for n in lengths]
    # padded, right-padded rows
    ids = torch.ones(len(seqs), max(lengths), dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, : len(s)], attn[i, : len(s)] = s, 1
    got, _ = policy(ids, attn)
    layers = reference.config.num_hidden_layers
    assert calls == [(max(lengths), None)] * layers
    want, _ = M.Policy(reference)(ids, attn)
    for i, n in enumerate(lengths):
        torch.testing.assert_close(got[i, : n - 1], want[i, : n - 1], atol=1e-5, rtol=0)
    # packed: the sequences back to back, positions restarting
    calls.clear()
    row = torch.cat(seqs)[None]
    pos = torch.cat([torch.arange(n) for n in lengths])[None]
    got, _ = policy(row, None, position_ids=pos)
    assert calls == [(n, None) for n in lengths] * layers
    want, _ = M.Policy(reference)(row, None, position_ids=pos)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    # a left-padded row is not the trainer's layout: refused, not silently wrong
    with pytest.raises(ValueError, match="right-padded"):
        policy(ids, attn.flip(1))


def load_on_ranks(model_dir: str, out: str) -> None:
    """The torchrun worker: make_policy on every rank, counting who loads the checkpoint."""
    import transformers

    loads = []
    real = transformers.AutoModelForCausalLM.from_pretrained
    transformers.AutoModelForCausalLM.from_pretrained = lambda *a, **k: loads.append(1) or real(*a, **k)
    device = dist.init("cpu")
    policy = M.make_policy(model_dir, device, torch.float32, chunk_size=4, activation_checkpointing=False)
    weights = M.full_state_dict_cpu(policy)
    buffers = {n: b.clone() for n, b in policy.hf.named_buffers()}
    counts = dist.all_gather_object(len(loads))
    every_buffer = dist.all_gather_object(buffers)
    if dist.is_main():
        torch.save({"weights": weights, "loads": counts, "buffers": every_buffer}, out)
    dist.barrier()
    dist.close()


@pytest.mark.slow
def test_only_rank_0_loads_the_checkpoint_and_every_rank_gets_its_weights(tiny_model_dir, tmp_path):
    """2 ranks: the checkpoint is read once (rank 0), the other rank builds on the meta device; the
    sharded weights and the buffers outside the state dict (rotary inv_freq) are the checkpoint's."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__,
           tiny_model_dir, str(tmp_path / "out.pt")]
    subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=300)
    got = torch.load(tmp_path / "out.pt")
    assert got["loads"] == [1, 0]
    want = M.load_model(tiny_model_dir)
    assert list(got["weights"]) == [n for n, _ in want.named_parameters()]
    for name, p in want.named_parameters():
        assert torch.equal(got["weights"][name], p), name
    for buffers in got["buffers"]:
        assert set(buffers) == {n for n, _ in want.named_buffers()}
        for name, b in want.named_buffers():
            assert torch.equal(buffers[name], b), name


if __name__ == "__main__":  # the 2-rank worker: MODEL OUT
    load_on_ranks(sys.argv[1], sys.argv[2])
