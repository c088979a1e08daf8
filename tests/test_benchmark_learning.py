"""research/learning.py: runs differ only in the estimator, resumability, and the --quick pipeline
(real runs of `tiny` on ALFWorld -> summaries, table and plots whose numbers match the metrics)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from benchmark_scripts import BENCH, load

SCRIPT = BENCH / "learning.py"
ROOT = BENCH.parent


L = load("learning.py", "learning_bench")
R = L.learning_report


def _by_key(overrides):
    return dict(o.split("=", 1) for o in overrides)


def test_runs_share_start_seeds_and_budget_and_differ_only_in_estimator(tmp_path):
    args = L.parse_args(["--runs-dir", str(tmp_path), "--seeds", "0,1"])
    runs = L.plan_runs(args, "/models/sft")
    assert len(runs) == 2 * len(L.DEFAULT_VARIANTS)
    per_seed = {}
    for r in runs:
        kv = _by_key(r["overrides"])
        assert kv["model.name_or_path"] == "/models/sft" and kv["sft.enabled"] == "false"
        assert kv["train.iterations"] == str(args.iterations) and kv["seed"] == str(r["seed"])
        per_seed.setdefault(r["seed"], []).append(kv)
    # log.eval_before: the pre-training eval runs once per seed (it is the same for every variant)
    allowed = {"algorithm.estimator", "algorithm.mode", "name", "log.eval_before"}
    for _seed, kvs in per_seed.items():
        for kv in kvs[1:]:
            differing = {k for k in kv.keys() | kvs[0].keys() if kv.get(k) != kvs[0].get(k)}
            assert differing <= allowed, differing
    # every variant resolves to a valid config, and the estimators are the registry's names
    from gigpo.advantages import ESTIMATORS
    from gigpo.train.config import load_config

    for r in runs[: len(L.DEFAULT_VARIANTS)]:
        cfg = load_config(args.config, r["overrides"])
        assert cfg.algorithm.estimator in ESTIMATORS and cfg.train.iterations == args.iterations


def test_the_head_to_head_is_planned_for_every_seed_before_other_arms_and_ablations(tmp_path):
    arms = "gigpo_no_episode,gigpo_eb_mean_norm,grpo,gigpo_mean_norm"
    args = L.parse_args(["--runs-dir", str(tmp_path), "--seeds", "0,1", "--estimators", arms])
    names = [r["name"] for r in L.plan_runs(args, "/models/sft")]
    assert names == [
        "grpo-s0",
        "gigpo_mean_norm-s0",
        "grpo-s1",
        "gigpo_mean_norm-s1",
        "gigpo_eb_mean_norm-s0",
        "gigpo_eb_mean_norm-s1",
        "gigpo_no_episode-s0",
        "gigpo_no_episode-s1",
    ]
    # the seed's first run scores the start, once per seed, for the others to share
    before = [r["name"] for r in L.plan_runs(args, "/models/sft") if "log.eval_before=true" in r["overrides"]]
    assert before == ["grpo-s0", "grpo-s1"]


def test_anchor_variants_differ_from_gigpo_std_norm_only_in_the_anchor(tmp_path):
    args = L.parse_args(
        ["--runs-dir", str(tmp_path), "--seeds", "0", "--estimators", "gigpo_std_norm,gigpo_state,grpo"]
    )
    from gigpo.train.config import load_config

    runs = {r["variant"]: r for r in L.plan_runs(args, "/models/sft")}
    base = _by_key(runs["gigpo_std_norm"]["overrides"])
    state = _by_key(runs["gigpo_state"]["overrides"])
    assert {k for k in base.keys() | state.keys() if base.get(k) != state.get(k)} == {
        "algorithm.anchor",
        "name",
        "log.eval_before",
    }
    assert load_config(args.config, runs["gigpo_state"]["overrides"]).algorithm.anchor == "state"
    assert "gigpo_state" not in L.parse_args([]).estimators  # opt-in


def test_ppo_variant_is_opt_in_and_a_valid_ppo_run_on_every_family(tmp_path):
    from gigpo.train.config import load_config

    assert "ppo" not in L.parse_args([]).estimators
    for family in L.FULL:
        args = L.parse_args(["--family", family, "--runs-dir", str(tmp_path), "--seeds", "0", "--estimators", "ppo"])
        (run,) = L.plan_runs(args, "/models/sft")
        cfg = load_config(args.config, run["overrides"])
        assert cfg.algorithm.estimator == "ppo" and cfg.needs_critic() and not cfg.train.dynamic_sampling


def test_bad_flags_name_the_problem(capsys):
    with pytest.raises(SystemExit):
        L.parse_args(["--estimators", "gigpo,dqn"])
    assert "dqn" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        L.parse_args(["--seeds", "a,b"])
    assert "integers" in capsys.readouterr().err


def test_run_state_done_only_with_final_eval_at_the_planned_iteration(tmp_path):
    run = {"dir": tmp_path / "grpo-s0"}
    assert L.run_state(run, 3) == "new"
    (run["dir"] / "checkpoints").mkdir(parents=True)
    (run["dir"] / "checkpoints" / "latest").write_text("2")
    lines = [{"iteration": 0, "tag": "eval_before"}, {"iteration": 2, "tag": "eval_final"}]
    (run["dir"] / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert L.run_state(run, 3) == "partial"  # finished at 2, asked for 3: resume
    assert L.run_state(run, 2) == "done"


def test_config_guard_accepts_fields_added_later_and_rejects_changed_values(tmp_path):
    import yaml
    from gigpo.train.config import load_config, to_dict

    args = L.parse_args(["--runs-dir", str(tmp_path), "--seeds", "0", "--estimators", "grpo"])
    run = L.plan_runs(args, "/models/sft")[0]
    run["dir"].mkdir(parents=True)
    saved = to_dict(load_config(args.config, run["overrides"]))
    del saved["rollout"]["repeat_task"]  # a run dir written before this field existed
    (run["dir"] / "config.yaml").write_text(yaml.safe_dump(saved))
    L.check_same_config(run, args)  # default value: the same config
    saved["train"]["lr"] = 1.0
    (run["dir"] / "config.yaml").write_text(yaml.safe_dump(saved))
    with pytest.raises(SystemExit, match="train.lr"):
        L.check_same_config(run, args)


def test_a_runs_dir_keeps_its_start_checkpoint(tmp_path):
    start = tmp_path / "sft-start"
    start.mkdir()
    args = L.parse_args(["--runs-dir", str(tmp_path / "runs")])
    args.runs_dir.mkdir()
    (args.runs_dir / "plan.json").write_text(json.dumps({"sft_dir": str(start)}))
    assert L.build_shared_sft(args) == str(start)  # no SFT subprocess: it would take minutes


def test_mean_and_sample_sd_in_points():
    assert R.fmt([0.5, 0.7]) == "60.0 ± 14.1"
    assert R.fmt([0.25]) == "25.0"
    assert R.fmt([]) == "-"


def test_dry_run_prints_an_estimate_and_runs_nothing(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--dry-run",
            "--runs-dir",
            str(tmp_path / "runs"),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    # 18 planned, 15 to train: gigpo_no_step's 3 are GRPO's runs (identical advantages)
    assert re.search(r"estimate: ~\d+ min wall \(15 run\(s\) to do", out.stdout), out.stdout
    plan = json.loads((tmp_path / "runs" / "plan.json").read_text())
    assert len(plan["runs"]) == 18 and not (tmp_path / "out").exists()
    assert {r["same_as"] for r in plan["runs"] if "same_as" in r} == {"grpo-s0", "grpo-s1", "grpo-s2"}
    # a dry run beside a comparison leaves that comparison's plan (its start checkpoint) alone
    live = tmp_path / "runs" / "plan.json"
    live.write_text(json.dumps({"sft_dir": "/models/sft-live"}))
    subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--runs-dir", str(tmp_path / "runs")],
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert json.loads(live.read_text()) == {"sft_dir": "/models/sft-live"}
    again = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--rerun-identical", "--runs-dir", str(tmp_path / "runs2")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "(18 run(s) to do" in again.stdout
    # a bf16 update is ~1.6x faster than float32 where the CPU has AVX512: the estimate follows the
    # precision, and the budget's `auto` is whichever this machine runs
    minutes = {}
    for mode in ("bf16", "none"):
        o = subprocess.run(
            [sys.executable, str(SCRIPT), "--dry-run", "--runs-dir", str(tmp_path / mode), f"train.autocast={mode}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        minutes[mode] = int(re.search(r"estimate: ~(\d+) min", o.stdout).group(1))
    assert minutes["none"] > 1.3 * minutes["bf16"], minutes
    from gigpo.learner.precision import resolve_autocast

    assert int(re.search(r"estimate: ~(\d+) min", out.stdout).group(1)) == minutes[resolve_autocast("auto")]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One real --quick comparison: 2 estimators x 1 seed x 1 iteration of `tiny` on ALFWorld
    (plus gigpo_no_step, reported from GRPO's run, not rerun)."""
    root = tmp_path_factory.mktemp("learning")
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--quick",
        "--estimators",
        "gigpo_std_norm,grpo,gigpo_no_step",
        "--seeds",
        "0",
        "--runs-dir",
        str(root / "runs"),
        "--out",
        str(root / "out"),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    return root, cmd, env, first.stdout


@pytest.mark.slow
def test_quick_writes_summaries_table_and_plots_from_real_runs(quick):
    root, _, _, stdout = quick
    res = root / "out" / "results" / "alfworld"
    # every run read the frozen copy of the base config, which ships with the results
    frozen = (root / "runs" / "base_config.yaml").read_text()
    assert (res / "base_config.yaml").read_text() == frozen and "family: alfworld" in frozen
    for png in ("success_vs_iteration.png", "success_vs_time.png"):
        assert (res / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (root / "out" / "results.md").read_text()
    for v in ("gigpo_std_norm", "grpo"):
        s = json.loads((res / f"{v}-s0.json").read_text())
        assert [e["tag"] for e in s["evals"]] == ["eval_before", "eval_final"]
        assert s["config"]["algorithm.estimator"] == v.split("_std")[0]
        # what shaped the tasks is kept, and named in the page (a comparison run with overrides of it
        # must say so)
        assert s["config"]["env.task_kwargs"]["task_types"] == ["pick_and_place_simple"]
        assert len(s["train"]) == 1 and s["train"][0]["time/iteration"] > 0
        row = next(ln for ln in text.splitlines() if ln.startswith(f"| {v} | 1/1 |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        final = s["evals"][-1]["eval/success"] * 100
        assert float(cells[3].split()[0]) == pytest.approx(final, abs=0.05)
        assert float(cells[-2]) == pytest.approx(s["train"][0]["time/iteration"], abs=0.05)
    # the shared start: both runs name the same SFT checkpoint
    cfgs = {
        json.loads((res / f"{v}-s0.json").read_text())["config"]["model.name_or_path"]
        for v in ("gigpo_std_norm", "grpo")
    }
    assert len(cfgs) == 1 and "sft-alfworld-" in cfgs.pop()
    # the eval before training ran once per seed (first variant) and is shared with the others
    grpo = json.loads((res / "grpo-s0.json").read_text())
    assert grpo["evals"][0]["shared_from"] == "gigpo_std_norm-s0"
    assert (root / "runs" / "gigpo_std_norm-s0" / "metrics.jsonl").read_text().count("eval_before") == 1
    assert "eval_before" not in (root / "runs" / "grpo-s0" / "metrics.jsonl").read_text()
    assert "estimate: ~" in stdout and "minus grpo" in text
    # gigpo_no_step has GRPO's advantages: reported from grpo-s0, not trained again, and marked so
    assert not (root / "runs" / "gigpo_no_step-s0").exists()
    assert "gigpo_no_step-s0: reported from grpo-s0" in stdout and "2 run(s) to do" in stdout
    alias = json.loads((res / "gigpo_no_step-s0.json").read_text())
    assert alias["same_run_as"] == "grpo-s0" and alias["variant"] == "gigpo_no_step"
    assert alias["evals"] == grpo["evals"] and alias["train"] == grpo["train"]
    assert "| gigpo_no_step (= grpo's runs: identical advantages, not rerun) | 1/1 |" in text
    assert "tasks " in text and "task_types=['pick_and_place_simple']" in text


@pytest.mark.slow
def test_rerun_skips_complete_runs_and_keeps_text_outside_the_markers(quick):
    root, cmd, env, _ = quick
    md = root / "out" / "results.md"
    md.write_text(md.read_text() + "\nHand-written analysis stays.\n")
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert again.stdout.count("skipped (complete)") == 0  # skipped runs print nothing...
    assert "0 run(s) to do" in again.stdout  # ...because the plan found both complete
    text = md.read_text()
    assert "Hand-written analysis stays." in text and text.count("learning:alfworld:begin") == 1


# ---- the report on synthetic summaries: Sokoban's outcome columns, step-group sizes; other families unchanged


def test_sokoban_budget_is_planned_with_guards_off(tmp_path):
    args = L.parse_args(["--family", "sokoban", "--runs-dir", str(tmp_path)])
    assert (args.iterations, args.eval_every) == (10, 10) and args.config.name == "sokoban_tiny.yaml"
    from gigpo.train.config import load_config

    run = L.plan_runs(args, "/models/sft")[0]
    cfg = load_config(args.config, run["overrides"])
    assert cfg.env.family == "sokoban" and cfg.train.dynamic_sampling
    # the last model of every run is scored: no per-estimator selection or rollback
    assert cfg.guard.val_every == 0 and not cfg.guard.watchdog
    minutes, how = L.estimate_minutes(args, L.plan_runs(args, "/models/sft"))
    assert minutes > 0 and "measured" in how
    # eight times the rooms per iteration: about eight times an iteration's default cost
    big = L.parse_args(["--family", "sokoban", "--runs-dir", str(tmp_path / "big"), "env.tasks_per_iter=32"])
    more, _ = L.estimate_minutes(big, L.plan_runs(big, "/models/sft"))
    assert 5 * minutes < more < 8 * minutes


def test_the_estimate_counts_what_partial_runs_have_left_at_their_median_iteration_time(tmp_path):
    args = L.parse_args(["--family", "sokoban", "--estimators", "gigpo_mean_norm,grpo", "--seeds", "0"])
    args.runs_dir = tmp_path
    runs = L.plan_runs(args, "/models/sft")
    first = runs[0]["dir"]
    first.mkdir()
    # 4 of 10 iterations at 10 s, one of them across a suspended run; evals of 20 s
    its = [10.0, 10.0, 3000.0, 10.0]
    lines = [{"iteration": 0, "tag": "eval_before", "time/eval": 20.0, "eval/success": 0.5}]
    lines += [{"iteration": i + 1, "tag": "train", "time/iteration": t} for i, t in enumerate(its)]
    (first / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    minutes, how = L.estimate_minutes(args, runs)
    startup = L.DEFAULT_COST["sokoban"]["startup"]
    # run 1: 6 iterations and the eval after the last; run 2: all 10, the eval after, its share of the before
    want = (startup + 6 * 10 + 20) + (startup + 10 * 10 + (1 + 0.5) * 20)
    assert minutes == pytest.approx(want / 60 / args.jobs) and "medians of 1 run(s)" in how


def test_export_keeps_step_group_histograms_and_family_eval_metrics(tmp_path):
    run = tmp_path / "gigpo_mean_norm-s1"
    run.mkdir()
    lines = [
        {"iteration": 0, "tag": "eval_before", "eval/success": 0.25, "eval/deadlock_rate": 0.5},
        {
            "iteration": 1,
            "tag": "train",
            "time/iteration": 3.0,
            "rollout/deadlock_rate": 0.25,
            "step_groups/hist_1": 4,
            "step_groups/hist_9+": 2,
            "actor/pg_loss": 0.1,  # not exported
        },
        {
            "iteration": 1,
            "tag": "eval_final",
            "eval/success": 0.5,
            "eval/steps_over_optimal": 1.5,
            "eval/deadlock_rate": 0.125,
            "eval/optimal_rate": 0.5,
        },
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "out"
    (p,) = R.export_summaries(tmp_path, out, "sokoban", [run.name])
    s = json.loads(p.read_text())
    assert s["train"] == [
        {
            "iteration": 1,
            "rollout/deadlock_rate": 0.25,
            "time/iteration": 3.0,
            "step_groups/hist_1": 4,
            "step_groups/hist_9+": 2,
        }
    ]
    fin = R.final_eval(s)
    assert fin["eval/steps_over_optimal"] == 1.5 and fin["eval/deadlock_rate"] == 0.125 and fin["train_seconds"] == 3.0


HIST = ("1", "2", "3-4", "5-8", "9+")


def _summary(variant, seed, final, outcomes, hist):
    """A run summary as export_summaries writes it: 4 iterations, evals at 0, 2 and 4."""
    cfg = {
        "env.group_size": 8,
        "env.tasks_per_iter": 8,
        "env.max_steps": 15,
        "env.eval_tasks": 64,
        "train.iterations": 4,
        "train.lr": 5e-5,
        "rollout.eval_temperature": 0.4,
        "model.name_or_path": "/cache/sft-sokoban-0123",
        "algorithm.estimator": variant.split("_")[0],
    }
    train = []
    for it in range(1, 5):
        t = {"iteration": it, "rollout/success": 0.1 * it, "time/iteration": 30.0, "time/advantage": 0.01}
        if hist:  # large groups early, groups of the rollout count (5-8) late; seed 1 has 2 more singletons
            t |= {f"step_groups/hist_{b}": c for b, c in zip(HIST, [2 + 2 * seed, 0, 0, 2 * it, 8 - 2 * it])}
        train.append(t)
    evals = [
        {"iteration": 0, "tag": "eval_before", "train_seconds": 0.0, "eval/success": 0.25},
        {"iteration": 2, "tag": "eval", "train_seconds": 60.0, "eval/success": (0.25 + final) / 2},
        {"iteration": 4, "tag": "eval_final", "train_seconds": 120.0, "eval/success": final, **outcomes},
    ]
    return {
        "name": f"{variant}-s{seed}",
        "variant": variant,
        "seed": seed,
        "config": cfg,
        "evals": evals,
        "train": train,
    }


def _row(text, variant):
    line = next(ln for ln in text.splitlines() if ln.startswith(f"| {variant} | 2/2 |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_sokoban_section_has_outcome_columns_paired_differences_and_group_sizes(tmp_path):
    finals = {"gigpo_std_norm": (0.5, 0.75), "gigpo_mean_norm": (0.375, 0.5), "grpo": (0.25, 0.5), "rloo": (0.25, 0.25)}
    steps = {"gigpo_std_norm": (0.5, 1.5), "gigpo_mean_norm": (1.0, 2.0), "grpo": (2.0, 3.0), "rloo": (4.0, None)}
    finals["gigpo_eb_mean_norm"], steps["gigpo_eb_mean_norm"] = (0.5, 0.5), (1.0, 1.0)
    res = tmp_path / "out" / "results" / "sokoban"
    res.mkdir(parents=True)
    for v, fs in finals.items():
        for seed, f in enumerate(fs):
            outc = {"eval/deadlock_rate": 0.1 * (seed + 1), "eval/optimal_rate": 0.5}
            if steps[v][seed] is not None:  # rloo's seed 1 won nothing: no steps_over_optimal logged
                outc["eval/steps_over_optimal"] = steps[v][seed]
            s = _summary(v, seed, f, outc, hist=v.startswith("gigpo"))
            (res / f"{s['name']}.json").write_text(json.dumps(s))
    # --report-only rebuilds the section from the per-run JSON alone (no run dirs)
    assert (
        L.main(
            [
                "--family",
                "sokoban",
                "--report-only",
                "--out",
                str(tmp_path / "out"),
                "--runs-dir",
                str(tmp_path / "none"),
            ]
        )
        == 0
    )
    text = (tmp_path / "out" / "results.md").read_text()
    header = next(ln for ln in text.splitlines() if ln.startswith("| variant | seeds |"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert cols[7:10] == ["vs grpo", "steps over optimal", "deadlock rate"] and "final score" not in cols
    # paired by seed: gigpo_std_norm (0.5-0.25, 0.75-0.5) = +25, +25 points
    assert _row(text, "gigpo_std_norm")[7:10] == ["25.0 ± 0.0", "1.00 ± 0.71", "15.0 ± 7.1"]
    assert _row(text, "gigpo_mean_norm")[7] == R.fmt([0.125, 0.0]) == "6.2 ± 8.8"
    assert _row(text, "grpo")[7] == "-"
    assert _row(text, "rloo")[7:9] == ["-12.5 ± 17.7", "4.00 (1 of 2 seeds)"]
    # the third arm, against GRPO and against the GiGPO it changes (+12.5 and 0 points)
    assert _row(text, "gigpo_eb_mean_norm")[7] == R.fmt([0.25, 0.0])
    said = "gigpo_eb_mean_norm minus gigpo_mean_norm, final held-out success paired by seed"
    assert f"{said}: **{R.fmt([0.125, 0.0])} points**" in text
    # step-group sizes: GiGPO variants only, shares of groups averaged over the two seeds
    table = [ln for ln in text.splitlines() if ln.startswith("| gigpo_std_norm | ") and ln.count("|") == 9]
    assert len(table) == 4
    for it, ln in enumerate(table, start=1):
        cells = [c.strip() for c in ln.strip("|").split("|")]
        tot = [10 + 2 * s for s in (0, 1)]
        want = [
            sum(c / t for c, t in zip(cs, tot)) / 2 * 100
            for cs in zip(*[[2 + 2 * s, 0, 0, 2 * it, 8 - 2 * it] for s in (0, 1)])
        ]
        assert cells[1] == str(it) and float(cells[2]) == pytest.approx(11)
        assert [float(c) for c in cells[3:]] == pytest.approx(want, abs=0.5)
    assert not any(ln.startswith(("| grpo | 1 |", "| rloo | 1 |")) for ln in text.splitlines())
    png = res / "step_group_sizes.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "](results/sokoban/step_group_sizes.png)" in text
    assert not (res / "score_vs_iteration.png").exists()  # sokoban's score is its success


def _long_summary(variant, seed, iterations=40, tasks=8):
    """A Sokoban run summary of ``iterations`` iterations, evals every 10 with per-task outcomes; the
    numbers are arbitrary functions of (arm, seed, iteration) so that any mix-up shows."""
    arm = {"gigpo_mean_norm": 2, "grpo": 1, "gigpo_eb_mean_norm": 3}[variant]
    s = _summary(variant, seed, 0.5, {}, hist=variant.startswith("gigpo"))
    s["config"]["train.iterations"] = iterations
    train = []
    for it in range(1, iterations + 1):
        t = {"iteration": it, "rollout/success": ((it * arm + seed) % 7) / 8, "time/iteration": 30.0}
        if variant.startswith("gigpo"):
            t |= {f"step_groups/hist_{b}": c for b, c in zip(HIST, [it % 3, 1, 0, seed, 4])}
        train.append(t)
    s["train"] = train
    s["evals"] = []
    for it in range(0, iterations + 1, 10):
        won = "".join("1" if (k * arm + it // 10 + seed) % 3 else "0" for k in range(tasks))
        tag = "eval_before" if it == 0 else "eval_final" if it == iterations else "eval"
        s["evals"].append(
            {
                "iteration": it,
                "tag": tag,
                "train_seconds": 30.0 * it,
                "eval/success": won.count("1") / tasks,
                "eval/won_per_task": won,
                "eval/deadlock_rate": 0.1 * (seed + 1),
            }
        )
        if seed != 1:  # seed 1 won nothing at any eval: no steps over optimal logged
            s["evals"][-1]["eval/steps_over_optimal"] = 0.5 * seed + it / 100
    return s


def _table(text, header_start, whole=False):
    """(header cells, row cells) of the first table whose header starts with ``header_start`` (is it,
    with ``whole``: another table's header may start with this one's)."""
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if (ln == header_start if whole else ln.startswith(header_start)))
    rows = []
    for ln in lines[i + 2 :]:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip("|").split("|")])
    return [c.strip() for c in lines[i].strip("|").split("|")], rows


def test_a_long_comparison_reports_every_eval_training_windows_and_per_task_paired_errors(tmp_path):
    res = tmp_path / "results" / "sokoban"
    res.mkdir(parents=True)
    arms = ("gigpo_mean_norm", "grpo", "gigpo_eb_mean_norm")
    runs = {(v, seed): _long_summary(v, seed) for v in arms for seed in (0, 1)}
    # an unfinished third seed: counted at the evals it reached, and in brackets there
    runs[("gigpo_mean_norm", 2)] = _long_summary("gigpo_mean_norm", 2)
    runs[("gigpo_mean_norm", 2)]["evals"] = runs[("gigpo_mean_norm", 2)]["evals"][:2]
    for s in runs.values():
        (res / f"{s['name']}.json").write_text(json.dumps(s))
    text = R.write_report(tmp_path, "sokoban").read_text()

    def succ(v, seed, it):
        return next(e["eval/success"] for e in runs[(v, seed)]["evals"] if e["iteration"] == it)

    header, rows = _table(text, "| iteration | gigpo_eb_mean_norm |")
    assert header == [
        "iteration",
        "gigpo_eb_mean_norm",
        "gigpo_mean_norm",
        "grpo",
        "gigpo_mean_norm minus grpo",
        "gigpo_eb_mean_norm minus grpo",
        "gigpo_eb_mean_norm minus gigpo_mean_norm",
    ]
    assert [r[0] for r in rows] == ["0", "10", "20", "30", "40"]
    for r in rows:
        it = int(r[0])
        seeds = (0, 1, 2) if it <= 10 else (0, 1)
        want = sum(succ("gigpo_mean_norm", s, it) for s in seeds) / len(seeds) * 100
        assert r[2] == f"{want:.1f}" + ("" if it <= 10 else " (2)")
        assert r[3] == f"{(succ('grpo', 0, it) + succ('grpo', 1, it)) / 2 * 100:.1f}"
        assert r[4] == R.fmt([succ("gigpo_mean_norm", s, it) - succ("grpo", s, it) for s in (0, 1)])
        assert r[6] == R.fmt([succ("gigpo_eb_mean_norm", s, it) - succ("gigpo_mean_norm", s, it) for s in (0, 1)])

    # deadlock rate / steps over optimal at each eval, means over the seeds that logged them
    _, rows = _table(text, "| iteration | gigpo_eb_mean_norm | gigpo_mean_norm | grpo |", whole=True)
    assert [r[0] for r in rows] == ["0", "10", "20", "30", "40"]
    assert rows[1][2] == f"{(0.1 + 1.1) / 2:.2f} / {(10 + 20 + 30) / 3:.1f}"  # seeds 0 and 2; 1 has no win
    assert rows[2][2] == rows[2][3] == "0.20 / 15.0"  # seed 2 stopped at iteration 10

    def train(v, seed, a, b):
        return [t["rollout/success"] for t in runs[(v, seed)]["train"] if a <= t["iteration"] <= b]

    header, rows = _table(text, "| iterations | gigpo_eb_mean_norm |")
    assert [r[0] for r in rows] == ["1-10", "11-20", "21-30", "31-40"]
    for r, (a, b) in zip(rows, [(1, 10), (11, 20), (21, 30), (31, 40)]):
        means = [sum(train("grpo", s, a, b)) / 10 for s in (0, 1)]
        assert r[3] == f"{sum(means) / 2 * 100:.1f}"
        # seed 2 of gigpo_mean_norm has no GRPO twin: not in the paired difference
        diffs = [(sum(train("gigpo_mean_norm", s, a, b)) - sum(train("grpo", s, a, b))) / 10 for s in (0, 1)]
        assert r[4] == R.fmt(diffs)

    # step-group sizes: one row a window, the window's mean shares
    _, rows = _table(text, "| variant | iterations | groups |")
    g = [r for r in rows if r[0] == "gigpo_mean_norm"]
    assert [r[1] for r in g] == ["1-10", "11-20", "21-30", "31-40"]
    shares = [[c / sum(cs) for c in cs] for cs in ([it % 3, 1, 0, s, 4] for it in range(31, 41) for s in (0, 1))]
    assert float(g[3][3]) == pytest.approx(sum(x[0] for x in shares) / len(shares) * 100, abs=0.5)

    # the final paired difference with each seed's standard error over the tasks' paired outcomes
    won = {(v, s): runs[(v, s)]["evals"][-1]["eval/won_per_task"] for v in arms for s in (0, 1)}
    d = [[int(x) - int(y) for x, y in zip(won[("gigpo_mean_norm", s)], won[("grpo", s)])] for s in (0, 1)]
    m = [sum(x) / len(x) for x in d]
    se = [(sum((y - mm) ** 2 for y in x) / (len(x) - 1)) ** 0.5 / len(x) ** 0.5 for x, mm in zip(d, m)]
    line = next(ln for ln in text.splitlines() if ln.startswith("- gigpo_mean_norm minus grpo"))
    assert f"s0 {m[0] * 100:+.1f} ± {se[0] * 100:.1f}, s1 {m[1] * 100:+.1f} ± {se[1] * 100:.1f})." in line


@pytest.mark.parametrize("family", ["alfworld", "webshop"])
def test_sections_without_those_metrics_rebuild_exactly_as_committed(family, tmp_path):
    committed = ROOT / "research" / "results" / family
    res = tmp_path / "results" / family
    res.mkdir(parents=True)
    for p in committed.glob("*.json"):
        (res / p.name).write_text(p.read_text())
    R.write_report(tmp_path, family)
    pat = re.escape(R.BEGIN.format(family)) + ".*?" + re.escape(R.END.format(family))
    want = re.search(pat, (ROOT / "research" / "results.md").read_text(), re.S).group(0)
    assert re.search(pat, (tmp_path / "results.md").read_text(), re.S).group(0) == want
    assert not (res / "step_group_sizes.png").exists()


def test_graphgpo_variant_is_opt_in_and_a_valid_run_on_every_family(tmp_path):
    from gigpo.train.config import load_config

    assert "graphgpo" not in L.parse_args([]).estimators
    for family in L.FULL:
        args = L.parse_args(
            ["--family", family, "--runs-dir", str(tmp_path), "--seeds", "0", "--estimators", "grpo,graphgpo"]
        )
        runs = {r["variant"]: r for r in L.plan_runs(args, "/models/sft")}
        base, graph = _by_key(runs["grpo"]["overrides"]), _by_key(runs["graphgpo"]["overrides"])
        assert {k for k in base.keys() | graph.keys() if base.get(k) != graph.get(k)} <= {
            "algorithm.estimator",
            "name",
            "log.eval_before",
        }
        cfg = load_config(args.config, runs["graphgpo"]["overrides"])
        assert cfg.algorithm.estimator == "graphgpo" and cfg.algorithm.mode == "mean_std_norm"
