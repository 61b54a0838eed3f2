"""A tool session's cells, run through the sandbox pool (nanogrpo/tools.py runs the tool loop).

One session per rollout, kept by replay on either backend of the pool (local bubblewrap or E2B): each call runs,
in a fresh sandboxed interpreter, the tools file and every earlier cell of the rollout with their output
discarded, then the new cell with its output kept. Why replay, what carries over (seeded `random`, a PYTHONHASHSEED
per rollout), restarts, the cost and each cell's `tool_timeout_s`: docs/tools.md.
"""

from __future__ import annotations

import json
import logging
import re
import signal
from dataclasses import dataclass

from .types import ExecSpec, Limits

log = logging.getLogger(__name__)

# A cell is stopped by its own SIGALRM at tool_timeout_s; one that ignores, handles or blocks SIGALRM is stopped by
# the runner (the parent) at tool_timeout_s + STEP_GRACE_S after the replay announced it (runner.Steps).
STEP_GRACE_S = 0.5


@dataclass
class CellLimits(Limits):
    """The execution's limits with each replayed cell's wall clock, enforced by the runner (runner.Steps)."""
    step_s: float = 0.0  # wall clock of each announced step; 0 = none
    step_mark: str = ""  # a line on the program's stderr starting with this announces a step
    steps: int = 0  # announcements that count (the cells of the call)


@dataclass
class CellResult:
    output: str  # stdout and stderr as the model sees them (before truncation; at most output_chars + 1)
    status: str  # ok | error | timeout | exited (the cell ended its interpreter: the session restarts)
    seconds: float  # sandbox time this call cost
    note: str = ""  # what the sandbox says about the cell, shown after the (cut) output


# The local session: replay the tools file and the earlier cells with their output discarded (also at
# the file-descriptor level, for C code and subprocesses), then the new cell with stdout and stderr
# together, line by line, as a terminal shows them. The last expression of the new cell is echoed, as in a
# notebook (and as E2B's kernel does). The process's own stderr only carries MARK lines: which cell starts,
# that the last one raised, that all of them ran; without "done" the interpreter ended inside a cell.
MARK = "__nanogrpo_replay__"
REPLAY = r"""
import ast, io, json, os, random, signal, sys, traceback
random.seed(0)
cells = json.load(open("_cells.json"))
limit = float(sys.argv[1])  # each cell's wall-clock limit: SIGALRM (not handled) ends the interpreter
env = {"__name__": "__main__"}
mark, out, null = os.dup(2), os.dup(1), os.open(os.devnull, os.O_WRONLY)

def note(event):
    os.write(mark, ("MARK " + event + "\n").encode())

def run(src, name, echo):
    tree = ast.parse(src, name)
    last = tree.body.pop() if echo and tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, name, "exec"), env)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), name, "eval"), env)
        if value is not None:
            print(repr(value))

for i, (name, src) in enumerate(cells):
    final = i == len(cells) - 1
    note(f"cell {i}")
    os.dup2(out if final else null, 1)
    os.dup2(out if final else null, 2)
    if final:  # what the cell printed before ending its interpreter (os._exit, a signal) is not lost
        sys.__stdout__.reconfigure(line_buffering=True)
    sys.stdout = sys.stderr = sys.__stdout__ if final else io.StringIO()
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        run(src, name, final)
    except SystemExit:
        pass
    except BaseException as e:
        if final:
            frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename.startswith("<cell")]
            if frames:
                print("Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)), end="")
            print("".join(traceback.format_exception_only(type(e), e)), end="")
            note("raised")
    signal.setitimer(signal.ITIMER_REAL, 0)
    sys.stdout.flush()
note("done")
""".replace("MARK", MARK)


def session_seed(key: int) -> int:
    """PYTHONHASHSEED of a rollout's session: fixed for the rollout, so every replay iterates a set of strings
    in the order the model saw (a forked warm interpreter has its slot's seed, which differs between slots)."""
    return 1 + key % (2**32 - 1)


def exit_note(code: int, cells: list[tuple[str, str]], at: int) -> str:
    """What the model reads when the interpreter ended inside cell `at` of this replay."""
    try:
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    except ValueError:
        how = f"was killed by signal {-code}"
    where = "" if at == len(cells) - 1 else f" while the session re-ran {cells[at][0]}, so this cell did not run"
    return f"[the interpreter {how}{where}; the session was restarted: what earlier cells defined is gone]"


class ReplayCells:
    """Cells by replay through a sandbox pool (either backend): see the module docstring."""

    def __init__(self, tool_cfg, pool, python: str = "/usr/bin/python3"):
        self.cfg, self.pool, self.python = tool_cfg, pool, python
        self.seconds = 0.0

    def _spec(self, cells: list[tuple[str, str]], seed: int):
        cpu = self.cfg.timeout_s * len(cells)  # every replayed cell gets the budget it ran within
        # Each cell is stopped at timeout_s of wall clock: by SIGALRM in the replay, and, for a cell that ignores,
        # handles or blocks SIGALRM, by the runner at timeout_s + STEP_GRACE_S from its "cell i" line. The wall
        # backstop (twice the CPU limit: the load check needs that much) is left for the interpreter's start.
        # -s, not -I: a fresh interpreter that reads PYTHONHASHSEED (the runner's environment is scrubbed anyway)
        limits = CellLimits(cpu_s=cpu, wall_s=2 * cpu + 2, out_bytes=1 << 20, step_s=self.cfg.timeout_s + STEP_GRACE_S,
                            step_mark=MARK + " cell ", steps=len(cells))
        return ExecSpec([self.python, "-s", "_replay.py", repr(float(self.cfg.timeout_s))],
                        files={"_replay.py": REPLAY, "_cells.json": json.dumps(cells)},
                        limits=limits, clean=True, hash_seed=seed)

    def _result(self, res, cells: list[tuple[str, str]]) -> CellResult | None:
        events, rest = [], []
        for line in res.stderr.splitlines(keepends=True):
            if line.startswith(MARK + " "):
                events.append(line[len(MARK) + 1 :].strip())
            else:
                rest.append(line)
        text = (res.stdout + "".join(rest))[: self.cfg.output_chars + 1]  # what the model can be shown, and 1 more
        # a cell can write to the marker fd too: a forged line only misleads its own rollout, never raises
        started = [int(e[5:]) for e in events if re.fullmatch(r"cell \d{1,6}", e) and int(e[5:]) < len(cells)]
        if res.status == "timeout" or res.exit_code == -signal.SIGALRM:  # the session's limit, or a cell's
            return CellResult(text, "timeout", res.time_s)
        if not started:  # the replay never reached a cell: the sandbox's interpreter failed, not the model
            log.warning("tool session: the replay did not start (%s): %s", res.status, res.stderr[-500:])
            return None
        if "done" in events or res.status == "output_limit":  # ran to the end, or was stopped for its output
            raised = "raised" in events or res.status != "ok"
            return CellResult(text, "error" if raised else "ok", res.time_s)
        return CellResult(text, "exited", res.time_s, note=exit_note(res.exit_code, cells, started[-1]))

    def run(self, calls: list[tuple[int, list[tuple[str, str]], tuple[str, str]]]) -> list[CellResult | None]:
        """calls: (rollout key, its earlier (name, code) cells, the new one) -> a CellResult each, None when
        the sandbox failed."""

        async def one(session, call):
            key, prior, cell = call
            cells = ([("<tools>", self.cfg.tools_source)] if self.cfg.tools_source else []) + prior + [cell]
            return self._result(await session.exec(self._spec(cells, session_seed(key))), cells)

        out = self.pool.map(one, calls)
        self.seconds += sum(r.seconds for r in out if r is not None)
        return out

    def pop_stats(self) -> dict[str, float]:
        s, self.seconds = self.seconds, 0.0
        return {"sandbox_seconds": s}
