"""Round 5 of the red team, as the runs a user makes: a non-finite number aimed at the weights, a user's file in an
output's way, a tampered checkpoint, a bad input that must be named, work that must stay bounded, and the sockets a
one-node torchrun job listens on.

Each `Case` runs train.py / sft.py / eval.py (or a few lines of Python) as a subprocess in `root`, a checkout: this
one, or an older one for a before/after table (`python scripts/bench/redteam.py --kind hardening --root DIR`), and says what
happened and whether the input got past the guard ("escaped"): a traceback or an exit 0 where a named error belongs
(`error: ...`, exit 2, before any step), a user's file changed, a resume from a damaged checkpoint, a weight saved
non-finite, work past its bound, a socket of the job on an address other than 127.0.0.1. The tests check the same
guards in-process (tests/test_hardening_inputs.py); these cases are what the red team ran, end to end.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

PY = sys.executable
TRACEBACK = "Traceback (most recent call last)"
SMALL = ["prompts_per_step=4", "group_size=2", "eval_every=0", "max_new_tokens=4", "steps=2", "micro_batch_size=8"]


@dataclass
class Case:
    kind: str  # nonfinite | overwrite | checkpoint | input | bounded | trust
    name: str
    run: Callable  # (root: Path, tmp: Path) -> (what happened, escaped)
    needs: str = ""  # "root" (a tmpfs mount), "bwrap" (the sandbox): skipped without it


def run(root: Path, args: list, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python ARGS` in checkout `root`, one thread, with that checkout's nanogrpo first on the path."""
    full = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root), **(env or {})}
    try:
        return subprocess.run([PY, *map(str, args)], cwd=root, capture_output=True, text=True, timeout=timeout,
                              env=full)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, -9, str(e.stdout or ""), f"timed out after {timeout} s")


def said(res: subprocess.CompletedProcess) -> str:
    """What a run showed: its exit status and its last line of stderr (the exception, for a traceback)."""
    lines = [x for x in res.stderr.strip().splitlines() if x.strip() and not x.startswith(("W", "warning"))]
    last = lines[-1].strip() if lines else ""
    return f"exit {res.returncode}" + (f": {last[:110]}" if last else "")


def named(res: subprocess.CompletedProcess, code: int = 2) -> bool:
    """A named error: the exit status `code`, `error:` on its last stderr line, no traceback."""
    lines = [x for x in res.stderr.strip().splitlines() if x.strip()]
    return res.returncode == code and TRACEBACK not in res.stderr and bool(lines) and "error:" in lines[-1]


def stepped(res: subprocess.CompletedProcess) -> bool:
    return "step 1/" in res.stdout


def train(root: Path, tmp: Path, *args, out: str = "out", script: str = "train.py", **kw):
    return run(root, [script, f"out_dir={tmp / out}", *SMALL, *args], **kw)


def refused_before_compute(res) -> tuple[str, bool]:
    return said(res) + (" (after training steps)" if stepped(res) else ""), not named(res) or stepped(res)


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    return path


def rows_file(tmp: Path, rows: list, name: str = "rows.jsonl") -> Path:
    return write(tmp / name, "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def nonfinite_weights(out_dir: Path) -> int:
    """Non-finite values in the weights of every checkpoint of a run."""
    import torch
    from safetensors.torch import load_file

    bad = 0
    for f in out_dir.glob("checkpoints/step_*/model.safetensors"):
        bad += sum(int((~torch.isfinite(t)).sum()) for t in load_file(str(f)).values() if t.is_floating_point())
    return bad


# -- a user's reward, as it reaches the trainer today (added to shaping.SHAPING before the config is read) ------

USER_REWARD = """import runpy, sys
sys.path.insert(0, {root!r})
from nanogrpo import shaping
calls = []
def reward(batch):
    calls.append(1)
    return [{value} if len(calls) == 1 and i == 0 else 0.0 for i in range(len(batch.texts))]
shaping.SHAPING["mine"] = reward
sys.argv = [{root!r} + "/train.py", *sys.argv[1:]]
runpy.run_path({root!r} + "/train.py", run_name="__main__")
"""


def user_reward(value: str, escaped_if_named: bool = False):
    def go(root, tmp):
        wrapper = write(tmp / "with_reward.py", USER_REWARD.format(root=str(root), value=value))
        res = run(root, [wrapper, f"out_dir={tmp / 'out'}", *SMALL, 'rewards=["exact","mine"]'])
        bad = nonfinite_weights(tmp / "out")
        text = said(res) + (f"; {bad} non-finite weights saved" if bad else "")
        return text, bad > 0 or not named(res)
    return go


def weights_overflow(root, tmp):
    res = train(root, tmp, 'rewards=["exact","think_format"]', "reward_weights=[1e308,1e308]", "save_final=true")
    bad = nonfinite_weights(tmp / "out")
    return said(res) + (f"; {bad} non-finite weights saved" if bad else ""), bad > 0 or not named(res)


def nan_in_model(root, tmp):
    model = tmp / "model"
    shutil.copytree(root / "models/tiny-arithmetic", model)
    import torch
    from safetensors.torch import load_file, save_file

    w = load_file(str(model / "model.safetensors"))
    next(t for k, t in w.items() if "layers.1.mlp.up_proj" in k)[0, 0] = math.nan
    save_file(w, str(model / "model.safetensors"), metadata={"format": "pt"})
    del torch
    res = train(root, tmp, f"model={model}", "steps=4")
    bad = nonfinite_weights(tmp / "out")
    return said(res) + (f"; {bad} non-finite weights saved" if bad else ""), bad > 0 or not named(res) or stepped(res)


# -- files the user owns ----------------------------------------------------------------------------------------

USER_CONFIG = "# my config\nlr = 3e-4\nsteps = 2\nprompts_per_step = 4\ngroup_size = 2\neval_every = 0\n"


def own_config(script: str, pass_it: bool):
    def go(root, tmp):
        mine = write(tmp / "run" / "config.toml", USER_CONFIG)
        args = [script] + ([mine] if pass_it else []) + [f"out_dir={tmp / 'run'}", "max_new_tokens=4", "steps=2",
                                                         "prompts_per_step=4", "group_size=2", "eval_every=0"]
        res = run(root, args)
        changed = mine.read_text() != USER_CONFIG
        return said(res) + ("; the user's config.toml replaced" if changed else "; config.toml kept"), changed
    return go


def eval_args(root: Path, tmp: Path, out, *extra) -> list:
    task = rows_file(tmp, [{"problem": f"{a}+{b}=", "answer": str(a + b)} for a, b in ((12, 30), (5, 7), (40, 2),
                                                                                         (1, 1))], "sums.jsonl")
    return ["eval.py", "--model", "models/tiny-arithmetic", "--tasks", f"sums={task}", "--n", "1",
            "--max-new-tokens", "4", "--sampler", "torch", "--device", "cpu", "--out", out, *extra]


def eval_over_model_config(root, tmp):
    model = tmp / "model"
    shutil.copytree(root / "models/tiny-arithmetic", model)
    before = (model / "config.json").read_text()
    res = run(root, eval_args(root, tmp, model / "config.json"))
    changed = (model / "config.json").read_text() != before
    return said(res) + ("; the model's config.json replaced" if changed else "; config.json kept"), changed


def eval_twice(root, tmp):
    first = run(root, eval_args(root, tmp, tmp / "results.json"))
    before = (tmp / "results.json").read_text() if (tmp / "results.json").is_file() else ""
    second = run(root, eval_args(root, tmp, tmp / "results.json", "--seed", "1"))
    after = (tmp / "results.json").read_text() if (tmp / "results.json").is_file() else ""
    replaced = second.returncode == 0 or after != before
    return (f"first {said(first)}; second {said(second)}" + ("; the first results replaced" if replaced else "")), \
        replaced or first.returncode != 0


def eval_over_user_samples(root, tmp):
    mine = write(tmp / "results.samples.jsonl", "my notes\n")
    res = run(root, eval_args(root, tmp, tmp / "results.json"))
    changed = mine.read_text() != "my notes\n"
    return said(res) + ("; the user's file replaced" if changed else "; kept"), changed


# -- checkpoints ------------------------------------------------------------------------------------------------

_BASE: dict[str, Path] = {}


def two_checkpoints(root: Path, tmp: Path) -> Path:
    """A run with checkpoints at steps 1 and 2 (made once per checkout, copied for each case)."""
    key = str(root)
    if key not in _BASE or not _BASE[key].exists():
        base = tmp.parent / f"base_run_{abs(hash(key))}"
        shutil.rmtree(base, ignore_errors=True)
        res = train(root, base.parent, "save_every=1", out=base.name)
        assert res.returncode == 0, res.stderr[-2000:]
        _BASE[key] = base
    shutil.copytree(_BASE[key], tmp / "out")
    return tmp / "out"


def overwrite_bytes(path: Path, at: int = -4096, n: int = 256) -> None:
    with open(path, "r+b") as f:
        f.seek(at, 2)
        old = f.read(n)
        f.seek(at, 2)
        f.write(bytes(255 - b for b in old))  # same size, other bytes


def resumed_from(res) -> str:
    line = next((x for x in res.stdout.splitlines() if "resumed from" in x), "")
    return line.rsplit("/", 1)[-1] if line else ""


def tampered(rel: str, edit=overwrite_bytes):
    def go(root, tmp):
        out = two_checkpoints(root, tmp)
        edit(out / "checkpoints/step_000002" / rel)
        res = train(root, tmp, "resume=true", "steps=3")
        got = resumed_from(res)
        text = said(res) + (f"; resumed from {got}" if got else "")
        return text, got == "step_000002" or TRACEBACK in res.stderr
    return go


def without_manifest(sha256_only: bool = False):
    """Round 6: the newest checkpoint's weights changed in place (same size), and its manifest removed (or stripped
    of its SHA-256, sizes left): escaped when the run resumes from it, or saves step 2 again over it unsaid."""
    def go(root, tmp):
        out = two_checkpoints(root, tmp)
        newest = out / "checkpoints/step_000002"
        overwrite_bytes(newest / "model.safetensors")
        man = newest / "manifest.json"
        if sha256_only:
            man.write_text(json.dumps({k: v for k, v in json.loads(man.read_text()).items() if k != "sha256"}))
        else:
            man.unlink()
        changed = (newest / "model.safetensors").read_bytes()
        res = train(root, tmp, "resume=true", "steps=3", "save_every=1", "keep_checkpoints=5")
        got = resumed_from(res)
        aside = out / "checkpoints/replaced/step_000002/model.safetensors"
        kept = aside.exists() and aside.read_bytes() == changed and "moved to" in res.stderr
        text = said(res) + (f"; resumed from {got}" if got else "") + ("; the old step 2 moved aside, said" if kept
                                                                      else "; the old step 2 saved over")
        return text, got != "step_000001" or not kept or TRACEBACK in res.stderr
    return go


def two_layers(path: Path) -> None:
    """4 layers -> 2, in place: the same size (the manifest's sizes cannot tell)."""
    path.write_text(path.read_text().replace('"num_hidden_layers": 4', '"num_hidden_layers": 2'))


def resume_other_model(root, tmp):
    two_checkpoints(root, tmp)
    res = train(root, tmp, "resume=true", "steps=3", "model=models/tiny-multiply-tools")
    return said(res) + ("; trained on" if stepped(res) else ""), not named(res)


def resume_fewer_steps(root, tmp):
    two_checkpoints(root, tmp)
    res = train(root, tmp, "resume=true", "steps=1")
    return said(res), not named(res)


# -- inputs that must be named before any compute ---------------------------------------------------------------

def bad_train(make):
    """`make(root, tmp)` -> the arguments of a train.py run that must stop with a named error before any step."""
    def go(root, tmp):
        return refused_before_compute(train(root, tmp, *make(root, tmp)))
    return go


def math_rows(*rows):
    def make(root, tmp):
        return [f"task={rows_file(tmp, list(rows))}", 'rewards=["math"]']
    return make


def parquet_not_parquet(root, tmp):
    return [f"task={write(tmp / 'rows.parquet', 'problem,answer' + chr(10) + '1+1,2' + chr(10))}"]


def tools_file(source: str):
    def make(root, tmp):
        return ["tools=true", f"tools_file={write(tmp / 'tools.py', source)}", "max_new_tokens=8"]
    return make


def toml_latin1(root, tmp):
    return [write(tmp / "c.toml", "# café\nlr = 3e-4\n".encode("latin-1"))]


def long_prompts(root, tmp):
    rows = [{"problem": "1+1=" * 750, "answer": "2"}] + [{"problem": "1+1=", "answer": "2"}] * 3
    return [f"task={rows_file(tmp, rows)}", 'rewards=["exact"]']


def unreadable_number_golds(root, tmp):
    return [f"task={rows_file(tmp, [{'problem': '1+1=', 'answer': 'two'}] * 4)}", 'rewards=["number"]']


def rows_without_problem(root, tmp):
    return [f"task={rows_file(tmp, [{'prompt': '1+1=', 'answer': '2'}] * 4)}", 'rewards=["exact"]']


def code_rows_without_problem(root, tmp):
    row = {"id": "x", "language": "python", "mode": "stdio", "tests": [{"input": "", "output": "1"}]}
    return [f"task={rows_file(tmp, [row] * 4)}", 'rewards=["code"]']


STOPPED_EVAL = """import runpy, sys
sys.path.insert(0, {root!r})
import nanogrpo.evaluate as E
make = E.make_sampler
def stopping(*a, **k):  # the eval is stopped after its first generate call, as by Ctrl-C
    s = make(*a, **k)
    generate, calls = s.generate, []
    def gen(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return generate(*a, **k)
    s.generate = gen
    return s
E.make_sampler = stopping
sys.argv = [{root!r} + "/eval.py", *sys.argv[1:]]
runpy.run_path({root!r} + "/eval.py", run_name="__main__")
"""


def edited_resume_record(edit):
    def go(root, tmp):
        wrapper = write(tmp / "stopped_eval.py", STOPPED_EVAL.format(root=str(root)))
        args = eval_args(root, tmp, tmp / "results.json", "--n", "128", "--max-new-tokens", "2")
        run(root, [wrapper, *args[1:]])  # 2 problems a call: stopped after the first
        samples = tmp / "results.samples.jsonl"
        lines = samples.read_text().splitlines()
        if not lines:
            return "the stopped eval recorded nothing", True
        samples.write_text("\n".join([json.dumps(edit(json.loads(lines[0])))] + lines[1:]) + "\n")
        res = run(root, args + ["--resume"])
        return said(res), not named(res)
    return go


def user_reward_strings(root, tmp):
    return user_reward('"1.0"')(root, tmp)


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True,
                   capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def full_disk_metrics(root, tmp):
    with tmpfs(tmp / "disk", "1m") as disk:
        free = shutil.disk_usage(disk).free
        write(disk / "filler", b"x" * max(0, free - 48 * 1024))  # ~48 KiB left: config.toml, then metrics lines
        res = train(root, disk, "steps=400", "save_final=false", out="out")
        lines = (disk / "out" / "metrics.jsonl").read_text().splitlines() if (disk / "out/metrics.jsonl").exists() else []
        torn = 0
        for x in lines:
            try:
                json.loads(x)
            except ValueError:
                torn += 1
        text = said(res) + f"; metrics.jsonl: {len(lines)} lines, {torn} torn"
        return text, torn > 0 or not named(res, 1)


def full_disk_log(root, tmp):
    """Round 6: train.py's stdout redirected to a file on a full disk (out_dir elsewhere): exit 1, one `error:` line
    with the resume command, the log's lines whole."""
    with tmpfs(tmp / "disk", "1m") as disk:
        write(disk / "filler", b"x" * max(0, shutil.disk_usage(disk).free - 8 * 1024))
        logfile = disk / "train.log"
        with open(logfile, "w") as stdout:
            full = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root)}
            res = subprocess.run([PY, "train.py", f"out_dir={tmp / 'out'}", *SMALL, "steps=400", "save_final=false",
                                  "log_every=1"], cwd=root, stdout=stdout, stderr=subprocess.PIPE, text=True,
                                 timeout=900, env=full)
        text = logfile.read_text()
        torn = bool(text) and not text.endswith("\n")
        resumable = "resume=true" in (res.stderr.strip().splitlines() or [""])[-1]
        return (said(res) + f"; train.log {'torn' if torn else 'whole'}"
                + ("; the resume command named" if resumable else "")), torn or not named(res, 1) or not resumable


def full_disk_config(root, tmp):
    """Round 6: out_dir on a disk with no space left: config.toml cannot be written; exit 1, one `error:` line with
    the resume command, before any step."""
    with tmpfs(tmp / "disk", "1m") as disk:
        write(disk / "filler", b"x" * shutil.disk_usage(disk).free)
        res = train(root, disk, "steps=2")
        resumable = "resume=true" in (res.stderr.strip().splitlines() or [""])[-1]
        return said(res) + ("; the resume command named" if resumable else ""), not named(res, 1) or not resumable


# -- bounded work -----------------------------------------------------------------------------------------------

REPETITION = """import sys, time
sys.path.insert(0, {root!r})
from nanogrpo.shaping import repetition_penalty_reward
text = ("the cat sat on the mat " * 200000)[: 1 << 20]
t = time.perf_counter()
repetition_penalty_reward(text, 1000, -1.0)
print(time.perf_counter() - t)
"""


def repetition_1000(root, tmp):
    res = run(root, [write(tmp / "rep.py", REPETITION.format(root=str(root)))])
    took = float(res.stdout.strip().splitlines()[-1]) if res.returncode == 0 else math.inf
    return f"{took:.1f} s", took > 3.0


SIGALRM_CELLS = """import sys, time
sys.path.insert(0, {root!r})
from nanogrpo import tools
cfg = tools.ToolConfig(timeout_s=1.0, tools_source="def helper():\\n    return 1\\n")
cells = tools.make_cells(cfg, "local", 1)
src = "import signal, time\\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\\ntime.sleep(60)"
t = time.perf_counter()
for k in range(3):
    cells.run([(k, [], ("<cell 1>", src))])
print(time.perf_counter() - t, flush=True)
"""


def cells_ignoring_sigalrm(root, tmp):
    """3 calls of a cell that ignores SIGALRM and sleeps, tool_timeout_s = 1, after a tools file: each runs to the
    backstop, 2 x (2 cells x 1 s) + 2 s = 6 s (docs/tools.md); escaped past 1.5 x that."""
    res = run(root, [write(tmp / "cells.py", SIGALRM_CELLS.format(root=str(root)))])
    took = float(res.stdout.strip().splitlines()[-1]) if res.returncode == 0 else math.inf
    return (f"{took:.1f} s for 3 calls (backstop 6 s each)" if res.returncode == 0 else said(res)), took > 27.0


# -- the sockets a one-node torchrun job listens on ----------------------------------------------------------------

PROBE = """import os, sys
sys.path.insert(0, {root!r})
import torch, torch.distributed as td
from nanogrpo import dist
dist.init("cpu", "system", int(os.environ.get("SAMPLERS", 0)))
def listening(pid):
    inodes = set()
    for fd in os.listdir(f"/proc/{{pid}}/fd"):
        try:
            link = os.readlink(f"/proc/{{pid}}/fd/{{fd}}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).readlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:
                found.append(f[1].split(":")[0])
    return found
td.barrier()
loop = ("0100007F", "00000000000000000000000001000000")
mine = [a for a in listening(os.getpid()) if a not in loop]
agent = [a for a in listening(os.getppid()) if a not in loop]
os.write(1, f"PROBE {{len(mine)}} {{len(agent)}}\\n".encode())  # one write: two ranks share the pipe
td.barrier()
dist.close()
"""


def torchrun_sockets(launch: list, samplers: int = 0):
    def go(root, tmp):
        probe = write(tmp / "probe.py", PROBE.format(root=str(root)))
        res = run(root, ["-m", "torch.distributed.run", *[a.format(tmp=tmp) for a in launch], "--nproc_per_node=2",
                         probe], env={"SAMPLERS": str(samplers), **({"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
                                                                   if "--rdzv-conf=store_type=file" in launch else {})},
                  timeout=300)
        got = re.findall(r"PROBE (\d+) (\d+)", res.stdout)  # anywhere on a line: another rank's output may precede it
        if len(got) != 2:
            return said(res), True
        workers, agent = sum(int(a) for a, _ in got), int(got[0][1])
        return (f"{workers} worker sockets and {agent} of torchrun's on other addresses than 127.0.0.1",
                workers > 0 or ("--rdzv-conf=store_type=file" in launch and agent > 0))
    return go


OUTSIDER = """import os, sys
sys.path.insert(0, {root!r})
import torch.distributed as td
from nanogrpo import dist
dist.init("cpu", "system", 1)
signed = getattr(dist, "STORES", None)
mine = signed[0] if signed else None
inner = mine.store if mine is not None else None
port = inner.port if inner is not None else int(os.environ["MASTER_PORT"])
# a process that is not a rank: a plain client of the run's store on 127.0.0.1, with no token
outsider = td.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False)
keys = len(outsider.list_keys())
if dist.SPLIT.rank == 0:
    outsider.set("nanogrpo/probe", "the outsider's value")
dist.SPLIT.to_samplers.barrier()
if dist.SPLIT.rank == 1:
    try:
        got = (mine or outsider).get("nanogrpo/probe").decode()
    except Exception as e:
        got = "refused: " + type(e).__name__
    os.write(1, f"OUTSIDER {{keys}} keys listed; a rank read: {{got}}\\n".encode())
dist.SPLIT.to_samplers.barrier()
dist.close()
"""


def outsider_in_store(root, tmp):
    """Round 6: a local process that is not a rank joins the run's store (127.0.0.1), lists its keys and sets its own
    under --standalone with sampler_ranks=1: escaped when a rank reads what it set (dist.SignedStore refuses it)."""
    probe = write(tmp / "outsider.py", OUTSIDER.format(root=str(root)))
    res = run(root, ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", probe], timeout=300)
    line = next((x[x.index("OUTSIDER"):] for x in res.stdout.splitlines() if "OUTSIDER" in x), "")
    return (line[9:] if line else said(res)), not line or "refused" not in line


STANDALONE = ["--standalone"]
FILE_RDZV = ["--nnodes=1", "--rdzv-backend=c10d", "--rdzv-endpoint={tmp}/rdzv", "--rdzv-conf=store_type=file"]

CASES = [
    # a non-finite number aimed at the weights
    Case("nonfinite", "a user reward returns +inf once", user_reward('float("inf")')),
    Case("nonfinite", "a user reward returns NaN once", user_reward('float("nan")')),
    Case("nonfinite", "reward_weights = [1e308, 1e308] overflow the weighted sum", weights_overflow),
    Case("nonfinite", "a model whose weights hold a NaN", nan_in_model),
    # files the user owns
    Case("overwrite", "train.py DIR/config.toml out_dir=DIR", own_config("train.py", True)),
    Case("overwrite", "train.py out_dir=DIR, a config.toml of the user's in DIR", own_config("train.py", False)),
    Case("overwrite", "sft.py DIR/config.toml out_dir=DIR", own_config("sft.py", True)),
    Case("overwrite", "eval.py --out MODEL/config.json", eval_over_model_config),
    Case("overwrite", "two eval.py runs on one --out", eval_twice),
    Case("overwrite", "eval.py --out X, a file of the user's at X.samples.jsonl", eval_over_user_samples),
    # checkpoints
    Case("checkpoint", "newest checkpoint: model.safetensors bytes overwritten (same size)",
         tampered("model.safetensors")),
    Case("checkpoint", "newest checkpoint: optimizer shard bytes overwritten (same size)",
         tampered("optim/__0_0.distcp")),
    Case("checkpoint", "newest checkpoint: config.json edited to 2 layers", tampered("config.json", two_layers)),
    Case("checkpoint", "resume with model= another model directory", resume_other_model),
    Case("checkpoint", "resume with steps below the checkpoint's step", resume_fewer_steps),
    Case("checkpoint", "newest checkpoint: weights changed (same size), manifest.json removed", without_manifest()),
    Case("checkpoint", "newest checkpoint: weights changed (same size), manifest's SHA-256 removed",
         without_manifest(sha256_only=True)),
    # inputs named before any compute
    Case("input", "dataset row nested 100,000 deep",
         bad_train(math_rows('{"problem": "1+1", "answer": ' + "[" * 100000 + "]" * 100000 + "}"))),
    Case("input", "dataset row with a 5,000-digit integer", bad_train(math_rows('{"problem": "1+1", "answer": '
                                                                                + "7" * 5000 + "}"))),
    Case("input", "a .parquet file that is not parquet", bad_train(parquet_not_parquet)),
    Case("input", "gold NaN", bad_train(math_rows('{"problem": "1+1", "answer": NaN}'))),
    Case("input", "gold Infinity", bad_train(math_rows('{"problem": "1+1", "answer": Infinity}'))),
    Case("input", "gold an object", bad_train(math_rows({"problem": "1+1", "answer": {"value": 2}}))),
    Case("input", "gold a list", bad_train(math_rows({"problem": "1+1", "answer": [2]}))),
    Case("input", "seed=2**64", bad_train(lambda r, t: [f"seed={2 ** 64}"])),
    Case("input", 'stop=[""]', bad_train(lambda r, t: ['stop=[""]'])),
    Case("input", "temperature=1e-300", bad_train(lambda r, t: ["temperature=1e-300"])),
    Case("input", "tools file nested 200,000 deep (unary minus)", bad_train(tools_file("x = " + "-" * 200000 + "1\n"))),
    Case("input", "tools file nested 200,000 deep (attributes)", bad_train(tools_file("x = a" + ".b" * 200000 + "\n"))),
    Case("input", "template=chat on a model without a chat template", bad_train(lambda r, t: ["template=chat"])),
    Case("input", 'lora_targets=["nope"]', bad_train(lambda r, t: ["lora_rank=4", 'lora_targets=["nope"]'])),
    Case("input", "a TOML file that is not UTF-8", bad_train(toml_latin1)),
    Case("input", "prompts of ~3,000 tokens against a 512-token context", bad_train(long_prompts)),
    Case("input", "golds the number reward cannot read (user task)", bad_train(unreadable_number_golds)),
    Case("input", "user rows without problem", bad_train(rows_without_problem)),
    Case("input", "user code rows without problem", bad_train(code_rows_without_problem)),
    Case("input", "eval.py --resume: a record without 'correct'",
         edited_resume_record(lambda r: {k: v for k, v in r.items() if k != "correct"})),
    Case("input", "eval.py --resume: num_tokens a string", edited_resume_record(lambda r: {**r, "num_tokens": "x"})),
    Case("input", "eval.py --resume: index a string", edited_resume_record(lambda r: {**r, "index": "0"})),
    Case("input", "a user reward returns strings", user_reward_strings),
    Case("input", "a full disk while appending metrics.jsonl (named, exit 1, no torn line)", full_disk_metrics,
         needs="root"),
    Case("input", "a full disk under the printed log (stdout to a file there; named, exit 1, resume command)",
         full_disk_log, needs="root"),
    Case("input", "a full disk writing config.toml (named, exit 1, resume command)", full_disk_config, needs="root"),
    # bounded work
    Case("bounded", "repetition_n_grams=1000 on a 1 MiB completion (3 s bound)", repetition_1000),
    Case("bounded", "tool cells ignoring SIGALRM (3 calls, tool_timeout_s = 1)", cells_ignoring_sigalrm, needs="bwrap"),
    # the split placement's trust boundary
    Case("trust", "torchrun --standalone: the workers' sockets", torchrun_sockets(STANDALONE)),
    Case("trust", "torchrun --standalone, sampler_ranks=1 (the bridge): the workers' sockets",
         torchrun_sockets(STANDALONE, samplers=1)),
    Case("trust", "torchrun, one node, file rendezvous, no shared store: every socket",
         torchrun_sockets(FILE_RDZV)),
    Case("trust", "a local process that is not a rank sets a key in the run's store (--standalone, sampler_ranks=1)",
         outsider_in_store),
]


def run_case(case: Case, root: Path, tmp: Path) -> tuple[str, bool, float]:
    """(what happened, escaped, seconds); a case that cannot run here (not root, no bubblewrap) says so, unescaped."""
    if case.needs == "root" and os.geteuid() != 0:
        return "not run (needs root for a tmpfs)", False, 0.0
    if case.needs == "bwrap" and shutil.which("bwrap") is None:
        return "not run (needs bubblewrap)", False, 0.0
    tmp.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    try:
        text, escaped = case.run(Path(root).resolve(), tmp)
    except Exception as e:  # the case itself broke (a checkout without the script it runs): say so
        text, escaped = f"the case failed: {type(e).__name__}: {e}", True
    return text, escaped, time.monotonic() - t
