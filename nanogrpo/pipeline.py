"""Rollouts ahead of the update (`async_steps = k`): the next steps' rollouts are generated while this step trains.

With k = 0 this file is not used: train.py's loop calls rollout.Worker itself; `Rollouts` is the same interface
with the rollouts sampled ahead. With k >= 1 one background thread (`rollouts`) owns the sampler and runs jobs in
step order; step j is sampled with weight version max(start, j - k) (the schedule and the objective that corrects
the staleness: docs/grpo.md, "Async GRPO"). After the update of step t `sync_weights` copies the new weights and
queues step t + 1 + k on the copy, which the thread syncs into the sampler just before generating: the trainer goes
on updating its own, and on FSDP the gather is a collective only the main thread may run.

The thread runs nothing collective, reads the prompt stream only inside its jobs (in step order), and on a CPU gets
half the intra-op threads (`split_threads`: two phases on two cores with two threads each run 6x slower).
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from nanogrpo import dist
from nanogrpo.config import ConfigError
from nanogrpo.rollout import rank_state


class Rollouts:
    """This rank's steps' rollouts in order: `take(step)` each step, `sync_weights(version, weights)` after each update.
    `worker` (rollout.Worker) samples them from `stream` and syncs weights into the sampler."""

    def __init__(self, worker, stream, rank: int, ahead: int, start: int, end: int, pending: list | None = None):
        self.worker, self.stream, self.rank = worker, stream, rank
        self.ahead, self.start, self.end = ahead, start, end
        self.jobs: dict[int, Future] = {}
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="rollouts")
        for batch in pending or []:  # a checkpoint's queued steps (resume): trained as they were sampled
            self.jobs[batch.step] = Future()
            self.jobs[batch.step].set_result(batch)

    def take(self, step: int):
        """Step `step`'s rollouts: the queued job's, waited for (its error raised here)."""
        if not self.jobs:  # the first take of a run (or a resume without queued steps): the sampler's weights
            for j in range(step, min(step + self.ahead + 1, self.end)):
                self._queue(j, self.start, None)
        return self.jobs.pop(step).result()

    def sync_weights(self, version: int, weights) -> None:
        """After the update that made weights `version` (the step that just trained was version - 1): copies them and
        queues step version + k on the copy."""
        if version + self.ahead >= self.end:  # no step left to sample with them: the sampler takes them for the evals
            self.drain()
            return self.worker.sampler.sync_weights(weights)
        copy = [(name, t.detach().clone()) for name, t in weights]  # the trainer updates its own in place
        self._queue(version + self.ahead, version, copy)

    def drain(self) -> None:
        """Wait until the thread is idle (an evaluation uses the sampler; a checkpoint saves the queue)."""
        for job in list(self.jobs.values()):
            job.result()

    def state(self, stream) -> dict:
        """This rank's part of a checkpoint (checkpoint.save's rank_state): the queued steps' rollouts, oldest first,
        all sampled (it waits for them), and its place in the prompt stream (with dynamic sampling each rank draws as
        many rounds as it needs)."""
        self.drain()
        return rank_state([self.jobs[j].result() for j in sorted(self.jobs)], self.ahead, stream.state_dict())

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def _queue(self, step: int, version: int, weights) -> None:
        self.jobs[step] = self.pool.submit(self._sample, step, version, weights)

    def _sample(self, step: int, version: int, weights):
        """On the rollout thread: the copy of the weights this step samples with (None: what the sampler holds)."""
        if weights is not None:
            self.worker.sampler.sync_weights(weights)
        return self.worker.rollouts(step, version, weights, self.stream, self.rank)


def resumed(cfg, saved: dict, stream, ckpt) -> list:
    """The rollouts a checkpoint had queued, from `saved` (checkpoint.rank_state: {} for a fresh run): they are trained
    first; the rank's prompt stream continues where that rank was."""
    queued, world = saved.get("rollouts") or [], dist.world_size()
    bad = bool(saved) and ((queued and saved["async_steps"] != cfg.async_steps)
                           or ((queued or cfg.dynamic_sampling) and saved["world"] != world))
    if dist.all_reduce(torch.tensor([float(bad)]), "max").item():  # every rank stops, also one without a file
        raise ConfigError(f"{ckpt} holds rollouts sampled ahead with async_steps={saved.get('async_steps')} on "
                          f"{saved.get('world')} ranks (or each rank's place in the prompts, with dynamic sampling): "
                          "resume it with the same async_steps and world size")
    if saved:
        stream.load_state_dict(saved["data"])
    return queued


def split_threads(ahead: int, device: torch.device) -> None:
    """async_steps on a CPU: the rollout thread and the update share the cores, half the intra-op threads each
    (each PyTorch call uses the process's count, from whichever thread it runs)."""
    if ahead and device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, torch.get_num_threads() // 2))
