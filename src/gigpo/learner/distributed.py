"""Training on more than one process: ``torchrun --nproc-per-node N -m gigpo.cli train ...``.

Design (docs/architecture.md#where-each-rank-does-what): rank 0 is the driver. It rolls out, computes
returns, advantages and the old / reference log-probs on the whole batch, exactly as a single
process does, and sends the rows to every rank (``Dist.broadcast``); every rank then runs the
update on its share of each mini-batch (``Dist.shard``) with ``train.distributed``:

- ``ddp``: ``DistributedDataParallel``; every rank holds the whole model and optimizer, gradients
  are averaged by an all-reduce.
- ``fsdp``: FSDP2 (``torch.distributed.fsdp.fully_shard``) per decoder layer and the root; each rank
  holds a shard of the parameters, gradients and optimizer state. Rank 0 keeps a full copy of
  the model for sampling and log-probs, refreshed from the shards (``full_model_state``) when the
  weights have changed.

Advantages are never computed per shard: GiGPO's groups span every rollout of a task. A
micro-batch's loss is its share of the mini-batch's loss (``gigpo.learner.loss.Norm``), times the
world size because both wrappers average gradients, so an update is the same (up to float
summation order) on any number of processes. Every rank runs the same number of micro-batches per
optimizer step (``Dist.max_int``; a rank short of rows runs zero-weight ones), because each
forward / backward of a wrapped model is a collective.

A single process (no ``WORLD_SIZE`` > 1 in the environment) gets ``Dist.single()``, whose methods
are no-ops, and the trainer runs as it always has.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from dataclasses import dataclass
from typing import Any

import torch

MODES = ("ddp", "fsdp")


@dataclass
class Dist:
    """This process's place in the job: ``world`` processes, this one ``rank``."""

    world: int = 1
    rank: int = 0
    local_rank: int = 0
    mode: str = "ddp"
    device: str = "cpu"
    _group: Any = None  # a gloo group for Python objects (also under nccl)
    _owns_group: bool = False

    @classmethod
    def single(cls, device: str = "cpu") -> Dist:
        return cls(device=device)

    @classmethod
    def from_env(cls, mode: str = "ddp", device: str = "cpu", timeout_min: float = 120) -> Dist:
        """Join the job torchrun (or ``accelerate launch``) started, from ``WORLD_SIZE``, ``RANK``,
        ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``; one process when ``WORLD_SIZE`` is unset or 1.

        ``device``: ``model.device``; ``cuda`` becomes ``cuda:<LOCAL_RANK>`` and the backend nccl,
        otherwise gloo. ``timeout_min``: how long a rank waits for the others in a collective (the
        other ranks wait while rank 0 rolls out and evaluates).
        """
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls.single(device)
        if mode not in MODES:
            raise ValueError(f"train.distributed: unknown mode {mode!r}; use one of {list(MODES)}")
        import torch.distributed as dist

        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if device.startswith("cuda"):
            device = f"cuda:{local_rank}"
            torch.cuda.set_device(local_rank)
        owns = not dist.is_initialized()
        if owns:
            dist.init_process_group(
                backend="nccl" if device.startswith("cuda") else "gloo",
                timeout=datetime.timedelta(minutes=timeout_min),
            )
        if dist.get_world_size() != world:
            raise RuntimeError(f"WORLD_SIZE={world} but the process group has {dist.get_world_size()} ranks")
        group = dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else dist.group.WORLD
        return cls(world, dist.get_rank(), local_rank, mode, device, group, owns)

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.enabled:
            import torch.distributed as dist

            dist.barrier(group=self._group)

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (pickled; other ranks pass anything, e.g. None)."""
        if not self.enabled:
            return obj
        import torch.distributed as dist

        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0, group=self._group)
        return box[0]

    def max_int(self, n: int) -> int:
        """The largest ``n`` over the ranks."""
        if not self.enabled:
            return n
        import torch.distributed as dist

        t = torch.tensor([n], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self._group)
        return int(t.item())

    def max(self, values: list[float]) -> list[float]:
        """Element-wise maximum of ``values`` over the ranks (float64)."""
        if not self.enabled:
            return values
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self._group)
        return t.tolist()

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum of ``values`` over the ranks (float64)."""
        if not self.enabled:
            return values
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self._group)
        return t.tolist()

    def shard(self, rows, lengths) -> list:
        """This rank's rows of a mini-batch: longest first, dealt out in turn, so the ranks' token
        counts stay close. Every row goes to exactly one rank; a rank may get none."""
        order = sorted(range(len(rows)), key=lambda j: (-int(lengths[j]), j))
        return [rows[j] for j in order[self.rank :: self.world]]

    # ------------------------------------------------------------------ the model
    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module to run the update's forward through: ``model`` itself (one process), a DDP
        wrapper of it, or ``model`` sharded in place by FSDP2. Call before making the optimizer."""
        if not self.enabled:
            return model
        if self.mode == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.local_rank] if self.device.startswith("cuda") else None
            # No buffer sync per forward: buffers (rotary tables) are constants, synced once at init.
            return DistributedDataParallel(model, device_ids=ids, forward_sync_buffers=False)
        from torch.distributed.fsdp import fully_shard

        layers = getattr(getattr(model, "model", None), "layers", None)
        if layers is None:  # peft wraps the HF model once more
            layers = getattr(
                getattr(getattr(getattr(model, "base_model", None), "model", None), "model", None), "layers", []
            )
        for layer in layers:
            fully_shard(layer)
        fully_shard(model)
        return model

    @property
    def sharded(self) -> bool:
        return self.enabled and self.mode == "fsdp"

    def no_sync(self, fwd: torch.nn.Module, last: bool):
        """Skip DDP's gradient all-reduce on every micro-batch but the step's last one."""
        if self.enabled and self.mode == "ddp" and not last:
            return fwd.no_sync()  # type: ignore[operator]
        return contextlib.nullcontext()

    def full_model_state(self, model: torch.nn.Module) -> dict:
        """The model's full state dict (CPU tensors, plain keys); under FSDP a collective, and the
        full dict is on rank 0 only (other ranks get {})."""
        if not self.sharded:
            return model.state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def load_full_model_state(self, model: torch.nn.Module, state: dict) -> None:
        """Load a full state dict (as saved by one process or ``full_model_state``) on every rank."""
        if not self.sharded:
            model.load_state_dict(state)
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))

    def full_optim_state(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
        """The optimizer's state dict; under FSDP gathered to full tensors keyed by parameter
        name (a collective; rank 0 gets it, others {})."""
        if not self.sharded:
            return optimizer.state_dict()
        if not optimizer.state:
            # Before the first step there is nothing to gather, and get_optimizer_state_dict would
            # create the state by a zero-gradient step, which advances Adam's step count.
            return {"state": {}, "param_groups": _groups(optimizer)}
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return dict(get_optimizer_state_dict(model, optimizer, options=opts))

    def load_full_optim_state(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
        if not self.sharded:
            optimizer.load_state_dict(state)
            return
        if not state["state"]:  # saved before the first step: a fresh optimizer
            optimizer.state.clear()
            for group, saved in zip(optimizer.param_groups, state["param_groups"]):
                group.update({k: v for k, v in saved.items() if k != "params"})
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))

    def close(self) -> None:
        if self._owns_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self._owns_group = False


def _groups(optimizer: torch.optim.Optimizer) -> list[dict]:
    return [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
