"""In-sandbox harness for `call` and `assert` modes (stdlib only; also imported by the judge for the codec).

The program never decides its own verdict. Its return values are encoded here into tagged JSON that
holds only plain builtin values (a custom class with `__eq__` cannot be encoded), printed after a
marker, and compared outside the sandbox. `assert` tests (HumanEval `check(candidate)`) run twice:
`record` runs the program under the checks and logs every candidate call and its encoded result;
`replay` runs the same trusted checks in a fresh sandbox WITHOUT the program, answering each call
from the log: its value or its exception's builtin type, and the state it left its arguments in. Only
the replay's outcome counts, so `exit(0)`, a custom `__eq__`, printing "passed" or patching `assert`
inside the program changes nothing.

    python3 -I harness.py call     (files: solution.py, call.json {"fn_name", "args"})
    python3 -I harness.py record   (files: solution.py, test.py, entry.json {"entry_point"})
    python3 -I harness.py replay   (files: starter.py, test.py, entry.json, record.json)
"""
import builtins
import json
import math
import os
import random
import sys

MARK = "\x1e@@NANOGRPO-RESULT@@"
_type, _list, _tuple, _dict, _set, _frozenset = type, list, tuple, dict, set, frozenset
_int, _float, _str, _bool, _bytes, _complex = int, float, str, bool, bytes, complex


def encode(v):
    """Plain builtin value -> JSON-able, exact types kept (tuple vs list, int vs float vs bool)."""
    t = _type(v)
    if v is None or t is _bool or t is _str or t is _int:
        return v
    if t is _float:
        return v if math.isfinite(v) else {"__t": "float", "v": repr(v)}
    if t is _list:
        return [encode(x) for x in v]
    if t is _tuple:
        return {"__t": "tuple", "v": [encode(x) for x in v]}
    if t is _dict:
        return {"__t": "dict", "v": [[encode(k), encode(x)] for k, x in v.items()]}
    if t is _set or t is _frozenset:
        return {"__t": t.__name__, "v": [encode(x) for x in v]}
    if t is _bytes:
        return {"__t": "bytes", "v": v.hex()}
    if t is _complex:
        return {"__t": "complex", "v": [v.real, v.imag]}
    raise TypeError(f"cannot judge a value of type {t.__name__!r} (only plain builtin values)")


def decode(v):
    """Inverse of encode; builds plain values only."""
    if isinstance(v, list):
        return [decode(x) for x in v]
    if not isinstance(v, dict):
        return v
    t, x = v["__t"], v["v"]
    if t == "float":
        return float(x)
    if t == "tuple":
        return tuple(decode(y) for y in x)
    if t == "dict":
        return {decode(k): decode(y) for k, y in x}
    if t == "set":
        return {decode(y) for y in x}
    if t == "frozenset":
        return frozenset(decode(y) for y in x)
    if t == "bytes":
        return bytes.fromhex(x)
    if t == "complex":
        return complex(*x)
    raise ValueError(f"unknown tag {t!r}")


def call_key(args, kwargs):
    return json.dumps([encode(_list(args)), encode(_dict(sorted(kwargs.items())))])


def emit(obj):
    """The one line the judge reads: after the program's own output, then leave without atexit hooks."""
    data = (json.dumps(obj) + "\n").encode()
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001  the program may have broken sys.stdout; fd 1 is what counts
        pass
    os.write(1, ("\n" + MARK).encode() + data)
    os._exit(0)


def load(name):
    with open(name) as f:
        return f.read()


def load_checks(path):
    """Test code without top-level `check(...)` calls (some datasets append one): the harness calls it."""
    import ast

    tree = ast.parse(load(path))
    tree.body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                                              and getattr(n.value.func, "id", None) == "check")]
    return compile(tree, path, "exec")


def run_module(path, ns=None):
    ns = {"__name__": "__solution__", "__builtins__": builtins} if ns is None else ns
    exec(compile(load(path), path, "exec"), ns)
    return ns


def find_callable(ns, fn_name):
    sol = ns.get("Solution")
    if isinstance(sol, _type) and hasattr(sol, fn_name):
        return getattr(sol(), fn_name)
    fn = ns.get(fn_name)
    if not callable(fn):
        raise NameError(f"no function or Solution method named {fn_name!r}")
    return fn


def main_call():
    spec = json.loads(load("call.json"))
    args = decode(spec["args"])
    ns = run_module("solution.py")
    result = find_callable(ns, spec["fn_name"])(*args)
    emit({"value": encode(result)})


def builtin_error(e):
    """The name of the nearest builtin class of the exception `e`: the program's own classes do not exist in the
    replay, and a check that expects ValueError must see one (a subclass of it is one)."""
    for cls in _type(e).__mro__:
        if getattr(builtins, cls.__name__, None) is cls:
            return cls.__name__
    return "Exception"


def answer(out, args, kwargs):
    """A logged call's effect on the checks: its arguments take their state after the call, then its exception
    (the recorded builtin type) is raised or its value returned."""
    if "after" in out:
        after_args, after_kwargs = json.loads(out["after"])
        for old, new in zip(args, decode(after_args)):
            assign(old, new)
        new_kwargs = decode(after_kwargs)
        for name, old in kwargs.items():
            assign(old, new_kwargs.get(name, old))
    if "error" in out:
        cls = getattr(builtins, str(out["error"]), None)
        if not (isinstance(cls, _type) and issubclass(cls, Exception)):  # a forged log: no other exception
            cls = RuntimeError
        try:
            error = cls()
        except Exception:  # noqa: BLE001  one that needs arguments (UnicodeDecodeError)
            error = cls.__new__(cls)
        raise error
    return decode(out["value"])


def assign(obj, new):
    """Give the list, dict or set `obj` the contents of `new` in place, keeping the identity of the containers
    inside it, which the checks may hold too; anything else cannot change in place and is left alone."""
    t = _type(obj)
    if t is not _type(new) or t not in (_list, _dict, _set):
        return
    if t is _set:
        obj.clear()
        obj.update(new)
        return
    for k in (range(min(len(obj), len(new))) if t is _list else [k for k in obj if k in new]):
        if _type(obj[k]) is _type(new[k]) and _type(obj[k]) in (_list, _dict, _set):
            assign(obj[k], new[k])
            new[k] = obj[k]
    if t is _list:
        obj[:] = new
    else:
        obj.clear()
        obj.update(new)


def main_record():
    entry = json.loads(load("entry.json"))["entry_point"]
    ns = run_module("solution.py")
    exec(load_checks("test.py"), ns)  # HumanEval: tests see the prompt's helpers
    fn, check, calls = find_callable(ns, entry), ns["check"], []

    def candidate(*args, **kwargs):
        key = call_key(args, kwargs)  # before the call: the program may mutate its arguments
        state = random.getstate()     # the program's own randomness must not shift the checks'
        try:
            out = {"value": encode(fn(*args, **kwargs))}
        except Exception as e:  # noqa: BLE001  recorded; replay raises the same builtin type in its place
            out = {"error": builtin_error(e)}
        random.setstate(state)
        try:
            after = call_key(args, kwargs)
        except TypeError:  # the program left a value in the arguments that cannot be judged
            out, after = {"error": "TypeError"}, key
        if after != key:  # side effects on the arguments: the replay gives them to the checks' objects
            out["after"] = after
        calls.append([key, out])
        return answer(out, args, kwargs)

    if entry in ns:  # some checks call the function by name too (HumanEval/33): record those calls
        ns[entry] = candidate
    random.seed(0)
    try:
        check(candidate)
    except BaseException:  # noqa: BLE001  this run's verdict is not trusted; the replay decides
        pass
    emit({"calls": calls})


def main_replay():
    entry = json.loads(load("entry.json"))["entry_point"]
    record = json.loads(load("record.json"))["calls"]
    ns = {"__name__": "__solution__", "__builtins__": builtins}
    run_module("starter.py", ns)  # trusted problem text (helpers the checks use), not the program
    exec(load_checks("test.py"), ns)
    answers: dict = {}
    for key, out in record:
        answers.setdefault(key, []).append(out)

    def replay(*args, **kwargs):
        queue = answers.get(call_key(args, kwargs))
        if not queue:
            raise AssertionError("the program was never called with these arguments")
        return answer(queue.pop(0), args, kwargs)

    ns[entry] = replay
    random.seed(0)
    ns["check"](replay)
    emit({"passed": True})


if __name__ == "__main__":
    {"call": main_call, "record": main_record, "replay": main_replay}[sys.argv[1]]()
