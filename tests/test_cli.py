"""The command line: help for each command, config errors reported with the key."""

import subprocess
import sys

import pytest

from gigpo.cli import main


@pytest.mark.parametrize("cmd", ["train", "eval", "sft", "serve"])
def test_each_command_has_help_listing_config_keys(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        main([cmd, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert f"gigpo {cmd}" in out and "algorithm.estimator" in out and "train.kl_coef" in out


def test_top_level_help(capsys):
    assert main(["--help"]) == 0
    assert "train" in capsys.readouterr().out


def test_no_arguments_prints_usage_and_exits_2(capsys):
    assert main([]) == 2
    assert "usage: gigpo" in capsys.readouterr().err


def test_unknown_command_suggests(capsys):
    assert main(["trian"]) == 2
    assert "Did you mean 'train'" in capsys.readouterr().err


def test_bad_override_exits_with_key_and_suggestion(capsys):
    assert main(["train", "train.lrr=1"]) == 2
    assert "train.lr" in capsys.readouterr().err


def test_resume_without_run_dir_is_clear(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert "no config.yaml" in capsys.readouterr().err


def test_console_entry_point_runs():
    r = subprocess.run([sys.executable, "-m", "gigpo.cli", "sft", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "sft.episodes" in r.stdout


def test_broken_yaml_and_non_finite_lr_are_one_line_with_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: {lr: [1e-5\n")
    assert main(["train", "--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gigpo: config file is not valid YAML") and "\n" not in err
    assert main(["train", "train.lr=.inf"]) == 2
    assert capsys.readouterr().err.strip() == "gigpo: config error: train.lr: must be a finite number, got inf"


def test_train_refuses_a_prompting_agent(capsys):
    assert main(["train", "agent.mode=reflexion"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gigpo: config error: agent.mode: 'reflexion' is a prompting baseline for `gigpo eval` only")


def test_train_help_is_in_sections_within_100_columns(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    for header in ("top: ", "env: ", "algorithm: ", "rollout.server: ", "train: ", "log: "):
        assert any(line.startswith(header) for line in out.splitlines()), header
    assert "--help-section" in out and "--print-config" in out


def test_help_section_shows_one_section(capsys):
    assert main(["train", "--help-section", "env"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("env: ") and "env.group_size (int, default 8, [1, 1024])" in out and "train.lr" not in out
    from gigpo.envs.builtin import BUILTIN

    family_help = out.split("env.family (")[1].split("\n  env.family_module (")[0]
    assert all(spec.name in family_help for spec in BUILTIN), family_help  # every built-in is named
    assert "gigpo list families" in " ".join(family_help.split())
    assert main(["eval", "--help-section", "lg"]) == 2
    assert "no config section 'lg'" in capsys.readouterr().err


def test_print_config_round_trips_through_load_config(tmp_path, capsys):
    from gigpo.train.config import load_config

    args = ["--config", "configs/sokoban_tiny.yaml", "train.lr=3e-4", "env.group_size=4"]
    assert main(["train", "--print-config", *args]) == 0
    out = capsys.readouterr().out
    (tmp_path / "printed.yaml").write_text(out)
    assert load_config(tmp_path / "printed.yaml") == load_config(args[1], args[2:])


def test_version_prints_the_package_version(capsys):
    from gigpo import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"gigpo {__version__}"


def test_a_config_path_that_is_a_directory_is_one_line_with_exit_2(tmp_path, capsys):
    assert main(["train", "--config", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gigpo: config error: config file") and "is a directory" in err and "\n" not in err


def test_save_every_zero_is_refused_before_training(tmp_path, capsys):
    assert main(["train", "log.save_every=0", f"output_dir={tmp_path}"]) == 2
    assert capsys.readouterr().err.strip() == "gigpo: config error: log.save_every: must be >= 1, got 0"
    assert not any(tmp_path.iterdir())
