"""gigpo.report: a run directory written with the project's own writers -> one offline HTML page.

``make_run_dir`` builds a run dir in the exact on-disk formats (``save_config``, ``MetricsLogger``,
``write_trajectories_jsonl`` with real GiGPO advantages from the estimator registry), so these
checks break if either side of the format changes. The browser test reuses it.
"""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest

from gigpo.advantages import compute_advantages, discounted_returns, episode_scores
from gigpo.batch import StepBatch
from gigpo.report import main, write_report
from gigpo.report.data import eval_summary, load_run
from gigpo.report.viewer import MAX_BYTES, pick_iterations, viewer_data
from gigpo.rollout import write_trajectories_jsonl
from gigpo.train.config import load_config, save_config
from gigpo.train.logging import MetricsLogger
from gigpo.train.metrics import step_group_metrics

ROOM = "You are in the kitchen. You see a fridge 1 and a countertop 1."


def _batch(it: int, n_tasks: int = 3, n: int = 4, rng=None) -> StepBatch:
    """An iteration of ALFWorld-like episodes: rollout k loops (repeats a look) k times, then wins or
    loses; so anchors repeat within and across rollouts and step groups of size > 1 exist."""
    rng = rng or np.random.default_rng(it)
    rows, trajs = [], []
    tid = 0
    for ep in range(n_tasks):
        for k in range(n):
            won = bool((k + ep + it) % 2 == 0)
            anchors = [ROOM] * (k + 1) + [f"You open the fridge 1. You see an apple {ep}."]
            acts = ["look"] * (k + 1) + ["take apple 1 from fridge 1" if won else "go to countertop 1"]
            for t, (a, act) in enumerate(zip(anchors, acts)):
                last = t == len(anchors) - 1
                valid = not (k == 3 and t == 1)  # one invalid action, to show it on the page
                rows.append(
                    dict(
                        episode_id=it * 100 + ep,
                        traj_id=tid,
                        step=t,
                        anchor=a,
                        reward=10.0 if (last and won) else 0.0,
                        done=last,
                        valid=valid,
                        action=act if valid else "dance <script>alert(1)</script>",
                        response_text=f"<think>step {t}</think><action>{act}</action>",
                        observation="You won!" if last and won else ROOM,
                    )
                )
            trajs.append(
                dict(
                    traj_episode_id=it * 100 + ep,
                    traj_task_id=f"task-{ep}",
                    traj_task_type="pick_and_place",
                    traj_won=won,
                    traj_score=float(won),
                    traj_length=len(anchors),
                    traj_failed=False,
                    traj_truncated=False,
                )
            )
            tid += 1
    col = lambda rs, k, dt=None: np.array([r[k] for r in rs], dtype=dt)  # noqa: E731
    obj = lambda rs, k: np.array([r[k] for r in rs] + [None], dtype=object)[:-1]  # noqa: E731
    return StepBatch(
        episode_id=col(rows, "episode_id", np.int64),
        traj_id=col(rows, "traj_id", np.int64),
        step=col(rows, "step", np.int32),
        anchor=obj(rows, "anchor"),
        reward=col(rows, "reward", np.float32),
        done=col(rows, "done", bool),
        valid=col(rows, "valid", bool),
        prompt_ids=[np.arange(5, dtype=np.int32)] * len(rows),
        response_ids=[np.arange(3, dtype=np.int32)] * len(rows),
        logprobs=[np.full(3, -1.0, np.float32)] * len(rows),
        action=obj(rows, "action"),
        response_text=obj(rows, "response_text"),
        observation=obj(rows, "observation"),
        traj_episode_id=col(trajs, "traj_episode_id", np.int64),
        traj_task_id=obj(trajs, "traj_task_id"),
        traj_task_type=obj(trajs, "traj_task_type"),
        traj_won=col(trajs, "traj_won", bool),
        traj_score=col(trajs, "traj_score", np.float32),
        traj_length=col(trajs, "traj_length", np.int32),
        traj_failed=col(trajs, "traj_failed", bool),
        traj_truncated=col(trajs, "traj_truncated", bool),
    )


def make_run_dir(
    tmp_path,
    *,
    iterations: int = 4,
    estimator: str = "gigpo",
    traj_every: int = 2,
    evals: bool = True,
    overrides: tuple[str, ...] = (),
):
    """A run directory in the trainer's formats (config ``overrides`` on top); returns its path."""
    cfg = load_config(
        None,
        [
            "name=unit_run",
            f"output_dir={tmp_path}",
            f"algorithm.estimator={estimator}",
            "env.group_size=4",
            "env.tasks_per_iter=3",
            f"train.iterations={iterations}",
            f"log.trajectories_every={traj_every}",
            *overrides,
        ],
    )
    run = cfg.run_dir
    run.mkdir(parents=True)
    save_config(cfg, run / "config.yaml")
    log = MetricsLogger(run, tensorboard=False)
    if evals:
        log.log({"eval/success": 0.25, "eval/score": 0.3, "eval/episode_length": 9.0}, iteration=0, tag="eval_before")
    for it in range(1, iterations + 1):
        b = _batch(it)
        returns = discounted_returns(b.reward, b.traj_id, 0.95)
        scores = episode_scores(b.reward, b.traj_id)
        res = compute_advantages(
            estimator,
            scores=scores,
            step_returns=returns,
            episode_ids=b.episode_id,
            traj_ids=b.traj_id,
            anchors=b.anchor,
        )
        m = {
            "rollout/success": float(b.traj_won.mean()),
            "rollout/score": 0.1 * it,
            "rollout/episode_length": float(b.traj_length.mean()),
            "rollout/invalid_action_rate": 0.05,
            "actor/kl": 0.001 * it,
            "actor/entropy": 2.0 - 0.1 * it,
            "actor/clipfrac": 0.02,
            "actor/grad_norm": float("nan") if it == 2 else 1.5,  # logged as "nan": skipped, not a crash
            "time/rollout": 3.0,
            "time/old_logprob": 0.5,
            "time/ref_logprob": 0.5,
            "time/advantage": 0.01,
            "time/update": 2.0,
            "time/iteration": 6.01,
        }
        m.update(step_group_metrics(res.step_groups))
        log.log(m, iteration=it, tag="train")
        if it % traj_every == 0:
            write_trajectories_jsonl(
                b,
                run / "trajectories" / f"iter_{it:06d}.jsonl",
                advantages={
                    "A": res.advantages,
                    "A_E": res.episode_advantages,
                    "A_S": res.step_advantages,
                    "step_group": res.step_groups,
                    "step_return": returns,
                },
            )
    if evals:
        log.log({"eval/success": 0.75, "eval/score": 0.8}, iteration=2, tag="eval")
        log.log({"eval/success": 0.5, "eval/score": 0.6}, iteration=iterations, tag="eval_final")
    log.close()
    return run


def _viewer_json(text: str) -> dict:
    m = re.search(r'<script type="application/json" id="viewer-data">(.*?)</script>', text, re.S)
    assert m, "viewer data block missing"
    return json.loads(m.group(1))


def test_report_has_every_section_plots_and_viewer_data(tmp_path):
    run = make_run_dir(tmp_path)
    path = write_report(run)
    assert path == run / "report.html"
    text = path.read_text(encoding="utf-8")
    for sid in ("header", "curves", "group-sizes", "timing", "viewer", "vw-iter", "vw-task", "vw-cols"):
        assert f'id="{sid}"' in text, sid
    for plot in (
        "success-rate",
        "score",
        "episode-length",
        "invalid-action-rate",
        "kl-to-reference",
        "entropy",
        "clip-fraction",
        "gradient-norm",
        "group-sizes",
        "timing",
    ):
        block = re.search(rf'id="plot-{plot}">(.*?)</figure>', text, re.S).group(1)
        b64 = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', block).group(1)
        assert base64.b64decode(b64)[:8] == b"\x89PNG\r\n\x1a\n", plot
    assert "unit_run" in text and "gigpo" in text
    # held-out: final from eval_final, best over all evaluations, before from eval_before
    assert re.search(r'id="final-success">0\.500<', text)
    assert re.search(r'id="best-success">0\.750 \(iteration 2\)<', text)
    data = _viewer_json(text)
    assert [d["iteration"] for d in data["iterations"]] == [2, 4]
    task = data["iterations"][0]["tasks"][0]
    assert len(task["trajs"]) == 4 and task["task_id"] == "task-0"
    steps = [s for tr in task["trajs"] for s in tr["steps"]]
    # the looping "look" state is one anchor group across the 4 rollouts: 1+2+3+4 = 10 rows
    room = {s["g"] for s in steps if s["obs"] == ROOM}
    assert len(room) == 1 and all(s["gs"] == 10 for s in steps if s["obs"] == ROOM)
    assert any(not s["valid"] for s in steps)
    assert all(s["a"] is not None and s["ae"] is not None and s["as"] is not None for s in steps)


def test_report_is_self_contained(tmp_path):
    text = write_report(make_run_dir(tmp_path)).read_text(encoding="utf-8")
    # nothing that loads from elsewhere: every src/href is inline data, no @import / url(http
    for ref in re.findall(r'(?:src|href)\s*=\s*["\']([^"\']*)', text):
        assert ref.startswith("data:"), ref
    assert not re.search(r"(?:url\(|@import)\s*['\"]?(?:https?:)?//", text)
    assert "<link" not in text
    # a trajectory text cannot break out of the JSON block (action contains </script>)
    assert text.count("</script>") == 2
    assert "<script>alert(1)" not in text


def test_missing_pieces_become_notes_not_errors(tmp_path):
    run = make_run_dir(tmp_path, estimator="grpo", traj_every=100, evals=False)
    (run / "metrics.jsonl").open("a").write('{"iteration": 5, "tag": "train", "rollout/succ\n')  # killed mid-line
    text = write_report(run).read_text(encoding="utf-8")
    assert "skipped 1 unreadable line" in text
    assert 'id="plot-group-sizes"><p class="missing">' in text  # grpo has no step groups
    assert "No trajectories were written" in text and _viewer_json(text)["iterations"] == []
    assert re.search(r'id="final-success">&ndash;<', text)
    assert 'id="plot-success-rate"><img' in text  # training curve still drawn


def test_group_sizes_fall_back_to_trajectory_files(tmp_path):
    run = make_run_dir(tmp_path)
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in ln.items() if not k.startswith("step_groups/")}) + "\n" for ln in lines)
    )
    from gigpo.report.plots import group_size_table

    its, labels, counts, share, source = group_size_table(load_run(run))
    assert its == [2, 4] and source == "trajectories/"
    # per task: one looping group of 10 rows + one group of 4 (the second state): 2 groups, all rows shared
    assert counts.sum(axis=1).tolist() == [6.0, 6.0] and np.allclose(share, 1.0)


def test_viewer_caps_size_and_iterations(tmp_path, monkeypatch):
    assert pick_iterations(list(range(1, 21)), 6) == [1, 5, 9, 12, 16, 20]
    assert pick_iterations([3, 7], 6) == [3, 7]
    run = make_run_dir(tmp_path, iterations=8, traj_every=1)
    import gigpo.report.viewer as V

    monkeypatch.setattr(V, "MAX_BYTES", 8000)
    data = viewer_data(load_run(run))
    assert len(json.dumps(data)) <= 8000 or len(data["iterations"]) == 1
    assert any("are cut" in n for n in data["notes"]) and any("showing iterations" in n for n in data["notes"])
    assert MAX_BYTES >= 1_000_000


def test_eval_summary_uses_tags(tmp_path):
    ev = eval_summary(load_run(make_run_dir(tmp_path)))
    assert ev == {"before": 0.25, "final": 0.5, "best": 0.75, "best_iteration": 2}


def test_cli_main_writes_report_and_rejects_non_run_dirs(tmp_path, capsys):
    run = make_run_dir(tmp_path)
    out = tmp_path / "elsewhere.html"
    assert main([str(run), "--out", str(out)]) == 0 and out.exists()
    assert str(out) in capsys.readouterr().out
    assert main([str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2
    assert "neither config.yaml nor metrics.jsonl" in capsys.readouterr().err


def test_gigpo_cli_dispatches_report(tmp_path):
    from gigpo import cli

    run = make_run_dir(tmp_path)
    assert cli.main(["report", str(run)]) == 0 and (run / "report.html").exists()


@pytest.mark.slow
def test_report_of_a_real_short_training_run(tmp_path):
    """A real 2-iteration GiGPO run (tiny model, real ALFWorld engine) -> its report."""
    import torch

    from gigpo.train.trainer import Trainer

    torch.set_num_threads(1)
    cfg = load_config(
        None,
        [
            f"output_dir={tmp_path}",
            "name=real",
            "env.family=alfworld",
            "env.group_size=2",
            "env.tasks_per_iter=2",
            "env.max_steps=3",
            "env.eval_tasks=2",
            "env.train_tasks=4",
            "train.iterations=2",
            "rollout.max_response_tokens=12",
            "sft.enabled=false",
            "log.trajectories_every=1",
            "log.progress=false",
            "log.tensorboard=false",
        ],
    )
    trainer = Trainer(cfg)
    try:
        trainer.run()
    finally:
        trainer.close()
    text = write_report(cfg.run_dir).read_text(encoding="utf-8")
    assert 'class="missing"' not in text  # every figure had its data in a real run
    assert text.count('src="data:image/png;base64,') == 11
    assert re.search(r'id="final-success">\d\.\d{3}<', text)
    data = _viewer_json(text)
    assert [d["iteration"] for d in data["iterations"]] == [1, 2]
    task = data["iterations"][0]["tasks"][0]
    assert len(task["trajs"]) == 2 and task["task_type"]
    steps = [s for tr in task["trajs"] for s in tr["steps"]]
    # both rollouts of a task start in the same state: step 0 is one anchor group of size 2
    first = {s["g"] for tr in task["trajs"] for s in tr["steps"][:1]}
    assert len(first) == 1 and all(s["gs"] >= 1 and s["a"] is not None for s in steps)
    assert steps[0]["gs"] >= 2


def test_viewer_shows_the_state_key_when_trajectories_have_one(tmp_path):
    run = make_run_dir(tmp_path)
    f = sorted((run / "trajectories").glob("iter_*.jsonl"))[0]
    rows = [json.loads(x) for x in f.read_text().splitlines()]
    for i, r in enumerate(rows):
        r["state_anchor"] = f"state {i % 3}"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = viewer_data(load_run(run))
    steps = [s for tr in data["iterations"][0]["tasks"][0]["trajs"] for s in tr["steps"]]
    assert {s["st"] for s in steps} == {"state 0", "state 1", "state 2"}
    # a run without state keys shows none
    assert all(
        s["st"] == "" for it in data["iterations"][1:] for t in it["tasks"] for tr in t["trajs"] for s in tr["steps"]
    )


def _header(text: str) -> str:
    return text[text.index('<header id="header">') : text.index("</header>")]


def test_header_shows_the_kl_coef_only_when_the_kl_term_is_on(tmp_path):
    on = _header(write_report(make_run_dir(tmp_path / "on")).read_text(encoding="utf-8"))
    assert "<th>KL coef</th><td>0.01</td>" in on
    off = _header(
        write_report(make_run_dir(tmp_path / "off", overrides=("train.use_kl=false",))).read_text(encoding="utf-8")
    )
    assert "KL coef" not in off and "<th>learning rate</th>" in off


@pytest.mark.parametrize(
    "iterations, traj_every, expected",
    [
        (
            2,
            4,
            "no trajectories were written in this run: trajectories are written at iterations that are a multiple "
            "of log.trajectories_every = 4, and none of the logged iterations 1-2 was. "
            "set log.trajectories_every=1",
        ),
        (1, 3, "multiple of log.trajectories_every = 3, and none of the logged iteration 1 was"),
        (3, 0, "log.trajectories_every is 0 (never)"),
    ],
)
def test_no_trajectories_message_names_the_key_and_value(tmp_path, iterations, traj_every, expected):
    run = make_run_dir(tmp_path, iterations=iterations, traj_every=traj_every or 10**6, evals=False)
    if traj_every == 0:  # the helper's writer never writes with a huge period; the config says 0
        text = (run / "config.yaml").read_text().replace("trajectories_every: 1000000", "trajectories_every: 0")
        (run / "config.yaml").write_text(text)
    assert not (run / "trajectories").exists() or not any((run / "trajectories").iterdir())
    data = _viewer_json(write_report(run).read_text(encoding="utf-8"))
    assert data["iterations"] == [] and expected in data["empty"].lower(), data["empty"]


def test_no_trajectories_message_when_the_files_are_gone(tmp_path):
    run = make_run_dir(tmp_path, iterations=4, traj_every=2)
    for f in (run / "trajectories").iterdir():
        f.unlink()
    data = viewer_data(load_run(run))
    assert "iteration 2 was logged and log.trajectories_every = 2" in data["empty"]
    assert "missing or empty" in data["empty"]


def test_a_20k_line_run_is_reported_with_thinned_plots_that_keep_the_first_and_last_iteration(tmp_path):
    """A long run (20,000 train lines of ~25 metrics) is read keeping only plotted keys, its curves
    are drawn from at most MAX_POINTS bucket means and its bars from at most MAX_BARS buckets,
    with iteration 1 and the last iteration on the axis. (Speed: benchmarks/report_speed.py.)"""
    from gigpo.report.data import series
    from gigpo.report.plots import MAX_BARS, MAX_POINTS, bucket_bars, report_key, thin, timing_table

    n = 20_000
    run = make_run_dir(tmp_path, iterations=1, traj_every=1)
    hist = {"step_groups/hist_1": 3, "step_groups/hist_2": 2, "step_groups/hist_3-4": 1, "step_groups/hist_9+": 1}
    with open(run / "metrics.jsonl", "w") as f:
        f.write(json.dumps({"iteration": 0, "tag": "eval_before", "eval/success": 0.25}) + "\n")
        for it in range(1, n + 1):
            row = {"iteration": it, "tag": "train", "rollout/success": (it % 7) / 7, "actor/kl": 1e-3 * (it % 3)}
            row.update({"time/rollout": 3.0, "time/update": 1.0 + (it == n), "step_groups/share_rows_in_size_gt1": 0.5})
            row.update(hist)
            row.update({f"unplotted/k{j}": j * 0.5 for j in range(12)})
            f.write(json.dumps(row) + "\n")
            if it % 5000 == 0:
                f.write(
                    json.dumps({"iteration": it, "tag": "eval_final" if it == n else "eval", "eval/success": 0.5})
                    + "\n"
                )

    data = load_run(run, keep=report_key)
    assert len(data.train) == n and len(data.evals) == 5
    assert set(data.train[0]) == {"iteration", "tag", "rollout/success", "actor/kl", "time/rollout", "time/update"} | {
        "step_groups/share_rows_in_size_gt1",
        *hist,
    }
    x, y = series(data.train, "rollout/success")
    t = thin(x, y)
    assert len(t.x) <= MAX_POINTS and t.per == n // MAX_POINTS
    assert (t.x[0], t.x[-1]) == (1.0, float(n)) and np.all(np.diff(t.x) > 0)
    assert t.lo.min() == 0.0 and t.hi.max() == 6 / 7 and abs(t.y.mean() - y.mean()) < 1e-3
    its, labels, secs = timing_table(data)
    ticks, bars, per = bucket_bars(its, secs)
    assert labels == ["rollout", "update"] and len(ticks) == len(bars) <= MAX_BARS and per == n // MAX_BARS
    assert ticks[0] == "1" and np.allclose(bars[:, 0], 3.0) and bars[-1, 1] > 1.0  # the last iteration's 2 s counted

    text = write_report(run).read_text(encoding="utf-8")
    assert f"<th>iterations logged</th><td>{n}</td>" in text
    assert re.search(r'id="final-success">0\.500<', text)
    assert f"{n:,} iterations: mean of every {n // MAX_POINTS} drawn" in text
    assert f"{n:,} iterations, each bar the mean of up to {n // MAX_BARS}" in text
    assert text.count('src="data:image/png;base64,') == 4  # success, KL, group sizes, time per phase


def test_ctrl_c_in_gigpo_report_is_one_line_not_a_traceback(tmp_path):
    """SIGINT while `gigpo report` reads metrics.jsonl: `gigpo: interrupted`, exit 130, no .tmp.

    metrics.jsonl is a FIFO: the report blocks reading it, deterministically, until the signal."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    run = make_run_dir(tmp_path, iterations=1, traj_every=1, evals=False)
    (run / "metrics.jsonl").unlink()
    os.mkfifo(run / "metrics.jsonl")
    src = str(Path(__file__).resolve().parent.parent / "src")
    env = {**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": "1"}
    env.pop("GIGPO_TRACEBACK", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gigpo.cli", "report", str(run)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        # a shell's background job ignores SIGINT, and children inherit that: give the report the default
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline, fd = time.monotonic() + 60, None
    while fd is None:  # opening the write end succeeds once the report has the FIFO open to read
        try:
            fd = os.open(run / "metrics.jsonl", os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)
    try:
        os.write(fd, b'{"iteration": 1, "tag": "train", "rollout/success": 0.5}\n')
        time.sleep(0.3)  # the report is now blocked reading the next line
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        os.close(fd)
    assert proc.returncode == 130, err
    assert err == "gigpo: interrupted\n", err
    assert not (run / "report.html").exists() and not (run / "report.html.tmp").exists()


def test_off_policy_panels_appear_only_for_a_run_that_trained_off_policy(tmp_path):
    series_run = write_report(make_run_dir(tmp_path / "series")).read_text(encoding="utf-8")
    assert "plot-staleness" not in series_run and "plot-behaviour-weight" not in series_run
