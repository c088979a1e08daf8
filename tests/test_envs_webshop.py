"""WebShop text env: pages and navigation, WebShop's reward, expert, splits, bad actions, file loader."""

from __future__ import annotations

import json
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo.envs import make_env as registry_make_env
from gigpo.envs import make_tasks as registry_make_tasks
from gigpo.envs.webshop import generate_catalog, get_reward, make_env, make_tasks, parse_action
from gigpo.envs.webshop.reward import normalize_color, title_nouns, token_set_ratio

SEP = " [SEP] "


@pytest.fixture(scope="module")
def env():
    return make_env()


@pytest.fixture(scope="module")
def eval_tasks():
    return make_tasks("eval", n=40, seed=1)


# ----------------------------------------------------------------------------- reward (goal.py)

PRODUCT = {
    "asin": "B000000001",
    "query": "hair extension",
    "name": "Lumora Clip Hair Extension Wig",
    "product_category": "Beauty & Personal Care › Hair Care › Hair Extensions",
    "Title": "Lumora Clip Hair Extension Wig",
    "Description": "Soft and full.",
    "BulletPoints": ["Heat resistant fibers"],
    "Attributes": ["natural looking", "clip in"],
}
GOAL = {
    "query": "hair extension",
    "name": PRODUCT["name"],
    "product_category": PRODUCT["product_category"],
    "attributes": ["natural looking", "heat resistant"],
    "goal_options": {"color": "dark brown", "size": "18 inch"},
    "price_upper": 40.0,
}
GOOD_OPTIONS = {"color": "dark brown", "size": "18 inch"}


def test_reward_full_match_is_one():
    # attrs: "natural looking" fuzzy-matches an attribute, "heat resistant" is found in the bullet
    # points; both options match; price 30 <= 40: (2 + 2 + 1) / (2 + 2 + 1) * r_type 1.0
    score, info = get_reward(PRODUCT, GOAL, price=30.0, options=GOOD_OPTIONS, verbose=True)
    assert score == 1.0 and info["r_type"] == 1.0 and info["r_att"] == 1.0 and info["r_option"] == 1.0


@pytest.mark.parametrize(
    "options, price, expected",
    [
        ({"color": "jet black", "size": "18 inch"}, 30.0, 4 / 5),  # wrong colour (fuzzy)
        ({"color": "dark brown", "size": "14 inch"}, 30.0, 4 / 5),  # wrong size (exact match only)
        ({"color": "jet black", "size": "14 inch"}, 30.0, 3 / 5),
        ({}, 30.0, 3 / 5),  # no option chosen
        (GOOD_OPTIONS, 45.0, 4 / 5),  # over the price bound
        ({"color": "jet black"}, 45.0, 2 / 5),
    ],
)
def test_reward_wrong_options_or_price_lower_it(options, price, expected):
    assert get_reward(PRODUCT, GOAL, price=price, options=options) == pytest.approx(expected)


def test_reward_wrong_type_lowers_it():
    # Different query and category; title nouns {vexo, hair, dryer} share 1 of the goal's 5
    # (lumora, clip, hair, extension, wig): title_score 0.2 is not > 0.2 -> r_type 0.5.
    dryer = dict(
        PRODUCT,
        query="hair dryer",
        name="Vexo Hair Dryer",
        Title="Vexo Hair Dryer",
        product_category="Electronics › Appliances › Hair Dryers",
    )
    score, info = get_reward(dryer, GOAL, price=30.0, options={}, verbose=True)
    assert info["r_type"] == 0.5 and info["title_score"] == pytest.approx(0.2)
    assert score == pytest.approx((2 + 0 + 1) / 5 * 0.5)
    # No shared title noun -> r_type 0 -> score 0 whatever else matches.
    dryer0 = dict(dryer, name="Vexo Blow Dryer", Title="Vexo Blow Dryer")
    assert get_reward(dryer0, GOAL, price=30.0, options=GOOD_OPTIONS) == 0.0
    # Same query alone keeps r_type 1 when enough nouns overlap.
    assert get_type_reward_value(dict(dryer, query="hair extension", name="Lumora Hair Extension")) == 1.0


def get_type_reward_value(product):
    from gigpo.envs.webshop.reward import get_type_reward

    return get_type_reward(product, GOAL)["r_type"]


def test_fuzzy_matching_follows_thefuzz():
    assert token_set_ratio("Natural-Looking!", "natural looking") == 100  # punctuation, case
    assert token_set_ratio("natural looking hair", "natural looking") == 100  # token *set*
    assert token_set_ratio("", "x") == 0 and token_set_ratio("ééé", "abc") == 0  # empty after processing
    assert token_set_ratio("brown", "black") <= 85
    assert normalize_color("navy blue") == "blue" and normalize_color("dark brown") == "brown"
    assert normalize_color("18 inch") == "18 inch"
    assert "hair" in title_nouns("Lumora Clip Hair Extension") and "natural" not in title_nouns("Natural Hair")


# ----------------------------------------------------------------------------- pages and navigation


def test_search_page_and_anchor(env, eval_tasks):
    obs, info = env.reset(eval_tasks[0])
    ins = eval_tasks[0].data["instruction"]
    assert obs == f"WebShop [SEP] Instruction: [SEP] {ins} [SEP] Search"
    assert info["anchor"] == "'Search'"
    assert info["admissible_actions"] == ["search[<your query>]", "click[search]"]
    assert info["instruction"] == ins and info["task_type"] == eval_tasks[0].task_type
    assert not info["won"] and info["score"] == 0.0


def test_navigation_search_results_paging_item_options_buy(env, eval_tasks):
    task = eval_tasks[0]
    env.reset(task)
    goal = env.catalog.goals[int(task.task_id)]
    obs1, r, done, info = env.step(f"search[{goal['query']}]")
    parts = obs1.split(SEP)
    assert parts[:4] == ["Instruction:", goal["instruction_text"], "Back to Search", "Page 1 (Total results: 50)"]
    assert parts[4] == "Next >" and "< Prev" not in parts
    asins = [p for p in parts if re.fullmatch(r"B0[0-9A-Z]{8}", p)]
    assert len(asins) == 10 and len(parts) == 5 + 3 * 10  # ASIN, title, price per product
    assert info["anchor"] == SEP.join(f"'{p}'" for p in parts[2:])
    assert info["admissible_actions"][:2] == ["click[back to search]", "click[next >]"]
    assert info["admissible_actions"][2:] == [f"click[{a.lower()}]" for a in asins]
    obs2, *_ = env.step("click[Next >]")  # element match is case-insensitive
    assert "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next >" in obs2
    assert not set(asins) & set(re.findall(r"B0[0-9A-Z]{8}", obs2))
    assert env.step("click[< prev]")[0] == obs1
    product = env.catalog.by_asin[asins[0]]
    obs, _, _, info = env.step(f"click[{asins[0].lower()}]")
    assert "Back to Search [SEP] < Prev [SEP] " in obs
    assert obs.endswith("Description [SEP] Features [SEP] Reviews [SEP] Buy Now")
    assert f"Price: {product['Price']}" in obs and product["Title"] in obs
    values = [v for vs in product["options"].values() for v in vs]
    assert info["admissible_actions"] == [
        "click[back to search]",
        "click[< prev]",
        "click[description]",
        "click[features]",
        "click[reviews]",
        "click[buy now]",
    ] + [f"click[{v}]" for v in values]
    item_obs = obs
    obs, *_ = env.step("click[features]")
    assert obs.split(SEP)[2:4] == ["Back to Search", "< Prev"] and product["BulletPoints"][0] in obs
    assert env.step("click[< prev]")[0] == item_obs
    name, vals = next(iter(product["options"].items()))
    env.step(f"click[{vals[0]}]")
    assert env.state.options == {name: vals[0]}
    obs, reward, done, info = env.step("click[buy now]")
    assert done and obs.startswith("Thank you for shopping with us!")
    expected = get_reward(product, goal, env.catalog.prices[asins[0]], {name: vals[0]})
    assert info["score"] == pytest.approx(expected) and reward == (10.0 if expected == 1.0 else 0.0)
    assert info["admissible_actions"] == []
    assert env.step("click[buy now]")[1:3] == (0.0, True)  # finished stays finished


def test_back_to_search_returns_to_search_page(env, eval_tasks):
    obs0, _ = env.reset(eval_tasks[1])
    env.step("search[shampoo]")
    assert env.step("click[back to search]")[0] == obs0


def test_reset_same_task_gives_identical_observation(eval_tasks):
    a, b = make_env(), make_env()
    t = eval_tasks[2]
    obs_a, info_a = a.reset(t)
    a.step("search[red]")
    assert a.reset(t) == (obs_a, info_a) == b.reset(t)


# ----------------------------------------------------------------------------- actions


BAD_ACTIONS = [
    "",
    " ",
    "click[]",
    "click[nonexistent button]",
    "search[]",
    "click[search]",
    "jump[now]",
    "buy now",
    "CLICK[next >]",
    "x" * 100_000,
    "[" * 50_000 + "]" * 3,
    "click[" + "é漢字\u202e\x00" + "]",
    "\n\n",
    None,
]


def test_bad_actions_never_raise_keep_page_and_count(env, eval_tasks):
    obs0, _ = env.reset(eval_tasks[3])
    for i, action in enumerate(BAD_ACTIONS, start=1):
        obs, reward, done, info = env.step(action)
        assert (obs, reward, done) == (obs0, 0.0, False), repr(action)[:60]
        assert info["step"] == env.steps == i


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab[]c \n", max_size=30))
def test_parse_action_equals_webshop_regex(action):
    m = re.match(r"(.+)\[(.+)\]", action)
    expected = (action, None) if m is None else m.groups()
    assert parse_action(action) == expected


# ----------------------------------------------------------------------------- expert, random agent


def _run(env, task, policy, max_steps=15):
    obs, info = env.reset(task)
    for _ in range(max_steps):
        obs, reward, done, info = env.step(policy(info))
        if done:
            return info["won"], info["score"], reward
    return False, 0.0, 0.0


def test_expert_succeeds_on_at_least_90_percent(env, eval_tasks):
    results = [_run(env, t, lambda info: env.expert_action()) for t in eval_tasks]
    assert sum(w for w, _, _ in results) >= 0.9 * len(eval_tasks)
    assert all(r == (10.0 if w else 0.0) for w, _, r in results)


def test_random_agent_rarely_succeeds(env, eval_tasks):
    rng = random.Random(0)
    words = "bar tea shoe hoodie speaker black large organic pack".split()

    def policy(info):
        a = rng.choice(info["admissible_actions"])
        return f"search[{' '.join(rng.sample(words, 2))}]" if a.startswith("search[") else a

    wins = sum(_run(env, t, policy)[0] for t in eval_tasks)
    assert wins <= 0.1 * len(eval_tasks)


# ----------------------------------------------------------------------------- tasks and splits


def test_train_eval_splits_are_disjoint_and_deterministic():
    train, evals = make_tasks("train"), make_tasks("eval")
    assert len(evals) == 500 and len(train) == len(generate_catalog().goals) - 500
    assert {t.task_id for t in train}.isdisjoint({t.task_id for t in evals})
    cat = generate_catalog()
    assert {cat.goals[int(t.task_id)]["asin"] for t in train}.isdisjoint(
        {cat.goals[int(t.task_id)]["asin"] for t in evals}
    )
    assert all(int(t.task_id) < 500 for t in evals)
    assert make_tasks("train", n=8, seed=3) == make_tasks("train", n=8, seed=3) != make_tasks("train", n=8, seed=4)
    assert {t.task_type for t in train} == {"beauty", "electronics", "fashion", "grocery", "garden"}
    assert registry_make_tasks("webshop", "eval", n=2)[0].family == "webshop"
    assert registry_make_env("webshop").family == "webshop"


def test_generated_instructions_read_like_webshop(eval_tasks):
    for t in eval_tasks:
        assert re.search(r", and price lower than \d+\.00 dollars$", t.data["instruction"])
    cat = generate_catalog()
    assert len(cat.products) >= 5000 and len({p["asin"] for p in cat.products}) == len(cat.products)


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="split"):
        make_tasks("test")
    with pytest.raises(ValueError, match="n=100000"):
        make_tasks("eval", n=100000)
    with pytest.raises(ValueError, match="num_products"):
        make_env(num_products=3)
    with pytest.raises(FileNotFoundError, match="items_shuffle"):
        make_env(data_dir="/nonexistent/webshop")


# ----------------------------------------------------------------------------- WebShop's own files


def _write_webshop_files(d, n=24):
    items, ins, human = [], {}, {}
    for i in range(n):
        asin = f"B0TEST{i:04d}"
        kind = ["hair extension", "desk lamp", "coffee mug"][i % 3]
        items.append(
            {
                "asin": asin,
                "category": "beauty" if i % 3 == 0 else "home",
                "query": kind.upper() + " ",
                "name": f"Brand{i} {kind.title()} Model {i}",
                "product_category": f"Root › Sub{i % 3} › {kind.title()}",
                "full_description": f"A {kind} number {i}.",
                "small_description": [f"Feature {i} of the {kind}"],
                "pricing": "$12.99" if i % 2 else "$20.00 - $25.00",
                "images": ["img.jpg"],
                "customization_options": {
                    "Color": [{"value": "Dark/Brown", "image": None}, {"value": "Jet Black", "image": None}],
                    "Size": [{"value": f"{10 + i} Inch", "image": None}],
                },
            }
        )
        ins[asin] = {
            "attributes": ["long lasting", f"style {i}"],
            "instruction": f"i need a {kind} that is long lasting",
            "instruction_attributes": ["long lasting"],
        }
        human[asin] = [
            {
                "instruction": f"i want a {kind} which is long lasting in jet black.",
                "instruction_attributes": ["long lasting"],
                "instruction_options": ["jet black"],
            }
        ]
    human[items[0]["asin"]].append({"instruction": "no attrs", "instruction_attributes": [], "instruction_options": []})
    (d / "items_shuffle_1000.json").write_text(json.dumps(items))
    (d / "items_ins_v2_1000.json").write_text(json.dumps(ins))
    (d / "items_human_ins.json").write_text(json.dumps(human))


def test_loader_reads_webshop_format_files(tmp_path, monkeypatch):
    _write_webshop_files(tmp_path)
    monkeypatch.setenv("WEBSHOP_DATA", str(tmp_path))
    env = make_env()  # picks the files up from WEBSHOP_DATA
    cat = env.catalog
    p = cat.by_asin["B0TEST0001"]
    assert p["options"] == {"color": ["dark | brown", "jet black"], "size": ["11 inch"]}
    assert p["pricing"] == [12.99] and p["Price"] == "$12.99" and p["query"] == "desk lamp"
    assert cat.by_asin["B0TEST0000"]["Price"] == "$20.0 to $25.0" and 20.0 <= cat.prices["B0TEST0000"] <= 25.0
    assert len(cat.goals) == 24  # the goal without attributes is skipped, as WebShop does
    assert all(g["instruction_text"].startswith("i want a") and "." not in g["instruction_text"][-1] for g in cat.goals)
    train, evals = make_tasks("train"), make_tasks("eval")
    assert len(train) == len(evals) == 12 and not {t.task_id for t in train} & {t.task_id for t in evals}
    wins = sum(_run(env, t, lambda info: env.expert_action())[0] for t in evals)
    assert wins >= 11
    synthetic = make_tasks("eval", data_dir=str(tmp_path), human_goals=False)
    assert len(synthetic) == 24  # 2 colours x 1 size per product, 48 goals, half eval
    assert "with color: " in synthetic[0].data["instruction"]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab c_-", max_size=14), st.text(alphabet="ab c_-", max_size=14))
def test_pure_python_fuzzy_matches_rapidfuzz(s1, s2):
    rapidfuzz = pytest.importorskip("rapidfuzz")
    from gigpo.envs.webshop import reward

    p1, p2 = reward._full_process(s1), reward._full_process(s2)
    assert p1 == rapidfuzz.utils.default_process(s1)
    if p1 and p2:
        assert reward._token_set_ratio_py(p1, p2) == pytest.approx(rapidfuzz.fuzz.token_set_ratio(p1, p2), abs=1e-9)


def test_reward_without_rapidfuzz_gives_same_scores(monkeypatch):
    from gigpo.envs.webshop import reward

    cases = [(GOOD_OPTIONS, 30.0), ({"color": "jet black", "size": "18 inch"}, 30.0), ({}, 45.0)]
    with_rf = [get_reward(PRODUCT, GOAL, price=p, options=o) for o, p in cases]
    monkeypatch.setattr(reward, "_rf_fuzz", None)
    assert [get_reward(PRODUCT, GOAL, price=p, options=o) for o, p in cases] == with_rf == [1.0, 0.8, 0.4]


def test_reset_rejects_tasks_without_a_goal_index(env):
    from gigpo.envs.base import Task

    with pytest.raises(ValueError, match="goal index"):
        env.reset(Task(family="webshop", task_id="abc"))
    with pytest.raises(ValueError, match="out of range"):
        env.reset(Task(family="webshop", task_id="999999"))


def test_state_anchor_names_the_query_and_the_chosen_options_the_anchor_omits(env, eval_tasks):
    """docs/algorithm.md#anchor-definitions: choosing an option leaves the page text (the anchor) as it
    was; the state key changes."""
    for task in eval_tasks:
        _, info = env.reset(task)
        assert info["state_anchor"] == "index"
        changed = []
        for _ in range(15):
            action = env.expert_action()
            _, _, done, nxt = env.step(action)
            if nxt["anchor"] == info["anchor"] and nxt["state_anchor"] != info["state_anchor"]:
                changed.append((action, info["state_anchor"], nxt["state_anchor"]))
            if action.startswith("search[") and not done:
                assert nxt["state_anchor"].startswith(f"results; query {action[7:-1]}; page 1")
            info = nxt
            if done:
                break
        if changed:
            break
    else:
        pytest.fail("no expert episode chose an option")
    action, before, after = changed[0]
    assert after.startswith(before.split("; options")[0]) and action[6:-1] in after
