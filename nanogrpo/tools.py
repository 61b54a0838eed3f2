"""Tool-integrated rollouts: the model writes code mid-answer, the code runs in a sandbox, its output
goes back into the context, and generation continues (ToRL; TRL discussion #2880's E2B agent).

`ToolSampler(sampler, ToolConfig, cells)` wraps either sampler behind the same `Sampler` protocol, so train.py,
the held-out eval and eval.py use it unchanged. One `generate` call: generate with the closing tag as a stop
string; run every closed block of the round at once in the sandbox and append its output (cut to
`tool_output_tokens`, masked from the loss); continue every unfinished rollout in one `generate` call; repeat.
How a rollout ends, the tags, sessions (replay through nanogrpo/sandbox/cells.py), the training mask, a sandbox
failure (`failed`: reward None, never 0) and `tools_file`: docs/tools.md.
"""

from __future__ import annotations

import ast
import logging
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from nanogrpo.sampler import Completion, Progress, SamplingParams, decode
from nanogrpo.sandbox.cells import CellResult

log = logging.getLogger(__name__)


@dataclass
class ToolConfig:
    open: str = "```python"
    close: str = "```"
    output_open: str = "```output\n"
    output_close: str = "\n```\n"
    max_calls: int = 4
    output_tokens: int = 256  # tool output longer than this is cut (the marker below says so)
    timeout_s: float = 5.0  # per cell, wall clock (nanogrpo/sandbox/cells.py)
    tools_source: str = ""  # the tools file's text, run before the first cell of every session

    @classmethod
    def from_config(cls, cfg) -> "ToolConfig":
        src = Path(cfg.tools_file).read_text() if cfg.tools_file else ""
        return cls(cfg.tool_open, cfg.tool_close, cfg.tool_output_open, cfg.tool_output_close, cfg.max_tool_calls,
                   cfg.tool_output_tokens, cfg.tool_timeout_s, src)

    @property
    def stop(self) -> str:
        """The stop string that closes a block (see the module docstring for the fence rule)."""
        return self.close + "\n" if self.close in self.open else self.close

    @property
    def output_chars(self) -> int:
        """The most characters of a cell's output that are tokenized (cut cheaply first: a token is taken to
        span at most 8 characters); backends keep one more, so that a longer output is marked as cut."""
        return 8 * self.output_tokens + 8


def output_block(tool_cfg: ToolConfig, output: str) -> str:
    """The text inserted after a call: the output without its trailing newlines, between the output tags."""
    return tool_cfg.output_open + output.rstrip("\n") + tool_cfg.output_close


TRUNCATED = "\n[... output truncated]"
TIMEOUT = "TimeoutError: the cell ran longer than {:g} s and was stopped"


def session_after(cells: list[tuple[str, str]], cell: tuple[str, str], res: CellResult) -> list[tuple[str, str]]:
    """The cells a session replays after this call. A timed-out cell is left out (replaying it would time out
    every later call); a cell that ended its interpreter restarts the session, as a notebook kernel restarts:
    what earlier cells defined is gone (the tools file is always run first)."""
    if res.status == "exited":
        return []
    return cells if res.status == "timeout" else cells + [cell]


class ToolTokens:
    """Token ids of what goes back to the model. Text from the sandbox is plain text, never a control token,
    whatever it says (a program can print '<|endoftext|>' or '<|im_end|>'): special tokens are split
    (`split_special_tokens`), and an added marker the tokenizer still matches (Qwen's '<tool_call>',
    '<|fim_prefix|>': added, not special) or a tokenizer that ignores the flag has such text spelled out
    one character at a time. The output tags are the user's: tokenized as configured."""

    def __init__(self, tokenizer, tool_cfg: ToolConfig):
        self.tokenizer, self.cfg = tokenizer, tool_cfg
        added = {i: t.content for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()}
        # every special token, and every added one that is not whitespace (some tokenizers add space runs)
        self.control = set(tokenizer.all_special_ids) | {i for i, c in added.items() if c.strip()}
        words = {c for i, c in added.items() if i in self.control} | set(tokenizer.all_special_tokens)
        words = sorted((w for w in words if len(w) > 1), key=len, reverse=True)
        self._words = re.compile("|".join(map(re.escape, words))) if words else None
        tags = self._encode(tool_cfg.output_open) + self._encode(tool_cfg.output_close)
        self._plain_tags = self.control.isdisjoint(tags)

    def _encode(self, text: str, split: bool = False) -> list[int]:
        kw = {"split_special_tokens": True} if split else {}
        return self.tokenizer(text, add_special_tokens=False, **kw)["input_ids"] if text else []

    def plain(self, text: str) -> list[int]:
        ids = self._encode(text, split=True)
        if self.control.isdisjoint(ids) or self._words is None:
            return ids
        out, pos = [], 0
        for m in self._words.finditer(text):
            out += self._encode(text[pos : m.start()], split=True)
            out += [i for ch in m.group() for i in self._encode(ch, split=True)]
            pos = m.end()
        return out + self._encode(text[pos:], split=True)

    def block(self, output: str) -> list[int]:
        """The ids of output_block(output). With plain tags (the default fences) the block is one text,
        tokenized as the warm-start rows are; tags holding control tokens keep them."""
        if self._plain_tags:
            return self.plain(output_block(self.cfg, output))
        return self._encode(self.cfg.output_open) + self.plain(output.rstrip("\n")) + self._encode(self.cfg.output_close)


# ----------------------------------------------------------------------------------------------
# The rollout loop


@dataclass
class _Rollout:
    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)  # model tokens since the last tool output
    cells: list[tuple[str, str]] = field(default_factory=list)  # (name, code) to replay: those that did not time out
    reason: str = ""  # "" while running, then stop | length
    final_start: int = 0  # index in tokens where the text after the last tool output starts
    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    seconds: float = 0.0
    failed: bool = False
    calibration: tuple[float, float] | None = (0.0, 0.0)  # its segments' (Completion.calibration), cut tokens too: draws


class ToolSampler:
    """A Sampler whose rollouts run code mid-answer; see the module docstring."""

    def __init__(self, sampler, tool_cfg: ToolConfig, cells):
        self.sampler, self.cfg, self.cells = sampler, tool_cfg, cells
        self.tokenizer, self.eos_ids = sampler.tokenizer, sampler.eos_ids
        self.tokens = ToolTokens(self.tokenizer, tool_cfg)
        self.last_stats: dict[str, float] = {}

    # the weights and memory are the wrapped sampler's
    def sync_weights(self, weights) -> None:
        self.sampler.sync_weights(weights)

    def sleep(self) -> None:
        self.sampler.sleep()

    def wake(self) -> None:
        self.sampler.wake()

    def close(self) -> None:
        self.sampler.close()

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def generate(self, prompts: list[list[int]], n: int, params: SamplingParams,
                 progress: Progress | None = None) -> list[list[Completion]]:
        """`progress` gets the tokens of every inner generate call as they come, and a sample when its whole
        rollout ends (a segment that stops at a code block is not a finished sample)."""
        params.check()
        budget, user_stops = params.max_new_tokens, tuple(params.stop)
        sampling = replace(params, stop=user_stops + (self.cfg.stop,))
        inner = None if progress is None else (lambda _samples, tokens: progress(0, tokens))
        rolls = [_Rollout(list(p)) for p in prompts for _ in range(n)]
        segments = [c for group in self.sampler.generate(prompts, n, sampling, progress=inner) for c in group]
        running = list(range(len(rolls)))
        t_tools, rounds = 0.0, 0
        while running:
            calls = []  # (rollout index, code)
            for i, seg in zip(running, segments):
                code = self._take(rolls[i], seg, budget, user_stops)
                if code is not None:
                    calls.append((i, code))
            t0 = time.time()
            results = self.cells.run([(i, rolls[i].cells, (f"<cell {rolls[i].calls + 1}>", code)) for i, code in calls]) if calls else []
            t_tools += time.time() - t0
            for (i, code), res in zip(calls, results):
                self._insert(rolls[i], code, res, budget)
            ended = [i for i in running if rolls[i].reason]
            if progress is not None and ended:
                progress(len(ended), 0)
            running = [i for i in running if not rolls[i].reason]
            if not running:
                break
            rounds += 1
            longest = max(budget - len(rolls[i].tokens) for i in running)
            seed = None if params.seed is None else (params.seed + rounds * 1_000_003) % (2**31)
            step = replace(sampling, max_new_tokens=longest, seed=seed)
            contexts = [rolls[i].prompt + rolls[i].tokens for i in running]
            segments = [g[0] for g in self.sampler.generate(contexts, 1, step, progress=inner)]
        out = [self._completion(r) for r in rolls]
        self.last_stats = {"tool_rounds": rounds, "time_tools": t_tools, **self.cells.pop_stats()}
        return [out[k * n : (k + 1) * n] for k in range(len(prompts))]

    def _take(self, r: _Rollout, seg: Completion, budget: int, user_stops: tuple[str, ...]) -> str | None:
        """Append a generated segment to rollout r; returns the code to run, or None (r ended or goes on)."""
        ids, lps = seg.token_ids[: budget - len(r.tokens)], seg.logprobs[: budget - len(r.tokens)]
        r.tokens += ids
        r.logprobs += lps
        r.calibration = seg.calibration and r.calibration and tuple(map(sum, zip(r.calibration, seg.calibration)))
        r.mask += [1] * len(ids)
        r.pending += ids
        if ids and ids[-1] in self.eos_ids:
            r.reason = "stop"
            return None
        if len(ids) < len(seg.token_ids) or seg.finish_reason == "length" or len(r.tokens) >= budget:
            r.reason = "length"  # the whole rollout's budget is spent (a cut segment, or the round's cap)
            return None
        text = self._decode(r.pending)
        new = self._decode(ids)
        if any(s in new for s in user_stops):
            r.reason = "stop"
            return None
        end = text.rfind(self.cfg.stop)
        start = text.rfind(self.cfg.open, 0, end) if end >= 0 else -1
        if start < 0:  # a closing tag with no open block: plain text, generation goes on
            return None
        if r.calls >= self.cfg.max_calls:  # one block too many: not run, and the rollout ends here
            r.reason = "stop"
            return None
        code = text[start + len(self.cfg.open) : end]
        return code[1:] if code.startswith("\n") else code  # the fence's own line break: line 1 is the first code line

    def _insert(self, r: _Rollout, code: str, res: CellResult | None, budget: int) -> None:
        """Append a call's output (tool tokens: mask 0), or fail the rollout when the sandbox failed."""
        r.calls += 1
        if res is None:
            r.failed, r.reason = True, "stop"
            return
        r.seconds += res.seconds
        r.errors += res.status in ("error", "exited")
        r.timeouts += res.status == "timeout"
        r.cells = session_after(r.cells, (f"<cell {r.calls}>", code), res)
        output = self._cut(res.output)
        note = TIMEOUT.format(self.cfg.timeout_s) if res.status == "timeout" else res.note
        if note:  # after the cut: the model always reads how its cell ended
            output += ("\n" if output and not output.endswith("\n") else "") + note
        inserted = self.tokens.block(output)
        room = budget - len(r.tokens)
        if len(inserted) >= room:
            inserted, r.reason = inserted[:room], "length"
        r.tokens += inserted
        r.logprobs += [0.0] * len(inserted)
        r.mask += [0] * len(inserted)
        r.pending = []
        r.final_start = len(r.tokens)

    def _cut(self, output: str) -> str:
        """The output cut to `output_tokens`, with a marker when anything was left out."""
        head = output[: self.cfg.output_chars]
        ids = self.tokens.plain(head)
        if len(ids) > self.cfg.output_tokens or len(head) < len(output):
            return self._decode(ids[: self.cfg.output_tokens]) + TRUNCATED
        return output

    def _completion(self, r: _Rollout) -> Completion:
        text, final = decode(self.tokenizer, [r.tokens, r.tokens[r.final_start :]], self.eos_ids)
        return Completion(r.tokens, r.logprobs, text, r.reason or "stop", mask=r.mask, final_text=final, calls=r.calls,
                          errors=r.errors, timeouts=r.timeouts, tool_seconds=r.seconds, failed=r.failed,
                          calibration=r.calibration)


def rollout_stats(c: Completion) -> tuple:
    """What the step's tool metrics need from one rollout (small, to gather over ranks)."""
    return c.calls, c.errors, c.timeouts, c.failed, c.tool_seconds


def metrics(rollouts: list[tuple], per_rank: list[dict]) -> dict[str, float]:
    """A step's tool metrics: `rollouts` = rollout_stats of every rollout, `per_rank` = each rank's
    ToolSampler.last_stats (its sandbox-seconds and its wall time in tools)."""
    calls = [r[0] for r in rollouts]
    total, n = sum(calls), max(len(calls), 1)
    return {
        "tool_calls_mean": total / n,
        "tool_calls_max": max(calls, default=0),
        "tool_use_frac": sum(x > 0 for x in calls) / n,  # rollouts with at least one call
        "tool_error_rate": sum(r[1] for r in rollouts) / total if total else 0.0,  # per call
        "tool_timeout_rate": sum(r[2] for r in rollouts) / total if total else 0.0,
        "tool_failed_frac": sum(r[3] for r in rollouts) / n,  # sandbox failures: reward None
        "tool_exec_seconds": sum(r[4] for r in rollouts),  # the cells' own execution time
        "sandbox_seconds": sum(s.get("sandbox_seconds", 0.0) for s in per_rank),
        "time_tools": max((s.get("time_tools", 0.0) for s in per_rank), default=0.0),  # wall time of the step in tools
        "tool_rounds": max((s.get("tool_rounds", 0) for s in per_rank), default=0),
    }


# ----------------------------------------------------------------------------------------------
# The user's tools file, for the system prompt


def describe_tools(source: str) -> str:
    """One line per top-level function of a tools file: its signature and the first line of its docstring."""
    lines = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            doc = (ast.get_docstring(node) or "").strip().splitlines()
            lines.append(f"- {node.name}({ast.unparse(node.args)})" + (f": {doc[0]}" if doc else ""))
    return "\n".join(lines)


def system_prompt(tool_cfg: ToolConfig, base: str = "") -> str:
    """The instruction that tells a chat model how to call the tool (and which functions it has)."""
    text = (f"You can run Python code: write it between {tool_cfg.open} and {tool_cfg.close}. It runs in a "
            f"persistent session, and its output (stdout and stderr) is shown to you between "
            f"{tool_cfg.output_open.strip()} and {tool_cfg.output_close.strip()}. "
            f"You can run code up to {tool_cfg.max_calls} times.")
    funcs = describe_tools(tool_cfg.tools_source) if tool_cfg.tools_source else ""
    if funcs:
        text += "\nThese functions are already defined in the session:\n" + funcs
    return f"{base}\n\n{text}" if base else text


def make_cells(tool_cfg: ToolConfig, backend: str = "local", concurrency: int = 0, allow_unsandboxed: bool = False):
    """The cells of `sandbox = local | e2b`: replayed sessions through the shared sandbox pool of that backend
    (nanogrpo/sandbox/cells.py), started now so that a missing sandbox stops the run before any compute."""
    from nanogrpo.sandbox import get_pool
    from nanogrpo.sandbox.cells import ReplayCells

    pool = get_pool(backend=backend, concurrency=concurrency or None,
                    **({"allow_unsandboxed": allow_unsandboxed} if backend == "local" else {})).start()
    return ReplayCells(tool_cfg, pool)
