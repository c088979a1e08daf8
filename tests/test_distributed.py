"""Training on more than one process (gigpo.learner.distributed): real torchrun jobs over gloo.

- one update of `tiny` under DDP and FSDP2 on 2 processes against the same update on one, for
  token-mean and seq-mean-token-mean (tests/dist_update_check.py);
- `torchrun --nproc-per-node 2 -m gigpo.cli train`, killed mid-iteration and resumed, against
  `gigpo train` on one process: same metrics;
- a rank held back as the loop starts: the ranks still take rank 0's decisions.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gigpo.train.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint
from gigpo.train.config import ConfigError, load_config
from gigpo.learner.distributed import Dist
from gigpo.train.checkpoint import check_world

ROOT = Path(__file__).resolve().parents[1]
ALFWORLD_TINY = ROOT / "configs" / "alfworld_tiny.yaml"
# Two tasks x two rollouts x three steps, no SFT: an iteration takes seconds. Small mini-batches and
# micro-batch budgets give several optimizer steps and micro-batches, split unevenly over ranks.
SMALL = [
    "train.iterations=2",
    "env.tasks_per_iter=2",
    "env.group_size=2",
    "env.eval_tasks=1",
    "env.max_steps=3",
    "rollout.max_response_tokens=12",
    "sft.enabled=false",
    "log.progress=false",
    "log.tensorboard=false",
    "log.eval_before=false",
    "log.trajectories_every=1",
    "train.lr=1e-3",
    "train.entropy_coef=0.01",
    "train.use_kl=true",
    "train.kl_coef=0.01",
    "train.skip_zero_advantage_rows=false",
    "train.dynamic_sampling=false",  # an untrained model ties every group
    "train.autocast=none",
    "train.torch_threads=1",
    "train.mini_batch_rows=4",
    "train.micro_token_budget=1024",
    "guard.val_every=0",
]


def _env(extra=None):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    env.pop("GIGPO_TRACEBACK", None)
    return {**env, **(extra or {})}


def _torchrun(n: int, args, env=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(env), cwd=ROOT, timeout=600)


def _train(n: int, parent, name, extra=(), *, resume=False, env=None) -> subprocess.CompletedProcess:
    args = ["train", "--resume", str(parent / name)] if resume else ["train", "--config", str(ALFWORLD_TINY), *SMALL]
    args += [f"output_dir={parent}", f"name={name}"] if not resume else []
    args += list(extra)
    if n == 1:
        cmd = [sys.executable, "-m", "gigpo.cli", *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=_env(env), cwd=ROOT, timeout=600)
    return _torchrun(n, ["-m", "gigpo.cli", *args], env)


def _train_lines(run):
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [
        {k: v for k, v in x.items() if not k.startswith(("time/", "system/"))} for x in lines if x["tag"] == "train"
    ]


def _world(run) -> int:
    return load_checkpoint(latest_checkpoint(run))["world"]


# ---------------------------------------------------------------------- fast


def test_shard_deals_every_row_to_one_rank_longest_first():
    rows, lengths = [10, 11, 12, 13, 14], [5, 50, 7, 30, 1]
    shards = [Dist(world=2, rank=r).shard(rows, lengths) for r in (0, 1)]
    assert shards == [[11, 12, 14], [13, 10]]
    assert sorted(sum(shards, [])) == rows
    assert Dist(world=3, rank=2).shard(rows[:2], lengths[:2]) == []  # a rank may hold no row


def test_distributed_mode_is_validated():
    assert load_config(ALFWORLD_TINY, ["train.distributed=fsdp"]).train.distributed == "fsdp"
    with pytest.raises(ConfigError, match=r"train.distributed: 'fdsp' .* Did you mean 'fsdp'"):
        load_config(ALFWORLD_TINY, ["train.distributed=fdsp"])
    with pytest.raises(ConfigError, match="train.dist_timeout_min"):
        load_config(ALFWORLD_TINY, ["train.dist_timeout_min=0"])


def test_a_checkpoint_resumes_only_on_its_world_size():
    check_world(None, Dist(), "ck")  # checkpoints without the key are single-process ones
    check_world(2, Dist(world=2), "ck")
    with pytest.raises(
        CheckpointError, match=r"written by a run on 2 process\(es\), this one has 1; resume with torchrun"
    ):
        check_world(2, Dist(), "ck")


def test_one_process_is_not_distributed(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    d = Dist.from_env("fsdp", "cpu")
    assert (d.world, d.enabled, d.is_main, d.broadcast("x"), d.max_int(3), d.sum([1.0])) == (
        1,
        False,
        True,
        "x",
        3,
        [1.0],
    )


# ---------------------------------------------------------------------- torchrun


@pytest.mark.slow
def test_update_on_two_processes_matches_one(tmp_path):
    """DDP and FSDP2 over gloo: same loss to 1e-5 and gradient norm to 1e-4 (float summation order); after
    two AdamW steps at lr 1e-3 (each moves a weight by up to ~1e-3) weights agree to 2 % of the
    largest change (Adam's first steps are ~lr * sign(g), so near-zero gradients amplify noise)."""
    out = tmp_path / "update.json"
    r = _torchrun(
        2, [str(ROOT / "tests" / "dist_update_check.py"), str(out), "ddp,fsdp", "token-mean,seq-mean-token-mean"]
    )
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert sorted(res) == ["ddp/seq-mean-token-mean", "ddp/token-mean", "fsdp/seq-mean-token-mean", "fsdp/token-mean"]
    for key, v in res.items():
        assert (v["world"], v["backend"]) == (2, "gloo"), key
        m, s = v["metrics"], v["single_metrics"]
        for k in ("loss", "pg_loss", "kl", "entropy"):
            assert m[k] == pytest.approx(s[k], rel=1e-5), (key, k)
        assert m["grad_norm"] == pytest.approx(s["grad_norm"], rel=1e-4), key  # FSDP: a norm of shards' norms
        assert m["clipfrac"] == pytest.approx(s["clipfrac"], abs=1e-6), key
        assert v["max_param_change"] > 5e-4, key  # the update moved the weights
        assert v["max_param_diff"] < 0.02 * v["max_param_change"], key


@pytest.mark.slow
def test_two_process_run_killed_and_resumed_matches_one_process(tmp_path):
    """The same job on 2 processes, SIGKILLed after iteration 2's update and resumed on 2, and on
    one process: rank 0's rollouts are the same, so every logged metric agrees; update metrics to
    1e-5 relative (float summation order). A resume that lost the optimizer or sampler state, or a
    rank that trained on other rows, differs by far more."""
    killed = _train(2, tmp_path, "ddp", env={"GIGPO_DEBUG_SIGKILL_AT": "2:after_update"})
    assert killed.returncode != 0
    run2 = tmp_path / "ddp"
    assert [x["iteration"] for x in _train_lines(run2)] == [1]
    assert _world(run2) == 2  # the launcher really started 2 ranks
    resumed = _train(2, tmp_path, "ddp", resume=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stdout.count("iter 2/2") == 1  # only rank 0 reports
    r1 = _train(1, tmp_path, "one")
    assert r1.returncode == 0, r1.stderr[-3000:]
    assert _world(tmp_path / "one") == 1
    a, b = _train_lines(tmp_path / "one"), _train_lines(run2)
    assert [x["iteration"] for x in b] == [1, 2]
    for x, y in zip(a, b):
        assert set(x) == set(y)
        for k, v in x.items():
            if isinstance(v, float):
                assert y[k] == pytest.approx(v, rel=1e-5, abs=1e-7), (x["iteration"], k)
            else:
                assert y[k] == v, (x["iteration"], k)
    assert (run2 / "model" / "config.json").exists() and (run2 / "report.html").exists()
    assert len(list((run2 / "trajectories").glob("*.jsonl"))) == 2


@pytest.mark.slow
def test_one_step_off_on_two_processes_matches_one_process(tmp_path):
    """train.off_policy_steps=1 under torchrun: rank 0's sampler process rolls out one iteration
    ahead and every rank updates on its share; the job logs what the one-process job logs (update
    metrics to 1e-5 relative, the behaviour weights' maximum reduced over the ranks as a maximum)."""
    extra = ["train.off_policy_steps=1", "train.iterations=3"]
    two = _train(2, tmp_path, "ddp", extra)
    assert two.returncode == 0, two.stderr[-3000:]
    assert _world(tmp_path / "ddp") == 2
    one = _train(1, tmp_path, "one", extra)
    assert one.returncode == 0, one.stderr[-3000:]
    a, b = _train_lines(tmp_path / "one"), _train_lines(tmp_path / "ddp")
    assert [x["iteration"] for x in b] == [1, 2, 3] and all(x["train/staleness"] <= 1 for x in b)
    assert b[-1]["actor/behav_weight_max"] != 1.0  # iteration 3 really trained off-policy rows
    for x, y in zip(a, b):
        assert set(x) == set(y)
        for k, v in x.items():
            if isinstance(v, float):
                assert y[k] == pytest.approx(v, rel=1e-5, abs=1e-7), (x["iteration"], k)
            else:
                assert y[k] == v, (x["iteration"], k)


@pytest.mark.slow
def test_a_slow_rank_decides_the_start_as_rank_0_does(tmp_path):
    """Rank 1 held 5 s as the loop starts looks only after rank 0 wrote checkpoint 0; were the
    decision to save checkpoint 0 each rank's own, rank 1 would skip the save's barrier and the job
    would wait in mismatched collectives until the 1-minute timeout ended it."""
    r = _train(
        2,
        tmp_path,
        "slow",
        ["train.iterations=1", "train.dist_timeout_min=1"],
        env={"GIGPO_DEBUG_SLOW_RANK": "1:before_run:5"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert [x["iteration"] for x in _train_lines(tmp_path / "slow")] == [1]
    assert _world(tmp_path / "slow") == 2
