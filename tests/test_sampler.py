"""TorchSampler against references: the library's plain reading of it (reference_generate: no cache, no batch,
one token at a time) token for token, a full-sequence HF forward for log-probs, HF `generate` for greedy output,
and the softmax itself for the sampling distribution."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from nanogrpo.rollout import make_sampler
from nanogrpo.sampler import Completion, SamplingParams, reference_generate
from nanogrpo.torch_sampler import TorchSampler

PROMPTS = ["12+34=", "What is 1234 plus 5678? The answer is", "7", "99+1="]


@pytest.fixture(scope="module")
def sampler(tiny_model_dir):
    # A small max_batch_size so that requests below are split into several chunks.
    return TorchSampler(tiny_model_dir, max_batch_size=5)


def encode(sampler, texts):
    return [sampler.tokenizer.encode(t) for t in texts]


@torch.no_grad()
def reference_logprobs(model, prompt, tokens, temperature):
    """log_softmax(logits / T) at each generated token, from one unpadded full-sequence forward (on the model's
    device; returned on the CPU)."""
    logits = model(torch.tensor([prompt + tokens], device=model.device)).logits[0].float()  # (T, V)
    logp = torch.log_softmax(logits / temperature, dim=-1)[len(prompt) - 1 : -1]  # (new, V)
    return logp.gather(-1, torch.tensor(tokens, device=model.device)[:, None]).squeeze(-1).cpu()


def plain(model, tokenizer, prompt, max_new, stops=()):
    """(tokens, finish reason) of greedy decoding by the library's plain reading (reference_generate)."""
    c = reference_generate(model, tokenizer, [prompt], 1, SamplingParams(max_new, temperature=0.0, stop=stops))[0][0]
    return c.token_ids, c.finish_reason


# ---- (1) log-probs equal the trainer-style full forward, padding changes nothing ----


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_logprobs_match_full_forward(tiny_model_dir, device, temperature, top_p):
    sampler = TorchSampler(tiny_model_dir, device=device, max_batch_size=5)  # several chunks, as the fixture's
    prompts = encode(sampler, PROMPTS)  # lengths differ: left padding is exercised
    assert len({len(p) for p in prompts}) > 2
    params = SamplingParams(max_new_tokens=12, temperature=temperature, top_p=top_p, seed=3)
    result = sampler.generate(prompts, n=3, params=params)
    assert [len(r) for r in result] == [3] * len(prompts)
    for prompt, completions in zip(prompts, result):
        for c in completions:
            assert len(c.logprobs) == len(c.token_ids) >= 1
            ref = reference_logprobs(sampler.model, prompt, c.token_ids, temperature)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-5, rtol=0)


# ---- (2) greedy equals HF generate and a naive decoder ----


@pytest.mark.slow
def test_greedy_equals_hf_generate(sampler):
    prompts = encode(sampler, PROMPTS)
    result = sampler.generate(prompts, n=2, params=SamplingParams(max_new_tokens=10, temperature=0.0))
    for prompt, completions in zip(prompts, result):
        out = sampler.model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=False,
            max_new_tokens=10,
            eos_token_id=sorted(sampler.eos_ids),
            pad_token_id=sampler.pad_id,
        )
        expected = out[0, len(prompt) :].tolist()
        for c in completions:
            assert c.token_ids == expected
            # Greedy log-probs are those of the untempered distribution.
            ref = reference_logprobs(sampler.model, prompt, c.token_ids, 1.0)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-5, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("temperature,top_p,stop", [(1.0, 1.0, False), (0.7, 0.9, False), (1.3, 0.5, True),
                                                    (0.0, 1.0, True)])
def test_equals_its_plain_reading_token_for_token(sampler, tiny_model_dir, temperature, top_p, stop):
    """Continuous batching over 5 slots (4 prompts x 3 samples: rows leave and enter), the cache, oneDNN's GEMMs and
    the two-level CDF draw give the tokens of reference_generate, a transformers model with its own attention
    forwarding the whole sequence for each token and inverting the plain CDF with the same uniform numbers."""
    hf = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    prompts = encode(sampler, PROMPTS)
    params = SamplingParams(max_new_tokens=14, temperature=temperature, top_p=top_p, seed=11)
    if stop:  # a piece of the first completion's text: it stops there, and wherever else it comes up
        params.stop = (_printable_piece(sampler, sampler.generate(prompts, 1, params)[0][0].token_ids),)
    fast, ref = sampler.generate(prompts, 3, params), reference_generate(hf, sampler.tokenizer, prompts, 3, params)
    got = [[(c.token_ids, c.finish_reason, c.text) for c in group] for group in fast]
    assert got == [[(c.token_ids, c.finish_reason, c.text) for c in group] for group in ref]
    if temperature:  # the samples of a prompt differ: the draws are the samples' own
        assert all(len({tuple(c.token_ids) for c in group}) > 1 for group in fast)
    for f, r in zip(sum(fast, []), sum(ref, [])):
        torch.testing.assert_close(torch.tensor(f.logprobs), torch.tensor(r.logprobs), atol=1e-5, rtol=0)
    if stop:
        assert any(c.finish_reason == "stop" for c in sum(fast, []))


# ---- (3) EOS, stop strings, max_new_tokens ----


def test_length_finish_matches_naive(sampler):
    prompts = encode(sampler, PROMPTS)
    result = sampler.generate(prompts, 1, SamplingParams(max_new_tokens=6, temperature=0.0))
    for prompt, completions in zip(prompts, result):
        c = completions[0]
        tokens, reason = plain(sampler.model, sampler.tokenizer, prompt, 6)
        assert (c.token_ids, c.finish_reason) == (tokens, reason)
    # The random tiny model does not emit EOS within 6 tokens here: every row hits the length limit.
    assert [r[0].finish_reason for r in result] == ["length"] * len(prompts)
    assert all(len(r[0].token_ids) == 6 for r in result)


def _printable_piece(sampler, tokens):
    """Decoded text of one generated token that is plain printable ASCII (to use as a stop string)."""
    for k in range(2, len(tokens)):
        piece = sampler.tokenizer.decode([tokens[k]])
        if piece.isascii() and piece.isprintable() and piece.strip():
            return piece
    pytest.skip("no printable token in the greedy output")


def test_stop_string_matches_naive(sampler):
    prompts = encode(sampler, PROMPTS)
    greedy = sampler.generate(prompts, 1, SamplingParams(max_new_tokens=16, temperature=0.0))
    stop = _printable_piece(sampler, greedy[0][0].token_ids)
    params = SamplingParams(max_new_tokens=16, temperature=0.0, stop=(stop, "@@never@@"))
    result = sampler.generate(prompts, 1, params)
    reasons = []
    for prompt, completions in zip(prompts, result):
        c = completions[0]
        tokens, reason = plain(sampler.model, sampler.tokenizer, prompt, 16, params.stop)
        assert (c.token_ids, c.finish_reason) == (tokens, reason)
        assert c.text == sampler.tokenizer.decode(tokens)
        reasons.append(reason)
    # Prompt 0 is cut by the stop string, strictly before the length limit.
    assert reasons[0] == "stop" and stop in result[0][0].text and len(result[0][0].token_ids) < 16


@pytest.mark.slow
def test_sampled_stop_strings_cut_at_completing_token(sampler):
    prompts = encode(sampler, PROMPTS)
    stops = ("1", "a", "e ")
    dec = lambda ids: sampler.tokenizer.decode(ids)  # noqa: E731
    n_stopped = 0
    for seed in range(5, 10):  # the random tiny model completes a stop string now and then: several seeds
        result = sampler.generate(prompts, 4, SamplingParams(max_new_tokens=20, temperature=1.0, seed=seed, stop=stops))
        for prompt, c in ((p, c) for p, cs in zip(prompts, result) for c in cs):
            # Rows that finish early leave the batch; the rows still running must be unaffected.
            ref = reference_logprobs(sampler.model, prompt, c.token_ids, 1.0)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-5, rtol=0)
            hit = any(s in c.text for s in stops)
            if c.finish_reason == "stop" and c.token_ids[-1] in sampler.eos_ids:
                assert not hit  # EOS came first
            elif c.finish_reason == "stop":
                n_stopped += 1
                # The last token completed a stop string: without it, none is present.
                assert hit and not any(s in dec(c.token_ids[:-1]) for s in stops)
            else:
                assert c.finish_reason == "length" and len(c.token_ids) == 20 and not hit
    assert 0 < n_stopped < 80  # some rows stopped early while others ran on


def test_eos_from_generation_config_list(tmp_path, tiny_model_dir):
    """Any id in generation_config's eos list stops; the EOS token is kept in token_ids, not in text."""
    base = TorchSampler(tiny_model_dir)
    prompt = encode(base, PROMPTS[:1])
    greedy = base.generate(prompt, 1, SamplingParams(max_new_tokens=8, temperature=0.0))[0][0].token_ids
    eos = greedy[3]
    first = greedy.index(eos)  # the earliest position where that token appears
    model_dir = tmp_path / "eos_model"
    shutil.copytree(tiny_model_dir, model_dir)
    gen_cfg = json.loads((model_dir / "generation_config.json").read_text())
    gen_cfg["eos_token_id"] = [gen_cfg["eos_token_id"], eos]
    (model_dir / "generation_config.json").write_text(json.dumps(gen_cfg))

    s = TorchSampler(str(model_dir))
    assert eos in s.eos_ids
    c = s.generate(prompt, 2, SamplingParams(max_new_tokens=8, temperature=0.0))[0][1]
    assert c.finish_reason == "stop"
    assert c.token_ids == greedy[: first + 1]
    assert c.text == s.tokenizer.decode(greedy[:first])
    assert len(c.logprobs) == first + 1


# ---- (4) seeds, top-p, the sampling distribution ----


@pytest.mark.slow
def test_seed_reproducible(sampler):
    prompts = encode(sampler, PROMPTS)
    params = SamplingParams(max_new_tokens=8, temperature=1.0, seed=11)
    a = sampler.generate(prompts, 3, params)
    b = sampler.generate(prompts, 3, params)
    c = sampler.generate(prompts, 3, SamplingParams(max_new_tokens=8, temperature=1.0, seed=12))
    ids = lambda r: [[x.token_ids for x in cs] for cs in r]  # noqa: E731
    assert ids(a) == ids(b)
    assert ids(a) != ids(c)
    # seed=None draws from the global RNG, so torch.manual_seed makes it reproducible too.
    torch.manual_seed(0)
    d = sampler.generate(prompts, 2, SamplingParams(max_new_tokens=4))
    torch.manual_seed(0)
    e = sampler.generate(prompts, 2, SamplingParams(max_new_tokens=4))
    assert ids(d) == ids(e)


def test_tiny_top_p_keeps_only_argmax(sampler):
    prompts = encode(sampler, PROMPTS)
    greedy = sampler.generate(prompts, 1, SamplingParams(max_new_tokens=8, temperature=0.0))
    nucleus = sampler.generate(prompts, 3, SamplingParams(max_new_tokens=8, temperature=0.5, top_p=1e-6, seed=1))
    for prompt, g, cs in zip(prompts, greedy, nucleus):
        for c in cs:
            assert c.token_ids == g[0].token_ids
            # Log-probs stay those of softmax(logits / T) before truncation, so they are not 0.
            ref = reference_logprobs(sampler.model, prompt, c.token_ids, 0.5)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-5, rtol=0)
            assert max(c.logprobs) < -1e-3


@pytest.mark.slow
@pytest.mark.parametrize("temperature,top_p", [(0.3, 1.0), (0.3, 0.5)])
def test_first_token_distribution(tiny_model_dir, temperature, top_p):
    """Empirical first-token frequencies fit softmax(logits / T) restricted to the nucleus (chi-square)."""
    s = TorchSampler(tiny_model_dir, max_batch_size=10_000)
    prompt = s.tokenizer.encode("12+34=")
    N = 10_000
    with torch.no_grad():
        probs = torch.softmax(s.model(torch.tensor([prompt])).logits[0, -1].float() / temperature, dim=-1)
    sorted_p, sorted_ids = probs.sort(descending=True)
    keep = sorted_ids[(sorted_p.cumsum(0) - sorted_p) < top_p]
    expected = torch.zeros_like(probs)
    expected[keep] = probs[keep] / probs[keep].sum()
    result = s.generate([prompt], N, SamplingParams(max_new_tokens=1, temperature=temperature, top_p=top_p, seed=0))
    counts = torch.bincount(torch.tensor([c.token_ids[0] for c in result[0]]), minlength=len(probs)).float()
    assert counts[expected == 0].sum() == 0, "sampled a token outside the nucleus"
    e = expected[keep] * N
    chi2 = float(((counts[keep] - e) ** 2 / e).sum())
    dof = len(keep) - 1
    # Mean dof, sd sqrt(2 dof); a wrong temperature (0.5 for 0.3) gives several times dof here.
    assert chi2 < dof + 6 * (2 * dof) ** 0.5, (chi2, dof)


# ---- (5) sync_weights ----


def _other_model(tmp_path, tied):
    from tiny import build_random_model_dir

    d = build_random_model_dir(tmp_path / f"other_{tied}", tie_word_embeddings=tied, seed=1)
    return AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32).eval()


def _hf_names(model):
    """(name, tensor) as the trainer sends them: state-dict names, lm_head left out when tied."""
    tied = model.config.tie_word_embeddings
    for name, t in model.state_dict().items():
        if not (tied and name == "lm_head.weight"):
            yield name, t


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.parametrize("tied", [True, False])
def test_sync_weights_gives_other_models_logprobs(tmp_path, tiny_model_dir, tiny_untied_model_dir, device, tied):
    """CPU tensors streamed into the sampler on `device` (on a GPU, each is copied across as it arrives)."""
    s = TorchSampler(tiny_model_dir if tied else tiny_untied_model_dir, device=device, max_batch_size=4)
    other = _other_model(tmp_path, tied)
    prompts = encode(s, PROMPTS)
    params = SamplingParams(max_new_tokens=8, temperature=0.9, seed=2)
    before = s.generate(prompts, 2, params)
    s.sync_weights(_hf_names(other))  # a generator: consumed one tensor at a time
    after = s.generate(prompts, 2, params)
    assert [c.token_ids for cs in before for c in cs] != [c.token_ids for cs in after for c in cs]
    for prompt, cs in zip(prompts, after):
        for c in cs:
            ref = reference_logprobs(other, prompt, c.token_ids, 0.9)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-5, rtol=0)


def test_sync_weights_errors_name_the_problem(tmp_path, tiny_model_dir):
    s = TorchSampler(tiny_model_dir)
    weights = dict(_hf_names(s.model))
    with pytest.raises(ValueError, match="model.bogus.weight"):
        s.sync_weights(list(weights.items()) + [("model.bogus.weight", torch.zeros(2))])
    with pytest.raises(ValueError, match="not sent.*model.norm.weight"):
        s.sync_weights((k, v) for k, v in weights.items() if k != "model.norm.weight")
    bad = dict(weights)
    bad["model.norm.weight"] = torch.zeros(3)
    with pytest.raises(ValueError, match="shape.*model.norm.weight"):
        s.sync_weights(bad.items())


# ---- API edges ----


def test_bad_inputs(sampler, tmp_path):
    with pytest.raises(ValueError, match="top_p"):
        sampler.generate([[1, 2]], 1, SamplingParams(top_p=0.0))
    with pytest.raises(ValueError, match="temperature"):
        sampler.generate([[1, 2]], 1, SamplingParams(temperature=-1.0))
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        sampler.generate([[1, 2], []], 1, SamplingParams())
    with pytest.raises(ValueError, match="n must be"):
        sampler.generate([[1, 2]], 0, SamplingParams())
    with pytest.raises(FileNotFoundError, match="not a Hugging Face model directory"):
        TorchSampler(str(tmp_path / "missing"))
    assert sampler.generate([], 2, SamplingParams()) == []


def test_make_sampler(tiny_model_dir):
    s = make_sampler("torch", tiny_model_dir, "cpu", torch.float32, max_batch_size=3)
    assert isinstance(s, TorchSampler) and s.max_batch_size == 3
    s.sleep()
    s.wake()  # no-ops on CPU
    c = s.generate([[5, 6]], 1, SamplingParams(max_new_tokens=2))[0][0]
    assert isinstance(c, Completion) and len(c.token_ids) == 2
    with pytest.raises(ValueError, match="unknown sampler kind 'tgi'"):
        make_sampler("tgi", tiny_model_dir, "cpu", torch.float32)
    # vllm is imported inside make_sampler only: no module-level import of it in sampler.py (nor rollout.py).
    import ast

    import nanogrpo.evaluate
    import nanogrpo.sampler

    for mod in (nanogrpo.sampler, nanogrpo.evaluate):
        tree = ast.parse(Path(mod.__file__).read_text())
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = [a.name for n in top for a in n.names] + [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
        assert names and not [x for x in names if "vllm" in x], mod.__name__


# ---- (6) the decode loop: every supported architecture, continuous batching, the cache, the streams ----


def _arch_dir(root: Path, arch: str, **extra) -> str:
    """A random 2-layer model of `arch` with the tiny tokenizer (initializer_range 0.2: peaked logits, no near-ties)."""
    import transformers
    from tiny import build_tokenizer

    names = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3", "mistral": "Mistral"}[arch]
    tok = build_tokenizer()
    kw = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=256, initializer_range=0.2,
              eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None)
    cfg = getattr(transformers, f"{names}Config")(**{**kw, **extra})
    torch.manual_seed(0)
    model = getattr(transformers, f"{names}ForCausalLM")(cfg)
    out = root / arch
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "mistral"])
def test_every_architecture_matches_transformers(tmp_path, arch):
    """The decode loop drives the model's own layers: greedy equals HF generate, log-probs equal a full forward."""
    s = TorchSampler(_arch_dir(tmp_path, arch, **({"attention_bias": True} if arch == "llama" else {})),
                     max_batch_size=3)
    prompts = encode(s, PROMPTS)
    greedy = s.generate(prompts, 2, SamplingParams(max_new_tokens=12, temperature=0.0))
    sampled = s.generate(prompts, 2, SamplingParams(max_new_tokens=12, temperature=0.8, seed=0))
    for prompt, g, cs in zip(prompts, greedy, sampled):
        out = s.model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                               do_sample=False, max_new_tokens=12, eos_token_id=sorted(s.eos_ids), pad_token_id=s.pad_id)
        assert g[0].token_ids == g[1].token_ids == out[0, len(prompt):].tolist()
        for c in cs:
            ref = reference_logprobs(s.model, prompt, c.token_ids, 0.8)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=2e-5, rtol=0)


@pytest.mark.slow
def test_other_architectures_and_windows_are_named(tmp_path):
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ValueError, match="'gpt2' model: use sampler = 'vllm'"):
        TorchSampler(str(tmp_path / "gpt2"))
    # A sliding window is exact while the sequence fits in it, and an error past it (never silently wrong).
    s = TorchSampler(_arch_dir(tmp_path, "mistral", sliding_window=24))
    prompt = s.tokenizer.encode("12+34=")
    assert len(s.generate([prompt], 1, SamplingParams(max_new_tokens=24 - len(prompt), temperature=0.0))[0][0].token_ids)
    with pytest.raises(ValueError, match="sliding window"):
        s.generate([prompt], 1, SamplingParams(max_new_tokens=40, temperature=0.0))


@pytest.mark.slow
def test_continuous_batching_refills_slots_and_keeps_results(sampler, tiny_model_dir):
    """Rows that stop early free their slots for waiting prompts (the last running row moves into the hole);
    greedy results and log-probs equal a naive decoder's, whatever the slot count."""
    prompts = encode(sampler, PROMPTS * 3)
    greedy = sampler.generate(prompts[:1], 1, SamplingParams(max_new_tokens=16, temperature=0.0))
    stop = _printable_piece(sampler, greedy[0][0].token_ids)  # some rows stop early, the others run on
    params = SamplingParams(max_new_tokens=16, temperature=0.0, stop=(stop,))
    for slots in (3, 5, 64):
        per_step = []
        s = TorchSampler(tiny_model_dir, max_batch_size=slots)
        result = s.generate(prompts, 2, params, progress=lambda done, tokens: per_step.append((done, tokens)))
        for prompt, cs in zip(prompts, result):
            tokens, reason = plain(s.model, s.tokenizer, prompt, 16, params.stop)
            for c in cs:
                assert (c.token_ids, c.finish_reason) == (tokens, reason)
                torch.testing.assert_close(torch.tensor(c.logprobs), reference_logprobs(s.model, prompt, tokens, 1.0),
                                           atol=1e-5, rtol=0)
        assert sum(d for d, _ in per_step) == 24 and sum(t for _, t in per_step) == sum(
            len(c.token_ids) for cs in result for c in cs)
        if slots < 24:  # a step after rows finished still ran full: their slots were refilled at once
            full = slots // 2 * 2  # a prompt's 2 samples are admitted together (one prefill for the group)
            assert max(t for _, t in per_step) == full
            assert any(d and t2 == full for (d, _), (_, t2) in zip(per_step, per_step[1:]))


@pytest.mark.slow
def test_cache_grows_past_its_first_size(sampler):
    """The cache starts at the prompt's length and doubles: a long greedy run equals HF generate."""
    prompt = encode(sampler, ["7"])[0]
    c = sampler.generate([prompt], 1, SamplingParams(max_new_tokens=150, temperature=0.0))[0][0]
    out = sampler.model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                 do_sample=False, max_new_tokens=150, eos_token_id=sorted(sampler.eos_ids),
                                 pad_token_id=sampler.pad_id)
    assert c.token_ids == out[0, len(prompt):].tolist() and len(c.token_ids) > 100


@pytest.mark.slow
def test_a_samples_draws_do_not_depend_on_its_batch(tiny_model_dir):
    """Each sample draws from its own stream (seed, prompt, sample, token): the slot count, and so which rows
    share a step, leaves every sampled token as it was."""
    prompts = [p for p in (TorchSampler(tiny_model_dir).tokenizer.encode(t) for t in PROMPTS)]
    params = SamplingParams(max_new_tokens=10, temperature=1.0, seed=11)
    runs = [TorchSampler(tiny_model_dir, max_batch_size=b).generate(prompts, 3, params) for b in (1, 4, 64)]
    assert all([[c.token_ids for c in cs] for cs in r] == [[c.token_ids for c in cs] for cs in runs[0]] for r in runs)
    # ... and samples of one prompt differ from each other
    assert len({tuple(c.token_ids) for c in runs[0][1]}) == 3


def test_uniforms_are_splitmix64():
    """The streams' int64 arithmetic (wrapping products, masked shifts) equals splitmix64 on Python integers."""
    from nanogrpo.sampler import uniforms

    M = (1 << 64) - 1

    def mix(x):
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
        return x ^ (x >> 31)

    seed, streams, counters = 2**61 + 12345, [0, 1, 7, 2**40], [0, 3, 99, 2**33]
    got = uniforms(seed, torch.tensor(streams), torch.tensor(counters)).tolist()
    want = [(mix((mix((s * 0x9E3779B97F4A7C15 + seed) & M) + (c + 1) * 0x9E3779B97F4A7C15) & M) >> 11) * 2.0**-53
            for s, c in zip(streams, counters)]
    assert got == want
    u = uniforms(0, torch.arange(200_000), torch.zeros(200_000, dtype=torch.long))
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002


def test_no_stream_starts_at_the_hash_fixed_point():
    """splitmix64's finaliser maps 0 to 0: with the counter entering as itself, seed 0's stream 0 drew u = 0 exactly
    (the default run's first draw), and the CDF inversion gave the lowest token id with any mass at all."""
    from nanogrpo.sampler import uniforms
    from nanogrpo.torch_sampler import sample_next

    u = uniforms(0, torch.arange(4), torch.zeros(4, dtype=torch.long))
    assert (u > 1e-6).all() and len(set(u.tolist())) == 4, u
    logits = torch.tensor([[-900.0, -850.0] + [0.0] * 254])  # at temperature 0.1 the first two have p ~ e^-8500, e^-8000
    tok, lp = sample_next(logits, 0.1, 1.0, uniforms(0, torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long)))
    assert int(tok) >= 2 and float(lp) > -10


@pytest.mark.slow
@pytest.mark.parametrize("V,temperature,top_p,scale", [
    (1000, 1.0, 1.0, 3.0),   # 3 full blocks of 256 and a remainder of 232
    (2048, 0.7, 0.9, 4.0),   # peaked: the nucleus lies in the top 1024 (topk)
    (3000, 1.0, 0.95, 0.1),  # nearly flat: the nucleus is past the top 1024, the full sort
])
def test_sample_next_draws_softmax_and_reports_log_softmax(V, temperature, top_p, scale):
    """sample_next's two-level CDF / top-k nucleus against the softmax itself: frequencies over 20,000 draws of one
    row (chi-square over cells of >= 100 expected draws), log-probs equal log_softmax(logits / T)."""
    from nanogrpo.sampler import uniforms
    from nanogrpo.torch_sampler import sample_next

    g = torch.Generator().manual_seed(V)
    logits = torch.randn(V, generator=g) * scale
    N = 20_000
    u = uniforms(V, torch.arange(N), torch.zeros(N, dtype=torch.long))
    tokens, logp = sample_next(logits.expand(N, V).contiguous(), temperature, top_p, u)
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    torch.testing.assert_close(logp, torch.log(probs[tokens]).float(), atol=1e-5, rtol=0)
    sp, order = probs.sort(descending=True)
    keep = order[(sp.cumsum(0) - sp) < top_p]
    want = torch.zeros(V, dtype=torch.float64)
    want[keep] = probs[keep] / probs[keep].sum()
    counts = torch.bincount(tokens, minlength=V).double()
    assert counts[want == 0].sum() == 0, "drew a token outside the nucleus"
    # cells of >= 100 expected draws: the kept tokens, most likely first, pooled until a cell's expectation fills
    ranked = keep[want[keep].argsort(descending=True)]
    expected = want[ranked] * N
    cell = torch.unique(((expected.cumsum(0) - expected) // 100).long(), return_inverse=True)[1]
    obs = torch.zeros(int(cell.max()) + 1, dtype=torch.float64).index_add_(0, cell, counts[ranked])
    exp = torch.zeros_like(obs).index_add_(0, cell, expected)
    chi2, dof = float(((obs - exp) ** 2 / exp).sum()), len(obs) - 1
    assert len(keep) > 1 and chi2 < dof + 6 * (2 * dof) ** 0.5, (chi2, dof)


def test_cpu_gemms_equal_f_linear_and_repack_changed_weights(tmp_path):
    """oneDNN's packed GEMM (the private ops, torch 2.13) against F.linear; a weight changed in place is packed
    again; outside the block the modules are plain again (nanogrpo/checks needs the trainer's kernels)."""
    from nanogrpo.torch_sampler import cpu_gemms

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 320), torch.nn.Linear(320, 256, bias=False), torch.nn.Linear(256, 8))
    for rows in (1, 7, 64, 300):
        x = torch.randn(rows, 256)
        with torch.inference_mode():
            want = model(x)
            with cpu_gemms(model, True):
                assert "forward" in vars(model[0])
                got = model(x)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert "forward" not in vars(model[0]) and "forward" not in vars(model[1])
    with cpu_gemms(model, True):  # a linear under ONEDNN_MIN_WEIGHT keeps F.linear (MKL): a oneDNN call costs more
        assert "forward" not in vars(model[2])
    with torch.no_grad():
        model[1].weight.mul_(2.0)  # as sync_weights' copy_ does: the version counter moves
    with torch.inference_mode(), cpu_gemms(model, True):
        torch.testing.assert_close(model(x), model[2](torch.nn.functional.linear(model[0](x), model[1].weight)))
    s = TorchSampler(_arch_dir(tmp_path, "qwen2", hidden_size=256, intermediate_size=512, head_dim=64))
    seen = []
    s.generate([[5, 6, 7]], 2, SamplingParams(max_new_tokens=3),
               progress=lambda *a: seen.append("forward" in vars(s.model.model.layers[0].mlp.up_proj)))
    assert s.onednn and seen and all(seen) and "forward" not in vars(s.model.model.layers[0].mlp.up_proj)
