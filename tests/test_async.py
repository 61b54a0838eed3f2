"""Async GRPO (`async_steps`) against a synchronous loop written by hand, and dynamic sampling (`dynamic_sampling`).

The reference below is the schedule nanogrpo/pipeline.py promises, run one phase at a time with the library's
pieces (sampler, rewards, advantages, grpo.step): the rollouts of step j are sampled with the weights after
max(0, j - k) updates. train.py must give the same weights, bit for bit, with the sampling on its thread.
"""

import json
import math
import re
import shutil
import time
from pathlib import Path

import pytest
import torch

import train
from nanogrpo import checkpoint, checks, data, grpo, rollout
from nanogrpo import config as C
from nanogrpo import model as M
from nanogrpo.grpo import make_optimizer
from nanogrpo.sampler import SamplingParams
from nanogrpo.torch_sampler import TorchSampler

VOLATILE = ("time_", "tokens_per_s")


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """The reference and train.py's run must use the same thread count (the bits of a matmul depend on it)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # pipeline.split_threads then leaves the count alone
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def args(model, out, *extra):
    return [f"model={model}", f"out_dir={out}", "prompts_per_step=4", "group_size=4", "eval_every=0", "steps=4",
            "micro_batch_size=16", "lr=3e-3", "max_new_tokens=6", "save_final=true", "skip_zero_advantage=false",
            *extra]


def metrics(out) -> list[dict]:
    return [json.loads(x) for x in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def weights(out) -> dict:
    from safetensors.torch import load_file

    return load_file(str(checkpoint.latest(str(out)) / "model.safetensors"))


def reference(argv: list[str], k: int) -> tuple[dict, list[list[int]]]:
    """The run train.py makes of `argv` with async_steps = k, one phase at a time: the final weights and each
    step's trained completion lengths."""
    cfg = C.load(argv)
    torch.manual_seed(cfg.seed)
    tok = M.load_tokenizer(cfg.model)
    rows = train.load_task(cfg)[0]
    policy = M.make_policy(cfg.model, torch.device("cpu"), torch.float32, cfg.logprob_chunk, False)
    optimizer, scheduler = make_optimizer(policy.parameters(), cfg, cfg.steps * cfg.mu)
    sampler = TorchSampler(cfg.model, device="cpu", dtype=torch.float32)
    stream = data.PromptStream(rows, cfg.prompts_per_step, 0, 1, cfg.seed)
    snapshots = {0: [(n, t.clone()) for n, t in M.iter_full_params(policy)]}  # version -> weights
    batches, lengths = {}, []

    def sample(j):  # step j's rollouts, with the weights of version max(0, j - k)
        sampler.sync_weights(iter(snapshots[max(0, j - k)]))
        rows_j = stream.next_batch()
        prompts = rollout.encode_prompts(rows_j, tok, cfg)
        params = SamplingParams(cfg.max_new_tokens, cfg.temperature, cfg.top_p, tuple(cfg.stop),
                                seed=rollout.sampling_seed(cfg, j, 0))
        flat = [(p, r, c) for p, r, g in zip(prompts, rows_j, sampler.generate(prompts, cfg.group_size, params)) for c in g]
        scoring = rollout.run_scoring(cfg)
        total, _, _ = rollout.score_rollouts([c for *_, c in flat], [r for _, r, _ in flat], scoring, cfg,
                                          False, cfg.group_size)
        return flat, total

    for t in range(cfg.steps):
        for j in range(t, min(t + k + 1, cfg.steps)):  # what the queue has sampled by now, in step order
            if j not in batches:
                batches[j] = sample(j)
        flat, total = batches.pop(t)
        adv = grpo.advantages(total, cfg.group_size, cfg.scale, cfg.adv_eps)
        rollouts = [grpo.Rollout(p, c.token_ids, c.logprobs, r, c.finish_reason == "length", a.item(), c.mask)
                    for (p, _, c), r, a in zip(flat, total, adv)]
        grpo.step(policy, None, optimizer, scheduler, rollouts, cfg, tok.pad_token_id)
        snapshots[t + 1] = [(n, t_.clone()) for n, t_ in M.iter_full_params(policy)]
        lengths.append(sorted(len(c.token_ids) for *_, c in flat))
    return dict(M.iter_full_params(policy)), lengths


def assert_same_weights(got: dict, want: dict) -> None:
    assert set(got) <= set(want)
    for name, t in got.items():
        assert torch.equal(t, want[name]), name


@pytest.mark.slow
@pytest.mark.parametrize("k", [0, 1, 2])
def test_async_run_equals_the_hand_written_schedule(warm_model_dir, tmp_path, k):
    argv = args(warm_model_dir, tmp_path / "run", f"async_steps={k}", "tis_cap=0" if k == 0 else "tis_cap=1000")
    train.main(argv)
    want, lengths = reference(argv, k)
    assert_same_weights(weights(tmp_path / "run"), want)
    got = [m for m in metrics(tmp_path / "run") if "staleness" in m]
    assert [m["staleness"] for m in got] == [min(s, k) for s in range(4)]  # step 0 samples with the loaded weights
    assert any(m["grad_norm"] > 0 for m in got)
    if k:  # the rollouts were stale: the update saw importance weights away from 1
        assert any(abs(m["is_weight_mean"] - 1) > 1e-4 for m in got[k:])


@pytest.mark.slow
def test_async_trains_every_completion_it_generates_whatever_the_timing(warm_model_dir, tmp_path, monkeypatch):
    """None is dropped for arriving late: with generation made slow for long completions and random, each step
    trains exactly the completions sampled for it, so the lengths trained are the lengths generated."""
    generated, trained = {}, {}
    real_generate, real_step = TorchSampler.generate, grpo.step
    rng = __import__("random").Random(0)

    def slow_generate(self, prompts, n, params):
        groups = real_generate(self, prompts, n, params)
        lens = sorted(len(c.token_ids) for g in groups for c in g)
        generated.setdefault(params.seed, []).append(lens)
        time.sleep(0.01 * sum(lens) / len(lens) * rng.random())  # long answers finish last
        return groups

    def recording_step(policy, ref, optimizer, scheduler, rollouts, cfg, *rest, **kw):
        trained[len(trained)] = sorted(len(r.completion_ids) for r in rollouts)
        return real_step(policy, ref, optimizer, scheduler, rollouts, cfg, *rest, **kw)

    monkeypatch.setattr(TorchSampler, "generate", slow_generate)
    monkeypatch.setattr(grpo, "step", recording_step)
    argv = args(warm_model_dir, tmp_path / "run", "async_steps=2", "tis_cap=2", "steps=6")
    train.main(argv)
    cfg = C.load(argv)
    assert len(trained) == 6
    for s in range(6):
        assert trained[s] == generated[rollout.sampling_seed(cfg, s, 0)][0], s


@pytest.mark.slow
def test_resume_with_rollouts_in_flight_continues_exactly(warm_model_dir, tmp_path):
    extra = ("async_steps=1", "tis_cap=2", "steps=5", "save_every=2", "keep_checkpoints=5")
    train.main(args(warm_model_dir, tmp_path / "full", *extra))
    cut = tmp_path / "cut"
    (cut / "checkpoints").mkdir(parents=True)
    shutil.copytree(tmp_path / "full" / "checkpoints" / "step_000002", cut / "checkpoints" / "step_000002")
    saved = checkpoint.rank_state(cut / "checkpoints" / "step_000002")
    assert [b.step for b in saved["rollouts"]] == [2, 3]  # sampled ahead with versions 1 and 2
    assert [b.version for b in saved["rollouts"]] == [1, 2]
    train.main(args(warm_model_dir, cut, *extra, "resume=true"))
    want = {m["step"]: m for m in metrics(tmp_path / "full")}
    got = metrics(cut)
    assert [m["step"] for m in got] == [3, 4, 5]
    for m in got:
        for key, v in m.items():
            if not key.startswith(VOLATILE):
                assert v == want[m["step"]][key] or (math.isnan(v) and math.isnan(want[m["step"]][key])), (m["step"], key)
    assert_same_weights(weights(cut), weights(tmp_path / "full"))


@pytest.mark.slow
def test_resume_with_another_async_steps_is_refused(warm_model_dir, tmp_path):
    extra = ("async_steps=1", "tis_cap=2", "steps=3", "save_every=2", "save_final=false")
    train.main(args(warm_model_dir, tmp_path, *extra))  # its checkpoint (step 2) holds step 3's rollouts
    assert len(checkpoint.rank_state(checkpoint.latest(str(tmp_path)))["rollouts"]) == 1
    with pytest.raises(C.ConfigError, match="same async_steps"):
        train.main(args(warm_model_dir, tmp_path, "async_steps=2", "tis_cap=2", "steps=4", "resume=true"))


@pytest.mark.slow
def test_staleness_does_not_trip_the_gap_gate_and_a_broken_sync_does(warm_model_dir, tmp_path, monkeypatch):
    # lr high enough that the weights move well past the fp32 limit (1e-3) in one update
    train.main(args(warm_model_dir, tmp_path / "ok", "async_steps=1", "tis_cap=2", "lr=1e-2", "steps=4"))
    metrics_of = [m for m in metrics(tmp_path / "ok") if m.get("staleness")]
    assert max(m["logprob_gap_now"] for m in metrics_of) > 1e-2  # the updates since sampling: large
    assert max(m["logprob_gap"] for m in metrics_of) < 1e-4  # against the weights that sampled: arithmetic only (~1e-6)
    # a sampler that stops taking weights, with the exact check blinded: the gate must still see it (the calibration
    # check, which also stops such a run, off: draws from stale weights are not the trainer's distribution)
    monkeypatch.setattr(TorchSampler, "sync_weights", lambda self, weights: None)
    monkeypatch.setattr(checks.CheckedSampler, "problems", lambda self, *a: [])
    with pytest.raises(checks.LogprobGapError, match="logprob_gap"):
        train.main(args(warm_model_dir, tmp_path / "broken", "async_steps=1", "tis_cap=2", "lr=1e-2", "steps=8",
                        "gap_patience=2", "max_sample_z=0"))


@pytest.mark.slow
def test_a_broken_sync_under_async_is_caught_exactly(warm_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(TorchSampler, "sync_weights", lambda self, weights: None)
    with pytest.raises(checks.StaleSamplerError, match="STALE WEIGHTS"):
        train.main(args(warm_model_dir, tmp_path, "async_steps=1", "tis_cap=2", "steps=4"))


@pytest.mark.parametrize("bad, message", [
    (["async_steps=1", "sampler=vllm"], "needs sampler=torch"),
    (["async_steps=1", "exact_logprobs=true"], "use one or the other"),
    (["async_steps=-1"], "async_steps"),
    (["dynamic_max_rounds=0"], "dynamic_max_rounds"),
])
def test_bad_async_settings_are_named_before_compute(bad, message):
    with pytest.raises(C.ConfigError, match=message):
        C.load(bad)


@pytest.mark.slow
def test_dynamic_sampling_keeps_groups_with_signal_and_counts_what_it_drew(warm_model_dir, tmp_path):
    train.main(args(warm_model_dir, tmp_path, "dynamic_sampling=true", "dynamic_max_rounds=6", "steps=3"))
    got = [m for m in metrics(tmp_path) if "staleness" in m]
    for m in got:
        assert m["groups_drawn"] >= 4 and m["sampling_rounds"] >= 1
        # every trained group has signal unless the rounds ran out (then it is topped up, and says so)
        if m["sampling_rounds"] < 6:
            assert m["zero_std_frac"] == 0.0, m
        assert m["generated_tokens"] >= m["completion_len_mean"] * 16
    assert any(m["groups_drawn"] > 4 for m in got), "the warm start has groups without signal: more were drawn"


class Scripted:
    """A sampler whose groups are scripted, one list of kinds per generate call, one kind per prompt: "both" (every
    sample right), "one" (the first right), "none" (all wrong), "fmt" (all wrong, the first in <think> format)."""

    def __init__(self, tok, script):
        self.tok, self.script, self.seen = tok, iter(script), []

    def generate(self, prompts, n, params):
        from nanogrpo.sampler import Completion

        self.seen.append(prompts)
        answer = lambda p: re.findall(r"\d+", self.tok.decode(p).split("+")[0])[-1]  # noqa: E731
        make = lambda text: Completion([1], [0.0], text, "stop")  # noqa: E731
        text = {"both": lambda p, j: answer(p), "one": lambda p, j: answer(p) if j == 0 else "x",
                "none": lambda p, j: "x", "fmt": lambda p, j: "<think>a</think>x" if j == 0 else "x"}
        kinds = next(self.script)[: len(prompts)]  # a round may draw fewer prompts than scripted
        return [[make(text[kind](p, j)) for j in range(n)] for p, kind in zip(prompts, kinds)]

    def sleep(self):
        pass


def hand_run(model, script, *extra, prompts=3):
    cfg = C.load([f"model={model}", f"prompts_per_step={prompts}", "group_size=2", "dynamic_sampling=true", *extra])
    tok = M.load_tokenizer(model)
    stream = data.PromptStream([{"problem": f"{i}+0=", "answer": str(i)} for i in range(30)], prompts, 0, 1, 0)
    sampler = Scripted(tok, script)
    worker = rollout.Worker(cfg, sampler, tok, False, rollout.run_scoring(cfg))
    return worker.rollouts(0, 0, None, stream, 0), sampler, stream


def test_a_sampler_that_returns_fewer_groups_than_prompts_is_named(warm_model_dir):
    """Every rank must hold its share of whole groups (the advantages are sliced by rank): a sampler that breaks its
    contract stops the step, with or without dynamic sampling."""
    for dynamic in ("false", "true"):
        with pytest.raises(RuntimeError, match=r"the sampler returned \[2\] completions for 3 prompts"):
            hand_run(warm_model_dir, [["both"]], f"dynamic_sampling={dynamic}")


def test_dynamic_sampling_against_a_hand_count(warm_model_dir):
    """Worker.rollouts with a sampler whose groups are scripted: which groups are kept, in what order, and the top-up."""
    # rounds of 3 prompts; per prompt: both right (no signal), one right (signal), both wrong (no signal)
    out, sampler, _ = hand_run(warm_model_dir, [["both", "one", "none"], ["none", "none", "one"],
                                                ["both", "both", "both"]], "dynamic_max_rounds=3")
    seen = sampler.seen
    assert out.rounds == 3 and out.drawn == 9
    # kept: round 1's "one", round 2's "one", then topped up with the first dropped group (round 1's "both")
    assert out.total == [1.0, 0.0, 1.0, 0.0, 1.0, 1.0]
    assert out.prompts == [seen[0][1], seen[1][2], seen[0][0]]
    assert out.topped_up == 1


def test_dynamic_sampling_gives_the_calibration_check_its_first_draw_unselected(warm_model_dir):
    """The check (max_sample_z) reads every completion of the first round, kept or dropped, and none of a later one:
    the kept groups are chosen by what was sampled (of a near-deterministic policy, those that drew a rare token).
    Without dynamic sampling it reads the update's rollouts (None)."""
    out, sampler, _ = hand_run(warm_model_dir, [["both", "one", "none"], ["none", "none", "one"],
                                                ["both", "both", "both"]], "dynamic_max_rounds=3")
    checked = out.for_check()
    assert [r.prompt_ids for r in checked] == [p for p in sampler.seen[0] for _ in range(2)]  # round 1, all 3 groups
    assert out.prompts != sampler.seen[0]  # while the update trains round 2's group too
    assert all(r.advantage == 0.0 and r.reward == 0.0 and not r.truncated for r in checked)  # every token counted
    plain, _, _ = hand_run(warm_model_dir, [["both", "one", "none"]], "dynamic_sampling=false")
    assert plain.for_check() is None


def test_dynamic_sampling_draws_only_the_prompts_still_missing(warm_model_dir):
    """A later round draws the missing groups over the fraction kept so far (3 of 4 kept: 1 missing -> 2 prompts, not
    another 4), and the stream moves by what was drawn, so a resumed run reads on from there."""
    out, sampler, stream = hand_run(warm_model_dir, [["one", "one", "none", "one"], ["none", "one"]], prompts=4)
    assert [len(p) for p in sampler.seen] == [4, 2]
    assert out.rounds == 2 and out.drawn == 6 and out.topped_up == 0 and stream.consumed == 6
    assert out.prompts == [*sampler.seen[0][:2], sampler.seen[0][3], sampler.seen[1][1]]


@pytest.mark.parametrize("metric, kept", [("accuracy", 1), ("reward", 2)])
def test_dynamic_sampling_filters_on_the_verifier_by_default(warm_model_dir, metric, kept):
    """An all-wrong group whose shaping terms differ (one answer in <think> format, weighted in) has no signal on the
    verifier's accuracy: dropped by default (verl's DAPO recipe filters on acc, NeMo-RL on the unshaped reward),
    kept by dynamic_metric = reward."""
    out, sampler, _ = hand_run(warm_model_dir, [["fmt", "one", "none"], ["none", "none", "none"]],
                               'rewards=["accuracy", "think_format"]', "reward_weights=[1.0, 0.5]",
                               f"dynamic_metric={metric}", "dynamic_max_rounds=2", "dynamic_top_up=true")
    assert len(out.rows) == 3 and out.topped_up == 3 - kept
    fmt_kept = out.prompts.index(sampler.seen[0][0]) < kept if sampler.seen[0][0] in out.prompts else False
    assert fmt_kept == (metric == "reward")


@pytest.mark.slow
def test_dynamic_sampling_out_of_rounds_stops_the_run_or_counts_the_top_up(warm_model_dir, tmp_path, capsys):
    """verl and NeMo-RL raise when their generation batches run out; so does a run here, naming it, unless
    dynamic_top_up, which trains the step topped up with dropped groups, counts them and warns."""
    run = lambda out, *extra: train.main(args(warm_model_dir, out, "dynamic_sampling=true", "dynamic_max_rounds=1",  # noqa: E731
                                              "steps=2", "save_final=false", *extra))
    with pytest.raises(rollout.DynamicSamplingError, match="dynamic_max_rounds = 1 generate calls and [1-4] of"):
        run(tmp_path / "a")
    run(tmp_path / "b", "dynamic_top_up=true")
    got = [m for m in metrics(tmp_path / "b") if "groups_topped_up" in m]
    assert len(got) == 2 and all(m["groups_topped_up"] == round(4 * m["zero_std_frac"]) for m in got)
    assert any(m["groups_topped_up"] for m in got) and "topped up with" in capsys.readouterr().err


@pytest.mark.slow
def test_two_ranks_async_with_dynamic_sampling_resume_exactly(warm_model_dir, tmp_path):
    """2 ranks (gloo): the rollout thread runs beside the update's collectives without deadlock, each rank fills its
    own share of groups with signal, and a resume with rollouts in flight continues as the uninterrupted run."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = lambda out, *extra: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py",
         *args(warm_model_dir, out, "async_steps=1", "tis_cap=2", "dynamic_sampling=true", "steps=4", "save_every=2",
               "keep_checkpoints=4", "lr=1e-3", *extra)],
        cwd=Path(train.__file__).parent, env=env, capture_output=True, text=True, timeout=600)
    full = run(tmp_path / "full")
    assert full.returncode == 0, full.stderr[-3000:]
    cut = tmp_path / "cut"
    (cut / "checkpoints").mkdir(parents=True)
    shutil.copytree(tmp_path / "full" / "checkpoints" / "step_000002", cut / "checkpoints" / "step_000002")
    again = run(cut, "resume=true")
    assert again.returncode == 0, again.stderr[-3000:]
    want = {m["step"]: m for m in metrics(tmp_path / "full")}
    got = metrics(cut)
    assert [m["step"] for m in got] == [3, 4]
    for m in got:
        for key, v in m.items():
            if not key.startswith(VOLATILE):
                assert v == want[m["step"]][key] or (math.isnan(v) and math.isnan(want[m["step"]][key])), (m["step"], key)
    assert_same_weights(weights(cut), weights(tmp_path / "full"))
