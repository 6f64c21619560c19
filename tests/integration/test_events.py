"""GET /v1/events, the dashboard's long poll on job changes, against a real
larchd: it answers as soon as a change the caller may see is committed,
waits out its timeout otherwise, keeps users to their own jobs, tells a
client with a stale cursor to reload, refuses bad parameters, and lets
larchd stop at once with polls parked."""
import concurrent.futures
import pathlib
import re
import shutil
import subprocess
import time

import pytest
import requests

from larchd import Larchd

FAST_SPEC = {"name": "ev", "model": {"type": "mlp", "hidden": [8]},
             "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
             "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 5}


class Feed:
    """A larchd whose trainer is /bin/true (jobs end at once), with users
    alice and bob."""

    def __init__(self, tmp):
        self.d = Larchd(tmp, args=["--trainer-path", shutil.which("true")]).start()
        self.url = self.d.url
        self.admin = self.d.auth()
        self.alice = self.d.auth(self.token("alice"))
        self.bob = self.d.auth(self.token("bob"))

    def token(self, user, role="user"):
        out = subprocess.run([str(self.d.exe), "token", "create", "--user", user, "--role", role,
                              "--state-dir", str(self.d.state_dir)],
                             capture_output=True, text=True, timeout=10, check=True)
        return out.stdout.strip()

    def start(self, who):
        r = requests.get(self.url + "/v1/events", headers=who, timeout=10)
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) == {"stream", "last", "reset", "changes"}
        assert body["changes"] == [] and body["reset"] is False
        return body

    def poll(self, who, after, stream, timeout=20, **extra):
        params = {"after": after, "stream": stream, "timeout": timeout, **extra}
        t0 = time.monotonic()
        r = requests.get(self.url + "/v1/events", headers=who, params=params, timeout=timeout + 10)
        assert r.status_code == 200, r.text
        assert r.headers["Cache-Control"] == "no-store" and "ETag" not in r.headers
        return r.json(), time.monotonic() - t0

    def submit(self, who, name="ev"):
        r = requests.post(self.url + "/v1/jobs", headers=who, json={**FAST_SPEC, "name": name},
                          timeout=10)
        assert r.status_code == 201, r.text
        return r.json()["id"]


@pytest.fixture(scope="module")
def feed(tmp_path_factory):
    f = Feed(tmp_path_factory.mktemp("events"))
    yield f
    f.d.stop()


def test_a_parked_poll_answers_when_a_job_changes(feed):
    start = feed.start(feed.admin)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(feed.poll, feed.admin, start["last"], start["stream"], 30)
        time.sleep(0.5)
        assert not waiting.done(), "the poll answered with nothing to say"
        job = feed.submit(feed.admin)
        body, took = waiting.result(timeout=20)
    assert took < 15, f"the poll took {took:.1f}s to see the submit"
    assert body["reset"] is False and body["stream"] == start["stream"]
    first = body["changes"][0]
    assert first == {"seq": start["last"] + 1, "job": job, "state": "PENDING",
                     "time": first["time"]}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["time"])
    assert body["last"] == body["changes"][-1]["seq"]

    # the rest of the job's life, in order, from where the client stopped
    seen = [c["state"] for c in body["changes"]]
    last = body["last"]
    deadline = time.monotonic() + 30
    while seen[-1] not in ("COMPLETED", "FAILED"):
        assert time.monotonic() < deadline, seen
        body, _ = feed.poll(feed.admin, last, start["stream"], 10)
        assert [c["seq"] for c in body["changes"]] == list(range(last + 1, body["last"] + 1))
        seen += [c["state"] for c in body["changes"] if c["job"] == job]
        last = body["last"]
    assert seen[0] == "PENDING" and "RUNNING" in seen and seen[-1] == "COMPLETED", seen


def test_a_poll_with_nothing_new_waits_its_timeout(feed):
    start = feed.start(feed.admin)
    body, took = feed.poll(feed.admin, start["last"], start["stream"], timeout=1)
    assert body["changes"] == [] and body["last"] == start["last"] and not body["reset"]
    assert 0.9 <= took < 5, took
    body, took = feed.poll(feed.admin, start["last"], start["stream"], timeout=0)
    assert body["changes"] == [] and took < 1


def test_users_see_only_their_own_jobs(feed):
    a, b = feed.start(feed.alice), feed.start(feed.bob)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        alice = pool.submit(feed.poll, feed.alice, a["last"], a["stream"], 3)
        bob = pool.submit(feed.poll, feed.bob, b["last"], b["stream"], 20)
        time.sleep(0.3)
        job = feed.submit(feed.bob, "bobs")
        bob_body, bob_took = bob.result(timeout=30)
        alice_body, alice_took = alice.result(timeout=30)
    assert bob_took < 10 and bob_body["changes"][0]["job"] == job
    assert all(c["job"] == job for c in bob_body["changes"])
    # alice was not woken with bob's change: she waited her whole timeout
    assert alice_body["changes"] == [] and alice_took >= 2.9, (alice_body, alice_took)
    assert alice_body["last"] >= bob_body["changes"][0]["seq"]
    # an admin's feed has bob's job too
    body, _ = feed.poll(feed.admin, a["last"], a["stream"], 0)
    assert job in {c["job"] for c in body["changes"]}


def test_a_stale_cursor_is_told_to_reload(feed):
    start = feed.start(feed.admin)
    for after, stream in ((start["last"], "another-larchd"), (start["last"] + 1000, start["stream"])):
        body, took = feed.poll(feed.admin, after, stream, timeout=20)
        assert body["reset"] is True and body["changes"] == [] and took < 2, body
        assert body["last"] >= start["last"] and body["stream"] == start["stream"]


def test_a_full_answer_goes_on_from_its_last_change(feed):
    """More than 500 changes: the first answer has 500 and says where it
    stopped; the next poll has the rest at once, none lost or repeated."""
    start = feed.start(feed.admin)
    deadline = time.monotonic() + 120
    while feed.start(feed.admin)["last"] < start["last"] + 520:
        assert time.monotonic() < deadline, "too few changes in 120 s"
        r = requests.post(feed.url + "/v1/jobs", headers=feed.admin, json=FAST_SPEC, timeout=10)
        assert r.status_code in (201, 429), r.text
        if r.status_code == 429:
            time.sleep(0.05)
    body, took = feed.poll(feed.admin, start["last"], start["stream"], 20)
    assert len(body["changes"]) == 500 and took < 2
    assert body["last"] == body["changes"][-1]["seq"] == start["last"] + 500
    rest, took = feed.poll(feed.admin, body["last"], start["stream"], 20)
    assert rest["changes"] and took < 2
    seqs = [c["seq"] for c in body["changes"] + rest["changes"]]
    assert seqs == list(range(start["last"] + 1, rest["last"] + 1))


@pytest.mark.parametrize("query,parameter", [
    ("after=-1", "after"), ("after=x", "after"), ("after=1&timeout=61", "timeout"),
    ("after=1&timeout=1.5", "timeout"), ("stream=abc", "stream"), ("after=1&after=2", "after"),
    ("since=3", "since"),
])
def test_bad_parameters_are_refused(feed, query, parameter):
    r = requests.get(f"{feed.url}/v1/events?{query}", headers=feed.admin, timeout=10)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "bad_request" and err["detail"]["parameter"] == parameter, err


def test_the_feed_needs_a_user_token(feed):
    assert requests.get(feed.url + "/v1/events", timeout=10).status_code == 401
    r = requests.get(feed.url + "/v1/events", timeout=10,
                     headers={"Authorization": "Bearer lt_" + "0" * 64})
    assert r.status_code == 401


def test_parked_polls_are_counted_and_answered_on_shutdown(tmp_path):
    server = Larchd(tmp_path, args=["--trainer-path", shutil.which("true")]).start()
    admin = server.auth()
    start = requests.get(server.url + "/v1/events", headers=admin, timeout=10).json()
    params = {"after": start["last"], "stream": start["stream"], "timeout": 60}
    n = 20
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        polls = [pool.submit(requests.get, server.url + "/v1/events", headers=admin,
                             params=params, timeout=90) for _ in range(n)]
        deadline = time.monotonic() + 20
        while True:
            metrics = requests.get(server.url + "/metrics", headers=admin, timeout=10).text
            waiting = int(re.search(r"^larch_events_waiting (\d+)$", metrics, re.M).group(1))
            if waiting == n:
                break
            assert time.monotonic() < deadline, f"{waiting} of {n} polls parked"
            time.sleep(0.05)
        t0 = time.monotonic()
        server.stop(timeout=20)
        took = time.monotonic() - t0
        answers = [p.result(timeout=30) for p in polls]
    assert took < 10, f"larchd took {took:.1f}s to stop with {n} polls parked"
    assert all(a.status_code == 200 and a.json()["changes"] == [] for a in answers)


def test_one_change_wakes_every_parked_client(tmp_path):
    """100 clients parked on the feed: one submit answers them all, each
    with the change (tests/bench/bench_dashboard.py measures what they cost)."""
    server = Larchd(tmp_path, args=["--trainer-path", shutil.which("false")]).start()
    admin = server.auth()
    start = requests.get(server.url + "/v1/events", headers=admin, timeout=10).json()
    params = {"after": start["last"], "stream": start["stream"], "timeout": 60}
    n = 100
    try:
        with concurrent.futures.ThreadPoolExecutor(n) as pool:
            polls = [pool.submit(requests.get, server.url + "/v1/events", headers=admin,
                                 params=params, timeout=90) for _ in range(n)]
            deadline = time.monotonic() + 30
            while "larch_events_waiting 100\n" not in requests.get(
                    server.url + "/metrics", headers=admin, timeout=10).text:
                assert time.monotonic() < deadline, "the 100 polls did not all park"
                time.sleep(0.05)
            r = requests.post(server.url + "/v1/jobs", headers=admin, json=FAST_SPEC, timeout=10)
            assert r.status_code == 201, r.text
            job = r.json()["id"]
            answers = [p.result(timeout=30) for p in polls]
        for a in answers:
            assert a.status_code == 200
            assert a.json()["changes"][0]["job"] == job
    finally:
        server.stop()
