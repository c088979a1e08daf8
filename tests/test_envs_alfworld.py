"""ALFWorld family on the real TextWorld PDDL engine: generator, splits, env contract, expert."""

from __future__ import annotations

import json
import random
import re

import pytest

from gigpo.agent.relabel import task_words
from gigpo.envs import make_env, make_tasks
from gigpo.envs.alfworld import TASK_TYPES, GameSpec, write_game
from gigpo.envs.alfworld.generator import build_layout
from gigpo.envs.base import TextEnv


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("alfworld_cache")


@pytest.fixture(scope="module")
def env(cache):
    e = make_env("alfworld", cache_dir=cache)
    yield e
    e.close()


def _combo(task):
    s = task.data["spec"]
    return (s["task_type"], s["obj"], s["recep"])


def test_splits_are_large_and_eval_combos_unseen_in_train():
    train, evl = make_tasks("alfworld", "train"), make_tasks("alfworld", "eval")
    assert len(train) >= 2000 and len(evl) >= 200
    assert {t.task_type for t in train} == set(TASK_TYPES) == {t.task_type for t in evl}
    assert not {_combo(t) for t in train} & {_combo(t) for t in evl}
    assert len({t.task_id for t in train}) == len(train)


def test_make_tasks_deterministic_filtered_and_validated():
    a = make_tasks("alfworld", "train", n=20, seed=3)
    assert [t.task_id for t in a] == [t.task_id for t in make_tasks("alfworld", "train", n=20, seed=3)]
    assert [t.task_id for t in a] != [t.task_id for t in make_tasks("alfworld", "train", n=20, seed=4)]
    heat = make_tasks("alfworld", "eval", n=10, task_types=["pick_heat_then_place_in_recep"])
    assert {t.task_type for t in heat} == {"pick_heat_then_place_in_recep"}
    mixed = make_tasks("alfworld", "train", n=300, task_types=list(TASK_TYPES[:2]), task_weights=[3, 1])
    frac = sum(t.task_type == TASK_TYPES[0] for t in mixed) / len(mixed)
    assert 0.6 < frac < 0.9
    with pytest.raises(ValueError, match="only"):
        make_tasks("alfworld", "eval", n=10**6)
    with pytest.raises(ValueError, match="task_types"):
        make_tasks("alfworld", "train", n=1, task_types=["pick_and_eat"])


def test_generated_game_is_reproducible_and_official_shaped(tmp_path):
    spec = GameSpec(**make_tasks("alfworld", "train", n=1, seed=5)[0].data["spec"])
    f1, f2 = write_game(spec, tmp_path / "a"), write_game(spec, tmp_path / "b")
    assert f1.read_text() == f2.read_text()
    game = json.loads(f1.read_text())
    assert set(game) >= {"pddl_domain", "grammar", "pddl_problem", "solvable"}
    traj = json.loads((tmp_path / "a" / "traj_data.json").read_text())
    assert traj["task_type"] == spec.task_type and traj["pddl_params"]["object_target"] == spec.obj


def test_reset_observation_looks_like_alfworld_and_is_identical_across_instances(env, cache):
    task = make_tasks("alfworld", "train", n=1, seed=11, task_types=["pick_cool_then_place_in_recep"])[0]
    obs, info = env.reset(task)
    assert isinstance(env, TextEnv)
    assert obs.startswith(
        "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you see a "
    )
    assert re.search(r"\n\nYour task is to: (put a cool|cool some) \w+ (and put it )?in \w+\.$", obs)
    assert info["instruction"] == obs.partition("Your task is to: ")[2]
    assert info["anchor"] == obs and info["won"] is False and info["score"] == 0.0
    assert info["task_type"] == "pick_cool_then_place_in_recep"
    acts = info["admissible_actions"]
    assert "help" not in acts and {"look", "inventory"} <= set(acts)
    assert any(re.fullmatch(r"go to fridge \d+", a) for a in acts)
    other = make_env("alfworld", cache_dir=cache)
    assert other.reset(task)[0] == obs
    # Walk to the fridge: ALFWorld's wording for arriving at and opening a closed receptacle.
    fridge = next(a for a in acts if a.startswith("go to fridge"))
    obs, r, done, info = env.step(fridge)
    assert re.fullmatch(r"You arrive at fridge \d+\. The fridge \d+ is closed\.", obs)
    assert any(re.fullmatch(r"open fridge \d+", a) for a in info["admissible_actions"])
    obs, *_ = env.step(fridge.replace("go to", "open"))
    assert obs.startswith("You open the fridge")
    assert any(a.startswith("examine ") for a in env.step("look")[3]["admissible_actions"])


def test_arriving_at_open_receptacle_lists_objects_and_take_action(env):
    task = make_tasks("alfworld", "train", n=1, seed=2, task_types=["pick_and_place_simple"])[0]
    obs, info = env.reset(task)
    closed = ("cabinet", "drawer", "fridge", "microwave", "safe", "box")
    go = next(a for a in info["admissible_actions"] if a.startswith("go to") and a.split()[2] not in closed)
    obs, _, _, info = env.step(go)
    m = re.fullmatch(r"You arrive at (\w+ \d+)\. On the \1, you see (.+)\.", obs)
    assert m, obs
    if m.group(2) != "nothing":
        assert any(re.fullmatch(rf"take \w+ \d+ from {m.group(1)}", a) for a in info["admissible_actions"])


def test_bad_actions_get_an_observation_and_count(env):
    task = make_tasks("alfworld", "eval", n=1, seed=0)[0]
    first, _ = env.reset(task)
    for bad in ["", "   ", "fly to the moon", "x" * 100_000, "ピカチュウ 🍎 \u202e", "go to", "\x00take"]:
        obs, r, done, info = env.step(bad)
        assert obs == "Nothing happens." and r == 0.0 and done is False
        assert info["anchor"] == obs and isinstance(info["admissible_actions"], list)
    assert isinstance(env.expert_action(), str)  # the expert survives odd inputs


@pytest.mark.slow
def test_expert_solves_every_task_type_within_50_steps(env):
    for split in ("train", "eval"):
        for tt in TASK_TYPES:
            for task in make_tasks("alfworld", split, n=2, seed=7, task_types=[tt]):
                obs, info = env.reset(task)
                done, steps, reward = False, 0, 0.0
                while not done and steps < 50:
                    obs, reward, done, info = env.step(env.expert_action())
                    steps += 1
                assert done and info["won"] and info["score"] == 1.0 and reward == 10.0, task.task_id


@pytest.mark.slow
def test_random_admissible_agent_rarely_wins(env):
    rng = random.Random(0)
    wins = 0
    tasks = [t for tt in TASK_TYPES for t in make_tasks("alfworld", "train", n=2, seed=1, task_types=[tt])]
    for task in tasks:
        obs, info = env.reset(task)
        for _ in range(50):
            obs, reward, done, info = env.step(rng.choice(info["admissible_actions"]))
            if done:
                wins += 1
                break
    assert wins / len(tasks) <= 0.35


def _official_layout(root, split, tasks, cache):
    for task in tasks:
        spec = GameSpec(**task.data["spec"])
        write_game(spec, root / "json_2.1.1" / split / spec.task_id.rsplit("-v", 1)[0] / "trial_T0000_0")


def test_official_directory_via_data_dir_and_env_var(tmp_path, cache, monkeypatch):
    train = make_tasks("alfworld", "train", n=3, seed=9)
    evl = make_tasks("alfworld", "eval", n=2, seed=9)
    _official_layout(tmp_path, "train", train, cache)
    _official_layout(tmp_path, "valid_unseen", evl, cache)
    got = make_tasks("alfworld", "train", data_dir=tmp_path)
    assert len(got) == 3 and all(t.data["game_file"].endswith("game.tw-pddl") for t in got)
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    ev = make_tasks("alfworld", "eval")
    assert len(ev) == 2 and {t.task_type for t in ev} == {t.task_type for t in evl}
    e = make_env("alfworld", cache_dir=cache)
    ref = make_env("alfworld", cache_dir=cache)
    obs, info = e.reset(ev[0])
    ref_task = next(t for t in evl if t.task_id.rsplit("-v", 1)[0] in ev[0].task_id)
    assert obs == ref.reset(ref_task)[0]  # the same game, played from the official layout
    done, steps = False, 0
    while not done and steps < 50:
        obs, r, done, info = e.step(e.expert_action())
        steps += 1
    assert info["won"]
    with pytest.raises(FileNotFoundError, match="json_2.1.1"):
        make_tasks("alfworld", "train", data_dir=tmp_path / "nowhere")


def test_small_rooms_cap_receptacles_keep_the_task_solvable_and_ids_distinct(env):
    kw = dict(task_types=["pick_and_place_simple", "look_at_obj_in_light"], max_receptacles=5, max_distractors=3)
    small = make_tasks("alfworld", "eval", n=6, seed=2, **kw)
    default = make_tasks("alfworld", "eval", n=6, seed=2, task_types=kw["task_types"])
    assert [t.task_id for t in small] == [t.task_id + "-r5d3" for t in default]
    assert small == make_tasks("alfworld", "eval", n=6, seed=2, **kw)
    for task in small:
        obs, info = env.reset(task)
        # "you see a X 1, a Y 1, and a Z 1." -> receptacles in the room; one may be a lamp holder extra.
        seen = re.search(r"you see (.*)\.\n", obs).group(1)
        assert len(seen.split(", ")) <= 6, seen
        for _ in range(50):
            obs, reward, done, info = env.step(env.expert_action())
            if done:
                break
        assert info["won"] and reward == 10.0, (task.task_id, obs)
    with pytest.raises(ValueError, match="max_receptacles"):
        GameSpec(1, "pick_and_place_simple", "Apple", "Fridge", max_receptacles=0)


def test_valid_seen_eval_split_is_new_layouts_of_training_goals(env):
    kw = dict(task_types=["pick_and_place_simple"], max_receptacles=6, max_distractors=4)
    train = make_tasks("alfworld", "train", **kw)
    seen = make_tasks("alfworld", "eval", n=4, seed=1, eval_split="valid_seen", **kw)
    unseen = make_tasks("alfworld", "eval", n=4, seed=1, **kw)
    assert {t.split for t in seen} == {"eval"}
    # training goals in their training scenes, but no training game
    train_goals = {(_combo(t), t.data["spec"]["scene"]) for t in train}
    assert all((_combo(t), t.data["spec"]["scene"]) in train_goals for t in seen)
    assert not {t.task_id for t in seen} & {t.task_id for t in train}
    assert not {_combo(t) for t in unseen} & {_combo(t) for t in train}  # the default is unchanged
    # a new layout: same goal and room, different game; still solvable by the expert
    task = seen[0]
    twin = next(t for t in train if t.task_id == task.task_id.replace("-v1000", "-v0"))
    obs_seen, _ = env.reset(task)
    obs_train, _ = env.reset(twin)
    words = [task_words(o.split("Your task is to:")[1]) for o in (obs_seen, obs_train)]
    assert [(m.group("obj"), m.group("rec")) for m in words] == [
        (task.data["spec"]["obj"].lower(), task.data["spec"]["recep"].lower())
    ] * 2
    assert (
        build_layout(GameSpec(**task.data["spec"]))["objects"] != build_layout(GameSpec(**twin.data["spec"]))["objects"]
    )
    first_scene = env.reset(task)[0]
    for _ in range(50):
        obs, reward, done, info = env.step(env.expert_action())
        if done:
            break
    assert info["won"], task.task_id
    assert first_scene == obs_seen
    with pytest.raises(ValueError, match="eval_split"):
        make_tasks("alfworld", "eval", n=1, eval_split="valid_unseeen")


def test_state_anchor_tells_holding_from_not_holding_where_the_observation_cannot(env):
    """docs/algorithm.md#anchor-definitions: the expert walks to the target receptacle, fetches the
    object and comes back; the arrival text reads the same, the engine state does not."""
    task = make_tasks("alfworld", "train", n=1, seed=0)[0]
    obs, info = env.reset(task)
    assert info["state_anchor"] == env.reset(task)[1]["state_anchor"]  # canonical: a reset gives the same key
    assert "atlocation(agent1" in info["state_anchor"] and "holds(" not in info["state_anchor"]
    seen = [(obs, info["state_anchor"])]
    for _ in range(30):
        obs, _, done, info = env.step(env.expert_action())
        same_text = [s for o, s in seen if o == obs]
        if same_text and info["state_anchor"] not in same_text:
            break
        seen.append((obs, info["state_anchor"]))
        assert not done
    else:
        pytest.fail("the expert never came back to an observation it had seen in another state")
    assert "holds(agent1" in info["state_anchor"] and not any("holds(" in s for s in same_text)
    # the key is the physical facts only, sorted: no bookkeeping of what was seen
    facts = info["state_anchor"].split("; ")
    assert facts == sorted(facts) and not any(f.startswith(("checked(", "wasinreceptacle(")) for f in facts)
