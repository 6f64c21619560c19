"""Accounting (docs/api.md, "Accounting") against real parts.

With the local executor: the accounts endpoints answer 409 (no Slurm
accounting) and are audited; GET /v1/usage adds up larch's own records of
the jobs that ran (CPUs x their run time, to the job's own start and end
times), a user sees their own rows only, `larch usage` prints them.

On the session's real cluster (tests/integration/slurm.py: slurmdbd,
AccountingStorageEnforce=associations,limits,qos) with larchd's accounting
read every second: GET /v1/accounts shows the accounts and users sacctmgr
made, with limits and fair share; PATCH sets MaxJobs/MaxWall/GrpTRES
through sacctmgr (checked with sacctmgr itself) and is audited; two users'
jobs, submitted through larchd with their own tokens (larchd as root runs
each job as its owner), appear under their own names in sacct and in
/v1/usage, each user seeing only theirs; MaxJobs=1 set through the API
holds a second job PENDING with Slurm's reason AssocMaxJobsLimit (a CPU
idle), shown on larch's job, until the first ends; and a job naming an
account its owner has no association with is refused at submit (400 naming
the owner's accounts).
"""
import datetime
import re
import subprocess
import time

import pytest
import requests

from larchd import BUILD, Larchd, stand_in_trainer
from test_larchd_http import assert_error

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}


def spec(name="acct", **extra):
    s = {"name": name, "model": {"type": "mlp", "hidden": [8]}, "data": {"name": "fashion-mnist"},
         "batch": {"global": 256}, "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 10}
    s.update(extra)
    return s


def stand_in(tmp_path, seconds):
    """A trainer that sleeps, then exits 0 (and probes as larch-train does)."""
    return stand_in_trainer(tmp_path / f"trainer-{seconds}", f"exec sleep {seconds}\n")


def wait_for(pred, what, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def ms(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000


class Client:
    def __init__(self, server):
        self.d = server
        self.url = server.url

    def req(self, method, path, body=None, token=None, params=None):
        return requests.request(method, self.url + path, headers=self.d.auth(token), json=body,
                                params=params, timeout=60)

    def ok(self, method, path, body=None, token=None, params=None):
        r = self.req(method, path, body, token, params)
        assert r.status_code == 200, f"{method} {path}: {r.status_code} {r.text}"
        return r.json()

    def token(self, user):
        out = subprocess.run([str(self.d.exe), "token", "create", "--user", user, "--role", "user",
                              "--state-dir", str(self.d.state_dir)],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    def audit(self, action):
        return self.ok("GET", "/v1/audit", params={"action": action})["entries"]

    def larch(self, *args, token=None):
        env = {"LARCH_URL": self.url, "LARCH_TOKEN": token or self.d.admin_token,
               "PATH": "/usr/bin:/bin"}
        return subprocess.run([str(BUILD / "service" / "larch"), *args], env=env,
                              capture_output=True, text=True, timeout=60)


# ---- the local executor ------------------------------------------------------------------

@pytest.fixture
def local(tmp_path):
    server = Larchd(tmp_path, args=["--trainer-path", str(stand_in(tmp_path, 1)),
                                    "--max-local-jobs", "4"]).start()
    yield Client(server)
    server.stop()


def test_accounts_409_without_slurm_accounting(local):
    err = assert_error(local.req("GET", "/v1/accounts"), 409, "conflict")
    assert err["message"] == "accounting is not configured: the local executor has no slurm " \
                             "accounting"
    r = local.req("PATCH", "/v1/accounts/ml/users/alice", {"max_jobs": 1})
    assert "not configured" in assert_error(r, 409, "conflict")["message"]
    e = local.audit("account.limits")[0]
    assert (e["target"], e["status"], e["args"]) == ("accounts/ml/users/alice", 409,
                                                     {"max_jobs": 1})
    # validated before the service is asked, and audited too
    r = local.req("PATCH", "/v1/accounts/ml", {"max_jobs": -1})
    assert assert_error(r, 400, "bad_request")["detail"] == {"field": "max_jobs"}
    r = local.req("PATCH", "/v1/accounts/ml", {"grp_tres": {"mem": 4}})
    assert assert_error(r, 400, "bad_request")["detail"] == {"field": "grp_tres"}
    r = local.req("PATCH", "/v1/accounts/ml", {"max_wall": "forever"})
    assert assert_error(r, 400, "bad_request")["detail"] == {"field": "max_wall"}
    r = local.req("PATCH", "/v1/accounts/-ml", {"max_jobs": 1})
    assert assert_error(r, 400, "bad_request")["detail"] == {"parameter": "name"}
    assert_error(local.req("PATCH", "/v1/accounts/ml", {}), 400, "bad_request")
    assert [e["status"] for e in local.audit("account.limits")][:5] == [400] * 5
    # admins only
    alice = local.token("alice")
    assert_error(local.req("GET", "/v1/accounts", token=alice), 403, "forbidden")
    assert_error(local.req("PATCH", "/v1/accounts/ml", {"max_jobs": 1}, token=alice), 403,
                 "forbidden")
    out = local.larch("admin", "accounts")
    assert out.returncode == 1 and "accounting is not configured" in out.stderr, out


def test_usage_of_local_jobs(local):
    alice, bob = local.token("alice"), local.token("bob")
    jobs = {}
    for user, token, res in (("alice", alice, {"cpus_per_task": 2}),
                             ("alice", alice, {"cpus_per_task": 1, "account": "ml"}),
                             ("bob", bob, {"cpus_per_task": 1})):
        r = local.req("POST", "/v1/jobs", spec(resources=res), token=token)
        assert r.status_code == 201, r.text
        jobs[r.json()["id"]] = (user, res)
    done = {}
    for jid in jobs:
        done[jid] = wait_for(lambda: (j := local.ok("GET", f"/v1/jobs/{jid}")) and
                             j["state"] in FINAL and j, f"{jid} to end", 60)
    want = {}
    for jid, (user, res) in jobs.items():
        j = done[jid]
        assert j["started_at"], j
        hours = res["cpus_per_task"] * (ms(j["ended_at"]) - ms(j["started_at"])) / 3.6e6
        key = (user, res.get("account"))
        want[key] = (want.get(key, (0, 0))[0] + hours, want.get(key, (0, 0))[1] + 1)

    u = local.ok("GET", "/v1/usage")
    assert u["group_by"] == ["user", "account"]
    assert u["slurm"] == {"accounting": False, "read_to": None, "error": None}
    got = {(r["user"], r["account"]): r for r in u["usage"]}
    assert set(got) == set(want), u
    for key, (hours, n) in want.items():
        assert got[key]["jobs"] == n and got[key]["gpu_hours"] == 0, got[key]
        assert abs(got[key]["cpu_hours"] - hours) <= 0.0002, (got[key], hours)
    assert [(r["user"], r["account"]) for r in u["usage"]] == sorted(
        want, key=lambda k: (k[0], k[1] or ""))

    # a user sees their own rows; other groupings; the range in whole hours
    mine = local.ok("GET", "/v1/usage", token=bob)["usage"]
    assert [(r["user"], r["jobs"]) for r in mine] == [("bob", 1)]
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    by = local.ok("GET", "/v1/usage", params={"group_by": "executor,day"})
    assert by["usage"] == [{"executor": "local", "day": today, "jobs": 3,
                            "cpu_hours": by["usage"][0]["cpu_hours"], "gpu_hours": 0}]
    tomorrow = (datetime.datetime.now(datetime.timezone.utc) +
                datetime.timedelta(days=1)).strftime("%Y-%m-%d")
    after = (datetime.datetime.now(datetime.timezone.utc) +
             datetime.timedelta(days=2)).strftime("%Y-%m-%d")
    later = local.ok("GET", "/v1/usage", params={"from": tomorrow, "to": after})
    assert later["usage"] == [] and later["from"] == f"{tomorrow}T00:00:00.000Z"
    for params, name in (({"from": "yesterday"}, "from"), ({"to": "2026-13-01"}, "to"),
                         ({"from": tomorrow, "to": today}, "from"),
                         ({"group_by": "user,user"}, "group_by"),
                         ({"group_by": "owner"}, "group_by"), ({"nope": "1"}, "nope")):
        r = local.req("GET", "/v1/usage", params=params)
        assert assert_error(r, 400, "bad_request")["detail"] == {"parameter": name}, params

    out = local.larch("usage", "--group-by", "user,executor", token=alice)
    assert out.returncode == 0, out
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["USER", "EXECUTOR", "CPU", "HOURS", "GPU", "HOURS", "JOBS"]
    assert len(lines) == 2 and re.match(r"alice\s+local\s+[\d.]+\s+0\.00\s+2$", lines[1]), lines


# ---- Slurm's accounting -------------------------------------------------------------------

@pytest.fixture
def slurm(tmp_path, slurm_cluster):
    slurm_cluster.add_user("alice", "acct-ml")
    slurm_cluster.add_user("bob", "acct-phys")
    slurm_cluster.add_user("alice", "acct-phys", default=False)
    slurm_cluster.add_user("alice", "acct-lim", default=False)
    slurm_cluster.add_user("root", "acct-lim", default=False)
    for user, default in (("alice", "acct-ml"), ("bob", "acct-phys")):
        slurm_cluster.sacctmgr("modify", "user", user, "set", f"defaultaccount={default}")
    server = Larchd(tmp_path, args=["--executor", "slurm", "--slurm-poll-ms", "300",
                                    "--accounting-refresh-s", "1",
                                    "--trainer-path", str(stand_in(tmp_path, 300))],
                    env=dict(slurm_cluster.env)).start()
    client = Client(server)
    client.cluster = slurm_cluster
    wait_for(lambda: client.req("GET", "/v1/accounts").status_code == 200, "the accounts", 30)
    yield client
    for j in client.ok("GET", "/v1/jobs", params={"limit": 500})["jobs"]:
        if j["state"] not in FINAL:
            client.req("POST", f"/v1/jobs/{j['id']}/cancel")
    for account, user in (("acct-ml", "alice"), ("acct-lim", "alice"), ("acct-lim", "root")):
        client.req("PATCH", f"/v1/accounts/{account}/users/{user}",
                   {"max_jobs": None, "max_wall": None, "grp_tres": {"cpu": None, "gpu": None}})
    server.stop()


def account(view, name):
    return next(a for a in view["accounts"] if a["name"] == name)


def user_of(acc, name):
    return next(u for u in acc["users"] if u["name"] == name)


def assoc(cluster, account, user):
    """sacctmgr's own view of an association: MaxJobs|MaxWall|GrpTRES."""
    out = cluster.run("sacctmgr", "-nP", "show", "assoc", f"accounts={account}",
                      f"users={user}", "format=maxjobs,maxwall,grptres").stdout
    return out.strip()


def test_accounts_and_limits_through_sacctmgr(slurm):
    view = slurm.ok("GET", "/v1/accounts")
    assert view["cluster"] == "larch-dev" and view["stale"] is False, view
    ml, phys = account(view, "acct-ml"), account(view, "acct-phys")
    assert ml["parent"] == "root"
    assert user_of(ml, "alice")["default"] is True
    assert user_of(phys, "alice")["default"] is False and user_of(phys, "bob")["default"]
    assert user_of(ml, "alice")["limits"] == {"max_jobs": None, "max_wall": None,
                                              "max_wall_s": None,
                                              "grp_tres": {"cpu": None, "gpu": None}}
    assert set(user_of(ml, "alice")["fairshare"]) == {"raw_shares", "norm_shares", "raw_usage",
                                                      "effective_usage", "fairshare"}

    acc = slurm.ok("PATCH", "/v1/accounts/acct-ml/users/alice",
                   {"max_jobs": 2, "max_wall": "1:30:00", "grp_tres": {"cpu": 4, "gpu": 1}})
    assert user_of(acc, "alice")["limits"] == {"max_jobs": 2, "max_wall": "01:30:00",
                                               "max_wall_s": 5400,
                                               "grp_tres": {"cpu": 4, "gpu": 1}}
    assert assoc(slurm.cluster, "acct-ml", "alice") == "2|01:30:00|cpu=4,gres/gpu=1"
    acc = slurm.ok("PATCH", "/v1/accounts/acct-ml/users/alice",
                   {"max_wall": None, "grp_tres": {"gpu": None}})
    assert assoc(slurm.cluster, "acct-ml", "alice") == "2||cpu=4"
    acc = slurm.ok("PATCH", "/v1/accounts/acct-phys", {"grp_tres": {"cpu": 8}})
    assert acc["name"] == "acct-phys" and acc["limits"]["grp_tres"]["cpu"] == 8
    e = slurm.audit("account.limits")
    assert (e[0]["target"], e[0]["status"]) == ("accounts/acct-phys", 200)
    assert e[0]["message"] == "sacctmgr -i modify account where name=acct-phys " \
                              "cluster=larch-dev set GrpTRES=cpu=8"
    slurm.ok("PATCH", "/v1/accounts/acct-phys", {"grp_tres": {"cpu": None}})

    assert "no account nope" in assert_error(
        slurm.req("PATCH", "/v1/accounts/nope", {"max_jobs": 1}), 404, "not_found")["message"]
    assert "user bob has no association with account acct-ml" in assert_error(
        slurm.req("PATCH", "/v1/accounts/acct-ml/users/bob", {"max_jobs": 1}), 404,
        "not_found")["message"]
    assert [x["status"] for x in slurm.audit("account.limits")][:2] == [404, 404]

    out = slurm.larch("admin", "accounts")
    assert out.returncode == 0, out
    assert re.search(r"^\s+alice \(default\)\s+2\s+-\s+4\s+-\s", out.stdout, re.M), out.stdout
    out = slurm.larch("admin", "set-limits", "acct-ml", "--user", "alice", "--max-jobs", "none",
                      "--cpus", "none")
    assert out.returncode == 0, out
    assert assoc(slurm.cluster, "acct-ml", "alice") == "||"


def submit_as(slurm, token, body):
    r = slurm.req("POST", "/v1/jobs", body, token=token)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_two_users_jobs_under_their_names_in_sacct_and_usage(slurm):
    """alice's and bob's jobs, submitted through larchd with their own tokens,
    run as them: sacct and /v1/usage have them under their own names, and
    each user sees only their own usage."""
    tokens = {u: slurm.token(u) for u in ("alice", "bob")}
    jobs = {user: submit_as(slurm, tokens[user], spec(f"of-{user}", resources={
                "account": acct, "cpus_per_task": int(cpus)}))
            for user, acct, cpus in (("alice", "acct-ml", "1"), ("bob", "acct-phys", "1"))}
    sids = {}
    for user, jid in jobs.items():
        j = wait_for(lambda: (j := slurm.ok("GET", f"/v1/jobs/{jid}")) and
                     j["state"] == "RUNNING" and j, f"{jid} to run", 60)
        assert j["run_as"] == user
        sids[user] = j["slurm_job_id"]
    time.sleep(2)                      # some seconds of use to account for
    for jid in jobs.values():
        slurm.ok("POST", f"/v1/jobs/{jid}/cancel")
    for jid in jobs.values():
        wait_for(lambda: slurm.ok("GET", f"/v1/jobs/{jid}")["state"] in FINAL, f"{jid} ends", 60)
    c = slurm.cluster

    def recorded():
        """sacct's rows of the two jobs once slurmdbd has both ends."""
        out = c.run("sacct", "-X", "-n", "-P", "-j", ",".join(sids.values()),
                    "-o", "JobID,User,Account,AllocCPUS,State").stdout
        rows = {line.split("|")[1]: line.split("|") for line in out.splitlines()}
        return rows if len(rows) == 2 and all(r[4] not in ("RUNNING", "PENDING")
                                              for r in rows.values()) else None

    rows = wait_for(recorded, "slurmdbd to record both jobs' ends", 30)
    assert rows["alice"][:4] == [sids["alice"], "alice", "acct-ml", "1"], rows
    assert rows["bob"][:4] == [sids["bob"], "bob", "acct-phys", "1"], rows

    def usage(token=None):
        u = slurm.ok("GET", "/v1/usage", token=token,
                     params={"group_by": "user,account,executor"})
        return {(r["user"], r["account"], r["executor"]): r for r in u["usage"]}

    got = wait_for(lambda: (u := usage()) and ("alice", "acct-ml", "slurm") in u and
                   ("bob", "acct-phys", "slurm") in u and u, "sacct's usage in larchd", 30)
    a, b = got[("alice", "acct-ml", "slurm")], got[("bob", "acct-phys", "slurm")]
    assert a["jobs"] >= 1 and b["jobs"] >= 1
    assert a["cpu_hours"] > 0 and b["cpu_hours"] > 0
    assert {k[0] for k in usage(tokens["alice"])} == {"alice"}
    assert {k[0] for k in usage(tokens["bob"])} == {"bob"}
    assert slurm.ok("GET", "/v1/usage")["slurm"]["accounting"] is True


def test_max_jobs_through_the_api_holds_the_next_job(slurm):
    slurm.ok("PATCH", "/v1/accounts/acct-lim/users/alice", {"max_jobs": 1})
    alice = slurm.token("alice")
    # the snapshot the submit check reads has alice's association with acct-lim
    wait_for(lambda: user_of(account(slurm.ok("GET", "/v1/accounts"), "acct-lim"),
                             "alice")["limits"]["max_jobs"] == 1, "the limit in the view", 30)
    first, second = [submit_as(slurm, alice, spec(
        name, resources={"account": "acct-lim", "cpus_per_task": 1})) for name in ("l1", "l2")]
    wait_for(lambda: slurm.ok("GET", f"/v1/jobs/{first}")["state"] == "RUNNING",
             "the first job to run", 60)
    sid = wait_for(lambda: slurm.ok("GET", f"/v1/jobs/{second}")["slurm_job_id"],
                   "the second job in Slurm", 30)

    def slurm_says():
        out = slurm.cluster.run("squeue", "-h", "-j", sid, "-o", "%T|%r|%u").stdout.strip()
        return out if out == "PENDING|AssocMaxJobsLimit|alice" else None

    wait_for(slurm_says, "Slurm to hold the second job for AssocMaxJobsLimit", 30)
    # the limit holds it, not the node: a CPU is idle for it
    idle = slurm.cluster.run("sinfo", "-h", "-N", "-o", "%C").stdout.split("/")[1]
    assert int(idle) >= 1, idle
    # larch shows the job waiting, and why, as Slurm says it
    j = wait_for(lambda: (j := slurm.ok("GET", f"/v1/jobs/{second}")) and
                 "AssocMaxJobsLimit" in (j["reason"] or "") and j, "the reason on the job", 30)
    assert j["state"] == "QUEUED" and j["reason"] == f"slurm job {sid} pending: AssocMaxJobsLimit"
    notes = [e for e in slurm.ok("GET", f"/v1/jobs/{second}/events")["events"]
             if e["from"] == e["to"] == "QUEUED"]
    assert notes and notes[-1]["reason"] == j["reason"] and notes[-1]["by"] == "executor"

    # the first one ends: within the limit again, Slurm starts the second
    slurm.ok("POST", f"/v1/jobs/{first}/cancel")
    wait_for(lambda: slurm.ok("GET", f"/v1/jobs/{second}")["state"] == "RUNNING",
             "the second job to run once the first has ended", 60)


def test_submit_checks_the_account(slurm):
    """The account is checked for the Unix user the job runs as: the owner's
    associations, as Slurm will check them."""
    bob = slurm.token("bob")
    r = slurm.req("POST", "/v1/jobs", spec("wrong", resources={"account": "acct-ml"}), token=bob)
    err = assert_error(r, 400, "invalid_spec")
    assert err["detail"] == {"field": "resources.account"}
    assert err["message"].startswith("resources.account: user bob has no association with "
                                     "account acct-ml; their accounts: "), err
    assert "acct-phys (default)" in err["message"]
    # an admin's job runs as root: root's associations
    r = slurm.req("POST", "/v1/jobs", spec("wrong", resources={"account": "acct-phys"}))
    err = assert_error(r, 400, "invalid_spec")
    assert err["message"].startswith("resources.account: user root has no association with "
                                     "account acct-phys; their accounts: "), err
    assert "acct-lim" in err["message"] and "root (default)" in err["message"]
    assert slurm.ok("GET", "/v1/jobs")["jobs"] == []
