"""Rollout and update at the same time (``train.off_policy_steps = k >= 1``).

While the learner updates on iteration i's rollouts, the sampler already rolls out iteration
i + k. The unit of work is an iteration's collect phase: all its task groups (dynamic sampling's
extra rounds included) are sampled by one policy version, stamped on every trajectory
(``traj_policy_version``), so a GiGPO step group never compares rollouts of two policies.

Versions and slots. ``version`` is ``RunModels.version`` (it counts weight changes). At iteration
i, once its rollouts are in, the weights about to be updated (version v) are published and
iteration i + k's collect is submitted on them; so iteration i trains on rollouts at most k
versions old. The sampler reads version v from slot ``v % k`` of k shared-memory copies of the
weights: a slot is rewritten only after the collect that read its previous version is done, so
every collect reads exactly the version it was submitted with, and the rollouts are a pure
function of (seed, iteration, version): a resumed run, which re-submits the pending collects from
the slots saved in its checkpoint, samples what the uninterrupted run sampled.

A rollback (``gigpo.train.guards``) drains the pipeline: rollouts of the rejected policy are
dropped and counted, and the next iteration starts it again from the restored weights.

``rollout.backend=hf``: the sampler is a child process (its own envs, agent, model and torch
thread) that copies a slot's weights into its model before each collect. ``rollout.backend=server``:
the collect runs in a thread of this process; the server is brought to version v before the
collect starts, and rollouts in flight finish on the version they started with.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import traceback
from typing import Any

import torch

from gigpo.train import seeds
from gigpo.train.collect import RunStopped
from gigpo.train.faults import sampler_fault


def batch_versions(batch) -> set:
    """The policy versions stamped on ``batch``'s trajectories."""
    return {v for vs in batch.meta.get("traj_policy_version") or [] for v in vs}


# --------------------------------------------------------------------------- the sampler process


def _sampler_main(cfg, model_path: str, slots: list, conn) -> None:
    """The child process: build envs, agent and a model, then serve ``collect`` commands."""
    torch.set_num_threads(cfg.train.torch_threads)
    from gigpo.policy.generate import HFGenerator
    from gigpo.policy.load import load_policy
    from gigpo.train.credit import batch_credit, row_anchors
    from gigpo.train.collect import Collector
    from gigpo.train.factories import build_agent, grouped_envs, load_kwargs, task_pools

    envs = None
    try:
        model, tokenizer = load_policy(
            model_path, lora={} if cfg.model.lora else None, **load_kwargs(cfg, device="cpu")
        )
        model.eval()
        generator: Any = HFGenerator(model, tokenizer)
        envs = grouped_envs(cfg.env, cfg.env.group_size)

        def advantages(batch):
            return batch_credit(cfg, batch, row_anchors(cfg, batch), None).result.advantages

        collector = Collector(
            cfg, task_pools(cfg)[0], envs, build_agent(cfg, tokenizer), tokenizer, advantages, cfg.run_dir
        )
        conn.send(("ready",))
        while True:
            cmd = conn.recv()
            if cmd[0] == "stop":
                break
            _, it, version = cmd
            sampler_fault(cfg.run_dir, it)
            try:
                model.load_state_dict(slots[version % len(slots)])
                generator.policy_version = version
                seeds.seed_all(seeds.iteration_seed(cfg.seed, it, seeds.ITERATION))
                with torch.no_grad():
                    out = collector.collect(generator, it)
                conn.send(("done", it, out))
            except RunStopped as e:
                conn.send(("stopped", it, str(e)))
            except Exception:  # the parent names the iteration and re-raises
                conn.send(("error", it, traceback.format_exc()))
    except (EOFError, KeyboardInterrupt, BrokenPipeError):
        pass
    finally:
        if envs is not None:
            envs.close()


class SamplerProcess:
    """The hf backend's sampler: a child process fed (iteration, version) commands in order."""

    MAX_RESTARTS = 3  # consecutive deaths of the child before the run stops

    def __init__(self, cfg, model_path: str, slots: list) -> None:
        self.cfg, self.model_path, self.slots = cfg, model_path, slots
        self.restarts = 0
        self._deaths = 0
        self._start()

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_sampler_main, args=(self.cfg, self.model_path, self.slots, child), daemon=True, name="gigpo-sampler"
        )
        self.proc.start()
        child.close()
        msg = self._recv()
        if msg is None or msg[0] != "ready":
            raise RuntimeError(f"the sampler process did not start: {msg[2] if msg else 'it died'}")

    def _recv(self):
        """The child's next message, or None when it died."""
        while True:
            if self.conn.poll(1.0):
                try:
                    return self.conn.recv()
                except (EOFError, OSError):
                    return None
            if not self.proc.is_alive() and not self.conn.poll(0):
                return None

    def submit(self, it: int, version: int) -> None:
        self.conn.send(("collect", it, version))

    def result(self, it: int, resubmit: list) -> tuple:
        """Iteration ``it``'s collect (the oldest submitted). A dead child is started again and
        ``resubmit`` (the pending (iteration, version) pairs, ``it``'s first) sent again."""
        while True:
            msg = self._recv()
            if msg is not None:
                self._deaths = 0
                return msg
            self._deaths += 1
            if self._deaths > self.MAX_RESTARTS:
                raise RunStopped(f"the sampler process died {self._deaths} times in a row at iteration {it}")
            self.restarts += 1
            print(f"sampler process died (exit code {self.proc.exitcode}); starting it again", flush=True)
            self.proc.join(1.0)
            self._start()
            for j, v in resubmit:
                self.submit(j, v)

    def close(self) -> None:
        try:
            self.conn.send(("stop",))
        except (OSError, BrokenPipeError):
            pass
        self.proc.join(10.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5.0)


class SamplerThread:
    """The server backend's sampler: one collect at a time in a thread of this process.

    Before a collect starts, the server is brought to the weights of its version (slot ``version
    % k``, loaded into ``mirror``, a copy of the policy) in the caller's thread; the server then
    holds them until the collect is done (``wait``)."""

    restarts = 0

    def __init__(self, collect, generator, mirror, slots: list) -> None:
        self.collect, self.generator, self.mirror, self.slots = collect, generator, mirror, slots
        self._thread: threading.Thread | None = None
        self._out: dict = {}
        self.sync_seconds = 0.0

    def submit(self, it: int, version: int) -> None:
        self.wait()
        if self.generator.policy_version != version:
            self.mirror.load_state_dict(self.slots[version % len(self.slots)])
            self.sync_seconds += self.generator.sync_weights(self.mirror, version)

        def work() -> None:
            try:
                with torch.no_grad():
                    self._out[it] = ("done", it, self.collect(self.generator, it))
            except RunStopped as e:
                self._out[it] = ("stopped", it, str(e))
            except Exception:
                self._out[it] = ("error", it, traceback.format_exc())

        self._thread = threading.Thread(target=work, name=f"gigpo-collect-{it}", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Until the collect in flight (if any) is done: the server is free for this thread."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def result(self, it: int, resubmit: list) -> tuple:
        self.wait()
        return self._out.pop(it)

    def close(self) -> None:
        self.wait()


# --------------------------------------------------------------------------- the pipeline


class Pipeline:
    """Keeps up to ``k`` iterations' collects in flight ahead of the learner (module docstring)."""

    def __init__(self, k: int, last: int, model, sampler_factory) -> None:
        """``model``: the policy the sampler mirrors (its state dict's layout); ``sampler_factory
        (slots)``: a ``SamplerProcess`` or ``SamplerThread``."""
        self.k, self.last = k, last
        state = model.state_dict()
        self.slots = [{n: t.detach().to("cpu", copy=True).share_memory_() for n, t in state.items()} for _ in range(k)]
        self.slot_version: list[int | None] = [None] * k
        self.pending: dict[int, int] = {}  # iteration -> version, in submission order
        self.dropped = 0  # groups of drained rollouts not yet reported
        self.sampler = sampler_factory(self.slots)

    def _publish(self, model, version: int) -> None:
        s = version % self.k
        if self.slot_version[s] != version:  # else it holds these weights already (and may be read)
            with torch.no_grad():
                for n, t in model.state_dict().items():
                    self.slots[s][n].copy_(t)
            self.slot_version[s] = version

    def _submit(self, it: int, model, version: int) -> None:
        self._publish(model, version)
        self.pending[it] = version
        self.sampler.submit(it, version)

    def collect(self, it: int, model, version: int):
        """Iteration ``it``'s (everything sampled, batch to train on, counters); submits iteration
        ``it + k``'s collect on ``model`` (at ``version``, about to be updated)."""
        for j in range(it, min(it + self.k - 1, self.last) + 1):
            if j not in self.pending:  # the start, a resume's missing ones, or after a drain
                self._submit(j, model, version)
        msg = self.sampler.result(it, list(self.pending.items()))
        sampled_at = self.pending.pop(it)
        if msg[0] == "stopped":
            raise RunStopped(msg[2])
        if msg[0] == "error":
            raise RuntimeError(f"the sampler failed in iteration {it}:\n{msg[2]}")
        every, train, counters = msg[2]
        if it + self.k <= self.last:
            self._submit(it + self.k, model, version)
        stale = version - sampled_at
        counters = dict(counters)
        wrong = batch_versions(train) - {sampled_at}
        if wrong:  # never by construction; a sampler that broke it must not be trained on
            raise RuntimeError(f"iteration {it}: rollouts stamped {sorted(wrong)}, submitted at version {sampled_at}")
        if stale > self.k:  # never by construction either; counted, not trained on
            counters["train/groups_stale_dropped"] = self.dropped + counters["train/groups_trained"]
            from gigpo.batch import select_trajectories
            import numpy as np

            train = select_trajectories(train, np.zeros(train.num_trajectories, bool))
            counters["train/groups_trained"] = 0
        else:
            counters["train/groups_stale_dropped"] = self.dropped
        self.dropped = 0
        counters["train/staleness"] = stale
        counters["rollout/sampler_restarts"] = self.sampler.restarts
        return every, train, counters

    def drain(self) -> None:
        """Drop every rollout in flight (a rollback rejected the policy that samples them)."""
        from gigpo.train.collect import num_groups

        for it in list(self.pending):
            msg = self.sampler.result(it, list(self.pending.items()))
            self.pending.pop(it)
            if msg[0] == "done":
                self.dropped += num_groups(msg[2][1])

    def take_sync_seconds(self) -> float:
        """Seconds spent bringing the server to a collect's weights since the last call (server backend)."""
        s = getattr(self.sampler, "sync_seconds", 0.0)
        if s:
            self.sampler.sync_seconds = 0.0
        return s

    def wait(self) -> None:
        """Until the sampler is idle (the server backend's server is then free for evaluation)."""
        if isinstance(self.sampler, SamplerThread):
            self.sampler.wait()

    def state_dict(self) -> dict:
        """What a resume needs to submit the pending collects again: their versions and the weights."""
        needed = set(self.pending.values())
        return {
            "pending": dict(self.pending),
            "slots": {
                s: {"version": v, "weights": {n: t.clone() for n, t in self.slots[s].items()}}
                for s, v in enumerate(self.slot_version)
                if v in needed
            },
            "dropped": self.dropped,
        }

    def load_state_dict(self, state: dict) -> None:
        for s, slot in state["slots"].items():
            for n, t in slot["weights"].items():
                self.slots[int(s)][n].copy_(t)
            self.slot_version[int(s)] = slot["version"]
        self.dropped = state.get("dropped", 0)
        for it, v in sorted(state["pending"].items()):
            if it <= self.last:
                self.pending[it] = v
                self.sampler.submit(it, v)

    def close(self) -> None:
        self.sampler.close()
