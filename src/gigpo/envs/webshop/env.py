"""``WebShopEnv``: WebShop's text environment (``web_agent_text_env.WebAgentTextEnv``, simple text mode).

Actions are ``search[keywords]`` and ``click[element]``; the element is matched lower-cased against
the page's clickables. Anything else (unknown element, malformed, empty, huge) leaves the page as
it is and counts as a step, as in WebShop. ``click[buy now]`` ends the episode with WebShop's
purchase score; the agent's reward is 10 iff that score is 1.0 (verl-agent; docs/algorithm.md#anchors).
"""

from __future__ import annotations

from gigpo.envs.base import Task
from gigpo.envs.webshop import pages
from gigpo.envs.webshop.catalog import Catalog, resolve_catalog
from gigpo.envs.webshop.pages import BACK_TO_SEARCH, END_BUTTON, NEXT_PAGE, PREV_PAGE, SUB_PAGES, PageState
from gigpo.envs.webshop.reward import get_reward
from gigpo.envs.webshop.search import get_search

SUCCESS_REWARD = 10.0


def parse_action(action: str) -> tuple[str, str | None]:
    """``re.match(r'(.+)\\[(.+)\\]', action)`` as WebShop's ``parse_action``, in linear time.

    The regex's backtracking is quadratic on long bracket-heavy strings; this finds the same split:
    on the first line, the last ``]`` and the last ``[`` at least two characters before it.
    """
    line = action.split("\n", 1)[0]
    close = line.rfind("]")
    open_ = line.rfind("[", 1, max(close - 1, 1)) if close >= 3 else -1
    if open_ < 1:
        return action, None
    return line[:open_], line[open_ + 1 : close]


class WebShopEnv:
    """One WebShop shopping episode. See the module docstring; ``info`` keys are in ``gigpo.envs.base``."""

    family = "webshop"

    def __init__(
        self,
        data_dir: str | None = None,
        seed: int = 0,
        num_products: int = 5000,
        human_goals: bool = True,
        show_attrs: bool = False,
    ) -> None:
        self.spec = dict(data_dir=data_dir, seed=seed, num_products=num_products, human_goals=human_goals)
        self.catalog: Catalog = resolve_catalog(**self.spec)
        self.show_attrs = show_attrs
        self.goal: dict | None = None
        self.state = PageState()
        self._parts: list[str] = []
        self._clickables: dict = {}
        self._expert_fallback = False
        self.steps = 0  # steps since reset, invalid actions included

    # ------------------------------------------------------------------ protocol

    def reset(self, task: Task) -> tuple[str, dict]:
        """Go to the search page of ``task``'s goal (``task.data['goal_index']``)."""
        spec = dict(task.data.get("catalog", {}))
        if spec and spec != self.spec:  # the task names another catalog: switch (cached)
            self.spec = spec
            self.catalog = resolve_catalog(**spec)
        try:
            idx = int(task.data.get("goal_index", task.task_id))
        except (TypeError, ValueError):
            raise ValueError(
                f"WebShop task {task.task_id!r}: need an integer goal index in task.data['goal_index'] "
                "or task_id; build tasks with gigpo.envs.webshop.make_tasks"
            ) from None
        if not 0 <= idx < len(self.catalog.goals):
            raise ValueError(f"goal_index {idx} out of range [0, {len(self.catalog.goals)}) for task {task.task_id!r}")
        self.goal = self.catalog.goals[idx]
        self.task_type = task.task_type or self.goal["category"]
        self.state = PageState()
        self._expert_fallback = False
        self.steps = 0
        return self._observe(won=False, score=0.0)

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        """Apply ``action``; returns (observation, reward, done, info)."""
        if self.goal is None:
            raise RuntimeError("call reset(task) before step()")
        self.steps += 1
        if self.state.kind == "done":  # finished: nothing changes
            obs, info = self._observe(won=self.state.score == 1.0, score=self.state.score)
            return obs, 0.0, True, info
        action = action if isinstance(action, str) else str(action)
        name, arg = parse_action(action)
        arg = arg.lower() if arg is not None else None
        done = False
        if name == "search" and arg:
            self._search(arg.split(" "), page=1)
        elif name == "click" and arg in self._clickables and arg != "search":
            done = self._click(arg)
        score = self.state.score if done else 0.0
        won = done and score == 1.0
        obs, info = self._observe(won=won, score=score)
        return obs, (SUCCESS_REWARD if won else 0.0), done, info

    def close(self) -> None:
        self.goal = None

    # ------------------------------------------------------------------ transitions

    def _search(self, keywords: list[str], page: int) -> None:
        self.state = PageState(
            kind="results", keywords=keywords, page=page, results=get_search(self.catalog).search(keywords)
        )

    def _click(self, arg: str) -> bool:
        kind, value = self._clickables[arg]
        s = self.state
        if kind == "button" and value == END_BUTTON:
            product = self.catalog.by_asin[s.asin]
            s.score = float(get_reward(product, self.goal, price=self.catalog.prices[s.asin], options=s.options))
            s.kind = "done"
            return True
        if kind == "button" and value == BACK_TO_SEARCH:
            self.state = PageState()
        elif kind == "button" and value == NEXT_PAGE and s.kind == "results":
            s.page += 1
        elif kind == "button" and value == PREV_PAGE and s.kind == "results":
            s.page -= 1
        elif kind == "button" and value == PREV_PAGE and s.kind == "sub":
            s.kind = "item"
        elif kind == "button" and value == PREV_PAGE and s.kind == "item":
            # back to the results page; WebShop's search_results resets the chosen options
            self.state = PageState(kind="results", keywords=s.keywords, page=s.page, results=s.results)
        elif kind == "button" and value in SUB_PAGES:
            s.kind, s.sub = "sub", value
        elif kind == "product":
            s.kind, s.asin, s.options = "item", value, {}
        elif kind == "option":
            s.options[value] = arg
        return False

    def _observe(self, won: bool, score: float) -> tuple[str, dict]:
        ins = self.goal["instruction_text"].strip()
        self._parts, self._clickables = pages.render(self.state, ins, self.catalog, self.show_attrs)
        obs = pages.SEP.join(self._parts)
        has_search_bar = self.state.kind == "index"
        admissible = (["search[<your query>]"] if has_search_bar else []) + [f"click[{c}]" for c in self._clickables]
        info = {
            "won": bool(won),
            "score": float(score),
            "anchor": pages.anchor_text(self._parts, ins),
            "state_anchor": pages.state_key(self.state),
            "admissible_actions": admissible,
            "available_actions": {"has_search_bar": has_search_bar, "clickables": list(self._clickables)},
            "instruction": ins,
            "task_type": self.task_type,
            "step": self.steps,
        }
        return obs, info

    # ------------------------------------------------------------------ expert

    def expert_action(self) -> str:
        """Search the instruction's words, page to the goal product (else search its title), pick the
        goal options, buy."""
        g, s = self.goal, self.state
        if g is None or s.kind == "done":
            return "click[buy now]"
        target = g["asin"]
        if s.kind == "index":
            if self._expert_fallback:
                return f"search[{self.catalog.by_asin[target]['Title'].lower()}]"
            return f"search[{expert_query(g['instruction_text'])}]"
        if s.kind == "results":
            lo = (s.page - 1) * pages.PRODUCT_WINDOW
            if target in s.results[lo : lo + pages.PRODUCT_WINDOW]:
                return f"click[{target.lower()}]"
            if target in s.results[lo + pages.PRODUCT_WINDOW :]:
                return "click[next >]"
            if target in s.results[:lo]:
                return "click[< prev]"
            self._expert_fallback = True
            return "click[back to search]"
        if s.kind == "sub" or (s.kind == "item" and s.asin != target):
            return "click[< prev]"
        goal_opts = g["goal_options"]
        wanted = goal_opts.values() if isinstance(goal_opts, dict) else goal_opts
        product_opts = self.catalog.by_asin[target]["options"]
        for value in wanted:
            for name, values in product_opts.items():
                if value in values and s.options.get(name) != value:
                    return f"click[{value}]"
        return "click[buy now]"


def expert_query(instruction: str) -> str:
    """The instruction's key words: without the price clause, option labels and punctuation."""
    text = instruction.split(", and price lower than")[0].lower()
    for label in ("color:", "size:", "flavor:", "scent:"):
        text = text.replace(label, " ")
    return " ".join(w.strip(",.;") for w in text.split() if w.strip(",.;"))
