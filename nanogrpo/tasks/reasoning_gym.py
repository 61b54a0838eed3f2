"""Reasoning Gym (the `reasoning-gym` package, Apache-2.0) as a task source: `task = "reasoning_gym:NAME"`.

    task = "reasoning_gym:leg_counting(weight=2, max_animals=3), basic_arithmetic(max_terms=2)"  # a weighted mix

The spec's settings, how train and held-out rows are kept apart (HELDOUT_SEED, `is_heldout`), the prompt and the
verdict (the dataset's own `score_answer` on the last `<answer>...</answer>`): docs/data.md, "Reasoning Gym".
Bounded on hostile text: one linear scan, an answer over MAX_ANSWER_CHARS (or 4x the gold) wrong unread, and
`score_answer` (some call sympy's parse_expr, which evaluates the text) in confined workers killed past a timeout,
as answer.py's MathPool. reasoning_gym is imported only when a spec is used.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import json
import os
import random
import shutil
import sys
import tomllib
from importlib.metadata import version
from typing import NamedTuple

from nanogrpo import answer as _answer

PREFIX = "reasoning_gym:"
PACKAGE = "reasoning-gym==0.1.25"  # the version the lock pins; other versions may make other rows
HELDOUT_SEED = 4_000_000_000  # held-out item seeds start here (kept below 2**32: one dataset seeds numpy with them)
HELDOUT_SCAN = 64  # candidates tried per held-out row before the settings are judged too small for n distinct rows
TRAIN_SEED_SPAN = 3_800_000_000  # train item seeds lie in [0, TRAIN_SEED_SPAN + span), below HELDOUT_SEED
TRAIN_TRIES = 32  # candidate seeds per train row (each row owns a block of them: rows are made in any order)
HELDOUT_QUARTER = 4  # a question is held out when its hash is 0 mod this
MAX_ANSWER_CHARS = 4000  # an extracted answer longer than this and than 4x the gold is wrong, unread
SCORE_TIMEOUT_S = 10.0  # per score_answer call, in a worker process
GOLD_CHECKS = 8  # train rows whose gold the scorer must give full marks at load (every held-out row's is checked)
SYSTEM_PROMPT = "default"  # the name in reasoning_gym.utils.SYSTEM_PROMPTS a spec's datasets use by default
# Datasets whose templates come from a benchmark eval.py reports: never train on them where that benchmark is reported
CONTAMINATED = {"gsm_symbolic": "its templates are GSM8K test questions (eval.py's gsm8k)"}


class Source(NamedTuple):
    name: str
    weight: float
    settings: dict  # fields of the dataset's config class
    system_prompt: str  # the name of one of RG's SYSTEM_PROMPTS
    partial: bool = True  # RG's partial scores as the reward; False: 1.0 right, else 0.0


def is_spec(task: str) -> bool:
    return isinstance(task, str) and task.startswith(PREFIX)


def _rg():
    try:
        import reasoning_gym
    except ImportError:
        raise ValueError(f"Reasoning Gym tasks need the reasoning-gym package (pip install {PACKAGE})") from None
    return reasoning_gym


def split_top(text: str) -> list[str]:
    """`text` split at the commas outside brackets and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


def _value(raw: str):
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw  # a bare word: a string


@functools.lru_cache(maxsize=64)
def parse(spec: str) -> tuple[Source, ...]:
    """The datasets of `reasoning_gym:NAME(KEY=VALUE, ...), ...`, each checked against Reasoning Gym's registry and
    its config class. ValueError naming what is wrong (an unknown name lists the valid ones)."""
    _rg()  # first: a clear error when the package is missing
    from reasoning_gym.factory import DATASETS

    body = spec[len(PREFIX):] if is_spec(spec) else spec
    names = sorted(n for n in DATASETS if n != "composite")
    out = []
    for part in split_top(body):
        part = part.strip()
        name, paren, rest = part.partition("(")
        name = name.strip()
        if paren and not rest.rstrip().endswith(")"):
            raise ValueError(f"{spec!r}: {part!r} opens '(' without closing it")
        if name not in names:
            near = difflib.get_close_matches(name, names, n=1)
            raise ValueError(f"{spec!r}: unknown Reasoning Gym dataset {name!r}"
                             f"{f' (did you mean {near[0]!r}?)' if near else ''}; the {len(names)} datasets of "
                             f"reasoning-gym: {', '.join(names)}")
        settings = {}
        for kv in filter(str.strip, split_top(rest.rstrip()[:-1]) if paren else []):
            key, eq, raw = kv.partition("=")
            if not eq:
                raise ValueError(f"{spec!r}: {kv.strip()!r} in {name}(...) is not KEY=VALUE")
            settings[key.strip()] = _value(raw.strip())
        weight = settings.pop("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            raise ValueError(f"{spec!r}: the weight of {name} must be a number > 0, got {weight!r}")
        prompt = settings.pop("system_prompt", SYSTEM_PROMPT)
        if prompt not in system_prompts():
            raise ValueError(f"{spec!r}: system_prompt={prompt!r} is not one of Reasoning Gym's SYSTEM_PROMPTS: "
                             f"{', '.join(system_prompts())}")
        partial = settings.pop("partial", True)
        if not isinstance(partial, bool):
            raise ValueError(f"{spec!r}: partial of {name} must be true or false, got {partial!r}")
        if name in (s.name for s in out):
            raise ValueError(f"{spec!r}: {name} is named twice (one entry per dataset; weigh it with weight=)")
        ds = _dataset(name, json.dumps(settings, sort_keys=True), 0, 1, spec)  # a bad field or value stops here
        try:  # and settings its config accepts but its generator cannot use (min above max, ...)
            ds[0]
        except Exception as e:
            raise ValueError(f"{spec!r}: Reasoning Gym cannot make a {name} item with the settings {settings}: "
                             f"{type(e).__name__}: {e}") from None
        out.append(Source(name, float(weight), settings, prompt, partial))
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _dataset(name: str, settings_json: str, seed: int, size: int, spec: str = ""):
    """The RG dataset object (item i comes from Random(seed + i)); its config checked, errors named."""
    from reasoning_gym.factory import DATASETS

    settings = json.loads(settings_json)
    fields = [f.name for f in dataclasses.fields(DATASETS[name][1]) if f.name not in ("seed", "size")]
    bad = [k for k in settings if k not in fields]
    if bad:
        raise ValueError(f"{spec or name!r}: {name} has no setting {', '.join(map(repr, bad))}; its settings: "
                         f"{', '.join(fields)} (and weight, system_prompt, partial)")
    try:
        return _rg().create_dataset(name, **settings, seed=seed, size=size)
    except Exception as e:  # RG checks its config with asserts (AssertionError) and constructors (TypeError, ...)
        raise ValueError(f"{spec or name!r}: Reasoning Gym refuses the settings {settings} of {name}: "
                         f"{type(e).__name__}: {e}") from None


def is_heldout(name: str, question: str) -> bool:
    """Whether a question belongs to the held-out side (a fixed hash: the same in every process and run)."""
    h = hashlib.blake2b(f"{name}\0{question}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") % HELDOUT_QUARTER == 0


def _row(src: Source, entry: dict, split: str, i: int) -> dict:
    gold = entry["answer"]  # None where the scorer judges by itself (a puzzle with many solutions: rush_hour, ...)
    return {"problem": entry["question"], "answer": "" if gold is None else str(gold), "id": f"rg-{src.name}-{split}-{i}",
            "system_prompt": system_prompts()[src.system_prompt], "instruction": "",  # RG's (module docstring)
            "reasoning_gym": {"dataset": src.name, "settings": src.settings, "entry": entry,
                              **({} if src.partial else {"partial": False})}}


def train_seed_base(seed: int) -> int:
    return (seed * 1_000_003) % TRAIN_SEED_SPAN


def train_rows(spec: str, sources: tuple[Source, ...], n: int, seed: int) -> list[dict]:
    """n train rows for a run's seed. Row k picks its dataset by the weights (a generator seeded by (seed, k)) and
    takes the first of its own block of TRAIN_TRIES item seeds whose question is not held out."""
    base = train_seed_base(seed)
    datasets = [_dataset(s.name, json.dumps(s.settings, sort_keys=True), base, n * TRAIN_TRIES) for s in sources]
    weights = [s.weight for s in sources]
    out = []
    for k in range(n):
        pick = random.Random(f"rg-train-{seed}-{k}").choices(range(len(sources)), weights)[0] if len(sources) > 1 else 0
        src, ds = sources[pick], datasets[pick]
        entry = next((e for e in (ds[k * TRAIN_TRIES + j] for j in range(TRAIN_TRIES))
                      if not is_heldout(src.name, e["question"])), None)
        if entry is None:
            raise ValueError(f"{spec!r}: {TRAIN_TRIES} draws of {src.name} in a row gave held-out questions only: "
                             "its settings leave too few questions to split into train and held-out")
        out.append(_row(src, entry, "train", k))
    return out


def heldout_rows(spec: str, n: int) -> list[dict]:
    """The held-out set: n rows fixed by (spec, n), the same whatever the run's seed. Row k's dataset is drawn by the
    weights (seeded by k); each dataset's rows are its distinct held-out questions in seed order from HELDOUT_SEED."""
    sources = parse(spec)
    picks = [sources[random.Random(f"rg-heldout-{k}").choices(range(len(sources)), [s.weight for s in sources])[0]]
             for k in range(n)]
    out_of = {s.name: [] for s in sources}
    for src in sources:
        want = sum(p.name == src.name for p in picks)
        ds = _dataset(src.name, json.dumps(src.settings, sort_keys=True), HELDOUT_SEED, max(1, want) * HELDOUT_SCAN)
        seen, got = set(), out_of[src.name]
        for i in range(want * HELDOUT_SCAN):
            if len(got) == want:
                break
            entry = ds[i]
            q = entry["question"]
            if q not in seen and is_heldout(src.name, q):
                seen.add(q)
                got.append(entry)
        if len(got) < want:
            raise ValueError(f"{spec!r}: {src.name} gave {len(got)} distinct held-out questions in "
                             f"{want * HELDOUT_SCAN} draws, {want} asked: its settings leave too few questions "
                             "(ask for fewer held-out rows, or widen the settings)")
    taken = {name: iter(got) for name, got in out_of.items()}  # each dataset's rows in seed order
    return [_row(src, next(taken[src.name]), "test", k) for k, src in enumerate(picks)]


def rows(spec: str, split: str, n: int, seed: int = 0) -> list[dict]:
    """n rows of a spec: split "train" (by seed) or "test" (the held-out set, the same for every seed)."""
    sources = parse(spec)
    if split == "test":
        held = heldout_rows(spec, n)
        check_golds(spec, held)
        return held
    if n * TRAIN_TRIES > HELDOUT_SEED - TRAIN_SEED_SPAN:
        raise ValueError(f"{spec!r}: at most {(HELDOUT_SEED - TRAIN_SEED_SPAN) // TRAIN_TRIES} train rows, asked {n}")
    for s in sources:
        if s.name in CONTAMINATED:
            print(f"warning: training on reasoning_gym:{s.name}: {CONTAMINATED[s.name]}; do not report that "
                  "benchmark for this run", file=sys.stderr)
    train = train_rows(spec, sources, n, seed)
    check_golds(spec, train[:GOLD_CHECKS])
    return train


@functools.lru_cache(maxsize=64)
def task(name: str) -> tuple:
    """(rows, reward, template) of `reasoning_gym:NAME...`, the Task nanogrpo/tasks SOURCES makes (`name` is what
    follows the prefix): checked now, a ValueError naming what is wrong. Its reward is `score`; RG's chat prompt."""
    spec = PREFIX + name
    parse(spec)
    return functools.partial(rows, spec), score, "chat"


def heldout_description(spec: str, n: int) -> dict:
    """What fixes a held-out set, for the results: the package, the datasets and settings, the seeds and the size
    (not `partial`: it changes the reward, not the questions, and pass@k counts only 1.0 either way)."""
    datasets = [{k: v for k, v in s._asdict().items() if k != "partial"} for s in parse(spec)]
    return {"reasoning_gym": version("reasoning-gym"), "datasets": datasets, "heldout_seed": HELDOUT_SEED, "size": n,
            "heldout_share": f"questions whose blake2b hash is 0 mod {HELDOUT_QUARTER}"}


def system_prompts() -> dict[str, str]:
    from reasoning_gym.utils import SYSTEM_PROMPTS

    return SYSTEM_PROMPTS


# ---------------------------------------------------------------- the verdict


def extract_answer(text: str) -> str | None:
    """What the last `<answer>...</answer>` holds, stripped; None without one. RG's extract_answer (its regex
    `<answer>\\s?(.*?)\\s?</answer>`, last match, stripped) in one forward scan: linear on any text."""
    text, found, pos = str(text), None, 0
    while True:
        start = text.find("<answer>", pos)
        end = text.find("</answer>", start + 8) if start >= 0 else -1
        if end < 0:
            return found
        found, pos = text[start + 8 : end].strip(), end + 9


def _score_item(name: str, settings: dict, answer: str | None, entry: dict) -> float:
    """Runs in a worker: RG's score_answer, as a float in [0, 1]."""
    ds = _dataset(name, json.dumps(settings, sort_keys=True), 0, 1)
    try:
        got = ds.score_answer(answer, entry)
    except Exception:  # the model's text broke the scorer: not a right answer (the golds are checked at load)
        return 0.0
    got = float(got)
    if not 0.0 <= got <= 1.0:  # NaN included: a scorer bug, not a verdict
        raise ValueError(f"{name}.score_answer returned {got}")
    return got


WORKER_MEMORY = 4 << 30  # bytes of address space a scorer worker may hold (a memory bomb fails, the worker lives)


def confined(argv: list[str]) -> list[str]:
    """The worker's command inside bubblewrap where it is installed: the filesystem read-only, no network, its own
    /tmp. Several scorers run the model's text through sympy's parse_expr, which calls eval on it (countdown,
    puzzle24, ...: `__import__('os')...` runs): outside nanogrpo/sandbox/, this is the containment it gets."""
    if not shutil.which("bwrap"):
        return argv
    # the worker's own /tmp hides the host's; a checkout or a venv that lives there (a clone in /tmp) is bound back
    kept = sorted({p for p in (_answer.CHECKOUT, sys.prefix) if os.path.realpath(p).startswith("/tmp/")})
    return ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            *[a for p in kept for a in ("--ro-bind", os.path.realpath(p), os.path.realpath(p))], "--unshare-all",
            "--die-with-parent", "--new-session", *argv]


def _worker_main() -> None:
    """`python -m nanogrpo.tasks.reasoning_gym --score-worker`: RG's scorer (`_score_item`), over answer.serve_lines."""
    def prepare():
        import resource

        import reasoning_gym  # noqa: F401  (imported before "ready": its import must not eat an item's timeout)

        # then, before any model text is read: bounded memory, no file grows (where bwrap is missing too), no core dump
        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    _answer.serve_lines(lambda item: _score_item(*item[:3], from_wire(item[3])), prepare)


def _pool():
    """MathPool's workers and timeout policy (nanogrpo/answer.py), running this module's worker, confined."""
    return _answer.pool_of(tuple(confined([sys.executable, "-m", "nanogrpo.tasks.reasoning_gym", "--score-worker"])))


def score(completions: list[str], reasoning_gym: list | None = None, answer: list | None = None,
          timeout_s: float = SCORE_TIMEOUT_S, **_) -> list[float | None]:
    """The task's reward (rewards.py's signature: the rows' columns): each completion's verdict by its row's dataset
    (module docstring), a float in [0, 1]; None where the row is not a Reasoning Gym row or the scorer could not
    run. Never raises."""
    metas, golds = reasoning_gym or [None] * len(completions), answer or [None] * len(completions)
    out: list[float | None] = [None] * len(completions)
    todo, items = [], []
    for i, (text, meta, gold) in enumerate(zip(completions, metas, golds)):
        try:
            answer = extract_answer(text)
            if answer is not None and len(answer) > max(MAX_ANSWER_CHARS, 4 * len(str(gold))):  # wrong, unread
                out[i] = 0.0
                continue
            items.append((meta["dataset"], meta["settings"], answer, to_wire(meta["entry"])))
            todo.append(i)
        except Exception:  # a row that is not a Reasoning Gym row: nothing can judge it
            out[i] = None
    if items:
        try:
            got = _pool().map(items, timeout_s)
        except Exception:
            got = [None] * len(items)
        for i, g in zip(todo, got):
            out[i] = g if g is None or metas[i].get("partial", True) else float(g == 1.0)
    return out


def to_wire(x):
    """An entry as JSON can carry it: tuples (RG's metadata is full of them) and dicts with keys that are not strings
    tagged, so `from_wire` gives back an equal entry (check_golds checks it does)."""
    if isinstance(x, tuple):
        return {"__tuple__": [to_wire(v) for v in x]}
    if isinstance(x, list):
        return [to_wire(v) for v in x]
    if isinstance(x, dict):
        if all(isinstance(k, str) for k in x) and "__tuple__" not in x and "__items__" not in x:
            return {k: to_wire(v) for k, v in x.items()}
        return {"__items__": [[to_wire(k), to_wire(v)] for k, v in x.items()]}
    return x


def from_wire(x):
    if isinstance(x, list):
        return [from_wire(v) for v in x]
    if isinstance(x, dict):
        if len(x) == 1 and "__tuple__" in x:
            return tuple(from_wire(v) for v in x["__tuple__"])
        if len(x) == 1 and "__items__" in x:
            return {from_wire(k): from_wire(v) for k, v in x["__items__"]}
        return {k: from_wire(v) for k, v in x.items()}
    return x


def wire(entry: dict) -> dict:
    """The entry as a worker receives it."""
    return from_wire(json.loads(json.dumps(to_wire(entry))))


def check_golds(spec: str, rows: list[dict]) -> None:
    """Each dataset's scorer gives its own gold full marks on these rows, with the entry as a worker receives it, in
    this process (golds are trusted text): a scorer that cannot run here stops the run at load, not as a None (or a
    0) every step."""
    for row in rows:
        meta = row["reasoning_gym"]
        if meta["entry"]["answer"] is None:  # no gold to give: the scorer solves the puzzle itself
            continue
        try:
            entry = wire(meta["entry"])
        except (TypeError, ValueError) as e:
            entry = e
        if entry != meta["entry"]:
            raise ValueError(f"{spec!r}: a {meta['dataset']} entry does not pass to the scorer's process unchanged "
                             f"(JSON with tuples tagged: {str(entry)[:200]})")
        got = _dataset(meta["dataset"], json.dumps(meta["settings"], sort_keys=True), 0, 1).score_answer(
            row["answer"], entry)
        if got != 1.0:
            raise ValueError(f"{spec!r}: Reasoning Gym's {meta['dataset']}.score_answer gives its own answer "
                             f"{row['answer']!r} {got}, not 1.0: this dataset cannot be scored here")


if __name__ == "__main__" and sys.argv[1:2] == ["--score-worker"]:
    _worker_main()
