"""In-sandbox harness for `call` and `assert` modes (stdlib only; also imported by the judge for the codec).

The program never decides its own verdict: its return values are encoded here into tagged JSON of plain builtin
values, printed after a marker and compared outside its process. `assert` checks never run beside the program:
`calls` runs it on the checks' calls (their arguments only) and logs each value or exception and the arguments'
state after; `checks` runs the trusted checks WITHOUT the program, answering each call from that log, strictly,
then with placeholders (`Pending`) to list the calls still needed. The turns, and why the program's memory never
holds an expected value: docs/sandbox.md, `assert`.

    python3 -I harness.py call     (files: solution.py, call.json {"fn_name", "args"})
    python3 -I harness.py calls    (files: solution.py, calls.json {"entry_point", "calls": [key, ...]})
    python3 -I harness.py checks   (files: starter.py, test.py, entry.json, answers.json {"answers"})
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


_DECODE = {"float": _float, "tuple": lambda x: _tuple(decode(y) for y in x), "bytes": _bytes.fromhex,
           "dict": lambda x: {decode(k): decode(y) for k, y in x}, "set": lambda x: {decode(y) for y in x},
           "frozenset": lambda x: _frozenset(decode(y) for y in x), "complex": lambda x: _complex(*x)}


def decode(v):
    """Inverse of encode; builds plain values only."""
    if isinstance(v, list):
        return [decode(x) for x in v]
    if not isinstance(v, dict):
        return v
    t, x = v["__t"], v["v"]
    if not isinstance(t, _str) or t not in _DECODE:
        raise ValueError(f"unknown tag {t!r}")
    return _DECODE[t](x)


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


def checks_tree(path):
    """Test code without top-level `check(...)` calls (some datasets append one): the harness calls it."""
    import ast

    tree = ast.parse(load(path))
    tree.body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                                              and getattr(n.value.func, "id", None) == "check")]
    return tree


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
    args = spec["args"]  # the test's own JSON, not encode()'s tagged form: an object argument is a plain dict
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


def main_calls():
    """The program's execution: its function on each of the checks' calls, in order. Each call gets its own
    copy of its arguments, decoded from the call's key; their state after it goes back only if it changed."""
    spec = json.loads(load("calls.json"))
    fn, results = find_callable(run_module("solution.py"), spec["entry_point"]), []
    for key in spec["calls"]:
        args, kwargs = (decode(x) for x in json.loads(key))
        try:
            out = {"value": encode(fn(*args, **kwargs))}
        except Exception as e:  # noqa: BLE001  recorded; the checks see the same builtin type raised
            out = {"error": builtin_error(e)}
        try:
            after = call_key(args, kwargs)
        except TypeError:  # the program left a value in the arguments that cannot be judged
            out, after = {"error": "TypeError"}, key
        if after != key:  # side effects on the arguments: the checks' own objects take them
            out["after"] = after
        results.append(out)
    emit({"results": results})


class Unanswered(BaseException):
    """A call the answers do not cover ends the strict run (a BaseException: `except Exception` in the checks
    must not swallow it)."""


# Discovery stops once the unanswered calls' arguments pass this many characters (half the default output
# cap: the list must reach the judge), or after this many operations on placeholders (a loop that waits for
# one to change would never end).
MAX_NEED_CHARS, MAX_PENDING_OPS = 4 << 20, 100_000


class Pending:
    """What an unanswered call returns while discovering (what it equals and does: docs/sandbox.md, `assert`). Only
    what the checks do with it decides which calls they make next; no verdict is ever read from a run that used one."""
    ops = 0

    def _op(self, *args, **kwargs):
        Pending.ops += 1
        if Pending.ops > MAX_PENDING_OPS:
            raise Unanswered
        return self

    def _as(value):
        def op(self, *args):
            self._op()
            return value
        return op

    __bool__, __contains__ = _as(True), _as(True)
    __len__, __int__, __index__, __float__, __complex__ = _as(0), _as(0), _as(0), _as(0.0), _as(0j)
    __str__ = __repr__ = __format__ = _as("?")
    __hash__ = object.__hash__
    __getattr__ = __call__ = __getitem__ = __round__ = __neg__ = __pos__ = __abs__ = __invert__ = _op
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _op
    del _as

    def __iter__(self):
        self._op()
        return iter(())


for _name in "add sub mul truediv floordiv mod pow matmul and or xor lshift rshift".split():
    setattr(Pending, f"__{_name}__", Pending._op)
    setattr(Pending, f"__r{_name}__", Pending._op)


def soft_checks(path):
    """The checks with every `assert` an expression only: discovery goes past the asserts a placeholder fails."""
    import ast

    class Soft(ast.NodeTransformer):
        def visit_Assert(self, node):
            return ast.copy_location(ast.Expr(self.visit(node.test)), node)

    return ast.fix_missing_locations(Soft().visit(checks_tree(path)))


def run_checks(entry, answers, strict, need):
    """One run of the checks from the start: each call answered from `answers` in order (the i-th call with
    some arguments gets the i-th answer logged for them); an unanswered one is added to `need`, then ends a
    strict run or gets a placeholder."""
    queues: dict = {}
    size = [0]
    for key, out in answers:
        queues.setdefault(key, []).append(out)

    def candidate(*args, **kwargs):
        try:
            key = call_key(args, kwargs)
        except TypeError:
            if strict:  # the checks passed a value no program could be called with: they fail
                raise
            return Pending()  # arguments made of placeholders: their answers come first
        queue = queues.get(key)
        if queue:
            return answer(queue.pop(0), args, kwargs)
        need.append(key)
        size[0] += len(key)
        if strict or size[0] >= MAX_NEED_CHARS:
            raise Unanswered
        return Pending()

    ns = {"__name__": "__solution__", "__builtins__": builtins}
    run_module("starter.py", ns)  # trusted problem text (helpers the checks use), not the program
    exec(compile(checks_tree("test.py") if strict else soft_checks("test.py"), "test.py", "exec"), ns)
    ns[entry] = candidate  # some checks call the function by name too (HumanEval/33)
    random.seed(0)
    ns["check"](candidate)


def main_checks():
    """The checks' execution: {"passed": true} when they run to the end on the answers alone; {"need": [key, ...]}
    when they make calls the answers do not cover; an exception (exit status 1) when they fail before that."""
    entry = json.loads(load("entry.json"))["entry_point"]
    answers = json.loads(load("answers.json"))["answers"]
    need: list = []
    try:
        run_checks(entry, answers, True, need)
    except Unanswered:
        pass
    except BaseException:
        if not need:  # failed on answers alone: the verdict
            raise
    if not need:
        emit({"passed": True})
    need.clear()
    try:
        run_checks(entry, answers, False, need)
    except BaseException:  # noqa: BLE001  discovery ends wherever the placeholders cannot get past
        pass
    emit({"need": need})


if __name__ == "__main__":
    {"call": main_call, "calls": main_calls, "checks": main_checks}[sys.argv[1]]()
