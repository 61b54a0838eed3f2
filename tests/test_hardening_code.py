"""Code execution, hardened: untrusted text read in the trainer takes linear time in bounded memory, wrong answers
score 0, a program's own failures are its own (0, not None), no ptys. The programs live in tests/helpers/attacks.py."""
import json
import random
import re
import time
import tracemalloc

import pytest

from helpers import attacks as A
from nanogrpo.sandbox import SandboxPool, extract_code, judge_many, stdio_match
from nanogrpo.sandbox.extract import ALIASES
from nanogrpo.sandbox.judge import _value_matches, values_equal
from nanogrpo.sandbox.local import bwrap_available

needs_sandbox = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap missing")


@pytest.fixture(scope="module")
def pool():
    p = SandboxPool(concurrency=1, tmp_mb=64).start()  # one slot, a small /tmp: a program can fill it quickly
    yield p
    p.close()


# -- the trainer reads untrusted text in linear time ----------------------------------------------------------
def test_extract_code_is_linear_in_unclosed_fence_openings():
    t = time.perf_counter()
    assert extract_code(A.FENCE_OPENINGS) is None  # 96 KB: 64 s with the backtracking regex
    assert time.perf_counter() - t < 2


# The rule extract_code keeps, as one regex: fine on short texts, quadratic on long ones.
FENCE = re.compile(r"^[ \t]*```[ \t]*([^\s`]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.DOTALL | re.MULTILINE)


def reference(text, language, any_language):
    found = None
    for m in FENCE.finditer(text):
        if any_language or m.group(1).lower() in ALIASES[language]:
            found = m.group(2)
    return found


def test_extract_code_keeps_the_fence_rules_on_random_text():
    rng = random.Random(0)
    pieces = ["```", "```python", "``` py", "```cpp", "````", " ```", "\t```js x", "```\t", "x", "", " ", "\r", "`"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) + rng.choice(["\n", "", " ", "\n\n"]) for _ in range(rng.randint(0, 10)))
        for language in ALIASES:
            for any_language in (False, True):
                assert extract_code(text, language, any_language) == reference(text, language, any_language), text


def test_a_forged_set_of_ints_that_hash_alike_is_judged_in_linear_time():
    values = [(2**61 - 1) * i for i in range(1, 88001)]  # as A.COLLIDING_SET forges them
    payload = json.loads(json.dumps({"value": {"__t": "set", "v": values}}))  # 2.2 MB
    t = time.perf_counter()
    assert _value_matches(payload, json.dumps(values)) is False  # 88 s when the trainer built the set
    assert time.perf_counter() - t < 2


def test_an_8mb_stdio_line_against_one_token_is_wrong_unread():
    output = "1 " * ((4 << 20) - 1)
    tracemalloc.start()
    t = time.perf_counter()
    try:
        assert stdio_match(output, "1") is False
        took, (_, peak) = time.perf_counter() - t, tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert took < 1 and peak < 64 << 20, (took, peak >> 20)  # 1.7-3.9 s and 524 MB tokenised whole
    assert stdio_match("1.000000  2.50  \n", "1 2.5") and stdio_match("\n".join(["7"] * 1000), "\n".join(["7"] * 1000))
    assert not stdio_match("\n" * 10 + "1\n2", "1")


@pytest.mark.parametrize("got,want,equal", [
    ({"__t": "dict", "v": [["b", 2.5], ["a", {"__t": "tuple", "v": [1, 2]}]]}, {"a": [1, 2], "b": 2.5}, True),
    ({"__t": "dict", "v": [[1, 1]]}, {"1": 1}, False),                     # JSON keys are strings
    ({"__t": "dict", "v": [["a", 1], ["a", 1]]}, {"a": 1, "b": 1}, False),  # a forged duplicate key
    ({"__t": "set", "v": [1]}, [1], False),
    ({"__t": "float", "v": "inf"}, float("inf"), True),
    ([[[[1]]]], [1], False),
])
def test_encoded_values_compare_against_json_without_decoding(got, want, equal):
    assert values_equal(got, want) is equal


# -- assert mode replays what the program did to its arguments, and its exceptions' types ---------------------
@needs_sandbox
def test_assert_mode_replays_side_effects_on_the_arguments(pool):
    nested = ("def check(candidate):\n    a = [[3, 1], [2]]\n    inner = a[0]\n    candidate(a)\n"
              "    assert inner == [1, 3] and a == [[1, 3], [2]]\n")
    sort_each = "def add(a):\n    for x in a:\n        x.sort()\n"
    vs = judge_many([A.SORT_IN_PLACE, A.SORT_IN_PLACE, sort_each, "def add(a):\n    return sorted(a)"],
                    [A.asserting(A.SORT_CHECK_UNTOUCHED), A.asserting(A.SORT_IN_PLACE_CHECK),
                     A.asserting(nested), A.asserting(A.SORT_CHECK_UNTOUCHED)], pool=pool)
    assert [v.reward for v in vs] == [0.0, 1.0, 1.0, 1.0]


@needs_sandbox
def test_assert_mode_replays_the_exception_type(pool):
    own = "class Negative(ValueError):\n    pass\n" + A.RAISES.replace("ValueError('negative')", "Negative()")
    wrong_type = A.RAISES.replace("ValueError", "TypeError")
    vs = judge_many([A.RAISES, own, wrong_type], [A.asserting(A.RAISES_CHECK)] * 3, pool=pool)
    assert [v.reward for v in vs] == [1.0, 1.0, 0.0]


# -- a program's own failures are its own ---------------------------------------------------------------------
@needs_sandbox
def test_a_program_that_fills_tmp_scores_zero_not_none(pool):
    problem = {**A.call("add", [1, 2], 3, tl=5), "tests": [{"input": "[1, 2]", "output": "3"}] * 2}
    wrong, right = judge_many([A.FILL_TMP, A.ADD_RIGHT_CALL], [problem] * 2, pool=pool)
    assert wrong is not None and wrong.reward == 0.0 and wrong.results[1].status == "runtime_error", wrong
    assert right is not None and right.reward == 1.0  # the slot's next job has its /tmp back


@pytest.mark.slow
@needs_sandbox
def test_processes_queued_on_one_cpu_before_each_deadline_are_a_timeout_not_none(pool):
    """Their run-queue waits added up read as a program starved by load: stretched three times, then None (20 s
    here, 124 s at the default limit)."""
    t = time.monotonic()
    v = judge_many([A.spin_before_deadlines(5)], [A.stdio(tl=2)], pool=pool, wall_factor=2.0)[0]  # backstop 5 s
    assert v is not None and v.status == "timeout", v
    assert time.monotonic() - t < 12


# -- no ptys ----------------------------------------------------------------------------------------------------
@needs_sandbox
def test_ptys_are_refused(pool):
    v = judge_many([A.PTYS], [A.stdio()], pool=pool)[0]
    assert A.out(v).startswith("ptys 0 seen []"), A.out(v)
