"""Benchmark the sandbox: isolated executions vs a plain `python3 -c` subprocess, side by side.

    python scripts/bench/bench_sandbox.py            # quick: 120 executions per cell, 200 programs at 4x
    python scripts/bench/bench_sandbox.py --full     # 400 per cell, 1,000 correct programs at 4x oversubscription
    python scripts/bench/bench_sandbox.py --rss      # trainer memory: peak RSS over one 64 x 8 code step (see rss_step)
    python scripts/bench/bench_sandbox.py --humaneval [--group 8]   # assert mode: HumanEval's 164 reference solutions

For each concurrency (1, cores, 2x cores) the backends run the same program in alternating rounds,
so load from other processes hits them alike; the table gives executions/s, p50/p99 latency and the
ratio isolated/plain, for the default isolated path (the warm runner forks its own interpreter for
`python3 -I` programs) and for the same sandbox exec'ing a fresh python3 per execution.
Then N correct programs are judged at 4x oversubscription (4x cores slots)
and every false negative (a correct program not scored 1.0) is counted.
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from nanogrpo.sandbox import ExecSpec, Limits, SandboxPool, code_rewards, get_pool, judge_many  # noqa: E402

PROGRAM = "print(sum(i * i for i in range(1000)))"
PYTHON = "/usr/bin/python3"


def plain_batch(n: int, concurrency: int) -> list[float]:
    """The baseline: `python3 -c` via subprocess.run from `concurrency` threads (no isolation, no limits)."""

    def one(_):
        t = time.perf_counter()
        p = subprocess.run([PYTHON, "-c", PROGRAM], capture_output=True)
        assert p.returncode == 0 and p.stdout.strip() == b"332833500", p
        return time.perf_counter() - t

    with ThreadPoolExecutor(concurrency) as ex:
        return list(ex.map(one, range(n)))


def isolated_batch(pool: SandboxPool, n: int, fresh: bool = False) -> list[float]:
    # fresh=False: the warm runner forks its own interpreter (the default); True: exec a new python3.
    spec = ExecSpec([PYTHON, "-I", "-c", PROGRAM], limits=Limits(cpu_s=5, wall_s=30), fresh_interpreter=fresh)

    async def one(session, _):
        t = time.perf_counter()
        res = await session.exec(spec)
        assert res.status == "ok" and res.stdout.strip() == "332833500", res
        return time.perf_counter() - t

    lat = pool.map(one, range(n))
    assert None not in lat, "infrastructure error during the benchmark"
    return lat


def summarise(lat: list[float], wall: float) -> tuple[float, float, float]:
    lat = sorted(lat)
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    return len(lat) / wall, statistics.median(lat) * 1000, p99 * 1000


# Writes `n` characters (the test's input) to stderr, then its answer: a right program that prints a lot.
LOUD = "import sys\nn = int(input())\nsys.stderr.write('x' * n)\nprint(n % 7)\n"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KB


def rss_step(prompts: int, group: int, tests: int, mb: float) -> None:
    """One code step as the trainer runs it: code_rewards over prompts x group completions, `tests` tests each,
    every program printing `mb` MB per test. Prints this process's peak RSS (the trainer's) before and after:
    what the rewards' verdicts keep of the outputs is what it grows by."""
    n = int(mb * (1 << 20))
    problems = [{"id": f"p{i}", "language": "python", "mode": "stdio", "time_limit_s": 6,
                 "tests": [{"input": f"{n + i}\n", "output": f"{(n + i) % 7}\n"}] * tests} for i in range(prompts)]
    completions = [f"```python\n{LOUD}```"] * (prompts * group)
    get_pool().start()
    before = peak_rss_mb()
    t = time.perf_counter()
    rewards = code_rewards(completions, [p for p in problems for _ in range(group)])
    wall = time.perf_counter() - t
    mean = sum(r or 0 for r in rewards) / len(rewards)
    print(f"{prompts} x {group} completions, {tests} tests each, {mb:g} MB printed per test "
          f"({prompts * group * tests * mb / 1024:.1f} GB in all): {wall:.0f} s, mean reward {mean:.2f}, "
          f"None: {sum(r is None for r in rewards)}; trainer peak RSS {before:.0f} MB before the step, "
          f"{peak_rss_mb():.0f} MB after")


def humaneval(group: int, concurrency: int) -> int:
    """Assert mode as the trainer meets it: HumanEval's 164 reference solutions, each `group` times in a row (a
    prompt's completions arrive together), judged through one pool. Prints the wall time, the sandbox executions
    per solution and how many passed. Runs against whichever checkout holds this script."""
    from nanogrpo.sandbox import pool as pool_module
    from nanogrpo.tasks.benchmarks import load_humaneval_rows

    problems = [p for p in load_humaneval_rows() for _ in range(group)]
    execs = [0]
    real_exec = pool_module.Session.exec

    async def counted(self, spec):
        execs[0] += 1
        return await real_exec(self, spec)

    pool_module.Session.exec = counted
    pool = SandboxPool(concurrency=concurrency).start()
    t = time.perf_counter()
    verdicts = judge_many([p["solution"] for p in problems], problems, pool=pool)
    wall = time.perf_counter() - t
    pool.close()
    passed = sum(v is not None and v.reward == 1.0 for v in verdicts)
    print(f"HumanEval reference solutions x {group}, {concurrency} slots: {len(problems)} judged in {wall:.1f} s "
          f"({1000 * wall / len(problems):.1f} ms each), {execs[0] / len(problems):.2f} executions each, "
          f"{passed} passed")
    return 0 if passed == len(problems) else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="400 executions per cell and 1,000 programs at 4x")
    ap.add_argument("--per-cell", type=int, default=None)
    ap.add_argument("--programs", type=int, default=None, help="correct programs judged at 4x oversubscription")
    ap.add_argument("--rounds", type=int, default=4, help="alternating rounds per cell")
    ap.add_argument("--rss", action="store_true", help="only the trainer-memory step (rss_step)")
    ap.add_argument("--rss-mb", type=float, default=1.0, help="MB each program prints per test")
    ap.add_argument("--rss-shape", default="64x8x10", help="prompts x completions per prompt x tests")
    ap.add_argument("--humaneval", action="store_true", help="only assert mode: HumanEval's reference solutions")
    ap.add_argument("--group", type=int, default=1, help="--humaneval: each solution this many times in a row")
    args = ap.parse_args(argv)
    if args.humaneval:
        return humaneval(args.group, os.cpu_count() or 1)
    if args.rss:
        rss_step(*(int(x) for x in args.rss_shape.split("x")), args.rss_mb)
        return 0
    per_cell = args.per_cell or (400 if args.full else 120)
    n_prog = args.programs or (1000 if args.full else 200)
    cores = os.cpu_count() or 1

    print(f"cores={cores} per_cell={per_cell} rounds={args.rounds} program={PROGRAM!r}")
    print("| concurrency | plain exec/s | plain p50 ms | plain p99 ms | isolated exec/s | isolated p50 ms "
          "| isolated p99 ms | ratio | isolated, fresh python3 exec/s | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c in sorted({1, cores, 2 * cores}):
        pool = SandboxPool(concurrency=c).start()
        pool.map(lambda s, _: s.exec(ExecSpec([PYTHON, "-c", "pass"])), range(c))  # warm every slot
        res = {"plain": ([], 0.0), "isolated": ([], 0.0), "fresh": ([], 0.0)}
        k = per_cell // args.rounds
        for _ in range(args.rounds):  # alternate, so background load hits all alike
            for name in res:
                t = time.perf_counter()
                lat = plain_batch(k, c) if name == "plain" else isolated_batch(pool, k, fresh=name == "fresh")
                lats, wall = res[name]
                res[name] = (lats + lat, wall + time.perf_counter() - t)
        pool.close()
        p, i, f = (summarise(*res[name]) for name in ("plain", "isolated", "fresh"))
        print(f"| {c} | {p[0]:.1f} | {p[1]:.1f} | {p[2]:.1f} | {i[0]:.1f} | {i[1]:.1f} | {i[2]:.1f} "
              f"| {i[0] / p[0]:.2f}x | {f[0]:.1f} | {f[0] / p[0]:.2f}x |", flush=True)

    slots = 4 * cores
    problems, codes = [], []
    for k in range(n_prog):
        n = 20000 + 37 * k
        problems.append({"id": f"b{k}", "language": "python", "mode": "stdio", "time_limit_s": 6,
                         "tests": [{"input": f"{n}\n", "output": f"{sum(i * i for i in range(n))}\n"}]})
        codes.append("n = int(input())\nprint(sum(i * i for i in range(n)))")
    pool = SandboxPool(concurrency=slots).start()
    t = time.perf_counter()
    verdicts = judge_many(codes, problems, pool=pool)
    wall = time.perf_counter() - t
    pool.close()
    fn = sum(v is None or v.reward != 1.0 for v in verdicts)
    infra = sum(v is None for v in verdicts)
    print(f"\n{n_prog} correct programs, {slots} slots on {cores} cores (4x oversubscription): "
          f"{fn} false negatives ({infra} infrastructure errors), {n_prog / wall:.1f} programs/s")
    return 1 if fn else 0


if __name__ == "__main__":
    sys.exit(main())
