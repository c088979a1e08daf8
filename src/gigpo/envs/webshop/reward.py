"""WebShop's purchase score, as ``web_agent_site/engine/goal.py`` (princeton-nlp/WebShop) computes it.

    score = r_type * (n_attr_matches + n_option_matches + r_price) / (n_goal_attrs + n_goal_options + 1)

* ``r_type`` (``get_type_reward``): 1.0 if the bought product matches the goal's query, or shares
  >= 2 category levels, or shares > 20 % of the goal title's nouns; 0.5 if none of those; then 0.1
  if the noun overlap is < 10 % and 0.0 if it is zero.
* attributes (``get_attribute_reward``): a goal attribute matches when fuzzy ``token_set_ratio`` > 85
  against one of the product's attributes, or when it is a substring of the title, features or
  description (lower-cased).
* options (``get_option_reward``): each *purchased* option value (colours normalised to a base
  colour) matches when it equals a goal option (``size``: exact) or fuzzy > 85 (others), or is a
  substring of title/features/description.
* ``r_price``: price <= the goal's upper bound (bool, counts 1).

One deliberate difference: WebShop finds title nouns with spaCy's ``en_core_web_lg`` POS tagger,
which is a ~600 MB download. :func:`title_nouns` approximates it offline (alphabetic tokens minus
stop words and common descriptive adjectives). It only enters ``r_type`` through ``title_score``.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

try:  # rapidfuzz is what thefuzz (WebShop's matcher) runs on; the pure-Python path gives the same ints
    from rapidfuzz import fuzz as _rf_fuzz
except ImportError:  # pragma: no cover - exercised by the equivalence test
    _rf_fuzz = None

# web_agent_site/engine/goal.py
EXACT_MATCH_OPTS = ["size"]
PRICE_RANGE = [10.0 * i for i in range(1, 100)]

# web_agent_site/engine/normalize.py (order matters: the first base colour found wins)
COLOR_SET = [
    "alabaster",
    "apricot",
    "aqua",
    "ash",
    "asphalt",
    "azure",
    "banana",
    "beige",
    "black",
    "blue",
    "blush",
    "bordeaux",
    "bronze",
    "brown",
    "burgundy",
    "camel",
    "camo",
    "caramel",
    "champagne",
    "charcoal",
    "cheetah",
    "chestnut",
    "chocolate",
    "christmas",
    "coffee",
    "cognac",
    "copper",
    "coral",
    "cranberry",
    "cream",
    "crystal",
    "dark",
    "denim",
    "eggplant",
    "elephant",
    "espresso",
    "fuchsia",
    "gold",
    "granite",
    "grape",
    "graphite",
    "grass",
    "gray",
    "green",
    "grey",
    "heather",
    "indigo",
    "ivory",
    "ivy",
    "khaki",
    "lavender",
    "lemon",
    "leopard",
    "light",
    "lilac",
    "lime",
    "magenta",
    "maroon",
    "mauve",
    "merlot",
    "midnight",
    "mint",
    "mocha",
    "multicolor",
    "mushroom",
    "mustard",
    "natural",
    "navy",
    "nude",
    "olive",
    "orange",
    "peach",
    "pewter",
    "pink",
    "plum",
    "purple",
    "rainbow",
    "red",
    "rose",
    "royal",
    "rust",
    "sand",
    "sapphire",
    "seashell",
    "silver",
    "skull",
    "slate",
    "steel",
    "stone",
    "stonewash",
    "sunflower",
    "tan",
    "taupe",
    "teal",
    "tiger",
    "turquoise",
    "violet",
    "walnut",
    "wheat",
    "white",
    "wine",
    "yellow",
]

_STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can did do does doing down during each few for from further had has
    have having he her here hers him his how i if in into is it its itself just me more most my no
    nor not now of off on once only or other our out over own same she should so some such than
    that the their them then there these they this those through to too under until up very was
    we were what when where which while who whom why will with you your pack count set piece pcs
    oz ounce ounces lb inch inches ml fl""".split()
)
# Words that spaCy tags ADJ/VERB/ADV in product titles (so they never count as type nouns).
_NON_NOUNS = frozenset(
    """new best premium natural organic long short large small medium mini big soft hard light dark
    heavy portable wireless waterproof professional classic modern vintage easy quick fast slow
    high low non free fresh dry wet clean gentle strong durable lightweight compact adjustable
    reusable rechargeable stainless extra super ultra deluxe original pure real sweet spicy
    salty hot cold warm cool cute elegant casual slim fit loose comfortable breathable washable
    sensitive daily nourishing moisturizing long-lasting lasting looking resistant proof based
    friendly safe certified made handmade raw whole plant vegan scented unscented""".split()
) | frozenset(COLOR_SET)
_TOKEN_RE = re.compile(r"[a-z]+")


def normalize_color(color_string: str) -> str:
    """The first base colour contained in ``color_string``, else the string itself (WebShop)."""
    for norm_color in COLOR_SET:
        if norm_color in color_string:
            return norm_color
    return color_string


_NON_ALNUM = re.compile(r"[^a-zA-Z0-9]")


def _full_process(s: str) -> str:
    """thefuzz's ``full_process(force_ascii=True)``: ASCII only, non-alphanumerics -> space, lower, trim."""
    return _NON_ALNUM.sub(" ", "".join(c for c in s if ord(c) < 128)).lower().strip()


def _ratio(a: str, b: str) -> float:
    """Indel similarity 100 * 2 * LCS / (len(a) + len(b)) (``fuzz.ratio``)."""
    if not a and not b:
        return 100.0
    if not a or not b:
        return 0.0
    prev = [0] * (len(b) + 1)
    for ca in a:
        cur = [0]
        for j, cb in enumerate(b):
            cur.append(prev[j] + 1 if ca == cb else max(prev[j + 1], cur[j]))
        prev = cur
    return 200.0 * prev[-1] / (len(a) + len(b))


def _token_set_ratio_py(p1: str, p2: str) -> float:
    """fuzzywuzzy's token_set_ratio on processed strings (max of 3 ratios over sorted token sets)."""
    t1, t2 = set(p1.split()), set(p2.split())
    sect = " ".join(sorted(t1 & t2))
    c12 = (sect + " " + " ".join(sorted(t1 - t2))).strip()
    c21 = (sect + " " + " ".join(sorted(t2 - t1))).strip()
    return max(_ratio(sect, c12), _ratio(sect, c21), _ratio(c12, c21))


def token_set_ratio(s1: str, s2: str) -> int:
    """``thefuzz.fuzz.token_set_ratio`` (what WebShop calls): an int in 0..100.

    thefuzz drops non-ASCII characters, lower-cases and blanks punctuation (``full_process``),
    returns 0 when either side is then empty, and rounds the score. Uses rapidfuzz when installed.
    """
    p1, p2 = _full_process(s1), _full_process(s2)
    if not p1 or not p2:
        return 0
    score = _rf_fuzz.token_set_ratio(p1, p2) if _rf_fuzz is not None else _token_set_ratio_py(p1, p2)
    return int(round(score))


def title_nouns(title: str) -> list[str]:
    """Lower-cased noun-like tokens of a product title (offline stand-in for spaCy NOUN/PROPN)."""
    return [t for t in _TOKEN_RE.findall(title.lower()) if t not in _STOPWORDS and t not in _NON_NOUNS and len(t) > 1]


def get_type_reward(purchased_product: Mapping[str, Any], goal: Mapping[str, Any]) -> dict:
    """``r_type`` and its parts: does the bought product have the goal's type? (WebShop)."""
    query_match = purchased_product["query"] == goal["query"]
    purchased_cat = [x.strip() for x in purchased_product["product_category"].split("›")]
    goal_cat = [x.strip() for x in goal["product_category"].split("›")]
    category_match = len(set(purchased_cat) & set(goal_cat)) >= 2

    purchased_type = title_nouns(purchased_product["name"])
    desired_type = title_nouns(goal["name"])
    n_intersect = len(set(purchased_type) & set(desired_type))
    title_score = 0.2 if len(desired_type) == 0 else n_intersect / len(desired_type)

    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return dict(r_type=r_type, query_match=query_match, category_match=category_match, title_score=title_score)


def _in_text(needle: str, product: Mapping[str, Any]) -> bool:
    return (
        needle in product["Title"].lower()
        or needle in " ".join(product["BulletPoints"]).lower()
        or needle in product["Description"].lower()
    )


def get_attribute_reward(purchased_product: Mapping[str, Any], goal: Mapping[str, Any]) -> tuple[float, int]:
    """(fraction, count) of goal attributes the bought product has (WebShop)."""
    goal_attrs = goal["attributes"]
    n = 0
    for g_attr in goal_attrs:
        matched = any(token_set_ratio(p_attr, g_attr) > 85 for p_attr in purchased_product["Attributes"])
        if matched or _in_text(g_attr, purchased_product):
            n += 1
    return n / len(goal_attrs), n


def get_option_reward(
    purchased_product: Mapping[str, Any], goal_options: list[str], purchased_options: Mapping[str, str]
) -> tuple[float | None, int]:
    """(fraction or None, count) of purchased options that match a goal option (WebShop)."""
    purchased = {k: normalize_color(v) for k, v in purchased_options.items()}
    goals = [normalize_color(o) for o in goal_options]
    n = 0
    for key, value in purchased.items():
        if key.lower() in EXACT_MATCH_OPTS:
            matched = value in goals
        else:
            matched = any(token_set_ratio(g, value) > 85 for g in goals)
        if matched or _in_text(value, purchased_product):
            n += 1
    return (n / len(goals) if goals else None), n


def get_reward(
    purchased_product: Mapping[str, Any],
    goal: Mapping[str, Any],
    price: float,
    options: Mapping[str, str],
    verbose: bool = False,
):
    """WebShop's purchase score in [0, 1] (``verbose``: also the parts, as WebShop's ``info``).

    Args:
        purchased_product: product record (``Title``, ``BulletPoints``, ``Description``,
            ``Attributes``, ``query``, ``product_category``, ``name``).
        goal: goal record (``attributes``, ``goal_options`` dict or list, ``price_upper``,
            ``query``, ``product_category``, ``name``).
        price: the price the product was bought at.
        options: option name -> chosen value, as selected on the item page.
    """
    r_type = get_type_reward(purchased_product, goal)
    r_price = (price <= goal["price_upper"]) if goal["price_upper"] > 0 else None
    r_att, n_att = get_attribute_reward(purchased_product, goal)
    goal_options = goal["goal_options"]
    goal_option_values = list(goal_options.values()) if isinstance(goal_options, dict) else list(goal_options)
    r_option, n_opt = get_option_reward(purchased_product, goal_option_values, options)
    denom = len(goal["attributes"]) + len(goal_options) + 1
    # WebShop adds the bool r_price directly (None would raise there too; price_upper is never <= 0).
    total = (n_att + n_opt + float(bool(r_price))) / denom * r_type["r_type"]
    if not verbose:
        return total
    info = dict(
        r_type=r_type["r_type"],
        r_att=r_att,
        w_att=len(goal["attributes"]) / denom,
        query_match=r_type["query_match"],
        category_match=r_type["category_match"],
        title_score=r_type["title_score"],
    )
    if r_option is not None:
        info.update(r_option=r_option, w_option=len(goal_options) / denom)
    if r_price is not None:
        info.update(r_price=r_price, w_price=1 / denom)
    return total, info
