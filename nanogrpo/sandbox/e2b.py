"""E2B backend: the same worker interface as local.py, on long-lived E2B cloud sandboxes (one per pool slot),
each execution `runner.py once` in it as root. The only file that imports e2b (lazily). How it runs and what was
tested (its boundary only, with a fake client): docs/sandbox.md, "E2B backend".
"""
import asyncio
import itertools
import json
import os

from .types import RUNNER_FILES, ExecResult, ExecSpec, InfraError, Overloaded

HERE = os.path.dirname(os.path.abspath(__file__))
REMOTE = "/tmp/nanogrpo"
_ids = itertools.count()


class E2BWorker:
    isolation = "remote"

    def __init__(self, slot: int, api_key: str | None = None, template: str | None = None,
                 lifetime_s: int = 3600, command_slack_s: float = 30.0, base_uid: int = 61000,
                 python: str = "python3", sandbox_class=None):
        self.slot, self.template, self.lifetime_s = slot, template, lifetime_s
        self.api_key = api_key or os.environ.get("E2B_API_KEY")
        self.command_slack_s, self.python = command_slack_s, python
        self.uid = base_uid + slot  # distinct per slot, like the local backend
        self.sandbox_class = sandbox_class  # a fake in tests; the real AsyncSandbox otherwise
        self.sbx = None

    async def start(self) -> None:
        if not self.api_key and self.sandbox_class is None:
            raise InfraError("the e2b backend needs E2B_API_KEY")
        cls = self.sandbox_class
        if cls is None:
            try:
                from e2b_code_interpreter import AsyncSandbox as cls
            except ImportError as e:
                raise InfraError("the e2b backend needs `pip install e2b-code-interpreter`") from e
        try:
            self.sbx = await cls.create(template=self.template, timeout=self.lifetime_s, api_key=self.api_key,
                                        allow_internet_access=False)
            for name in RUNNER_FILES:
                with open(os.path.join(HERE, name)) as f:
                    await self.sbx.files.write(f"{REMOTE}/{name}", f.read())
        except Exception as e:  # noqa: BLE001  any SDK or network error is infrastructure
            raise InfraError(f"could not create E2B sandbox: {e!r}") from e

    async def _call(self, req: dict, timeout_s: float) -> dict:
        if self.sbx is None:
            raise InfraError("E2B sandbox not started")
        name = f"{REMOTE}/req-{next(_ids)}.json"
        cmd = f"{self.python} -I {REMOTE}/runner.py once {self.uid} {name}"
        try:
            await self.sbx.files.write(name, json.dumps(req))
            res = await self.sbx.commands.run(cmd, user="root", timeout=timeout_s,
                                              envs={"NANOGRPO_JOBS_ROOT": f"{REMOTE}/jobs"})
        except Exception as e:  # noqa: BLE001  CommandExitException, TimeoutException, network: all infra
            raise InfraError(f"E2B command failed: {e!r}") from e
        if getattr(res, "exit_code", 0) != 0:
            raise InfraError(f"E2B runner exited {res.exit_code}: {res.stderr[-500:]}")
        try:
            rep = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError) as e:
            raise InfraError(f"E2B runner gave no reply: {res.stdout[-300:]!r}") from e
        if "infra_error" in rep:
            raise (Overloaded if rep.get("overloaded") else InfraError)(rep["infra_error"])
        return rep

    async def probe(self) -> dict:
        return await self._call({"op": "probe"}, 60)

    def new_job(self) -> str:
        return f"e{self.slot}-{next(_ids)}"

    async def exec(self, job: str, spec: ExecSpec) -> ExecResult:
        return ExecResult(**await self._call(spec.request(job), spec.limits.wall_s + self.command_slack_s))

    async def end_job(self, job: str) -> None:
        await self._call({"op": "end", "job": job}, 60)

    async def close(self) -> None:
        if self.sbx is not None:
            try:
                await asyncio.wait_for(self.sbx.kill(), 30)
            except Exception:  # noqa: BLE001  it may already be gone; E2B also expires it after lifetime_s
                pass
            self.sbx = None
