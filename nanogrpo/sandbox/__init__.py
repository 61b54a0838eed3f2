"""Running untrusted code for rewards: an asyncio pool of isolated executions (local bubblewrap or E2B).

    code_rewards(completions, problems, **opts) -> list[float | None]   # None: the sandbox failed

Start-up refuses to run without isolation (SandboxUnavailable) unless allow_unsandboxed=True; after
that, rewards never raise. See docs/sandbox.md for what the isolation covers.
"""
import dataclasses
import logging

from .extract import extract_code
from .judge import LANGUAGES, JudgeOptions, judge, stdio_match, validate_problem
from .pool import SandboxPool, get_pool
from .types import ExecResult, ExecSpec, InfraError, Limits, SandboxUnavailable, Verdict

log = logging.getLogger(__name__)


def judge_many(codes: list[str | None], problems: list[dict], pool: SandboxPool | None = None,
               **opts) -> list[Verdict | None]:
    """Judge extracted programs; a malformed problem or an infrastructure failure gives None."""
    if len(codes) != len(problems):
        raise ValueError(f"{len(codes)} programs but {len(problems)} problems")
    judge_keys = {f.name for f in dataclasses.fields(JudgeOptions)}
    pool = pool or get_pool(**{k: v for k, v in opts.items() if k not in judge_keys})
    jopts = JudgeOptions(**{k: v for k, v in opts.items() if k in judge_keys})
    items, verdicts = [], [None] * len(codes)
    for i, (code, p) in enumerate(zip(codes, problems)):
        try:
            validate_problem(p)
        except ValueError as e:
            log.warning("code reward left out: %s", e)
            continue
        items.append((i, code, p))

    for (i, _, _), v in zip(items, pool.map(lambda session, it: judge(session, it[1], it[2], jopts), items)):
        verdicts[i] = v
    return verdicts


def code_rewards(completions: list[str], problems: list[dict], **opts) -> list[float | None]:
    """Reward per completion: fraction of tests passed (binary=True: 1/0), None on sandbox failure. The program is
    the completion's last ```<problem language> block."""
    langs = [p.get("language", "python") if isinstance(p, dict) else "python" for p in problems]
    codes = [extract_code(c, lang if lang in LANGUAGES else "python") for c, lang in zip(completions, langs)]
    return [None if v is None else v.reward for v in judge_many(codes, problems, **opts)]


__all__ = ["code_rewards", "judge_many", "extract_code", "stdio_match", "validate_problem",
           "SandboxPool", "get_pool", "ExecResult", "ExecSpec", "Limits", "Verdict", "InfraError",
           "SandboxUnavailable", "JudgeOptions"]
