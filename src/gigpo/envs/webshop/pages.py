"""WebShop's pages in its ``simple`` text mode: the visible text nodes, and what can be clicked.

WebShop renders HTML templates and its text env joins the visible text nodes with `` [SEP] ``
(``convert_html_to_text(simple=True)``). Its clickables (``get_available_actions``) are the
lower-cased texts of the buttons and product links, then the option radio values. This module
produces both from the templates' structure (verl-agent's bundled WebShop copy), without HTML:

* search:  ``WebShop [SEP] Instruction: [SEP] <ins> [SEP] Search``
* results: ``Instruction: [SEP] <ins> [SEP] Back to Search [SEP] Page 1 (Total results: 50)
  [SEP] Next > [SEP] <ASIN> [SEP] <title> [SEP] <price> ...`` (``< Prev`` before ``Next >`` on
  pages > 1; like WebShop, ``Next >`` is always shown)
* item:    ``... Back to Search [SEP] < Prev [SEP] <option name> [SEP] <value> ... [SEP] <title>
  [SEP] Price: $x [SEP] Rating: r [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now``
* sub page (description / features / reviews / attributes): ``... Back to Search [SEP] < Prev [SEP] <content>``
* done:    ``Thank you for shopping with us! [SEP] ... [SEP] Your score (min 0.0, max 1.0) [SEP] <score>``
  (WebShop's done page also prints the hidden goal/purchase details; we keep the visible part).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

PRODUCT_WINDOW = 10  # products per results page (engine.py)
END_BUTTON, NEXT_PAGE, PREV_PAGE, BACK_TO_SEARCH = "Buy Now", "Next >", "< Prev", "Back to Search"
SUB_PAGES = ("Description", "Features", "Reviews", "Attributes")
SEP = " [SEP] "


@dataclass
class PageState:
    """Where the browser is. ``kind``: index | results | item | sub | done."""

    kind: str = "index"
    keywords: list[str] = field(default_factory=list)
    results: list[str] = field(default_factory=list)  # ASINs of the last search, best first
    page: int = 1
    asin: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    sub: str = ""
    score: float = 0.0


# A clickable: ("button", text) | ("product", ASIN) | ("option", option name)
Clickable = tuple[str, str]


def render(
    state: PageState, instruction: str, catalog, show_attrs: bool = False
) -> tuple[list[str], dict[str, Clickable]]:
    """Text parts of the current page and its clickables (lower-cased text -> what it is)."""
    buttons: list[str] = []
    links: list[tuple[str, str]] = []
    opts: list[tuple[str, str]] = []
    if state.kind == "index":
        parts = ["WebShop", "Instruction:", instruction, "Search"]
        buttons = ["Search"]
    elif state.kind == "done":
        parts = [
            "Thank you for shopping with us!",
            "Your code:",
            "(Paste it in your MTurk interface.)",
            "Purchased",
            "asin",
            str(state.asin),
            "options",
            json.dumps(state.options),
            "Your score (min 0.0, max 1.0)",
            str(state.score),
        ]
    else:
        parts = ["Instruction:", instruction, BACK_TO_SEARCH]
        buttons = [BACK_TO_SEARCH]
        if state.kind == "results":
            parts.append(f"Page {state.page} (Total results: {len(state.results)})")
            nav = ([PREV_PAGE] if state.page > 1 else []) + [NEXT_PAGE]
            parts += nav
            buttons += nav
            lo = (state.page - 1) * PRODUCT_WINDOW
            for asin in state.results[lo : lo + PRODUCT_WINDOW]:
                p = catalog.by_asin[asin]
                parts += [asin, p["Title"], p["Price"]]
                links.append((asin.lower(), asin))
        else:
            p = catalog.by_asin[state.asin]
            parts.append(PREV_PAGE)
            buttons.append(PREV_PAGE)
            if state.kind == "item":
                for name, values in p["options"].items():
                    parts.append(name)
                    parts += values
                    opts += [(v, name) for v in values]
                subs = [s for s in SUB_PAGES if s != "Attributes" or show_attrs]
                parts += [p["Title"], f"Price: {p['Price']}", f"Rating: {p['Rating']}", *subs, END_BUTTON]
                buttons += [*subs, END_BUTTON]
            else:
                parts += _sub_page_text(state.sub, p)
    clickables: dict[str, Clickable] = {b.lower(): ("button", b) for b in buttons}
    clickables.update({text: ("product", asin) for text, asin in links})
    clickables.update({value: ("option", name) for value, name in opts})
    return [t.strip() for t in parts if t and t.strip()], clickables


def _sub_page_text(sub: str, p: dict) -> list[str]:
    if sub == "Description":
        return [p["Description"] or "No Description"]
    if sub == "Features":
        return list(p["BulletPoints"])
    if sub == "Reviews":
        out: list[str] = []
        for r in p["Reviews"]:
            out += [f'"{r.get("title", "")}"', str(r.get("score", "")), str(r.get("body", ""))]
        return out
    return list(p["Attributes"])


def anchor_text(parts: list[str], instruction: str) -> str:
    """GiGPO's anchor for WebShop: the parts after the instruction, each quoted, joined by ``[SEP]``.

    verl-agent's ``WebshopEnvironmentManager.format_obs``; when the instruction is not on the page
    (done page) it falls back to the whole observation, as that code does.
    """
    try:
        i = parts.index(instruction)
    except ValueError:
        return SEP.join(parts)
    return SEP.join(f"'{p}'" for p in parts[i + 1 :])


def state_key(state: PageState) -> str:
    """WebShop's ``state_anchor``: the page and the query behind it (docs/algorithm.md#anchor-definitions).

    The page kind, the search keywords, the results page number, the product, its chosen options
    and the sub-page; the anchor text omits the query and the chosen options.
    """
    if state.kind == "index":
        return "index"
    if state.kind == "done":
        return f"done; score {state.score}"
    parts = [state.kind, f"query {' '.join(state.keywords)}", f"page {state.page}"]
    if state.kind in ("item", "sub"):
        parts += [f"item {state.asin}", "options " + ", ".join(f"{k}={v}" for k, v in sorted(state.options.items()))]
    if state.kind == "sub":
        parts.append(f"sub {state.sub}")
    return "; ".join(parts)
