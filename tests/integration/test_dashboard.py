"""The web dashboard (service/dashboard/) in a real browser: headless
chromium (browser.py) on a real larchd serving the dashboard built into it.

Two servers per module: `real` runs larch-train (a job followed live on the
jobs page, a finished one's page, a long one cancelled from its page);
`fake` runs a stand-in trainer that prints a line of HTML to its log and
sleeps until cancelled (or, for a job named broken-*, exits 2 at once),
for what needs a job token but no training (text that must stay text,
100,000 metric points per series, how series are grouped into charts, the
admin page's job actions, why a job failed, times with their zone). The
Slurm tests use a larchd of their own on the session's cluster. Job tokens are read from the running trainer's environment
(test_api_jobs.trainer_env). Screenshots of each page go to
$LARCH_ARTIFACTS_DIR/dashboard/ (browser.py).
"""
import http.client
import http.server
import json
import math
import re
import threading
import time
import types
import urllib.parse
from datetime import datetime, timedelta, timezone

import pytest
import requests

from browser import chrome, screenshot
from larchd import stand_in_trainer
from test_api_jobs import FINAL, JSON, Server, tiny_spec, trainer_env

XSS = "<img src=x onerror=alert(1)>"
WAIT = 20                     # seconds for the page to show what the API has
BIG = 100_000                 # metric points per series in the large-job test
BIG_SERIES = ("train/loss", "val/loss", "train/lr")


def token_of(headers):
    return headers["Authorization"].split()[1]


def cancel_all(server):
    """Cancels what is still running, so that larchd stops cleanly."""
    r = server.get("/v1/jobs?limit=500", server.admin)
    for job in r.json()["jobs"]:
        if job["state"] not in FINAL:
            server.post(f"/v1/jobs/{job['id']}/cancel", server.admin)
    for job in r.json()["jobs"]:
        server.wait(job["id"], FINAL, timeout=40)


def leave(driver):
    """Takes the browser off the dashboard, so that no request of its
    reaches a larchd that is stopping (those get 503, which Server.stop
    counts as a fault): the dashboard's tab is closed for a blank one (a
    page left by navigating may live on in the back/forward cache)."""
    old = driver.current_window_handle
    driver.switch_to.new_window("tab")
    fresh = driver.current_window_handle
    driver.switch_to.window(old)
    driver.close()
    driver.switch_to.window(fresh)


def stop(server):
    """Stops larchd: exit 0 and no server fault logged. A 503 is not one:
    a request the browser had already started when larchd began to stop
    is answered "shutting down", as it should be."""
    server.d.stop()
    assert not re.search(r" [A-Z]+ \S+ 5(?!03)\d\d \d+us", server.d.log()), "a 5xx was logged"


@pytest.fixture(scope="module")
def real(tmp_path_factory, browser):
    server = Server(tmp_path_factory.mktemp("dash-real"))
    server.tiny = server.submit(server.alice, tiny_spec("tiny"))   # finished by test 2
    yield server
    leave(browser)
    cancel_all(server)
    stop(server)


@pytest.fixture(scope="module")
def fake(tmp_path_factory, browser):
    tmp = tmp_path_factory.mktemp("dash-fake")
    trainer = tmp / "fake-train"
    stand_in_trainer(trainer, "if grep -q '\"broken-' spec.json; then\n"
                              "  echo 'fake-train: the data file is corrupt' >&2; exit 2\nfi\n"
                              f"printf '%s\\n' 'fake-train: started' '{XSS}'\nexec sleep 300\n")
    server = Server(tmp, ["--trainer-path", str(trainer), "--max-local-jobs", "4"])
    yield server
    leave(browser)
    cancel_all(server)
    stop(server)


@pytest.fixture(scope="module")
def browser():
    driver = chrome()
    yield driver
    driver.quit()


# ---- page helpers --------------------------------------------------------------

def wait(driver, timeout=WAIT):
    """A WebDriverWait that retries past elements a re-render replaced."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(driver, timeout, poll_frequency=0.05,
                         ignored_exceptions=(StaleElementReferenceException,))


def css(driver, selector):
    from selenium.webdriver.common.by import By
    return driver.find_elements(By.CSS_SELECTOR, selector)


def one(driver, selector, timeout=WAIT):
    """The first element matching selector, once there is one."""
    found = wait(driver, timeout).until(lambda d: css(d, selector),
                                        f"no {selector} on {driver.current_url} after {timeout}s")
    return found[0]


def tid(name, extra=""):
    return f'[data-testid="{name}"]{extra}'


def open_fresh(driver, url):
    """Loads url as a new document (a hash change alone would not)."""
    driver.get("about:blank")
    driver.get(url)


def sign_in(driver, server, token, shot=None):
    """Signs in on server's dashboard with token, from a clean tab session."""
    driver.get(server.url + "/#/signin")
    driver.execute_script("sessionStorage.clear()")
    open_fresh(driver, server.url + "/#/signin")
    box = one(driver, tid("token-input"))
    if shot:
        screenshot(driver, shot)
    box.send_keys(token)
    one(driver, tid("signin-submit")).click()
    one(driver, tid("whoami"))


def job_state(driver):
    return driver.execute_script(
        "const b = document.querySelector('[data-testid=\"job-state\"]');"
        "return b ? b.dataset.state : null")


def chart_counts(driver):
    """{chart: {series: points}} as the charts say they drew them."""
    charts = driver.execute_script(
        "return [...document.querySelectorAll('[data-testid=\"chart\"]')]"
        ".map(c => [c.dataset.chart, c.dataset.series || ''])")
    return {chart: {s.rsplit(":", 1)[0]: int(s.rsplit(":", 1)[1]) for s in series.split()}
            for chart, series in charts}


def charts_ready(driver):
    """document.body.dataset.chartsReadyMs: set once a job page's charts drew."""
    return driver.execute_script("return document.body.dataset.chartsReadyMs")


def row_ids(driver):
    """The job ids of the jobs table's rows, top to bottom."""
    return driver.execute_script("return [...document.querySelectorAll("
                                 "'[data-testid=\"job-row\"]')].map(r => r.dataset.jobId)")


def console_problems(driver):
    """The console's CSP violations and uncaught script errors since the last call."""
    return [e for e in driver.get_log("browser")
            if "Content Security Policy" in e["message"] or "Refused to" in e["message"]
            or e.get("source") == "javascript"]


# ---- 1. the jobs page follows a job without a reload ---------------------------------

RECORD_STATES = """
window.__noReload = 1;
window.__states = {};
const record = () => {
  for (const b of document.querySelectorAll('tr[data-job-id] [data-testid="state-badge"]')) {
    const id = b.closest('tr').dataset.jobId;
    const seen = (window.__states[id] = window.__states[id] || []);
    if (seen[seen.length - 1] !== b.dataset.state) seen.push(b.dataset.state);
  }
};
new MutationObserver(record).observe(document.body,
  {subtree: true, childList: true, attributes: true, attributeFilter: ['data-state']});
record();
"""


def follow_new_job(browser, server, name):
    """Submits a job long enough (a few seconds) to be seen RUNNING while the
    open jobs page records the state badges it shows; returns the job's id
    and the states seen, once one is final. The page must not reload."""
    browser.execute_script(RECORD_STATES)
    job_id = server.submit(server.alice, tiny_spec(name, steps=3000, log_every=100))

    def seen(d):
        return d.execute_script("return window.__states[arguments[0]] || []", job_id)

    wait(browser, 60).until(lambda d: "COMPLETED" in seen(d) or "FAILED" in seen(d),
                            f"{job_id} never showed a final state")
    assert browser.execute_script("return window.__noReload") == 1, "the page was reloaded"
    return job_id, seen(browser)


def test_jobs_page_follows_a_job_live(real, browser):
    sign_in(browser, real, token_of(real.alice), shot="signin")
    one(browser, tid("jobs-table") + " " + tid("job-row"))
    wait(browser).until(lambda d: css(d, tid("live", '[data-mode="live"]')),
                        "the change feed (GET /v1/events) is not live")
    job_id, states = follow_new_job(browser, real, "live")
    print(f"dashboard: {job_id} seen as {' -> '.join(states)}")
    assert states[-1] == "COMPLETED", states
    assert states[0] in {"PENDING", "QUEUED", "RUNNING"}, states
    assert "RUNNING" in states, states
    order = ["PENDING", "QUEUED", "RUNNING", "COMPLETED"]
    assert [order.index(s) for s in states] == sorted(order.index(s) for s in states), states
    row = one(browser, f'tr[data-job-id="{job_id}"]')
    assert "live" in row.text and "alice" in row.text and "3,000 / 3,000" in row.text
    screenshot(browser, "jobs")


class OldLarchd:
    """A reverse proxy to a larchd that answers GET /v1/events with 404, as
    a larchd from before the change feed would: the dashboard must fall
    back to polling. Everything else is passed through as it is."""

    HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}

    def __init__(self, upstream):
        up = urllib.parse.urlsplit(upstream)
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def relay(self):
                if urllib.parse.urlsplit(self.path).path == "/v1/events":
                    proxy.refused += 1
                    body = b'{"error":{"code":"not_found","message":"no route"}}'
                    self.send_response(404)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                conn = http.client.HTTPConnection(up.hostname, up.port, timeout=30)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in OldLarchd.HOP and k.lower() != "host"}
                conn.request(self.command, self.path, body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in OldLarchd.HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_POST = do_HEAD = relay

        self.refused = 0
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_jobs_page_polls_a_larchd_without_the_feed(real, browser):
    old = OldLarchd(real.url)
    try:
        sign_in(browser, types.SimpleNamespace(url=old.url), token_of(real.alice))
        one(browser, tid("jobs-table") + " " + tid("job-row"))
        wait(browser).until(lambda d: css(d, tid("live", '[data-mode="polling"]')),
                            "a 404 from GET /v1/events did not make the page poll")
        assert old.refused >= 1
        _, states = follow_new_job(browser, real, "polled")
        assert states[-1] == "COMPLETED", states
        refused = old.refused
        time.sleep(4)            # polling does not go back to the feed every time
        assert old.refused <= refused + 1
        leave(browser)
    finally:
        old.close()


def test_jobs_filters_sorting_paging(real, browser):
    second = real.submit(real.alice, tiny_spec("second", steps=1))
    real.wait(second, FINAL)
    real.wait(real.tiny, FINAL)
    sign_in(browser, real, token_of(real.alice))
    one(browser, tid("filter-name")).send_keys("tiny")
    one(browser, tid("filter-apply")).click()
    wait(browser).until(lambda d: row_ids(d) == [real.tiny], "the name filter did not apply")
    assert browser.current_url.endswith("#/jobs?name=tiny")
    # one job a page: the API's cursor, forward and back
    open_fresh(browser, f"{real.url}/#/jobs?limit=1")
    wait(browser).until(lambda d: len(row_ids(d)) == 1)
    first = row_ids(browser)
    one(browser, tid("page-next")).click()
    wait(browser).until(lambda d: row_ids(d) and row_ids(d) != first, "the next page did not come")
    one(browser, tid("page-prev")).click()
    wait(browser).until(lambda d: row_ids(d) == first, "the previous page did not come back")
    # sorting the page by name, both ways
    open_fresh(browser, f"{real.url}/#/jobs")
    wait(browser).until(lambda d: {real.tiny, second} <= set(row_ids(d)))

    def names(d):
        return [r.text for r in css(d, tid("job-row") + " .col-name")]

    one(browser, 'button[data-sort="name"]').click()
    assert names(browser) == sorted(names(browser))
    one(browser, 'button[data-sort="name"]').click()
    assert names(browser) == sorted(names(browser), reverse=True)
    th = one(browser, 'th.col-name')
    assert th.get_attribute("aria-sort") == "descending"


# ---- 2. a finished job's page --------------------------------------------------

def test_job_page_shows_charts_timeline_logs(real, browser):
    job = real.wait(real.tiny, FINAL)
    assert job["state"] == "COMPLETED", job
    sign_in(browser, real, token_of(real.alice))
    open_fresh(browser, f"{real.url}/#/jobs/{real.tiny}")
    wait(browser).until(charts_ready, "the charts never drew")
    assert job_state(browser) == "COMPLETED"
    assert not css(browser, tid("cancel-button")), "a finished job offers Cancel"
    counts = chart_counts(browser)
    assert counts["loss"]["train/loss"] == 30 and counts["loss"]["val/loss"] >= 1, counts
    # the trainer's timings wait in the collapsed system section
    assert not any("after_backward_s" in s for c in counts.values() for s in c), counts
    system = one(browser, tid("charts-system"))
    assert system.is_displayed() and system.get_attribute("open") is None
    assert all(int(c.get_attribute("data-points")) > 0 for c in css(browser, tid("chart")))
    # the timeline: every state change, and the trainer's note
    items = css(browser, tid("timeline-item"))
    changes = [i.get_attribute("data-to") for i in items
               if "tl-note" not in i.get_attribute("class")]
    assert changes == ["PENDING", "QUEUED", "RUNNING", "COMPLETED"], changes
    assert any("result: completed, 30 steps" in i.text for i in items)
    # the log tail holds the trainer's output
    wait(browser).until(lambda d: "larch-train: tiny: mlp model" in
                        one(d, tid("logs")).get_attribute("textContent"))
    assert "step 30/30" in one(browser, tid("logs")).get_attribute("textContent")
    assert css(browser, tid("checkpoints") + ' tr[data-step="30"]')
    assert json.loads(one(browser, tid("spec")).get_attribute("textContent")) == job["spec"]
    screenshot(browser, "job")

    # zoom with the step inputs: steps 5..20 of the 30
    one(browser, tid("zoom-from")).send_keys("5")
    one(browser, tid("zoom-to")).send_keys("20")
    one(browser, tid("zoom-apply")).click()
    wait(browser).until(lambda d: chart_counts(d)["loss"].get("train/loss") == 16,
                        "zooming to steps 5..20 did not redraw 16 points")
    one(browser, tid("zoom-reset")).click()
    wait(browser).until(lambda d: chart_counts(d)["loss"].get("train/loss") == 30)
    # zoom by dragging across the loss chart
    from selenium.webdriver.common.action_chains import ActionChains
    canvas = one(browser, tid("chart", '[data-chart="loss"]') + " canvas")
    ActionChains(browser).move_to_element_with_offset(canvas, -60, 0).click_and_hold() \
        .move_by_offset(120, 0).release().perform()
    wait(browser).until(lambda d: one(d, tid("zoom-from")).get_attribute("value") != "",
                        "dragging across a chart did not zoom")
    lo = int(one(browser, tid("zoom-from")).get_attribute("value"))
    hi = int(one(browser, tid("zoom-to")).get_attribute("value"))
    assert 0 <= lo < hi <= 31, (lo, hi)
    wait(browser).until(lambda d: 0 < chart_counts(d)["loss"].get("train/loss", 0) < 30)
    assert not console_problems(browser)


# ---- 2b. how series become charts ------------------------------------------------

GROUPED = {   # name: value at step k (1..20)
    "train/loss": lambda k: 2.0 / k,
    "val/accuracy": lambda k: 0.6 + 0.019 * k,                       # up to 0.98
    "train/samples_per_s": lambda k: 24000.0 + 10 * k,
    "train/tokens_per_s": lambda k: 3.0e6 + 1000 * k,
    "train/after_backward_s": lambda k: 0.012,
    "offload/grads_s": lambda k: 0.003 * k,
}


def y_axis(driver, chart):
    """(min, max) of the y axis Chart.js drew for chart (a data-chart id)."""
    return driver.execute_script(
        "const c = Chart.getChart(document.querySelector("
        "`[data-testid=\"chart\"][data-chart=\"${arguments[0]}\"] canvas`));"
        "return c ? [c.scales.y.min, c.scales.y.max] : null", chart)


def test_charts_group_rates_apart_timings_collapsed_fractions_to_1(fake, browser):
    """samples/s and tokens/s each on an axis of their own; the trainer's
    timings (*_s) in a collapsed system section, a chart each once opened;
    an accuracy's axis ends at 1."""
    job_id = fake.submit(fake.alice, tiny_spec("groups"))
    job_token = {**fake.d.auth(trainer_env(fake, job_id)["LARCH_JOB_TOKEN"]), **JSON}
    points = [{"step": k, "time": 1763851234.0 + k, "name": n, "value": f(k)}
              for n, f in GROUPED.items() for k in range(1, 21)]
    r = fake.post(f"/v1/jobs/{job_id}/metrics", job_token, {"metrics": points})
    assert r.status_code == 200 and r.json()["accepted"] == len(points), r.text
    sign_in(browser, fake, token_of(fake.alice))
    open_fresh(browser, f"{fake.url}/#/jobs/{job_id}")
    wait(browser).until(charts_ready, "the charts never drew")
    counts = chart_counts(browser)
    assert counts == {"loss": {"train/loss": 20}, "accuracy": {"val/accuracy": 20},
                      "samples-per-s": {"train/samples_per_s": 20},
                      "tokens-per-s": {"train/tokens_per_s": 20}}, counts
    lo, hi = y_axis(browser, "samples-per-s")
    assert 20000 <= lo and hi < 30000, (lo, hi)          # not flattened by tokens/s
    assert y_axis(browser, "tokens-per-s")[0] >= 1e6
    lo, hi = y_axis(browser, "accuracy")
    assert hi == 1 and 0 <= lo <= 0.6, (lo, hi)
    # the timings: collapsed, nothing drawn until opened
    system = one(browser, tid("charts-system"))
    assert system.get_attribute("open") is None and "(2 timings)" in system.text
    assert not css(browser, tid("charts-system-grid") + " " + tid("chart"))
    system.find_element("css selector", "summary").click()
    wait(browser).until(lambda d: len(css(d, tid("charts-system-grid") + " " + tid("chart"))) == 2,
                        "opening the system section drew no charts")
    counts = chart_counts(browser)
    timings = {c: s for c, s in counts.items() if c.startswith("m-")}
    assert sorted(timings.values(), key=str) == [{"offload/grads_s": 20},
                                                 {"train/after_backward_s": 20}], counts
    screenshot(browser, "charts-grouped")
    assert not console_problems(browser)
    fake.post(f"/v1/jobs/{job_id}/cancel", fake.admin)
    fake.wait(job_id, FINAL)


# ---- 2c. why a job failed, and times with their zone -----------------------------------

KOLKATA = timezone(timedelta(hours=5, minutes=30))   # no summer time: a fixed offset


def shown(iso, tz, zone):
    t = datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(tz)
    return f"{t:%Y-%m-%d %H:%M:%S} {zone}"


def test_jobs_list_says_why_a_job_failed_and_times_have_a_zone(fake, browser):
    broken = fake.submit(fake.alice, tiny_spec("broken-data"))
    job = fake.wait(broken, FINAL)
    assert job["state"] == "FAILED" and job["reason"], job
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Kolkata"})
    try:
        sign_in(browser, fake, token_of(fake.alice))
        open_fresh(browser, f"{fake.url}/#/jobs")
        row = one(browser, f'tr[data-job-id="{broken}"]')
        why = row.find_element("css selector", tid("state-reason"))
        assert why.text == job["reason"] and why.get_attribute("title") == job["reason"]
        created = row.find_element("css selector", ".col-created_at time")
        assert created.text == shown(job["created_at"], KOLKATA, "UTC+05:30"), created.text
        assert created.get_attribute("title") == job["created_at"]
        assert one(browser, ".page-meta .small").text.endswith(" UTC+05:30")
        # a job that did not fail says nothing under its state
        others = [r for r in css(browser, tid("job-row")) if r.get_attribute("data-state")
                  in ("COMPLETED", "RUNNING", "QUEUED", "PENDING")]
        assert all(not r.find_elements("css selector", tid("state-reason")) for r in others)
        # every time on the job page carries the zone too
        open_fresh(browser, f"{fake.url}/#/jobs/{broken}")
        wait(browser).until(lambda d: css(d, tid("timeline-item", '[data-to="FAILED"]')))
        times = [t.text for t in css(browser, "time")]
        assert len(times) >= 6 and all(t.endswith(" UTC+05:30") for t in times), times
        assert shown(job["ended_at"], KOLKATA, "UTC+05:30") in times
        browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "UTC"})
        open_fresh(browser, f"{fake.url}/#/jobs/{broken}")
        wait(browser).until(lambda d: css(d, tid("timeline-item", '[data-to="FAILED"]')))
        assert shown(job["ended_at"], timezone.utc, "UTC") in [t.text for t in css(browser, "time")]
    finally:
        browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": ""})


# ---- 3. cancel from the job page -------------------------------------------------

def test_cancel_from_the_job_page(real, browser):
    job_id = real.submit(real.alice, tiny_spec("long", steps=100000, checkpoint_every=0))
    sign_in(browser, real, token_of(real.alice))
    open_fresh(browser, f"{real.url}/#/jobs/{job_id}")
    wait(browser, 30).until(lambda d: job_state(d) == "RUNNING", f"{job_id} never showed RUNNING")
    one(browser, tid("cancel-button")).click()
    dialog = one(browser, tid("dialog"))
    assert job_id in dialog.text
    one(browser, tid("dialog-confirm")).click()
    wait(browser, 40).until(lambda d: job_state(d) == "CANCELLED",
                            "the page never showed CANCELLED")
    job = real.job(job_id)
    assert job["state"] == "CANCELLED" and job["reason"] == "cancelled by alice", job
    assert not css(browser, tid("cancel-button"))
    wait(browser).until(lambda d: css(d, tid("timeline-item", '[data-to="CANCELLED"]')))


# ---- 4. the admin page ------------------------------------------------------------

def test_admin_page(fake, browser):
    nodes = fake.get("/v1/nodes", fake.admin).json()["nodes"]
    job_id = fake.submit(fake.alice, tiny_spec("admin-me"))
    trainer_env(fake, job_id)                                      # RUNNING
    sign_in(browser, fake, token_of(fake.admin))
    assert one(browser, tid("whoami")).get_attribute("data-role") == "admin"
    one(browser, tid("nav-admin")).click()
    queue = one(browser, tid("queue-row", '[data-name="local"]'))
    assert "default" in queue.text
    node = one(browser, tid("node-row", f'[data-name="{nodes[0]["name"]}"]'))
    assert len(css(browser, tid("node-row"))) == len(nodes) == 1
    row = one(browser, f'{tid("active-job-row")}[data-job-id="{job_id}"]')
    screenshot(browser, "admin")

    # drain asks for a reason; the local executor has no Slurm nodes: the API's 409 is shown
    node.find_element("css selector", tid("drain-button")).click()
    one(browser, tid("dialog-input")).send_keys("disk swap")
    one(browser, tid("dialog-confirm")).click()
    alert = one(browser, tid("alert-message"))
    assert alert.get_attribute("data-code") == "conflict"
    assert "the local executor has no Slurm nodes" in alert.text and "409" in alert.text
    audit = one(browser, tid("audit-row", '[data-outcome="error"]'))
    assert "node.drain" in audit.text and "disk swap" in audit.text and "409" in audit.text
    assert not css(browser, tid("resume-button")), "an idle node offers Resume"

    # the priority of a running job, and a requeue the local executor refuses
    box = row.find_element("css selector", tid("priority-input"))
    box.clear()
    box.send_keys("7")
    row.find_element("css selector", tid("priority-set")).click()
    wait(browser).until(lambda d: fake.job(job_id)["priority"] == 7, "the priority was not set")
    wait(browser).until(lambda d: any("job.update" in r.text and "200" in r.text
                                      for r in css(d, tid("audit-row"))))
    row = one(browser, f'{tid("active-job-row")}[data-job-id="{job_id}"]')
    assert not row.find_element("css selector", tid("hold-button")).is_enabled()
    row.find_element("css selector", tid("requeue-button")).click()
    one(browser, tid("dialog-confirm")).click()
    wait(browser).until(lambda d: "requeue" in one(d, tid("alert-message")).text.lower(),
                        "the refused requeue was not shown")
    fake.post(f"/v1/jobs/{job_id}/cancel", fake.admin)
    fake.wait(job_id, FINAL)


def test_admin_usage_chart(fake, browser):
    """The admin page's usage card: a stacked bar chart of each user's CPU
    hours per day from GET /v1/usage, with the same totals in a table, and
    GPU hours and jobs on request."""
    for who, spec in ((fake.alice, tiny_spec("use-a", resources={"cpus_per_task": 2})),
                      (fake.bob, tiny_spec("use-b"))):
        job_id = fake.submit(who, spec)
        trainer_env(fake, job_id)                                  # RUNNING
        time.sleep(0.3)
        fake.post(f"/v1/jobs/{job_id}/cancel", fake.admin)
        fake.wait(job_id, FINAL)
    usage = {r["user"]: r for r in fake.get("/v1/usage?group_by=user", fake.admin).json()["usage"]}
    assert {"alice", "bob"} <= set(usage), usage

    sign_in(browser, fake, token_of(fake.admin))
    one(browser, tid("nav-admin")).click()
    chart = one(browser, tid("usage-chart", '[data-drawn="1"]'))
    assert chart.is_displayed()
    wait(browser).until(lambda d: set(one(d, tid("usage-chart")).get_attribute("data-users")
                                      .split(",")) >= {"alice", "bob"}, "both users charted")
    total = float(one(browser, tid("usage-chart")).get_attribute("data-total"))
    assert math.isclose(total, sum(r["cpu_hours"] for r in usage.values()), rel_tol=1e-6)
    rows = {r.get_attribute("data-user"): r.text for r in css(browser, tid("usage-row"))}
    assert set(rows) == set(usage) and rows["alice"].split()[-1] == str(usage["alice"]["jobs"])
    canvas = chart.find_element("css selector", "canvas")
    assert canvas.size["width"] > 100 and canvas.size["height"] > 100
    assert "alice" in canvas.get_attribute("aria-label")
    screenshot(browser, "admin-usage")
    from selenium.webdriver.support.ui import Select
    Select(one(browser, tid("usage-metric"))).select_by_value("jobs")
    wait(browser).until(lambda d: one(d, tid("usage-chart")).get_attribute("data-metric") == "jobs")
    assert float(one(browser, tid("usage-chart")).get_attribute("data-total")) == \
        sum(r["jobs"] for r in usage.values())


def test_admin_drains_and_resumes_a_slurm_node(tmp_path, slurm_cluster, browser):
    """With the Slurm executor: an admin drains the cluster's node from the
    page with a reason (Slurm holds it, verbatim), the page shows it
    drained, and Resume gives it back."""
    from test_admin_api import node_name, resume_node, sinfo_state, start_slurm
    admin = start_slurm(tmp_path, slurm_cluster)
    node = node_name(slurm_cluster)
    reason = f"kernel update {XSS}"
    try:
        sign_in(browser, admin.d, admin.d.admin_token)
        one(browser, tid("nav-admin")).click()
        row = one(browser, tid("node-row", f'[data-name="{node}"]'))
        row.find_element("css selector", tid("drain-button")).click()
        one(browser, tid("dialog-input")).send_keys(reason)
        one(browser, tid("dialog-confirm")).click()
        wait(browser, 30).until(
            lambda d: sinfo_state(slurm_cluster, node).split("|")[0] in ("drain", "drng"),
            "Slurm did not drain the node")
        assert sinfo_state(slurm_cluster, node).split("|", 1)[1] == reason
        row = wait(browser, 30).until(
            lambda d: [r for r in css(d, tid("node-row", f'[data-name="{node}"]'))
                       if r.get_attribute("data-state") in ("drain", "draining", "drained")],
            "the page does not show the node drained")[0]
        assert reason in row.text and not css(browser, "img")
        screenshot(browser, "admin-slurm-drained")
        row.find_element("css selector", tid("resume-button")).click()
        one(browser, tid("dialog-confirm")).click()
        wait(browser, 30).until(
            lambda d: sinfo_state(slurm_cluster, node).split("|")[0].rstrip("*") in ("idle", "mix",
                                                                                     "alloc"),
            "Slurm did not resume the node")
        wait(browser, 30).until(
            lambda d: css(d, tid("node-row", f'[data-name="{node}"]'))[0]
            .get_attribute("data-state") in ("idle", "mixed", "allocated"),
            "the page does not show the node back")
        audit = [r.text for r in css(browser, tid("audit-row"))]
        assert any("node.drain" in t and "200" in t for t in audit), audit
    finally:
        leave(browser)
        resume_node(slurm_cluster, node)
        admin.cancel_all()
        admin.d.stop()


def summary_value(driver, key):
    """The text of the job page's summary entry key."""
    return driver.execute_script(
        "const dt = [...document.querySelectorAll('[data-testid=\"summary\"] dt')]"
        ".find(e => e.textContent === arguments[0]);"
        "return dt ? dt.nextElementSibling.textContent : null", key)


def default_partition(cluster):
    """The name of the cluster's default partition (sinfo marks it with *)."""
    parts = cluster.run("sinfo", "-h", "-o", "%P").stdout.split()
    return next(p.rstrip("*") for p in parts if p.endswith("*"))


def test_slurm_partition_of_a_job_that_named_none(tmp_path, slurm_cluster, browser):
    """A Slurm job whose spec names no partition shows the one Slurm put it
    in (its default), in the jobs list and on its page."""
    from test_admin_api import start_slurm
    admin = start_slurm(tmp_path, slurm_cluster)
    try:
        job_id = admin.submit("no-partition")
        job = admin.wait_state(job_id, "RUNNING", timeout=60)
        assert "partition" not in job["spec"].get("resources", {}), job["spec"]
        part = default_partition(slurm_cluster)
        assert job["partition"] == part == slurm_cluster.job(job["slurm_job_id"])["Partition"]
        sign_in(browser, admin.d, admin.d.admin_token)
        row = one(browser, f'tr[data-job-id="{job_id}"]')
        assert row.find_element("css selector", ".col-partition").text == part
        open_fresh(browser, f"{admin.url}/#/jobs/{job_id}")
        one(browser, tid("summary") + " dt")
        assert summary_value(browser, "Partition") == part
    finally:
        leave(browser)
        admin.cancel_all()
        admin.d.stop()


def test_admin_page_is_forbidden_to_users(fake, browser):
    sign_in(browser, fake, token_of(fake.bob))
    assert one(browser, tid("whoami")).get_attribute("data-role") == "user"
    assert not one(browser, tid("nav-admin")).is_displayed()
    browser.get(fake.url + "/#/admin")
    box = one(browser, tid("forbidden"))
    assert "403" in box.text and "forbidden" in box.text
    assert not css(browser, tid("queues-table")) and not css(browser, tid("nodes-table"))


def test_sign_in_refusals_and_sign_out(fake, browser):
    browser.get(fake.url + "/")
    browser.execute_script("sessionStorage.clear()")
    open_fresh(browser, fake.url + "/#/jobs")                      # signed out: to sign-in
    wait(browser).until(lambda d: d.current_url.endswith("#/signin"))
    box = one(browser, tid("token-input"))
    box.send_keys("lt_" + "0" * 64)                                # well formed, unknown
    one(browser, tid("signin-submit")).click()
    alert = one(browser, tid("alert-message"))
    assert "401" in alert.text and "does not accept this token" in alert.text
    # signed in, the token stops working: back to sign-in, saying why
    sign_in(browser, fake, token_of(fake.bob))
    browser.execute_script(
        "const s = JSON.parse(sessionStorage.getItem('larch.session'));"
        "s.token = 'lt_' + '1'.repeat(64);"
        "sessionStorage.setItem('larch.session', JSON.stringify(s))")
    open_fresh(browser, fake.url + "/#/jobs")
    wait(browser).until(lambda d: d.current_url.endswith("#/signin"), "a 401 did not sign out")
    assert "no longer accepted" in one(browser, tid("alert-message")).text
    assert browser.execute_script("return sessionStorage.getItem('larch.session')") is None
    # sign out
    sign_in(browser, fake, token_of(fake.bob))
    one(browser, tid("signout")).click()
    one(browser, tid("token-input"))
    assert browser.execute_script("return sessionStorage.getItem('larch.session')") is None
    assert not css(browser, tid("whoami"))


# ---- 5. what users wrote stays text --------------------------------------------------

def test_user_text_is_rendered_as_text(fake, browser):
    # names are refused: the HTML goes in through the log, the result's reason, an audit entry
    r = fake.post("/v1/jobs", fake.alice, tiny_spec(XSS))
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_spec", r.text
    page = requests.get(fake.url + "/", timeout=10)
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    job_id = fake.submit(fake.alice, tiny_spec("xss"))
    job_token = {**fake.d.auth(trainer_env(fake, job_id)["LARCH_JOB_TOKEN"]), **JSON}
    r = fake.post(f"/v1/jobs/{job_id}/result", job_token,
                  {"status": "completed", "steps": 0, "reason": XSS})
    assert r.status_code == 200, r.text
    node = fake.get("/v1/nodes", fake.admin).json()["nodes"][0]["name"]
    fake.post(f"/v1/nodes/{node}/drain", fake.admin, {"reason": XSS})

    browser.get_log("browser")                                     # start afresh
    sign_in(browser, fake, token_of(fake.alice))
    open_fresh(browser, f"{fake.url}/#/jobs/{job_id}")
    wait(browser).until(lambda d: XSS in one(d, tid("logs")).get_attribute("textContent"),
                        "the log line never showed")
    wait(browser).until(lambda d: any(XSS in i.text for i in css(d, tid("timeline-item"))))
    assert not css(browser, "img"), "an <img> element was made from data"
    sign_in(browser, fake, token_of(fake.admin))
    browser.get(f"{fake.url}/#/admin")
    wait(browser).until(lambda d: any(XSS in r.text for r in css(d, tid("audit-row"))),
                        "the audit entry never showed")
    from selenium.common.exceptions import NoAlertPresentException
    assert not css(browser, "img"), "an <img> element was made from data"
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text
    assert not console_problems(browser)
    fake.post(f"/v1/jobs/{job_id}/cancel", fake.admin)
    fake.wait(job_id, FINAL)


# ---- 6. a job of 100,000 points per series ---------------------------------------------

def post_big_series(server, job_id, job_token):
    """BIG points of each of BIG_SERIES, in posts of 10,000 (the server's limit)."""
    t0 = 1763851234.0
    with requests.Session() as s:
        s.headers.update(job_token)
        for name in BIG_SERIES:
            for lo in range(1, BIG + 1, 10_000):
                points = []
                for step in range(lo, min(lo + 10_000, BIG + 1)):
                    if name == "train/lr":
                        v = 0.1 * min(1.0, step / 2000) * 0.5 * (1 + math.cos(math.pi * step / BIG))
                    else:
                        v = 2.3 * math.exp(-step / 15000) + 0.05 * math.sin(step / 37) + \
                            (0.1 if name == "val/loss" else 0.0) + (1.5 if step % 9973 == 0 else 0)
                    points.append({"step": step, "time": t0 + step * 0.01, "name": name,
                                   "value": v})
                r = s.post(f"{server.url}/v1/jobs/{job_id}/metrics", json={"metrics": points},
                           timeout=60)
                assert r.status_code == 200 and r.json()["accepted"] == len(points), r.text


def test_charts_of_100k_points_per_series(fake, browser):
    job_id = fake.submit(fake.alice, tiny_spec("big"))
    job_token = {**fake.d.auth(trainer_env(fake, job_id)["LARCH_JOB_TOKEN"]), **JSON}
    t = time.monotonic()
    post_big_series(fake, job_id, job_token)
    print(f"dashboard: posted {len(BIG_SERIES)} x {BIG} points in {time.monotonic() - t:.1f} s")
    sign_in(browser, fake, token_of(fake.alice))
    open_fresh(browser, f"{fake.url}/#/jobs/{job_id}")
    ms = float(wait(browser, 60).until(charts_ready, "the charts never drew"))
    print(f"dashboard: charts of {BIG} points/series ready in {ms:.0f} ms")
    max_points = int(one(browser, tid("charts")).get_attribute("data-max-points"))
    counts = chart_counts(browser)
    assert set(counts) == {"loss", "lr"}, counts
    assert set(counts["loss"]) == {"train/loss", "val/loss"}
    for chart, series in counts.items():
        for name, n in series.items():
            assert 0 < n <= max_points, (chart, name, n, max_points)
    fake.post(f"/v1/jobs/{job_id}/cancel", fake.admin)
    fake.wait(job_id, FINAL)


# ---- 7. a phone's width, and dark mode ---------------------------------------------------

def overflow(driver):
    """How far the page is wider than the window (0 when it fits)."""
    return driver.execute_script(
        "const e = document.documentElement;"
        "return Math.max(e.scrollWidth, document.body.scrollWidth) - e.clientWidth")


def luminance(rgb):
    def chan(c):
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (chan(float(x)) for x in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def colors(driver, selector):
    """(background, text) of an element as rgb triples."""
    got = driver.execute_script(
        "const s = getComputedStyle(document.querySelector(arguments[0]));"
        "return [s.backgroundColor, s.color]", selector)
    return [re.findall(r"[\d.]+", c)[:3] for c in got]


def contrast(bg, fg):
    a, b = sorted((luminance(bg), luminance(fg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


def test_narrow_and_dark(real, browser):
    real.wait(real.tiny, FINAL)
    sign_in(browser, real, token_of(real.alice))
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": 375, "height": 800, "deviceScaleFactor": 1, "mobile": True})
    try:
        open_fresh(browser, f"{real.url}/#/jobs")
        one(browser, tid("job-row"))
        assert browser.execute_script("return window.innerWidth") == 375
        assert overflow(browser) <= 0, "the jobs page is wider than 375 px"
        screenshot(browser, "narrow")
        open_fresh(browser, f"{real.url}/#/jobs/{real.tiny}")
        wait(browser).until(charts_ready, "the charts never drew")
        assert overflow(browser) <= 0, "the job page is wider than 375 px"
        screenshot(browser, "narrow-job")
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})

    light_bg, _ = colors(browser, "body")
    assert luminance(light_bg) > 0.8
    browser.get_log("browser")
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia",
                            {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    try:
        # the open page turns dark, charts included, without an error
        wait(browser).until(lambda d: luminance(colors(d, "body")[0]) < 0.05)
        browser.execute_async_script(          # two frames: the charts' redraw is done
            "requestAnimationFrame(() => requestAnimationFrame(arguments[0]))")
        assert not console_problems(browser)
        open_fresh(browser, f"{real.url}/#/jobs/{real.tiny}")
        wait(browser).until(charts_ready, "the charts never drew")
        bg, fg = colors(browser, "body")
        assert luminance(bg) < 0.05, bg
        assert contrast(bg, fg) >= 7, (bg, fg)
        card_bg, card_fg = colors(browser, ".card")
        assert contrast(card_bg, card_fg) >= 7, (card_bg, card_fg)
        assert overflow(browser) <= 0
        screenshot(browser, "dark")
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
