"""Split placement (`sampler_ranks = s`): the last s torchrun ranks only sample, the others only train.

Trainer rank r gets its rollouts from sampler rank r % s, with rank r's prompt stream and seeds, on pipeline.py's
schedule: a split run equals the colocated one bit for bit (docs/grpo.md, "Placement"). dist.init gives each side its
own default group and two gloo groups over every rank between them (dist.SPLIT):
- to_samplers: `Start`; after an update whose weights some sampled step or evaluation will use, `Weights` (their
  fingerprints: the sampler side's check covers the wire as well as its own copy), then the tensors; `Stop`.
- to_trainers: `Rollouts`, `Evals`, `End` (each message's class says who sends it to whom, and when).
Every send is asynchronous and waited for only at the end (a trainer waits for its previous weights' send before
the next), so neither side waits on the other in a cycle. The sampler side runs the sampler check (its findings
travel with the batch; the trainers rule on them), measures the gap (checks.sampled_gap) and runs the evaluations.
Untested (no GPU here): sampler ranks on their own GPUs; the weights go over gloo through host memory, not NCCL.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import torch

from nanogrpo import dist
from nanogrpo.checks import fingerprint
from nanogrpo.rollout import rank_state
from nanogrpo.sampler import unwrap


# ---- the messages (pickled by send_object) ----


@dataclass
class Start:  # a trainer rank to its sampler rank, first: where the trainer starts
    step: int
    queued: int  # steps a checkpoint had sampled ahead: trained from the checkpoint, not sampled again
    data: dict  # the trainer's prompt stream's position


@dataclass
class Weights:  # trainer rank 0 to every sampler rank: the weights after `version` updates; the tensors follow
    version: int
    spec: list  # (name, shape, dtype) of each tensor, in the order they are sent
    prints: dict  # name -> checks.fingerprint of the tensor cast to the run's dtype (what the sampler must hold)


@dataclass
class Rollouts:  # a sampler rank to a trainer rank: its rollouts of `step`
    step: int
    batch: object  # rollout.StepRollouts
    data: dict | None  # the prompt stream's position after them


@dataclass
class Evals:  # sampler rank 0 to trainer rank 0: the evaluations of the weights after `version` updates
    version: int
    metrics: dict


class Stop:  # trainer rank 0 to every sampler rank: the trainers' loop is over (however it ended)
    pass


class End:  # a sampler rank to each of its trainer ranks, after the Stop: nothing more comes
    pass


def send_object(group, obj, dst: int) -> list:
    """Send an object to torchrun rank `dst` (its size, then its bytes); returns the sends in flight, which hold the
    buffers until they are waited for. Serialised as a checkpoint's rank files are (torch.save): these are the run's
    own objects, between its own ranks, never a dataset's bytes."""
    out = io.BytesIO()
    torch.save(obj, out)
    data = torch.frombuffer(bytearray(out.getbuffer()), dtype=torch.uint8)
    size = torch.tensor([len(data)], dtype=torch.int64)
    return [(group.send([size], dst, 0), size), (group.send([data], dst, 0), data)]


def recv_object(group, src: int):
    size = torch.empty(1, dtype=torch.int64)
    group.recv([size], src, 0).wait()
    data = torch.empty(int(size), dtype=torch.uint8)
    group.recv([data], src, 0).wait()
    return torch.load(io.BytesIO(data.numpy().tobytes()), weights_only=False)


def wait(sends: list) -> None:
    for work, _ in sends:
        work.wait()
    sends.clear()


class Remote:
    """The trainer side: pipeline.Rollouts' interface (`take`, `sync_weights`, `state`, `close`), the rollouts from
    this rank's sampler rank; `evaluations(version)` brings the sampler side's evaluation of that version."""

    def __init__(self, cfg, start: int, dtype: torch.dtype, due, stream, weights, pending: list):
        """Sends this rank's sampler rank its `Start`, then the weights of `start` (every trainer rank runs the
        gather). due(version): whether the run evaluates those weights (None: no evaluations)."""
        self.split, self.dtype, self.due = dist.SPLIT, dtype, due
        self.ahead, self.end = cfg.async_steps, cfg.steps
        self.src = self.split.trainers + self.split.rank % self.split.samplers
        self.inbox = {(Rollouts, b.step): Rollouts(b.step, b, None) for b in pending}  # a checkpoint's queue first
        self.data, self.version, self.sends, self.closed = stream.state_dict(), start, [], False
        self.sends += send_object(self.split.to_samplers, Start(start, len(pending), self.data), self.src)
        self._send(start, weights)

    def take(self, step: int):
        return self._get(Rollouts, step).batch

    def sync_weights(self, version: int, weights) -> None:
        """After the update that made `version`: the weights to every sampler rank, if a step or evaluation uses them
        (every trainer rank runs the gather; rank 0 sends)."""
        self.version = version
        if version + self.ahead < self.end or (self.due and self.due(version)):
            self._send(version, weights)

    def _send(self, version: int, weights) -> None:
        if dist.rank() != 0:
            for _ in weights:  # the gather is a collective: every trainer rank runs it, one tensor at a time
                pass
            return
        copies = [(name, t.detach().to("cpu", copy=True)) for name, t in weights]  # the trainer updates its own
        wait(self.sends)  # the previous version's: one copy of the weights in flight at most
        head = Weights(version, [(name, tuple(t.shape), t.dtype) for name, t in copies],
                       {name: fingerprint(t.to(self.dtype)) for name, t in copies})
        for dst in range(self.split.trainers, self.split.trainers + self.split.samplers):
            self.sends += send_object(self.split.to_samplers, head, dst)
            self.sends += [(self.split.to_samplers.send([t], dst, 0), t) for _, t in copies]

    def evaluations(self, version: int) -> dict:
        got = self._get(Evals, version).metrics if dist.rank() == 0 else None
        return dist.broadcast_object(got)

    def drain(self) -> None:  # the sampler side evaluates on its own; nothing waits here
        pass

    def state(self, stream) -> dict:
        """This rank's part of a checkpoint: the steps sampled ahead (as pipeline.Rollouts.state: through version +
        async_steps), and where its prompt stream, on the sampler rank, stands after them."""
        queued = range(self.version, min(self.version + self.ahead + 1, self.end)) if self.ahead else ()
        rollouts = [self._peek(Rollouts, j).batch for j in queued]
        return rank_state(rollouts, self.ahead, self.data)

    def close(self) -> None:
        """The trainers' loop is over: the sampler ranks stop, and what they sent meanwhile is received."""
        if self.closed:
            return
        self.closed = True
        if dist.rank() == 0:
            for dst in range(self.split.trainers, self.split.trainers + self.split.samplers):
                self.sends += send_object(self.split.to_samplers, Stop(), dst)
        while not isinstance(recv_object(self.split.to_trainers, self.src), End):
            pass
        wait(self.sends)

    def _peek(self, kind: type, at: int):
        """The Rollouts of step `at` or the Evals of version `at`; what comes before it waits in the inbox."""
        while (kind, at) not in self.inbox:
            msg = recv_object(self.split.to_trainers, self.src)
            if isinstance(msg, Rollouts):
                self.data = msg.data  # the stream after the newest rollouts received
            self.inbox[type(msg), msg.step if isinstance(msg, Rollouts) else msg.version] = msg
        return self.inbox[kind, at]

    def _get(self, kind: type, at: int):
        msg = self._peek(kind, at)
        del self.inbox[kind, at]
        return msg


def serve(cfg, worker, streams: dict, evaluations, due) -> dict:
    """The sampler side's whole run, for each trainer rank in `streams` (rank -> its prompt stream, placed where the
    trainer's stands by its Start): `worker` (rollout.Worker) samples each step with the weights its version needs,
    `evaluations(version)` (or None) runs on the versions `due` says. Returns the evaluations, as train.run does."""
    split, ahead, results, sends = dist.SPLIT, cfg.async_steps, {}, []
    device = unwrap(worker.sampler).device
    for rank, stream in streams.items():  # where each trainer starts: a fresh run, or a checkpoint's step and queue
        begin = recv_object(split.to_samplers, rank)
        stream.load_state_dict(begin.data)
    start, first = begin.step, begin.step + begin.queued  # queued steps are trained from the checkpoint, not sampled

    def evaluate(version: int) -> None:
        got = evaluations(version)
        results.update({f"{k}_{'start' if version == 0 else 'end'}": v for k, v in got.items()})
        if dist.rank() == 0:
            sends.extend(send_object(split.to_trainers, Evals(version, got), 0))

    held, weights = start, None  # the version the sampler holds, and its tensors

    def receive() -> bool:
        """The next version the trainers send, synced into the sampler as (held, weights); False at the stop."""
        nonlocal held, weights
        head = recv_object(split.to_samplers, 0)
        if isinstance(head, Stop):
            return False
        tensors = [(name, torch.empty(shape, dtype=dtype)) for name, shape, dtype in head.spec]
        for _, t in tensors:
            split.to_samplers.recv([t], 0, 0).wait()
        weights = [(name, t.to(device)) for name, t in tensors]  # the gap's forward runs on the sampler's device
        worker.sampler.sync_weights(weights, head.prints)  # checked against what the trainer sent: the wire too
        held = head.version
        return True

    stopped = not receive()  # the trainers' weights of `start`, not this rank's own: checked from the first step on
    if evaluations and start == 0 and not stopped:
        evaluate(0)
    for step in range(first, cfg.steps):
        version = max(start, step - ahead)
        while held < version and not stopped:
            stopped = not receive()
            if not stopped and evaluations and due(held):
                evaluate(held)
        if stopped:
            break
        # drop the sends that are done (and their buffers): a long run would otherwise keep every batch it sent
        sends[:] = [(work, buf) for work, buf in sends if not work.is_completed()]
        for rank, stream in streams.items():
            batch = worker.rollouts(step, version, weights, stream, rank)
            batch.problems = worker.sampler.take_findings()  # the sampler check's: the trainers rule on them
            sends.extend(send_object(split.to_trainers, Rollouts(step, batch, stream.state_dict()), rank))
    while not stopped:  # versions for the evaluations after the last step sampled, until the trainers stop
        stopped = not receive()
        if not stopped and evaluations and due(held):
            evaluate(held)
    for rank in streams:
        sends.extend(send_object(split.to_trainers, End(), rank))
    wait(sends)
    return results
