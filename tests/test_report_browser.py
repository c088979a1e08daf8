"""The report page in a real headless Chromium: no errors, plots decode, the viewer renders and
reacts to its selects. Saves ``test-artifacts/report.png`` (gitignored) for a human look.

Needs PyPI ``playwright`` (dev extra) and a system Chromium at /usr/bin/chromium; never runs
``playwright install`` (no network here). Skips with the reason when either is missing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gigpo.report import write_report
from test_report import make_run_dir

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("GIGPO_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set GIGPO_CHROMIUM)")
    with sync_api.sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        except Exception as e:  # e.g. a Chromium too old/new for this playwright
            pytest.skip(f"Chromium at {CHROMIUM} did not start under playwright: {e}")
        yield b
        b.close()


def _open(browser, path: Path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.resolve().as_uri())
    page.wait_for_load_state("load")
    return page, errors, requests


def test_report_renders_in_chromium(browser, tmp_path):
    path = write_report(make_run_dir(tmp_path))
    page, errors, requests = _open(browser, path)
    widths = page.eval_on_selector_all("figure.panel img", "els => els.map(e => e.complete ? e.naturalWidth : 0)")
    assert len(widths) == 10 and min(widths) > 0, widths

    # viewer: first iteration and task rendered, 4 rollout columns, coloured shared-state steps
    assert page.input_value("#vw-iter") == "0"
    assert page.locator("#vw-cols .traj").count() == 4
    grouped = page.locator("#vw-cols .step.grouped")
    assert grouped.count() >= 10
    colours = set(grouped.evaluate_all("els => els.map(e => getComputedStyle(e).backgroundColor)"))
    assert colours and "rgba(0, 0, 0, 0)" not in colours
    # the looping "look" state: same group, same colour in every column it appears in
    looped = page.eval_on_selector_all(
        "#vw-cols .step.grouped", "els => els.map(e => [e.dataset.group, getComputedStyle(e).backgroundColor])"
    )
    by_group: dict[str, set] = {}
    for g, c in looped:
        by_group.setdefault(g, set()).add(c)
    assert all(len(c) == 1 for c in by_group.values())
    assert len({next(iter(c)) for c in by_group.values()}) == len(by_group)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)

    # switching iteration and task re-renders the columns with that selection's data
    first_ids = page.eval_on_selector_all("#vw-cols .traj", "els => els.map(e => e.dataset.traj)")
    page.select_option("#vw-task", "2")
    task2_ids = page.eval_on_selector_all("#vw-cols .traj", "els => els.map(e => e.dataset.traj)")
    assert task2_ids != first_ids and len(task2_ids) == 4
    page.select_option("#vw-iter", "1")
    assert page.input_value("#vw-task") == "0"
    assert "iteration 4" in page.locator("#vw-iter option:checked").inner_text()
    assert page.locator("#vw-cols .traj").count() == 4
    assert page.locator("#vw-cols .act.invalid").count() >= 1
    assert not errors, errors
    assert all(u.startswith(("file:", "data:")) for u in requests), requests
    page.close()


def test_report_without_trajectories_shows_note(browser, tmp_path):
    path = write_report(make_run_dir(tmp_path, estimator="grpo", traj_every=100, evals=False))
    page, errors, _ = _open(browser, path)
    assert "No trajectories were written" in page.inner_text("#vw-cols")
    assert page.locator("#vw-controls").is_hidden()
    assert not errors, errors
    page.close()


def _sokoban_run_dir(tmp_path, rollouts: int = 8) -> Path:
    """A run dir whose one trajectory file holds Sokoban steps in the env's own verl-agent render
    (cells ``" # \\t"``), some after an "Invalid action" line: ``rollouts`` rollouts of a 6x6 room
    (the size of configs/sokoban_tiny.yaml), the last one's final step in a 10x10 room."""
    import json

    from gigpo.envs.sokoban.env import INVALID_ACTION_MESSAGE as INVALID
    from gigpo.envs.sokoban.room import parse_level

    run = make_run_dir(tmp_path, iterations=1, traj_every=1, evals=False)
    small = parse_level(["######", "#__O_#", "#_PX_#", "#____#", "#_#__#", "######"]).render(style="verl-agent")
    big = parse_level(["#" * 10, *["#_PX____O#"] + ["#________#"] * 7, "#" * 10]).render(style="verl-agent")
    rows = []
    for tid in range(rollouts):
        for t in range(3):
            grid = big if (tid == rollouts - 1 and t == 2) else small
            anchor = grid if t == 0 else INVALID + "\n" + grid
            rows.append(
                dict(episode_id=0, traj_id=tid, step=t, task_id="train:6x6:0", task_type="6x6-1box", won=tid == 0,
                     anchor=anchor, observation=anchor, action="up", response="<action>up</action>", reward=-0.1,
                     valid=True, done=t == 2, A_E=0.1, A_S=-0.2, A=-0.1, step_group=t)
            )  # fmt: skip
    for f in (run / "trajectories").glob("iter_*.jsonl"):
        f.unlink()
    (run / "trajectories" / "iter_000001.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_sokoban_grids_render_as_grids_and_eight_rollouts_fit_at_1400px(browser, tmp_path):
    from gigpo.envs.sokoban.env import INVALID_ACTION_MESSAGE as INVALID

    page, errors, _ = _open(browser, write_report(_sokoban_run_dir(tmp_path)))
    cols = page.eval_on_selector("#vw-cols", "c => [c.querySelectorAll('.traj').length, c.scrollWidth, c.clientWidth]")
    assert cols[0] == 8 and cols[1] <= cols[2], cols  # all 8 columns side by side, no sideways scroll
    widths = page.eval_on_selector_all("#vw-cols .traj", "els => els.map(e => e.getBoundingClientRect().width)")
    assert max(widths) - min(widths) < 1, widths  # the wide room does not widen its column
    grids = page.eval_on_selector_all(
        "#vw-cols pre.grid",
        """els => els.map(e => { const cs = getComputedStyle(e), lh = parseFloat(cs.lineHeight);
            const step = e.closest('.step'), label = step && step.querySelector('.gl').getBoundingClientRect();
            return {ws: cs.whiteSpace, font: cs.fontFamily, text: e.textContent, lines: e.scrollHeight / lh,
                    fits: e.scrollWidth <= e.clientWidth, final: !step,
                    labelAbove: !step || label.bottom <= e.getBoundingClientRect().top + 0.5}; })""",
    )
    assert len(grids) == 8 * 3 + 8  # every step's anchor, and each rollout's end observation
    for g in grids:
        wide = g["text"].startswith("#   #   #   #   #   #   #   #   #   #")
        assert g["ws"] == "pre" and "monospace" in g["font"], g
        assert "\t" not in g["text"] and g["text"].split("\n")[0].startswith("#   #   #   #   #   #"), g["text"]
        assert round(g["lines"]) == (10 if wide else 6), g  # one line a row: nothing wrapped
        assert g["fits"] != wide, g  # a 6x6 room fits its column; a 10x10 one scrolls inside its block
        assert g["labelAbove"], g  # the "t=... group ..." label sits above the grid, not over it
    assert sum(g["text"].startswith("#   #   #   #   #   #   #   #   #   #") for g in grids) == 2
    # the prose line before a grid wraps as text, outside the grid block
    prose = page.eval_on_selector_all(
        "#vw-cols .step .obs .txt", "els => els.map(e => [e.textContent, getComputedStyle(e).whiteSpace])"
    )
    assert prose and all(t == INVALID and ws == "pre-wrap" for t, ws in prose), prose[:2]
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#viewer").screenshot(path=str(ARTIFACTS / "report-sokoban.png"))
    assert not errors, errors
    page.close()
