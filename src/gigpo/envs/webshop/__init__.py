"""WebShop (Yao et al. 2022) text environment, implemented in the project.

Pages, actions and the purchase score follow princeton-nlp/WebShop's text mode; the default
catalog is generated offline (5,000 products over 5 categories, one goal each); WebShop's own
``items_shuffle*.json`` / ``items_ins_v2*.json`` / ``items_human_ins.json`` load when pointed at
(``data_dir=`` or env var ``WEBSHOP_DATA``).

    env = make_env()
    task = make_tasks("train", n=1)[0]
    obs, info = env.reset(task)          # "WebShop [SEP] Instruction: [SEP] i need ... [SEP] Search"
    obs, reward, done, info = env.step("search[hair extension natural looking]")
"""

from __future__ import annotations

import random

from gigpo.envs.base import SPLITS, Task
from gigpo.envs.webshop.catalog import Catalog, generate_catalog, load_webshop_catalog, resolve_catalog
from gigpo.envs.webshop.env import WebShopEnv, parse_action
from gigpo.envs.webshop.reward import get_reward


def make_env(**kwargs) -> WebShopEnv:
    """A :class:`WebShopEnv`; kwargs: ``data_dir``, ``seed``, ``num_products``, ``human_goals``, ``show_attrs``."""
    return WebShopEnv(**kwargs)


def make_tasks(
    split: str,
    n: int | None = None,
    seed: int = 0,
    *,
    data_dir: str | None = None,
    catalog_seed: int = 0,
    num_products: int = 5000,
    human_goals: bool = True,
) -> list[Task]:
    """Tasks of ``split`` (eval: goal index < 500, train: >= 500).

    ``n=None``: every goal of the split in index order; otherwise ``n`` goals drawn without
    replacement with ``random.Random(seed)``. ``catalog_seed`` picks the generated catalog.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    for name, v in (("num_products", num_products), ("catalog_seed", catalog_seed)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"webshop {name} must be an int, got {v!r}")
    spec = dict(data_dir=data_dir, seed=catalog_seed, num_products=num_products, human_goals=human_goals)
    catalog = resolve_catalog(**spec)
    idx = catalog.split_indices(split)
    if n is not None:
        if not 0 <= n <= len(idx):
            raise ValueError(f"n={n} but the {split} split has {len(idx)} goals; pass n <= {len(idx)} or n=None")
        idx = random.Random(seed).sample(idx, n)
    return [
        Task(
            family="webshop",
            task_id=str(i),
            split=split,
            task_type=catalog.goals[i]["category"],
            data={"goal_index": i, "instruction": catalog.goals[i]["instruction_text"], "catalog": spec},
        )
        for i in idx
    ]


__all__ = [
    "Catalog",
    "WebShopEnv",
    "generate_catalog",
    "get_reward",
    "load_webshop_catalog",
    "make_env",
    "make_tasks",
    "parse_action",
    "resolve_catalog",
]
