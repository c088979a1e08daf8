"""Tests for gigpo.envs.sokoban: moves and pushes, rewards, invalid actions, deadlocks, the BFS
solver and expert, the generated task sets (solvable, not pre-solved, connected, disjoint,
deterministic), and the family's rollout metrics through the real rollout loop."""

from __future__ import annotations

import dataclasses

import numpy as np
from chatml_tokenizer import chatml_bpe
import pytest

from gigpo.envs import FAMILIES, Task, make_env, make_tasks
from gigpo.envs.sokoban import (
    ACTIONS,
    INVALID_ACTION_MESSAGE,
    SokobanEnv,
    SolverError,
    generate_level,
    is_corner_deadlock,
    layout_split,
    parse_action,
    parse_level,
    solve,
)


def _task(*rows: str, task_id: str = "hand") -> Task:
    return Task("sokoban", task_id, "train", "hand", {"room": list(rows)})


@pytest.fixture()
def env() -> SokobanEnv:
    return make_env("sokoban", grid_style="compact")  # hand-made rooms read best one char a cell


@pytest.fixture(scope="module")
def tasks_1box():
    return {s: make_tasks("sokoban", s, n=n) for s, n in (("train", 100), ("eval", 50))}


@pytest.fixture(scope="module")
def tasks_2box():
    return {s: make_tasks("sokoban", s, n=n, num_boxes=2) for s, n in (("train", 100), ("eval", 50))}


def _bfs_reach(level, start: int, blocked=frozenset()) -> set[int]:
    seen, todo = {start}, [start]
    while todo:
        c = todo.pop()
        for a in ACTIONS:
            n = c + level.delta(a)
            if n in level.floor and n not in blocked and n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


# ---- moves, pushes, rewards ------------------------------------------------------------------


def test_registered():
    assert FAMILIES["sokoban"] == "gigpo.envs.sokoban"
    assert make_env("sokoban").family == "sokoban"


def test_default_grid_is_verl_agents_text(tasks_1box):
    env = make_env("sokoban")
    rows = tasks_1box["train"][0].data["room"]
    obs, info = env.reset(tasks_1box["train"][0])
    assert obs == "\n".join("".join(f" {ch} \t" for ch in row) for row in rows) == info["anchor"]
    assert obs.split("\n")[0] == " # \t" * 6
    obs, _, _, info = env.step("nonsense")
    assert obs.endswith(info["anchor"]) and info["invalid_action"]
    with pytest.raises(ValueError, match="grid_style"):
        make_env("sokoban", grid_style="fancy")


def test_annotated_grid_names_the_neighbours_and_offsets_of_player_and_box():
    env = make_env("sokoban", grid_style="annotated")
    obs, info = env.reset(_task("######", "#P_X_#", "#__O_#", "#____#", "######"))
    lines = obs.split("\n")
    assert lines[1] == " # \t P \t _ \t X \t _ \t # \t" and len(lines) == 7 and obs == info["anchor"]
    assert lines[5] == "player: row 1 col 1; up wall, down floor, left wall, right floor"
    assert lines[6] == (
        "box: row 1 col 3, same row, 2 right of you; up wall, down target, left floor, right floor; "
        "nearest target 1 down, same column"
    )
    obs, *_ = env.step("down")
    assert obs.split("\n")[5] == "player: row 2 col 1; up floor, down floor, left wall, right floor"
    assert obs.split("\n")[6].startswith("box: row 1 col 3, 1 up, 2 right of you;")
    for a in ("up", "right"):
        obs, *_ = env.step(a)
    box = obs.split("\n")[6]
    assert box.startswith("box: row 1 col 3, same row, 1 right of you; up wall, down target, left player")
    obs, _, done, info = env.step("right")  # the box into the top-right corner
    assert not done and obs.endswith("nearest target 1 down, 1 left") and info["deadlock"]


def test_walk_and_push_moves_the_box(env):
    obs, info = env.reset(_task("######", "#P_X_#", "#___O#", "######"))
    assert obs == "######\n#P_X_#\n#___O#\n######" == info["anchor"]
    obs, r, done, info = env.step("right")  # walk
    assert obs.split("\n")[1] == "#_PX_#" and r == pytest.approx(-0.1) and not done
    obs, r, done, info = env.step("right")  # push
    assert obs.split("\n")[1] == "#__PX#" and r == pytest.approx(-0.1) and not info["invalid_action"]


def test_wall_blocks_player_and_box(env):
    env.reset(_task("#####", "#PX_#", "#_O_#", "#####"))
    before = env.render()
    obs, r, done, info = env.step("up")  # wall above the player
    assert obs == before and r == pytest.approx(-0.1) and not info["invalid_action"]
    obs, r, _, info = env.step("right")  # push the box against the east wall
    assert obs.split("\n")[1] == "#_PX#" and r == pytest.approx(-0.1)
    obs2, r, _, info = env.step("right")  # the wall behind the box blocks the push
    assert obs2 == obs and r == pytest.approx(-0.1) and not info["invalid_action"] and info["steps"] == 3


def test_second_box_blocks(env):
    env.reset(_task("#######", "#PXX__#", "#__OO_#", "#######"))
    before = env.render()
    obs, r, _, info = env.step("right")
    assert obs == before and r == pytest.approx(-0.1) and not info["invalid_action"]


def test_push_onto_and_off_target(env):
    env.reset(_task("#######", "#PXO__#", "#_____#", "#__XO_#", "#######"))
    obs, r, done, info = env.step("right")
    assert obs.split("\n")[1] == "#_P√__#" and r == pytest.approx(0.9) and not done
    assert info["boxes_on_target"] == 1
    obs, r, done, info = env.step("right")  # push it off again
    assert obs.split("\n")[1] == "#__SX_#" and r == pytest.approx(-1.1) and not done
    assert info["boxes_on_target"] == 0


def test_solving_ends_the_episode(env):
    env.reset(_task("######", "#PXO_#", "######"))
    obs, r, done, info = env.step("right")
    assert done and info["won"] and info["score"] == 1.0
    assert r == pytest.approx(-0.1 + 1 + 10)
    assert obs == "######\n#_P√_#\n######"
    # stepping a finished episode changes nothing and pays nothing
    obs2, r2, done2, info2 = env.step("left")
    assert (obs2, r2, done2, info2["won"]) == (obs, 0.0, True, True)


def test_step_penalty_option():
    env = make_env("sokoban", grid_style="compact", step_penalty=0.0)
    env.reset(_task("######", "#P_XO#", "######"))
    assert env.step("up")[1] == 0.0  # a wall bump
    assert env.step("jump")[1] == 0.0  # an invalid action
    obs, r, done, info = env.step("right")
    assert (r, done, info["won"]) == (0.0, False, False)
    obs, r, done, info = env.step("right")
    assert done and r == pytest.approx(1 + 10)
    for bad in (0.1, "0", True, None):
        with pytest.raises(ValueError, match="step_penalty must be a number <= 0"):
            make_env("sokoban", step_penalty=bad)


def _lost_episodes(step_penalty: float):
    """Two lost 3-step episodes of one room that sit in the start grid at steps 0, 1, 2 (A: wall
    bumps) and 0, 2 (B: down and back up): rewards, trajectory ids, steps and grids per row."""
    env = make_env("sokoban", grid_style="compact", step_penalty=step_penalty)
    rows = []
    for traj, moves in enumerate((["up", "up", "up"], ["down", "up", "up"])):
        grid, _ = env.reset(_task("######", "#P_X_#", "#___O#", "######"))
        for t, move in enumerate(moves):
            nxt, r, _, _ = env.step(move)
            rows.append((r, traj, t, grid))
            grid = nxt
    return [np.array(c) for c in zip(*rows)]


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_step_penalty_makes_gigpo_credit_late_visits_of_lost_episodes(mode):
    """With a per-step penalty and a step budget, a lost episode's return from a state grows with
    the step it is reached at, and GiGPO's step groups (the state alone) turn that into credit
    for the later visits; without the penalty lost episodes' returns tie at 0."""
    from gigpo.advantages import compute_advantages, discounted_returns, episode_scores

    for penalty in (-0.1, 0.0):
        reward, traj, step, grid = _lost_episodes(penalty)
        res = compute_advantages(
            "gigpo",
            scores=episode_scores(reward, traj),
            step_returns=discounted_returns(reward, traj, 0.95),
            episode_ids=np.zeros(len(reward), int),
            traj_ids=traj,
            anchors=grid,
            mode=mode,
        )
        start = grid == grid[0]
        assert start.sum() == 5  # A at 0, 1, 2; B at 0, 2
        adv = res.step_advantages[start]
        if penalty:
            order = np.argsort(step[start], kind="stable")
            assert np.all(np.diff(adv[order]) >= 0) and adv[order][-1] > 0 > adv[order][0]
        else:
            assert np.all(res.step_advantages == 0) and np.all(res.advantages == 0)


def test_player_on_target_renders_S(env):
    obs, _ = env.reset(_task("#######", "#_SX__#", "#######"))
    assert obs.split("\n")[1] == "#_SX__#"
    obs, _, _, _ = env.step("left")
    assert obs.split("\n")[1] == "#POX__#"


def test_info_keys(env, tasks_1box):
    task = tasks_1box["train"][0]
    obs, info = env.reset(task)
    for key in (
        "won",
        "score",
        "anchor",
        "instruction",
        "task_type",
        "admissible_actions",
        "deadlock",
        "deadlocked",
        "optimal_steps",
        "invalid_action",
    ):
        assert key in info
    assert info["admissible_actions"] == ["up", "down", "left", "right"]
    assert info["task_type"] == "6x6-1box" and info["optimal_steps"] == task.data["optimal_steps"]
    assert "#" in info["instruction"] and "up" in info["instruction"]


# ---- invalid actions -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "action",
    [
        "",
        "   ",
        "jump",
        "move up",
        "up!",
        "x" * 100_000,
        "\x00",
        "上",
        "üp",
        "\udcff",
        "up\x00",
        "🙂" * 1000,
        "<action>up</action>",
    ],
)
def test_invalid_actions_change_nothing(env, action):
    env.reset(_task("######", "#PXO_#", "#____#", "######"))
    before = env.render()
    obs, r, done, info = env.step(action)
    assert info["invalid_action"] is True and not done and r == pytest.approx(-0.1)
    assert obs == f"{INVALID_ACTION_MESSAGE}\n{before}"
    assert all(a in obs for a in ACTIONS) and "Invalid action" in obs
    assert env.render() == before and info["anchor"] == before


def test_non_string_action_does_not_raise(env):
    env.reset(_task("######", "#PXO_#", "######"))
    assert env.step(None)[3]["invalid_action"]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "action, move",
    [
        ("UP", "up"),
        ("  Left\n", "left"),
        ("\tDOWN ", "down"),
        ("Right", "right"),
        (" " * 100_000 + "up" + "\n" * 1000, "up"),
    ],
)
def test_action_case_and_whitespace(action, move):
    assert parse_action(action) == move


# ---- deadlocks -------------------------------------------------------------------------------


def test_corner_deadlock_detected_and_sticky(env):
    env.reset(_task("######", "#____#", "#_XP_#", "#___O#", "######"))
    _, _, _, info = env.step("left")  # box to (2, 1): west wall only -> no deadlock yet
    assert not info["deadlock"] and not info["deadlocked"]
    env.step("down")
    env.step("left")
    _, _, _, info = env.step("up")  # box to (1, 1): walls north and west -> corner
    assert env.render().split("\n")[1] == "#X___#"
    assert info["deadlock"] and info["deadlocked"]
    _, _, _, info = env.step("garbage")
    assert info["deadlocked"]
    assert solve(env.level, env.player, env.boxes) is None  # the solver agrees: no way out


def test_box_on_target_in_corner_is_no_deadlock():
    level = parse_level(["#####", "#√P_#", "#####"])
    assert not is_corner_deadlock(level, level.boxes)
    level = parse_level(["#####", "#XPO#", "#####"])
    assert is_corner_deadlock(level, level.boxes)


# ---- solver and expert -----------------------------------------------------------------------


def test_solver_shortest_plan():
    level = parse_level(["#######", "#P____#", "#_X__O#", "#_____#", "#######"])
    plan = solve(level)
    assert len(plan) == 4 and plan[-3:] == ["right", "right", "right"]  # down, then three pushes
    env = SokobanEnv(grid_style="compact")
    env.reset(_task(*level.rows()))
    assert [env.step(a)[2] for a in plan] == [False, False, False, True]
    assert solve(parse_level(["#####", "#P√_#", "#####"])) == []


def test_solver_node_cap_raises_clearly():
    level = parse_level(["##########", "#P_______#", "#_X____X_#", "#________#", "#______OO#", "##########"])
    with pytest.raises(SolverError, match="max_nodes"):
        solve(level, max_nodes=10)
    assert len(solve(level)) > 0


def test_expert_solves_in_optimal_steps(env, tasks_1box, tasks_2box):
    for task in tasks_1box["eval"] + tasks_2box["eval"]:  # 50 + 50 rooms
        env.reset(task)
        for step in range(1, task.data["optimal_steps"] + 1):  # noqa: B007 (checked after loop)
            _, _, done, info = env.step(env.expert_action())
            if done:
                break
        assert info["won"] and step == task.data["optimal_steps"], task.task_id


def test_expert_recovers_after_a_detour(env, tasks_1box):
    task = tasks_1box["train"][3]
    env.reset(task)
    for a in ("up", "left"):  # a detour off the optimal plan
        env.step(a)
    plan = solve(env.level, env.player, env.boxes)
    if plan is None:
        pytest.skip("the detour deadlocked this room")
    n = 0
    while not env.done:
        env.step(env.expert_action())
        n += 1
    assert n == len(plan)


# ---- generated tasks -------------------------------------------------------------------------


def test_generated_rooms_solvable_not_presolved(tasks_1box, tasks_2box):
    for tasks, boxes in ((tasks_1box, 1), (tasks_2box, 2)):
        for split, ts in tasks.items():
            for task in ts:
                level = parse_level(task.data["room"])
                assert task.split == split and task.task_type == f"6x6-{boxes}box"
                assert len(level.boxes) == boxes and level.height == level.width == 6
                assert level.boxes != level.targets and not (level.boxes & level.targets)
                plan = solve(level)
                assert plan and len(plan) == task.data["optimal_steps"]


def test_generated_rooms_connected_and_boxes_reachable(tasks_1box, tasks_2box):
    for tasks in (tasks_1box, tasks_2box):
        for task in tasks["train"] + tasks["eval"]:
            level = parse_level(task.data["room"])
            assert _bfs_reach(level, level.player) == set(level.floor), task.task_id  # one connected room
            for b in level.boxes:  # every box sits on a line it can be pushed along
                assert any(b + level.delta(a) in level.floor and b - level.delta(a) in level.floor for a in ACTIONS), (
                    task.task_id
                )
            # and the player, walking around the boxes, can push one at once (later pushes may be
            # needed to reach the others: a box can wall another off)
            reach = _bfs_reach(level, level.player, blocked=level.boxes)
            assert any(
                b - level.delta(a) in reach and b + level.delta(a) in level.floor - level.boxes
                for b in level.boxes
                for a in ACTIONS
            ), task.task_id


def test_splits_disjoint(tasks_1box, tasks_2box):
    for tasks in (tasks_1box, tasks_2box):
        train = {tuple(t.data["room"]) for t in tasks["train"]}
        evals = {tuple(t.data["room"]) for t in tasks["eval"]}
        assert len(train) == len(tasks["train"]) and len(evals) == len(tasks["eval"])  # no repeats
        assert not train & evals
        assert not {t.task_id for t in tasks["train"]} & {t.task_id for t in tasks["eval"]}
        for split, ts in tasks.items():  # disjoint by construction: the layout's hash picks the split
            for t in ts:
                level = parse_level(t.data["room"])
                assert layout_split(level.floor, level.targets, level.width) == split


def test_default_sizes_disjoint():
    # Generation speed is a benchmark figure (benchmarks/env_throughput.py), not asserted here:
    # a timed assertion fails on a loaded machine.
    evals = make_tasks("sokoban", "eval")
    assert len(evals) == 200
    train = make_tasks("sokoban", "train", n=300)
    assert not {tuple(t.data["room"]) for t in train} & {tuple(t.data["room"]) for t in evals}


def test_deterministic_and_prefix_stable(tasks_1box):
    again = make_tasks("sokoban", "train", n=100)
    assert [t.data["room"] for t in again] == [t.data["room"] for t in tasks_1box["train"]]
    assert [t.data["room"] for t in make_tasks("sokoban", "train", n=10)] == [t.data["room"] for t in again[:10]]
    other = make_tasks("sokoban", "train", n=100, seed=1)
    assert [t.data["room"] for t in other] != [t.data["room"] for t in again]
    # same seed -> same observations along the same actions
    e1, e2 = SokobanEnv(), SokobanEnv()
    rng = np.random.default_rng(0)
    for task, twin in zip(tasks_1box["train"][:10], again[:10]):
        assert e1.reset(task)[0] == e2.reset(twin)[0]
        for a in rng.choice(ACTIONS, size=8):
            assert e1.step(str(a))[:3] == e2.step(str(a))[:3]


def test_reset_same_task_identical(env, tasks_2box):
    task = tasks_2box["train"][0]
    obs, info = env.reset(task)
    for a in ("up", "left", "down", "garbage"):
        env.step(a)
    obs2, info2 = env.reset(task)
    assert obs2 == obs and info2 == info
    assert SokobanEnv(grid_style="compact").reset(task) == (obs, info)


def test_generator_deterministic_in_rng():
    a = generate_level(np.random.default_rng(7), (7, 7), 2)
    b = generate_level(np.random.default_rng(7), (7, 7), 2)
    assert a == b and a.render().count("X") + a.render().count("√") == 2
    assert make_tasks("sokoban", "train", n=3, dim=(7, 8))[0].task_type == "7x8-1box"


@pytest.mark.parametrize(
    "rows, match",
    [
        (["#####", "#PX_#", "#####"], "as many targets"),
        (["#####", "#_XO#", "#####"], "exactly one player"),
        (["#####", "#PXO_", "#####"], "border"),
        (["#####", "#PXQ#", "#####"], "unknown cell"),
        (["#####", "#PXO#", "####"], "equal-length"),
    ],
)
def test_bad_rooms_rejected_clearly(rows, match):
    with pytest.raises(ValueError, match=match):
        parse_level(rows)


def test_bad_task_rejected_clearly(env):
    with pytest.raises(ValueError, match="family"):
        env.reset(Task("search", "x", "train", "", {"room": ["###"]}))
    with pytest.raises(ValueError, match="data\\['room'\\]"):
        env.reset(Task("sokoban", "x", "train", "", {}))
    with pytest.raises(ValueError, match="split"):
        make_tasks("sokoban", "test")


# ---- rollout metrics: FamilySpec.metrics on real episodes through the real rollout loop ----------


@pytest.fixture(scope="module")
def tokenizer():
    corpus = ["<think></think><action>up</action>", "down left right jump", " # \t _ \t O \t X \t P \t"] * 20
    return chatml_bpe(corpus, vocab_size=300)


class ScriptedGenerator:
    """Answers every prompt with ``<think></think><action>{move(slot, t)}</action>`` (t: the slot's
    step); the rollout loop sends the prompts of ``envs.active()`` in that order."""

    def __init__(self, envs, tokenizer, move):
        self.envs, self.tok, self.move, self.t = envs, tokenizer, move, {}

    def generate(self, prompts, params, constraints=None):
        from gigpo.policy import Generation

        slots = self.envs.active()
        assert len(slots) == len(prompts)
        out = []
        for s in slots:
            t = self.t[s] = self.t.get(s, -1) + 1
            text = f"<think></think><action>{self.move(s, t)}</action>"
            ids = np.asarray(self.tok(text, add_special_tokens=False)["input_ids"], dtype=np.int32)
            out.append(Generation(ids, np.zeros(len(ids), np.float32), True))
        return out


def _corner_plan(task: Task) -> list[str] | None:
    """Moves that push a 1-box room's box into a non-target corner (a deadlock) without ever
    crossing the target (which would win), or None when no corner can be reached so."""
    level = parse_level(task.data["room"])
    (target,) = level.targets
    corners = sorted(c for c in level.floor - level.targets if is_corner_deadlock(level, frozenset((c,))))
    for c in corners:
        # the target as a wall: a shortest plan of that room never steps on it, so it replays in the real one
        plan = solve(dataclasses.replace(level, floor=level.floor - {target}, targets=frozenset((c,))))
        if plan:
            return plan
    return None


def _rollout(tasks, group_size, tokenizer, move, max_steps, *, eval_=False):
    from gigpo.agent import Agent
    from gigpo.envs.manager import GroupedEnvs
    from gigpo.policy import SamplingParams
    from gigpo.rollout import eval_rollout, rollout, rollout_metrics

    agent = Agent("sokoban", tokenizer, max_prompt_tokens=8192)
    with GroupedEnvs("sokoban", group_size=group_size, max_steps=max_steps) as envs:
        gen = ScriptedGenerator(envs, tokenizer, lambda s, t: move(envs, s, t))
        if eval_:
            return eval_rollout(envs, tasks, gen, tokenizer, agent)
        batch = rollout(envs, tasks, gen, tokenizer, agent, SamplingParams(max_new_tokens=16))
        return batch, rollout_metrics(batch)


def _expert(envs, s, t):
    return envs.expert_actions([s])[s]


def test_expert_rollout_has_no_deadlock_and_no_extra_steps(tokenizer):
    tasks = make_tasks("sokoban", "eval", n=4)
    limit = max(t.data["optimal_steps"] for t in tasks) + 5
    batch, m = _rollout(tasks, 1, tokenizer, _expert, limit, eval_=True)  # the eval path: one rollout per task
    assert m["success"] == 1.0 and m["num_trajectories"] == 4
    assert m["deadlock_rate"] == 0.0 and m["steps_over_optimal"] == 0.0 and m["optimal_rate"] == 1.0
    # the rollout recorded exactly the spec's keys of each trajectory's last info, in slot order
    assert batch.meta["traj_info"] == [{"deadlocked": False, "optimal_steps": t.data["optimal_steps"]} for t in tasks]
    assert batch.traj_length.tolist() == [t.data["optimal_steps"] for t in tasks]


def test_deadlocks_and_detours_are_counted_per_trajectory(tokenizer):
    from gigpo.batch import select_trajectories
    from gigpo.rollout import rollout_metrics

    tasks = [t for t in make_tasks("sokoban", "train", n=30) if _corner_plan(t)][:3]
    assert len(tasks) == 3
    plans = [_corner_plan(t) for t in tasks]
    limit = max(max(t.data["optimal_steps"] for t in tasks) + 5, max(map(len, plans)) + 2)

    def move(envs, s, t):
        # per group of 3: the expert; one invalid action then the expert (one step over optimal);
        # a walk that corners the box, then "up" until the step limit
        kind = s % 3
        if kind == 0 or (kind == 1 and t > 0):
            return _expert(envs, s, t)
        if kind == 1:
            return "jump"
        plan = plans[s // 3]
        return plan[t] if t < len(plan) else "up"

    batch, m = _rollout(tasks, 3, tokenizer, move, limit)
    kind = np.arange(9) % 3
    assert batch.traj_won.tolist() == (kind < 2).tolist()
    assert [d["deadlocked"] for d in batch.meta["traj_info"]] == (kind == 2).tolist()
    assert batch.traj_length[kind == 2].tolist() == [limit] * 3 and batch.traj_truncated[kind == 2].all()
    optimal = np.repeat([t.data["optimal_steps"] for t in tasks], 3)
    assert (batch.traj_length - optimal)[kind < 2].tolist() == [0, 1] * 3
    assert m["success"] == pytest.approx(2 / 3)
    assert m["deadlock_rate"] == pytest.approx(1 / 3)
    assert m["steps_over_optimal"] == pytest.approx(0.5) and m["optimal_rate"] == pytest.approx(0.5)
    # the per-trajectory outcomes follow a selection of trajectories (e.g. the trainer's fault filter)
    only_corner = rollout_metrics(select_trajectories(batch, kind == 2))
    assert only_corner["deadlock_rate"] == 1.0 and only_corner["success"] == 0.0
    assert "steps_over_optimal" not in only_corner and "optimal_rate" not in only_corner  # none won
    detours = rollout_metrics(select_trajectories(batch, kind == 1))
    assert detours["deadlock_rate"] == 0.0 and detours["steps_over_optimal"] == 1.0 and detours["optimal_rate"] == 0.0


def test_state_anchor_is_player_and_boxes(env):
    _, info = env.reset(_task("######", "#P_X_#", "#___O#", "######"))
    start = info["state_anchor"]
    assert start == "player 7; boxes [9]"
    _, _, _, info = env.step("up")  # into the wall: same state, same key
    assert info["state_anchor"] == start
    _, _, _, info = env.step("jump")  # invalid: the state stays
    assert info["state_anchor"] == start
    _, _, _, info = env.step("right")
    assert info["state_anchor"] == "player 8; boxes [9]"
    _, _, _, info = env.step("left")
    assert info["state_anchor"] == start and info["anchor"] == env.level.render(style="compact")
