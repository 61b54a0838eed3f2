"""Converters from the common code datasets into the one code schema (docs/data.md).

Tests in the schema: stdio: stdin / expected stdout text. call: `input` is a JSON array of arguments,
`output` the JSON of the expected value. assert: one test whose `input` is the test code defining
`check(candidate)` (HumanEval style) and `output` is "".
"""
import ast
import base64
import io
import json
import pickle
import zlib

from nanogrpo.sandbox.extract import extract_code
from nanogrpo.sandbox.judge import validate_problem


def _loads(v):
    return json.loads(v) if isinstance(v, str) else v


def _row(pid, problem, language, mode, tests, fn_name="", starter_code="", solution=None,
         time_limit_s=6, memory_limit_mb=1024) -> dict:
    row = {"id": str(pid), "problem": problem, "language": language, "mode": mode, "fn_name": fn_name,
           "starter_code": starter_code, "tests": tests, "time_limit_s": time_limit_s,
           "memory_limit_mb": memory_limit_mb}
    if solution:
        row["solution"] = solution
    validate_problem(row)
    return row


def _text(v) -> str:
    if isinstance(v, list):  # some datasets store stdin as a list of lines
        return "\n".join(str(x) for x in v) + "\n"
    return v if isinstance(v, str) else json.dumps(v)


# -- open-r1 / PrimeIntellect verification_info ----------------------------------------------------
def from_verification_info(row: dict) -> dict:
    info = _loads(row["verification_info"])
    lang = {"python3": "python", "py": "python", "c++": "cpp", "js": "javascript"}.get(
        info.get("language", "python"), info.get("language", "python"))
    cases = info.get("test_cases") or []
    kinds = {c.get("type", "stdin_stdout") for c in cases}
    if kinds == {"stdin_stdout"}:
        mode, tests, fn = "stdio", [{"input": _text(c["input"]), "output": _text(c["output"])} for c in cases], ""
    elif kinds == {"function_call"}:
        fn = cases[0].get("fn_name") or info.get("fn_name", "")
        mode = "call"
        tests = [{"input": json.dumps(_loads(c["input"])), "output": json.dumps(_unwrap(_loads(c["output"])))}
                 for c in cases]
    else:
        raise ValueError(f"row {row.get('problem_id', '?')}: unsupported test types {sorted(kinds)}")
    gold = row.get("gold_standard_solution") or row.get("solution")
    if gold and "```" in gold:
        gold = extract_code(gold, lang, any_language=True)
    return _row(row.get("problem_id") or row.get("id", ""), row.get("prompt") or row.get("problem", ""),
                lang, mode, tests, fn_name=fn, solution=gold)


def _unwrap(v):
    """PrimeIntellect / APPS store a function's expected value wrapped in a one-element list."""
    return v[0] if isinstance(v, list) and len(v) == 1 else v


# -- Code-R1 (reward_model.ground_truth: functional test code, or inputs + outputs) -------------
def from_code_r1(row: dict) -> dict:
    gt = _loads((row.get("reward_model") or {}).get("ground_truth") or row.get("ground_truth"))
    prompt = row.get("prompt")
    if isinstance(prompt, list):  # chat messages
        prompt = "\n".join(m.get("content", "") for m in prompt if m.get("role") == "user")
    pid = row.get("id") or (row.get("extra_info") or {}).get("index", "")
    if "functional" in gt:
        test, entry = _split_functional(gt["functional"])
        return _row(pid, prompt or "", "python", "assert", [{"input": test, "output": ""}], fn_name=entry)
    ins, outs = gt["inputs"], gt["outputs"]
    if len(ins) != len(outs):
        raise ValueError(f"row {pid}: {len(ins)} inputs but {len(outs)} outputs")
    if gt.get("fn_name"):
        tests = [{"input": json.dumps(i), "output": json.dumps(_unwrap(o))} for i, o in zip(ins, outs)]
        return _row(pid, prompt or "", "python", "call", tests, fn_name=gt["fn_name"])
    tests = [{"input": _text(i), "output": _text(o)} for i, o in zip(ins, outs)]
    return _row(pid, prompt or "", "python", "stdio", tests)


def _split_functional(code: str) -> tuple[str, str]:
    """Code-R1 functional tests end with `check(Solution().method)` or `check(fn)`: drop that call
    (the harness calls check itself) and return the entry point it named ("Solution.method" or "fn")."""
    tree = ast.parse(code)
    entry, body = None, []
    for node in tree.body:
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", None) == "check" and node.value.args):
            arg = node.value.args[0]
            if isinstance(arg, ast.Attribute):  # Solution().method
                entry = arg.attr
            elif isinstance(arg, ast.Name):
                entry = arg.id
            continue
        body.append(node)
    if entry is None:
        raise ValueError("functional test code has no top-level check(...) call naming the entry point")
    return ast.unparse(ast.Module(body=body, type_ignores=[])) + "\n", entry


# -- LiveCodeBench ---------------------------------------------------------------------------------
class _NoGlobals(pickle.Unpickler):
    """Unpickles plain data only: any class or function reference (the way pickles run code) is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a dataset pickle")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refusing persistent ids in a dataset pickle")


def decode_lcb_private(blob: str | list, max_bytes: int = 1 << 30) -> list[dict]:
    """LiveCodeBench private tests: JSON, or base64(zlib(pickle(json string))), decoded without running code."""
    if isinstance(blob, list):  # exports that stored the tests as JSON already
        return blob
    try:
        return json.loads(blob)
    except ValueError:
        pass
    z = zlib.decompressobj()
    raw = z.decompress(base64.b64decode(blob), max_bytes)
    if z.unconsumed_tail:
        raise ValueError(f"private tests decompress to more than {max_bytes} bytes")
    obj = _NoGlobals(io.BytesIO(raw)).load()
    if isinstance(obj, bytes):
        obj = obj.decode()
    return json.loads(obj) if isinstance(obj, str) else obj


def _lcb_call_input(text: str) -> str:
    # One JSON value per line, one line per argument.
    return json.dumps([json.loads(line) for line in text.strip().split("\n") if line.strip()])


def from_livecodebench(row: dict, private: bool = True) -> dict:
    tests = list(_loads(row["public_test_cases"]))
    if private and row.get("private_test_cases"):
        tests += decode_lcb_private(row["private_test_cases"])
    meta = _loads(row.get("metadata") or "{}")
    if any(t.get("testtype") == "functional" for t in tests):
        rows = [{"input": _lcb_call_input(t["input"]), "output": json.dumps(json.loads(t["output"]))} for t in tests]
        mode, fn = "call", meta.get("func_name", "")
    else:
        rows, mode, fn = [{"input": t["input"], "output": t["output"]} for t in tests], "stdio", ""
    return _row(row.get("question_id", ""), row.get("question_content", ""), "python", mode, rows,
                fn_name=fn, starter_code=row.get("starter_code", ""))


# -- HumanEval ---------------------------------------------------------------------------------
def from_humaneval(row: dict) -> dict:
    return _row(row["task_id"], row["prompt"], "python", "assert", [{"input": row["test"], "output": ""}],
                fn_name=row["entry_point"], starter_code=row["prompt"],
                solution=row["prompt"] + row["canonical_solution"])


def to_schema(row: dict) -> dict:
    """Detect the form of a row and convert it (a row already in the schema is validated and kept)."""
    if "verification_info" in row:
        return from_verification_info(row)
    if "public_test_cases" in row:
        return from_livecodebench(row)
    if "canonical_solution" in row and "entry_point" in row:
        return from_humaneval(row)
    if "reward_model" in row or "ground_truth" in row:
        return from_code_r1(row)
    if "tests" in row:
        validate_problem(row)
        return row
    raise ValueError(f"unrecognised code row (keys: {sorted(row)[:12]})")
