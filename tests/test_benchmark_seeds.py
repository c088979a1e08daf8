"""research/seeds.py: seed lists, resume detection and the table it prints."""

import json

from benchmark_scripts import load

seeds = load("seeds.py", "bench_seeds")


def test_parse_seeds_ranges_and_lists():
    assert seeds.parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert seeds.parse_seeds("0,2,5-6") == [0, 2, 5, 6]


def test_default_jobs_is_one_more_than_the_cores_and_at_most_the_seeds():
    assert seeds.default_jobs(5, 2) == 3 and seeds.default_jobs(5, 16) == 5 and seeds.default_jobs(1, 2) == 1


def test_a_partial_run_is_resumed_and_a_new_one_started_with_one_thread(tmp_path):
    args = seeds.parse_args(["--out", str(tmp_path), "train.iterations=2"])
    cmd = seeds.command(args, 3, 1)
    assert "seed=3" in cmd and "train.torch_threads=1" in cmd and cmd[-1] == "train.iterations=2"
    (tmp_path / "s3" / "checkpoints").mkdir(parents=True)
    (tmp_path / "s3" / "checkpoints" / "latest").write_text("iter_000001")
    assert seeds.command(args, 3, 1)[-2:] == ["--resume", str(tmp_path / "s3")]


def test_finished_seeds_are_read_from_their_summary_and_tabulated(tmp_path):
    args = seeds.parse_args(["--out", str(tmp_path)])
    for seed, (before, final, last) in enumerate([(0.40, 0.55, 0.50), (0.50, 0.45, 0.10)]):
        (tmp_path / f"s{seed}").mkdir()
        (tmp_path / f"s{seed}" / "summary.json").write_text(
            json.dumps(
                {
                    "success_before": before,
                    "success_final": final,
                    "success_last": last,
                    "models": {"model": 15, "model_last": 20},
                    "iterations": 20,
                    "rollbacks": seed,
                    "stop_reason": None,
                    "best_val_success": 0.6,
                    "phases": {"sft": 300, "train": 600},
                    "start_model_sha256": "ab" * 32,
                }
            )
        )
    (tmp_path / "s0" / "metrics.jsonl").write_text(
        "".join(json.dumps({"iteration": i, "system/rss_gb": g}) + "\n" for i, g in enumerate([2.5, 3.25, 3.0]))
    )
    rows = [seeds.run_seed(args, s, None) for s in (0, 1)]
    assert rows[1]["last"] == 0.10 and rows[0]["minutes"] == 15
    assert rows[0]["peak_rss_gb"] == 3.25 and rows[1]["peak_rss_gb"] == 0.0
    text = seeds.table(rows)
    assert "| 0 | 40.0 | 55.0 | 50.0 | +15.0 | iteration 15 of 20 | 0 | 15 | 3.2 |" in text
    assert "mean +5.0" in text and "1 ended below their start" in text and "min -40.0" in text
