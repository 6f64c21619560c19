"""Comparing runs (docs/api.md, "Comparing runs"): GET /v1/metrics, one metric
of many jobs, and `larch compare`, against a real larchd.

The jobs run a stand-in trainer (Debian's python3) that reports a known
series over HTTP with the job's own token, as larch-train does: val/loss =
1 / (lr * step) at steps 1..40, every point 0.5 s after the one before, and
val/accuracy only for jobs whose name ends in "-acc". So every value, every
x and the downsampling can be checked exactly, in a second. larchd runs with
compare_max_jobs = 3 to show the setting reaches the route."""
import re
import subprocess

import pytest
import requests

from larchd import BUILD, Larchd, stand_in_trainer
from test_api_jobs import JSON, Server
from test_larchd_http import assert_error

STEPS = 40
DT = 0.5
REPORTER = r'''
import json, os, sys, time, urllib.request
spec = json.load(open(sys.argv[sys.argv.index("--spec") + 1]))
lr = spec["optimizer"]["lr"]
t0 = time.time()
points = [{"step": s, "time": t0 + s * %r, "name": "val/loss", "value": 1.0 / (lr * s)}
          for s in range(1, %d + 1)]
if spec["name"].endswith("-acc"):
    points += [{"step": s, "time": t0 + s * %r, "name": "val/accuracy", "value": s / 100}
               for s in range(1, %d + 1)]
req = urllib.request.Request(
    os.environ["LARCH_SERVER_URL"] + "/v1/jobs/" + os.environ["LARCH_JOB_ID"] + "/metrics",
    data=json.dumps({"metrics": points}).encode(), method="POST",
    headers={"Content-Type": "application/json",
             "Authorization": "Bearer " + os.environ["LARCH_JOB_TOKEN"]})
urllib.request.urlopen(req, timeout=10).read()
''' % (DT, STEPS, DT, STEPS)


def spec(name, lr, batch):
    return {"name": name, "model": {"type": "mlp", "hidden": [16]},
            "data": {"name": "fashion-mnist"}, "batch": {"global": batch},
            "optimizer": {"type": "sgd", "lr": lr}, "steps": STEPS}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    script = tmp / "reporter.py"
    script.write_text(REPORTER)
    script.chmod(0o644)
    tmp.chmod(0o755)
    trainer = stand_in_trainer(tmp / "fake-train", f'exec /usr/bin/python3 {script} "$@"\n')
    server = Server(tmp, ["--trainer-path", str(trainer), "--compare-max-jobs", "3"])
    server.a = server.submit(server.alice, spec("lr-small", 0.05, 256))
    server.b = server.submit(server.alice, spec("lr-big-acc", 0.2, 1024))
    server.c = server.submit(server.bob, spec("bobs", 0.1, 256))
    for job in (server.a, server.b, server.c):
        assert server.wait(job, {"COMPLETED", "FAILED"})["state"] == "COMPLETED", \
            server.d.log()[-3000:]
    yield server
    server.stop()


def compare(site, who, **params):
    return requests.get(site.url + "/v1/metrics", params=params, headers=who, timeout=10)


def test_two_jobs_side_by_side(site):
    r = compare(site, site.alice, jobs=f"{site.b},{site.a}", name="val/loss")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["name"] == "val/loss" and body["x"] == "step"
    assert [j["id"] for j in body["jobs"]] == [site.b, site.a]   # the order asked for
    for entry, lr, name in [(body["jobs"][0], 0.2, "lr-big-acc"), (body["jobs"][1], 0.05, "lr-small")]:
        assert entry["name"] == name and entry["state"] == "COMPLETED" and "error" not in entry
        assert [p[0] for p in entry["points"]] == list(range(1, STEPS + 1))
        assert [p[1] for p in entry["points"]] == pytest.approx([1 / (lr * s) for s in range(1, STEPS + 1)])


def test_downsampled_as_the_one_job_route(site):
    r = compare(site, site.alice, jobs=f"{site.a},{site.b}", name="val/loss", max_points=10)
    assert r.status_code == 200, r.text
    for entry in r.json()["jobs"]:
        one = requests.get(f"{site.url}/v1/jobs/{entry['id']}/metrics", headers=site.alice,
                           params={"name": "val/loss", "max_points": 10}, timeout=10).json()
        assert 2 <= len(entry["points"]) <= 10
        assert entry["points"] == one["series"]["val/loss"]
    # a step range, as the one-job route reads it
    r = compare(site, site.alice, jobs=site.a, name="val/loss", from_step=5, to_step=7)
    assert [p[0] for p in r.json()["jobs"][0]["points"]] == [5, 6, 7]


def test_x_examples_is_step_times_global_batch(site):
    r = compare(site, site.alice, jobs=f"{site.a},{site.b}", name="val/loss", x="examples")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["x"] == "examples"
    for entry, batch in zip(body["jobs"], [256, 1024]):
        assert [(p[0], p[2]) for p in entry["points"]] == [(s * batch, s) for s in range(1, STEPS + 1)]


def test_x_time_is_seconds_since_the_job_started(site):
    r = compare(site, site.alice, jobs=site.a, name="val/loss", x="time")
    assert r.status_code == 200, r.text
    points = r.json()["jobs"][0]["points"]
    assert [p[2] for p in points] == list(range(1, STEPS + 1))
    xs = [p[0] for p in points]
    # the reporter started after the job entered RUNNING: its first point is DT later still
    assert 0 < xs[0] < 30
    assert [b - a for a, b in zip(xs, xs[1:])] == pytest.approx([DT] * (STEPS - 1), abs=0.002)


def test_a_job_without_the_metric_has_no_points(site):
    r = compare(site, site.alice, jobs=f"{site.a},{site.b}", name="val/accuracy")
    assert r.status_code == 200, r.text
    a, b = r.json()["jobs"]
    assert a["points"] == [] and len(b["points"]) == STEPS


def test_another_users_job_reads_as_a_missing_one(site):
    missing = "j-999999"
    r = compare(site, site.alice, jobs=f"{site.a},{site.c},{missing}", name="val/loss")
    assert r.status_code == 200, r.text
    mine, bobs, none = r.json()["jobs"]
    assert len(mine["points"]) == STEPS
    assert set(bobs) == {"id", "error"} and set(none) == {"id", "error"}
    assert bobs["error"] == {"code": "not_found", "message": f"no job {site.c}"}
    assert none["error"] == {"code": "not_found", "message": f"no job {missing}"}
    # the admin reads everyone's
    r = compare(site, site.admin, jobs=f"{site.a},{site.c}", name="val/loss")
    assert [len(j["points"]) for j in r.json()["jobs"]] == [STEPS, STEPS]


@pytest.mark.parametrize("params, parameter, message", [
    ({"name": "val/loss"}, "jobs", "jobs: required"),
    ({"jobs": "", "name": "val/loss"}, "jobs", "jobs: required"),
    ({"jobs": "nope", "name": "val/loss"}, "jobs", 'jobs: "nope" is not a job id'),
    ({"jobs": "j-1", "name": "val/loss"}, "jobs", 'jobs: "j-1" is not a job id'),
    ({"jobs": "j-0000001", "name": "val/loss"}, "jobs", 'jobs: "j-0000001" is not a job id'),
    ({"jobs": "j-000001,", "name": "val/loss"}, "jobs", 'jobs: "" is not a job id'),
    ({"jobs": "j-000001,j-000001", "name": "val/loss"}, "jobs", "jobs: j-000001 is named twice"),
    ({"jobs": "j-000001,j-000002,j-000003,j-000004", "name": "val/loss"}, "jobs",
     "jobs: at most 3 jobs in one request (got 4)"),
    ({"jobs": "j-000001"}, "name", "name: required"),
    ({"jobs": "j-000001", "name": "../x"}, "name", "name: must be 1 to 64 characters"),
    ({"jobs": "j-000001", "name": "val/loss", "max_points": "0"}, "max_points", "max_points"),
    ({"jobs": "j-000001", "name": "val/loss", "max_points": "10001"}, "max_points", "max_points"),
    ({"jobs": "j-000001", "name": "val/loss", "max_points": "many"}, "max_points", "max_points"),
    ({"jobs": "j-000001", "name": "val/loss", "x": "epochs"}, "x",
     'x: must be step, examples or time (got "epochs")'),
    ({"jobs": "j-000001", "name": "val/loss", "from_step": "9", "to_step": "3"}, "to_step",
     "to_step: must be >= from_step"),
])
def test_bad_requests(site, params, parameter, message):
    err = assert_error(compare(site, site.alice, **params), 400, "bad_request")
    assert err["message"].startswith(message), err["message"]
    assert err["detail"] == {"parameter": parameter}


def test_unknown_parameter_and_tokens(site):
    r = compare(site, site.alice, jobs=site.a, name="val/loss", step="1")
    assert_error(r, 400, "bad_request")
    assert_error(compare(site, {}, jobs=site.a, name="val/loss"), 401, "unauthorized")


# ---- larch compare -----------------------------------------------------------------


def larch(site, token_headers, *args):
    token = token_headers["Authorization"].split()[1]
    env = {"PATH": "/usr/bin:/bin", "LARCH_URL": site.url, "LARCH_TOKEN": token,
           "HOME": "/nonexistent"}
    return subprocess.run([str(BUILD / "service" / "larch"), *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=30)


def test_cli_compare_side_by_side(site):
    out = larch(site, site.alice, "compare", site.a, site.b, "--name", "val/loss", "--rows", "3")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    lines = out.stdout.splitlines()
    assert lines[0] == "val/loss by step (best: lowest)"
    head = next(i for i, l in enumerate(lines) if l.split()[:1] == ["STEP"])
    summary = {l.split()[0]: l.split() for l in lines[:head] if l.startswith("j-")}
    # JOB NAME STATE POINTS LAST AT BEST AT: lr 0.05 ends at 1/(0.05*40) = 0.5
    assert summary[site.a][1:] == ["lr-small", "COMPLETED", "40", "0.5", "40", "0.5", "40"]
    assert summary[site.b][1:] == ["lr-big-acc", "COMPLETED", "40", "0.125", "40", "0.125", "40"]
    assert lines[head].split() == ["STEP", site.a, site.b]
    rows = [l.split() for l in lines[head + 1:head + 4]]
    assert rows == [["1", "20", "5"], ["20", "1", "0.25"], ["40", "0.5", "0.125"]]
    # the differing spec fields, a line per job; the same fields stay out
    diff = {l.split()[0]: l.split()[1:] for l in lines[head + 4:] if l.startswith("j-")}
    # (the stored spec has its defaults filled in: batch.micro and .reference follow global)
    assert diff[site.a] == ["batch.global=256", "batch.micro=256", "batch.reference=256",
                            "optimizer.lr=0.05"]
    assert diff[site.b] == ["batch.global=1024", "batch.micro=1024", "batch.reference=1024",
                            "optimizer.lr=0.2"]


def test_cli_compare_examples_best_and_a_missing_job(site):
    out = larch(site, site.alice, "compare", site.a, site.b, site.c, "--name", "val/accuracy",
                "--x", "examples")
    assert out.returncode == 1
    assert out.stderr == f"larch: job {site.c}: no job {site.c}\n"
    lines = out.stdout.splitlines()
    assert lines[0] == "val/accuracy by examples (best: highest)"
    summary = {l.split()[0]: l.split() for l in lines[:5] if l.startswith("j-")}
    assert summary[site.a][1:4] == ["lr-small", "COMPLETED", "0"]
    assert summary[site.b][4:] == ["0.4", str(40 * 1024), "0.4", str(40 * 1024)]
    assert "no x that every job has a point at" in out.stdout
    js = larch(site, site.alice, "compare", site.a, site.b, "--name", "val/loss", "--json")
    assert js.returncode == 0, js.stderr
    import json
    body = json.loads(js.stdout)
    assert body["jobs"][0]["differs"] == {"batch.global": 256, "batch.micro": 256,
                                          "batch.reference": 256, "optimizer.lr": 0.05}


@pytest.mark.parametrize("args, message", [
    (["j-000001", "--name", "val/loss"], "two or more job ids are required"),
    (["j-000001", "j-000002"], "--name is required"),
    (["j-000001", "j-000002", "--name", "x", "--x", "epochs"], "--x: must be step, examples or time"),
    (["j-000001", "j-000002", "--name", "x", "--best", "top"], "--best: must be min or max"),
])
def test_cli_compare_usage(site, args, message):
    out = larch(site, site.alice, "compare", *args)
    assert out.returncode == 2
    assert out.stderr.startswith(f"larch compare: {message}"), out.stderr


def test_cli_compare_refused_by_larchd(site):
    out = larch(site, site.alice, "compare", "j-000001", "nope", "--name", "val/loss")
    assert out.returncode == 1
    assert 'jobs: \\"nope\\" is not a job id' in out.stderr or '"nope" is not a job id' in out.stderr


# ---- the dashboard's compare page (headless chromium, as test_dashboard.py) ---------


@pytest.fixture(scope="module")
def browser():
    from browser import chrome
    driver = chrome()
    yield driver
    driver.quit()


def test_dashboard_compare_page(site, browser):
    from browser import screenshot
    from test_dashboard import console_problems, css, leave, one, row_ids, sign_in, tid, wait
    try:
        sign_in(browser, site, site.alice["Authorization"].split()[1])
        wait(browser).until(lambda d: set(row_ids(d)) == {site.a, site.b})
        compare_btn = one(browser, tid("compare-selected"))
        assert not compare_btn.is_enabled()
        for job in (site.a, site.b):
            one(browser, f'tr[data-job-id="{job}"] {tid("job-select")}').click()
        wait(browser).until(lambda d: compare_btn.is_enabled())
        compare_btn.click()
        wait(browser).until(lambda d: d.execute_script(
            "return document.body.dataset.compareReady") == "val/loss step")
        assert browser.current_url.endswith(f"#/compare?jobs={site.a},{site.b}&name=val/loss")
        chart = one(browser, tid("compare-chart"))
        assert chart.get_attribute("data-series") == f"{site.a}:{STEPS} {site.b}:{STEPS}"
        # the metric picker offers the union of the jobs' series
        options = [o.get_attribute("value") for o in css(browser, tid("compare-metric") + " option")]
        assert options == ["val/accuracy", "val/loss"]
        # the spec fields that differ, one row each, a column per job
        rows = {r.get_attribute("data-path"): [c.text for c in r.find_elements("css selector", "td")]
                for r in css(browser, tid("diff-row"))}
        assert rows == {"batch.global": ["256", "1024"], "batch.micro": ["256", "1024"],
                        "batch.reference": ["256", "1024"], "optimizer.lr": ["0.05", "0.2"]}
        # another metric, against examples seen: b alone has val/accuracy
        from selenium.webdriver.support.ui import Select
        Select(one(browser, tid("compare-metric"))).select_by_value("val/accuracy")
        Select(one(browser, tid("compare-x"))).select_by_value("examples")
        wait(browser).until(lambda d: d.execute_script(
            "return document.body.dataset.compareReady") == "val/accuracy examples")
        assert chart.get_attribute("data-series") == f"{site.a}:0 {site.b}:{STEPS}"
        assert "no points: " + site.a in one(browser, tid("compare-status")).text
        assert browser.current_url.endswith("&name=val/accuracy&x=examples")
        screenshot(browser, "compare")
        # a job of bob's in alice's address is "not found", and is left out of the chart
        browser.get(f"{site.url}/#/compare?jobs={site.a},{site.c}&name=val/loss")
        wait(browser).until(lambda d: css(d, f'{tid("compare-job")}[data-job-id="{site.c}"]')
                            and "not found" in css(d, f'[data-job-id="{site.c}"]')[0].text)
        assert console_problems(browser) == []
    finally:
        leave(browser)
