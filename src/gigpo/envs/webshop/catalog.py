"""Product catalogs and goals for WebShop: a generated one (default, offline) and WebShop's own files.

A product record uses WebShop's field names after ``load_products`` (``engine.py``): ``asin``,
``category``, ``query``, ``name``, ``product_category``, ``Title``, ``Description``, ``BulletPoints``
(list), ``Attributes`` (list), ``options`` (name -> list of lower-case values), ``pricing``
(list of floats), ``Price`` (display string), ``Rating``, ``Reviews``.

A goal record uses WebShop's ``get_goals`` fields: ``asin``, ``category``, ``query``, ``name``,
``product_category``, ``instruction_text``, ``attributes``, ``price_upper``, ``goal_options``.

Goals are shuffled with ``random.seed(233)`` as WebShop's ``SimServer`` does; goal indices < 500
are the eval split and >= 500 the train split (verl-agent's WebShop env; docs/algorithm.md#rollout).
"""

from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from pathlib import Path

from gigpo.envs.webshop import vocab
from gigpo.envs.webshop.reward import PRICE_RANGE

EVAL_GOALS = 500  # goal index < 500: eval split; >= 500: train split
GOAL_SHUFFLE_SEED = 233  # web_agent_text_env.SimServer


@dataclass
class Catalog:
    """Products, their prices and the goals (tasks) over them."""

    products: list[dict]
    prices: dict[str, float]  # asin -> price the product sells at
    goals: list[dict]
    key: tuple = ()  # identifies the catalog (for caches)
    by_asin: dict[str, dict] = field(init=False)

    def __post_init__(self) -> None:
        self.by_asin = {p["asin"]: p for p in self.products}

    def split_indices(self, split: str) -> list[int]:
        """Goal indices of ``split`` (``eval``: < 500, ``train``: >= 500)."""
        # Small catalogs (tests, user files) keep half their goals for eval so both splits exist.
        n_eval = min(EVAL_GOALS, len(self.goals) // 2)
        return list(range(n_eval)) if split == "eval" else list(range(n_eval, len(self.goals)))


def _price_upper(price: float, rng: random.Random) -> tuple[float, str]:
    """WebShop's goal price bound: the larger of two draws among the next 4 multiples of 10."""
    price_range = [p for p in PRICE_RANGE if p > price][:4]
    if len(price_range) >= 2:
        _, upper = sorted(rng.sample(price_range, 2))
        return upper, f", and price lower than {upper:.2f} dollars"
    return 1000000, ""


# ----------------------------------------------------------------------------- generated catalog


_ASIN_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _make_product(i: int, asin: str, rng: random.Random) -> dict:
    category = vocab_categories()[i % len(vocab_categories())]
    noun, path, attr_pool, option_spec, (lo, hi) = rng.choice(vocab.PRODUCT_TYPES[category])
    brand = rng.choice(vocab.BRANDS)
    attrs = rng.sample(attr_pool, rng.randint(2, min(4, len(attr_pool))))
    options = {}
    for name, values in option_spec.items():
        options[name] = sorted(rng.sample(values, rng.randint(min(2, len(values)), len(values))), key=values.index)
    descriptor = rng.choice(vocab.DESCRIPTORS)
    title = f"{brand} {descriptor.title()} {noun.title()}, {', '.join(a.title() for a in attrs[:2])}"
    if len(attrs) > 2:
        title += f" - {attrs[2].title()}"
    price = round(rng.uniform(lo, hi), 2)
    bullets = [f"{a.capitalize()}: our {noun} is designed to be {a}." for a in attrs]
    bullets.append(f"Satisfaction guaranteed: contact {brand} support for any question.")
    description = f"The {brand} {noun} is a {descriptor} choice for everyday use. " + " ".join(
        f"It is {a}." for a in attrs
    )
    reviews = [
        {"title": rng.choice(vocab.REVIEW_TITLES), "score": rng.randint(1, 5), "body": rng.choice(vocab.REVIEW_BODIES)}
        for _ in range(rng.randint(0, 3))
    ]
    rating = round(sum(r["score"] for r in reviews) / len(reviews), 1) if reviews else "N.A."
    return {
        "asin": asin,
        "category": category,
        "query": noun,
        "name": title,
        "product_category": f"{vocab.CATEGORY_ROOTS[category]} › {path}",
        "Title": title,
        "Description": description,
        "BulletPoints": bullets,
        "Attributes": attrs,
        "options": options,
        "pricing": [price],
        "Price": f"${price}",
        "Rating": rating,
        "Reviews": reviews,
    }


def vocab_categories() -> list[str]:
    return list(vocab.PRODUCT_TYPES)


def _make_goal(product: dict, price: float, rng: random.Random) -> dict:
    attrs = rng.sample(product["Attributes"], rng.randint(1, min(3, len(product["Attributes"]))))
    goal_options = {name: rng.choice(values) for name, values in product["options"].items()}
    attr_text = " and ".join(attrs)
    instruction = f"{rng.choice(vocab.INSTRUCTION_OPENERS)} a {product['query']} that is {attr_text}"
    option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
    instruction += f" with {option_text}" if option_text else ""
    upper, price_text = _price_upper(price, rng)
    return {
        "asin": product["asin"],
        "category": product["category"],
        "query": product["query"],
        "name": product["name"],
        "product_category": product["product_category"],
        "instruction_text": instruction + price_text,
        "attributes": attrs,
        "price_upper": upper,
        "goal_options": goal_options,
        "weight": 1,
    }


@lru_cache(maxsize=4)
def generate_catalog(seed: int = 0, num_products: int = 5000) -> Catalog:
    """A deterministic catalog of ``num_products`` products over 5 categories, one goal per product.

    Raises:
        ValueError: ``num_products`` < 10 (a results page needs products to page through).
    """
    if num_products < 10:
        raise ValueError(f"num_products must be >= 10, got {num_products}; the default is 5000")
    rng = random.Random(seed)
    asins: list[str] = []
    seen: set[str] = set()
    while len(asins) < num_products:  # Amazon-style ids: "B0" + 8 characters
        a = "B0" + "".join(rng.choices(_ASIN_CHARS, k=8))
        if a not in seen:
            seen.add(a)
            asins.append(a)
    products = [_make_product(i, a, rng) for i, a in enumerate(asins)]
    prices = {p["asin"]: p["pricing"][0] for p in products}
    goals = [_make_goal(p, prices[p["asin"]], rng) for p in products]
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    return Catalog(products, prices, goals, key=("generated", seed, num_products))


# ----------------------------------------------------------------------------- WebShop's own files


def _first(data_dir: Path, patterns: list[str]) -> Path | None:
    for pat in patterns:
        hits = sorted(data_dir.glob(pat))
        if hits:
            return hits[0]
    return None


def _convert_product(p: dict, attributes: dict, ratings: dict, reviews: dict) -> dict | None:
    """One raw ``items_shuffle*.json`` record -> WebShop's loaded product record (``load_products``)."""
    asin = p.get("asin")
    if not asin or asin == "nan" or len(asin) > 10:
        return None
    pricing = p.get("pricing")
    if not pricing:
        pricing, price_tag = [100.0], "$100.0"
    else:
        pricing = [float(Decimal(re.sub(r"[^\d.]", "", x))) for x in pricing.split("$")[1:]]
        price_tag = f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}"
        pricing = pricing[:2]
    options: dict[str, list[str]] = {}
    for name, contents in (p.get("customization_options") or {}).items():
        if contents is None:
            continue
        options[name.lower()] = [c["value"].strip().replace("/", " | ").lower() for c in contents]
    small = p.get("small_description", [])
    return {
        "asin": asin,
        "category": p.get("category", ""),
        "query": p.get("query", "").lower().strip(),
        "name": p.get("name", ""),
        "product_category": p.get("product_category", ""),
        "Title": p.get("name", ""),
        "Description": p.get("full_description", "") or "",
        "BulletPoints": small if isinstance(small, list) else [small],
        "Attributes": attributes.get(asin, {}).get("attributes", ["DUMMY_ATTR"]),
        "options": options,
        "pricing": pricing,
        "Price": price_tag,
        "Rating": ratings.get(asin, "N.A."),
        "Reviews": reviews.get(asin, []),
    }


@lru_cache(maxsize=2)
def load_webshop_catalog(data_dir: str, human_goals: bool = True, seed: int = 0) -> Catalog:
    """WebShop's product files in ``data_dir`` -> Catalog (``engine.load_products`` + ``goal.get_goals``).

    Reads ``items_shuffle*.json`` (products), ``items_ins_v2*.json`` (attributes and synthetic
    instructions), and with ``human_goals`` ``items_human_ins.json`` (human instructions);
    ``items_reviews*.json`` if present. Product prices within a price range are drawn as WebShop
    does (``random.uniform``), seeded by ``seed``.

    Raises:
        FileNotFoundError: a required file is missing (names the file and where it was looked for).
    """
    d = Path(data_dir).expanduser()
    items = _first(d, ["items_shuffle*.json"])
    attrs_path = _first(d, ["items_ins_v2*.json"])
    if items is None or attrs_path is None:
        raise FileNotFoundError(
            f"WebShop data not found in {d}: need items_shuffle*.json and items_ins_v2*.json "
            "(WebShop's setup.sh downloads them into data/); set WEBSHOP_DATA or pass data_dir="
        )
    human_path = d / "items_human_ins.json"
    if human_goals and not human_path.exists():
        raise FileNotFoundError(f"{human_path} not found; pass human_goals=False to use synthetic goals")
    raw = json.loads(items.read_text())
    attributes = json.loads(attrs_path.read_text())
    ratings, reviews = {}, {}
    rev_path = _first(d, ["items_reviews*.json", "reviews*.json"])
    if rev_path is not None:
        for r in json.loads(rev_path.read_text()):
            reviews[r["asin"]] = [
                {
                    "title": x.get("title", ""),
                    "score": x.get("score", x.get("stars", 0)),
                    "body": x.get("body", x.get("review", "")),
                }
                for x in r.get("reviews", [])
            ]
            ratings[r["asin"]] = r.get("average_rating", "N.A.")
    products, seen = [], set()
    for p in raw:
        prod = _convert_product(p, attributes, ratings, reviews)
        if prod is not None and prod["asin"] not in seen:
            seen.add(prod["asin"])
            products.append(prod)
    rng = random.Random(seed)
    prices = {
        p["asin"]: (p["pricing"][0] if len(p["pricing"]) == 1 else rng.uniform(*p["pricing"][:2])) for p in products
    }
    goals = (
        _human_goals(products, prices, json.loads(human_path.read_text()), rng)
        if human_goals
        else (_synthetic_goals(products, prices, attributes, rng))
    )
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    return Catalog(products, prices, goals, key=("webshop", str(d), human_goals, seed))


def _base_goal(p: dict) -> dict:
    return {k: p[k] for k in ("asin", "category", "query", "name", "product_category")}


def _human_goals(products: list[dict], prices: dict, human: dict, rng: random.Random) -> list[dict]:
    goals = []
    for p in products:
        for ins in human.get(p["asin"], []):
            if not ins.get("instruction_attributes"):
                continue  # WebShop skips goals without attributes
            upper, price_text = _price_upper(prices[p["asin"]], rng)
            goals.append(
                {
                    **_base_goal(p),
                    "instruction_text": ins["instruction"].strip(".") + price_text,
                    "attributes": ins["instruction_attributes"],
                    "price_upper": upper,
                    "goal_options": ins.get("instruction_options", []),
                    "weight": 1,
                }
            )
    return goals


def _synthetic_goals(products: list[dict], prices: dict, attributes: dict, rng: random.Random) -> list[dict]:
    import itertools

    goals = []
    for p in products:
        a = attributes.get(p["asin"], {})
        if not a.get("instruction") or not a.get("instruction_attributes"):
            continue
        upper, price_text = _price_upper(prices[p["asin"]], rng)
        names = sorted(p["options"])
        for combo in itertools.product(*(p["options"][n] for n in names)):
            goal_options = dict(zip(names, combo))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = " with " + option_text if option_text else ""
            goals.append(
                {
                    **_base_goal(p),
                    "instruction_text": f"{a['instruction']}{option_text}{price_text}",
                    "attributes": a["instruction_attributes"],
                    "price_upper": upper,
                    "goal_options": goal_options,
                    "weight": 1,
                }
            )
    return goals


def resolve_catalog(
    data_dir: str | None = None, seed: int = 0, num_products: int = 5000, human_goals: bool = True
) -> Catalog:
    """The catalog a user asked for: WebShop's files (``data_dir`` or env var ``WEBSHOP_DATA``), else generated."""
    data_dir = data_dir or os.environ.get("WEBSHOP_DATA") or None
    if data_dir:
        return load_webshop_catalog(str(data_dir), human_goals, seed)
    return generate_catalog(seed, num_products)
