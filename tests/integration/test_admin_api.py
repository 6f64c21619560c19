"""The admin API of larchd (docs/api.md, "Admin") against real parts: queues
and nodes, drain/resume, hold/release/requeue, PATCH, the audit log, and the
`larch admin` verbs.

With the local executor (the default) the views are one queue "local" and
this host, node actions are 409, hold/release work on jobs not handed over
yet; its trainer is a stand-in that sleeps, so jobs stay RUNNING/QUEUED/
PENDING as long as a test needs. With `--executor slurm` (the session's real
single-node cluster, tests/integration/slurm.py) every Slurm path runs for
real: sinfo/squeue views and their shared snapshot, drain -> the node shows
drain in sinfo, hold/release/requeue/PATCH through scontrol on a job that
Slurm keeps pending behind a job of the test's own that takes every CPU.
Every test that drains the node resumes it, whatever happens.
"""
import concurrent.futures
import json
import os
import pathlib
import re
import socket
import sqlite3
import subprocess
import time

import pytest
import requests

from larchd import BUILD, Larchd, stand_in_trainer
from slurm import free_ports
from test_larchd_http import assert_error

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
QUEUE_EXTRA = 64          # service/main.c: jobs handed to the local executor beyond max_local_jobs
PWNED = pathlib.Path("/tmp/pwned")
ADMIN_ROUTES = [
    ("GET", "/v1/queues", None), ("GET", "/v1/nodes", None), ("GET", "/v1/audit", None),
    ("POST", "/v1/nodes/NODE/drain", {"reason": "x"}), ("POST", "/v1/nodes/NODE/resume", None),
    ("POST", "/v1/jobs/JOB/hold", None), ("POST", "/v1/jobs/JOB/release", None),
    ("POST", "/v1/jobs/JOB/requeue", None), ("PATCH", "/v1/jobs/JOB", {"priority": 5}),
]
SLEEPER = "# stands in for larch-train: a job that runs until it is stopped\nexec sleep 300\n"


def spec(name="adm", **extra):
    s = {"name": name, "model": {"type": "mlp", "hidden": [8]}, "data": {"name": "fashion-mnist"},
         "batch": {"global": 256}, "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 10}
    s.update(extra)
    return s


def sleeper(tmp_path):
    path = tmp_path / "sleeper"
    stand_in_trainer(path, SLEEPER)
    return path


class Admin:
    """A started larchd and what the tests ask of it."""

    def __init__(self, server):
        self.d = server
        self.url = server.url

    def req(self, method, path, body=None, token=None, auth=True, timeout=30):
        headers = self.d.auth(token) if auth else {}
        return requests.request(method, self.url + path, headers=headers,
                                json=body, timeout=timeout)

    def ok(self, method, path, body=None):
        r = self.req(method, path, body)
        assert r.status_code == 200, f"{method} {path}: {r.status_code} {r.text}"
        return r.json()

    def user_token(self, user="alice"):
        out = subprocess.run([str(self.d.exe), "token", "create", "--user", user, "--role", "user",
                              "--state-dir", str(self.d.state_dir)],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    def submit(self, name="adm", **extra):
        r = self.req("POST", "/v1/jobs", spec(name, **extra))
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def job(self, jid):
        return self.ok("GET", f"/v1/jobs/{jid}")

    def wait_state(self, jid, states, timeout=60):
        states = {states} if isinstance(states, str) else set(states)
        deadline = time.monotonic() + timeout
        while True:
            j = self.job(jid)
            if j["state"] in states:
                return j
            assert j["state"] not in FINAL - states, f"{jid} ended {j['state']}: {j['reason']}"
            assert time.monotonic() < deadline, \
                f"{jid} is {j['state']} ({j['reason']}) after {timeout}s, not {states}\n" \
                f"{self.d.log()[-2000:]}"
            time.sleep(0.1)

    def audit(self, **params):
        r = requests.get(self.url + "/v1/audit", params=params, headers=self.d.auth(), timeout=30)
        assert r.status_code == 200, r.text
        return r.json()["entries"]

    def cancel_all(self):
        for j in self.ok("GET", "/v1/jobs?limit=500")["jobs"]:
            if j["state"] not in FINAL:
                self.req("POST", f"/v1/jobs/{j['id']}/cancel")


def entry(entries, action, target, status):
    """The newest audit entry of action on target with status (or fails)."""
    for e in entries:
        if e["action"] == action and e["target"] == target and e["status"] == status:
            return e
    raise AssertionError(f"no audit entry {action} {target} {status} in {entries}")


@pytest.fixture
def local(tmp_path):
    """larchd with the local executor, one job at a time, a sleeping trainer."""
    server = Larchd(tmp_path, args=["--trainer-path", str(sleeper(tmp_path)),
                                    "--max-local-jobs", "1"]).start()
    admin = Admin(server)
    yield admin
    if server.running():
        admin.cancel_all()
        server.stop()


# ---- who may ---------------------------------------------------------------------------

def test_every_admin_route_needs_an_admin(local):
    jid = local.submit("victim")
    user = local.user_token("alice")
    own = requests.post(local.url + "/v1/jobs", json=spec("own"), timeout=30,
                        headers={"Authorization": f"Bearer {user}"}).json()["id"]
    for method, path, body in ADMIN_ROUTES:
        for target in (jid, own):
            p = path.replace("JOB", target).replace("NODE", socket.gethostname())
            assert_error(local.req(method, p, body, auth=False), 401, "unauthorized")
            assert_error(local.req(method, p, body, token=user), 403, "forbidden")
    # nothing happened: no entry, the jobs as they were
    assert local.audit() == []
    assert local.job(own)["priority"] == 0 and local.job(jid)["state"] != "HELD"


# ---- the local executor ----------------------------------------------------------------

def test_local_views_count_from_the_database(local):
    first = local.submit("runs")
    local.wait_state(first, "RUNNING")
    waiting = [local.submit(f"waits{i}") for i in range(3)]
    for jid in waiting:
        local.wait_state(jid, "QUEUED")
    q = local.ok("GET", "/v1/queues")
    assert q["executor"] == "local" and q["stale"] is False
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", q["updated_at"])
    host = socket.gethostname()
    assert q["queues"] == [{
        "name": "local", "state": "up", "default": True,
        "nodes": {"count": 1, "names": [host]},
        "cpus": {"alloc": 1, "idle": 0, "other": 0, "total": 1},
        "max_time": None, "max_time_s": None,
        "jobs": {"pending": 3, "running": 1}, "larch_jobs": {"pending": 3, "running": 1}}]
    n = local.ok("GET", "/v1/nodes")
    assert n["executor"] == "local" and len(n["nodes"]) == 1
    node = n["nodes"][0]
    assert node["name"] == host and node["state"] == "alloc" and node["responding"] is True
    assert node["cpus"] == {"alloc": 1, "idle": 0, "other": 0, "total": 1}
    assert node["partitions"] == ["local"] and node["reason"] is None
    assert node["memory_mb"]["total"] > 0
    local.ok("POST", f"/v1/jobs/{waiting[0]}/cancel")
    changed = local.ok("GET", "/v1/queues")
    assert changed["queues"][0]["jobs"] == {"pending": 2, "running": 1}


def test_local_node_actions_are_409_and_audited(local):
    host = socket.gethostname()
    err = assert_error(local.req("POST", f"/v1/nodes/{host}/drain", {"reason": "disk"}),
                       409, "conflict")
    assert "the local executor has no Slurm nodes" in err["message"]
    assert_error(local.req("POST", f"/v1/nodes/{host}/resume"), 409, "conflict")
    err = assert_error(local.req("POST", f"/v1/nodes/{host}/drain", {}), 400, "bad_request")
    assert err["detail"] == {"field": "reason"}
    entries = local.audit()
    assert [e["action"] for e in entries] == ["node.drain", "node.resume", "node.drain"]
    e = entry(entries, "node.drain", f"nodes/{host}", 409)
    assert e["args"] == {"reason": "disk"} and e["outcome"] == "error"
    assert e["actor"] == "admin" and "local executor" in e["message"]
    assert e["client"] == "127.0.0.1"
    assert entry(entries, "node.drain", f"nodes/{host}", 400)["message"] == "reason: is required"


def test_local_hold_release_patch(local):
    # one job runs, QUEUE_EXTRA wait in the executor's queue: the next stays PENDING
    running = local.submit("runs")
    local.wait_state(running, "RUNNING")
    queued = [local.submit(f"q{i}") for i in range(QUEUE_EXTRA)]
    local.wait_state(queued[-1], "QUEUED")
    pending = local.submit("pending")
    time.sleep(0.5)
    assert local.job(pending)["state"] == "PENDING"

    # PATCH of a job not handed over: priority and partition in the db only
    j = local.ok("PATCH", f"/v1/jobs/{pending}", {"priority": 42, "partition": "batch"})
    assert j["priority"] == 42 and j["state"] == "PENDING"
    ev = local.ok("GET", f"/v1/jobs/{pending}/events")["events"][-1]
    assert ev["by"] == "admin" and "priority 0 -> 42" in ev["reason"] and "batch" in ev["reason"]
    for body in ({"nice": 5}, {"time_limit": "01:00:00"}):
        err = assert_error(local.req("PATCH", f"/v1/jobs/{pending}", body), 409, "conflict")
        assert "not in Slurm" in err["message"]

    # hold PENDING -> HELD; the runner leaves it alone; hold again: 409
    j = local.ok("POST", f"/v1/jobs/{pending}/hold")
    assert j["state"] == "HELD" and j["reason"] == "held by admin"
    assert_error(local.req("POST", f"/v1/jobs/{pending}/hold"), 409, "conflict")
    # QUEUED and RUNNING on the local executor: 409 saying why
    err = assert_error(local.req("POST", f"/v1/jobs/{queued[0]}/hold"), 409, "conflict")
    assert "local executor" in err["message"] and err["detail"] == {"state": "QUEUED"}
    err = assert_error(local.req("POST", f"/v1/jobs/{running}/hold"), 409, "conflict")
    assert "not started" in err["message"]
    err = assert_error(local.req("POST", f"/v1/jobs/{running}/requeue"), 409, "conflict")
    assert "local executor" in err["message"]
    assert_error(local.req("POST", f"/v1/jobs/{queued[0]}/requeue"), 409, "conflict")
    assert_error(local.req("POST", f"/v1/jobs/{queued[0]}/release"), 409, "conflict")
    err = assert_error(local.req("PATCH", f"/v1/jobs/{running}", {"partition": "batch"}),
                       409, "conflict")
    assert "RUNNING" in err["message"]

    # release HELD -> PENDING; once a slot frees, the runner hands it over
    j = local.ok("POST", f"/v1/jobs/{pending}/release")
    assert j["state"] == "PENDING" and j["reason"] == "released by admin"
    local.ok("POST", f"/v1/jobs/{running}/cancel")
    local.wait_state(pending, {"QUEUED", "RUNNING"}, timeout=30)
    states = [(e["from"], e["to"], e["by"]) for e in
              local.ok("GET", f"/v1/jobs/{pending}/events")["events"]]
    held = states.index(("PENDING", "HELD", "admin"))
    assert states[held + 1:held + 3] == [("HELD", "PENDING", "admin"),
                                         ("PENDING", "QUEUED", "executor")], states

    # a job that has ended: 409 for every action
    local.wait_state(running, "CANCELLED", timeout=30)
    for method, path, body in [("POST", "hold", None), ("POST", "release", None),
                               ("POST", "requeue", None), ("PATCH", "", {"priority": 1})]:
        err = assert_error(local.req(method, f"/v1/jobs/{running}{'/' + path if path else ''}",
                                     body), 409, "conflict")
        assert "has already ended" in err["message"]

    entries = local.audit(limit=500)
    assert entry(entries, "job.hold", f"jobs/{pending}", 200)["message"] == "PENDING -> HELD"
    assert entry(entries, "job.release", f"jobs/{pending}", 200)["message"] == "HELD -> PENDING"
    e = entry(entries, "job.update", f"jobs/{pending}", 200)
    assert e["args"] == {"priority": 42, "partition": "batch"}
    assert "not in Slurm" in entry(entries, "job.update", f"jobs/{pending}", 409)["message"]
    assert any("not started" in e["message"] for e in entries
               if e["action"] == "job.hold" and e["target"] == f"jobs/{running}")
    assert "has already ended" in entry(entries, "job.hold", f"jobs/{running}", 409)["message"]
    assert all(e["actor"] == "admin" for e in entries)
    assert all((e["outcome"] == "ok") == (e["status"] < 400) for e in entries)


def test_audit_pages_and_filters(local):
    host = socket.gethostname()
    for i in range(7):
        local.req("POST", f"/v1/nodes/{host}/drain", {"reason": f"r{i}"})
    local.req("POST", "/v1/jobs/j-999999/hold")
    local.req("PATCH", "/v1/jobs/j-999999", {"priority": "x"})
    everything = local.audit(limit=500)
    assert len(everything) == 9
    ids = [e["id"] for e in everything]
    assert ids == sorted(ids, reverse=True)
    seen, cursor = [], None
    while True:
        params = {"limit": 4, **({"cursor": cursor} if cursor else {})}
        r = requests.get(local.url + "/v1/audit", params=params, headers=local.d.auth(), timeout=30)
        assert r.status_code == 200, r.text
        seen += [e["id"] for e in r.json()["entries"]]
        cursor = r.json().get("next_cursor")
        if not cursor:
            break
    assert seen == ids
    assert [e["args"]["reason"] for e in local.audit(action="node.drain")] == \
        [f"r{i}" for i in reversed(range(7))]
    hold = local.audit(target="jobs/j-999999", action="job.hold")
    assert len(hold) == 1 and hold[0]["status"] == 404 and hold[0]["message"] == "no job j-999999"
    bad = local.audit(action="job.update")[0]
    assert bad["status"] == 400 and bad["args"] == {"priority": "x"}
    assert local.audit(actor="nobody") == []
    assert len(local.audit(actor="admin")) == 9
    assert_error(local.req("GET", "/v1/audit?cursor=" + ("A" * 12)), 400, "bad_request")


# ---- the larch CLI -----------------------------------------------------------------------

def larch(server, *args, token_file=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LARCH_")}
    env.update(LARCH_URL=server.url, HOME=str(server.state_dir))
    token = token_file or server.state_dir / "admin.token"
    return subprocess.run([str(BUILD / "service" / "larch"), "--token-file", str(token), *args],
                          capture_output=True, text=True, timeout=60, env=env)


def test_cli_admin_verbs(local):
    d = local.d
    host = socket.gethostname()
    out = larch(d, "admin", "queues")
    assert out.returncode == 0, out.stderr
    assert re.search(r"^QUEUE\s+STATE\s+NODES\s+CPUS\(A/I/O/T\)", out.stdout, re.M)
    assert re.search(r"^local\*\s+up\s+1\s+0/1/0/1\s+none\s+0\s+0\s+0/0$", out.stdout, re.M), \
        out.stdout
    out = larch(d, "--json", "admin", "nodes")
    assert out.returncode == 0 and json.loads(out.stdout)["nodes"][0]["name"] == host
    out = larch(d, "admin", "nodes")
    assert re.search(rf"^{re.escape(host)}\s+idle\s+0/1\s+\d+\s+local\s+-$", out.stdout, re.M), \
        out.stdout

    running = local.submit("runs")
    local.wait_state(running, "RUNNING")
    out = larch(d, "admin", "hold", running)
    assert out.returncode == 1 and f"job {running}:" in out.stderr and "(409)" in out.stderr
    out = larch(d, "admin", "set-priority", running, "9")
    assert out.returncode == 0 and out.stdout == f"{running}: RUNNING, priority 9\n", out
    out = larch(d, "admin", "set-priority", running, "--nice", "--", "-5")
    assert out.returncode == 1 and "not in Slurm" in out.stderr, out
    out = larch(d, "admin", "set-priority", running, "0")
    assert out.returncode == 2 and "N: must be an integer in [1, 4294967294]" in out.stderr
    out = larch(d, "--json", "admin", "requeue", running)
    assert out.returncode == 1 and "local executor" in out.stderr
    out = larch(d, "admin", "drain", host, "--reason", "fan")
    assert out.returncode == 1 and "the local executor has no Slurm nodes" in out.stderr
    out = larch(d, "admin", "drain", host)
    assert out.returncode == 2 and "--reason" in out.stderr
    out = larch(d, "admin", "resume", "$(touch /tmp/pwned)")
    assert out.returncode == 1 and not PWNED.exists()
    out = larch(d, "admin", "nope")
    assert out.returncode == 2 and 'no admin command "nope"' in out.stderr

    out = larch(d, "admin", "audit")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert re.match(r"TIME\s+ACTOR\s+ACTION\s+TARGET\s+STATUS\s+MESSAGE", lines[0])
    assert re.search(r"\sadmin\s+node\.drain\s+nodes/\S+\s+409\s+the local executor", out.stdout)
    assert re.search(rf"\sadmin\s+job\.update\s+jobs/{running}\s+200\s+priority 0 -> 9",
                     out.stdout), out.stdout
    out = larch(d, "--json", "admin", "audit", "--action", "job.hold", "--all")
    assert out.returncode == 0
    entries = json.loads(out.stdout)["entries"]
    assert len(entries) == 1 and entries[0]["target"] == f"jobs/{running}"

    user = d.state_dir / "alice.token"
    user.write_text(local.user_token("alice") + "\n")
    user.chmod(0o600)
    out = larch(d, "admin", "queues", token_file=user)
    assert out.returncode == 1 and "not allowed (403)" in out.stderr


# ---- Slurm ---------------------------------------------------------------------------------

def start_slurm(tmp_path, cluster, *args, env=None):
    server = Larchd(tmp_path, args=["--executor", "slurm", "--slurm-poll-ms", "300",
                                    "--trainer-path", str(sleeper(tmp_path)), *args],
                    env=env or dict(cluster.env)).start()
    return Admin(server)


@pytest.fixture
def slurm_admin(tmp_path, slurm_cluster):
    admin = start_slurm(tmp_path, slurm_cluster)
    yield admin
    if admin.d.running():
        admin.cancel_all()
        admin.d.stop()


def node_name(cluster):
    return cluster.run("sinfo", "-h", "-N", "-o", "%N").stdout.split()[0]


def node_cpus(cluster):
    return int(cluster.run("sinfo", "-h", "-N", "-o", "%c").stdout.split()[0])


def sinfo_state(cluster, node):
    return cluster.run("sinfo", "-h", "-N", "-n", node, "-o", "%t|%E").stdout.splitlines()[0]


def resume_node(cluster, node):
    """Back to service after a test, whatever it left (never fails)."""
    cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)


def wait_for(pred, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"no {what} after {timeout}s"
        time.sleep(0.2)


def db_partition(admin, jid):
    db = sqlite3.connect(f"file:{admin.d.state_dir / 'larch.db'}?mode=ro", uri=True)
    try:
        return db.execute("SELECT partition FROM jobs WHERE id = ?", (int(jid[2:]),)).fetchone()[0]
    finally:
        db.close()


def sinfo_calls(admin):
    text = admin.req("GET", "/metrics").text
    m = re.search(r'^larch_slurm_calls_total\{command="sinfo"\} (\d+)$', text, re.M)
    return int(m.group(1)) if m else 0


def test_slurm_views(slurm_admin, slurm_cluster, tmp_path):
    node = node_name(slurm_cluster)
    cpus = node_cpus(slurm_cluster)
    # a job of Slurm's own, held: pending in batch, not larch's
    script = tmp_path / "held.sh"
    script.write_text("#!/bin/sh\nsleep 60\n")
    sid = slurm_cluster.submit(script, "--hold", "-p", "batch", "-o", "/dev/null")
    try:
        q = slurm_admin.ok("GET", "/v1/queues")
        assert q["executor"] == "slurm" and q["stale"] is False
        by_name = {x["name"]: x for x in q["queues"]}
        assert set(by_name) == {"debug", "batch", "urgent"}
        debug, batch = by_name["debug"], by_name["batch"]
        assert debug["default"] is True and batch["default"] is False
        assert debug["state"] == "up" and debug["max_time"] == "30:00"
        assert debug["max_time_s"] == 1800
        assert batch["max_time"] is None and batch["max_time_s"] is None
        assert debug["nodes"] == {"count": 1, "names": [node]}
        assert debug["cpus"]["total"] == cpus
        assert sum(debug["cpus"][k] for k in ("alloc", "idle", "other")) == cpus
        assert batch["jobs"]["pending"] >= 1 and batch["larch_jobs"] == {"pending": 0, "running": 0}

        n = slurm_admin.ok("GET", "/v1/nodes")
        assert n["executor"] == "slurm"
        mine = [x for x in n["nodes"] if x["name"] == node]
        assert len(mine) == 1
        x = mine[0]
        assert sorted(x["partitions"]) == ["batch", "debug", "urgent"]
        assert x["cpus"]["total"] == cpus and x["memory_mb"]["total"] > 0
        assert x["state"] in {"idle", "mixed", "alloc"} and x["slurm_state"]

        # a larch job, Slurm's own view of it counted as larch's
        jid = slurm_admin.submit("counted")
        j = slurm_admin.wait_state(jid, {"QUEUED", "RUNNING"})
        time.sleep(2.1)                   # past the snapshot's age
        q = slurm_admin.ok("GET", "/v1/queues")
        debug = {x["name"]: x for x in q["queues"]}["debug"]
        larch = debug["larch_jobs"]
        assert larch["pending"] + larch["running"] == 1, (j, q)
        assert debug["jobs"]["pending"] + debug["jobs"]["running"] >= 1
    finally:
        slurm_cluster.run("scancel", str(sid), check=False)


def test_slurm_snapshot_is_shared(slurm_admin):
    slurm_admin.ok("GET", "/v1/queues")
    before = sinfo_calls(slurm_admin)
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        replies = list(pool.map(lambda _: slurm_admin.req("GET", "/v1/queues"), range(100)))
    elapsed = time.monotonic() - t0
    calls = sinfo_calls(slurm_admin) - before
    assert all(r.status_code == 200 for r in replies)
    stamps = {r.json()["updated_at"] for r in replies}
    # one refresh per 2 s at most (+1 for the executor's own partition check)
    bound = int(elapsed / 2) + 2
    assert len(stamps) <= bound, (len(stamps), elapsed)
    assert calls <= bound, (calls, elapsed)


def test_slurm_drain_and_resume(slurm_admin, slurm_cluster):
    node = node_name(slurm_cluster)
    try:
        err = assert_error(slurm_admin.req("POST", f"/v1/nodes/{node}/drain"), 400, "bad_request")
        assert err["detail"] == {"field": "reason"}
        assert_error(slurm_admin.req("POST", f"/v1/nodes/{node}/drain", {"reason": ""}),
                     400, "bad_request")
        assert sinfo_state(slurm_cluster, node).split("|")[0] not in ("drain", "drng")

        # hostile names never reach a shell
        for name in ("$(touch%20%2Ftmp%2Fpwned)", "$(touch%20pwned)", f"{node};touch%20pwned",
                     "%60touch%20pwned%60", f"{node}%7Ctouch%20pwned"):
            r = slurm_admin.req("POST", f"/v1/nodes/{name}/drain", {"reason": "x"})
            assert r.status_code in (400, 404), r.text          # '/' is refused by the router
        assert not PWNED.exists() and not pathlib.Path("pwned").exists()
        assert_error(slurm_admin.req("POST", "/v1/nodes/no-such-node/drain", {"reason": "x"}),
                     404, "not_found")

        reason = "disk swap | 'quoted' $(not run)"
        v = slurm_admin.ok("POST", f"/v1/nodes/{node}/drain", {"reason": reason})
        assert v["stale"] is False and [x["name"] for x in v["nodes"]] == [node]
        x = v["nodes"][0]
        assert x["state"] in ("drain", "draining") and x["reason"]["text"] == reason
        assert x["reason"]["user"] and re.match(r"\d{4}-\d\d-\d\dT", x["reason"]["time"])
        state, text = sinfo_state(slurm_cluster, node).split("|", 1)
        assert state in ("drain", "drng") and text == reason
        # the nodes view agrees at once (the change made the snapshot stale)
        x = [n for n in slurm_admin.ok("GET", "/v1/nodes")["nodes"] if n["name"] == node][0]
        assert x["state"] in ("drain", "draining") and x["reason"]["text"] == reason
        q = slurm_admin.ok("GET", "/v1/queues")
        assert all(p["cpus"]["other"] > 0 or p["cpus"]["alloc"] > 0 for p in q["queues"])

        v = slurm_admin.ok("POST", f"/v1/nodes/{node}/resume")
        assert v["nodes"][0]["state"] == "idle" and v["nodes"][0]["reason"] is None
        wait_for(lambda: sinfo_state(slurm_cluster, node).split("|")[0].rstrip("*") == "idle",
                 "idle in sinfo")
        err = assert_error(slurm_admin.req("POST", f"/v1/nodes/{node}/resume"), 409, "conflict")
        assert "not drained" in err["message"]
    finally:
        resume_node(slurm_cluster, node)

    entries = slurm_admin.audit()
    ok = entry(entries, "node.drain", f"nodes/{node}", 200)
    assert ok["args"] == {"reason": reason}
    assert ok["message"] == f"scontrol update NodeName={node} State=DRAIN Reason={reason}"
    assert entry(entries, "node.resume", f"nodes/{node}", 200)["outcome"] == "ok"
    assert "not drained" in entry(entries, "node.resume", f"nodes/{node}", 409)["message"]
    assert entry(entries, "node.drain", "nodes/no-such-node", 404)["message"] == \
        "slurm has no node no-such-node"
    refused = [e["message"] for e in entries if e["action"] == "node.drain" and e["status"] == 400
               and e["target"] == f"nodes/{node}"]
    assert refused == ["reason: must be 1 to 256 characters", "reason: is required"]
    assert entry(entries, "node.drain", "nodes/$(touch pwned)", 400)["outcome"] == "error"


def test_slurm_hold_release_patch_requeue(slurm_admin, slurm_cluster, tmp_path):
    a = slurm_admin
    blocker_sh = tmp_path / "blocker.sh"
    blocker_sh.write_text("#!/bin/sh\nsleep 600\n")
    blocker = slurm_cluster.submit(blocker_sh, "-c", str(node_cpus(slurm_cluster)),
                                   "-o", "/dev/null")
    try:
        wait_for(lambda: slurm_cluster.job(blocker)["JobState"] == "RUNNING", "the blocker running")
        jid = a.submit("waits")
        j = a.wait_state(jid, "QUEUED")
        sid = j["slurm_job_id"]
        assert slurm_cluster.job(sid)["JobState"] == "PENDING"

        # PATCH a job Slurm has: scontrol update, then the db
        j = a.ok("PATCH", f"/v1/jobs/{jid}", {"nice": 7, "time_limit": "00:20:00"})
        sj = slurm_cluster.job(sid)
        assert (sj["Nice"], sj["TimeLimit"]) == ("7", "00:20:00") and j["priority"] == 0
        j = a.ok("PATCH", f"/v1/jobs/{jid}", {"priority": 500, "partition": "batch"})
        assert j["priority"] == 500 and j["state"] == "QUEUED"
        sj = slurm_cluster.job(sid)
        assert (sj["Priority"], sj["Partition"]) == ("500", "batch")
        assert db_partition(a, jid) == "batch"
        # Slurm keeps the nice value of a job given a priority: said, not hidden
        err = assert_error(a.req("PATCH", f"/v1/jobs/{jid}", {"nice": 3, "partition": "debug"}),
                           409, "conflict")
        assert "slurm kept nice" in err["message"]
        assert slurm_cluster.job(sid)["Partition"] == "debug" and db_partition(a, jid) == "debug"
        err = assert_error(a.req("PATCH", f"/v1/jobs/{jid}", {"partition": "nope"}),
                           400, "bad_request")
        assert "no partition nope" in err["message"]
        assert slurm_cluster.job(sid)["Partition"] == "debug" and db_partition(a, jid) == "debug"
        a.ok("PATCH", f"/v1/jobs/{jid}", {"time_limit": 15})
        assert slurm_cluster.job(sid)["TimeLimit"] == "00:15:00"

        # hold: scontrol hold, -> HELD; the executor's view agrees
        j = a.ok("POST", f"/v1/jobs/{jid}/hold")
        assert j["state"] == "HELD" and j["reason"] == "held by admin"
        assert slurm_cluster.job(sid)["Reason"] == "JobHeldAdmin"
        assert_error(a.req("POST", f"/v1/jobs/{jid}/hold"), 409, "conflict")
        err = assert_error(a.req("PATCH", f"/v1/jobs/{jid}", {"priority": 9}), 409, "conflict")
        assert "slurm refused" in err["message"] and "held" in err["message"]
        time.sleep(1.5)                               # a few squeue passes
        assert a.job(jid)["state"] == "HELD"

        # release: scontrol release, -> QUEUED
        j = a.ok("POST", f"/v1/jobs/{jid}/release")
        assert j["state"] == "QUEUED" and j["reason"] == "released by admin"
        wait_for(lambda: not slurm_cluster.job(sid)["Reason"].startswith("JobHeld"),
                 "Slurm's hold lifted")
        assert_error(a.req("POST", f"/v1/jobs/{jid}/release"), 409, "conflict")
        assert_error(a.req("POST", f"/v1/jobs/{jid}/requeue"), 409, "conflict")
        time.sleep(1.5)
        assert a.job(jid)["state"] == "QUEUED"

        # it runs once the blocker is gone; then hold and time_limit are 409, requeue works
        slurm_cluster.run("scancel", str(blocker))
        a.wait_state(jid, "RUNNING")
        err = assert_error(a.req("POST", f"/v1/jobs/{jid}/hold"), 409, "conflict")
        assert "not started" in err["message"]
        assert_error(a.req("PATCH", f"/v1/jobs/{jid}", {"time_limit": 30}), 409, "conflict")
        j = a.ok("POST", f"/v1/jobs/{jid}/requeue")
        assert j["state"] == "REQUEUED" and j["reason"] == "requeued by admin"
        wait_for(lambda: slurm_cluster.job(sid)["JobState"] == "PENDING", "PENDING in Slurm")
        j = a.wait_state(jid, {"QUEUED", "REQUEUED"})
        assert j["attempt"] == 2 or j["state"] == "REQUEUED", j
        events = [(e["from"], e["to"], e["by"]) for e in
                  a.ok("GET", f"/v1/jobs/{jid}/events")["events"]]
        for step in [("QUEUED", "HELD", "admin"), ("HELD", "QUEUED", "admin"),
                     ("RUNNING", "REQUEUED", "admin")]:
            assert step in events, events
        a.ok("POST", f"/v1/jobs/{jid}/cancel")
        a.wait_state(jid, "CANCELLED", timeout=60)
        assert_error(a.req("POST", f"/v1/jobs/{jid}/release"), 409, "conflict")
    finally:
        slurm_cluster.run("scancel", str(blocker), check=False)

    entries = a.audit(target=f"jobs/{jid}", limit=500)
    first = r"( \(the executor recorded it first\))?"
    for action, moved, command in [("hold", "QUEUED -> HELD", "hold"),
                                   ("release", "HELD -> QUEUED", "release"),
                                   ("requeue", "RUNNING -> REQUEUED", "requeue")]:
        message = entry(entries, f"job.{action}", f"jobs/{jid}", 200)["message"]
        assert re.fullmatch(f"{moved}{first}; scontrol {command} {sid}", message), message
    upd = entry(entries, "job.update", f"jobs/{jid}", 400)
    assert upd["args"] == {"partition": "nope"} and "no partition nope" in upd["message"]
    first = [e for e in entries if e["action"] == "job.update" and e["status"] == 200][-1]
    assert first["message"] == f"nice 7, time_limit 1200 s; scontrol update JobId={sid} " \
                               f"Nice=7 TimeLimit=0-00:20:00", first
    assert any("slurm refused" in e["message"] for e in entries
               if e["action"] == "job.update" and e["status"] == 409)


def set_slurm_id(admin, jid, sid):
    """The database's Slurm id of jid, as a slurmctld that lost its state leaves it: an id
    Slurm has since given to another job."""
    db = sqlite3.connect(str(admin.d.state_dir / "larch.db"), timeout=10)
    try:
        with db:
            db.execute("UPDATE jobs SET slurm_job_id = ? WHERE id = ?", (str(sid), int(jid[2:])))
    finally:
        db.close()


def test_slurm_job_ops_refuse_an_id_now_another_jobs(slurm_admin, slurm_cluster, tmp_path):
    a = slurm_admin
    sleep_sh = tmp_path / "sleep.sh"
    sleep_sh.write_text("#!/bin/sh\nsleep 600\n")
    cpus = node_cpus(slurm_cluster)
    blocker = slurm_cluster.submit(sleep_sh, "-c", str(cpus), "-o", "/dev/null")
    foreign = None
    try:
        wait_for(lambda: slurm_cluster.job(blocker)["JobState"] == "RUNNING", "the blocker running")
        # root's own job, outside larch, pending behind the blocker
        foreign = slurm_cluster.submit(sleep_sh, "-J", "not-larch", "-o", "/dev/null")
        jid = a.submit("stale")
        sid = a.wait_state(jid, "QUEUED")["slurm_job_id"]
        set_slurm_id(a, jid, foreign)
        was = slurm_cluster.job(foreign)
        want = f"slurm job {foreign} is not {jid}'s (it is another job's now): nothing done"
        for method, path, body in [("POST", f"/v1/jobs/{jid}/hold", None),
                                   ("PATCH", f"/v1/jobs/{jid}", {"nice": 5, "time_limit": 20})]:
            err = assert_error(a.req(method, path, body), 409, "conflict")
            assert err["message"] == want, err
        now = slurm_cluster.job(foreign)
        for key in ("JobState", "Reason", "Nice", "Priority", "TimeLimit", "JobName", "Restarts"):
            assert now[key] == was[key], (key, was, now)
        assert a.job(jid)["state"] == "QUEUED"
        # larch's own Slurm job is untouched too, and the right id still works
        assert slurm_cluster.job(sid)["Reason"] != "JobHeldAdmin"
        set_slurm_id(a, jid, sid)
        assert a.ok("POST", f"/v1/jobs/{jid}/hold")["state"] == "HELD"
        assert slurm_cluster.job(sid)["Reason"] == "JobHeldAdmin"
        a.ok("POST", f"/v1/jobs/{jid}/release")

        # both run: a requeue of the foreign id is refused, the foreign job runs on
        slurm_cluster.run("scancel", str(blocker))
        wait_for(lambda: slurm_cluster.job(foreign)["JobState"] == "RUNNING", "foreign running")
        a.wait_state(jid, "RUNNING")
        set_slurm_id(a, jid, foreign)
        err = assert_error(a.req("POST", f"/v1/jobs/{jid}/requeue"), 409, "conflict")
        assert err["message"] == want, err
        now = slurm_cluster.job(foreign)
        assert (now["JobState"], now["Restarts"]) == ("RUNNING", "0"), now
        assert a.job(jid)["state"] == "RUNNING"
        set_slurm_id(a, jid, sid)
    finally:
        slurm_cluster.run("scancel", str(blocker), check=False)
        if foreign:
            slurm_cluster.run("scancel", str(foreign), check=False)
    entries = a.audit(target=f"jobs/{jid}", limit=50)
    assert entry(entries, "job.requeue", f"jobs/{jid}", 409)["message"] == want


def test_slurm_unreachable_503_then_stale(tmp_path, slurm_cluster):
    # a config whose controller nobody listens on: nothing to show, 503
    port = free_ports()
    conf = tmp_path / "dead.conf"
    conf.write_text(re.sub(r"^SlurmctldPort=\d+$", f"SlurmctldPort={port}",
                           slurm_cluster.conf.read_text(), flags=re.M))
    env = dict(slurm_cluster.env, SLURM_CONF=str(conf))
    dead = start_slurm(tmp_path, slurm_cluster, "--slurm-timeout", "2", env=env)
    try:
        err = assert_error(dead.req("GET", "/v1/queues"), 503, "overloaded")
        assert err["message"].startswith("slurm is unreachable: ")
        # the failure is remembered for 2 s: the next answer comes at once
        t0 = time.monotonic()
        assert_error(dead.req("GET", "/v1/queues"), 503, "overloaded")
        assert time.monotonic() - t0 < 1.5
        host = node_name(slurm_cluster)
        r = dead.req("POST", f"/v1/nodes/{host}/drain", {"reason": "x"})
        err = assert_error(r, 503, "overloaded")
        assert r.headers["Retry-After"] == "5" and "unreachable" in err["message"]
        assert entry(dead.audit(), "node.drain", f"nodes/{host}", 503)["outcome"] == "error"
    finally:
        dead.d.stop()


def test_slurm_stale_snapshot_while_slurmctld_is_down(tmp_path, slurm_cluster):
    admin = start_slurm(tmp_path, slurm_cluster, "--slurm-timeout", "3")
    try:
        good = admin.ok("GET", "/v1/queues")
        admin.ok("GET", "/v1/nodes")
        os.kill(slurm_cluster.pid("slurmctld"), 15)
        wait_for(lambda: not slurm_cluster.running(), "slurmctld to stop")
        try:
            time.sleep(2.1)
            q = admin.ok("GET", "/v1/queues")
            assert q["stale"] is True and q["error"] and q["updated_at"] == good["updated_at"]
            assert q["queues"] == good["queues"]
            n = admin.ok("GET", "/v1/nodes")
            assert n["stale"] is True and n["nodes"]
        finally:
            slurm_cluster.start()
        wait_for(lambda: admin.ok("GET", "/v1/queues")["stale"] is False, "a fresh snapshot", 40)
    finally:
        admin.d.stop()
