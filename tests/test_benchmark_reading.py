"""benchmarks/reading.py: the reading metrics count the right decisions against each step's chance."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from benchmark_scripts import load

R = load("reading.py", "reading_bench")


@pytest.fixture(scope="module")
def tok():
    from gigpo.policy import load_policy

    return load_policy("tiny")[1]


def _prompt(tok, adm):
    text = "Your task is to: put some mug on desk.\nAdmissible actions now:\n" + "\n".join(f"'{a}'" for a in adm)
    return tok(text)["input_ids"]


def test_decisions_score_task_words_against_the_steps_own_chance(tok):
    rows = [  # (admissible, action, observation after it), one episode
        (["take mug 1 from desk 1", "take pen 2 from desk 1", "look"], "take mug 1 from desk 1",
         "You pick up the mug 1 from the desk 1."),
        (["go to desk 1", "go to bed 1", "go to shelf 2", "go to shelf 1"], "go to bed 1", "You arrive at bed 1."),
        (["go to desk 1", "go to bed 1"], "go to desk 1", "You arrive at desk 1."),  # not after a pick-up
        (["take pen 2 from desk 1", "take book 1 from desk 1"], "take pen 2 from desk 1", "..."),  # mug not there
    ]
    batch = SimpleNamespace(num_rows=len(rows), prompt_ids=[_prompt(tok, a) for a, _, _ in rows],
                            action=np.array([r[1] for r in rows]), observation=np.array([r[2] for r in rows]),
                            episode_id=np.zeros(len(rows), dtype=int))
    d = R.decisions(batch, tok)
    assert d["take the task's object"] == [(True, 0.5)]
    assert d["go to its receptacle after pick-up"] == [(False, 1 / 3)]  # desk, bed, shelf: 3 types


@pytest.mark.slow
def test_reading_probe_runs_end_to_end_on_tiny(capsys):
    R.main(["--model", "tiny", "--tasks", "2", "--max-steps", "3"])
    out = capsys.readouterr().out
    assert "2 held-out tasks, success" in out and "take the task's object" in out


def _load_probe():
    return load("reading_probe.py", "reading_probe_bench")


def test_probe_states_are_consistent_and_need_the_task():
    import random

    from gigpo.agent.relabel import task_words

    P = _load_probe()
    rng = random.Random(0)
    for _ in range(200):
        s = P.reading_state(rng)
        m = task_words(s.task)
        assert s.action in s.admissible and len(set(s.admissible)) == len(s.admissible)
        if s.kind == "take":
            takes = [a for a in s.admissible if a.startswith("take ")]
            assert s.action.split()[1] == m.group("obj") and len(takes) >= 2  # a real choice
            assert all(a.split()[1] in s.observation for a in takes)
        else:
            types = {a.split()[2] for a in s.admissible if a.startswith("go to ")}
            assert s.action.split()[2] == m.group("rec") and len(types) >= 2
            assert s.observation.startswith("You pick up the " + m.group("obj"))
        # the history ends with the action that led to the current observation
        assert s.history[-1][1].startswith(("go to ", "take "))


def test_probe_runs_and_prints_accuracy(capsys, tmp_path):
    P = _load_probe()
    P.main(["--steps", "2", "--eval-rows", "3", "--eval-every", "1", "--format", "short",
            "--save", str(tmp_path / "m")])
    out = capsys.readouterr().out
    assert "format short" in out and out.count("take ") >= 3 and "step 2: loss" in out
    assert (tmp_path / "m" / "config.json").exists()
