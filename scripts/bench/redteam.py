"""Run every attack program the tests keep (tests/helpers/attacks.py) against the local sandbox and print
a table: attacks tried, rejected, escapes, and host Shmem / MemAvailable before and after.

    python scripts/bench/redteam.py [--kind memory|leak|channel|isolation|judge|correct|reward] [--details]

`reward` attacks are text for the trainer's own reward code (attacks.REWARD_ATTACKS: no sandbox, no
bubblewrap needed): an escape is a score other than the one they must get, or a call past its time bound.

`hardening` (or one of its kinds: nonfinite, overwrite, checkpoint, input, bounded, trust) runs the entry points
as a user would (tests/helpers/hardening.py): a non-finite number aimed at the weights, a user's file in an output's
way, a tampered checkpoint (or one without its manifest), a bad input that must be named before any compute, a full
disk under the run's own files, work that must stay bounded, the sockets of a one-node torchrun job and a local
process writing into its store. `--root DIR` runs them against another checkout (the before of a table).

An attack is "rejected" when it did not get what it wanted (attacks.py says, per attack, what that is:
host memory pinned past the cap, data carried to the next execution, a reward it should not have, a None
where the answer was simply wrong, a correct program failing, or judging that took longer than it may: the
trainer reads untrusted text, which must take linear time). Every attack runs on ONE
slot, its programs in turn, as the trainer's executions follow each other; an attack between slots runs its
programs at the same time, one slot each. Needs bubblewrap; run as root
for the full isolation (per-slot uids). Exit status 1 if anything escaped.
"""
import argparse
import os
import sys
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from helpers.attacks import ATTACKS, meminfo, out, too_slow  # noqa: E402
from helpers.hardening import CASES, run_case  # noqa: E402
from nanogrpo.sandbox import SandboxPool  # noqa: E402
from nanogrpo.sandbox.local import bwrap_available  # noqa: E402


def settled_meminfo(before: dict, wait_s: float = 5.0) -> dict:
    """Host memory once namespaces torn down with the execution have been freed (asynchronously)."""
    end = time.monotonic() + wait_s
    while True:
        now = meminfo()
        if now["Shmem"] <= before["Shmem"] + 16 or time.monotonic() > end:
            return now
        time.sleep(0.1)


def describe(vs) -> str:
    return ", ".join("None" if v is None else f"{v.status} {v.reward:g}" for v in vs[:4]) + (" ..." if len(vs) > 4 else "")


def reward_attacks() -> list[tuple]:
    """The reward-side attacks (attacks.REWARD_ATTACKS), in this process as the trainer runs its rewards: a row
    each, an escape when the score is not what it must be or the call took longer than its bound."""
    from helpers.attacks import REWARD_ATTACKS
    from nanogrpo import rewards

    rows = []
    for name, reward, text, gold, want, max_s in REWARD_ATTACKS:
        t = time.monotonic()
        got = rewards.number_reward(text, gold) if reward == "number" else rewards.math_reward(text, gold)
        took = time.monotonic() - t
        escaped = got != want or took > max_s
        rows.append(("reward", name, f"{got}", "ESCAPED" if escaped else "rejected", 0, f"{took:.1f}", got is None))
    return rows


def hardening_cases(kind: str | None, root: str, tmp: str) -> list[tuple]:
    """The hardening cases (all, or one kind) run against checkout `root`, a row each, progress on stderr."""
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory(dir=tmp) as work:
        for i, case in enumerate(c for c in CASES if kind in (None, "hardening", c.kind)):
            text, escaped, took = run_case(case, root, Path(work) / f"case{i}")
            print(f"[{case.kind}] {case.name}: {text} ({'ESCAPED' if escaped else 'rejected'}, {took:.0f} s)",
                  file=sys.stderr, flush=True)
            rows.append((case.kind, case.name, text, "ESCAPED" if escaped else "rejected", 0, f"{took:.0f}", False))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    hardening = sorted({c.kind for c in CASES} | {"hardening"})
    kinds = sorted({a.kind for a in ATTACKS} | {"reward"} | set(hardening))
    ap.add_argument("--kind", default=None, choices=kinds, help="only attacks of this kind")
    ap.add_argument("--details", action="store_true", help="print a row per attack")
    ap.add_argument("--root", default=ROOT, help="the checkout the hardening cases run (default: this one)")
    ap.add_argument("--tmp", default=None, help="where the hardening cases write (default: the system's temp dir)")
    args = ap.parse_args(argv)
    if args.kind == "reward":  # no sandbox: the trainer's own reward code
        return report(reward_attacks(), args.details, "")
    if args.kind in hardening:  # the entry points, as a user runs them
        return report(hardening_cases(args.kind, args.root, args.tmp), args.details, "")
    if not bwrap_available():
        print("bubblewrap is missing (apt-get install bubblewrap)", file=sys.stderr)
        return 2
    from helpers.attacks import run_attack

    attacks = [a for a in ATTACKS if args.kind in (None, a.kind)]
    # One slot: each program runs where the last ran; an attack `together` gets a slot per program.
    pools = {}

    def pool_for(attack):
        n = len(attack.programs) if attack.together else 1
        if n not in pools:
            pools[n] = SandboxPool(concurrency=n, isolation="bwrap").start()
        return pools[n]

    pool_for(attacks[0])
    start = meminfo()
    rows, executions, peak_shmem = [], 0, start["Shmem"]
    t0 = time.monotonic()
    for a in attacks:
        before = meminfo()
        t = time.monotonic()
        vs = run_attack(pool_for(a), a)
        took = time.monotonic() - t
        executions += len(vs)
        after = settled_meminfo(before)
        peak_shmem = max(peak_shmem, after["Shmem"])
        # pinned host memory counts too, and so does time: the trainer judges one item after another
        escaped = bool(a.escaped(vs)) or too_slow(a, took) or after["Shmem"] > before["Shmem"] + 64
        result = ("FAILED" if escaped else "scored 1") if a.kind == "correct" else ("ESCAPED" if escaped else "rejected")
        pinned = out(vs[0]).strip() if a.kind == "memory" else ""  # what the program says it pinned, in MB
        rows.append((a.kind, a.name, describe(vs) + (f" (pinned {pinned} MB)" if pinned else ""), result,
                     after["Shmem"] - before["Shmem"], f"{took:.1f}", None in vs))
        if escaped:
            print(f"ESCAPED: {a.name}: {[out(v)[-200:] for v in vs]}", file=sys.stderr)
    for pool in pools.values():
        pool.close()
    end = settled_meminfo(start)
    rows += (reward_attacks() + hardening_cases(None, args.root, args.tmp)) if args.kind is None else []
    footer = (f"\n{executions} executions in {time.monotonic() - t0:.0f} s. Host memory (MB): "
              f"Shmem {start['Shmem']} before, {peak_shmem} highest after any attack, {end['Shmem']} after; "
              f"MemAvailable {start['MemAvailable']} before, {end['MemAvailable']} after.")
    return report(rows, args.details, footer)


def report(rows: list[tuple], details: bool, footer: str) -> int:
    """Print the table (a row per attack with --details), then the totals per kind; 1 if anything escaped."""
    bad = [r for r in rows if r[3] in ("ESCAPED", "FAILED")]
    if details:
        print("| kind | attack | verdicts | result | host Shmem change (MB) | seconds |\n"
              "|---|---|---|---|---|---|")
        for r in rows:
            print("| " + " | ".join(str(x) for x in r[:6]) + " |")
        print()
    print("| kind | attacks tried | rejected | escapes | of which a verdict was None (sandbox / overload) |\n"
          "|---|---|---|---|---|")
    for k in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == k]
        n_bad = sum(r in bad for r in mine)
        print(f"| {k} | {len(mine)} | {len(mine) - n_bad} | {n_bad} | {sum(r[6] for r in mine)} |")
    print(f"| **all** | **{len(rows)}** | **{len(rows) - len(bad)}** | **{len(bad)}** | "
          f"**{sum(r[6] for r in rows)}** |")
    print(footer)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
