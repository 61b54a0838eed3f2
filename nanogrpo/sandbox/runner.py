"""The in-sandbox executor (stdlib only; runs under the system python3 inside the sandbox).

One long-lived runner per pool slot (the "warm worker") reads length-prefixed JSON requests on stdin and, per
execution, forks a supervisor (`Supervised`) that makes the execution's namespaces (confine.py) and pipe / socket
budget (seccomp.py), then forks the program: non-root uid, rlimits, syscall filter, new session, exec. A
`python3 -I ...` program is not exec'd: the forked child runs it in this started interpreter (`run_inprocess`).
What each layer stops: docs/sandbox.md.

Requests: {"op": "probe"} | {"op": "exec", "job": str, "files": {name: text}, "argv": [...],
"stdin": str, "limits": {...}, "clean"?, "fresh_interpreter"?, "hash_seed"?} | {"op": "end", "job": str}.
Replies are one JSON object each.
Also usable once from a command line (`runner.py once REQUEST.json`): the E2B backend does that.
Over 500 lines because it is the whole in-sandbox side of one execution (request loop, supervisor, fork server,
in-process runner), stdlib only and copied into the sandbox beside confine.py and seccomp.py, its only imports.
"""
import atexit
import errno
import gc
import io
import itertools
import json
import os
import resource
import select
import shutil
import signal
import socket
import stat
import struct
import sys
import time
import traceback  # imported here, once: the forked children run programs with it already loaded
import types

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)  # confine.py, seccomp.py sit next to this file (in the sandbox too); programs never see it
import confine  # noqa: E402
import seccomp  # noqa: E402
sys.path.remove(_HERE)

JOBS_ROOT = os.environ.get("NANOGRPO_JOBS_ROOT", "/tmp/jobs")
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
MEMORY_MARKERS = ("MemoryError", "std::bad_alloc", "out of memory", "Cannot allocate memory")
# The wall-clock backstop catches programs that sleep or block. One that wanted the CPU for at least
# STARVED of the elapsed time (CPU + run-queue wait) was starved by load: its deadline is stretched, up
# to MAX_STRETCH times; still starved then is an infrastructure error (None, not retried), never a timeout.
STARVED, MAX_STRETCH = 0.5, 4
REPORT = struct.Struct("<id")  # the supervisor's account of the program: wait status, CPU seconds


def read_exact(fd, n):
    # Unbuffered: nothing beyond this message is read, so a forked child never holds the next one.
    chunks = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_msg(fd):
    head = read_exact(fd, 4)
    if head is None:
        return None
    return json.loads(read_exact(fd, struct.unpack("<I", head)[0]))


def write_msg(fd, obj):
    data = json.dumps(obj).encode()
    data = struct.pack("<I", len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def job_dir(job):
    if not job or "/" in job or job.startswith("."):
        raise ValueError(f"bad job id {job!r}")
    return os.path.join(JOBS_ROOT, job)


def kill_untrusted(uid):
    """Kill every process of the untrusted uid, including ones that left the process group."""
    if uid != os.getuid():  # a helper with the untrusted uid kills every process of that uid (not root's)
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
    # pid 2 under bwrap's pid-1 reaper: proof that we are in our own pid namespace (never kill(-1) the host).
    elif os.environ.get("NANOGRPO_PIDNS") == "1" and os.getpid() == 2:
        # Same uid (non-root mode, no zygote): kill(-1) reaches everything but pid 1 and ourselves.
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass


def write_file(cwd, name, text, uid):
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"bad file name {name!r}")
    path = os.path.join(cwd, name)
    try:  # the program may have left a symlink here: never write through it
        os.unlink(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        remove_tree(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    if confined(uid):
        os.chown(path, uid, uid)
    return path


def remove_tree(path):
    """Delete `path` and everything under it, however deep: a program can nest directories past any recursion
    limit and any path length. Nothing descends: each directory's entries are moved up into `path` itself
    (renames relative to one open directory), then the emptied directory is removed."""
    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    except OSError:  # a file, or a symlink
        os.unlink(path)
        return
    moved = itertools.count()
    try:
        while names := os.listdir(top):
            for name in names:
                _remove_entry(top, name, moved)
    finally:
        os.close(top)
    os.rmdir(path)


def _remove_entry(top, name, moved):
    if not stat.S_ISDIR(os.stat(name, dir_fd=top, follow_symlinks=False).st_mode):
        os.unlink(name, dir_fd=top)
        return
    if os.geteuid() != 0:  # the program's own uid (non-root mode): it may have taken the permissions away
        os.chmod(name, 0o700, dir_fd=top)
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
    try:
        children = os.listdir(fd)
    finally:
        os.close(fd)
    for child in children:
        while True:  # a name not taken in `top`
            new = f".up{next(moved)}"
            try:
                os.stat(new, dir_fd=top, follow_symlinks=False)
            except FileNotFoundError:
                break
        os.rename(f"{name}/{child}", new, src_dir_fd=top, dst_dir_fd=top)
    os.rmdir(name, dir_fd=top)


def set_limits(lim):
    cpu = int(float(lim["cpu_s"]))
    # Soft limit sends SIGXCPU a second after the budget; the hard limit is the backstop.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu + 1, cpu + 2))
    for kind, v in ((resource.RLIMIT_AS, lim["mem_mb"] * 2**20), (resource.RLIMIT_FSIZE, lim["fsize_mb"] * 2**20),
                    (resource.RLIMIT_NOFILE, lim["nofile"]), (resource.RLIMIT_NPROC, lim["nproc"]),
                    (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(kind, (int(v), int(v)))


def run_exec(req, uid, launcher=None):
    lim = req["limits"]
    cwd = job_dir(req["job"])
    if req.get("clean"):  # a fresh directory: nothing the program left behind is reused
        remove_tree(cwd)
    used = os.path.isdir(cwd)  # by this job's earlier programs
    if not used:
        os.makedirs(cwd, mode=0o700)
        if confined(uid):
            os.chown(cwd, uid, uid)
    try:
        for name, text in req.get("files", {}).items():
            write_file(cwd, name, text, uid)
        # stdin is a real file: every way of reading it works, even seeking.
        stdin_path = write_file(cwd, ".stdin", req["stdin"], uid) if req.get("stdin") else os.devnull
    except OSError as e:
        # Only this job's programs write to the slot's /tmp (earlier jobs' directories are gone): when its
        # directory held their files, a full /tmp is theirs, a runtime error; a retry would only fill it again.
        if not used or e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        return {"status": "runtime_error", "exit_code": 1, "stdout": "", "time_s": 0.0, "cpu_s": 0.0,
                "stderr": f"sandbox: {e.strerror}: the program's own files filled the job's directory"}
    # Only trusted fields go to the child's launcher (the zygote never holds a program's data).
    spec = {"argv": req["argv"], "cwd": cwd, "stdin": stdin_path, "limits": lim,
            "fresh_interpreter": bool(req.get("fresh_interpreter")), "env": dict(ENV, HOME=cwd, TMPDIR=cwd)}
    if req.get("hash_seed") is not None:
        seeded(spec, int(req["hash_seed"]))
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    exc_r, exc_w = os.pipe2(os.O_CLOEXEC)  # tells the parent that exec itself failed (an infra error)
    launcher = launcher or Direct(uid)
    t0 = time.monotonic()
    try:
        pid = launcher.launch(spec, (out_w, err_w, exc_w))
    finally:
        for fd in (out_w, err_w, exc_w):
            os.close(fd)
    with open(exc_r, "rb", buffering=0) as f:  # until exec succeeds (close-on-exec) or the child ends
        exec_error = f.read()
    cap = int(lim["out_bytes"])
    bufs = {out_r: bytearray(), err_r: bytearray()}
    open_fds = [out_r, err_r]
    wall_s = float(lim["wall_s"])
    deadline, hard_deadline = t0 + wall_s, t0 + MAX_STRETCH * wall_s
    wall_timeout = over_cap = overloaded = exited = False
    steps = Steps(lim)
    while True:
        now = time.monotonic()
        if now >= steps.deadline:  # a step past its own wall clock: stopped here, whatever it does with signals
            exited = bool(select.select([launcher.exit_fd], [], [], 0)[0])
            wall_timeout = not exited
            break
        if now >= deadline:
            if select.select([launcher.exit_fd], [], [], 0)[0]:  # it ended as the deadline came: not a timeout
                exited = True
                break
            if starved_by_load(uid, launcher, now - t0, float(lim["cpu_s"])):
                if now < hard_deadline:
                    deadline = min(now + wall_s, hard_deadline)
                    continue
                overloaded = True
            wall_timeout = True
            break
        rd, _, _ = select.select(open_fds + [launcher.exit_fd], [], [], min(deadline, steps.deadline) - now)
        for fd in rd:
            if fd == launcher.exit_fd:
                continue
            data = os.read(fd, 65536)
            if not data:
                open_fds.remove(fd)
            elif len(bufs[out_r]) + len(bufs[err_r]) < 2 * cap:
                bufs[fd] += data
                if len(bufs[fd]) > cap:
                    over_cap = True
                if fd == err_r:
                    steps.read(bufs[err_r])
        if over_cap:
            break
        if launcher.exit_fd in rd:
            exited = True
            break
    if not exited:
        stop(pid, uid, launcher.exit_fd)
    status, cpu, reported = launcher.wait()
    if not confined(uid):
        kill_untrusted(uid)  # what it left behind (confined: its pid namespace ended with it)
    # Drain what the program wrote before it ended (everything holding the pipes is dead now).
    end = time.monotonic() + 1.0
    while open_fds and time.monotonic() < end:
        rd, _, _ = select.select(open_fds, [], [], 0.2)
        for fd in rd:
            data = os.read(fd, 65536)
            if not data:
                open_fds.remove(fd)
            elif len(bufs[fd]) <= cap:
                bufs[fd] += data
                over_cap = over_cap or len(bufs[fd]) > cap
    for fd in (out_r, err_r):
        os.close(fd)
    wall = time.monotonic() - t0
    code = os.waitstatus_to_exitcode(status)
    stdout = bytes(bufs[out_r][:cap]).decode("utf-8", "replace")
    stderr = bytes(bufs[err_r][:cap]).decode("utf-8", "replace")
    if confined(uid) and not reported and not exec_error:
        return {"infra_error": f"the execution's supervisor ended without an account (status {status})"}
    if exec_error:
        msg = "exec failed: " + exec_error.decode("utf-8", "replace")
        if not exec_error.startswith(b"sandbox: "):  # the program's own binary (it may have deleted it): its fault
            return {"status": "runtime_error", "exit_code": 127, "stdout": "", "stderr": msg,
                    "time_s": wall, "cpu_s": cpu}
        return {"infra_error": msg}  # the interpreter or compiler missing, or the sandbox failing: its fault
    if overloaded and not exited:
        return {"overloaded": True,
                "infra_error": f"machine overloaded: the program was starved of CPU for {wall:.1f} s "
                               f"(used {cpu:.2f} s of {lim['cpu_s']} s); not scored as a timeout"}
    if over_cap:
        kind = "output_limit"
    elif wall_timeout or cpu > float(lim["cpu_s"]) or code in (-signal.SIGXCPU,):
        kind = "timeout"
    elif code != 0 and any(m in stderr for m in MEMORY_MARKERS):
        kind = "memory"
    elif code == -signal.SIGXFSZ:
        kind = "output_limit"
    elif code != 0:
        kind = "runtime_error"
    else:
        kind = "ok"
    return {"status": kind, "exit_code": code, "stdout": stdout, "stderr": stderr,
            "time_s": wall, "cpu_s": cpu}


class Steps:
    """A program that announces its steps (limits `step_mark`, `step_s`, `steps`; the replayed tool cells do):
    each stderr line starting with step_mark starts a step with step_s of wall clock from when the runner reads it,
    past which the program is stopped as a timeout. Only the first `steps` count (docs/tools.md, "Time")."""

    def __init__(self, lim):
        self.step_s = float(lim.get("step_s") or 0)
        self.mark = str(lim.get("step_mark") or "").encode()
        self.left = int(lim.get("steps") or 0) if self.step_s > 0 and self.mark else 0
        self.deadline = float("inf")
        self.scanned = 0  # the buffer's bytes read for lines so far

    def read(self, buf):
        while self.left:
            nl = buf.find(b"\n", self.scanned)
            if nl < 0:
                return
            if buf.startswith(self.mark, self.scanned):
                self.left -= 1
                self.deadline = time.monotonic() + self.step_s
            self.scanned = nl + 1


def seeded(spec, seed):
    """A fixed string-hash seed: only a fresh interpreter reads PYTHONHASHSEED (a forked warm one keeps the
    runner's, which differs from slot to slot), and only without -I / -E, which ignore the environment."""
    options = itertools.takewhile(lambda a: a.startswith("-") and a not in ("-c", "-m"), spec["argv"][1:])
    if any(a[1:2] != "-" and ("I" in a or "E" in a) for a in options):  # -I, -E, or a cluster like -sI
        raise ValueError(f"hash_seed with {spec['argv']}: -I and -E ignore PYTHONHASHSEED")
    spec["env"]["PYTHONHASHSEED"] = str(seed)
    spec["fresh_interpreter"] = True


BASE_NICE = os.getpriority(os.PRIO_PROCESS, 0)  # what every execution starts with (it can only raise it)


def starved_by_load(uid, launcher, elapsed, cpu_limit):
    """At the wall deadline: was the program kept from the CPU by other work, rather than idle or starving itself?
    Then its deadline is stretched instead of a timeout. Judged on its own account over its whole run, never on
    how busy the machine looks now: one of its threads runnable for at least STARVED of the time, yet its CPU limit
    not used (docs/sandbox.md, "Time", says why each part of the rule is there)."""
    me = confine.program_sched(uid, exclude=(os.getpid(), launcher.pid), base_nice=BASE_NICE)
    if not me["threads"]:  # every thread has ended and its account is on the way (its supervisor may be starved too)
        return True
    return me["longest"] >= STARVED * elapsed and me["cpu"] < cpu_limit and not me["lowered"]


def confined(uid):
    """Root switching to an untrusted uid (the normal case): each execution gets its own namespaces."""
    return os.getuid() == 0 and uid != 0


def stop(pid, uid, exit_fd):
    """Kill a running execution (timeout, output cap). Confined, the program's processes are killed by uid: its
    supervisor (root) then reports on it and ends its pid namespace. Only if that does not end it (the program
    had not yet dropped to its uid) is the supervisor killed too: no report, an infrastructure error."""
    if confined(uid):
        kill_untrusted(uid)
        if select.select([exit_fd], [], [], 5.0)[0]:
            return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    kill_untrusted(uid)


class Supervised:
    """One confined execution, prepared before its request arrives (the zygote keeps the next one ready while
    the last result travels back): a supervisor (root) made the execution's IPC, mount and pid namespaces and
    its pipe / socket budget, forked pid 1 of the new pid namespace (`be_init`) and the program's process
    (pid 2, root still, its /proc mounted), which waits for the request. `start` hands it the spec and its
    pipes; the supervisor answers the budget's calls until the program exits, kills pid 1 (every process left
    in the namespace dies with it) and reports the program's wait status and CPU time."""

    def __init__(self, uid, config):
        self.config = config  # (shm_mb, pipes, sockets): made with these; a request with others gets a fresh one
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.report, report_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            self.sock.close()
            os.close(self.report)
            supervisor(uid, config, theirs, report_w)
        theirs.close()
        os.close(report_w)

    def start(self, spec, fds):
        try:
            socket.send_fds(self.sock, [json.dumps(spec).encode()], list(fds))
        except OSError:  # it died before its request: no report, an infrastructure error
            pass
        self.sock.close()

    def finish(self):
        """(wait status, CPU seconds, reported), once the program has ended; the supervisor exits right after."""
        try:
            got = os.read(self.report, REPORT.size)
        finally:
            os.close(self.report)
        _, status, ru = os.wait4(self.pid, 0)
        if len(got) == REPORT.size:
            return *REPORT.unpack(got), True
        return status, ru.ru_utime + ru.ru_stime, False

    def discard(self):
        self.sock.close()  # the waiting program reads EOF and exits; so does the supervisor
        self.finish()


def config_of(limits):
    return int(limits.get("shm_mb", 64)), int(limits.get("pipes", 512)), int(limits.get("sockets", 128))


def supervisor(uid, config, sock, report_w):
    """The supervisor's process (see Supervised). Never returns."""
    shm_mb, pipes, sockets = config
    try:
        keep = sorted((sock.fileno(), report_w))  # nothing else of the runner's or the zygote's
        os.closerange(3, keep[0])
        os.closerange(keep[0] + 1, keep[1])
        os.closerange(keep[1] + 1, 65536)
        os.setsid()
        confine.new_namespaces(shm_mb)
        budget = seccomp.Budget.install(pipes, sockets)
        init = os.fork()
        if init == 0:
            be_init()
        pid = os.fork()
        if pid == 0:
            waiting_program(uid, sock)
    except BaseException as e:  # noqa: BLE001  nothing to run the program in: say why, to its request
        fail_request(sock, e)
    sock.close()
    status, ru = supervise(pid, budget)
    os.kill(init, signal.SIGKILL)  # its namespace ends: every process left in it is killed (the slot's init reaps)
    os.write(report_w, REPORT.pack(status, ru.ru_utime + ru.ru_stime))
    os._exit(0)


def waiting_program(uid, sock):
    """pid 2 of the execution's pid namespace: its own /proc, then the request, then the program. Never returns."""
    try:
        confine.mount_proc()
    except BaseException as e:  # noqa: BLE001
        fail_request(sock, e)
    msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
    if not msg:  # discarded
        os._exit(0)
    sock.close()
    try:
        run_program(json.loads(msg), fds, uid)
    except BaseException as e:  # noqa: BLE001
        report_exec_error(fds[2], e)


def fail_request(sock, error):
    """Wait for the request this process cannot run, and answer it with `error` (an infrastructure error)."""
    try:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
        if msg:
            report_exec_error(fds[2], error)
    finally:
        os._exit(127)


def report_exec_error(exc_w, error, sandbox=True):
    """Tell the runner the program could not be started. sandbox=False only for the program's own binary that
    would not exec (it may have deleted it): that is its fault; anything else is the sandbox's."""
    try:
        os.write(exc_w, (("sandbox: " if sandbox else "") + repr(error)).encode()[:1000])
    finally:
        os._exit(127)


def be_init():
    """pid 1 of the execution's pid namespace: holds it open and reaps the orphans it inherits (waited for, so
    their CPU time counts in its own account, which the load check reads), until the supervisor kills it. The
    program never runs as pid 1, which ignores signals it has no handler for (a SIGKILL it sends itself,
    SIGPIPE, SIGXFSZ)."""
    try:
        os.closerange(3, 65536)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # one pending while reaping is not lost
        while True:
            try:
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
            except ChildProcessError:
                pass
            signal.sigwait({signal.SIGCHLD})
    finally:
        os._exit(0)


def supervise(pid, budget):
    """Until the program (our child) exits: answer its budget's calls. Its wait status and rusage."""
    if budget is not None:
        pidfd = os.pidfd_open(pid)
        poll = select.poll()
        poll.register(pidfd, select.POLLIN)
        poll.register(budget.fd, select.POLLIN)
        while not any(fd == pidfd for fd, _ in poll.poll()):
            budget.answer()
    _, status, ru = os.wait4(pid, 0)
    return status, ru


def run_program(spec, fds, uid):
    """A new session, the untrusted uid with its limits and filter, then exec (or run in-process). Never returns."""
    os.setsid()
    out_w, err_w, exc_w = fds
    stdin_fd = os.open(spec["stdin"], os.O_RDONLY)
    os.dup2(stdin_fd, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.chdir(spec["cwd"])
    if confined(uid):
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # drops every capability
    set_limits(spec["limits"])
    seccomp.install_seccomp()
    os.closerange(3, exc_w)
    os.closerange(exc_w + 1, 65536)
    # A descriptor received over a socket is not close-on-exec: without this an exec'd program would hold the
    # runner's "did exec fail" pipe open, the runner would wait on it, and a program printing more than a pipe
    # holds would block forever.
    os.set_inheritable(exc_w, False)
    argv = spec["argv"]
    inproc = None if spec["fresh_interpreter"] else python_inprocess(argv)
    if inproc is not None:
        os.close(exc_w)  # "exec" succeeded: the parent stops waiting and starts the clock
        run_inprocess(*inproc, spec["env"])  # never returns
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    exe = argv[0]
    exe = exe if "/" in exe else (shutil.which(exe, path=ENV["PATH"]) or exe)
    try:
        os.execve(exe, argv, spec["env"])
    except OSError as e:
        report_exec_error(exc_w, e, sandbox=not argv[0].startswith("./"))


class Direct:
    """Fork the execution from this process (one-shot runs: `once`, and the non-root mode)."""

    def __init__(self, uid):
        self.uid, self.pid, self.child, self.exit_fd, self.run = uid, None, None, None, None

    def launch(self, spec, fds):
        if confined(self.uid):
            self.run = Supervised(self.uid, config_of(spec["limits"]))
            self.run.start(spec, fds)
            self.child = self.run.pid
        else:  # the child is the program
            self.child = os.fork()
            if self.child == 0:
                try:
                    run_program(spec, fds, self.uid)
                except BaseException as e:  # noqa: BLE001
                    report_exec_error(fds[2], e)
        self.exit_fd = os.pidfd_open(self.child)
        return self.child

    def wait(self):
        if self.run is not None:
            got = self.run.finish()
        else:
            _, status, ru = os.wait4(self.child, 0)
            got = status, ru.ru_utime + ru.ru_stime, False
        os.close(self.exit_fd)
        return got


class Zygote:
    """A fork of the runner made before any request, so its heap never held a program's source, input or
    output; every execution forks from it, and finds nothing of an earlier one in its inherited memory.
    It gets only trusted fields (argv, paths, limits) and the pipe fds (SCM_RIGHTS); it reports the pid,
    then the exit status and CPU time."""

    def __init__(self, uid, close=()):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.pid = os.fork()
        if self.pid == 0:
            for fd in close:  # the runner's protocol pipes: only the runner may hold them
                os.close(fd)
            self.sock.close()
            try:
                zygote_loop(theirs, uid)
            finally:
                os._exit(0)
        theirs.close()
        self.exit_fd = self.sock.fileno()  # readable when the execution's exit status arrives

    def launch(self, spec, fds):
        socket.send_fds(self.sock, [json.dumps(spec).encode()], list(fds))
        return json.loads(self.sock.recv(4096))["pid"]

    def wait(self):
        rep = json.loads(self.sock.recv(4096))
        return rep["status"], rep["cpu"], rep["reported"]


def zygote_loop(sock, uid):
    ready = None  # the next execution, prepared while the runner was busy with the last one's result
    try:
        while True:
            try:
                msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
            except OSError:
                return
            if not msg:  # the runner is gone
                return
            spec = json.loads(msg)
            config = config_of(spec["limits"])
            if ready is None or ready.config != config:
                if ready is not None:
                    ready.discard()
                ready = Supervised(uid, config)
            run, ready = ready, None
            run.start(spec, fds)
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"pid": run.pid}).encode())
            status, cpu, reported = run.finish()
            sock.send(json.dumps({"status": status, "cpu": cpu, "reported": reported}).encode())
            ready = Supervised(uid, config)
    finally:
        if ready is not None:
            ready.discard()


def python_inprocess(argv):
    """(source, filename, sys.argv) if argv runs this very interpreter in isolated mode, else None.

    Such programs are not exec'd: the forked child (already the untrusted uid, with its rlimits) runs
    them itself, as a fresh `python3 -I` would. Forking a warm interpreter skips the ~10-20 ms of
    interpreter start-up that dominates short programs."""
    if len(argv) < 3 or argv[1] != "-I" or os.path.realpath(argv[0]) != os.path.realpath(sys.executable):
        return None
    if argv[2] == "-c" and len(argv) >= 4:
        return argv[3], "<string>", ["-c", *argv[4:]]
    if not argv[2].startswith("-"):
        try:
            with open(argv[2]) as f:
                return f.read(), argv[2], argv[2:]
        except (OSError, UnicodeDecodeError):
            return None  # let the real interpreter report it, as it would
    return None


def run_inprocess(source, filename, args, env):
    """In the forked child: what `python3 -I FILE` does, from __main__ to interpreter shutdown."""
    os.environ.clear()  # the scrubbed environment, not the runner's
    os.environ.update(env)
    def stream(fd, like, mode):  # fresh objects on the new fds 0/1/2; nothing buffered from the runner
        raw = io.FileIO(fd, mode, closefd=False)
        buf = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
        return io.TextIOWrapper(buf, encoding=like.encoding, errors=like.errors,
                                line_buffering=like.line_buffering)

    sys.stdin = sys.__stdin__ = stream(0, sys.__stdin__, "r")
    sys.stdout = sys.__stdout__ = stream(1, sys.__stdout__, "w")
    sys.stderr = sys.__stderr__ = stream(2, sys.__stderr__, "w")
    main = types.ModuleType("__main__")
    if filename != "<string>":
        main.__file__ = os.path.abspath(filename)
    sys.modules["__main__"] = main
    sys.argv = list(args)
    code = 0
    try:
        exec(compile(source, filename, "exec", dont_inherit=True), main.__dict__)
    except SystemExit as e:
        code = exit_code(e)
    except BaseException as e:  # noqa: BLE001  as the interpreter does: traceback, exit status 1
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        code = 1
    threading = sys.modules.get("threading")
    if threading is not None:  # the interpreter waits for non-daemon threads before exiting
        for t in threading.enumerate():
            if t is not threading.main_thread() and not t.daemon:
                t.join()
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001  python exits 120 when it cannot flush at shutdown
        code = code or 120
    os._exit(code)


def exit_code(e):
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    print(e.code, file=sys.stderr)
    return 1


def probe(uid, launcher=None):
    """Facts about the isolation as the untrusted uid sees it (checked by the pool before use)."""
    code = (
        "import os, resource, socket\n"
        "r = {'uid': os.getuid(), 'nproc': resource.getrlimit(resource.RLIMIT_NPROC)[0]}\n"
        "try:\n open('/usr/.nanogrpo_probe', 'w'); r['root_writable'] = True\n"
        "except OSError: r['root_writable'] = False\n"
        "try:\n socket.create_connection(('1.1.1.1', 53), timeout=1); r['network'] = True\n"
        "except OSError: r['network'] = False\n"
        "r['ipc_ns'] = os.readlink('/proc/self/ns/ipc')\n"
        "print(__import__('json').dumps(r))\n"
    )
    lim = {"cpu_s": 5, "wall_s": 10, "mem_mb": 512, "fsize_mb": 1, "nofile": 64, "nproc": 64,
           "out_bytes": 10000}
    res = run_exec({"job": "probe", "argv": [sys.executable, "-I", "-c", code], "limits": lim}, uid, launcher)
    end_job("probe", uid)
    if res.get("status") != "ok":
        return {"error": f"probe failed: {res}"}
    facts = json.loads(res["stdout"])
    facts["ipc_per_execution"] = facts.pop("ipc_ns") != os.readlink("/proc/self/ns/ipc")
    return facts


def end_job(job, uid):
    kill_untrusted(uid)
    remove_tree(job_dir(job))
    return {"ok": True}


def handle(req, uid, launcher=None):
    try:
        op = req.get("op")
        if op == "exec":
            return run_exec(req, uid, launcher)
        if op == "end":
            return end_job(req["job"], uid)
        if op == "probe":
            return probe(uid, launcher)
    except Exception as e:  # noqa: BLE001  a runner bug is an infra error, never a verdict
        return {"infra_error": f"runner: {e!r}"}
    return {"infra_error": f"unknown op {op!r}"}


def serve(uid):
    os.makedirs(JOBS_ROOT, mode=0o755, exist_ok=True)
    # The protocol moves to private fds; 0 and 1 become /dev/null (the children get their own).
    inp, out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    gc.freeze()  # start-up objects stay out of the collector: forked children copy fewer pages
    # Root mode: executions fork from a zygote made now, before any untrusted byte is read. (As the same
    # uid, a program could read the runner's memory directly anyway: see docs/sandbox.md.)
    launcher = Zygote(uid, close=(inp, out)) if uid != os.getuid() else None
    while True:
        req = read_msg(inp)
        if req is None:
            return
        write_msg(out, handle(req, uid, launcher))


def main():
    mode, uid = sys.argv[1], int(sys.argv[2])
    if mode == "serve":
        serve(uid)
    elif mode == "once":  # once UID REQUEST.json: one request, reply as JSON on stdout
        with open(sys.argv[3]) as f:
            req = json.load(f)
        os.unlink(sys.argv[3])  # the next execution's program must not find it (assert mode's checks are in one)
        os.makedirs(JOBS_ROOT, mode=0o755, exist_ok=True)
        print(json.dumps(handle(req, uid)))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
