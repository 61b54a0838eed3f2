"""The sampler's calibration check (nanogrpo/checks' SampleGate, `max_sample_z`): the sampled tokens against the
trainer's own distribution.

The moments it reads (E[log p] and Var[log p] under the distribution the sampler draws from: temperature, top-p,
top-k) against a naive per-token computation; a clean sampler against one that draws from another distribution
than it reports (tests/helpers/sampler_faults.py's HIDDEN: the sampler check and the gap gate pass both)."""

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import train
from helpers import update_check
from helpers.sampler_faults import HIDDEN, inject_hidden
from nanogrpo import checks as parity  # the checks layer (nanogrpo/checks)
from nanogrpo import grpo
from nanogrpo import model as M
from nanogrpo.logprobs import chunked_logprobs, logp_moments
from nanogrpo.sampler import SamplingParams
from nanogrpo.torch_sampler import TorchSampler


def naive_moments(logits: torch.Tensor, temperature: float, top_p: float, top_k: int):
    """Per position, one at a time in float64: the entropy of softmax(logits / T), and E_q[log p], Var_q[log p] for q
    that distribution cut to the top_k most likely tokens and to the nucleus (walk down the ranks while the mass
    above is short of top_p), renormalised."""
    out = []
    for row in logits.double().reshape(-1, logits.shape[-1]):
        logp = torch.log_softmax(row / temperature, -1)
        p = logp.exp()
        kept, mass = [], 0.0
        for rank, i in enumerate(p.argsort(descending=True).tolist()):
            if mass >= top_p or (top_k and rank >= top_k):
                break
            kept.append(i)
            mass += p[i].item()
        q = torch.zeros_like(p)
        q[kept] = p[kept] / p[kept].sum()
        mean = (q * logp).sum()
        out.append([-(p * logp).sum().item(), mean.item(), (q * (logp - mean) ** 2).sum().item()])
    return torch.tensor(out).view(*logits.shape[:-1], 3)


@pytest.mark.parametrize("temperature, top_p, top_k", [(1.0, 1.0, 0), (0.7, 1.0, 0), (1.3, 0.9, 0), (0.8, 0.5, 0),
                                                       (1.0, 1.0, 20), (0.9, 0.95, 7)])
def test_the_moments_equal_a_naive_per_token_computation(temperature, top_p, top_k):
    """The kernel's chunks (chunk 4 of 18 positions) against one position at a time: entropy, E_q[log p], Var_q."""
    g = torch.Generator().manual_seed(1)
    head = torch.nn.Linear(16, 300, bias=True)
    h = torch.randn(2, 9, 16, generator=g) * 2
    targets = torch.randint(0, 300, (2, 9), generator=g)
    logp, stats = chunked_logprobs(head, h, targets, temperature, chunk_size=4, sampling=(top_p, top_k))
    with torch.no_grad():
        want = naive_moments(head(h), temperature, top_p, top_k)
    torch.testing.assert_close(stats, want.float(), atol=2e-5, rtol=1e-4)
    lp, ent = chunked_logprobs(head, h, targets, temperature, True, chunk_size=4)  # the log-probs and entropy as before
    torch.testing.assert_close(lp, logp)
    torch.testing.assert_close(ent, stats[..., 0])


@pytest.mark.parametrize("packed", [False, True])
def test_the_update_forward_gives_the_moments_in_the_loss_layout(warm_model_dir, packed):
    """grpo.batch_logprobs with sampling = (top_p, 0): padded and packed micro-batches put each completion token's
    moments where its log-prob is, equal to the model's full logits computed naively."""
    hf = M.load_model(warm_model_dir)
    policy = M.Policy(hf, chunk_size=5)
    g = torch.Generator().manual_seed(0)
    rollouts = [grpo.Rollout([5, 6, 7][: 1 + i % 3], torch.randint(3, 200, (2 + i,), generator=g).tolist(),
                             [0.0] * (2 + i), 1.0, False, 1.0) for i in range(4)]
    b = grpo.make_batches(rollouts, 8, 1, type("C", (), {"mask_truncated": False, "loss_norm": "token",
                                                          "max_new_tokens": 8})(), 64 if packed else 0)[0]
    with torch.no_grad():
        lp, stats = grpo.batch_logprobs(policy, b, 0.8, torch.device("cpu"), sampling=(0.9, 0))
    for r in rollouts:
        ids = torch.tensor([r.prompt_ids + r.completion_ids])
        with torch.no_grad():
            logits = hf(input_ids=ids).logits[0, len(r.prompt_ids) - 1 : -1]  # the completion tokens' predictions
        want = naive_moments(logits, 0.8, 0.9, 0)
        got = [stats[i, j] for i, j in zip(*torch.nonzero(b.loss_mask, as_tuple=True))]
        assert any(torch.allclose(torch.stack(got[k : k + len(want)]), want.float(), atol=1e-4)
                   for k in range(len(got) - len(want) + 1)), "a completion's moments are not in the layout"


@pytest.mark.parametrize("temperature, top_p, vocab", [(1.0, 1.0, 300), (0.7, 0.9, 300), (1.3, 0.95, 3000),
                                                       (1.0, 0.999, 3000)])
def test_the_samplers_moments_equal_a_naive_per_token_computation(temperature, top_p, vocab):
    """logprobs.logp_moments, what the PyTorch sampler reports with each draw: E_q[log p] and Var_q[log p] against
    one row at a time, also where the nucleus reaches past the top 1,024 tokens (a flat 3,000-token row at top_p
    0.999); the logits it is given stay unchanged."""
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(70, vocab, generator=g) * torch.linspace(0.1, 4, 70)[:, None]  # flat to peaked rows
    before = logits.clone()
    mean, var = logp_moments(logits, temperature, top_p)
    want = naive_moments(logits, temperature, top_p, 0)
    torch.testing.assert_close(torch.stack([mean, var], -1), want[:, 1:].float(), atol=2e-5, rtol=1e-4)
    assert torch.equal(logits, before)


def drawn_rollouts(model_dir, temperature, top_p, moments=True):
    """48 completions of the tiny model, 24 tokens at most, with the sampler's calibration sums when `moments`."""
    sampler = TorchSampler(str(model_dir))
    prompts = [sampler.tokenizer.encode(q) for q in ("12+7=", "What is 30 + 45?", "3 4 5")]
    groups = sampler.generate(prompts, 16, SamplingParams(24, temperature, top_p, seed=3, moments=moments))
    return [(p, c) for p, g in zip(prompts, groups) for c in g]


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.8, 0.9)])
def test_the_samplers_sums_equal_the_trainers_forward(warm_model_dir, temperature, top_p):
    """The sampler against the trainer: the calibration sums the PyTorch sampler reports with its draws
    (Completion.calibration, no forward in the step) equal those of the trainer's forward over the same completions
    (checks.forward_sums: what a sampler that reports none gets), up to the decode's rounding; without the ask
    (SamplingParams.moments false) it reports none."""
    drawn = drawn_rollouts(warm_model_dir, temperature, top_p)
    batch = SimpleNamespace(first_draw=drawn)
    dev, var = parity.drawn_sums(batch)
    cfg = update_check.config(temperature=temperature, top_p=top_p)
    rollouts = [grpo.Rollout(p, c.token_ids, c.logprobs, 1.0, False, 1.0) for p, c in drawn]
    policy = M.Policy(M.load_model(warm_model_dir), chunk_size=64)
    with torch.no_grad():
        _, tokens, want_dev, want_var = parity.forward_sums(policy, grpo.make_batches(rollouts, 4, 0, cfg), cfg,
                                                            torch.device("cpu"))
    assert tokens == sum(len(c.token_ids) for _, c in drawn) > 100 and var > 10
    assert dev == pytest.approx(want_dev, abs=1e-3) and var == pytest.approx(want_var, rel=1e-4)
    assert all(c.calibration is None for _, c in drawn_rollouts(warm_model_dir, temperature, top_p, False))


def test_the_check_reads_every_draw_of_the_step():
    """What before_update sums: every completion the step drew (not the update's own, which skips the groups whose
    rewards came out equal), and with dynamic sampling its first draw, kept or dropped."""
    done = lambda cal: SimpleNamespace(calibration=cal)  # noqa: E731
    flat = [([1], {}, done((1.0, 2.0))), ([1], {}, done((-3.0, 4.0)))]
    batch = SimpleNamespace(problems=[], version=0, first_draw=[], flat=lambda: flat, for_check=lambda: None)
    cfg = update_check.config(max_sample_z=6.0, max_logprob_gap=0.0, gap_patience=3, sampler="torch", exact_logprobs=False)
    checked = parity.Checks(cfg, torch.float32, SimpleNamespace(hf=None), 1)
    checked.before_update(0, batch, rollouts=[])
    assert checked.sums == (-2.0, 6.0)
    batch.first_draw = [([1], done((0.5, 1.0)))] * 3
    checked.before_update(0, batch, rollouts=[])
    assert checked.sums == (1.5, 3.0)
    assert checked.statistics()["sample_z"] == pytest.approx(1.5 / math.sqrt(3.0))


def test_the_gate_accumulates_shifts_and_not_noise():
    """The CUSUM (slack 1.5): a step of z = 8 alone stops (8 - 1.5 > 6), z = 7.5 does not; z = 4 per step stops at the
    3rd step (2.5 x 3 > 6), z = -4 too (flatter draws); noise around 0 and NaN steps (no trained token) never add up."""
    for zs, stop in (([8.0], 1), ([7.5], None), ([4.0] * 6, 3), ([-4.0] * 6, 3),
                     ([1.4, -1.4] * 500 + [math.nan] * 5, None)):
        gate = parity.SampleGate(6.0, 1.0, 1.0)
        stopped = None
        for i, z in enumerate(zs):
            try:
                gate(i, z)
            except parity.SamplerDistributionError as e:
                stopped = i + 1
                assert str(e).startswith(f"step {stopped}: SAMPLER DISTRIBUTION")
                assert ("sharper" if z > 0 else "flatter") in str(e)
                break
        assert stopped == stop
    parity.SampleGate(0.0)(0, 1e9)  # 0: off


def test_nearly_greedy_steps_are_not_read_and_said_so(capsys):
    """A step whose draws carry almost no variance (Σ Var[log p] < 1: nearly greedy sampling) is not what the normal
    approximation holds for: the gate skips it, says so once, and still reads the steps that carry enough."""
    gate = parity.SampleGate(6.0, 0.1, 1.0)
    for i in range(5):
        gate(i, -40.0, variance=0.3)
    err = capsys.readouterr().err
    assert err.count("nearly greedy") == 1 and "cannot test such steps" in err
    with pytest.raises(parity.SamplerDistributionError):
        gate(5, -8.0, variance=30.0)


def run_args(model, out, *extra):
    return [f"model={model}", f"out_dir={out}", "eval_every=0", "save_final=false", "device=cpu", *extra]


def zs(out) -> list[float]:
    return [json.loads(x)["sample_z"] for x in (Path(out) / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("extra", [[], pytest.param(["top_p=0.9", "temperature=0.8"], marks=pytest.mark.slow),
                                   pytest.param(["micro_batch_tokens=256"], marks=pytest.mark.slow),
                                   pytest.param(["async_steps=1", "tis_cap=2"], marks=pytest.mark.slow)],
                         ids=["default", "top_p-temperature", "packed", "async"])
@pytest.mark.slow
def test_a_clean_sampler_is_calibrated(warm_model_dir, tmp_path, extra):
    """The default recipe's first steps with the PyTorch sampler: sample_z stays near N(0, 1) (also at top_p 0.9 and
    temperature 0.8, which the moments respect: without the truncation the draws would look sharper) and the
    check does not stop the run."""
    train.main(run_args(warm_model_dir, tmp_path, "steps=8", *extra))
    got = zs(tmp_path)
    assert len(got) == 8 and all(abs(z) < 3.5 for z in got), got
    assert abs(sum(got) / len(got)) < 1.5, got


@pytest.mark.parametrize("fault", list(HIDDEN))
@pytest.mark.parametrize("extra", [[], pytest.param(["async_steps=1", "tis_cap=2"], marks=pytest.mark.slow), "forward"],
                         ids=["sync", "async", "sync-forward"])
@pytest.mark.slow
def test_a_sampler_that_draws_from_another_distribution_is_stopped(warm_model_dir, tmp_path, monkeypatch, fault,
                                                                   extra):
    """Drawn at temperature 0.7 or from the top_p 0.9 nucleus while it reports 1.0 and the log-probs at 1.0: the
    sampler check and the gap gate pass it (the reported settings and log-probs are right); the calibration check
    stops the run within 3 steps, naming the draws sharper than reported. Also from the trainer's forward, as for a
    sampler that reports no sums with its draws (vLLM: "forward")."""
    if extra == "forward":
        monkeypatch.setattr(parity, "drawn_sums", lambda batch: None)
        extra = []
    inject_hidden(monkeypatch, fault, 1)
    with pytest.raises(parity.SamplerDistributionError, match="SAMPLER DISTRIBUTION.*sharper") as err:
        train.main(run_args(warm_model_dir, tmp_path, "steps=12", *extra))
    stopped = int(str(err.value).split(":")[0].removeprefix("step "))
    assert stopped <= 3, str(err.value)
    assert all(z > 1.5 for z in zs(tmp_path)), zs(tmp_path)


@pytest.mark.slow
def test_the_check_off_computes_nothing(warm_model_dir, tmp_path, monkeypatch):
    """max_sample_z = 0: no moments (the forward as before) and no stop, whatever the sampler draws."""
    inject_hidden(monkeypatch, "hidden temperature", 1)
    train.main(run_args(warm_model_dir, tmp_path, "steps=4", "max_sample_z=0"))
    assert all(z is None for z in zs(tmp_path))
