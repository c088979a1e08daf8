"""Env family specs: the registry, plugins (config key and entry point), and byte-identical built-ins.

The pinned strings below were produced by the code before the spec registry (prompts.py's per-family
dicts, expert.py's and parsing.py's family switches); the built-in specs must reproduce them
exactly, since the default job's results and the ``tiny`` model's cache key depend on them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gigpo.agent import Agent
from gigpo.agent.expert import format_expert_response
from gigpo.agent.parsing import parse_action
from gigpo.agent.prompts import render_prompt
from gigpo.envs import FAMILIES, FamilySpec, families, family_module, get_family, register_family
from gigpo.envs import spec as spec_mod
from gigpo.train.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_DIR = ROOT / "tests" / "data" / "plugin_family"
PLUGIN_PKG = PLUGIN_DIR / "gigpo_echo_family"

# Produced by the pre-registry code (see the module docstring); keys: family/case.
PROMPTS = {
    "alfworld/hist": "You are an expert agent acting in the ALFRED household environment (ALFWorld).\n"
    "Your task is to: put a mug in the coffeemachine\n"
    "You have taken 3 step(s) so far. The most recent 2 observations and the actions you took:\n"
    "[Observation 2: 'obs one', Action 2: 'go to desk 1']\n"
    "[Observation 3: 'obs two', Action 3: 'open drawer 1']\n"
    "You are now at step 4. Current observation: Doc 1: text\n"
    "Admissible actions now:\n"
    "'go to desk 1'\n"
    "'look'\n"
    "Now take one action. First reason step by step about the situation inside <think> </think>. "
    "Then give exactly one admissible action inside <action> </action>.",
    "alfworld/repeat": "You are an expert agent acting in the ALFRED household environment (ALFWorld).\n"
    "Your task is to: put a mug in the coffeemachine\n"
    "You have taken 1 step(s) so far. The most recent 1 observations and the actions you took:\n"
    "[Observation 1: 'o', Action 1: 'a']\n"
    "You are now at step 2. Current observation: obs x\n"
    "Now take one action. First reason step by step about the situation inside <think> </think>. "
    "Then give exactly one admissible action inside <action> </action>.\n"
    "Your task, again: put a mug in the coffeemachine",
    "alfworld/step0": "You are an expert agent acting in the ALFRED household environment (ALFWorld).\n"
    "Your task is to: put a mug in the coffeemachine\n"
    "You are now at step 1. Current observation: You are in a room.\n"
    "Now take one action. First reason step by step about the situation inside <think> </think>. "
    "Then give exactly one admissible action inside <action> </action>.",
    "search/hist": "You are an expert agent answering a question step by step with a search engine.\n"
    "Question: find the answer\n"
    "You have taken 3 step(s) so far. The most recent 2 searches and results:\n"
    "Step 2: <search>q1</search>\n"
    "Step 3: Doc 0\n"
    "Your response: <search>q2</search>\n"
    "Latest search results (step 4): Doc 1: text\n"
    "Now respond for this step. First reason inside <think> </think>. Then do only one of: (1) if you "
    "lack knowledge, search with <search> your query </search>; the results come back inside "
    "<information> </information>; (2) if you can answer, give the short final answer inside <answer> "
    "</answer>, for example <answer>Beijing</answer>.",
    "search/repeat": "You are an expert agent answering a question step by step with a search engine.\n"
    "Question: find the answer\n"
    "You have taken 1 step(s) so far. The most recent 1 searches and results:\n"
    "Step 1: o\n"
    "Your response: a\n"
    "Latest search results (step 2): obs x\n"
    "Now respond for this step. First reason inside <think> </think>. Then do only one of: (1) if "
    "you lack knowledge, search with <search> your query </search>; the results come back inside "
    "<information> </information>; (2) if you can answer, give the short final answer inside "
    "<answer> </answer>, for example <answer>Beijing</answer>.\n"
    "Question, again: find the answer",
    "search/step0": "You are an expert agent answering a question step by step with a search engine.\n"
    "Question: find the answer\n"
    "Now respond for this step. First reason inside <think> </think>. Then do only one of: (1) if you "
    "lack knowledge, search with <search> your query </search>; the results come back inside "
    "<information> </information>; (2) if you can answer, give the short final answer inside <answer> "
    "</answer>, for example <answer>Beijing</answer>.",
    "webshop/hist": "You are an expert shopping agent acting in the WebShop online store.\n"
    "Your task is to: put a mug in the coffeemachine\n"
    "You have taken 3 step(s) so far. The most recent 2 observations and the actions you took:\n"
    "[Observation 2: 'obs one', Action 2: 'go to desk 1']\n"
    "[Observation 3: 'obs two', Action 3: 'open drawer 1']\n"
    "You are now at step 4. Current observation: Doc 1: text\n"
    "Admissible actions now:\n"
    "'go to desk 1'\n"
    "'look'\n"
    "Now take one action. First reason step by step about which admissible action best serves the "
    "shopping goal, inside <think> </think>. Then give exactly one admissible action inside <action> "
    "</action>.",
    "webshop/repeat": "You are an expert shopping agent acting in the WebShop online store.\n"
    "Your task is to: put a mug in the coffeemachine\n"
    "You have taken 1 step(s) so far. The most recent 1 observations and the actions you took:\n"
    "[Observation 1: 'o', Action 1: 'a']\n"
    "You are now at step 2. Current observation: obs x\n"
    "Now take one action. First reason step by step about which admissible action best serves the "
    "shopping goal, inside <think> </think>. Then give exactly one admissible action inside "
    "<action> </action>.\n"
    "Your task, again: put a mug in the coffeemachine",
    "webshop/step0": "You are an expert shopping agent acting in the WebShop online store.\n"
    "Your task is to: put a mug in the coffeemachine\n"
    "You are now at step 1. Current observation: You are in a room.\n"
    "Now take one action. First reason step by step about which admissible action best serves the "
    "shopping goal, inside <think> </think>. Then give exactly one admissible action inside <action> "
    "</action>.",
}

EXPERT = {
    "alfworld/empty/Look": "<think></think><action>look</action>",
    "alfworld/empty/frobnicate": "<think></think><action>frobnicate</action>",
    "alfworld/empty/go to desk 1": "<think></think><action>go to desk 1</action>",
    "alfworld/empty/put mug 1 in/on coffeemachine 1": "<think></think><action>put mug 1 in/on coffeemachine 1</action>",
    "alfworld/empty/take mug 1 from desk 1": "<think></think><action>take mug 1 from desk 1</action>",
    "alfworld/reason/Look": "<think>I look around.</think><action>look</action>",
    "alfworld/reason/frobnicate": "<think>This action moves the task forward.</think><action>frobnicate</action>",
    "alfworld/reason/go to desk 1": "<think>I should check desk 1 next.</think><action>go to desk 1</action>",
    "alfworld/reason/put mug 1 in/on coffeemachine 1": "<think>I have mug 1; I put it in/on coffeemachine 1 as the "
    "task asks.</think><action>put mug 1 in/on coffeemachine "
    "1</action>",
    "alfworld/reason/take mug 1 from desk 1": "<think>I need mug 1, and it is at desk 1; I take "
    "it.</think><action>take mug 1 from desk 1</action>",
    "search/empty/<answer>Paris</answer>": "<think></think><answer>Paris</answer>",
    "search/empty/<search>capital of france</search>": "<think></think><search>capital of france</search>",
    "search/empty/<think>x</think><answer>y</answer>": "<think></think><answer>y</answer>",
    "search/reason/<answer>Paris</answer>": "<think>The results give me the answer.</think><answer>Paris</answer>",
    "search/reason/<search>capital of france</search>": "<think>I need more information: capital of "
    "france.</think><search>capital of france</search>",
    "search/reason/<think>x</think><answer>y</answer>": "<think>x</think><answer>y</answer>",
    "webshop/empty/click[b0123]": "<think></think><action>click[b0123]</action>",
    "webshop/empty/click[buy now]": "<think></think><action>click[buy now]</action>",
    "webshop/empty/click[next >]": "<think></think><action>click[next >]</action>",
    "webshop/empty/search[red shoes]": "<think></think><action>search[red shoes]</action>",
    "webshop/empty/weird": "<think></think><action>weird</action>",
    "webshop/reason/click[b0123]": "<think>b0123 matches the request; I click it.</think><action>click[b0123]</action>",
    "webshop/reason/click[buy now]": "<think>The item and its options match the request; I buy "
    "it.</think><action>click[buy now]</action>",
    "webshop/reason/click[next >]": "<think>The item I need is not here; I click next >.</think><action>click[next "
    ">]</action>",
    "webshop/reason/search[red shoes]": "<think>I search the store for the requested product: red "
    "shoes.</think><action>search[red shoes]</action>",
    "webshop/reason/weird": "<think>This action moves the purchase forward.</think><action>weird</action>",
}

PARSE = {
    "alfworld/<answer>a</answer><search>b</search>": ["r>a</answer><search>b</search>", False, "none"],
    "alfworld/<search>q</search>": ["<search>q</search>", False, "none"],
    "alfworld/<think>t</think><action>Go To Desk 1</action>": ["go to desk 1", True, "action"],
    "alfworld/no tags here at all, just a long rambling response text": [
        " a long rambling response text",
        False,
        "none",
    ],
    "search/<answer>a</answer><search>b</search>": ["<search>b</search>", False, "search"],
    "search/<search>q</search>": ["<search>q</search>", True, "search"],
    "search/<think>t</think><action>Go To Desk 1</action>": [
        "<think>t</think><action>Go To Desk 1</action>",
        False,
        "none",
    ],
    "search/no tags here at all, just a long rambling response text": [
        "no tags here at all, just a long rambling response text",
        False,
        "none",
    ],
    "webshop/<answer>a</answer><search>b</search>": ["r><search>b</search>", False, "none"],
    "webshop/<search>q</search>": ["<search>q</search>", False, "none"],
    "webshop/<think>t</think><action>Go To Desk 1</action>": ["go to desk 1", True, "action"],
    "webshop/no tags here at all, just a long rambling response text": ["mbling response text", False, "none"],
}


@pytest.fixture
def registry(monkeypatch):
    """The registry as it was, restored after the test; the plugin dir importable meanwhile."""
    saved = spec_mod._state()
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    yield spec_mod
    spec_mod._restore(saved)
    sys.modules.pop("gigpo_echo_family", None)


# --------------------------------------------------------------------------- built-ins pinned
def _cases(fam):
    task = "find the answer" if fam == "search" else "put a mug in the coffeemachine"
    hist = [("obs one", "go to desk 1"), ("obs two", "open drawer 1")]
    return task, {
        "step0": dict(observation=task if fam == "search" else "You are in a room.", step=0),
        "hist": dict(
            observation="Doc 1: text",
            step=3,
            history=[(task, "<search>q1</search>"), ("Doc 0", "<search>q2</search>")] if fam == "search" else hist,
            admissible_actions=None if fam == "search" else ["go to desk 1", "help", "look"],
        ),
        "repeat": dict(observation="obs x", step=1, history=[("o", "a")], repeat_task=True),
    }


@pytest.mark.parametrize("key", sorted(PROMPTS))
def test_builtin_prompts_are_byte_identical(key):
    fam, case = key.split("/")
    task, cases = _cases(fam)
    kw = dict(cases[case])
    assert render_prompt(fam, task, kw.pop("observation"), **kw) == PROMPTS[key]
    assert render_prompt(get_family(fam), task, cases[case]["observation"], **kw) == PROMPTS[key]


@pytest.mark.parametrize("key", sorted(EXPERT))
def test_builtin_expert_texts_are_byte_identical(key):
    fam, think, action = key.split("/", 2)
    assert format_expert_response(fam, action, think=think) == EXPERT[key]


@pytest.mark.parametrize("key", sorted(PARSE))
def test_builtin_parses_are_identical(key):
    fam, text = key.split("/", 1)
    p = parse_action(fam, text)
    assert [p.action, p.valid, p.kind] == PARSE[key]


def test_builtin_specs_and_legacy_views():
    assert list(families())[:3] == ["alfworld", "webshop", "search"]
    assert dict(FAMILIES) == {
        "alfworld": "gigpo.envs.alfworld",
        "webshop": "gigpo.envs.webshop",
        "search": "gigpo.envs.search",
    } | {n: s.module for n, s in list(families().items())[3:]}
    from gigpo.agent import DEFAULT_HISTORY, FALLBACK_TAIL

    assert {k: DEFAULT_HISTORY[k] for k in ("alfworld", "webshop", "search")} == {
        "alfworld": 2,
        "webshop": 2,
        "search": 4,
    }
    assert FALLBACK_TAIL["alfworld"] == 30 and FALLBACK_TAIL["webshop"] == 20 and "search" not in FALLBACK_TAIL
    assert get_family("alfworld").sft_relabel and not get_family("webshop").sft_relabel
    assert not get_family("alfworld").thread_safe and get_family("search").thread_safe
    from gigpo.policy.tiny import TinyConfig, _engines

    assert TinyConfig().families == (("alfworld", 6), ("webshop", 40), ("search", 150), ("sokoban", 40))
    assert _engines(TinyConfig()) == ["alfworld", "textworld", "bm25s"]


# ----------------------------------------------------------------------------------- registry
def test_unknown_family_error_hints_and_names_the_ways_to_register():
    with pytest.raises(ValueError, match=r"unknown env family 'webshp'.*Did you mean 'webshop'.*gigpo\.families"):
        get_family("webshp")
    with pytest.raises(ValueError, match="unknown env family 'alfwrld'.*Did you mean 'alfworld'"):
        family_module("alfwrld")
    with pytest.raises(KeyError):
        FAMILIES["nope"]


def test_register_twice_and_bad_specs_are_clear_errors(registry):
    s = FamilySpec(name="dummy", module="nowhere.dummy", system_prompt="x", action_format="y")
    assert register_family(s) is s and register_family(s) is s  # the same spec again: a no-op
    with pytest.raises(ValueError, match="'dummy' is already registered"):
        register_family(FamilySpec(name="dummy", module="other", system_prompt="x", action_format="y"))
    with pytest.raises(ValueError, match="already registered"):
        register_family(FamilySpec(name="search", module="other", system_prompt="x", action_format="y"))
    with pytest.raises(TypeError, match="needs a FamilySpec"):
        register_family({"name": "x"})
    with pytest.raises(ValueError, match="prompt_style must be one of"):
        FamilySpec(name="x", module="m", system_prompt="x", action_format="y", prompt_style="chat")
    with pytest.raises(ValueError, match="action_syntax must be one of"):
        FamilySpec(name="x", module="m", system_prompt="x", action_format="y", action_syntax="json")
    with pytest.raises(ValueError, match="name must be"):
        FamilySpec(name="my family", module="m", system_prompt="x", action_format="y")
    with pytest.raises(ValueError, match="traj_info_keys must be a tuple"):  # a bare string would be its letters
        FamilySpec(name="x", module="m", system_prompt="x", action_format="y", traj_info_keys="deadlocked")
    # Registered without importing its module; importing happens only when an env is made.
    assert get_family("dummy").module == "nowhere.dummy"
    with pytest.raises(ModuleNotFoundError):
        family_module("dummy")


# ------------------------------------------------------------------------------------ plugins
def test_family_module_by_path_and_by_name(registry):
    (spec,) = registry.load_family_module(str(PLUGIN_PKG))
    assert spec.name == "echo" and get_family("echo") is spec
    assert registry.load_family_module("gigpo_echo_family") == [spec]  # already imported: no-op
    assert Agent("echo", tokenizer=None).history_length == 1  # the spec's default_history
    prompt = render_prompt(
        "echo", "say the word fig", "You hold a basket of fruit.", admissible_actions=["say fig", "say kiwi"]
    )
    assert prompt == (
        "You are an agent that repeats words.\nYour task is to: say the word fig\n"
        "You are now at step 1. Current observation: You hold a basket of fruit.\n"
        "Admissible actions now:\n'say fig'\n'say kiwi'\n" + spec.action_format
    )
    text = format_expert_response("echo", "Say fig")
    assert text == "<think>The task names the word; I say fig.</think><action>say fig</action>"
    assert parse_action("echo", text).action == "say fig"
    assert parse_action("echo", "abc" * 9).action == "cabcabcabc"  # the spec's fallback_tail, 10
    from gigpo.envs import make_env, make_tasks

    env = make_env("echo")
    assert env.choices == 3  # the spec's env_kwargs default
    task = make_tasks("echo", "train", n=2)[0]
    obs, info = env.reset(task)
    obs, r, done, info = env.step(env.expert_action())
    assert done and info["won"] and r == 1.0


def test_process_workers_build_a_path_loaded_family(registry):
    # Workers build envs by module path and inherit sys.path, so they need no registration.
    from gigpo.envs import make_tasks
    from gigpo.envs.manager import GroupedEnvs

    registry.load_family_module(str(PLUGIN_PKG))
    with GroupedEnvs("echo", group_size=2, max_steps=2, executor="process", num_workers=1) as envs:
        (obs, info), _ = envs.reset(make_tasks("echo", "train", n=1))
    assert obs == "You hold a basket of fruit." and len(info["admissible_actions"]) == 3


def test_family_module_errors_name_the_fix(registry, tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        registry.load_family_module(str(tmp_path / "missing_dir"))
    with pytest.raises(ValueError, match="cannot import 'no_such_family_mod'.*PYTHONPATH"):
        registry.load_family_module("no_such_family_mod")
    (tmp_path / "nospec_fam.py").write_text("X = 1\n")
    with pytest.raises(ValueError, match="has no FAMILY_SPEC"):
        registry.load_family_module(str(tmp_path / "nospec_fam.py"))


def test_config_key_registers_the_family(registry):
    cfg = load_config(None, ["env.family=echo", f"env.family_module={PLUGIN_PKG}"])
    assert cfg.env.family == "echo" and get_family("echo").module == "gigpo_echo_family"
    with pytest.raises(ConfigError, match="env.family: 'ech' is not one of.*Did you mean 'echo'"):
        load_config(None, ["env.family=ech", f"env.family_module={PLUGIN_PKG}"])
    with pytest.raises(ConfigError, match="env.family_module: cannot import"):
        load_config(None, ["env.family=echo", "env.family_module=no_such_family_mod"])


def _dist_info(root: Path, name: str, entry_points: str) -> None:
    d = root / f"{name}-0.1.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (d / "entry_points.txt").write_text(textwrap.dedent(entry_points))


def test_entry_point_family_is_loaded_lazily(registry, tmp_path, monkeypatch):
    _dist_info(tmp_path, "gigpo_echo_family", "[gigpo.families]\necho = gigpo_echo_family:FAMILY_SPEC\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry._reset_for_tests()
    assert get_family("echo").module == "gigpo_echo_family"
    assert list(families())[:5] == ["alfworld", "webshop", "search", "sokoban", "echo"]


@pytest.mark.filterwarnings("ignore:gigpo. skipping an installed:RuntimeWarning")
def test_broken_entry_point_is_named(registry, tmp_path, monkeypatch):
    _dist_info(tmp_path, "broken_fam", "[gigpo.families]\nbroken = no_such_module_xyz:SPEC\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry._reset_for_tests()
    assert get_family("webshop").name == "webshop"  # a known name does not load entry points
    with pytest.raises(ValueError, match=r"entry point 'broken' = 'no_such_module_xyz:SPEC'.*failed to load"):
        get_family("something_else")
    with pytest.raises(ValueError, match=r"^env family 'broken': entry point 'broken'.*fix or uninstall"):
        get_family("broken")  # asked for by name: its own error first
    registry._reset_for_tests()
    assert load_config(None, ["env.family=webshop"]).env.family == "webshop"  # built-ins unaffected
    with pytest.raises(ConfigError, match=r"env.family: unknown env family 'echo'.*entry point 'broken'.*fix or"):
        load_config(None, ["env.family=echo"])


def test_broken_entry_point_warns_once_and_a_builtin_run_goes_on(registry, tmp_path, monkeypatch):
    """Listing families (the agent, the config's checks and ``gigpo list`` do) with a broken
    plug-in installed leaves it out with one warning naming it; a built-in family's run never
    sees it."""
    _dist_info(tmp_path, "broken_fam", "[gigpo.families]\nbroken = no_such_module_xyz:SPEC\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry._reset_for_tests()
    with pytest.warns(RuntimeWarning, match=r"skipping.*entry point 'broken' = 'no_such_module_xyz:SPEC'"):
        names = list(families())
    assert names == ["alfworld", "webshop", "search", "sokoban"]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: later listings and lookups stay quiet
        assert list(families()) == names and get_family("sokoban").name == "sokoban"
        assert registry.broken_plugins().keys() == {"broken"}
        cfg = load_config(None, ["env.family=sokoban"])
        Agent(cfg.env.family, tokenizer=None)
        from gigpo.agent import FALLBACK_TAIL
        from gigpo.policy.tiny import TinyConfig, tiny_hash

        assert "broken" not in dict(FALLBACK_TAIL) and tiny_hash(TinyConfig())


def test_a_skipped_plugin_is_one_plain_line_on_the_clis_stderr(tmp_path):
    """The CLI prints gigpo's warning as its line alone, not Python's ``file:line: RuntimeWarning``
    and the echoed source line."""
    _dist_info(tmp_path, "broken_fam", "[gigpo.families]\nbroken = no_such_module_xyz:SPEC\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    config = Path(__file__).resolve().parents[1] / "configs" / "sokoban_tiny.yaml"
    cmd = [sys.executable, "-m", "gigpo.cli", "train", "--config", str(config), f"output_dir={tmp_path}", "--dry-run"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("gigpo: skipping an installed env family plug-in: entry point 'broken'")
    assert "RuntimeWarning" not in r.stderr and ".py:" not in r.stderr


# ------------------------------------------------------------------------------ end to end
SMALL = [
    "train.iterations=1",
    "env.tasks_per_iter=2",
    "env.group_size=2",
    "env.eval_tasks=2",
    "env.max_steps=2",
    "env.train_tasks=4",
    "rollout.max_response_tokens=8",
    "sft.enabled=false",
    "log.progress=false",
    "log.tensorboard=false",
    "log.eval_before=false",
    "guard.val_every=0",
    "train.dynamic_sampling=false",
    "model.name_or_path=tiny",
]


def _train(tmp_path, extra, env=None):
    cmd = [sys.executable, "-m", "gigpo.cli", "train", *SMALL, f"output_dir={tmp_path}", "name=echo_run", *extra]
    e = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=900, cwd=tmp_path)


def _assert_trained_one_iteration(run: Path) -> None:
    import json

    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["tag"] == "train"]
    assert [x["iteration"] for x in train] == [1] and "actor/grad_norm" in train[0]
    assert any(x["tag"] == "eval_final" and "eval/success" in x for x in lines)


@pytest.mark.slow
def test_cli_trains_a_plugin_family_from_a_package_directory(tmp_path):
    res = _train(tmp_path, ["env.family=echo", f"env.family_module={PLUGIN_PKG}"])
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "echo_run"
    assert (run / "checkpoints" / "latest").exists()
    _assert_trained_one_iteration(run)


@pytest.mark.slow
def test_cli_trains_a_plugin_family_from_an_entry_point(tmp_path):
    site = tmp_path / "site"
    _dist_info(site, "gigpo_echo_family", "[gigpo.families]\necho = gigpo_echo_family:FAMILY_SPEC\n")
    path = os.pathsep.join([str(site), str(PLUGIN_DIR), os.environ.get("PYTHONPATH", "")])
    res = _train(tmp_path, ["env.family=echo"], env={"PYTHONPATH": path})
    assert res.returncode == 0, res.stderr[-3000:]
    _assert_trained_one_iteration(tmp_path / "echo_run")


def test_docs_example_is_the_fixture():
    doc = (ROOT / "docs" / "extending.md").read_text()
    example = doc.split("```python\nimport random\n", 1)[1].split("```", 1)[0]
    assert ("import random\n" + example) in PLUGIN_PKG.joinpath("__init__.py").read_text()


@pytest.mark.slow
def test_cli_trains_with_a_plugin_estimator_and_family(tmp_path):
    """An estimator registered in the user's own module is chosen from the CLI
    (algorithm.estimator_module), as a family is (env.family_module); gigpo is not edited."""
    est = ROOT / "tests" / "data" / "plugin_estimator" / "my_estimators.py"
    res = _train(
        tmp_path,
        [
            "env.family=echo",
            f"env.family_module={PLUGIN_PKG}",
            "algorithm.estimator=signed_grpo",
            f"algorithm.estimator_module={est}",
            "algorithm.mode=null",
        ],
    )
    assert res.returncode == 0, res.stderr[-3000:]
    _assert_trained_one_iteration(tmp_path / "echo_run")
    from gigpo.train.config import ConfigError, load_config

    cfg = load_config(
        None, ["algorithm.estimator=signed_grpo", f"algorithm.estimator_module={est}", "algorithm.options.scale=0.5"]
    )
    assert cfg.algorithm.estimator_options() == {"scale": 0.5}
    with pytest.raises(ConfigError, match="algorithm.options.shift.*no option 'shift'"):
        load_config(
            None, ["algorithm.estimator=signed_grpo", f"algorithm.estimator_module={est}", "algorithm.options.shift=1"]
        )
    bad = _train(
        tmp_path,
        [
            "env.family=echo",
            f"env.family_module={PLUGIN_PKG}",
            "algorithm.estimator=signed_grpo",
            f"algorithm.estimator_module={est}",
            "algorithm.step_weight=2",
            "name=bad",
        ],
    )
    assert bad.returncode == 2 and "'signed_grpo' has no option 'step_weight'" in bad.stderr


def _docs_commands() -> list[list[str]]:
    """The ``gigpo train`` commands of docs/extending.md's "Add an env family" section, as argv."""
    import shlex

    doc = (ROOT / "docs" / "extending.md").read_text().split("## Add an advantage estimator")[0]
    blocks = [b.split("```", 1)[0] for b in doc.split("```bash\n")[1:]]
    return [shlex.split(b.replace("\\\n", " ")) for b in blocks if b.startswith("gigpo train")]


def test_the_docs_example_command_runs(tmp_path):
    """docs/extending.md's first command, as written (from the repository root), with a one-step
    budget appended: the template config carries no other family's options."""
    cmd = _docs_commands()[0]
    assert cmd[:4] == ["gigpo", "train", "--config", "configs/template_family.yaml"]
    assert "env.family_module=tests/data/plugin_family/gigpo_echo_family" in cmd
    budget = [*SMALL, "env.max_steps=1", "guard.watchdog=false", f"output_dir={tmp_path}", "name=docs_run"]
    e = dict(os.environ, OMP_NUM_THREADS="1")
    argv = [sys.executable, "-m", "gigpo.cli", *cmd[1:], *budget]
    res = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    _assert_trained_one_iteration(tmp_path / "docs_run")


def test_the_template_config_names_no_other_family(registry, monkeypatch):
    monkeypatch.chdir(ROOT)  # the template's env.family_module is relative to the repository root
    cfg = load_config("configs/template_family.yaml", [])
    assert cfg.env.family == "echo" and cfg.env.task_kwargs == {} and cfg.env.kwargs == {}
    # the entry-point command clears the module key
    (cmd,) = [c for c in _docs_commands()[1:] if "env.family_module=" in c]
    assert load_config(cmd[3], [*cmd[4:], "env.family=webshop"]).env.family_module == ""


def test_the_make_tasks_contract_is_checked(registry, tmp_path, monkeypatch):
    from gigpo.envs import check_family, make_tasks

    registry.load_family_module(str(PLUGIN_PKG))
    check_family("echo")  # the docs' example keeps the contract
    # A family whose held-out set depends on n: a shuffle of range(n) reorders the first tasks.
    (tmp_path / "shuffled_fam.py").write_text(
        textwrap.dedent(
            """
            import random
            from gigpo.envs import FamilySpec, Task

            def make_tasks(split, n=None, seed=0):
                ids = list(range(n or 50))
                random.Random(seed).shuffle(ids)
                return [Task("shuffled", f"{split}{i}", split) for i in ids]

            FAMILY_SPEC = FamilySpec(name="shuffled", module=__name__, system_prompt="x", action_format="y")
            """
        )
    )
    registry.load_family_module(str(tmp_path / "shuffled_fam.py"))
    with pytest.raises(ValueError, match=r"'shuffled'.*first k tasks must not depend on n.*docs/extending.md"):
        check_family("shuffled")
    make_tasks("shuffled", "eval", n=8, seed=3)
    with pytest.raises(ValueError, match=r"'shuffled': make_tasks gave other first tasks for 'eval' with n=4"):
        make_tasks("shuffled", "eval", n=4, seed=3)
    with pytest.raises(ValueError, match=r"returned .*not a Task of family 'echo' and split 'train'"):
        from gigpo.envs import _check_tasks

        _check_tasks("echo", "train", 2, make_tasks("echo", "eval", n=2))
    # A run's preflight makes the held-out tasks as `gigpo eval` does, and then with the validation
    # tasks after them: the family's bug is a one-line error before anything is built.
    from gigpo.train.checks import check_tasks

    monkeypatch.chdir(ROOT)
    over = ["env.family=shuffled", "env.family_module=", "env.task_seed=11", "env.eval_tasks=4"]
    cfg = load_config("configs/template_family.yaml", [*over, "guard.val_every=5", "guard.val_tasks=4"])
    with pytest.raises(ConfigError, match=r"^env.family: env family 'shuffled': make_tasks gave other first tasks"):
        check_tasks(cfg)
    check_tasks(load_config("configs/template_family.yaml", [*over, "env.task_seed=12", "guard.val_every=0"]))
    sys.modules.pop("shuffled_fam", None)
