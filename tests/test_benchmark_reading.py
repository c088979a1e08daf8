"""benchmarks/reading.py: the reading metrics count the right decisions against each step's chance."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "reading.py"


def _load():
    spec = importlib.util.spec_from_file_location("reading_bench", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


R = _load()


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
