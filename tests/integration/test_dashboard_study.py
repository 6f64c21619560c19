"""The study section of a batch_scaling sweep's page (service/dashboard/
study.js) in a real browser (headless chromium, browser.py) on a real
larchd whose local executor runs the real larch-train on Fashion-MNIST
(test_study.py's tiny MLP and target):

- a study of four batch sizes, its page open while the children run: the
  log-log chart (read from the Chart.js instance in the page) has one
  point per child that reached the target at (E, S) with its batch, the
  fitted curve on (S/S_min - 1)(E/E_min - 1) = 1 over the batch sizes'
  range, B_crit at (2 E_min, 2 S_min) labelled with the API's b_crit as
  the dashboard formats numbers, the asymptotes S_min and E_min; the
  table per batch size and the fit's figures as GET /v1/sweeps/{id} has
  them, all without a reload;
- a study that no child finishes: no fit, the study's note, no chart.

Every test ends with no console error and no CSP violation.
"""

import pytest

from browser import chrome, screenshot
from test_api_jobs import FINAL, Server
from test_dashboard import (cancel_all, console_problems, css, leave, one, open_fresh, overflow,
                            sign_in, stop, tid, token_of, wait)
from test_study import TARGET, base_spec

STUDY_WAIT = 180              # seconds for four tiny children, two at a time

READ_CHART = """
const c = Chart.getChart(document.querySelector('[data-testid="study-chart"] canvas'));
if (!c) return null;
return {x: c.scales.x.type, y: c.scales.y.type,
        sets: c.data.datasets.map(d => ({label: d.label, line: !!d.showLine,
                                         data: d.data.map(p => [p.x, p.y, p.b === undefined ? null : p.b])}))};
"""


def fmt_num(v):
    """ui.js's fmtNum: integers with thousands separators, very large or
    small numbers as toExponential(3), the rest to 5 significant digits."""
    if v is None:
        return "—"
    if float(v).is_integer() and abs(v) < 1e9:
        return f"{int(v):,}"
    a = abs(v)
    if a != 0 and (a >= 1e6 or a < 1e-3):
        mant, exp = f"{v:.3e}".split("e")
        return f"{mant}e{'+' if int(exp) >= 0 else '-'}{abs(int(exp))}"
    text = repr(float(f"{v:.5g}"))
    return text[:-2] if text.endswith(".0") else text


@pytest.fixture(scope="module")
def browser():
    driver = chrome()
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def site(tmp_path_factory, browser):
    server = Server(tmp_path_factory.mktemp("dash-study"), ["--max-local-jobs", "2"])
    yield server
    leave(browser)
    for sweep in server.get("/v1/sweeps?limit=500", server.admin).json()["sweeps"]:
        server.post(f"/v1/sweeps/{sweep['id']}/cancel", server.admin)
    cancel_all(server)
    stop(server)


def get_sweep(site, sid):
    r = site.get(f"/v1/sweeps/{sid}", site.alice)
    assert r.status_code == 200, r.text
    return r.json()


def submit(site, body):
    r = site.post("/v1/sweeps", site.alice, body)
    assert r.status_code == 201, r.text
    return r.json()


def by_label(chart):
    return {s["label"].split(" =")[0]: s for s in chart["sets"]}


def test_study_chart_fit_and_table_follow_the_children(site, browser):
    sign_in(browser, site, token_of(site.alice))
    s = submit(site, {"kind": "batch_scaling", "name": "bs", "base": base_spec(),
                      "batch_sizes": [64, 128, 256, 1024], "target": TARGET, "max_parallel": 2})
    sid = s["id"]
    open_fresh(browser, f"{site.url}/#/sweeps/{sid}")
    one(browser, tid("study"))
    browser.execute_script("""
      window.__noReload = 1; window.__seen = [];
      const note = () => {
        const f = document.querySelector('[data-testid="study-chart"]');
        const now = f ? `${f.dataset.points} ${f.dataset.fit}` : '';
        if (now && window.__seen[window.__seen.length - 1] !== now) window.__seen.push(now);
      };
      note();
      new MutationObserver(note).observe(document.body, {subtree: true, attributes: true});""")
    wait(browser, STUDY_WAIT).until(lambda d: css(d, tid("sweep-state", '[data-state="COMPLETED"]')),
                                    f"{sid} never showed COMPLETED")
    done = get_sweep(site, sid)
    assert done["state"] == "COMPLETED", done
    study, fit = done["study"], done["study"]["fit"]
    assert fit is not None, study
    reached = [p for p in study["points"] if p["steps"] is not None]
    assert len(reached) >= 3
    wait(browser).until(lambda d: d.execute_script("return document.body.dataset.studyReady")
                        == f"{len(reached)} fit")
    assert browser.execute_script("return window.__noReload") == 1, "the page was reloaded"
    seen = browser.execute_script("return window.__seen")
    print(f"dashboard: study {sid} seen as {' -> '.join(seen)}")
    assert seen[-1] == f"{len(reached)} yes", seen

    definition = one(browser, tid("sweep-definition")).text
    assert "Method\nbatch-scaling study" in definition, definition
    assert one(browser, tid("sweep-batch-sizes")).text == "64, 128, 256, 1024"

    chart = browser.execute_script(READ_CHART)
    assert chart and chart["x"] == chart["y"] == "logarithmic", chart
    assert [s["label"].split(" =")[0] for s in chart["sets"]] == ["Children", "Fit", "B_crit", "S_min",
                                                                  "E_min"]
    sets = by_label(chart)
    # the points: (E, S) of each child that reached the target, with its batch
    assert sorted(map(tuple, sets["Children"]["data"])) == sorted(
        (p["examples"], p["steps"], p["batch"]) for p in reached)
    assert not sets["Children"]["line"]
    # the fitted curve: on the hyperbola, through the batch sizes' range
    curve = sets["Fit"]["data"]
    assert sets["Fit"]["line"] and len(curve) >= 16
    for e, st, b in curve:
        assert st == pytest.approx(fit["s_min"] * (1 + fit["b_crit"] / b), rel=1e-9)
        assert e == pytest.approx(fit["e_min"] * (1 + b / fit["b_crit"]), rel=1e-9)
        assert (st / fit["s_min"] - 1) * (e / fit["e_min"] - 1) == pytest.approx(1, rel=1e-9)
    batches = [p["batch"] for p in study["points"]]
    assert min(b for _, _, b in curve) <= min(batches) and max(b for _, _, b in curve) >= max(batches)
    # B_crit: the curve's point B = b_crit, labelled with its value
    [(e, st, b)] = sets["B_crit"]["data"]
    assert (e, st) == (pytest.approx(2 * fit["e_min"]), pytest.approx(2 * fit["s_min"]))
    assert b == pytest.approx(fit["b_crit"])
    assert sets["B_crit"]["label"] == f"B_crit = {fmt_num(fit['b_crit'])}"
    assert one(browser, tid("study-bcrit")).text == fmt_num(fit["b_crit"])
    # the asymptotes
    assert sets["S_min"]["line"] and all(y == pytest.approx(fit["s_min"]) for _, y, _ in sets["S_min"]["data"])
    assert sets["E_min"]["line"] and all(x == pytest.approx(fit["e_min"]) for x, _, _ in sets["E_min"]["data"])

    # the fit's figures and the table per batch size
    assert one(browser, tid("study-s-min")).text == fmt_num(fit["s_min"])
    assert one(browser, tid("study-e-min")).text == fmt_num(fit["e_min"])
    assert one(browser, tid("study-rms")).text == fmt_num(fit["rms"])
    note = one(browser, tid("study-note"))
    assert note.text == (study["note"] or "") and note.is_displayed() == bool(study["note"])
    rows = css(browser, tid("study-row"))
    assert [int(r.get_attribute("data-batch")) for r in rows] == batches
    for r, p in zip(rows, study["points"]):
        cells = [td.text for td in r.find_elements("css selector", "td")]
        assert cells[0] == fmt_num(p["batch"]) + (" (reference)" if p["batch"] == study["speedup_against"]
                                                  else ""), cells
        assert cells[1] == p["job"] and cells[2] == p["state"]
        assert cells[3] == fmt_num(p["steps"]) and cells[4] == fmt_num(p["examples"])
        assert float(cells[5]) == pytest.approx(p["seconds"], abs=0.051)
        assert float(cells[6].rstrip("×")) == pytest.approx(p["speedup"], abs=0.0051)
        assert cells[7] == fmt_num(round(fit["s_min"] * (1 + fit["b_crit"] / p["batch"])))
    screenshot(browser, "study")
    size = browser.get_window_size()
    try:
        browser.set_window_size(375, 800)
        wait(browser).until(lambda d: overflow(d) <= 0, "the study page is wider than 375 px")
        screenshot(browser, "study-narrow")
    finally:
        browser.set_window_size(size["width"], size["height"])
    assert console_problems(browser) == []


def test_study_without_a_fit_shows_its_note(site, browser):
    # a target no child reaches in 10 steps: no fit, a note
    s = submit(site, {"kind": "batch_scaling", "name": "short", "base": base_spec(steps=10),
                      "batch_sizes": [128, 256, 512],
                      "target": {"metric": "val/accuracy", "value": 0.99}})
    for c in s["children"]:
        site.wait(c["job"], FINAL, timeout=60)
    done = get_sweep(site, s["id"])
    assert done["study"]["fit"] is None and "0 of 3" in done["study"]["note"], done["study"]
    sign_in(browser, site, token_of(site.alice))
    open_fresh(browser, f"{site.url}/#/sweeps/{s['id']}")
    wait(browser).until(lambda d: d.execute_script("return document.body.dataset.studyReady") == "0 nofit")
    assert one(browser, tid("study-note")).text == done["study"]["note"]
    assert not one(browser, tid("study-fit")).is_displayed()
    assert not css(browser, tid("study-bcrit"))
    assert not one(browser, tid("study-chart")).is_displayed()
    assert browser.execute_script(READ_CHART) is None
    assert "No child has reached the target yet" in one(browser, tid("study-chart-note")).text
    rows = css(browser, tid("study-row"))
    assert [int(r.get_attribute("data-batch")) for r in rows] == [128, 256, 512]
    for r in rows:
        cells = [td.text for td in r.find_elements("css selector", "td")]
        assert cells[3:] == ["—"] * 5, cells
    assert console_problems(browser) == []


def test_a_plain_sweep_has_no_study_section(site, browser):
    s = submit(site, {"name": "plain", "base": base_spec(steps=5), "axes": {"optimizer.lr": [0.05]}})
    assert "study" not in s
    open_fresh(browser, f"{site.url}/#/sweeps/{s['id']}")
    one(browser, tid("child-row"))
    assert not css(browser, tid("study"))
    assert not one(browser, tid("sweep-study")).is_displayed()
    site.wait(s["children"][0]["job"], FINAL, timeout=60)
    assert console_problems(browser) == []
