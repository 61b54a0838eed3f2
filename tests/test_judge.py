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
@pytest.mark.slow
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
def test_call_mode_takes_json_object_arguments_as_dicts(pool):
    # the arguments are the test's JSON as written: an object is a dict (it once went through the tagged decoder
    # and raised KeyError, so no program could pass such a test)
    p = call("get", [([{"a": 1, "b": [2]}, "b"], [2]), ([{"__t": "x"}, "__t"], "x")])
    assert reward(pool, "def get(d, k):\n    return d[k]", p) == 1.0
    assert reward(pool, "def get(d, k):\n    return None", p) == 0.0


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
@pytest.mark.slow
def test_verdict_keeps_a_bounded_excerpt_of_a_20mb_output(pool):
    import sys

    v = judge_many([A.PRINT_20MB], [stdio([("", "x")], time_limit_s=5)], pool=pool)[0]
    r = v.results[0]
    assert v.reward == 0.0 and r.status == "output_limit"
    assert len(r.stdout) <= A.KEPT and len(r.stderr) <= A.KEPT and r.stdout.startswith("x") and r.stderr.startswith("y")
    assert sys.getsizeof(r.stdout) + sys.getsizeof(r.stderr) < 4 * A.KEPT  # bytes held, not 14 MB
    v = judge_many([A.PRINT_20MB], [stdio([("", "x")], time_limit_s=5)], pool=pool, kept_output_chars=100)[0]
    assert len(v.results[0].stdout) <= 100


@pytest.mark.slow
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
@pytest.mark.slow
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


# -- assert mode: the checks run in executions of their own, the program never next to them ------------------
@needs_sandbox
@pytest.mark.parametrize("name", list(A.READ_CHECKS))
def test_a_program_that_reads_its_checks_scores_zero(pool, name):
    """The test file in its directory, its caller's source line or bytecode, the collector, its globals, its
    memory, its environment: all scored 1 when the checks ran in the program's process (all but the last two;
    environment and argv never held them). A right program still passes the same problem."""
    p = asserting(A.READ_CHECKS_TEST)
    assert [v.reward for v in judge_many([A.READ_CHECKS[name], A.ADD_RIGHT], [p, p], pool=pool)] == [0.0, 1.0]


@needs_sandbox
def test_modules_planted_for_the_checks_process_are_not_imported(pool):
    assert reward(pool, A.POISON_CHECKS, asserting()) == 0.0
    assert reward(pool, A.ADD_RIGHT, asserting()) == 1.0  # the same slot, after the planted files


INC = "def add(a):\n    return a + 1\n"
INC_WRONG = "def add(a):\n    return a + 2 if a > 3 else a + 1\n"


@needs_sandbox
@pytest.mark.parametrize("test", [
    # each call's argument is the last call's answer: one call per turn, 6 turns
    "def check(candidate):\n    x = 0\n    for _ in range(6):\n        x = candidate(x)\n    assert x == 6\n",
    # asserts a placeholder cannot pass (`not`, `is`, isinstance), then the calls after them
    "def check(candidate):\n    assert type(candidate(1)) is int\n    assert not candidate(-1)\n"
    "    assert isinstance(candidate(2), int)\n    assert candidate(4) == 5\n",
    # a loop that waits for an answer to change: discovery gives up on it, the real answers end it
    "def check(candidate):\n    r = candidate(0)\n    while r < 10:\n        r = r + 1\n    assert candidate(4) == 5\n",
    # the checks swallow every exception around a call, the signal of an unanswered one included
    "def check(candidate):\n    try:\n        y = candidate(4)\n    except:\n        y = 5\n    assert y == 5\n",
    # a helper of the problem's own, from its starter code, around the calls
    "def check(candidate):\n    assert twice(candidate(2)) == 6\n    assert candidate(twice(2)) == 5\n",
])
def test_assert_mode_follows_checks_whose_calls_depend_on_answers(pool, test):
    p = {**asserting(test), "starter_code": "def twice(x):\n    return 2 * x\n"}
    assert [v.reward for v in judge_many([INC, INC_WRONG], [p, p], pool=pool)] == [1.0, 0.0]


@pytest.mark.slow
@needs_sandbox
def test_the_programs_turns_share_one_time_limit(pool):
    """Six calls, each needing the last one's answer (six turns), 0.5 s of CPU each, under a 2 s limit: a timeout,
    as in one execution; the same calls made at once pass."""
    spin = "import time\ndef add(a):\n    t = time.process_time()\n    while time.process_time() - t < 0.5:\n" \
           "        pass\n    return a + 1\n"
    chained = asserting("def check(candidate):\n    x = 0\n    for _ in range(6):\n        x = candidate(x)\n")
    at_once = asserting("def check(candidate):\n    assert [candidate(x) for x in range(3)] == [1, 2, 3]\n")
    vs = judge_many([spin, spin], [chained, at_once], pool=pool)
    assert [(v.reward, v.status) for v in vs] == [(0.0, "timeout"), (1.0, "passed")]


@needs_sandbox
def test_assert_mode_without_calls_still_loads_the_program(pool):
    """Checks that never call the program pass it only if it loads; checks that fail on their own fail all."""
    never = asserting("def check(candidate):\n    assert 1 + 1 == 2\n")
    broken = asserting("def check(candidate):\n    assert 1 / 0\n    assert candidate(1, 2) == 3\n")
    vs = judge_many([A.ADD_RIGHT, "raise ValueError\n" + A.ADD_RIGHT, A.ADD_RIGHT], [never, never, broken], pool=pool)
    assert [(v.reward, v.status) for v in vs] == [(1.0, "passed"), (0.0, "runtime_error"), (0.0, "wrong_answer")]


@needs_sandbox
def test_assert_mode_rows_in_the_other_forms(pool):
    """A Code-R1 functional row (a Solution method; its trailing check(...) call named the entry point) and checks
    that call the function by name as well as through `candidate` (HumanEval/33, MBPP-style asserts)."""
    from nanogrpo.tasks.convert import from_code_r1

    functional = "def check(candidate):\n    assert candidate([1, 9]) == [2, 0]\n\ncheck(Solution().plusOne)\n"
    row = from_code_r1({"id": "r", "prompt": "p", "reward_model": {"ground_truth": json.dumps({"functional": functional})}})
    right = ("class Solution:\n    def plusOne(self, d):\n        n = int(''.join(map(str, d))) + 1\n"
             "        return [int(c) for c in str(n)]\n")
    by_name = asserting("def check(candidate):\n    assert add(1, 2) == 3\n    assert candidate(2, 2) == 4\n")
    vs = judge_many([right, right.replace("+ 1", "+ 2"), A.ADD_RIGHT, "def add(a, b):\n    return 3\n"],
                    [row, row, by_name, by_name], pool=pool)
    assert [v.reward for v in vs] == [1.0, 0.0, 1.0, 0.0]


@needs_sandbox
def test_the_checks_first_calls_are_found_once_per_problem(pool, monkeypatch):
    """A group of 8 programs for one problem: one execution finds the checks' first calls, then two per program
    (the program on them, the checks on its answers); the others wait for the first instead of finding them too."""
    from nanogrpo.sandbox import pool as pool_module

    execs, real = [], pool_module.Session.exec

    async def counted(self, spec):
        execs.append(spec.argv[-1])
        return await real(self, spec)

    monkeypatch.setattr(pool_module.Session, "exec", counted)
    p = asserting(ADD_TEST + "# a problem of its own\n")
    vs = judge_many([A.ADD_RIGHT] * 7 + ["def add(a, b):\n    return a * b\n"], [p] * 8, pool=pool)
    assert [v.reward for v in vs] == [1.0] * 7 + [0.0]
    assert sorted(execs) == ["calls"] * 8 + ["checks"] * 9


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
