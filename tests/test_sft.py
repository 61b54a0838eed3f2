"""sft.py against references: the assistant-token mask against a hand-built chat; the packed loss and
gradients against a naive padded HF forward with the same masked labels; 2 ranks against 1 process;
a resumed run against an uninterrupted one. The tiny model gets a small chat template of its own."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT))

import sft  # noqa: E402
from nanogrpo import config as C  # noqa: E402
from nanogrpo import data, dist  # noqa: E402
from nanogrpo.tasks.arithmetic import arithmetic_rows  # noqa: E402
from nanogrpo import model as M  # noqa: E402

# <|pad|> opens a turn, <|endoftext|> closes it (the tiny tokenizer's two special tokens)
TEMPLATE = ("{% for m in messages %}<|pad|>{{ m['role'] }}\n{{ m['content'] }}<|endoftext|>{% endfor %}"
            "{% if add_generation_prompt %}<|pad|>assistant\n{% endif %}")
CHAT = [{"role": "system", "content": "Add the numbers."}, {"role": "user", "content": "What is 12 plus 30?"},
        {"role": "assistant", "content": "The answer is 42."}, {"role": "user", "content": "And 1 plus 1?"},
        {"role": "assistant", "content": "2"}]


@pytest.fixture(scope="module")
def chat_model_dir(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_chat") / "m"
    shutil.copytree(tiny_model_dir, out)
    tok = M.load_tokenizer(str(out))
    tok.chat_template = TEMPLATE
    tok.save_pretrained(out)
    return str(out)


def rows():
    """Chat rows of 1-2 assistant turns, and problem + solution / answer rows (the chat template then applies)."""
    out = [{"messages": CHAT}]
    for a in range(3, 9):
        out.append({"messages": [{"role": "user", "content": f"What is {a} plus {a * 3}?"},
                                 {"role": "assistant", "content": f"It is {a * 4}."}]})
        out.append({"problem": f"{a * 11}+{a}=", "solution": f"{a * 11} plus {a} is {a * 12}."} if a % 2
                   else {"problem": f"{a}+{a}=", "answer": a + a})
    return out


def write_rows(path: Path, rs) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rs))
    return path


def test_only_assistant_tokens_are_scored_against_a_hand_built_chat(chat_model_dir):
    tok = M.load_tokenizer(chat_model_dir)
    want_ids, want_scored = [], []
    for m in CHAT:  # the chat written out by hand, piece by piece
        for piece, scored in (("<|pad|>", False), (m["role"] + "\n", False), (m["content"], m["role"] == "assistant"),
                              ("<|endoftext|>", m["role"] == "assistant")):
            ids = tok(piece, add_special_tokens=False)["input_ids"]
            want_ids += ids
            want_scored += [scored] * len(ids)
    ids, scored = sft.encode_chat(CHAT, tok)
    assert ids == want_ids and scored == want_scored
    runs = tok.decode([i for i, s in zip(ids, scored) if s])
    assert runs == "The answer is 42.<|endoftext|>2<|endoftext|>"
    # a problem row: the prompt train.py gives it (template chat), the solution as the assistant turn
    cfg = C.load(["template=chat", "sft_max_len=4096"])
    ids, scored = sft.encode_row({"problem": "1+1=", "solution": "Two."}, tok, cfg)
    assert tok.decode([i for i, s in zip(ids, scored) if s]) == "Two.<|endoftext|>"
    assert tok.decode(ids).startswith("<|pad|>user\n1+1=\n" + data.DEFAULT_MATH_INSTRUCTION)
    # raw (no chat template): the answer and EOS; and sft_max_len cuts
    for cap, taught in ((6, "2<|endoftext|>"), (5, "2")):  # "1+1=" is 4 tokens
        ids, scored = sft.encode_row({"problem": "1+1=", "answer": 2}, tok, C.load([f"sft_max_len={cap}"]))
        assert len(ids) == cap and tok.decode([i for i, s in zip(ids, scored) if s]) == taught


def test_bad_rows_are_named(tmp_path):
    cfg = C.load([f"task={write_rows(tmp_path / 'a.jsonl', [{'messages': [{'role': 'user', 'content': 'hi'}]}])}"])
    with pytest.raises(data.DataError, match=r"a.jsonl:1: 'messages' has no assistant turn"):
        sft.load_sft_rows(cfg)
    cfg = C.load([f"task={write_rows(tmp_path / 'b.jsonl', [{'problem': 'p', 'solution': 's'}, {'problem': 'q'}])}"])
    with pytest.raises(data.DataError, match=r"b.jsonl:2: an SFT row needs"):
        sft.load_sft_rows(cfg)
    for bad, why in (([["x", 1]], "pairs"), ([], "pairs"), ([["x", False]], "no scored piece")):
        cfg = C.load([f"task={write_rows(tmp_path / 'c.jsonl', [{'problem': 'p', 'segments': bad}])}"])
        with pytest.raises(data.DataError, match=rf"c.jsonl:1: 'segments' .*{why}"):
            sft.load_sft_rows(cfg)


def test_segment_rows_are_a_rollout_with_only_the_scored_pieces_scored(tiny_model_dir):
    """{"problem", "segments": [[text, scored], ...]}: the prompt train.py samples from, each piece's tokens,
    EOS; unscored pieces (a tool's output) are context only. Against ids built by hand."""
    tok = M.load_tokenizer(tiny_model_dir)
    row = {"problem": "12*3=", "segments": [["print(12*3)", True], ["36", False], ["36", True]]}
    ids, scored = sft.encode_row(row, tok, C.Config())
    pieces = [(tok("12*3=")["input_ids"], False)] + [(tok(t, add_special_tokens=False)["input_ids"], s)
                                                    for t, s in row["segments"]] + [([tok.eos_token_id], True)]
    assert ids == [t for p, _ in pieces for t in p]
    assert scored == [s for p, s in pieces for _ in p]
    # an answer row on the raw template is the same as one scored piece
    assert sft.encode_row({"problem": "12*3=", "answer": "36"}, tok, C.Config()) == sft.encode_row(
        {"problem": "12*3=", "segments": [["36", True]]}, tok, C.Config())


def naive_hf(model_dir, examples):
    """The reference: one right-padded batch, labels = the token where scored else -100, HF's own loss."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    T = max(len(ids) for ids, _ in examples)
    ids = torch.zeros((len(examples), T), dtype=torch.long)
    attn, labels = torch.zeros_like(ids), torch.full_like(ids, -100)
    for i, (seq, scored) in enumerate(examples):
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
        labels[i, : len(seq)] = torch.where(torch.tensor(scored), torch.tensor(seq), -100)
    loss = hf(input_ids=ids, attention_mask=attn, labels=labels).loss  # mean over every labelled token
    loss.backward()
    return loss.item(), {n: p.grad for n, p in hf.named_parameters()}


@pytest.mark.slow
@pytest.mark.parametrize("budget", [24, 64, 4096])  # many micro-batches, a few, one
def test_packed_loss_and_grads_equal_a_naive_padded_hf_forward(chat_model_dir, budget):
    dist.init("cpu")
    tok = M.load_tokenizer(chat_model_dir)
    cfg = C.load(["template=chat", f"micro_batch_tokens={budget}"])
    examples = [sft.encode_row(r, tok, cfg) for r in rows()]
    assert len(sft.make_batches(examples, budget)) > (3 if budget == 24 else 0)
    want_loss, want_grads = naive_hf(chat_model_dir, examples)
    policy = M.make_policy(chat_model_dir, torch.device("cpu"), torch.float32, 7, False)  # chunked lm_head too
    loss, z = sft.accumulate(policy, examples, cfg, tok.pad_token_id)
    assert z == sum(sum(s[1:]) for _, s in examples)
    assert loss == pytest.approx(want_loss, rel=1e-5)
    for name, p in policy.hf.named_parameters():
        got = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
        torch.testing.assert_close(got, want_grads[name], atol=2e-6, rtol=1e-4, msg=name)


def run_args(model_dir, task, out, *extra):
    return [f"model={model_dir}", f"task={task}", f"out_dir={out}", "template=chat", "prompts_per_step=4",
            "micro_batch_tokens=48", "lr=1e-3", "warmup_steps=1", "seed=3", "device=cpu", *extra]


def weights(out: Path) -> dict:
    ckpt = sorted((out / "checkpoints").glob("step_*"))[-1]
    return load_file(str(ckpt / "model.safetensors"))


def losses(out: Path) -> list[float]:
    return [json.loads(x)["sft_loss"] for x in (out / "metrics.jsonl").read_text().splitlines()]


def killed_copy(run: Path, out: Path) -> None:
    """`out`: `run` (4 steps, saved every 2) as if killed after step 3, its last complete checkpoint step 2's."""
    (out / "checkpoints").mkdir(parents=True)
    shutil.copytree(run / "checkpoints" / "step_000002", out / "checkpoints" / "step_000002")
    (out / "metrics.jsonl").write_text("".join((run / "metrics.jsonl").read_text().splitlines(True)[:3]))


@pytest.mark.slow
def test_resume_is_exact(chat_model_dir, tmp_path):
    task = write_rows(tmp_path / "rows.jsonl", rows())
    a, b = tmp_path / "a", tmp_path / "b"
    sft.main(run_args(chat_model_dir, task, a, "steps=4", "save_every=2"))
    killed_copy(a, b)
    sft.main(run_args(chat_model_dir, task, b, "steps=4", "save_every=2", "resume=true"))
    assert losses(tmp_path / "a") == losses(tmp_path / "b") and len(losses(tmp_path / "a")) == 4
    assert losses(tmp_path / "a")[-1] < losses(tmp_path / "a")[0]  # it learns
    wa, wb = weights(tmp_path / "a"), weights(tmp_path / "b")
    for name in wa:
        assert torch.equal(wa[name], wb[name]), name
    # the checkpoint is a Hugging Face model directory
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(sorted((tmp_path / "a" / "checkpoints").glob("step_*"))[-1])


@pytest.mark.slow
def test_two_ranks_equal_one_process(chat_model_dir, tmp_path):
    task = write_rows(tmp_path / "rows.jsonl", rows())
    args = lambda out: run_args(chat_model_dir, task, out, "steps=2")  # noqa: E731
    sft.main(args(tmp_path / "one"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          "sft.py", *args(tmp_path / "two")], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert losses(tmp_path / "two") == pytest.approx(losses(tmp_path / "one"), rel=1e-5)
    w1, w2 = weights(tmp_path / "one"), weights(tmp_path / "two")
    for name in w1:
        torch.testing.assert_close(w2[name], w1[name], atol=1e-5, rtol=0, msg=name)


@pytest.mark.slow
def test_lora_trains_only_the_adapters_saves_merged_weights_and_resumes_exactly(chat_model_dir, tmp_path):
    """lora_rank > 0: the base stays frozen to the bit, the checkpoint's HF weights are base + (alpha/r)·B A
    (from_pretrained loads them), the optimizer holds the adapters only, and a resumed run equals the
    uninterrupted one (weights, adapters, losses)."""
    from torch.distributed.checkpoint import FileSystemReader
    from transformers import AutoModelForCausalLM

    from nanogrpo import lora

    rank, alpha = 4, 8.0
    task = write_rows(tmp_path / "rows.jsonl", rows())
    a, b = tmp_path / "a", tmp_path / "b"
    args = ["steps=4", "save_every=2", "keep_checkpoints=5", f"lora_rank={rank}", f"lora_alpha={alpha}", "lr=1e-2"]
    sft.main(run_args(chat_model_dir, task, a, *args))
    killed_copy(a, b)
    sft.main(run_args(chat_model_dir, task, b, *args, "resume=true"))
    assert losses(a) == losses(b) and len(losses(a)) == 4
    assert losses(a)[-1] < losses(a)[0]  # the adapters learn
    ckpt_a, ckpt_b = a / "checkpoints" / "step_000004", b / "checkpoints" / "step_000004"
    for f in ("model.safetensors", lora.ADAPTERS_FILE):
        x, y = load_file(str(ckpt_a / f)), load_file(str(ckpt_b / f))
        assert set(x) == set(y) and all(torch.equal(x[k], y[k]) for k in x), f

    base = load_file(f"{chat_model_dir}/model.safetensors")
    merged, adapters = load_file(str(ckpt_a / "model.safetensors")), load_file(str(ckpt_a / lora.ADAPTERS_FILE))
    layers = M.load_model(chat_model_dir).config.num_hidden_layers
    assert len(adapters) == 2 * 7 * layers  # A and B on every default target of every layer
    assert set(merged) == set(base)  # the plain HF names: the adapters are folded in, not saved beside
    for name, w in merged.items():
        layer = name.removesuffix(".weight")
        if f"{layer}.lora_A" in adapters:
            delta = (alpha / rank) * adapters[f"{layer}.lora_B"] @ adapters[f"{layer}.lora_A"]
            assert delta.abs().max() > 0, name
            torch.testing.assert_close(w, base[name] + delta, rtol=0, atol=1e-6, msg=name)
        else:
            assert torch.equal(w, base[name]), name  # frozen: embeddings, norms, biases did not move
    hf = AutoModelForCausalLM.from_pretrained(ckpt_a, dtype=torch.float32)
    for name, p in hf.named_parameters():
        assert torch.equal(p.detach(), merged[name]), name
    keys = FileSystemReader(str(ckpt_a / "optim")).read_metadata().state_dict_metadata
    state = [k for k in keys if k.startswith("optim.state.")]
    assert state and all(".lora_A." in k or ".lora_B." in k for k in state), state[:3]


def sums_file(path: Path, n: int, seed: int) -> Path:
    return write_rows(path, arithmetic_rows("train", n, seed=seed))


def metric_lines(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_in_run_eval_equals_train_py_and_the_stop_ends_the_run_at_the_first_eval_that_reaches_it(warm_model_dir, tmp_path):
    """eval_every measures held-out accuracy through train.py's path: at step 0 the two give the same
    number. sft_stop_accuracy ends the run after the first eval that reaches it (and saves it there); a
    run whose evals never reach it runs every step."""
    import train

    task = sums_file(tmp_path / "sums.jsonl", 64, seed=5)
    common = [f"model={warm_model_dir}", f"task={task}", "eval_task=arithmetic", "eval_size=64", "eval_every=1",
              "prompts_per_step=16", "lr=3e-4", "warmup_steps=1", "seed=2", "device=cpu", "log_every=1"]
    full = sft.main([*common, "steps=5", f"out_dir={tmp_path / 'full'}", "sft_stop_accuracy=1.0"])
    lines = metric_lines(tmp_path / "full")
    start, accs = lines[0]["heldout_accuracy"], [x["heldout_accuracy"] for x in lines[1:]]
    assert full["steps_run"] == 5 and len(accs) == 5 and len(set(accs)) > 1, accs  # the evals see the model change
    grpo = train.main([f"model={warm_model_dir}", "task=arithmetic", "eval_size=64", "eval_every=1", "steps=1",
                       "seed=2", "device=cpu", "prompts_per_step=2", "group_size=2", "save_final=false",
                       f"out_dir={tmp_path / 'grpo'}"])
    assert grpo["heldout_accuracy_start"] == start

    target = max(accs)  # reached first at step k: the run stops there
    k = accs.index(target) + 1
    stopped = sft.main([*common, "steps=5", f"out_dir={tmp_path / 'stop'}", f"sft_stop_accuracy={target}"])
    assert stopped["steps_run"] == k and stopped["heldout_accuracy"] == target
    assert [x["heldout_accuracy"] for x in metric_lines(tmp_path / "stop")[1:]] == accs[:k]
    assert [p.name for p in (tmp_path / "stop" / "checkpoints").glob("step_*")] == [f"step_{k:06d}"]


def test_stop_accuracy_needs_an_eval(tmp_path):
    with pytest.raises(C.ConfigError, match="sft_stop_accuracy"):
        sft.main([f"task={sums_file(tmp_path / 's.jsonl', 4, 0)}", "sft_stop_accuracy=0.5",
                  f"out_dir={tmp_path / 'o'}", "device=cpu"])
