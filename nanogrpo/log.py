"""Metrics: one printed line per step, one JSON line per step in metrics.jsonl, wandb when asked; and
`ProgressLine`, the progress of one evaluation task on stderr.

Only rank 0 writes. Values are already reduced over ranks by the caller.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from time import monotonic

from nanogrpo import dist, files
from nanogrpo.files import DiskFullError, LogError, echo, resume_command  # noqa: F401 (log.LogError: train.py names it)


# what the printed line shows (the jsonl gets everything)
LINE = [
    ("reward_mean", "reward", "{:.3f}"),
    ("sft_loss", "loss", "{:.4f}"),  # sft.py
    ("heldout_accuracy", "heldout", "{:.3f}"),
    ("heldout_top_answer", "top answer", "{:.2f}"),  # held-out answers that are the most common one
    ("heldout_tool_use", "heldout tools", "{:.2f}"),  # tools = true: held-out answers that ran code
    ("accuracy", "acc", "{:.3f}"),
    ("tool_use_frac", "tools", "{:.2f}"),  # rollouts with at least one tool call
    ("zero_std_frac", "zstd", "{:.2f}"),
    ("completion_len_mean", "len", "{:.1f}"),
    ("entropy", "ent", "{:.3f}"),
    ("kl", "kl", "{:.4f}"),
    ("logprob_gap", "gap", "{:.1e}"),
    ("grad_norm", "gnorm", "{:.3f}"),
    ("lr", "lr", "{:.1e}"),
    ("tokens_per_s", "tok/s", "{:.0f}"),
]


def _fmt_duration(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _fmt_rate(r: float) -> str:
    return f"{r:.0f}" if r >= 10 else f"{r:.1f}"


class Logger:
    def __init__(self, out_dir: str, total_steps: int, start_step: int = 0, wandb_project: str = "", run_name: str = "", config: dict | None = None):
        self.main = dist.is_main()
        self.total, self.start = total_steps, start_step
        self.t0 = time.time()
        self.path = Path(out_dir) / "metrics.jsonl"
        self.wandb = None
        if self.main and self.path.exists():  # resuming: lines after the checkpoint are recomputed, drop them
            keep = []
            for i, x in enumerate(self.path.read_text(errors="replace").splitlines(), 1):
                try:
                    step = files.loads(x)["step"]
                except (ValueError, KeyError, TypeError):  # a line torn by a crash mid-write
                    echo(f"warning: {self.path}:{i}: dropping an unreadable line (torn by a crash?): {x[:80]!r}")
                    continue
                if start_step and step <= start_step:
                    keep.append(x)
            try:  # a crash here must not lose the kept lines: a new file, renamed into place
                files.write_atomic(self.path, "".join(x + "\n" for x in keep))
            except DiskFullError:
                raise
            except OSError as e:
                raise LogError(f"cannot rewrite {self.path} for the resume ({e.strerror or e}); it is left as it "
                               "was") from None
        if self.main and wandb_project:
            import wandb  # only when asked for

            self.wandb = wandb.init(project=wandb_project, name=run_name or None, config=config, resume="allow")

    def log(self, step: int, metrics: dict, every: int = 1) -> None:
        """Append `metrics` for `step` (0-based; printed 1-based) and print a line every `every` steps."""
        if not self.main:
            return
        clean = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in metrics.items()}
        self._append(json.dumps({"step": step + 1, **clean}) + "\n")
        if self.wandb is not None:
            self.wandb.log({k: v for k, v in clean.items() if isinstance(v, (int, float))}, step=step + 1)
        if (step + 1) % every and step + 1 != self.total:
            return
        eta = (time.time() - self.t0) / max(step + 1 - self.start, 1) * (self.total - step - 1)  # this run's pace
        shown = [f"{short} {fmt.format(clean[key])}" for key, short, fmt in LINE if clean.get(key) is not None]
        echo(" | ".join([f"step {step + 1}/{self.total}", *shown, f"eta {_fmt_duration(eta)}"]))

    def _append(self, line: str) -> None:
        """One whole line, or none: a write that fails (a full disk) is cut back off and raised as LogError."""
        data = line.encode()
        fd = None
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            size = os.fstat(fd).st_size
            try:
                while data:  # os.write may write part of it
                    data = data[os.write(fd, data):]
            except OSError:
                os.ftruncate(fd, size)  # no torn line: the file ends with the previous step's
                raise
        except OSError as e:
            what = (f"{e.strerror or e} appending to {self.path}: the file keeps every step before this one whole; "
                    f"this step's metrics were not written: {line.strip()}")
            raise (DiskFullError(what) if files.full(e) else LogError(what)) from None
        finally:
            if fd is not None:
                os.close(fd)

    def close(self) -> None:
        if self.wandb is not None:
            self.wandb.finish()


class ProgressLine:
    """One evaluation task's progress on stderr: problems and samples done, tokens/s, elapsed and an ETA (run_task
    drives it; a sampler takes it as its `progress`). A terminal gets one line redrawn in place, elsewhere plain
    lines; a slow worst case is warned about once, naming `hint` (what each shows and why: docs/eval.md, "Progress").
    Between lines it only adds and reads the clock. Calls recorded before (`skip`) count as done but not in the rate."""

    def __init__(self, label: str, problems: int, samples: int, budget: int, *, hint: str = "", stream=None,
                 clock=None):
        self.label, self.problems, self.samples, self.budget, self.hint = label, problems, samples, budget, hint
        self.done_problems = self.done_samples = 0  # by finished calls (and recorded ones)
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.clock = clock or monotonic
        self.every = 0.5 if self.tty else 30.0  # seconds between lines
        self.measure_s, self.warn_s = 5.0, 1800.0  # the rate measured over this long; a worst case above this is warned
        self.t0 = self.clock()
        self.gen_t0: float | None = None  # when this run's first generate call started
        self.first_at: float | None = None  # the sampler's first report, and the tokens counted by then
        self.first_tokens = 0
        self.tokens = 0  # generated by this run
        self.call_tokens = self.call_samples = 0  # within the current call
        self.calls_tokens = self.calls_samples = 0  # in this run's finished calls (the ETA's mean length)
        self.next_at = self.t0 + self.every
        self.checked = False  # the long-run check ran
        self.width = 0  # of the line on the terminal, to blank a shorter one

    def start_call(self) -> None:
        if self.gen_t0 is None:
            self.gen_t0 = self.clock()
            if self.tty:  # the line is there while the first prompts are prefilled
                self._show(self.gen_t0)
        self.call_tokens = self.call_samples = 0

    def __call__(self, samples: int, tokens: int) -> None:
        """The samplers' hook: `samples` finished and `tokens` generated since the previous call."""
        self.call_samples += samples
        self.call_tokens += tokens
        self.tokens += tokens
        now = self.clock()
        if self.first_at is None:
            self.first_at, self.first_tokens = now, self.tokens
        elif not self.checked and now - self.first_at >= self.measure_s:
            self._check(now)
        if now >= self.next_at:
            self._show(now)

    def skip(self, problems: int, samples: int) -> None:
        """A call recorded by an earlier run: done, not generated."""
        self.done_problems += problems
        self.done_samples += samples

    def call_done(self, problems: int, samples: int, note: str = "") -> None:
        """A generate call ended: its problems and samples are done (a plain line is printed whatever the time)."""
        self.done_problems += problems
        self.done_samples += samples
        self.calls_samples += samples
        self.calls_tokens += self.call_tokens
        self.call_tokens = self.call_samples = 0
        now = self.clock()
        if not self.checked and self.tokens:
            self._check(now)
        self._show(now, note)

    def close(self, note: str = "") -> None:
        """The last line (a task with nothing left to generate prints one too); a terminal's line is ended."""
        if self.tty or self.gen_t0 is None:
            self._show(self.clock(), note)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
            self.width = 0

    def line(self, now: float, note: str = "") -> str:
        done_samples = min(self.samples, self.done_samples + self.call_samples)
        parts = [f"{self.done_problems}/{self.problems} problems", f"{done_samples}/{self.samples} samples"]
        rate = self.rate(now)
        if rate > 0:
            parts.append(f"{_fmt_rate(rate)} tok/s")
        parts.append(f"{_fmt_duration(now - self.t0)} elapsed")
        left = self.samples - self.done_samples  # samples of the calls still to finish
        if left > 0 and rate <= 0:
            parts.append("eta ?")
        elif left > 0:  # at the mean length of the calls done, else at most the budget each
            mean = self.calls_tokens / self.calls_samples if self.calls_samples else self.budget
            bound = "" if self.calls_samples else "<= "
            parts.append(f"eta {bound}{_fmt_duration(max(0.0, left * mean - self.call_tokens) / rate)}")
        return f"{self.label}: " + ", ".join(parts + ([note] if note else []))

    def rate(self, now: float) -> float:
        """Tokens/s since the sampler's first report; with no later one yet, over the calls done (a sampler
        that reports once per call, vLLM), else 0: not measured yet."""
        if self.first_at is not None and now > self.first_at and self.tokens > self.first_tokens:
            return (self.tokens - self.first_tokens) / (now - self.first_at)
        if self.calls_samples and self.gen_t0 is not None and now > self.gen_t0:
            return self.tokens / (now - self.gen_t0)
        return 0.0

    def _show(self, now: float, note: str = "") -> None:
        text = self.line(now, note)
        if self.tty:
            self.stream.write("\r" + text.ljust(self.width))
            self.width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self.next_at = now + self.every

    def _check(self, now: float) -> None:
        """The worst case at the measured rate: every sample not finished runs to the budget."""
        self.checked = True
        rate = self.rate(now)
        if rate <= 0:
            return
        left = self.samples - min(self.samples, self.done_samples + self.call_samples)
        worst = left * self.budget / rate
        if worst > self.warn_s:
            self.message(f"WARNING {self.label}: at the measured {_fmt_rate(rate)} tokens/s, the {left} samples left "
                         f"could take up to {_fmt_duration(worst)} ({left} x max_new_tokens {self.budget})"
                         + (f"; shorten it with {self.hint}" if self.hint else ""))

    def message(self, text: str) -> None:
        """A line of its own; on a terminal the progress line is blanked first and redrawn at its next update."""
        if self.tty and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.width = 0
        self.stream.write(text + "\n")
        self.stream.flush()
