"""No import circles: the graph of nanogrpo's own imports (module level and inside functions) is acyclic,
and train.py reaches the evaluation code through the library, never through the eval.py entry script; a module
over 500 lines says why in its docstring."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path, package: str) -> set[str]:
    """nanogrpo modules imported anywhere in `path` (lazy imports included: a circle through a
    function-level import is still a circle, only hidden until the call)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}  # `from nanogrpo import data`
    return out


def module_graph() -> dict[str, set[str]]:
    files = {}
    for p in (ROOT / "nanogrpo").rglob("*.py"):
        parts = p.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        files[name] = p
    graph = {}
    for name, p in files.items():
        package = name if p.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = {m for m in _imports(p, package) if m in files and m != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (c := visit(m)):
                return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.slow
def test_no_import_circles_in_nanogrpo():
    graph = module_graph()
    assert "nanogrpo.evaluate" in graph and "nanogrpo.data" in graph["nanogrpo.tasks.benchmarks"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_train_does_not_import_the_eval_script():
    names = _imports(ROOT / "train.py", "")
    assert "eval" not in names and "nanogrpo.evaluate" in names


@pytest.mark.slow
def test_a_module_over_500_lines_says_why_in_its_docstring():
    """Short files with one job: a longer one says in its docstring why it is one file ("over 500 lines")."""
    long = {p.relative_to(ROOT): len(p.read_text().splitlines()) for p in (ROOT / "nanogrpo").rglob("*.py")}
    silent = [f"{p} ({n} lines)" for p, n in long.items()
              if n > 500 and "over 500 lines" not in (ast.get_docstring(ast.parse((ROOT / p).read_text())) or "").lower()]
    assert not silent, f"over 500 lines with no docstring saying why: {silent}"
