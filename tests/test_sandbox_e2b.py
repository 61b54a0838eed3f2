"""The E2B backend at its boundary: a fake AsyncSandbox that runs the real runner on this machine.

Nothing here talks to the live E2B service (unreachable from CI); docs/sandbox.md says so.
"""
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from nanogrpo.sandbox import SandboxPool, judge_many


class FakeResult:
    def __init__(self, stdout, stderr, exit_code):
        self.stdout, self.stderr, self.exit_code = stdout, stderr, exit_code


class FakeSandbox:
    """Mimics e2b AsyncSandbox.create / files.write / commands.run / kill, with a local directory as
    its filesystem. `failures` is shared: the next that many commands raise like a dropped connection."""
    created, killed, failures = 0, 0, [0]

    def __init__(self, root):
        self.root, self.files, self.commands = root, self, self

    @classmethod
    async def create(cls, **kw):
        assert kw["allow_internet_access"] is False
        cls.created += 1
        root = kw.pop("_root", None) or os.path.join(cls.base, f"sbx{cls.created}")
        os.makedirs(root, exist_ok=True)
        return cls(root)

    def _local(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    async def write(self, path, data):
        os.makedirs(os.path.dirname(self._local(path)), exist_ok=True)
        with open(self._local(path), "w") as f:
            f.write(data)

    async def run(self, cmd, user=None, timeout=None, envs=None):
        if self.failures[0] > 0:
            self.failures[0] -= 1
            raise ConnectionError("fake: connection reset")
        argv = cmd.split()
        argv = [sys.executable if a == "python3" else self._local(a) if a.startswith("/tmp/nanogrpo") else a
                for a in argv]
        env = {"PATH": "/usr/bin:/bin", "NANOGRPO_JOBS_ROOT": self._local(envs["NANOGRPO_JOBS_ROOT"])}
        os.chmod(self.root, 0o755)
        p = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        out, err = await asyncio.wait_for(p.communicate(), timeout)
        return FakeResult(out.decode(), err.decode(), p.returncode)

    async def kill(self):
        type(self).killed += 1


@pytest.fixture
def fake():
    base = tempfile.mkdtemp(prefix="fake-e2b-")  # not under pytest's 0700 tmp: the program's uid must reach it
    os.chmod(base, 0o755)
    FakeSandbox.base, FakeSandbox.created, FakeSandbox.killed, FakeSandbox.failures[0] = base, 0, 0, 0
    yield FakeSandbox
    shutil.rmtree(base, ignore_errors=True)


def make_pool(fake, **kw):
    # allow_unsandboxed: the fake runs on this host, so the probe sees this host, not an E2B VM.
    return SandboxPool("e2b", concurrency=2, backoff_s=0.01, allow_unsandboxed=True, sandbox_class=fake,
                       python="python3", **kw)


PROBLEM = {"id": "x", "language": "python", "mode": "stdio", "time_limit_s": 2,
           "tests": [{"input": "2 3", "output": "5"}, {"input": "1 1", "output": "2"}]}
ADD = "a, b = map(int, input().split())\nprint(a + b)"


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the fake runs the runner as root, like E2B's user='root'")
def test_e2b_backend_judges_like_local(fake):
    pool = make_pool(fake)
    try:
        vs = judge_many([ADD, "print(5)"], [PROBLEM, PROBLEM], pool=pool)
        assert [v.reward for v in vs] == [1.0, 0.5]
        assert fake.created == 2  # one long-lived sandbox per slot, not one per program
        judge_many([ADD] * 4, [PROBLEM] * 4, pool=pool)
        assert fake.created == 2
    finally:
        pool.close()


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the fake runs the runner as root")
def test_e2b_backend_judges_assert_mode_without_showing_the_checks(fake):
    """Assert mode on E2B: the checks' request file is gone before the program's execution, which scans its
    directory and /tmp (where E2B keeps the runner's requests) for the checks. One slot: the fake's slots share
    this machine's /tmp, where E2B's are separate machines. Numbers found nowhere else on this machine."""
    import glob

    from helpers import attacks as A

    a, b = 7919, 104723
    p = A.asserting(f"def check(candidate):\n    assert candidate({a}, {b}) == {a + b}\n" + "#" * 600 + "\n")
    pool = SandboxPool("e2b", concurrency=1, backoff_s=0.01, allow_unsandboxed=True, sandbox_class=fake,
                       python="python3")
    try:
        vs = judge_many([A.ADD_RIGHT, "def add(a, b):\n    return a * b\n",
                         A.READ_CHECKS["the test file in its directory (and /tmp, /proc/self/cwd)"]], [p] * 3, pool=pool)
    finally:
        pool.close()
    assert [v.reward for v in vs] == [1.0, 0.0, 0.0]
    assert not glob.glob(os.path.join(fake.base, "*", "tmp", "nanogrpo", "req-*.json"))


@pytest.mark.skipif(os.geteuid() != 0, reason="the fake runs the runner as root")
@pytest.mark.slow
def test_e2b_error_is_retried_and_the_sandbox_recycled(fake):
    pool = make_pool(fake, retries=2)
    try:
        pool.start()
        fake.failures[0] = 1
        assert judge_many([ADD], [PROBLEM], pool=pool)[0].reward == 1.0
        assert fake.killed == 1 and fake.created == 3  # the failed sandbox was replaced
    finally:
        pool.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="the fake runs the runner as root")
def test_persistent_e2b_error_is_none_not_zero(fake):
    pool = make_pool(fake, retries=2)
    try:
        pool.start()
        fake.failures[0] = 10**6
        assert judge_many([ADD], [PROBLEM], pool=pool) == [None]
    finally:
        pool.close()


def test_missing_api_key_is_none_not_an_exception(monkeypatch):
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    pool = SandboxPool("e2b", concurrency=1, backoff_s=0.01)
    try:
        assert judge_many([ADD], [PROBLEM], pool=pool) == [None]
    finally:
        pool.close()


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the fake runs the runner as root")
def test_tool_sessions_replay_on_the_e2b_backend(fake):
    """Tool cells on E2B are the pool's replayed sessions, as on the local backend: state carries from cell to
    cell, a dropped connection is retried on a fresh sandbox, one that stays down is None (the rollout fails)."""
    from nanogrpo.sandbox.cells import ReplayCells
    from nanogrpo.tools import ToolConfig, session_after

    pool = make_pool(fake, retries=2).start()
    try:
        cells, prior, shown = ReplayCells(ToolConfig(timeout_s=2.0), pool), [], []
        for k, src in enumerate(["x = 20", "print(x + 1)", "print(x + 2)"], 1):
            if k == 3:
                fake.failures[0] = 1  # the third call's first try drops
            [res] = cells.run([(0, prior, (f"<cell {k}>", src))])
            shown.append(res.output)
            prior = session_after(prior, (f"<cell {k}>", src), res)
        assert shown == ["", "21\n", "22\n"] and fake.killed == 1
        fake.failures[0] = 100
        assert cells.run([(0, prior, ("<cell 4>", "print(x)"))]) == [None]
    finally:
        fake.failures[0] = 0
        pool.close()
