"""Judging: the verdict rules, and the tricks a program could use to pass without being right."""
import json

import pytest

from helpers import attacks as A
from nanogrpo.sandbox import SandboxPool, code_rewards, extract_code, judge_many, stdio_match, validate_problem
from nanogrpo.sandbox.judge import _value_matches, excerpt, values_equal
from nanogrpo.sandbox.local import bwrap_available

needs_sandbox = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap missing")


@pytest.fixture(scope="module")
def pool():
    p = SandboxPool(concurrency=2).start()
    yield p
    p.close()


def stdio(tests, **kw):
    return {"id": "s", "language": "python", "mode": "stdio", "time_limit_s": 2,
            "tests": [{"input": i, "output": o} for i, o in tests], **kw}


def call(fn_name, tests, **kw):
    return {"id": "c", "language": "python", "mode": "call", "fn_name": fn_name, "time_limit_s": 2,
            "tests": [{"input": json.dumps(a), "output": json.dumps(o)} for a, o in tests], **kw}


ADD_TEST, asserting = A.ADD_TEST, A.asserting


def reward(pool, code, problem, **opts):
    return judge_many([code], [problem], pool=pool, **opts)[0].reward


# -- stdio comparison rules (pure) -----------------------------------------------------------
@pytest.mark.parametrize("out,exp", [("1 2\n", "1 2"), ("  1 2  \n\n", "1 2\n"), ("a\r\nb\r\n", "a\nb"),
                                     ("1.0 2.50\n", "1 2.5"), ("3\n", "3.000"), ("1e2", "100")])
def test_stdio_match_accepts_whitespace_and_decimal_equivalents(out, exp):
    assert stdio_match(out, exp)


@pytest.mark.parametrize("out,exp", [("1\n", "1\n2"), ("1\n2\n3", "1\n2"), ("1 2", "12"), ("1.0001", "1"),
                                     ("abc", "abd"), ("1 2 3", "1 2"), ("", "0")])
def test_stdio_match_rejects_different_output(out, exp):
    assert not stdio_match(out, exp)


def test_validate_problem_names_the_defect():
    with pytest.raises(ValueError, match="fn_name"):
        validate_problem(call("", [([1], 1)]))
    with pytest.raises(ValueError, match="language"):
        validate_problem(stdio([("", "")], language="rust"))


# -- extraction --------------------------------------------------------------------------------
def test_extract_takes_the_last_block_in_the_language():
    text = "```python\nA\n```\nthen\n```cpp\nB\n```\n```py\nC\n```\n```python\nD"  # last one unclosed
    assert extract_code(text, "python") == "C\n"
    assert extract_code(text, "cpp") == "B\n"
    assert extract_code(text, "javascript") is None
    assert extract_code("no code here", "python") is None


@needs_sandbox
def test_completion_without_code_is_a_real_zero(pool):
    assert code_rewards(["I think the answer is 3"], [stdio([("", "3")])], pool=pool) == [0.0]


# -- stdio -------------------------------------------------------------------------------------
@needs_sandbox
@pytest.mark.parametrize("read", [
    "a, b = map(int, input().split())",
    "import sys\na, b = map(int, sys.stdin.read().split())",
    "import sys\na, b = map(int, sys.stdin.buffer.read().split())",
    "import sys\na, b = map(int, sys.stdin.readline().split())",
    "import sys\na, b = [int(x) for line in sys.stdin for x in line.split()]",
    "import sys\na, b = map(int, sys.stdin.buffer.readline().split())",
    "import sys\na, b = map(int, open(0).read().split())",
])
def test_every_common_way_of_reading_stdin_works(pool, read):
    assert reward(pool, read + "\nprint(a + b)", stdio([("2 3\n", "5\n"), ("10 -4", "6")])) == 1.0


@needs_sandbox
def test_printing_a_prefix_of_the_expected_lines_fails(pool):
    assert reward(pool, "print(1)\nprint(2)", stdio([("", "1\n2\n3\n")])) == 0.0


@needs_sandbox
def test_reward_is_the_fraction_of_tests_passed(pool):
    p = stdio([("1", "1"), ("2", "2"), ("3", "4"), ("4", "4")])
    assert reward(pool, "print(input())", p) == 0.75
    assert reward(pool, "print(input())", p, binary=True) == 0.0
    v = judge_many(["print(input())"], [p], pool=pool, stop_at_first_failure=True)[0]
    assert v.reward == 0.5 and len(v.results) == 3


@needs_sandbox
def test_correct_output_with_nonzero_exit_fails(pool):
    assert reward(pool, "print(5)\nraise SystemExit(3)", stdio([("", "5")])) == 0.0


@needs_sandbox
def test_cpp_compiles_once_and_passes(pool):
    code = "#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}"
    v = judge_many([code], [stdio([("2 3", "5"), ("7 8", "15")], language="cpp", time_limit_s=5)], pool=pool)[0]
    assert v.reward == 1.0 and len(v.results) == 2


@needs_sandbox
def test_cpp_compile_error_is_zero(pool):
    v = judge_many(["int main( { return 0; }"], [stdio([("", "")], language="cpp")], pool=pool)[0]
    assert v.reward == 0.0 and v.status == "compile_error"


@needs_sandbox
def test_javascript_runs_under_node(pool):
    code = ("const s = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(Number);\n"
            "console.log(s[0] + s[1]);")
    p = stdio([("2 3", "5"), ("1 1", "2")], language="javascript", memory_limit_mb=256)  # V8 needs room
    assert reward(pool, code, p) == 1.0
    assert reward(pool, "console.log(0)", p) == 0.0


# -- call mode ---------------------------------------------------------------------------------
@needs_sandbox
def test_call_mode_function_and_solution_method(pool):
    p = call("add", [([1, 2], 3), ([[1], [2]], [1, 2])])
    assert reward(pool, "def add(a, b):\n    return a + b", p) == 1.0
    assert reward(pool, "class Solution:\n    def add(self, a, b):\n        return a + b", p) == 1.0
    assert reward(pool, "def add(a, b):\n    return a - b", p) == 0.0


@needs_sandbox
def test_call_mode_tuple_equals_list_and_bool_is_not_int(pool):
    assert reward(pool, "def f(a):\n    return (a, a)", call("f", [([1], [1, 1])])) == 1.0
    assert reward(pool, "def f(a):\n    return True", call("f", [([1], 1)])) == 0.0


@pytest.mark.parametrize("got,want", [(123456789013, 123456789012), (10**18 + 999_999_999, 10**18),
                                      (2**1100 + 1, 2**1100), ([1, [2, 10**20 + 1]], [1, [2, 10**20]])])
def test_call_mode_integers_compare_exactly(got, want):
    assert not values_equal(got, want) and values_equal(want, want)


@pytest.mark.parametrize("got,want", [(0.1 + 0.2, 0.3), (3, 3.0), (10**18, 1e18)])
def test_call_mode_an_expected_float_keeps_a_tolerance(got, want):
    assert values_equal(got, want)


@pytest.mark.parametrize("got,want,equal", [(123456789013.0, 123456789012, False), (1e18, 10**18 + 1, False),
                                            ((0.1 + 0.2) * 10, 3, False), (123456789012.0, 123456789012, True),
                                            (3.0, 3, True)])
def test_call_mode_an_expected_integer_compares_exactly_with_a_float_too(got, want, equal):
    """A float passes for an expected integer only when it is exactly that integer."""
    assert values_equal(got, want) is equal


@pytest.mark.parametrize("got,want", [(2**1100, 1.5), (1.5, 2**1100), (10**400, float("inf")), (-(10**400), -1e308)])
def test_comparing_an_int_past_the_float_range_with_a_float_is_false_not_an_error(got, want):
    assert values_equal(got, want) is False


@pytest.mark.parametrize("payload", [{"value": {"__t": "complex", "v": [10**400, 0]}}, {"value": {"__t": "set", "v": [[1]]}},
                                     {"value": {"__t": "bytes", "v": 5}}, {"nothing": 1}, {"value": {"__t": "tuple"}}])
def test_a_payload_that_cannot_be_decoded_or_compared_is_simply_wrong(payload):
    assert _value_matches(payload, "0") is False


@needs_sandbox
@pytest.mark.parametrize("name,prog,want", A.WRONG_NUMBERS, ids=[w[0] for w in A.WRONG_NUMBERS])
def test_wrong_numbers_score_zero_never_none(pool, name, prog, want):
    v = judge_many([prog], [call("f", [([], want)])], pool=pool)[0]
    assert v is not None and v.reward == 0.0 and v.status == "wrong_answer"
    assert reward(pool, f"def f():\n    return {want!r}", call("f", [([], want)])) == 1.0  # the right value passes


# -- what a Verdict keeps of the outputs -------------------------------------------------------
def test_excerpt_keeps_head_and_tail_within_the_bound():
    text = "".join(f"{i}\n" for i in range(100_000))
    e = excerpt(text, 4096)
    assert len(e) <= 4096 and e.startswith("0\n1\n") and e.endswith("99999\n") and str(len(text)) in e
    assert excerpt("short", 4096) == "short"


@needs_sandbox
def test_verdict_keeps_a_bounded_excerpt_of_a_20mb_output(pool):
    import sys

    v = judge_many([A.PRINT_20MB], [stdio([("", "x")], time_limit_s=5)], pool=pool)[0]
    r = v.results[0]
    assert v.reward == 0.0 and r.status == "output_limit"
    assert len(r.stdout) <= A.KEPT and len(r.stderr) <= A.KEPT and r.stdout.startswith("x") and r.stderr.startswith("y")
    assert sys.getsizeof(r.stdout) + sys.getsizeof(r.stderr) < 4 * A.KEPT  # bytes held, not 14 MB
    v = judge_many([A.PRINT_20MB], [stdio([("", "x")], time_limit_s=5)], pool=pool, kept_output_chars=100)[0]
    assert len(v.results[0].stdout) <= 100


@needs_sandbox
def test_the_whole_output_is_compared_before_it_is_cut(pool):
    """3 MB of stdio output and a 300,000-element call-mode value: one wrong element in the middle (far from
    the kept head and tail) still fails, and the right answers pass."""
    n = 400_000
    want = "\n".join(map(str, range(n)))
    right = f"print('\\n'.join(map(str, range({n}))))"
    wrong = f"r = list(map(str, range({n})))\nr[{n // 2}] = '-1'\nprint('\\n'.join(r))"
    vs = judge_many([right, wrong], [stdio([("", want)], time_limit_s=5)] * 2, pool=pool)
    assert [v.reward for v in vs] == [1.0, 0.0]
    p = call("f", [([], list(range(300_000)))], time_limit_s=5)
    vs = judge_many(["def f():\n    return list(range(300_000))",
                     "def f():\n    r = list(range(300_000))\n    r[150_000] = -1\n    return r"], [p, p], pool=pool)
    assert [v.reward for v in vs] == [1.0, 0.0]
    assert all(len(r.stdout) <= A.KEPT for v in vs for r in v.results)


@needs_sandbox
def test_custom_eq_cannot_pass_call_mode(pool):
    assert reward(pool, A.CUSTOM_EQ_CALL, call("add", [([1, 2], 3)])) == 0.0


@needs_sandbox
@pytest.mark.parametrize("trick", A.EARLY_EXITS_CALL)
def test_exiting_early_cannot_pass_call_mode(pool, trick):
    assert reward(pool, f"{trick}\ndef add(a, b):\n    return a + b", call("add", [([1, 2], 3)])) == 0.0


# -- assert mode -------------------------------------------------------------------------------
@needs_sandbox
def test_assert_mode_passes_right_and_fails_wrong(pool):
    assert reward(pool, "def add(a, b):\n    return a + b", asserting()) == 1.0
    assert reward(pool, "def add(a, b):\n    return a * b", asserting()) == 0.0


@needs_sandbox
@pytest.mark.parametrize("trick", A.EARLY_EXITS_ASSERT)
def test_exit_before_asserts_fails(pool, trick):
    assert reward(pool, f"def add(a, b):\n    return 0\n{trick}", asserting()) == 0.0


@needs_sandbox
def test_custom_eq_cannot_pass_assert_mode(pool):
    assert reward(pool, A.CUSTOM_EQ_ASSERT, asserting()) == 0.0


@needs_sandbox
def test_printing_passed_or_patching_asserts_cannot_pass(pool):
    assert reward(pool, A.PATCH_ASSERTS, asserting()) == 0.0


@needs_sandbox
def test_program_randomness_does_not_shift_the_checks(pool):
    test = ("import random\ndef check(candidate):\n    for _ in range(20):\n"
            "        x = random.randint(0, 100)\n        assert candidate(x, 1) == x + 1\n")
    code = "import random\ndef add(a, b):\n    random.random()\n    return a + b"
    assert reward(pool, code, asserting(test)) == 1.0


# -- infrastructure failure is None, never 0 --------------------------------------------------
@needs_sandbox
def test_infrastructure_failure_is_none_not_zero(pool):
    p = stdio([("", "1")])
    assert code_rewards(["```python\nprint(1)\n```"], [p], pool=pool, python="/nonexistent/python3") == [None]
    assert code_rewards(["```python\nprint(1)\n```"], [p], pool=pool) == [1.0]  # the pool recovered


def test_malformed_problem_is_none_not_an_exception(pool):
    assert code_rewards(["```python\nprint(1)\n```"], [{"id": "x", "tests": []}], pool=pool) == [None]


@needs_sandbox
def test_callable_from_inside_a_running_event_loop(pool):
    import asyncio

    async def caller():  # e.g. a notebook, or an async eval harness
        return code_rewards(["```python\nprint(1)\n```"], [stdio([("", "1")])], pool=pool)

    assert asyncio.run(caller()) == [1.0]


@needs_sandbox
def test_assert_mode_tolerates_a_trailing_check_call_in_the_tests(pool):
    p = asserting(ADD_TEST + "\ncheck(add)\n")
    assert reward(pool, "def add(a, b):\n    return a + b", p) == 1.0
    assert reward(pool, "def add(a, b):\n    return a * b", p) == 0.0


@needs_sandbox
def test_cpp_program_deleting_its_binary_is_a_real_zero(pool):
    v = judge_many([A.DELETE_BINARY], [stdio([("", "5"), ("", "5")], language="cpp", time_limit_s=5)], pool=pool)[0]
    assert v is not None and v.reward == 0.5 and v.results[1].status == "runtime_error"


@needs_sandbox
@pytest.mark.parametrize("forged", A.FORGED_LINES, ids=[f[:40] for f in A.FORGED_LINES])
def test_forged_harness_line_is_a_real_zero(pool, forged):
    from nanogrpo.sandbox.harness import MARK

    v = judge_many([A.FORGED.format(mark=MARK, forged=forged)], [call("add", [([1, 2], 3)])], pool=pool)[0]
    assert v is not None and v.reward == 0.0


@needs_sandbox
def test_a_deep_directory_tree_is_cleaned_up_and_the_wrong_answer_scores_zero():
    """A wrong answer that leaves a directory tree 1,500 deep (paths past PATH_MAX) in assert mode, whose replay
    starts from a cleaned directory: 0, not None (cleanup that recursed gave up); the next execution on that slot
    runs as usual."""
    p = SandboxPool(concurrency=1).start()  # one slot: the right answer runs where the tree was left
    try:
        wrong, right = judge_many([A.DEEP_TREE, A.ADD_RIGHT], [asserting()] * 2, pool=p)
    finally:
        p.close()
    assert wrong is not None and wrong.reward == 0.0, wrong
    assert right is not None and right.reward == 1.0, right
