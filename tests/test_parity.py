"""Sampler/trainer log-prob agreement (nanogrpo/checks): with exact_logprobs the gap is exactly 0 (padded and
packed, low precision, 1 and 2 ranks, after a resume); a sampler that stopped getting the trainer's weights is
caught by the sampler check at its first stale step, and by the gap gate (naming the cause) where the sampler
cannot report; healthy runs go through."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import train
from nanogrpo import checks as parity  # the checks layer (nanogrpo/checks), what this file tests
from nanogrpo.config import ConfigError, load
from nanogrpo.torch_sampler import KV_ATTENTION, TorchSampler

ROOT = Path(__file__).parent.parent


def metrics(out_dir) -> list[dict]:
    return [json.loads(x) for x in (Path(out_dir) / "metrics.jsonl").read_text().splitlines()]


def small(model, out_dir, *extra):
    """A few steps of the default recipe; every completion trained, so the gap covers all of them."""
    return [f"model={model}", f"out_dir={out_dir}", "prompts_per_step=8", "group_size=4", "eval_every=0",
            "micro_batch_size=12", "skip_zero_advantage=false", "lr=1e-3", "warmup_steps=1", *extra]


def gaps(out_dir) -> list[float]:
    return [m["logprob_gap"] for m in metrics(out_dir) if "logprob_gap" in m]


# ---------------------------------------------------------------- exact_logprobs


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.parametrize("layout,dtype", [("padded", "float32"), ("packed", "float32"), ("padded", "bfloat16"),
                                          ("packed", "float16")])
def test_exact_logprobs_gap_is_zero_also_after_a_resume(warm_model_dir, tmp_path, device, layout, dtype):
    extra = [f"dtype={dtype}", "save_every=2", "gap_patience=1", f"device={device.type}"] + (
        ["micro_batch_tokens=64"] if layout == "packed" else [])
    # without the mode the same run's sampler and trainer differ (the decode's kernels are not the trainer's)
    train.main(small(warm_model_dir, tmp_path / "plain", "steps=1", *extra))
    assert gaps(tmp_path / "plain")[0] > 0
    out = tmp_path / "exact"
    train.main(small(warm_model_dir, out, "steps=2", "exact_logprobs=true", *extra))
    train.main(small(warm_model_dir, out, "steps=3", "exact_logprobs=true", "resume=true", *extra))
    logged = metrics(out)
    assert [m["step"] for m in logged] == [1, 2, 3]
    assert all(m["train_tokens"] > 0 for m in logged)
    assert gaps(out) == [0.0, 0.0, 0.0]


@pytest.mark.slow
def test_exact_logprobs_two_ranks_and_resume(warm_model_dir, tmp_path):
    """2 ranks (gloo), packed, each rank its own sampler and micro-batch count: exactly 0 on every step."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    base = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py",
            *small(warm_model_dir, tmp_path, "exact_logprobs=true", "micro_batch_tokens=48", "save_every=2",
                   "gap_patience=1")]
    for extra in (["steps=2"], ["steps=3", "resume=true"]):
        r = subprocess.run([*base, *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
    assert [m["step"] for m in metrics(tmp_path)] == [1, 2, 3]
    assert gaps(tmp_path) == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("over,match", [
    ("sampler=vllm", "needs sampler=torch"), ("lora_rank=4", "needs lora_rank=0"), ("compile=true", "needs compile=false"),
])
def test_exact_logprobs_refuses_what_it_cannot_make_exact(over, match):
    with pytest.raises(ConfigError, match=match):
        load(["exact_logprobs=true", over])


def test_lm_head_fp32_needs_the_pytorch_sampler():
    with pytest.raises(ConfigError, match="lm_head_fp32 = true needs sampler=torch"):
        load(["lm_head_fp32=true", "sampler=vllm"])
    assert load(["lm_head_fp32=true", "dtype=float16"]).lm_head_fp32


def test_sampler_policy_runs_the_trainers_forward_on_the_samplers_weights(tiny_model_dir):
    """The recompute reads the sampler's weights (not the trainer's) and leaves the sampler's attention as it was."""
    from nanogrpo import dist
    from nanogrpo import model as M

    dist.init("cpu")
    policy = M.make_policy(tiny_model_dir, torch.device("cpu"), torch.float32, 4, False)
    sampler = TorchSampler(tiny_model_dir)
    behaviour = parity.SamplerPolicy.of(sampler, policy)
    ids = torch.tensor([[5, 9, 12, 40, 7, 3], [5, 9, 12, 1, 1, 1]])
    attn = (ids != 1).long()
    with torch.no_grad():
        want, _ = policy(ids, attn)
        got, _ = behaviour(ids, attn)
        assert torch.equal(got * attn[:, 1:], want * attn[:, 1:])
        assert sampler.model.config._attn_implementation == KV_ATTENTION  # restored for the decode
        next(sampler.model.parameters()).add_(1e-3)  # the sampler falls behind: the recompute shows it
        moved, _ = behaviour(ids, attn)
    assert (moved - want).mul(attn[:, 1:]).abs().max() > 1e-5


# ---------------------------------------------------------------- the gap gate


def break_sync_after(monkeypatch, n_ok: int) -> list[int]:
    """The PyTorch sampler accepts the first n_ok syncs, then silently drops the weights (it still drains the
    trainer's iterator, whose all-gathers every rank must run)."""
    calls = [0]
    real = TorchSampler.sync_weights

    def sync(self, weights):
        calls[0] += 1
        if calls[0] <= n_ok:
            return real(self, weights)
        for _ in weights:
            pass

    monkeypatch.setattr(TorchSampler, "sync_weights", sync)
    return calls


@pytest.mark.slow
@pytest.mark.parametrize("exact", [False, True])
def test_a_sampler_that_stops_getting_weights_is_caught_at_its_first_stale_step(warm_model_dir, tmp_path, monkeypatch,
                                                                                 exact):
    """The sampler check, exactly: step 3 is the first to sample from stale weights (tests/test_stale_sampler.py
    has every fault)."""
    break_sync_after(monkeypatch, 1)  # step 1's weights reach the sampler, step 2's and later do not
    args = small(warm_model_dir, tmp_path, "steps=30", f"exact_logprobs={str(exact).lower()}")
    with pytest.raises(parity.StaleSamplerError, match=r"^step 3: .*STALE WEIGHTS: model.embed_tokens.weight"):
        train.main(args)
    assert len(gaps(tmp_path)) == 2


@pytest.mark.slow
@pytest.mark.parametrize("exact", [False, True])
def test_without_the_check_the_gate_stops_a_stale_sampler(warm_model_dir, tmp_path, monkeypatch, capsys, exact):
    """A sampler of the user's own that cannot say what it holds (no held_weights): the gap gate alone, which
    names the cause from the gap's history (the calibration check off: stale weights' draws are not the trainer's
    distribution, and it may stop such a run first)."""
    monkeypatch.delattr(TorchSampler, "held_weights")
    break_sync_after(monkeypatch, 1)  # step 1's weights reach the sampler, step 2's and later do not
    args = small(warm_model_dir, tmp_path, "steps=30", "gap_patience=3", f"exact_logprobs={str(exact).lower()}",
                 "max_sample_z=0")
    with pytest.raises(parity.LogprobGapError, match="Likely cause: STALE WEIGHTS") as err:
        train.main(args)
    assert not isinstance(err.value, parity.StaleSamplerError)
    logged = gaps(tmp_path)
    assert len(logged) < 30  # stopped early
    limit = 0.0 if exact else parity.AUTO_LIMIT[torch.float32]
    assert all(g <= limit for g in logged[:2]) and all(g > limit for g in logged[-3:]), logged
    assert f"was {logged[0]:.3g} at step 1" in str(err.value)
    assert capsys.readouterr().err.count("warning: step") == 3


@pytest.mark.slow
def test_a_healthy_run_is_not_stopped(warm_model_dir, tmp_path):
    """The default limit (fp32: 1e-3) with gap_patience = 1: a single step above it would stop the run."""
    train.main(small(warm_model_dir, tmp_path, "steps=6", "gap_patience=1"))
    assert len(gaps(tmp_path)) == 6 and max(gaps(tmp_path)) < 1e-5


def test_gate_counts_steps_in_a_row_and_skips_steps_with_nothing_trained(capsys):
    gate = parity.GapGate(1e-3, 3, torch.float32)
    for step, gap in enumerate([5e-7, 2e-3, 3e-3, 4e-7, 2e-3, float("nan"), 3e-3]):  # the 4e-7 breaks the streak
        gate(step, gap)
    assert gate.streak == 2 and len(gate.history) == 6
    with pytest.raises(parity.LogprobGapError, match="for 3 steps in a row"):
        gate(7, 5e-3)
    assert capsys.readouterr().err.count("warning: step") == 5
    off = parity.GapGate(0, 1, torch.float32)  # 0 = off
    off(0, 10.0)


@pytest.mark.parametrize("dtype,sampler_dtype,exact,cause", [
    (torch.float32, None, False, "CHUNKING / KERNELS"),
    (torch.bfloat16, None, False, "DTYPE: both sides run bfloat16"),
    (torch.float32, torch.bfloat16, False, "DTYPE: the torch sampler runs bfloat16 weights, the trainer computes in float32"),
    (torch.bfloat16, None, True, "CHUNKING / KERNELS"),
])
def test_gate_names_precision_or_kernels_when_the_first_step_is_already_off(dtype, sampler_dtype, exact, cause):
    """Both sides load the same weights, so a gap above the limit from the first step is not staleness."""
    gate = parity.GapGate(1e-4, 2, dtype, "torch", sampler_dtype, exact)
    gate(0, 1e-3)
    with pytest.raises(parity.LogprobGapError) as err:
        gate(1, 1e-3)
    assert f"Likely cause: {cause}" in str(err.value)


def test_gate_with_the_check_on_never_names_stale_weights_and_claims_no_growth_that_was_not():
    """The sampler check matched the weights every step: a gap that grew is how the two sides compute. Without
    it, a first gap already above the limit is not described as "within the limit ... and grew"."""
    checked = parity.GapGate(1e-3, 2, torch.float32, checked=True)
    for step, gap in enumerate([1e-7, 5e-3]):
        checked(step, gap)
    with pytest.raises(parity.LogprobGapError) as err:
        checked(2, 5e-3)
    assert "Likely cause: CHUNKING / KERNELS" in str(err.value) and "STALE" not in str(err.value)
    assert "equalled the trainer's at every step" in str(err.value)
    gate = parity.GapGate(1e-3, 2, torch.float32)  # off: the history decides, stale weights listed as a possibility
    gate(0, 1.03)
    with pytest.raises(parity.LogprobGapError) as err:
        gate(1, 1.03)
    assert "Likely cause: CHUNKING / KERNELS" in str(err.value) and "STALE WEIGHTS" in str(err.value)
    assert "within the limit" not in str(err.value)


def test_gap_limit_by_precision_and_its_config():
    assert parity.gap_limit(-1, torch.float32, False) == 1e-3
    assert parity.gap_limit(-1, torch.bfloat16, False) == parity.gap_limit(-1, torch.float16, False) == 0.1
    assert parity.gap_limit(-1, torch.bfloat16, True) == 0.0  # exact: any gap at all
    assert parity.gap_limit(0, torch.float32, True) is None
    assert parity.gap_limit(0.5, torch.float32, True) == 0.5
    assert load([]).max_logprob_gap == -1 and load([]).gap_patience >= 1
    for bad in ("max_logprob_gap=-0.5", "gap_patience=0"):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            load([bad])
