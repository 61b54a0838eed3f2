"""Tool-integrated rollouts (nanogrpo/tools.py): the loop, the sandbox sessions, the masked update,
sampler-vs-trainer log-probs over multi-turn rollouts, E2B at its boundary, train.py end to end."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers import attacks as A
from nanogrpo import grpo, rewards, tools
from nanogrpo.sampler import Completion, SamplingParams

ROOT = Path(__file__).resolve().parent.parent
TOOL_MODEL = str(ROOT / "models" / "tiny-multiply-tools")
FENCE = tools.ToolConfig()


def block(code: str) -> str:
    return f"```python\n{code}\n```\n"


class ScriptSampler:
    """A Sampler that writes scripted text: segment k of a rollout is script[k] (k = tool outputs already
    in its context). Stop strings and max_new_tokens are applied as the real samplers apply them: the
    segment ends at the token that completes a stop string. Ending a segment with EOS_TEXT adds EOS."""

    EOS_TEXT = "<EOS>"

    def __init__(self, tokenizer, script, out_tag=FENCE.output_open):
        self.tokenizer, self.script, self.out_tag = tokenizer, script, out_tag
        self.eos_ids = {tokenizer.eos_token_id}
        self.calls = []  # (number of prompts, n) per generate call

    def generate(self, prompts, n, params, progress=None):
        self.calls.append((len(prompts), n))
        out = []
        for p in prompts:
            text = self.script[self.tokenizer.decode(p).count(self.out_tag)]
            eos = text.endswith(self.EOS_TEXT)
            ids = self.tokenizer.encode(text.removesuffix(self.EOS_TEXT)) + ([self.tokenizer.eos_token_id] if eos else [])
            reason = "stop" if eos else "length"
            for j in range(1, len(ids) + 1):  # the first token at which a stop string is complete
                if any(s in self.tokenizer.decode(ids[:j]) for s in params.stop):
                    ids, reason = ids[:j], "stop"
                    break
            if len(ids) > params.max_new_tokens:
                ids, reason = ids[: params.max_new_tokens], "length"
            out.append([Completion(ids, [-0.5] * len(ids), self.tokenizer.decode(ids), reason) for _ in range(n)])
            if progress is not None:  # as a sampler does: its n segments finished, their tokens generated
                progress(n, n * len(ids))
        return out

    def sync_weights(self, w):
        pass

    def sleep(self):
        pass

    def wake(self):
        pass

    def close(self):
        pass


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TOOL_MODEL)


@pytest.fixture(scope="module")
def local_cells():
    return lambda cfg: tools.make_cells(cfg, "local", 2)


def run_script(tokenizer, cells_for, script, budget=400, **cfg_kw):
    cfg = tools.ToolConfig(**{"timeout_s": 2.0, **cfg_kw})
    sampler = tools.ToolSampler(ScriptSampler(tokenizer, script, cfg.output_open), cfg, cells_for(cfg))
    [[c]] = sampler.generate([tokenizer.encode("Q:")], 1, SamplingParams(budget, 1.0, seed=0))
    return c, sampler


def inserted_texts(tokenizer, c):
    """The tool-output spans of a completion (mask 0 runs), decoded."""
    spans, cur = [], []
    for t, m in zip(c.token_ids, c.mask):
        if m == 0:
            cur.append(t)
        elif cur:
            spans.append(cur)
            cur = []
    return [tokenizer.decode(s) for s in spans + ([cur] if cur else [])]


# ---- the loop ----


def test_stop_string_rule():
    assert tools.ToolConfig().stop == "```\n"  # the fence's closing tag is in its opening: a line of its own
    assert tools.ToolConfig(open="<code>", close="</code>").stop == "</code>"


def test_state_persists_across_calls_and_tool_tokens_are_masked(tokenizer, local_cells):
    c, sampler = run_script(tokenizer, local_cells, [block("x = 6 * 7\nprint(x)"), block("x + 1"), "so 43<EOS>"])
    assert c.calls == 2 and c.errors == 0 and not c.failed
    outs = inserted_texts(tokenizer, c)
    assert outs == [FENCE.output_open + "42" + FENCE.output_close, FENCE.output_open + "43" + FENCE.output_close]
    assert c.final_text == "so 43"
    assert c.text == block("x = 6 * 7\nprint(x)") + outs[0] + block("x + 1") + outs[1] + "so 43"
    assert len(c.mask) == len(c.token_ids) == len(c.logprobs)
    assert all(lp == 0.0 for lp, m in zip(c.logprobs, c.mask) if m == 0)  # no sampler log-prob for tool tokens
    assert all(lp == -0.5 for lp, m in zip(c.logprobs, c.mask) if m == 1)
    assert c.token_ids[-1] == tokenizer.eos_token_id and c.finish_reason == "stop"
    assert sampler.last_stats["tool_rounds"] == 2 and sampler.last_stats["sandbox_seconds"] > 0


def test_progress_counts_every_inner_token_and_a_sample_when_its_rollout_ends(tokenizer, local_cells):
    """ToolSampler's progress hook: the tokens of every segment the model wrote (tool output is not generated),
    and each sample once, when its whole rollout ends (a segment that stopped at a code block is not a sample)."""
    cfg = tools.ToolConfig(timeout_s=2.0)
    script = [block("print(6 * 7)"), "so 42<EOS>"]
    sampler = tools.ToolSampler(ScriptSampler(tokenizer, script, cfg.output_open), cfg, local_cells(cfg))
    seen = []
    outs = sampler.generate([tokenizer.encode("Q:"), tokenizer.encode("R:")], 2, SamplingParams(400, 1.0, seed=0),
                            progress=lambda samples, tokens: seen.append((samples, tokens)))
    done = [c for group in outs for c in group]
    assert all(c.calls == 1 and c.finish_reason == "stop" for c in done)
    assert sum(t for _, t in seen) == sum(sum(c.mask) for c in done)  # every model token, no tool token
    assert sum(s for s, _ in seen) == 4
    first_round = len(tokenizer.encode(script[0]))  # the segments that stopped at the block: tokens, no sample
    assert seen[:2] == [(0, 2 * first_round)] * 2 and seen[-1][0] == 4


def test_output_is_truncated(tokenizer, local_cells):
    c, _ = run_script(tokenizer, local_cells, [block("print('ab' * 3000)"), "done<EOS>"], output_tokens=16)
    [out] = inserted_texts(tokenizer, c)
    assert tools.TRUNCATED in out
    body = out.removeprefix(FENCE.output_open).removesuffix(FENCE.output_close).removesuffix(tools.TRUNCATED)
    assert len(tokenizer.encode(body)) <= 16 and body.startswith("abab")


@pytest.mark.slow
def test_timeout_and_error_become_text_and_the_session_survives(tokenizer, local_cells):
    script = [block("y = 5"), block("while True:\n    pass"), block("1 / 0"), block("print(y * 2)"), "ok<EOS>"]
    c, _ = run_script(tokenizer, local_cells, script, timeout_s=1.0)
    outs = inserted_texts(tokenizer, c)
    assert c.calls == 4 and c.timeouts == 1 and c.errors == 1 and not c.failed
    assert "TimeoutError" in outs[1]
    assert "ZeroDivisionError: division by zero" in outs[2] and "<cell 3>" in outs[2]  # the model's own frame only
    assert "_replay.py" not in outs[2]
    assert outs[3] == FENCE.output_open + "10" + FENCE.output_close  # y survived; the loop was not replayed


@pytest.mark.slow
def test_each_cell_is_stopped_at_its_wall_clock_limit(tokenizer, local_cells):
    """tool_timeout_s = 1 and four cells that sleep 4.5 s: each is a timeout after 1 s, told to the model and
    counted (with only a CPU limit: 45 s, and no timeout)."""
    t = time.monotonic()
    c, sampler = run_script(tokenizer, local_cells, [block("import time\ntime.sleep(4.5)")] * 4 + ["ok<EOS>"],
                            budget=1000, timeout_s=1.0)
    took = time.monotonic() - t
    assert c.calls == 4 and c.timeouts == 4 and not c.failed
    assert all("TimeoutError" in out for out in inserted_texts(tokenizer, c))
    assert tools.metrics([tools.rollout_stats(c)], [sampler.last_stats])["tool_timeout_rate"] == 1.0
    assert took < 20, took


@pytest.mark.slow
def test_a_cell_queuing_its_own_processes_before_the_deadline_is_a_timeout_not_a_failed_rollout(tokenizer, local_cells):
    """A cell that ignores SIGALRM and runs 55 processes on one CPU just before each of the session's wall
    deadlines: their waits read as load (stretched up to 4 times, then None: the rollout failed)."""
    from nanogrpo.sandbox.cells import ReplayCells

    wall = ReplayCells(tools.ToolConfig(timeout_s=1.0), None)._spec([("<cell 1>", "")], 1).limits.wall_s
    t = time.monotonic()
    c, _ = run_script(tokenizer, local_cells, [block(A.spin_before_deadlines(wall)), "ok<EOS>"], budget=2000,
                      timeout_s=1.0)
    assert not c.failed and c.timeouts == 1
    assert time.monotonic() - t < 15  # a timeout at the first deadline (4 s), not stretched (40 s, or None)


# cells that keep their own SIGALRM from stopping them (the replay's wall clock per cell): the runner ends them
DODGES = {
    "ignores SIGALRM": "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n",
    "blocks SIGALRM": "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])\n",
    "handles SIGALRM": "import signal\nsignal.signal(signal.SIGALRM, lambda *a: None)\n",
    "cancels its timer": "import signal\nsignal.setitimer(signal.ITIMER_REAL, 0)\n",
}


class TimedCells:
    """The cells of a session, each call's result and the host's clock when it came back."""

    def __init__(self, inner):
        self.inner, self.got = inner, []

    def run(self, calls):
        out = self.inner.run(calls)
        self.got.append((time.monotonic(), out))
        return out

    def pop_stats(self):
        return self.inner.pop_stats()


@pytest.mark.slow
@pytest.mark.parametrize("dodge", list(DODGES))
@pytest.mark.parametrize("then", ["busy", "sleep"])
def test_a_cell_that_dodges_its_sigalrm_is_ended_by_the_runner_and_the_session_goes_on(tokenizer, local_cells,
                                                                                          dodge, then):
    """Ended within tool_timeout_s + 1 s of its start (it prints the time it started, on the host's monotonic
    clock), where it used to run to the runner's backstop (2 x CPU + 2 s: 6 s here); the model reads the same
    timeout as for a cell that stops at its SIGALRM, and the next cell runs in a fresh interpreter with the
    earlier cells replayed: x is there, what the ended cell defined is not."""
    loop = "while True:\n    pass" if then == "busy" else "time.sleep(60)"
    code = DODGES[dodge] + "import time\ny = 1\nprint(time.monotonic(), flush=True)\n" + loop
    timeout = 1.0
    cfg = tools.ToolConfig(timeout_s=timeout)
    cells = TimedCells(local_cells(cfg))
    script = [block("x = 41"), block(code), block("print(x + 1, 'y' in globals())"), "done<EOS>"]
    sampler = tools.ToolSampler(ScriptSampler(tokenizer, script, cfg.output_open), cfg, cells)
    [[c]] = sampler.generate([tokenizer.encode("Q:")], 1, SamplingParams(400, 1.0, seed=0))
    outs = inserted_texts(tokenizer, c)
    assert c.calls == 3 and c.timeouts == 1 and not c.failed and c.final_text == "done", outs
    assert tools.TIMEOUT.format(timeout) in outs[1], outs[1]
    assert outs[2] == FENCE.output_open + "42 False" + FENCE.output_close, outs[2]
    (ended, [res]) = cells.got[1]
    started = float(res.output.split()[0])
    assert ended - started < timeout + 1.0, ended - started  # the cell's own wall time, ended by the parent
    assert res.status == "timeout" and res.seconds < timeout + 1.5, res  # the call: interpreter, replay, cell


@pytest.mark.slow
def test_a_cell_that_forges_the_replays_cell_lines_gets_at_most_one_step_per_cell(local_cells):
    """The runner counts only the first `steps` "cell i" lines, as many as the call has cells, and the replay writes
    them all by the last cell's start: a last cell that writes more of them to the replay's marker fd, with its
    SIGALRM ignored, gains no time (at most, forged lines of earlier cells would give cells x (timeout + grace))."""
    from nanogrpo.sandbox import cells as C

    forge = ("import os, signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
             "while True:\n    os.write(3, b'%s cell 0\\n')\n    time.sleep(0.2)" % C.MARK)
    cfg = tools.ToolConfig(timeout_s=1.0)
    cells = local_cells(cfg)
    t = time.monotonic()
    [res] = cells.run([(7, [("<cell 1>", "a = 1"), ("<cell 2>", "b = 2")], ("<cell 3>", forge))])
    took = time.monotonic() - t
    assert res.status == "timeout"
    assert took < 1.0 + C.STEP_GRACE_S + 1.0, took  # not the 2 x 3 + 2 = 8 s backstop, nor one step per line


def test_unclosed_block_is_plain_text(tokenizer, local_cells):
    c, _ = run_script(tokenizer, local_cells, ["```python\nprint(1)\n<EOS>"])
    assert c.calls == 0 and all(c.mask) and c.text == "```python\nprint(1)\n" and c.final_text == c.text


def test_closing_tag_without_block_is_plain_text_and_generation_goes_on(tokenizer, local_cells):
    c, sampler = run_script(tokenizer, local_cells, ["see ```\nthen <EOS>"])
    assert c.calls == 0 and all(c.mask)
    assert c.text.startswith("see ```\n")  # stopped at the tag, was not run, and the rollout continued


def test_call_limit_and_whole_rollout_budget(tokenizer, local_cells):
    c, _ = run_script(tokenizer, local_cells, [block("print(1)"), block("print(2)"), "never<EOS>"], max_calls=1)
    assert c.calls == 1 and c.finish_reason == "stop" and "never" not in c.text  # the second block ended it, unrun
    c, _ = run_script(tokenizer, local_cells, [block("print(1)"), "9" * 200 + "<EOS>"], budget=40)
    assert len(c.token_ids) == 40 and c.finish_reason == "length" and c.calls == 1


def test_tools_file_is_loaded_and_described(tokenizer, local_cells, tmp_path):
    src = 'def double(x: int) -> int:\n    """Twice x."""\n    return 2 * x\n\ndef _private():\n    pass\n'
    c, _ = run_script(tokenizer, local_cells, [block("print(double(21))"), "<EOS>"], tools_source=src)
    assert inserted_texts(tokenizer, c)[0] == FENCE.output_open + "42" + FENCE.output_close
    assert tools.describe_tools(src) == "- double(x: int): Twice x."
    assert "double(x: int)" in tools.system_prompt(tools.ToolConfig(tools_source=src))


# ---- sessions show the model exactly what happened (the cases live in tests/helpers/attacks.py) ----


@pytest.mark.slow
def test_replays_of_a_session_show_the_set_order_the_model_saw(tokenizer, local_cells):
    """A session has one PYTHONHASHSEED: its calls print a set of strings in one order on every slot (the
    pool has 2), so a replay computes what the model was shown."""
    cfg = tools.ToolConfig(timeout_s=2.0)
    cells = local_cells(cfg)
    outs = [r.output for r in cells.run([(7, [], ("<cell 1>", A.SET_ORDER))] * 8)]  # one session, both slots
    assert len(set(outs)) == 1 and "apple" in outs[0]
    script = [block(A.SET_ORDER), block("print(list(s))"), block("print(list(s))"), "done<EOS>"]
    sampler = tools.ToolSampler(ScriptSampler(tokenizer, script, cfg.output_open), cfg, cells)
    for c in (c for g in sampler.generate([tokenizer.encode("Q:")], 4, SamplingParams(600, 1.0, seed=0)) for c in g):
        shown = inserted_texts(tokenizer, c)
        assert c.calls == 3 and len(set(shown)) == 1, shown  # each call re-ran the set: the same text


EXIT_SHOWN = {"os._exit(0)": "exited with code 0", "os._exit(3)": "exited with code 3",
              "SIGKILL itself": "was killed by SIGKILL"}


@pytest.mark.parametrize("how", list(EXIT_SHOWN))
def test_a_cell_that_ends_its_interpreter_is_reported_and_the_session_restarts(tokenizer, local_cells, how):
    script = [block("x = 41\nprint('before')"), block(A.EXIT_CELLS[how]), block("print('after', 'x' in globals())"),
              "done<EOS>"]
    c, _ = run_script(tokenizer, local_cells, script)
    outs = inserted_texts(tokenizer, c)
    assert c.calls == 3 and not c.failed and c.errors == 1 and c.final_text == "done"
    assert outs[1].startswith(FENCE.output_open + "bye\n[the interpreter " + EXIT_SHOWN[how]), outs[1]
    assert "the session was restarted" in outs[1]
    assert outs[2] == FENCE.output_open + "after False" + FENCE.output_close  # runs, in the restarted session


def test_tool_output_never_becomes_special_tokens(tokenizer, local_cells):
    c, _ = run_script(tokenizer, local_cells, [block(A.SPECIAL_TOKENS), "done<EOS>"])
    fed_back = [t for t, m in zip(c.token_ids, c.mask) if m == 0]
    assert set(tokenizer.all_special_ids) == {0, 1} and not set(fed_back) & set(tokenizer.all_special_ids)
    assert inserted_texts(tokenizer, c) == [FENCE.output_open + "a<|endoftext|>b<|pad|>c<|im_end|>d" + FENCE.output_close]
    assert c.calls == 1 and c.final_text == "done" and c.finish_reason == "stop"


def test_added_markers_in_tool_output_are_plain_text_and_the_tags_stay_as_configured():
    """An added token that is not special (Qwen's <tool_call>) is still matched with split_special_tokens:
    it is spelled out. An added run of spaces is ordinary text and stays. Tags with control tokens keep them."""
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TOOL_MODEL)
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False), AddedToken("    ", normalized=False)])
    marker, spaces = tok.convert_tokens_to_ids(["<tool_call>", "    "])
    plain = tools.ToolTokens(tok, tools.ToolConfig())
    text = "x <tool_call> y <|endoftext|>    z"
    ids = plain.plain(text)
    assert {marker, 0, 1}.isdisjoint(ids) and spaces in ids and tok.decode(ids) == text
    cfg = tools.ToolConfig(output_open="<tool_call>\n", output_close="\n<|endoftext|>")
    ids = tools.ToolTokens(tok, cfg).block("a <tool_call> b\n")
    assert ids.count(marker) == 1 and ids[0] == marker and ids[-1] == 0 and ids.count(0) == 1
    assert tok.decode(ids) == "<tool_call>\na <tool_call> b\n<|endoftext|>"


@pytest.mark.parametrize("case", A.TOOL_CASES, ids=[c.name for c in A.TOOL_CASES])
def test_tool_red_team_cases_are_shown_as_they_happened(tokenizer, local_cells, case):
    got = case.run(local_cells(tools.ToolConfig(timeout_s=2.0)), tokenizer)
    assert not case.escaped(got), got


class FailingCells:
    def run(self, calls):
        return [None for _ in calls]

    def pop_stats(self):
        return {}


def test_sandbox_failure_gives_a_none_reward_never_zero(tokenizer):
    from nanogrpo import config as C
    from nanogrpo import rollout

    cfg = tools.ToolConfig()
    sampler = tools.ToolSampler(ScriptSampler(tokenizer, [block("print(4)"), "4<EOS>"]), cfg, FailingCells())
    [[c]] = sampler.generate([tokenizer.encode("2+2=")], 1, SamplingParams(100, 1.0))
    assert c.failed and c.calls == 1
    ok = Completion([1], [0.0], "4", "stop", mask=[1], final_text="4")
    cfg = C.Config(tools=True)
    total, parts, correct = rollout.score_rollouts([c, ok], [{"answer": "4"}] * 2, rollout.run_scoring(cfg), cfg)
    assert total == [None, 1.0] and correct == [None, 1.0]


# ---- the update: tool tokens are context only ----


@pytest.mark.slow
@pytest.mark.parametrize("packed", [0, 64])
def test_update_equals_tool_output_as_context_only(tiny_model_dir, packed):
    """A rollout [m1 m2 | t1 t2 t3 | m3 m4] (t = tool output, mask 0) must give exactly the update of two
    rollouts whose completions are [m1 m2] and [m3 m4], the second with [m1 m2 t1 t2 t3] in its prompt."""
    from helpers import update_check

    from nanogrpo import dist
    from nanogrpo import model as M

    dist.init("cpu")
    cfg = update_check.config(micro_batch_tokens=packed, mask_truncated=False, max_new_tokens=16)
    prompt, m12, t, m34 = [5, 9, 14], [20, 21], [30, 31, 32], [40, 41]
    masked = [grpo.Rollout(prompt, m12 + t + m34, [-1.0] * 7, 1.0, False, 0.7, [1, 1, 0, 0, 0, 1, 1]),
              grpo.Rollout([7, 8], [50, 51, 52], [-1.0] * 3, 0.0, False, -0.7)]
    split = [grpo.Rollout(prompt, m12, [-1.0] * 2, 1.0, False, 0.7),
             grpo.Rollout(prompt + m12 + t, m34, [-1.0] * 2, 1.0, False, 0.7),
             grpo.Rollout([7, 8], [50, 51, 52], [-1.0] * 3, 0.0, False, -0.7)]
    deltas, stats = [], []
    for rollouts in (masked, split):
        policy = M.make_policy(tiny_model_dir, torch.device("cpu"), torch.float32, 3, False)
        opt = torch.optim.SGD(policy.parameters(), lr=1.0)
        before = M.full_state_dict_cpu(policy)
        stats.append(grpo.step(policy, None, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0), rollouts, cfg, 1))
        after = M.full_state_dict_cpu(policy)
        deltas.append({k: after[k] - before[k] for k in before})
    assert stats[0]["train_tokens"] == stats[1]["train_tokens"] == 7
    assert grpo.normaliser(masked, "token", False) == grpo.normaliser(split, "token", False) == 7
    assert max(d.abs().max().item() for d in deltas[0].values()) > 1e-4  # the update is not trivially 0
    for k in deltas[0]:
        torch.testing.assert_close(deltas[0][k], deltas[1][k], rtol=0, atol=1e-6, msg=k)


# ---- sampler vs trainer log-probs over multi-turn rollouts ----


def multi_turn_rollouts(inner):
    """Real rollouts of the committed tool model through `inner` with the local sandbox (most call it)."""
    from nanogrpo import tasks

    cfg = tools.ToolConfig()
    sampler = tools.ToolSampler(inner, cfg, tools.make_cells(cfg, "local", 2))
    rows = tasks.load_rows("multiply", split="test", n=24)
    prompts = [inner.tokenizer.encode(r["problem"]) for r in rows]
    groups = sampler.generate(prompts, 4, SamplingParams(96, 1.0, seed=3))
    return [(p, c) for p, g in zip(prompts, groups) for c in g]


def assert_trainer_agrees(rollouts, tol):
    from nanogrpo import model as M

    model = M.load_model(TOOL_MODEL).eval()
    # rollouts with model tokens sampled after a tool output (the multi-turn case under test)
    called = [(p, c) for p, c in rollouts if c.calls > 0 and 1 in c.mask[c.mask.index(0) :]]
    assert len(called) >= 3, "the tool model should call the tool in some of 96 rollouts (about 14% at temperature 1)"
    worst = 0.0
    for p, c in called:
        ids = torch.tensor([p + c.token_ids])
        with torch.no_grad():
            logp, _ = M.Policy(model)(ids, torch.ones_like(ids), temperature=1.0)
        trainer = logp[0, len(p) - 1 :]
        m = torch.tensor(c.mask, dtype=torch.bool)
        worst = max(worst, (trainer[m] - torch.tensor(c.logprobs)[m]).abs().max().item())
    assert worst < tol, worst


@pytest.mark.slow
def test_torch_sampler_logprobs_equal_trainer_over_tool_turns():
    from nanogrpo.torch_sampler import TorchSampler

    assert_trainer_agrees(multi_turn_rollouts(TorchSampler(TOOL_MODEL)), tol=1e-5)


@pytest.mark.slow
def test_vllm_sampler_logprobs_equal_trainer_over_tool_turns():
    pytest.importorskip("vllm")
    from nanogrpo.vllm_sampler import VLLMSampler

    sampler = VLLMSampler(TOOL_MODEL, "cpu", torch.float32, max_model_len=256, kv_cache_gb=0.05)
    try:
        assert_trainer_agrees(multi_turn_rollouts(sampler), tol=1e-4)
    finally:
        sampler.close()


# ---- train.py end to end ----


@pytest.mark.slow
def test_two_rank_tool_run(tmp_path):
    """train.py with tools = true under torchrun, 2 ranks: rollouts call the sandbox, the step trains, and
    the tool metrics are reduced over both ranks."""
    import json

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py",
           "configs/multiply_tools.toml", f"model={TOOL_MODEL}", f"out_dir={tmp_path}", "steps=2", "prompts_per_step=8", "group_size=8",
           "eval_every=2", "eval_size=8", "sandbox_concurrency=2", "skip_zero_advantage=false"]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = rows[1:]  # rows[0]: the held-out eval before training
    assert [m["step"] for m in rows] == [0, 1, 2] and "heldout_tool_use" in rows[0] and "heldout_tool_use" in rows[-1]
    assert all(m["tool_use_frac"] > 0 and m["train_tokens"] > 0 for m in steps)
    assert all(m["tool_failed_frac"] == 0 and m["sandbox_seconds"] > 0 for m in steps)


class CopySampler(ScriptSampler):
    """Writes the product's code for "a*b=", then copies the number in the tool output it was given; for
    prompts whose a is odd it adds 1 (a wrong answer). Deterministic: the exact pass@1 is known."""

    def __init__(self, tokenizer):
        super().__init__(tokenizer, [])

    def generate(self, prompts, n, params, progress=None):
        out = []
        for p in prompts:
            text = self.tokenizer.decode(p)
            a, b = (int(x) for x in text.split("=")[0].split("*"))
            if self.out_tag not in text:
                self.script = [block(f"print({a}*{b})")]
            else:
                shown = int(text.rsplit(self.out_tag, 1)[1].split("\n")[0])
                self.script = [f"{shown + a % 2}<EOS>"] * 2
            out.append(super().generate([p], n, params)[0])
        return out


@pytest.mark.slow
def test_eval_with_tools_scores_the_answer_after_the_last_output(tmp_path, tokenizer):
    """evaluate() (eval.py --tools) runs the tool loop and scores the text after the last tool output:
    with a sampler that copies the output right for even a and wrong for odd a, pass@1 is exactly the
    share of even a. The real tool model through the same path: pass@1 and tool use equal what its
    saved samples say."""
    import json

    from nanogrpo import tasks
    from nanogrpo.tasks.benchmarks import Task
    from nanogrpo.evaluate import evaluate

    rows = tasks.load_rows("multiply", split="test", n=24)
    task = Task("multiply", rewards.math, rows, 2, lambda r: r["problem"])
    cfg = tools.ToolConfig()
    scripted = tools.ToolSampler(CopySampler(tokenizer), cfg, tools.make_cells(cfg, "local", 2))
    res = evaluate(TOOL_MODEL, [task], sampler=scripted, temperature=1.0, top_p=1.0, max_new_tokens=96)
    even = sum(int(r["problem"].split("*")[0]) % 2 == 0 for r in rows) / len(rows)
    assert 0 < even < 1 and res["tasks"]["multiply"]["metrics"]["pass@1:n=2"] == pytest.approx(even)
    assert res["tasks"]["multiply"]["tool_use"] == 1.0

    res = evaluate(TOOL_MODEL, [task], sampler_kind="torch", device="cpu", temperature=1.0, top_p=1.0, max_new_tokens=96,
                   out=str(tmp_path / "r.json"), tool_cfg=cfg)
    samples = [json.loads(x) for x in (tmp_path / "r.samples.jsonl").read_text().splitlines()]
    assert len(samples) == 48 and any(s["tool_calls"] for s in samples)
    t = res["tasks"]["multiply"]
    assert t["tool_use"] == sum(s["tool_calls"] > 0 for s in samples) / 48
    final = [s["completion"].rsplit(FENCE.output_close, 1)[-1] if s["tool_calls"] else s["completion"] for s in samples]
    assert t["metrics"]["pass@1:n=2"] == pytest.approx(sum(f.strip() == s["answer"] for f, s in zip(final, samples)) / 48)


# The test's own sweep (docs/results.md "With tools", "The tools test's bound"; 2026-11-27: `scripts/bench/bench_tools.py
# --seeds 1 --grpo-seeds 4 --steps 30 --jobs 2 lr_schedule=constant`, the committed warm start): by step 15 (the
# half-way eval) the held-out accuracy gained +86.5 to +91.0 points and the held-out tool use +86 to +91.5 over the
# 4 GRPO seeds (from 5.5% and 6%). The test asks for half the least of either; without tools no run answered a
# held-out product right at step 15 or 30 (NO_TOOLS_MAX_SEEN), and the test allows 2 points.
GAIN_15_MIN = 0.86
NO_TOOLS_MAX_SEEN = 0.0


@pytest.mark.slow
def test_grpo_learns_to_use_the_tool_and_not_without_it(tmp_path):
    import train

    # the sweep's recipe at a constant lr to its half-way eval (the earlier 50-step version took 9 min in CI)
    base = [str(ROOT / "configs" / "multiply_tools.toml"), f"model={TOOL_MODEL}", "steps=15", "eval_every=15",
            "lr_schedule=constant", "save_final=false"]
    res = train.main([*base, f"out_dir={tmp_path / 'tools'}"])
    assert res["heldout_accuracy_end"] > res["heldout_accuracy_start"] + GAIN_15_MIN / 2, res
    assert res["heldout_tool_use_end"] > res["heldout_tool_use_start"] + GAIN_15_MIN / 2, res
    plain = train.main([*base, "tools=false", f"out_dir={tmp_path / 'plain'}"])
    assert plain["heldout_accuracy_end"] <= max(2 * NO_TOOLS_MAX_SEEN, 0.02), plain


@pytest.mark.slow
def test_the_committed_tool_model_copies_a_tool_output_of_either_length():
    """Fed the tool's real output, the warm start copies 9- and 10-digit products alike. The earlier one
    copied by position: 0 of 30 held-out 9-digit products, so GRPO's runs all ended at the 10-digit share."""
    from probe_tool_copy import probe

    by_len, wrong = probe(TOOL_MODEL)
    assert by_len[9][1] == 30 and by_len[10][1] == 170
    assert by_len[9][0] >= 28 and by_len[10][0] >= 165, (by_len, wrong)  # measured: 30 / 30, 170 / 170


@pytest.mark.slow
def test_probe_tool_copy_names_a_bad_model_directory_before_probing_any(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench" / "probe_tool_copy.py"), TOOL_MODEL, str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no config.json" in r.stderr, r.stderr
    assert TOOL_MODEL not in r.stdout  # the good directory was not probed first


def test_warm_start_tool_rows_copy_9_and_10_digit_outputs_alike():
    """Half the tool transcripts copy a 9-digit output (15% of uniform products): a warm start that saw
    mostly 10-digit outputs copied by position and got no 9-digit product right, a ceiling GRPO cannot lift."""
    sys.path.insert(0, str(ROOT / "scripts" / "models"))
    from tool_rows import multiply_warm_start_rows

    rows = multiply_warm_start_rows(4000, 0, tool_frac=0.5, tool_cfg=FENCE)
    used = [r for r in rows if len(r["segments"]) == 3]
    nine = sum(len(r["segments"][2][0]) == 9 for r in used) / len(used)
    assert 0.4 < nine < 0.6, nine
    assert 0.45 < len(used) / len(rows) < 0.55
    direct = [r for r in rows if len(r["segments"]) == 1]
    assert 0.1 < sum(len(r["segments"][0][0]) == 9 for r in direct) / len(direct) < 0.2  # uniform products


def test_warm_start_rows_are_the_rollout_format_with_the_output_unscored(tokenizer):
    """The tool model's supervised rows show exactly what a rollout looks like (the same tags and output
    block the loop inserts), and sft.py scores the code and the answer, never the tool output."""
    import sft
    from nanogrpo import config as C
    sys.path.insert(0, str(ROOT / "scripts" / "models"))
    from tool_rows import multiply_warm_start_rows

    [row] = json.loads(json.dumps(multiply_warm_start_rows(1, 0, tool_frac=1.0, tool_cfg=FENCE)))  # as written to a file
    a, b = (int(x) for x in row["problem"][:-1].split("*"))
    ids, scored = sft.encode_row(row, tokenizer, C.Config(tools=True))
    output = tools.output_block(FENCE, f"{a * b}\n")
    assert tokenizer.decode(ids) == f"{a}*{b}=" + block(f"print({a}*{b})") + output + f"{a * b}<|endoftext|>"
    # the prompt is what a rollout starts from
    assert ids[: len(tokenizer.encode(row["problem"]))] == tokenizer.encode(row["problem"])
    kept = tokenizer.decode([t for t, s in zip(ids, scored) if s])
    assert kept == block(f"print({a}*{b})") + f"{a * b}<|endoftext|>"  # the output block is context only