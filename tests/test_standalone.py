"""The repository stands alone: a copy of its tracked files with nothing beside it evaluates the four math
benchmarks offline, and no tracked file names a path outside the repository (a sibling data folder, the
development machine's workspace, a team document users do not have)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MATH_TASKS = ("aime24", "math500", "amc23", "gsm8k")

# Lines that name something outside the repository. (This file holds the patterns, so it is not scanned.)
OUTSIDE = {
    "the sibling data folder": re.compile(r"\.\./shared\b|\bshared/data\b"),
    "the development workspace": re.compile(r"(?<![\w.])/work/"),
    "a home directory": re.compile(r"(?<![\w.])(/home/|/Users/)"),
}
TEAM_DOC = re.compile(r"\bDESIGN\.md\b")  # a team document, not shipped: docs/ is what users have
# a tracker's issue numbers mean nothing in a user's clone: say what was done and why instead
TRACKER = re.compile(r"\b[Ii]ssues? #?\d+\b")
MD_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
_UP = re.compile(r"\.parent\b|\bdirname\(")
_PARENTS = re.compile(r"\.parents\[(\d+)\]")


def tracked_files() -> list[str]:
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [p for p in out.split("\0") if p and (ROOT / p).is_file()]  # a deletion not yet committed is gone


def levels_up(line: str) -> int:
    """How many directories above a file `line` climbs from its `__file__` (1 = the file's own folder)."""
    if "__file__" not in line:
        return 0
    return len(_UP.findall(line)) + sum(int(k) + 1 for k in _PARENTS.findall(line))


def outside_paths(rel: str, text: str) -> list[str]:
    """'rel:line: why' for every place `text` (the file at `rel`) names a path outside the repository."""
    depth = len(Path(rel).parts) - 1  # folders between the repository root and the file
    found = []
    for i, line in enumerate(text.splitlines(), 1):
        found += [f"{rel}:{i}: {why}" for why, pat in OUTSIDE.items() if pat.search(line)]
        if levels_up(line) > depth + 1:
            found.append(f"{rel}:{i}: climbs {levels_up(line)} folders from __file__, above the repository root")
        if rel.endswith(".md"):
            for target in MD_LINK.findall(line):
                if re.match(r"[a-z]+:", target):  # https:, mailto:
                    continue
                resolved = (ROOT / rel).parent / target
                if not resolved.resolve().is_relative_to(ROOT):
                    found.append(f"{rel}:{i}: link {target!r} leaves the repository")
                elif not resolved.exists():
                    found.append(f"{rel}:{i}: link {target!r} points at nothing")
    return found


def text_of(rel: str) -> str | None:
    data = (ROOT / rel).read_bytes()
    if b"\0" in data:  # weights and other binaries
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def test_the_checks_catch_outside_paths():
    """The scanner itself, on planted lines: each kind is caught, the repository's own paths are not."""
    bad = ('DATA = "../shared/data/math500.jsonl"\n'
           'p = "/work/main/x"\n'
           'h = "/home/someone/data"\n'
           'D = Path(__file__).resolve().parents[2] / "shared"\n'
           'R = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))\n')
    found = outside_paths("tests/test_x.py", bad)
    assert [f.split(": ", 1)[0] for f in found] == [f"tests/test_x.py:{i}" for i in (1, 2, 3, 4, 5)], found
    good = ('ROOT = Path(__file__).resolve().parents[1]\n'
            'ROOT = Path(__file__).parent.parent\n'
            'sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))\n'
            'x = "data/benchmarks/math500.jsonl"  # os.path.join("/tmp", "job")\n')
    assert outside_paths("tests/test_x.py", good) == []
    assert outside_paths("nanogrpo/x.py", "D = Path(__file__).resolve().parents[2]\n")  # above the root from there
    links = "[ok](../nanogrpo/grpo.py) [out](../../elsewhere.md) [gone](missing.md) [web](https://x.org/a.md)\n"
    assert [f.split(": ", 1)[1] for f in outside_paths("docs/x.md", links)] == [
        "link '../../elsewhere.md' leaves the repository", "link 'missing.md' points at nothing"]
    assert TEAM_DOC.findall("the code schema (DESIGN.md)") and not TEAM_DOC.findall("docs/data.md")
    assert [TRACKER.search(t) is not None for t in ("fixed in issue 12", "see Issue #7", "issues 10 and 11",
                                                    "an issue with 12 rows", "tissue 3")] == [True, True, True, False, False]


@pytest.mark.slow
def test_no_tracked_file_names_a_path_outside_the_repository():
    found, team_doc, tracker = [], {}, {}
    for rel in tracked_files():
        text = text_of(rel)
        if text is None or rel == "tests/test_standalone.py":
            continue
        found += outside_paths(rel, text)
        team_doc.update({rel: TEAM_DOC.findall(text)} if TEAM_DOC.search(text) else {})
        tracker.update({rel: TRACKER.findall(text)} if TRACKER.search(text) else {})
    assert found == []
    assert team_doc == {}, f"DESIGN.md is not shipped; point at docs/ instead: {team_doc}"
    assert tracker == {}, f"issue numbers of a tracker users cannot see: {tracker}"


@pytest.mark.slow  # a fresh interpreter loads torch and the model, then generates for 8 problems: ~15 s
def test_a_bare_copy_of_the_repository_evaluates_the_math_benchmarks_offline(tmp_path):
    """The tracked files alone, in a folder with nothing beside it, an empty HF cache and no network:
    eval.py loads the four committed benchmarks, generates and scores every sample."""
    clone = tmp_path / "clone"
    for rel in tracked_files():
        (clone / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, clone / rel)
    # The committed tiny model's context (512) is shorter than an AIME prompt under the math template (850
    # tokens): a copy with a longer context, in runs/ (ignored by git) inside the clone.
    model = clone / "runs" / "tiny-long"
    shutil.copytree(clone / "models" / "tiny-arithmetic", model)
    cfg = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": 4096}))

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PYTHON", "NANOGRPO_"))}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    out = tmp_path / "out" / "results.json"
    res = subprocess.run([sys.executable, "eval.py", "--model", "runs/tiny-long", "--tasks", ",".join(MATH_TASKS),
                          "--limit", "2", "--n", "1", "--max-new-tokens", "8", "--device", "cpu",
                          "--sampler", "torch", "--out", str(out)],
                         cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]

    tasks = json.loads(out.read_text())["tasks"]
    assert list(tasks) == list(MATH_TASKS)
    for name, t in tasks.items():
        assert t["problems"] == 2 and t["n"] == 1 and set(t["metrics"]) == {"pass@1:n=1"}, (name, t)
        assert t["source"] == str(clone / "data" / "benchmarks"), t["source"]  # the copy's own files
    samples = [json.loads(line) for line in out.with_suffix(".samples.jsonl").read_text().splitlines()]
    golds = {(s["task"], s["answer"]) for s in samples}
    assert {("aime24", "204"), ("aime24", "113"), ("amc23", "27"), ("amc23", "36"), ("gsm8k", "18"),
            ("gsm8k", "3")} <= golds and len([g for g in golds if g[0] == "math500"]) == 2
    assert len(samples) == 8 and all(s["reward"] in (0.0, 1.0) for s in samples)  # every sample scored
    assert "| gsm8k | 2 | pass@1:n=1 |" in res.stdout
