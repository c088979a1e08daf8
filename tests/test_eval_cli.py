"""``gigpo eval`` cannot mislead: it runs ``gigpo train``'s preflight, refuses to report a score
when every episode faulted, and ``gigpo eval RUN_DIR`` scores the run's delivered model (not its
start model, not a fresh SFT), names it, and writes the results to a file."""

from __future__ import annotations

import json

import pytest
import yaml

from gigpo.cli import main
from small_runs import CONFIGS, SEARCH_TINY, SMALL


def _gigpo_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("gigpo: ")]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished one-iteration search_tiny run whose config.yaml, like a real tiny run's, says
    ``model.name_or_path: tiny`` with ``sft.enabled: true``."""
    parent = tmp_path_factory.mktemp("runs")
    args = ["train", "--config", str(SEARCH_TINY), *SMALL, "train.iterations=1", "guard.val_every=0"]
    assert main([*args, f"output_dir={parent}", "name=r"]) == 0
    run = parent / "r"
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["model"]["name_or_path"] == "tiny" and (run / "model" / "config.json").is_file()
    cfg["sft"]["enabled"] = True  # what the run started from; eval must not redo it nor score "tiny"
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return run


@pytest.fixture
def loads(monkeypatch):
    """The model paths ``load_policy`` is called with; SFT must not run at all."""
    import gigpo.policy.load as load
    import gigpo.train.sft as sft

    seen: list[str] = []
    real = load.load_policy

    def spy(path, *a, **kw):
        seen.append(str(path))
        return real(path, *a, **kw)

    def no_sft(*a, **kw):
        raise AssertionError("gigpo eval ran SFT")

    monkeypatch.setattr(load, "load_policy", spy)
    monkeypatch.setattr(sft, "ensure_sft_model", no_sft)
    monkeypatch.setattr(sft, "build_sft_dir", no_sft)
    return seen


def test_eval_rejects_an_env_kwarg_typo_as_train_does(capsys):
    """A typo in env.kwargs used to score 0.0 with failed_rate 1.0 and exit 0."""
    args = ["--config", str(CONFIGS / "sokoban_tiny.yaml"), "env.kwargs.grid_styl=annotated", "env.eval_tasks=1"]
    assert main(["eval", *args]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = _gigpo_lines(err)
    assert line.startswith("gigpo: config error: env.kwargs:") and "grid_styl" in line and "Traceback" not in err
    assert "scoring" not in err  # the refusal is the first thing said


def test_eval_refuses_more_tasks_than_the_split_before_announcing_a_score(capsys, tmp_path):
    out_file = tmp_path / "res" / "e.json"
    # search's eval split is a fixed list: the check counts it at once (Sokoban would generate rooms
    # until its split ran dry, minutes for 100000)
    args = ["--config", str(SEARCH_TINY), "env.eval_tasks=100000", "--out", str(out_file)]
    assert main(["eval", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gigpo: config error: env.eval_tasks: 100000 eval tasks asked for"), err
    assert "set env.eval_tasks <=" in err
    assert not out_file.parent.exists()  # nothing made before everything is checked


def test_eval_exits_1_when_every_episode_faulted(monkeypatch, capsys):
    """An env that resets (so the preflight passes) but faults on every step: no score is printed."""
    from gigpo.envs.search.env import SearchEnv

    def broken(self, action):
        raise RuntimeError("index went away")

    monkeypatch.setattr(SearchEnv, "step", broken)
    assert main(["eval", "--config", str(SEARCH_TINY), *SMALL, "env.eval_tasks=2"]) == 1
    out, err = capsys.readouterr()
    assert out == ""  # no metrics JSON that reads as a real 0.0
    (line,) = _gigpo_lines(err)
    assert "every one of the 2 eval episodes ended in an env fault" in line


def test_eval_run_dir_scores_the_delivered_model_and_writes_results(run_dir, loads, capsys):
    assert main(["eval", str(run_dir), "env.eval_tasks=1"]) == 0  # key=value overrides still apply
    out, err = capsys.readouterr()
    m = json.loads(out)
    assert m["num_trajectories"] == 1
    model = str(run_dir / "model")
    assert loads == [model]  # the delivered model, neither "tiny" nor an SFT model
    assert f"gigpo eval: scoring {model} (the delivered model of {run_dir})" in err
    assert "warning" not in err
    (res,) = sorted((run_dir / "eval").glob("*.json"))
    rec = json.loads(res.read_text())
    assert rec["model"] == model and rec["run_dir"] == str(run_dir) and rec["metrics"] == m
    assert rec["resolved_config"]["model"]["name_or_path"] == model
    assert "env.eval_tasks=1" in rec["overrides"]
    assert f"results written to {res}" in err

    # a second evaluation adds a file, never overwrites; --tag and --out name it
    assert main(["eval", str(run_dir), "env.eval_tasks=1", "--tag", "t1"]) == 0
    assert json.loads((run_dir / "eval" / "t1.json").read_text())["model"] == model
    out_file = run_dir.parent / "elsewhere" / "x.json"
    assert main(["eval", str(run_dir), "env.eval_tasks=1", "--out", str(out_file)]) == 0
    assert json.loads(out_file.read_text())["model"] == model
    assert len(list((run_dir / "eval").glob("*.json"))) == 2
    capsys.readouterr()


def test_eval_config_of_a_run_names_the_untrained_model_and_warns(run_dir, loads, capsys):
    """``--config RUN_DIR/config.yaml`` without a model override scores the start model: said so."""
    assert main(["eval", "--config", str(run_dir / "config.yaml"), "env.eval_tasks=1"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["num_trajectories"] == 1 and loads == ["tiny"]
    assert "gigpo eval: scoring tiny (model.name_or_path of" in err
    assert "sft.enabled=true, but gigpo eval does not run SFT" in err and "untrained start model 'tiny'" in err
    assert not _gigpo_lines(err)


def test_eval_run_dir_errors_are_one_line(run_dir, tmp_path, capsys):
    """Each before anything is evaluated: an --out that cannot be written costs no evaluation."""
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "config.yaml").write_text((run_dir / "config.yaml").read_text())
    cases = [
        (["eval", str(unfinished)], f"has no delivered model ({unfinished / 'model'} does not exist"),
        (["eval", str(tmp_path / "nope")], "is not a run directory (no config.yaml there)"),
        (["eval", str(run_dir), "--config", str(SEARCH_TINY)], "give either RUN_DIR"),
        (["eval", "--config", str(SEARCH_TINY), "--tag", "x"], "--tag names a results file in RUN_DIR/eval/"),
        (["eval", str(run_dir), "--tag", "../x"], "give a plain name"),
        (["eval", str(run_dir), "--out", str(a_file / "x.json")], "cannot write the results under"),
        (["eval", str(run_dir), "--out", str(tmp_path)], "is a directory; give a file name"),
    ]
    for argv, msg in cases:
        assert main(argv) == 2, argv
        out, err = capsys.readouterr()
        (line,) = _gigpo_lines(err)
        assert msg in line and out == "", (argv, err)


def test_eval_samples_what_the_runs_held_out_eval_sampled(run_dir):
    """gigpo eval and the trainer's held-out eval (``Evaluator.heldout``, the run's final score)
    draw the same tokens for the same model, tasks and config: a run's model scores the same in
    both, so ``gigpo eval RUN_DIR`` reproduces the run's eval_final."""
    from gigpo.policy.generate import HFGenerator
    from gigpo.policy.load import load_policy
    from gigpo.train.config import load_config
    from gigpo.train.evaluate import evaluate_model
    from gigpo.train.evaluator import Evaluator
    from gigpo.train.factories import build_agent, grouped_envs, load_kwargs, task_pools

    cfg = load_config(run_dir / "config.yaml", [f"model.name_or_path={run_dir / 'model'}", "sft.enabled=false"])
    drawn: dict[str, list] = {"train": [], "eval": []}

    def recording(key):
        class Recording(HFGenerator):
            def generate(self, prompts, params, constraints=None):
                out = super().generate(prompts, params, constraints)
                drawn[key] += [g.token_ids.tolist() for g in out]
                return out

        return Recording

    model, tok = load_policy(cfg.model.name_or_path, **load_kwargs(cfg))
    gen = recording("train")(model, tok)
    with grouped_envs(cfg.env, 1) as envs:
        m = Evaluator(cfg, envs, build_agent(cfg, tok), tok, lambda: gen).heldout(task_pools(cfg)[1])
    got = evaluate_model(cfg, make_generator=recording("eval"))
    assert drawn["eval"] and drawn["eval"] == drawn["train"]
    assert got == {k.removeprefix("eval/"): v for k, v in m.items() if k != "time/eval"}
