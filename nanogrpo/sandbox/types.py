"""The small dataclasses that travel between the judge, the pool and the backends."""
from dataclasses import asdict, dataclass, field

# What a backend puts next to each other in the sandbox (runner.py imports the other two from its directory).
RUNNER_FILES = ("runner.py", "confine.py", "seccomp.py")

# Statuses of one execution (ExecResult.status): a backend returns ok / runtime_error / timeout / memory / output_limit,
# the judge makes ok passed or wrong_answer, a C++ build failure is compile_error. infra_error: the sandbox failed.


class InfraError(Exception):
    """The sandbox (not the program) failed: retried, then the reward is None, never 0."""


class Overloaded(InfraError):
    """The machine starved a program of CPU past its stretched wall deadline: the verdict is None, and it is
    not retried (a retry under the same load costs the same again, and adds to the load)."""


class SandboxUnavailable(RuntimeError):
    """Isolation is not active and unsandboxed execution was not explicitly allowed."""


@dataclass
class Limits:
    cpu_s: float = 6.0        # CPU seconds; over it is a timeout
    wall_s: float = 20.0      # wall-clock backstop, generous so load never fakes a timeout
    mem_mb: int = 1024        # address space (RLIMIT_AS)
    fsize_mb: int = 64        # largest file the program may write
    nofile: int = 256         # open files
    nproc: int = 64           # processes + threads of the slot's uid
    out_bytes: int = 8 << 20  # stdout / stderr cap each
    shm_mb: int = 64          # private /dev/shm size, and separately the SysV shm cap, per execution
    pipes: int = 512          # pipes an execution may create, over all its processes (each holds <= 64 KB)
    sockets: int = 128        # AF_UNIX sockets likewise (socket() and socketpair() cost 2; each holds <= its
                              # send buffer, the kernel's default: 208 KB here)


@dataclass
class ExecSpec:
    argv: list[str]                                   # argv[0] is an absolute path inside the sandbox
    files: dict[str, str] = field(default_factory=dict)  # written into the job directory first
    stdin: str = ""
    limits: Limits = field(default_factory=Limits)
    clean: bool = False                               # empty the job directory first
    fresh_interpreter: bool = False  # exec python3 even where the warm runner could fork it (see runner.py)
    # PYTHONHASHSEED of a fresh interpreter (str hashes, so set order, the same on every slot and every run;
    # a forked warm interpreter has its slot's). argv must not pass -I or -E: they ignore it (runner.py).
    hash_seed: int | None = None

    def request(self, job: str) -> dict:
        """The runner's request to run this in job directory `job` (runner.py; both backends send it)."""
        return {"op": "exec", "job": job, **asdict(self)}


@dataclass
class ExecResult:
    status: str           # one of the statuses above
    exit_code: int = 0    # negative: killed by that signal
    stdout: str = ""
    stderr: str = ""
    time_s: float = 0.0   # wall-clock
    cpu_s: float = 0.0


@dataclass
class Verdict:
    reward: float | None              # None: infrastructure failure, leave the sample out
    results: list[ExecResult]         # one per test run (fewer when stopping at the first failure)
    status: str = ""                  # the first non-passed status, or "passed"
