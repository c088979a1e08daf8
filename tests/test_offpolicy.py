"""Rollout and update at the same time (``train.off_policy_steps``): the decoupled loss, the
pipeline's versions and bounds in real runs, exact resume after a kill mid-pipeline, and a sampler
process that dies and is started again."""

import json
import os
import subprocess

import pytest
import torch

from gigpo.learner.loss import actor_loss, behaviour_weights
from gigpo.train.config import load_config

from small_runs import SEARCH_TINY, train_cmd

# ------------------------------------------------------------------ the loss


def _rows(seed=0, b=3, n=5):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, n, generator=g) * 2
    logp = (old + 0.3 * torch.randn(b, n, generator=g)).requires_grad_()
    adv = torch.randn(b, generator=g)
    mask = (torch.rand(b, n, generator=g) > 0.2).float()
    return logp, old, adv, mask


@pytest.mark.parametrize("policy_loss,agg", [("ppo", "token-mean"), ("gspo", "seq-mean-token-mean")])
def test_behaviour_equal_to_proximal_gives_the_plain_loss_and_gradient_to_the_bit(policy_loss, agg):
    logp, old, adv, mask = _rows()
    plain, pm = actor_loss(logp, old, adv, mask, policy_loss=policy_loss, agg_mode=agg)
    (g_plain,) = torch.autograd.grad(plain, logp)
    decoupled, dm = actor_loss(logp, old, adv, mask, policy_loss=policy_loss, agg_mode=agg, behav_logp=old.clone())
    (g_dec,) = torch.autograd.grad(decoupled, logp)
    assert torch.equal(plain, decoupled) and torch.equal(g_plain, g_dec)
    assert dm["behav_weight_mean"] == 1.0 and dm["behav_kl_k3"] == 0.0 and dm["behav_truncated"] == 0.0
    assert "behav_weight_mean" not in pm


def test_behaviour_weights_scale_each_token_and_are_truncated_at_the_cap():
    logp, old, adv, mask = _rows(1)
    mask = torch.ones_like(mask)
    # row 0 sampled 1.5x less likely than the proximal policy gives it, row 1 5x, row 2 the same
    shift = torch.tensor([[1.5], [5.0], [1.0]]).log().expand_as(old)
    w, st = behaviour_weights(old, old - shift, mask, cap=2.0)
    assert torch.allclose(w[0], torch.full_like(w[0], 1.5)) and torch.all(w[1] == 2.0) and torch.all(w[2] == 1.0)
    assert st["behav_truncated"] == pytest.approx(1 / 3) and st["behav_weight_max"] == pytest.approx(5.0)
    r = torch.tensor([1.5, 5.0, 1.0])
    assert st["behav_kl_k3"] == pytest.approx(float((r - 1 - r.log()).mean()), rel=1e-5)
    # the loss is the plain loss with each row's tokens weighted: per row, on a no-clip ratio of 1
    on = old.detach().requires_grad_()
    plain_rows = [actor_loss(on[i : i + 1], old[i : i + 1], adv[i : i + 1], mask[i : i + 1])[0] for i in range(3)]
    dec, _ = actor_loss(on, old, adv, mask, behav_logp=old - shift, behav_weight_cap=2.0)
    expected = sum(wi * float(p.detach()) for wi, p in zip([1.5, 2.0, 1.0], plain_rows)) / 3
    assert float(dec.detach()) == pytest.approx(expected, rel=1e-6)


def test_off_policy_settings_that_cannot_work_are_refused_by_name():
    base = [f"output_dir=/nonexistent-{os.getpid()}"]
    cfg = load_config(SEARCH_TINY, [*base, "train.off_policy_steps=2"])
    assert cfg.train.off_policy_steps == 2 and cfg.train.behav_weight_cap == 2.0
    for extra, words in [
        (["train.off_policy_steps=5"], "train.off_policy_steps"),
        (["train.off_policy_steps=-1"], "train.off_policy_steps"),
        (["train.off_policy_steps=1", "rollout.top_p=0.9"], "rollout.top_p=1"),
        (["train.off_policy_steps=2", "rollout.backend=server"], "at most one step off"),
        (["train.off_policy_steps=1", "train.behav_weight_cap=0.5"], "train.behav_weight_cap"),
    ]:
        with pytest.raises(ValueError, match=words):
            load_config(SEARCH_TINY, [*base, *extra])
    with pytest.raises(ValueError, match="critic"):
        load_config(None, [*base, "train.off_policy_steps=1", "algorithm.estimator=ppo"])


# ------------------------------------------------------------------ real runs

RUN = ["train.iterations=3", "log.trajectories_every=1"]


def _train(parent, name, extra, env=None, resume=False):
    if resume:
        import sys

        cmd = [sys.executable, "-m", "gigpo.cli", "train", "--resume", str(parent / name)]
    else:
        cmd = train_cmd(parent, name, [*RUN, *extra])
    r = subprocess.run(
        cmd, env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})), capture_output=True, text=True, timeout=600
    )
    return r


def _train_lines(run):
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [x for x in lines if x["tag"] == "train"]


def _comparable(line):
    skip = ("time/", "system/", "rollout/sampler_restarts")  # wall time, memory, and what the test planted
    return {k: v for k, v in line.items() if not k.startswith(skip)}


def _versions(run, it):
    """Per episode (task group) of iteration ``it``'s trained batch, the versions that sampled it."""
    by: dict = {}
    for x in (run / "trajectories" / f"iter_{it:06d}.jsonl").read_text().splitlines():
        r = json.loads(x)
        by.setdefault(r["episode_id"], set()).add(r["policy_version"])
    return by


@pytest.fixture(scope="module")
def one_off(tmp_path_factory):
    parent = tmp_path_factory.mktemp("one_off")
    r = _train(parent, "ref", ["train.off_policy_steps=1"])
    assert r.returncode == 0, r.stderr[-3000:]
    return parent / "ref"


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 2])
def test_every_group_comes_from_one_version_no_older_than_the_bound(tmp_path, one_off, k):
    if k == 1:
        run, its = one_off, 3
    else:
        # with the plain PPO loss against the sampler's log-probs: no proximal pass, no weights
        extra = ["train.off_policy_steps=2", "train.iterations=4", "train.off_policy_loss=behaviour"]
        r = _train(tmp_path, "k2", extra)
        assert r.returncode == 0, r.stderr[-3000:]
        run, its = tmp_path / "k2", 4
    train = _train_lines(run)
    assert [x["iteration"] for x in train] == list(range(1, its + 1))
    for x in train:
        it = x["iteration"]
        # iteration it is sampled by the weights of update max(0, it-1-k): the first ones by the start
        sampled_by = max(0, it - 1 - k)
        assert x["train/staleness"] == it - 1 - sampled_by <= k
        groups = _versions(run, it)
        assert groups and all(v == {sampled_by} for v in groups.values()), (it, groups)
        assert x["train/groups_stale_dropped"] == 0 and x["rollout/sampler_restarts"] == 0
        if k == 1:  # decoupled: the proximal policy's log-probs computed, the tokens weighted
            assert 0 < x["actor/behav_weight_mean"] < 2 and x["actor/behav_kl_k3"] >= 0
            assert x["time/old_logprob"] > 0
        else:
            assert "actor/behav_weight_mean" not in x and x["time/old_logprob"] < 0.01  # no forward pass
    assert max(x["train/staleness"] for x in train) == k  # the sampler really ran ahead
    html = (run / "report.html").read_text()

    def panel(key):
        return html.split(f'id="plot-{key}"')[1].split("</figure>")[0]

    assert "<img" in panel("staleness-of-the-trained-rollouts")
    assert ("<img" in panel("behaviour-weight-mean")) == (k == 1)  # only the decoupled loss weighs tokens


@pytest.mark.slow
@pytest.mark.parametrize("kill_at,logged", [("2:after_update", [1]), ("2:after_log", [1, 2])])
def test_a_kill_mid_pipeline_resumes_to_the_uninterrupted_run(tmp_path, one_off, kill_at, logged):
    # After iteration 2's update the sampler is rolling out iteration 3 on version 1: the resume
    # samples it again from the version saved in the checkpoint.
    killed = _train(tmp_path, "cut", ["train.off_policy_steps=1"], env={"GIGPO_DEBUG_SIGKILL_AT": kill_at})
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert [x["iteration"] for x in _train_lines(tmp_path / "cut")] == logged
    resumed = _train(tmp_path, "cut", [], resume=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a = [_comparable(x) for x in _train_lines(one_off)]
    b = [_comparable(x) for x in _train_lines(tmp_path / "cut")]
    assert [x["iteration"] for x in b] == [1, 2, 3]
    assert a == b


@pytest.mark.slow
def test_a_dying_sampler_process_is_started_again_and_the_run_is_unchanged(tmp_path, one_off):
    r = _train(tmp_path, "dies", ["train.off_policy_steps=1"], env={"GIGPO_DEBUG_KILL_SAMPLER_AT": "3"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "sampler process died (exit code 17)" in r.stdout + r.stderr
    train = _train_lines(tmp_path / "dies")
    assert [x["rollout/sampler_restarts"] for x in train] == [0, 0, 1]
    assert [_comparable(x) for x in train] == [_comparable(x) for x in _train_lines(one_off)]
