"""research/run_diagnosis.py on a planted trajectory file: put-backs and held-state aliasing."""

import json

from benchmark_scripts import load

diag = load("run_diagnosis.py", "bench_run_diagnosis")


def _row(traj, step, action, obs, group, a=0.5, won=False):
    return {
        "episode_id": 0,
        "traj_id": traj,
        "step": step,
        "action": action,
        "observation": obs,
        "step_group": group,
        "A": a,
        "won": won,
    }


def test_put_backs_and_groups_mixing_held_states_are_counted(tmp_path):
    rows = [  # trajectory 0 takes the apple and puts it straight back, then arrives at drawer 1 holding nothing
        _row(0, 0, "take apple 1 from table 1", "You pick up the apple 1 from the table 1.", 0),
        _row(0, 1, "move apple 1 to table 1", "You move the apple 1 to the table 1.", 1),
        _row(0, 2, "go to drawer 1", "You arrive at drawer 1. The drawer 1 is closed.", 2),
        _row(0, 3, "open drawer 1", "You open the drawer 1.", 3, a=0.0),
        # trajectory 1 reaches the same text holding the apple: its step there joins group 3
        _row(1, 0, "take apple 1 from table 1", "You pick up the apple 1 from the table 1.", 0, won=True),
        _row(1, 1, "go to drawer 1", "You arrive at drawer 1. The drawer 1 is closed.", 4, won=True),
        _row(1, 2, "open drawer 1", "You open the drawer 1.", 3, a=0.0, won=True),
    ]
    s = diag.iteration_stats(rows)
    assert s["put_backs"] == 1 and s["success"] == 0.5
    assert s["take_move"] == 3 / 7 and s["zero_adv"] == 2 / 7
    # groups of size > 1: {0: both not holding}, {3: one not holding, one holding} -> 2 of 4 rows mix
    assert s["mixed_holding"] == 0.5
    (tmp_path / "trajectories").mkdir()
    (tmp_path / "trajectories" / "iter_000003.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert diag.main([str(tmp_path)]) == 0
    assert diag.main([str(tmp_path / "nothing")]) == 2
