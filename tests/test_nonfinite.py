"""Round 5: a non-finite number never reaches the weights.

- a reward that is not a finite number (or None) is a named error before the step's update (checks.reward_values);
- a loss or gradient norm that is not finite skips the optimizer step (no weight, moment or schedule moves), is
  counted (`updates_skipped`), and NONFINITE_PATIENCE such steps in a row stop the run (grpo.apply_update,
  checks.check_finite);
- no checkpoint is written with a non-finite weight (checkpoint.save).
Each test failed on the code before (the run exited 0 with NaN weights saved), checked by running it at that commit.
"""
import json
import math

import pytest
import torch

import train
from helpers import update_check
from nanogrpo import checkpoint, checks, dist, grpo, rewards, shaping
from nanogrpo import model as M
from nanogrpo.rewards import RewardError

from test_bad_input import small


# -- rewards -----------------------------------------------------------------------------------------------------
def score_batch(texts, rows, names, weights=None):
    """A reward list (rewards.Scoring) on completions whose answers are the whole texts."""
    return rewards.scoring(names, weights or [], rewards.by_row)(rewards.Batch(texts, texts, rows))


@pytest.fixture
def user_reward(monkeypatch):
    """Register a user's reward, as users add one today (shaping.SHAPING, before the config is read)."""
    def register(fn):
        monkeypatch.setitem(shaping.SHAPING, "mine", fn)
        return "mine"
    return register


@pytest.mark.parametrize("value,said", [(math.inf, "returned inf"), (-math.inf, "returned -inf"),
                                        (math.nan, "returned nan"), ("1.0", "returned '1.0' \\(str\\)"),
                                        ([1.0], "returned \\[1.0\\] \\(list\\)")])
def test_a_reward_that_is_no_finite_number_is_named(user_reward, value, said):
    import numpy as np

    name = user_reward(lambda b: [0.0, value])
    with pytest.raises(RewardError, match=rf"'rewards': reward 'mine' {said} for row '2\+2'"):
        score_batch(["1", "2"], [{"problem": "1+1", "answer": "2"}, {"problem": "2+2", "answer": "4"}],
                            ["exact", name])
    user_reward(lambda b: [np.float32(0.5), None])  # numpy numbers and None are rewards
    total, parts = score_batch(["2", "4"], [{"answer": "2"}, {"answer": "4"}], ["exact", name])
    assert total == [1.5, None] and parts[name] == [0.5, None]


@pytest.mark.parametrize("returns,said", [
    (lambda b: 0.5, "returned 0.5, not a list"),  # one float for the batch
    (lambda b: None, "returned None for the whole batch \\(no `return`\\?\\)"),
    (lambda b: "10", "returned '10' \\(str\\), not a list"),  # a string is a sequence, of characters
    (lambda b: {"a": 1.0, "b": 1.0}, "returned .*\\(dict\\), not a list"),
    (lambda b: [1.0, True], "returned True \\(bool\\) for row '2\\+2'"),
    (lambda b: [0.0, 10**400], "returned an int of 401 digits \\(int\\) for row '2\\+2'"),
    (lambda b: [1.0], "gave 1 values for 2 completions"),
])
def test_a_reward_that_returns_no_list_of_numbers_is_named(user_reward, returns, said):
    """What a reward returns is checked as a value, each wrong shape named (RewardError: exit 2), not a
    TypeError or OverflowError traceback from the sum."""
    name = user_reward(returns)
    with pytest.raises(RewardError, match=rf"'rewards': reward 'mine' {said}"):
        score_batch(["1", "2"], [{"problem": "1+1", "answer": "2"}, {"problem": "2+2", "answer": "4"}], ["exact", name])


def test_a_reward_that_exits_is_named_and_a_class_is_refused_at_load(tmp_path):
    """A user's reward that raises SystemExit (even 0) is named, not the run's exit; one that is a class is refused
    when the config loads (its instance is not a list of rewards)."""
    f = tmp_path / "mine.py"
    f.write_text("import sys\ndef quits(completions, **kw):\n    sys.exit(0)\nclass Judge:\n"
                 "    def __init__(self, completions, **kw):\n        pass\n")
    with pytest.raises(RewardError, match="reward 'quits' raised SystemExit"):
        score_batch(["1"], [{"problem": "1+1", "answer": "2"}], ["exact", f"{f}:quits"])
    with pytest.raises((RewardError, ValueError), match="class"):
        rewards.check_user_calls([f"{f}:Judge"], rewards.exact, [{"problem": "1+1", "answer": "2"}])


def test_rewards_whose_spread_overflows_a_float_are_named(user_reward):
    """A finite reward of 1e300: its square overflows in the group statistics; named, not an OverflowError."""
    name = user_reward(lambda b: [1e300, -1e300])
    with pytest.raises(RewardError, match="rewards as large as .*1e\\+300.* sum or spread overflows a float"):
        score_batch(["1", "2"], [{"answer": "2"}, {"answer": "4"}], [name])
    user_reward(lambda b: [1e150, 0.0])  # large, but its spread is a float: a reward
    assert score_batch(["1", "2"], [{"answer": "2"}, {"answer": "4"}], [name])[0] == [1e150, 0.0]


def test_weights_that_overflow_the_weighted_sum_are_named():
    with pytest.raises(RewardError, match=r"'reward_weights': the weighted sum .* is inf"):
        score_batch(["<think>a</think>2"], [{"answer": "2"}], ["number", "think_format"], [1e308, 1e308])


@pytest.mark.slow
def test_a_user_reward_returning_inf_once_stops_the_run_before_its_update(warm_model_dir, tmp_path, user_reward):
    calls = []

    def inf_once(batch):
        calls.append(1)
        return [math.inf if len(calls) == 1 and i == 0 else 0.0 for i in range(len(batch.texts))]

    user_reward(inf_once)
    out = tmp_path / "out"
    with pytest.raises(RewardError, match="reward 'mine' returned inf"):
        train.main(small(warm_model_dir, out, 'rewards=["exact","mine"]', "steps=3"))
    assert not (out / "metrics.jsonl").exists() and not (out / "checkpoints").exists()


# -- the update ---------------------------------------------------------------------------------------------------
def one_update(model_dir, poison=None, mu=1):
    """grpo.step on update_check's fixed rollouts with AdamW; `poison(rollouts)` first. -> (before, after, optimizer, metrics)"""
    dist.init("cpu")
    torch.manual_seed(0)
    policy = M.make_policy(model_dir, torch.device("cpu"), torch.float32, chunk_size=3, activation_checkpointing=False)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0)
    rollouts = update_check.fixed_rollouts()
    if poison:
        poison(rollouts)
    before = {k: v.clone() for k, v in M.full_state_dict_cpu(policy).items()}
    metrics = grpo.step(policy, None, opt, sched, rollouts, update_check.config(mu=mu), pad_id=1)
    return before, M.full_state_dict_cpu(policy), opt, sched, metrics


def nan_advantage(rollouts):
    next(r for r in rollouts if r.advantage != 0).advantage = math.nan


@pytest.mark.parametrize("mu", [1, 2])
def test_a_nan_loss_skips_the_update(tiny_model_dir, mu):
    before, after, opt, sched, metrics = one_update(tiny_model_dir, nan_advantage, mu)
    assert metrics["updates_skipped"] == mu and math.isnan(metrics["loss"])
    for k, w in after.items():
        assert torch.equal(w, before[k]), k  # not one weight moved
    assert not opt.state and sched.last_epoch == 0  # no Adam moment, no step of the schedule


@pytest.mark.slow
def test_a_finite_update_is_applied(tiny_model_dir):
    before, after, opt, sched, metrics = one_update(tiny_model_dir)
    assert metrics["updates_skipped"] == 0 and math.isfinite(metrics["grad_norm"])
    assert any(not torch.equal(w, before[k]) for k, w in after.items()) and sched.last_epoch == 1


def test_patience_counts_steps_in_a_row():
    checks.check_finite([1, 1, 0, 1, 1])  # interrupted: goes on
    checks.check_finite([0] * 10)
    with pytest.raises(checks.NonFiniteError, match="not finite .* in 3 steps in a row"):
        checks.check_finite([0, 1, 1, 1])


@pytest.mark.slow
def test_a_run_whose_loss_stays_nan_stops_after_3_steps_with_every_update_skipped(warm_model_dir, tmp_path,
                                                                                     monkeypatch):
    real = grpo.policy_loss
    monkeypatch.setattr(grpo, "policy_loss", lambda *a, **k: (lambda loss, st: (loss * math.nan, st))(*real(*a, **k)))
    out = tmp_path / "out"
    with pytest.raises(checks.NonFiniteError, match="3 steps in a row"):
        train.main(small(warm_model_dir, out, "steps=10", "save_every=1", "skip_zero_advantage=false"))
    logged = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["updates_skipped"] for m in logged] == [1, 1, 1]
    for ckpt in (out / "checkpoints").glob("step_*"):  # saved after each skipped step: the model's own weights
        from safetensors.torch import load_file

        saved, start = load_file(str(ckpt / "model.safetensors")), load_file(f"{warm_model_dir}/model.safetensors")
        assert all(torch.equal(saved[k], start[k]) for k in start)


# -- checkpoints ------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_no_checkpoint_is_written_with_a_nonfinite_weight(tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer

    dist.init("cpu")
    policy = M.make_policy(tiny_model_dir, torch.device("cpu"), torch.float32, 3, False)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    first = checkpoint.save(str(tmp_path), 1, policy, opt, sched, tok, {"data": {}})
    with torch.no_grad():
        next(iter(policy.parameters())).view(-1)[3] = math.inf
    with pytest.raises(checkpoint.CheckpointError, match=r"checkpoint step 2: the weight .* holds 1 value\(s\) that "
                                                         rf"are not finite .*earlier checkpoints are intact: {first}"):
        checkpoint.save(str(tmp_path), 2, policy, opt, sched, tok, {"data": {}})
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_000001"]
