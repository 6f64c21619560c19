"""The dashboard's sweep pages (service/dashboard/sweeps.js) in a real
browser (headless chromium, browser.py) on a real larchd whose local
executor runs larch-train: a sweep of four tiny real jobs (two axes,
max_parallel 2, a val/accuracy target that the children with a learning
rate of 1e-6 cannot reach), followed live on the sweeps list; the sweep
page's definition, its children's table in the target's order and the
overlay of their curves (compare.js's, checked against GET /v1/metrics;
larchd's compare_max_jobs is 3, so the overlay must ask for the four
curves in groups); the jobs list's links to the sweep and its sweep and
label filters; Cancel on a sweep of long children; and a user who sees
neither another user's sweep nor its page. Every test ends with no
console error and no CSP violation.
"""
import re

import pytest

from browser import chrome, screenshot
from test_api_jobs import FINAL, Server, tiny_spec
from test_dashboard import (cancel_all, console_problems, css, leave, one, open_fresh, overflow,
                            row_ids, sign_in, stop, tid, token_of, wait)

TARGET = {"metric": "val/accuracy", "value": 0.3, "mode": "max"}
AXES = {"batch.global": [128, 256], "optimizer.lr": [1e-6, 0.2]}
JS_TEXT = {1e-6: "0.000001"}  # JSON.stringify's text where Python's str differs
SWEEP_WAIT = 120              # seconds for four tiny children, two at a time


@pytest.fixture(scope="module")
def browser():
    driver = chrome()
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def site(tmp_path_factory, browser):
    # compare_max_jobs 3: the overlay of four children must ask in smaller groups
    server = Server(tmp_path_factory.mktemp("dash-sweeps"),
                    ["--max-local-jobs", "4", "--compare-max-jobs", "3"])
    yield server
    leave(browser)
    for sweep in server.get("/v1/sweeps?limit=500", server.admin).json()["sweeps"]:
        server.post(f"/v1/sweeps/{sweep['id']}/cancel", server.admin)
    cancel_all(server)
    stop(server)


def submit_sweep(site, who, name, axes, base, **extra):
    r = site.post("/v1/sweeps", who, {"name": name, "base": base, "axes": axes, **extra})
    assert r.status_code == 201, r.text
    return r.json()


def get_sweep(site, sid, who=None):
    r = site.get(f"/v1/sweeps/{sid}", who or site.admin)
    assert r.status_code == 200, r.text
    return r.json()


def sweep_rows(driver):
    return driver.execute_script("return [...document.querySelectorAll('[data-testid=\"sweep-row\"]')]"
                                 ".map(r => r.dataset.sweepId)")


def child_order(driver):
    return driver.execute_script("return [...document.querySelectorAll('[data-testid=\"child-row\"]')]"
                                 ".map(r => Number(r.dataset.index))")


def expected_order(children):
    """The target's order (mode max): reached first, then the best value
    highest first, no value last, then the index."""
    def key(c):
        reached = c["steps_to_target"] is not None
        best = c["best"]
        return (not reached, best is None, -(best or 0), c["index"])
    return [c["index"] for c in sorted(children, key=key)]


@pytest.fixture(scope="module")
def done(site, browser):
    """The four-child sweep, submitted while alice's sweeps list is open;
    returns (sweep as the API has it once ended, the states its row showed)."""
    sign_in(browser, site, token_of(site.alice))
    one(browser, tid("nav-sweeps")).click()
    one(browser, tid("sweeps-count"))
    wait(browser).until(lambda d: css(d, tid("live", '[data-mode="live"]')))
    browser.execute_script("""
      window.__noReload = 1; window.__seen = [];
      new MutationObserver(() => {
        for (const r of document.querySelectorAll('[data-testid="sweep-row"]'))
          if (window.__seen[window.__seen.length - 1] !== r.dataset.state)
            window.__seen.push(r.dataset.state);
      }).observe(document.body, {subtree: true, childList: true, attributes: true});""")
    base = tiny_spec("x", steps=40, eval_every=10, checkpoint_every=0)
    s = submit_sweep(site, site.alice, "lr", AXES, base, target=TARGET, max_parallel=2,
                     labels={"project": "ui"})
    sid = s["id"]
    row = f'{tid("sweep-row")}[data-sweep-id="{sid}"]'
    wait(browser, SWEEP_WAIT).until(lambda d: css(d, row + '[data-state="COMPLETED"]'),
                                    f"{sid} never showed COMPLETED on the list")
    seen = browser.execute_script("return window.__seen")
    assert browser.execute_script("return window.__noReload") == 1, "the page was reloaded"
    sweep = get_sweep(site, sid)
    assert sweep["state"] == "COMPLETED", sweep
    return sweep, seen


def test_sweeps_list_follows_a_sweep_live(site, browser, done):
    sweep, seen = done
    print(f"dashboard: {sweep['id']} seen as {' -> '.join(seen)}")
    assert seen[-1] == "COMPLETED" and len(seen) >= 2, seen     # it changed without a reload
    row = one(browser, f'{tid("sweep-row")}[data-sweep-id="{sweep["id"]}"]')
    cells = [c.text for c in row.find_elements("css selector", "td")]
    # ID, name, state, children, by state, target, created (a user has no owner column)
    assert cells[:4] == [sweep["id"], "lr", "COMPLETED", "4"], cells
    assert cells[5] == "val/accuracy ≥ 0.3"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC([+-]\d\d:\d\d)?", cells[6]), cells[6]
    counts = {b.get_attribute("data-state"): int(b.get_attribute("data-n"))
              for b in row.find_elements("css selector", tid("sweep-count"))}
    assert counts == {"COMPLETED": 4}
    screenshot(browser, "sweeps")
    assert console_problems(browser) == []


def test_sweep_page_table_by_target_and_overlay(site, browser, done):
    sweep, _ = done
    sid = sweep["id"]
    children = sweep["children"]
    reached = [c for c in children if c["steps_to_target"] is not None]
    # lr 1e-6 cannot reach 0.3 in 40 steps; lr 0.2 does on this data
    assert {c["params"]["optimizer.lr"] for c in reached} == {0.2}, children
    assert all(c["params"]["optimizer.lr"] == 1e-6 for c in children if c not in reached)
    order = expected_order(children)
    assert {order[0], order[1]} == {c["index"] for c in reached}

    one(browser, f'{tid("sweep-row")}[data-sweep-id="{sid}"] a').click()
    wait(browser).until(lambda d: child_order(d) == order,
                        f"the children's order is not {order}")
    assert browser.current_url.endswith(f"#/sweeps/{sid}")
    assert one(browser, tid("sweep-state")).get_attribute("data-state") == "COMPLETED"
    assert not css(browser, tid("cancel-button"))              # it has ended
    # the definition
    axes = [li.get_attribute("data-path") for li in css(browser, tid("sweep-axes") + " li")]
    assert axes == ["batch.global", "optimizer.lr"]
    definition = one(browser, tid("sweep-definition")).text
    for text in ("Max parallel\n2", "Target\nval/accuracy ≥ 0.3", "Labels\nproject:ui", "Method\ngrid"):
        assert text in definition, definition
    assert [b.get_attribute("data-state") for b in css(browser, tid("sweep-counts") + " "
                                                       + tid("sweep-count"))] == ["COMPLETED"]
    # a row per child: its job, a column per axis, its figures
    by_index = {c["index"]: c for c in children}
    for r in css(browser, tid("child-row")):
        c = by_index[int(r.get_attribute("data-index"))]
        assert r.get_attribute("data-job-id") == c["job"]
        params = {td.get_attribute("data-axis"): td.text
                  for td in r.find_elements("css selector", "td[data-axis]")}
        assert params == {k: JS_TEXT.get(v, str(v)) for k, v in c["params"].items()}, params
        cells = [td.text for td in r.find_elements("css selector", "td")]
        assert cells[4] == "COMPLETED"
        steps = cells[7]
        assert steps == (str(c["steps_to_target"]) if c["steps_to_target"] is not None else "—")
        examples = c["examples_to_target"]
        assert cells[8] == (f"{examples:,}" if examples is not None else "—")
    # the overlay: the target metric of every child, in the table's order,
    # each with the points GET /v1/metrics has
    wait(browser).until(lambda d: d.execute_script(
        "return document.body.dataset.compareReady") == "val/accuracy step")
    jobs = [by_index[i]["job"] for i in order]
    points = {}
    for group in (jobs[:2], jobs[2:]):
        r = site.get("/v1/metrics", site.alice, params={"jobs": ",".join(group), "name": "val/accuracy"})
        assert r.status_code == 200, r.text
        points.update({e["id"]: len(e["points"]) for e in r.json()["jobs"]})
    assert all(n >= 4 for n in points.values()), points
    chart = one(browser, tid("compare-chart"))
    assert chart.get_attribute("data-series") == " ".join(f"{j}:{points[j]}" for j in jobs)
    from selenium.webdriver.support.ui import Select
    options = [o.get_attribute("value") for o in css(browser, tid("compare-metric") + " option")]
    assert "val/accuracy" in options and "train/loss" in options, options
    Select(one(browser, tid("compare-x"))).select_by_value("examples")
    wait(browser).until(lambda d: d.execute_script(
        "return document.body.dataset.compareReady") == "val/accuracy examples")
    assert chart.get_attribute("data-x") == "examples"
    assert "null" not in one(browser, tid("sweep-curves")).text
    screenshot(browser, "sweep")
    # a phone's width: the page fits (the table scrolls in its own box)
    size = browser.get_window_size()
    try:
        browser.set_window_size(375, 800)
        wait(browser).until(lambda d: overflow(d) <= 0, "the sweep page is wider than 375 px")
        screenshot(browser, "sweep-narrow")
        open_fresh(browser, f"{site.url}/#/sweeps")
        one(browser, tid("sweep-row"))
        assert overflow(browser) <= 0, "the sweeps page is wider than 375 px"
    finally:
        browser.set_window_size(size["width"], size["height"])
    assert console_problems(browser) == []


def test_jobs_list_links_children_to_their_sweep(site, browser, done):
    sweep, _ = done
    sid = sweep["id"]
    kids = {c["job"]: c["index"] for c in sweep["children"]}
    open_fresh(browser, f"{site.url}/#/jobs?sweep={sid}")
    wait(browser).until(lambda d: sorted(row_ids(d)) == sorted(kids))
    assert one(browser, tid("filter-sweep")).get_attribute("value") == sid
    for job, index in kids.items():
        link = one(browser, f'tr[data-job-id="{job}"] {tid("job-sweep")}')
        assert link.text == f"{sid} #{index}"
    # a child's page links to its sweep and says its params
    first = sweep["children"][0]
    open_fresh(browser, f"{site.url}/#/jobs/{first['job']}")
    link = one(browser, tid("job-sweep"))
    assert link.text == f"{sid} #0"
    assert "batch.global=128 optimizer.lr=0.000001" in one(browser, tid("summary")).text
    # the label filter
    open_fresh(browser, f"{site.url}/#/jobs?label=project:ui")
    wait(browser).until(lambda d: sorted(row_ids(d)) == sorted(kids))
    one(browser, f'tr[data-job-id="{sweep["children"][0]["job"]}"] {tid("job-sweep")}').click()
    wait(browser).until(lambda d: d.current_url.endswith(f"#/sweeps/{sid}") and css(d, tid("child-row")))
    assert console_problems(browser) == []


def test_cancel_a_sweep_from_its_page(site, browser):
    base = tiny_spec("x", steps=100000, checkpoint_every=0)
    s = submit_sweep(site, site.alice, "long", {"optimizer.lr": [0.01, 0.02, 0.03]}, base,
                     max_parallel=2)
    sid = s["id"]
    sign_in(browser, site, token_of(site.alice))
    open_fresh(browser, f"{site.url}/#/sweeps/{sid}")

    def counts(d):
        return {b.get_attribute("data-state"): b.get_attribute("data-n")
                for b in css(d, tid("sweep-counts") + " " + tid("sweep-count"))}
    # two run, the third waits (max_parallel 2), all seen without a reload
    wait(browser, 60).until(lambda d: counts(d) == {"QUEUED": "1", "RUNNING": "2"},
                            "never two RUNNING and one QUEUED")
    one(browser, tid("cancel-button")).click()
    dialog = one(browser, tid("dialog"))
    assert sid in dialog.text and "3 of its 3 children" in dialog.text
    one(browser, tid("dialog-confirm")).click()
    wait(browser, 60).until(lambda d: css(d, tid("sweep-state", '[data-state="CANCELLED"]')),
                            "the page never showed CANCELLED")
    done = get_sweep(site, sid)
    assert done["state"] == "CANCELLED" and done["counts"]["CANCELLED"] == 3, done
    wait(browser).until(lambda d: counts(d) == {"CANCELLED": "3"})
    assert not css(browser, tid("cancel-button"))
    states = browser.execute_script("return [...document.querySelectorAll('[data-testid=\"child-row\"]')]"
                                    ".map(r => r.dataset.state)")
    assert states == ["CANCELLED"] * 3
    assert console_problems(browser) == []


def test_a_user_sees_only_their_own_sweeps(site, browser, done):
    alices, _ = done
    bobs = submit_sweep(site, site.bob, "bobs", {"optimizer.lr": [0.1]}, tiny_spec("x", steps=5))
    sign_in(browser, site, token_of(site.bob))
    open_fresh(browser, f"{site.url}/#/sweeps")
    wait(browser).until(lambda d: sweep_rows(d) == [bobs["id"]])
    # alice's sweep: not found, as one that does not exist
    open_fresh(browser, f"{site.url}/#/sweeps/{alices['id']}")
    assert one(browser, tid("not-found")).text.startswith(f"No sweep {alices['id']}")
    assert not css(browser, tid("child-row")) and not css(browser, tid("cancel-button"))
    # nor its children through the jobs list's filter
    open_fresh(browser, f"{site.url}/#/jobs?sweep={alices['id']}")
    one(browser, ".empty:not([hidden])")
    assert row_ids(browser) == []
    assert console_problems(browser) == []
    # the admin sees everyone's, with their owners
    sign_in(browser, site, token_of(site.admin))
    open_fresh(browser, f"{site.url}/#/sweeps")
    wait(browser).until(lambda d: {alices["id"], bobs["id"]} <= set(sweep_rows(d)))
    owner = one(browser, f'{tid("sweep-row")}[data-sweep-id="{bobs["id"]}"] td:nth-child(3)')
    assert owner.text == "bob"
    site.wait(bobs["children"][0]["job"], FINAL, timeout=60)
    assert console_problems(browser) == []
