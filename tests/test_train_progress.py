"""What a run shows while it works: the run directory at start, the iteration line's legend and
ETA, "resumed from iteration N" and the before/after table on a resume, and the no-signal
warning in metrics and report."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from gigpo.train.progress import RunProgress, eta_text

from small_runs import train_cmd


def test_eta_is_the_mean_iteration_time_times_the_iterations_left(monkeypatch):
    import gigpo.train.progress as P

    now = [100.0]
    monkeypatch.setattr(P.time, "perf_counter", lambda: now[0])
    p = RunProgress(total=10, done=2, enabled=False)  # resumed after 2 of 10
    assert p.eta() is None  # nothing measured in this process yet
    now[0] += 30.0
    assert p.iteration_done() == "eta 3m30s"  # 30 s an iteration, 7 left: 210 s
    now[0] += 90.0
    assert p.iteration_done() == "eta 6m00s" and p.eta() == 60.0 * 6  # 60 s each, 6 left
    assert [eta_text(s) for s in (0, 59, 61, 3600 + 5 * 60)] == ["0s", "59s", "1m01s", "1h05m"]
    p.done = 9
    assert p.iteration_done() == ""  # the last iteration has no ETA


def test_an_iteration_that_spans_a_suspended_run_does_not_inflate_the_eta(monkeypatch):
    import gigpo.train.progress as P

    now = [0.0]
    monkeypatch.setattr(P.time, "perf_counter", lambda: now[0])
    p = RunProgress(total=20, done=0, enabled=False)
    p.begin()
    for secs in (90.0, 100.0, 90.0 + 2700.0, 80.0):  # the third ran across 45 minutes of Ctrl-Z
        now[0] += secs
        p.iteration_done()
    assert p.eta() == pytest.approx(16 * 90.0)  # the mean of 90, 100 and 80, 16 left


def test_eta_leaves_out_the_evals_before_the_loop_and_adds_the_validations_and_eval_still_due(monkeypatch):
    import gigpo.train.progress as P

    now = [0.0]
    monkeypatch.setattr(P.time, "perf_counter", lambda: now[0])
    p = RunProgress(total=20, done=0, enabled=False)
    now[0] += 400.0  # the held-out eval before training
    p.spent(400.0)
    now[0] += 40.0  # the validation before training
    p.spent(40.0, validation=True)
    p.plan(val_every=5, eval_every=0, eval_seconds=400.0)
    p.begin()
    now[0] += 90.0
    # 19 iterations of 90 s, validations after 5, 10, 15, 20 of 40 s, the eval after of 400 s
    assert p.iteration_done() == f"eta {eta_text(19 * 90 + 4 * 40 + 400)}"
    for it in range(2, 6):
        now[0] += 90.0
        if it == 5:  # iteration 5 validates, inside the loop
            now[0] += 50.0
            p.spent(50.0, validation=True)
        p.iteration_done()
    assert p.done == 5 and p.eta() == pytest.approx(15 * 90 + 3 * 50 + 400)  # validations after 10, 15, 20
    p.plan(val_every=5, eval_every=4, eval_seconds=400.0)  # held-out evals after 8, 12, 16 too
    assert p.eta() == pytest.approx(15 * 90 + 3 * 50 + 4 * 400)


def test_the_no_signal_warning_says_whether_a_kl_or_entropy_term_still_moved_the_policy():
    from types import SimpleNamespace

    from gigpo.train.progress import no_signal_warning

    plain = SimpleNamespace(use_kl=False, kl_coef=0.01, entropy_coef=0.0)
    assert "left the policy unchanged" in no_signal_warning(3, plain)
    for moved in ({"use_kl": True}, {"entropy_coef": 1e-3}):
        said = no_signal_warning(3, SimpleNamespace(**{**vars(plain), **moved}))
        assert "only the KL/entropy terms moved the policy" in said and "unchanged" not in said


def test_no_signal_is_one_exactly_when_every_advantage_is_zero():
    from types import SimpleNamespace

    from gigpo.train.metrics import credit_metrics

    batch = SimpleNamespace(num_rows=0)  # anchor metrics are skipped for an empty batch

    def m(adv):
        res = SimpleNamespace(
            advantages=np.asarray(adv, np.float32),
            episode_advantages=np.zeros(len(adv)),
            step_advantages=np.zeros(len(adv)),
            step_groups=np.full(len(adv), -1),
        )
        credit = SimpleNamespace(result=res, step_returns=np.zeros(len(adv)), scores=np.zeros(len(adv)), anchors=[])
        return credit_metrics(batch, credit, "observation")["train/no_signal"]

    assert m([0.0, 0.0, 0.0]) == 1 and m([]) == 1
    assert m([0.0, 0.5, 0.0]) == 0 and m([-1e-3]) == 0


def test_a_run_names_its_dir_explains_its_line_and_resumes_with_the_before_after_table(tmp_path):
    env = dict(os.environ, GIGPO_DEBUG_SIGKILL_AT="2:after_rollout")
    extra = ["train.iterations=3", "log.eval_before=true", "guard.val_every=2", "guard.val_tasks=1", "env.eval_tasks=3"]
    killed = subprocess.run(train_cmd(tmp_path, "r", extra), capture_output=True, text=True, env=env, timeout=600)
    assert killed.returncode != 0
    out = killed.stdout
    assert out.splitlines()[0] == f"run directory: {tmp_path / 'r'}"  # named before any work
    assert "iteration line: success / score" in out  # the legend, before the first line
    first = next(x for x in out.splitlines() if x.startswith("iter 1/3"))
    assert " eta " in first  # an ETA while iterations remain
    cmd = train_cmd(tmp_path, "r", extra)
    r = subprocess.run([*cmd[:4], "--resume", str(tmp_path / "r")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resumed from iteration 1" in r.stdout
    assert "before vs after training" in r.stdout  # the start was evaluated in the killed process
    lines = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert sum(x["tag"] == "eval_before" for x in lines) == 1  # not evaluated again on resume
    assert all("train/no_signal" in x for x in lines if x["tag"] == "train")
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    before = next(x for x in lines if x["tag"] == "eval_before")
    final = next(x for x in lines if x["tag"] == "eval_final")
    assert summary["success_before"] == before["eval/success"]
    # Each held-out task's outcome is logged, so the change carries its paired standard error,
    # also after a resume (the start's outcomes come from the killed process's line).
    won_b, won_a = (np.array([int(c) for c in x["eval/won_per_task"]]) for x in (before, final))
    assert len(won_b) == len(won_a) >= 2 and won_b.mean() == before["eval/success"]
    d = won_a - won_b
    assert summary["success_change_se"] == pytest.approx(d.std(ddof=1) / np.sqrt(len(d)))
    assert f"paired standard error over the {len(d)} tasks" in r.stdout


def test_paired_change_is_the_mean_per_task_difference_with_its_standard_error():
    from gigpo.train.evaluator import paired_change

    change, se = paired_change({"eval/won_per_task": "0011"}, {"eval/won_per_task": "0111"})
    assert change == 0.25 and se == pytest.approx(0.25)  # differences 0, 1, 0, 0: sd 0.5 over 4
    assert paired_change({"eval/won_per_task": "01"}, {"eval/won_per_task": "011"}) is None  # other tasks
    assert paired_change({}, {"eval/won_per_task": "01"}) is None


def test_the_report_counts_iterations_without_signal(tmp_path):
    from gigpo.report import write_report

    run = tmp_path / "run"
    run.mkdir()
    rows = [{"iteration": i, "tag": "train", "rollout/success": 0.0, "train/no_signal": int(i != 2)} for i in (1, 2, 3)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    html = write_report(run).read_text()
    assert "2 of 3 iterations trained on no signal" in html and "iteration 1, 3" in html


def test_dry_run_checks_prints_the_plan_and_writes_nothing(tmp_path, capsys):
    from gigpo.cli import main

    from small_runs import SEARCH_TINY, SMALL

    args = ["train", "--config", str(SEARCH_TINY), *SMALL, f"output_dir={tmp_path / 'out'}", "name=d", "--dry-run"]
    assert main([*args, "train.iterations=3"]) == 0
    out = capsys.readouterr().out
    assert f"run directory: {tmp_path / 'out' / 'd'}" in out
    assert "work: 3 iterations = 12 training episodes" in out  # 3 x 2 tasks x 2 rollouts
    assert not (tmp_path / "out").exists()
    assert main([*args, "env.kwargs.no_such_option=1"]) == 2  # what a run refuses, the dry run refuses
    assert "env.kwargs" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_dry_run_estimates_the_time_from_a_like_run_in_the_output_dir(tmp_path, capsys):
    """The estimate scales a like run's measured seconds per episode; a resume counts only the
    iterations left; a run that differs in what sets the cost (here the response length) is not used."""
    import json
    import re
    import statistics

    from gigpo.cli import main

    from small_runs import SEARCH_TINY, SMALL

    out = tmp_path / "out"
    base = ["train", "--config", str(SEARCH_TINY), *SMALL, f"output_dir={out}"]
    assert main([*base, "name=done", "train.iterations=2"]) == 0
    capsys.readouterr()
    lines = [json.loads(x) for x in (out / "done" / "metrics.jsonl").read_text().splitlines()]
    per_iter = statistics.median(r["time/iteration"] for r in lines if r["tag"] == "train")

    assert main([*base, "name=new", "train.iterations=5", "--dry-run"]) == 0
    said = capsys.readouterr().out
    m = re.search(
        r"time: about \S+ for 5 iterations and the evaluations \(([\d.]+)s an iteration\), from the "
        r"timings of (\S+)",
        said,
    )
    assert m, said
    assert float(m.group(1)) == pytest.approx(per_iter, abs=0.051) and m.group(2) == str(out / "done")
    assert not (out / "new").exists()

    assert main(["train", "--resume", str(out / "done"), "train.iterations=5", "--dry-run"]) == 0
    assert "for 3 iterations" in (said := capsys.readouterr().out) and "this run's own iterations" in said

    assert main([*base, "name=new", "rollout.max_response_tokens=16", "--dry-run"]) == 0
    assert "time: no earlier run of search with tiny" in capsys.readouterr().out


def test_the_saved_models_table_shows_each_models_own_validation_success(capsys):
    """The last model delivered within guard.select_margin_se of the best is labelled with its own
    validation success, not the best's."""
    from types import SimpleNamespace

    from gigpo.train.guards import Watchdog
    from gigpo.train.logging import print_model_table
    from gigpo.train.selection import choose_delivered, model_val

    guard = SimpleNamespace(
        val_every=5, select_margin_se=2.0, watchdog=True, val_drop=0.5, train_drop=1.0, entropy_floor=0, patience=2
    )
    wd = Watchdog(guard, select_by_val=True)
    for it, success in ((0, 0.281), (5, 0.5), (10, 0.469)):
        wd.observe_val(it, success)
    chosen = choose_delivered(wd, guard, 10, 32, None)
    assert chosen.iteration == 10 and chosen.note  # within two standard errors of the best
    val = model_val(wd, {"model": 10})
    assert val == {10: 0.469}
    print_model_table({"model": 10}, {"after": {"eval/success": 0.6}}, val=val)
    out = capsys.readouterr().out
    assert "validation success 0.469" in out and "0.500" not in out

    strict = SimpleNamespace(**{**vars(guard), "select_margin_se": 0.0})
    wd2 = Watchdog(strict, select_by_val=True)
    for it, success in ((0, 0.281), (5, 0.5), (10, 0.469)):
        wd2.observe_val(it, success)
    chosen = choose_delivered(wd2, strict, 10, 32, None)
    assert chosen.iteration == 5
    assert model_val(wd2, {"model": 5, "model_last": 10}) == {5: 0.5, 10: 0.469}
