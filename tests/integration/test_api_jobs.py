"""The job endpoints of larchd's REST API (docs/api.md) end to end: a real
larchd running real larch-train jobs, driven over HTTP with requests.

Two servers per module, to keep the run short: `real` runs larch-train (a
tiny job that completes, a long one that is cancelled); `fast` runs a stand-in
trainer that exits at once, for what needs many jobs (pages, idempotency,
filters) but no training.

Users come from `larchd token create` on the server's state dir (the db is
shared with the running larchd). The per-job token (LARCH_JOB_TOKEN) is what
the runner puts in the trainer's environment: it is read from
/proc/PID/environ of the running trainer, whose pid the RUNNING event names.
"""
import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import time

import pytest
import requests

from larchd import Larchd, stand_in_trainer
from test_larchd_http import assert_error

JSON = {"Content-Type": "application/json"}
JOB_ID = re.compile(r"^j-\d{6,}$")
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}


def tiny_spec(name="t", steps=30, **extra):
    return {"name": name, "model": {"type": "mlp", "hidden": [16]},
            "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
            "optimizer": {"type": "sgd", "lr": 0.1}, "steps": steps, "log_every": 5, **extra}


class Server:
    """A started Larchd with users: .admin, .alice, .bob are header dicts."""

    def __init__(self, tmp, args=()):
        tmp.mkdir(parents=True, exist_ok=True)
        self.d = Larchd(tmp, args=list(args)).start()
        self.url = self.d.url
        self.admin = {**self.d.auth(), **JSON}
        self.alice = {**self.d.auth(self.make_user("alice")), **JSON}
        self.bob = {**self.d.auth(self.make_user("bob")), **JSON}

    def make_user(self, user, role="user"):
        out = subprocess.run([str(self.d.exe), "token", "create", "--user", user, "--role", role,
                              "--state-dir", str(self.d.state_dir)],
                             capture_output=True, text=True, timeout=10)
        assert out.returncode == 0, out.stderr
        token = out.stdout.strip()
        assert re.fullmatch(r"lt_[0-9a-f]{64}", token)
        return token

    def get(self, path, who, **kw):
        return requests.get(self.url + path, headers=who, timeout=10, **kw)

    def post(self, path, who, body=None, headers=None, **kw):
        return requests.post(self.url + path, headers={**who, **(headers or {})},
                             json=body, timeout=10, **kw)

    def submit(self, who, spec, headers=None):
        r = self.post("/v1/jobs", who, spec, headers)
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def job(self, job_id, who=None):
        r = self.get(f"/v1/jobs/{job_id}", who or self.admin)
        assert r.status_code == 200, r.text
        return r.json()

    def wait(self, job_id, states, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job["state"] in states:
                return job
            assert time.monotonic() < deadline, f"{job_id} still {job['state']} after {timeout}s"
            time.sleep(0.05)

    def events(self, job_id, who=None):
        r = self.get(f"/v1/jobs/{job_id}/events", who or self.admin)
        assert r.status_code == 200, r.text
        return r.json()["events"]

    def stop(self):
        self.d.stop()
        assert not re.search(r" [A-Z]+ \S+ 5\d\d \d+us", self.d.log()), "a 5xx was logged"


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("real"))
    # the tiny job starts at once, so that it runs while the first tests set up
    server.tiny = server.submit(server.alice, tiny_spec("tiny"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fast(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fast")
    trainer = tmp / "fake-train"
    stand_in_trainer(trainer, "exit 0\n")
    server = Server(tmp, ["--trainer-path", str(trainer)])
    yield server
    server.stop()


def trainer_env(server, job_id, timeout=30):
    """The environment of the job's running trainer."""
    deadline = time.monotonic() + timeout
    while True:
        events = server.events(job_id)
        if events[-1]["to"] == "RUNNING":
            break
        assert time.monotonic() < deadline, events
        time.sleep(0.05)
    pid = int(re.match(r"pid (\d+)", events[-1]["reason"]).group(1))
    # until the child has exec'd the trainer, its environment is larchd's
    while True:
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        env = dict(e.decode().split("=", 1) for e in env if e.startswith(b"LARCH_"))
        if "LARCH_JOB_TOKEN" in env:
            return env
        assert time.monotonic() < deadline, f"pid {pid} has no LARCH_JOB_TOKEN after {timeout}s"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def long_job(real):
    """A long job of alice's, running, with its job token; cancelled by
    test_cancel_running_job (and here, if that did not run)."""
    job_id = real.submit(real.alice, tiny_spec("long", steps=100000, checkpoint_every=0))
    env = trainer_env(real, job_id)
    assert env["LARCH_JOB_ID"] == job_id
    assert env["LARCH_SERVER_URL"] == real.url
    token = env["LARCH_JOB_TOKEN"]
    yield job_id, {**real.d.auth(token), **JSON}
    if real.job(job_id)["state"] not in FINAL:
        real.post(f"/v1/jobs/{job_id}/cancel", real.admin)
        real.wait(job_id, FINAL)


# ---- a job from submit to COMPLETED -------------------------------------------

def test_submit_returns_201_location_and_the_job(real):
    r = real.post("/v1/jobs", real.alice, tiny_spec("shape", steps=1))
    assert r.status_code == 201, r.text
    job = r.json()
    assert JOB_ID.match(job["id"])
    assert r.headers["Location"] == f"/v1/jobs/{job['id']}"
    assert r.headers["Content-Type"] == "application/json"
    assert set(job) == {"id", "name", "owner", "run_as", "state", "executor", "slurm_job_id",
                        "partition", "node_list", "priority", "attempt", "created_at", "started_at",
                        "ended_at", "exit_code", "reason", "spec", "progress", "sweep", "labels"}
    assert job["name"] == "shape" and job["owner"] == "alice"
    # as root, jobs run as their owners (docs/api.md, "Users and who jobs run as")
    assert job["run_as"] == ("alice" if real.d.owner_mode else None)
    assert job["state"] in {"PENDING", "QUEUED", "RUNNING"}
    assert job["executor"] == "local" and job["attempt"] == 1 and job["partition"] is None
    assert TIME.match(job["created_at"]) and job["ended_at"] is None
    # the effective spec: what was sent, defaults filled in
    assert job["spec"]["steps"] == 1 and job["spec"]["model"]["hidden"] == [16]
    assert job["spec"]["batch"]["micro"] == 256 and job["spec"]["seed"] == 0
    # the Location is the job
    again = real.get(r.headers["Location"], real.alice)
    assert again.status_code == 200 and again.json()["id"] == job["id"]
    assert again.json()["spec"] == job["spec"]


def test_tiny_job_completes(real):
    job = real.wait(real.tiny, FINAL)
    assert job["state"] == "COMPLETED", job
    assert job["exit_code"] == 0
    assert TIME.match(job["started_at"]) and TIME.match(job["ended_at"])
    assert job["created_at"] <= job["started_at"] <= job["ended_at"]
    assert job["progress"]["step"] == 30 and job["progress"]["total_steps"] == 30
    assert 0 < job["progress"]["train/loss"] < 5


def test_events(real):
    real.wait(real.tiny, FINAL)
    events = real.events(real.tiny, real.alice)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    times = [e["time"] for e in events]
    assert all(TIME.match(t) for t in times) and times == sorted(times)
    assert events[0] == {**events[0], "from": None, "to": "PENDING", "by": "alice",
                         "reason": "submitted"}
    changes = [e for e in events if e["from"] != e["to"]]
    assert [e["to"] for e in changes] == ["PENDING", "QUEUED", "RUNNING", "COMPLETED"]
    assert all(a["to"] == b["from"] for a, b in zip(changes, changes[1:]))
    assert changes[1]["by"] == changes[2]["by"] == "executor"
    assert re.fullmatch(r"pid \d+", changes[2]["reason"])
    # the trainer's result is a note: no state change
    notes = [e for e in events if e["from"] == e["to"]]
    assert len(notes) == 1 and notes[0]["by"] == "trainer"
    assert notes[0]["reason"].startswith("result: completed, 30 steps")


def test_logs_and_paging(real):
    real.wait(real.tiny, FINAL)
    path = f"/v1/jobs/{real.tiny}/logs"
    whole = real.get(path, real.alice).json()
    assert whole["stream"] == "stdout" and whole["offset"] == 0
    size = whole["size"]
    assert size > 200 and whole["next_offset"] == size and len(whole["data"]) == size
    assert "larch-train: tiny: mlp model" in whole["data"]
    on_disk = (real.d.state_dir / "jobs" / real.tiny / "stdout.log").read_text()
    assert whole["data"] == on_disk
    # pages of 100 bytes, following next_offset, put it back together
    pieces, offset = [], 0
    while offset < size:
        page = real.get(path, real.alice, params={"offset": offset, "limit": 100}).json()
        assert page["offset"] == offset and page["size"] == size
        assert 0 < page["next_offset"] - offset <= 100
        pieces.append(page["data"])
        offset = page["next_offset"]
    assert "".join(pieces) == whole["data"] and len(pieces) == -(-size // 100)
    # past the end: nothing, and next_offset stays at the end
    end = real.get(path, real.alice, params={"offset": size + 10}).json()
    assert end["data"] == "" and end["next_offset"] == size
    # tail: the last bytes in one read, offset saying where they begin
    for n in (1, 57, size - 1, size, size + 1000):
        tail = real.get(path, real.alice, params={"tail": n}).json()
        assert tail["offset"] == max(0, size - n) and tail["next_offset"] == size
        assert tail["size"] == size and tail["data"] == whole["data"][tail["offset"]:]
    err = real.get(path, real.alice, params={"stream": "stderr"}).json()
    assert err["stream"] == "stderr"
    assert err["data"] == (real.d.state_dir / "jobs" / real.tiny / "stderr.log").read_text()
    assert err["size"] == len(err["data"].encode())


def test_checkpoints(real):
    real.wait(real.tiny, FINAL)
    r = real.get(f"/v1/jobs/{real.tiny}/checkpoints", real.alice)
    assert r.status_code == 200
    (ckpt,) = r.json()["checkpoints"]           # the final one at step 30
    # users see how to start from it, not where larchd keeps it
    assert set(ckpt) == {"step", "init", "bytes", "sha256", "time"}
    assert ckpt["init"] == {"job": real.tiny, "step": 30}
    assert ckpt["step"] == 30 and TIME.match(ckpt["time"])
    (ckpt,) = real.get(f"/v1/jobs/{real.tiny}/checkpoints", real.admin).json()["checkpoints"]
    assert set(ckpt) == {"step", "init", "path", "bytes", "sha256", "time"}
    data = open(ckpt["path"], "rb").read()
    assert ckpt["path"].startswith(str(real.d.state_dir / "jobs" / real.tiny) + "/")
    assert ckpt["bytes"] == len(data)
    assert ckpt["sha256"] == hashlib.sha256(data).hexdigest()


def test_metrics(real):
    real.wait(real.tiny, FINAL)
    path = f"/v1/jobs/{real.tiny}/metrics"
    series = real.get(path, real.alice).json()["series"]
    assert {"train/loss", "train/lr", "val/loss", "val/accuracy"} <= set(series)
    loss = series["train/loss"]
    assert [p[0] for p in loss] == list(range(1, 31))
    assert all(len(p) == 2 and isinstance(p[1], float) for p in loss)
    # the same points the trainer wrote to metrics.jsonl
    lines = [json.loads(x) for x in (real.d.state_dir / "jobs" / real.tiny / "metrics.jsonl")
             .read_text().splitlines()]
    want = {(m["step"], m["value"]) for m in lines if m.get("name") == "train/loss"}
    assert {(s, v) for s, v in loss} == want
    # name filter (repeatable), step range
    r = real.get(path, real.alice, params={"name": ["train/loss", "val/loss"]}).json()
    assert set(r["series"]) == {"train/loss", "val/loss"}
    r = real.get(path, real.alice, params={"name": "train/loss", "from_step": 10,
                                           "to_step": 12}).json()
    assert r["series"] == {"train/loss": loss[9:12]}
    r = real.get(path, real.alice, params={"name": "no/such"}).json()
    assert r["series"] == {}
    # downsampling: at most max_points, points of the series, min and max kept
    r = real.get(path, real.alice, params={"name": "train/loss", "max_points": 6}).json()
    small = r["series"]["train/loss"]
    assert 1 < len(small) <= 6
    assert all(p in loss for p in small)
    assert [p[0] for p in small] == sorted(p[0] for p in small)
    values = [p[1] for p in loss]
    assert min(values) in [p[1] for p in small] and max(values) in [p[1] for p in small]


# ---- the job token, then cancel ------------------------------------------------------

def test_job_token_posts_metrics_idempotently(real, long_job):
    job_id, token = long_job
    points = [{"step": s, "time": 1763851234.5 + s, "name": "test/spike",
               "value": 1000.0 if s == 377 else -5.0 if s == 611 else float(s % 7)}
              for s in range(1, 1001)]
    points.append({"step": 5, "time": 1763851234.5, "name": "test/nan", "value": None})
    path = f"/v1/jobs/{job_id}/metrics"
    r = real.post(path, token, {"metrics": points})
    assert r.status_code == 200, r.text
    assert r.json() == {"accepted": 1001}
    # a retry, and a retry with other values: (name, step) is stored once
    assert real.post(path, token, {"metrics": points}).json() == {"accepted": 1001}
    changed = [{**p, "value": 1.5} for p in points[:10]]
    assert real.post(path, token, {"metrics": changed}).status_code == 200
    series = real.get(path, real.alice, params={"name": ["test/spike", "test/nan"]}).json()
    spike = series["series"]["test/spike"]
    assert [p[0] for p in spike] == list(range(1, 1001))
    assert series["series"]["test/nan"] == [[5, None]]
    first = {p[0]: p[1] for p in spike}
    assert first[377] == 1000.0 and first[611] == -5.0
    assert all(first[s] == float(s % 7) for s in range(1, 11))   # the first value stays
    # downsampled, the spike and the dip survive
    for max_points in (2, 10, 50):
        small = real.get(path, real.alice, params={"name": "test/spike",
                                                   "max_points": max_points}).json()
        pts = small["series"]["test/spike"]
        assert 1 <= len(pts) <= max_points
        assert [v for _, v in pts if v in (1000.0, -5.0)] == [1000.0, -5.0]
        assert all(first[s] == v for s, v in pts)
    one = real.get(path, real.alice, params={"name": "test/spike", "max_points": 1}).json()
    assert len(one["series"]["test/spike"]) == 1


def test_job_token_is_for_its_job_only(real, long_job):
    job_id, token = long_job
    point = {"metrics": [{"step": 1, "time": 1763851234.5, "name": "test/x", "value": 1.0}]}
    result = {"status": "completed", "steps": 1}
    for method, path, body in [
        ("POST", f"/v1/jobs/{real.tiny}/metrics", point),
        ("POST", f"/v1/jobs/{real.tiny}/result", result),
        ("GET", "/v1/jobs", None),
        ("POST", "/v1/jobs", tiny_spec()),
        ("GET", f"/v1/jobs/{job_id}", None),
        ("GET", f"/v1/jobs/{job_id}/events", None),
        ("GET", f"/v1/jobs/{job_id}/logs", None),
        ("GET", f"/v1/jobs/{job_id}/checkpoints", None),
        ("GET", f"/v1/jobs/{job_id}/metrics", None),
        ("POST", f"/v1/jobs/{job_id}/cancel", None),
        ("GET", "/metrics", None),
    ]:
        r = requests.request(method, real.url + path, headers=token, json=body, timeout=10)
        assert_error(r, 403, "forbidden")
    # users may not post as the trainer, even for their own job
    assert_error(real.post(f"/v1/jobs/{job_id}/metrics", real.alice, point), 403, "forbidden")
    assert_error(real.post(f"/v1/jobs/{job_id}/result", real.alice, result), 403, "forbidden")
    assert real.job(job_id)["state"] == "RUNNING"


def test_job_token_result_is_a_note(real, long_job):
    job_id, token = long_job
    r = real.post(f"/v1/jobs/{job_id}/result", token,
                  {"status": "running_check", "steps": 1, "final": {"test/acc": 0.5}})
    assert r.status_code == 200 and r.json() == {"recorded": True}
    notes = [e for e in real.events(job_id) if e["from"] == e["to"]]
    assert any(e["by"] == "trainer" and e["reason"].startswith("result: running_check, 1 steps")
               for e in notes), notes
    assert real.job(job_id)["state"] == "RUNNING"


def test_etag_and_if_none_match(real, long_job):
    job_id, token = long_job
    path = f"/v1/jobs/{job_id}"
    r = real.get(path, real.alice)
    tag = r.headers["ETag"]
    assert re.fullmatch(r'"[0-9a-f]+"', tag)
    same = real.get(path, {**real.alice, "If-None-Match": tag})
    # the trainer may report meanwhile: then the job changed and the tag with it
    if same.status_code == 200:
        assert same.headers["ETag"] != tag and same.json() != r.json()
        tag = same.headers["ETag"]
        same = real.get(path, {**real.alice, "If-None-Match": tag})
    assert same.status_code == 304 and same.content == b""
    assert same.headers["ETag"] == tag
    # a change to the job (its progress, from a reported train/loss) changes the tag
    step = real.job(job_id)["progress"]["step"] + 50000
    real.post(f"/v1/jobs/{job_id}/metrics", token, {"metrics": [
        {"step": step, "time": 1763851234.5, "name": "train/loss", "value": 0.125}]})
    changed = real.get(path, {**real.alice, "If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["ETag"] != tag
    assert changed.json()["progress"]["step"] >= step
    # lists too
    lpath = "/v1/jobs?name=long"
    r = real.get(lpath, real.alice)
    assert r.status_code == 200
    ltag = r.headers["ETag"]
    for _ in range(50):
        r = real.get(lpath, {**real.alice, "If-None-Match": ltag})
        if r.status_code == 304:
            break
        ltag = r.headers["ETag"]
    assert r.status_code == 304 and r.content == b""


def test_cancel_running_job(real, long_job):
    job_id, token = long_job
    # let it train a little: SIGTERM then makes it write a checkpoint
    deadline = time.monotonic() + 20
    while real.job(job_id)["progress"]["step"] < 5:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    r = real.post(f"/v1/jobs/{job_id}/cancel", real.alice)
    assert r.status_code == 200, r.text
    assert r.json()["id"] == job_id and r.json()["state"] in {"RUNNING", "CANCELLED"}
    job = real.wait(job_id, FINAL)
    assert job["state"] == "CANCELLED", job
    assert job["reason"] == "cancelled by alice"
    assert job["exit_code"] == 3                 # larch-train: stopped by a signal
    events = real.events(job_id)
    assert events[-1]["from"] == "RUNNING" and events[-1]["to"] == "CANCELLED"
    assert events[-1]["by"] == "alice"
    assert any(e["by"] == "trainer" and e["reason"].startswith("result: interrupted")
               for e in events)
    # the trainer's checkpoint on SIGTERM, at its last step
    ckpts = real.get(f"/v1/jobs/{job_id}/checkpoints", real.admin).json()["checkpoints"]
    assert ckpts and os.path.exists(ckpts[-1]["path"])
    assert ckpts[-1]["sha256"] == hashlib.sha256(open(ckpts[-1]["path"], "rb").read()).hexdigest()
    result = json.loads((real.d.state_dir / "jobs" / job_id / "result.json").read_text())
    assert ckpts[-1]["step"] == result["steps"]
    # again: it has ended
    err = assert_error(real.post(f"/v1/jobs/{job_id}/cancel", real.alice), 409, "conflict")
    assert err["detail"] == {"state": "CANCELLED"}
    assert_error(real.post(f"/v1/jobs/{real.tiny}/cancel", real.alice), 409, "conflict")
    # the job token died with the job
    point = {"metrics": [{"step": 1, "time": 1763851234.5, "name": "test/x", "value": 1.0}]}
    assert_error(real.post(f"/v1/jobs/{job_id}/metrics", token, point), 401, "unauthorized")


def test_cancel_pending_job_is_immediate(fast):
    # the fake trainer ends jobs at once: a job cancelled before it runs, or
    # one that has ended (409), are the two outcomes; both are checked
    outcomes = set()
    for _ in range(5):
        job_id = fast.submit(fast.alice, tiny_spec("c"))
        r = fast.post(f"/v1/jobs/{job_id}/cancel", fast.alice)
        if r.status_code == 200:
            job = fast.wait(job_id, FINAL)
            if job["state"] == "CANCELLED":
                assert job["reason"] == "cancelled by alice"
            outcomes.add(job["state"])
        else:
            assert_error(r, 409, "conflict")
            outcomes.add("ended")
    assert outcomes


# ---- permissions ----------------------------------------------------------------------

def test_users_see_their_own_jobs_only(real):
    job_id = real.tiny
    for path in ["", "/events", "/logs", "/checkpoints", "/metrics"]:
        assert real.get(f"/v1/jobs/{job_id}{path}", real.alice).status_code == 200
        assert real.get(f"/v1/jobs/{job_id}{path}", real.admin).status_code == 200
        err = assert_error(real.get(f"/v1/jobs/{job_id}{path}", real.bob), 404, "not_found")
        # the same answer as a job that does not exist
        missing = assert_error(real.get(f"/v1/jobs/j-999999{path}", real.bob), 404, "not_found")
        assert set(err) == set(missing)
    running = real.submit(real.alice, tiny_spec("mine", steps=100000))
    try:
        assert_error(real.post(f"/v1/jobs/{running}/cancel", real.bob), 404, "not_found")
        assert real.job(running)["state"] not in FINAL
    finally:
        assert real.post(f"/v1/jobs/{running}/cancel", real.admin).status_code == 200
    job = real.wait(running, FINAL)
    assert job["state"] == "CANCELLED" and job["reason"] == "cancelled by admin"
    bobs = real.get("/v1/jobs", real.bob).json()["jobs"]
    assert all(j["owner"] == "bob" for j in bobs)
    alices = real.get("/v1/jobs", real.alice).json()["jobs"]
    assert alices and all(j["owner"] == "alice" for j in alices)


def test_prometheus_metrics(real):
    real.wait(real.tiny, FINAL)
    r = real.get("/metrics", real.admin)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = r.text
    jobs = real.get("/v1/jobs", real.admin, params={"limit": 500}).json()["jobs"]
    for state in ["PENDING", "RUNNING", "COMPLETED", "CANCELLED"]:
        want = sum(j["state"] == state for j in jobs)
        assert f'larch_jobs{{state="{state}"}} {want}\n' in text, (state, text[:2000])
    assert "# TYPE larch_http_requests_total counter" in text
    m = re.search(r'^larch_http_requests_total\{method="GET",route="/v1/jobs/\{id\}",'
                  r'status="200"\} (\d+)$', text, re.M)
    assert m and int(m.group(1)) > 0, text
    assert re.search(r'^larch_http_request_duration_seconds_bucket\{method="GET",'
                     r'route="/v1/jobs/\{id\}",le="\+Inf"\} \d+$', text, re.M)
    assert re.search(r'^larch_http_request_duration_seconds_count\{.*\} \d+$', text, re.M)
    assert_error(real.get("/metrics", real.alice), 403, "forbidden")
    assert_error(requests.get(real.url + "/metrics", timeout=10), 401, "unauthorized")


# ---- idempotency keys -------------------------------------------------------------------

def test_idempotency_key(fast):
    key = {"Idempotency-Key": "retry-" + os.urandom(4).hex()}
    first = fast.post("/v1/jobs", fast.alice, tiny_spec("idem"), key)
    assert first.status_code == 201
    again = fast.post("/v1/jobs", fast.alice, tiny_spec("idem"), key)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["Location"] == first.headers["Location"]
    err = assert_error(fast.post("/v1/jobs", fast.alice, tiny_spec("idem", steps=31), key),
                       409, "conflict")
    assert first.json()["id"] in err["message"]
    # another user's key space is their own
    bobs = fast.post("/v1/jobs", fast.bob, tiny_spec("idem"), key)
    assert bobs.status_code == 201 and bobs.json()["id"] != first.json()["id"]
    names = fast.get("/v1/jobs", fast.admin, params={"name": "idem"}).json()["jobs"]
    assert len(names) == 2


def test_concurrent_retries_make_one_job(fast):
    key = {"Idempotency-Key": "burst-" + os.urandom(4).hex()}

    def send(_):
        with requests.Session() as s:
            r = s.post(fast.url + "/v1/jobs", headers={**fast.alice, **key},
                       json=tiny_spec("burst"), timeout=20)
            return r.status_code, r.json()["id"]

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(send, range(32)))
    assert sorted(code for code, _ in results) == [200] * 31 + [201], results
    assert len({job_id for _, job_id in results}) == 1
    jobs = fast.get("/v1/jobs", fast.alice, params={"name": "burst"}).json()["jobs"]
    assert [j["id"] for j in jobs] == [results[0][1]]


# ---- lists -----------------------------------------------------------------------------

def test_list_pages_filters_and_owner(fast):
    def submit(i):
        who = fast.bob if i % 40 == 0 else fast.alice
        return fast.submit(who, tiny_spec("odd" if i % 30 == 7 else "page"))

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(submit, range(123)))
    bob_ids = {ids[i] for i in range(123) if i % 40 == 0}
    odd_ids = {ids[i] for i in range(123) if i % 30 == 7}
    for job_id in ids:
        fast.wait(job_id, FINAL)

    def walk(who, limit, **params):
        seen, cursor, pages = [], None, 0
        while True:
            q = {"limit": limit, **params, **({"cursor": cursor} if cursor else {})}
            r = fast.get("/v1/jobs", who, params=q)
            assert r.status_code == 200, r.text
            body = r.json()
            assert len(body["jobs"]) <= limit
            seen += [j["id"] for j in body["jobs"]]
            pages += 1
            cursor = body.get("next_cursor")
            if not cursor:
                return seen, pages
            assert len(body["jobs"]) == limit

    everyone = [j for j in ids]
    seen, pages = walk(fast.admin, 7, name="page")
    want = sorted(set(everyone) - odd_ids, key=lambda j: int(j[2:]), reverse=True)
    assert seen == want                    # newest first, no duplicates, no gaps
    assert pages == -(-len(want) // 7)
    # alice: her jobs only, in pages of 50 (the default)
    seen, pages = walk(fast.alice, 50)
    mine = [j for j in ids if j not in bob_ids]
    assert set(mine) <= set(seen) and not bob_ids & set(seen)
    assert seen == sorted(seen, key=lambda j: int(j[2:]), reverse=True)
    first = fast.get("/v1/jobs", fast.alice).json()
    assert len(first["jobs"]) == 50 and "next_cursor" in first
    created = [j["created_at"] for j in first["jobs"]]
    assert created == sorted(created, reverse=True)
    # name and state filters
    odd = fast.get("/v1/jobs", fast.admin, params={"name": "odd", "limit": 500}).json()
    assert {j["id"] for j in odd["jobs"]} == odd_ids and "next_cursor" not in odd
    states = {}
    for state in ["COMPLETED", "FAILED", "CANCELLED", "PENDING"]:
        page = fast.get("/v1/jobs", fast.admin, params={"state": state, "name": "page",
                                                        "limit": 500}).json()["jobs"]
        assert all(j["state"] == state for j in page)
        states[state] = len(page)
    assert sum(states.values()) == len(want)
    # owner: admins name anyone; a user only themselves
    bobs = fast.get("/v1/jobs", fast.admin, params={"owner": "bob", "limit": 500}).json()
    assert bob_ids <= {j["id"] for j in bobs["jobs"]}
    assert all(j["owner"] == "bob" for j in bobs["jobs"])
    assert_error(fast.get("/v1/jobs", fast.alice, params={"owner": "bob"}), 403, "forbidden")
    own = fast.get("/v1/jobs", fast.alice, params={"owner": "alice", "limit": 1}).json()
    assert own["jobs"][0]["owner"] == "alice"
    # the list's ETag: 304 while unchanged, another tag once a job is added
    r = fast.get("/v1/jobs", fast.alice, params={"name": "odd"})
    tag = r.headers["ETag"]
    assert fast.get("/v1/jobs", {**fast.alice, "If-None-Match": tag},
                    params={"name": "odd"}).status_code == 304
    fast.submit(fast.alice, tiny_spec("odd"))
    r = fast.get("/v1/jobs", {**fast.alice, "If-None-Match": tag}, params={"name": "odd"})
    assert r.status_code == 200 and r.headers["ETag"] != tag
