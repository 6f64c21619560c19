"""Sweeps on the local executor (POST/GET /v1/sweeps, children as jobs,
max_parallel, cancel, labels, owner scope), against a real larchd.

The children run a stand-in trainer: it reports val/accuracy at steps 10,
20 and 30 with the values lr * step (so the child's lr decides whether and
when it reaches the target), and sleeps a minute first when its spec asks
for 5000 steps or more (a child to cancel), 1 s when the spec's seed is 7
(children that overlap if max_parallel is not kept).
"""
import json
import time

import pytest
import requests

from test_api_jobs import Server, tiny_spec
from test_larchd_http import assert_error
from larchd import poll, stand_in_trainer

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}

FAKE = r'''
exec python3 -c '
import json, os, time, urllib.request
spec = json.load(open("spec.json"))
if spec["steps"] >= 5000:
    time.sleep(60)
if spec.get("seed") == 7:
    time.sleep(1)
lr = spec["optimizer"]["lr"]
points = [{"step": s, "time": time.time(), "name": "val/accuracy", "value": lr * s}
          for s in (10, 20, 30)]
url = os.environ.get("LARCH_SERVER_URL")
if url and os.environ.get("LARCH_JOB_TOKEN"):
    req = urllib.request.Request(url + "/v1/jobs/" + os.environ["LARCH_JOB_ID"] + "/metrics",
        data=json.dumps({"metrics": points}).encode(), method="POST",
        headers={"Content-Type": "application/json",
                 "Authorization": "Bearer " + os.environ["LARCH_JOB_TOKEN"]})
    urllib.request.urlopen(req, timeout=10).read()
'
'''


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweeps")
    trainer = stand_in_trainer(tmp / "fake-train", FAKE)
    server = Server(tmp, ["--trainer-path", str(trainer), "--max-local-jobs", "4"])
    yield server
    server.stop()


def sweep_body(name="sw", axes=None, **extra):
    return {"name": name, "base": tiny_spec("ignored", steps=30),
            "axes": axes if axes is not None else {"batch.global": [256, 512],
                                                   "optimizer.lr": [0.01, 0.02]},
            **extra}


def submit(srv, who, body):
    r = srv.post("/v1/sweeps", who, body)
    assert r.status_code == 201, r.text
    assert r.headers["Location"] == "/v1/sweeps/" + r.json()["id"]
    return r.json()


def get_sweep(srv, sid, who=None):
    r = srv.get(f"/v1/sweeps/{sid}", who or srv.admin)
    assert r.status_code == 200, r.text
    return r.json()


def wait_sweep(srv, sid, states, timeout=60):
    return poll(lambda: get_sweep(srv, sid), lambda s: s["state"] in states, timeout,
                lambda s: f"{sid} still {s['state']}: {s['counts']}")


# ---- submit, children, summary ------------------------------------------------------

def test_grid_sweep_children_and_target(srv):
    body = sweep_body("grid", target={"metric": "val/accuracy", "value": 0.3, "mode": "max"},
                      labels={"project": "fmnist"}, max_parallel=4)
    s = submit(srv, srv.alice, body)
    assert s["id"].startswith("s-") and s["method"] == "grid" and s["children_count"] == 4
    assert s["labels"] == {"project": "fmnist"} and s["owner"] == "alice"
    # the first axis varies slowest
    assert [c["params"] for c in s["children"]] == [
        {"batch.global": 256, "optimizer.lr": 0.01}, {"batch.global": 256, "optimizer.lr": 0.02},
        {"batch.global": 512, "optimizer.lr": 0.01}, {"batch.global": 512, "optimizer.lr": 0.02}]
    assert [c["index"] for c in s["children"]] == [0, 1, 2, 3]

    # each child is an ordinary job with its sweep, params, name and labels
    job = srv.job(s["children"][3]["job"], srv.alice)
    assert job["sweep"] == s["id"] and job["sweep_index"] == 3 and job["name"] == "grid-3"
    assert job["params"] == {"batch.global": 512, "optimizer.lr": 0.02}
    assert job["spec"]["batch"]["global"] == 512 and job["spec"]["optimizer"]["lr"] == 0.02
    assert job["labels"] == {"project": "fmnist"} and job["owner"] == "alice"

    done = wait_sweep(srv, s["id"], {"COMPLETED", "FAILED"})
    assert done["state"] == "COMPLETED" and done["counts"]["COMPLETED"] == 4, done
    by = {c["index"]: c for c in done["children"]}
    # lr 0.01: 0.1, 0.2, 0.3 -> the target 0.3 at step 30; lr 0.02: 0.2, 0.4 -> step 20
    for i, (step, batch) in {0: (30, 256), 1: (20, 256), 2: (30, 512), 3: (20, 512)}.items():
        assert by[i]["steps_to_target"] == step, by[i]
        assert by[i]["examples_to_target"] == step * batch
        assert by[i]["seconds_to_target"] is not None and by[i]["seconds_to_target"] >= 0
    assert by[1]["best"] == pytest.approx(0.6) and by[0]["best"] == pytest.approx(0.3)

    # GET /v1/jobs?sweep= lists exactly the children
    r = srv.get(f"/v1/jobs?sweep={s['id']}", srv.alice)
    assert r.status_code == 200
    assert sorted(j["id"] for j in r.json()["jobs"]) == sorted(c["job"] for c in s["children"])
    # ... and events and logs work on a child like on any job
    assert srv.events(s["children"][0]["job"], srv.alice)[0]["reason"].endswith(
        f"(sweep {s['id']})")


def test_target_not_reached_and_min_mode(srv):
    body = sweep_body("minmode", axes={"optimizer.lr": [0.001, 0.002]},
                      target={"metric": "val/accuracy", "value": 0.05, "mode": "min"})
    s = wait_sweep(srv, submit(srv, srv.alice, body)["id"], {"COMPLETED"})
    by = {c["index"]: c for c in s["children"]}
    # lr 0.001: 0.01 at step 10 <= 0.05 -> step 10; best is the minimum
    assert by[0]["steps_to_target"] == 10 and by[0]["best"] == pytest.approx(0.01)
    body = sweep_body("never", axes={"optimizer.lr": [0.001]},
                      target={"metric": "val/accuracy", "value": 0.99})
    s = wait_sweep(srv, submit(srv, srv.alice, body)["id"], {"COMPLETED"})
    c = s["children"][0]
    assert c["best"] == pytest.approx(0.03) and c["steps_to_target"] is None
    assert c["examples_to_target"] is None and c["seconds_to_target"] is None


def test_random_is_seeded_and_reproducible(srv):
    axes = {"optimizer.lr": [0.01, 0.02, 0.03, 0.04, 0.05], "batch.global": [256, 512, 1024]}
    body = sweep_body("rnd", axes=axes, method="random", samples=6, seed=42,
                      base=tiny_spec("x", steps=30))
    a, b = submit(srv, srv.alice, body), submit(srv, srv.alice, body)
    assert [c["params"] for c in a["children"]] == [c["params"] for c in b["children"]]
    assert len(a["children"]) == 6
    c = submit(srv, srv.alice, {**body, "seed": 43})
    assert [x["params"] for x in c["children"]] != [x["params"] for x in a["children"]]
    for child in a["children"]:
        assert child["params"]["optimizer.lr"] in axes["optimizer.lr"]
        assert child["params"]["batch.global"] in axes["batch.global"]


def test_max_parallel_keeps_siblings_queued(srv):
    base = tiny_spec("x", steps=30, seed=7)       # each child takes about 1 s
    body = sweep_body("par", axes={"optimizer.lr": [0.01, 0.02, 0.03]}, base=base,
                      max_parallel=1)
    s = submit(srv, srv.alice, body)
    ids = [c["job"] for c in s["children"]]
    # while one runs, the others wait QUEUED (handed to the executor, held back)
    deadline = time.monotonic() + 30
    seen = False
    while not seen and time.monotonic() < deadline:
        states = [srv.job(j)["state"] for j in ids]
        assert states.count("RUNNING") <= 1, states
        seen = states.count("RUNNING") == 1 and states.count("QUEUED") == 2
        time.sleep(0.05)
    assert seen, "never one RUNNING and two QUEUED"
    wait_sweep(srv, s["id"], {"COMPLETED"})
    runs = sorted((srv.job(j)["started_at"], srv.job(j)["ended_at"]) for j in ids)
    for (_, end), (start, _) in zip(runs, runs[1:]):
        assert start >= end, runs    # never two at once


def test_cancel_sweep(srv):
    body = sweep_body("cancel", axes={"optimizer.lr": [0.01, 0.02, 0.03]},
                      base=tiny_spec("x", steps=5000), max_parallel=1)
    s = submit(srv, srv.alice, body)
    srv.wait(s["children"][0]["job"], {"RUNNING"})
    # bob can neither see nor cancel it
    assert_error(srv.post(f"/v1/sweeps/{s['id']}/cancel", srv.bob), 404, "not_found")
    assert_error(srv.get(f"/v1/sweeps/{s['id']}", srv.bob), 404, "not_found")
    r = srv.post(f"/v1/sweeps/{s['id']}/cancel", srv.alice)
    assert r.status_code == 200, r.text
    done = wait_sweep(srv, s["id"], {"CANCELLED"}, timeout=60)
    assert done["counts"]["CANCELLED"] == 3
    # again: nothing left to cancel, still 200
    assert srv.post(f"/v1/sweeps/{s['id']}/cancel", srv.alice).status_code == 200


def test_list_is_owner_scoped(srv):
    mine = submit(srv, srv.bob, sweep_body("bobs", axes={"optimizer.lr": [0.01]}))
    r = srv.get("/v1/sweeps", srv.bob)
    assert r.status_code == 200
    assert [s["id"] for s in r.json()["sweeps"]] == [mine["id"]]
    assert "children" not in r.json()["sweeps"][0]
    alice = [s["owner"] for s in srv.get("/v1/sweeps", srv.alice).json()["sweeps"]]
    assert alice and set(alice) == {"alice"}
    everyone = {s["owner"] for s in srv.get("/v1/sweeps?limit=500", srv.admin).json()["sweeps"]}
    assert everyone == {"alice", "bob"}
    # pages
    r = srv.get("/v1/sweeps?limit=1", srv.alice).json()
    assert len(r["sweeps"]) == 1 and r["next_cursor"]
    r2 = srv.get(f"/v1/sweeps?limit=1&cursor={r['next_cursor']}", srv.alice).json()
    assert r2["sweeps"][0]["id"] < r["sweeps"][0]["id"]
    assert_error(srv.get("/v1/sweeps?cursor=nope", srv.alice), 400, "bad_request")
    # bob's children are not in alice's job list
    r = srv.get(f"/v1/jobs?sweep={mine['id']}", srv.alice)
    assert r.status_code == 200 and r.json()["jobs"] == []


# ---- labels ----------------------------------------------------------------------------

def test_labels_on_jobs_and_sweeps(srv):
    job = srv.submit(srv.alice, {**tiny_spec("lab"), "labels": {"project": "mnist", "tier": "a"}})
    assert srv.job(job)["labels"] == {"project": "mnist", "tier": "a"}
    r = srv.get("/v1/jobs?label=project:mnist", srv.alice)
    assert [j["id"] for j in r.json()["jobs"]] == [job]
    # the owner changes them; bob cannot see the job
    r = requests.patch(srv.url + f"/v1/jobs/{job}", headers=srv.alice,
                       json={"labels": {"project": "kmnist"}}, timeout=10)
    assert r.status_code == 200 and r.json()["labels"] == {"project": "kmnist"}
    assert srv.get("/v1/jobs?label=project:mnist", srv.alice).json()["jobs"] == []
    assert [j["id"] for j in srv.get("/v1/jobs?label=project:kmnist", srv.alice).json()["jobs"]] \
        == [job]
    # the job runs meanwhile, so its own events (pid, RUNNING) may come after the note
    assert "labels changed" in [e["reason"] for e in srv.events(job)]
    assert_error(requests.patch(srv.url + f"/v1/jobs/{job}", headers=srv.bob,
                                json={"labels": {}}, timeout=10), 404, "not_found")
    # a user may not change anything else; nor labels with other fields
    assert_error(requests.patch(srv.url + f"/v1/jobs/{job}", headers=srv.alice,
                                json={"priority": 5}, timeout=10), 403, "forbidden")
    assert_error(requests.patch(srv.url + f"/v1/jobs/{job}", headers=srv.admin,
                                json={"priority": 5, "labels": {}}, timeout=10), 400,
                 "bad_request")
    for bad in ({"Project": "x"}, {"p": "a b"}, {"p": 1}, {"p": "x" * 129}, [],
                {f"k{i}": "v" for i in range(17)}, {"": "x"}):
        r = requests.patch(srv.url + f"/v1/jobs/{job}", headers=srv.alice,
                           json={"labels": bad}, timeout=10)
        assert_error(r, 400, "bad_request")
    assert_error(srv.post("/v1/jobs", srv.alice, {**tiny_spec("l2"), "labels": {"A": "b"}}),
                 400, "invalid_spec")
    for q in ("label=project", "label=Bad:x", "label=p:a b", "sweep=j-000001", "sweep=s-x"):
        assert_error(srv.get("/v1/jobs?" + q, srv.alice), 400, "bad_request")

    # a sweep's labels go to its children, and a PATCH changes both
    s = submit(srv, srv.alice, sweep_body("labsw", axes={"optimizer.lr": [0.01, 0.02]},
                                          labels={"project": "fm"}))
    r = requests.patch(srv.url + f"/v1/sweeps/{s['id']}", headers=srv.alice,
                       json={"labels": {"project": "fm2"}}, timeout=10)
    assert r.status_code == 200 and r.json()["labels"] == {"project": "fm2"}
    kids = srv.get("/v1/jobs?label=project:fm2", srv.alice).json()["jobs"]
    assert sorted(j["id"] for j in kids) == sorted(c["job"] for c in s["children"])
    assert_error(requests.patch(srv.url + f"/v1/sweeps/{s['id']}", headers=srv.bob,
                                json={"labels": {}}, timeout=10), 404, "not_found")
    assert_error(requests.patch(srv.url + f"/v1/sweeps/{s['id']}", headers=srv.alice,
                                json={"name": "x"}, timeout=10), 400, "bad_request")


# ---- bad input ---------------------------------------------------------------------------

def count_jobs(srv):
    return len(srv.get("/v1/jobs?limit=500", srv.admin).json()["jobs"])


@pytest.mark.parametrize("body,field,words", [
    (sweep_body(axes={"optimizer.nope": [1, 2]}), "optimizer", "child 0 (optimizer.nope=1): optimizer: unknown field \"nope\""),
    (sweep_body(axes={"batch.global.x": [1]}), "axes.batch.global.x", "not an object"),
    (sweep_body(axes={"optimizer.lr": [0.1, "fast"]}), "optimizer.lr", "optimizer.lr=\"fast\""),
    (sweep_body(axes={"optimizer.lr": []}), "axes.optimizer.lr", "empty"),
    (sweep_body(axes={}), "axes", "at least one"),
    (sweep_body(axes={"optimizer.lr": 0.1}), "axes.optimizer.lr", "list"),
    (sweep_body(axes={"name": ["a", "b"]}), "axes.name", "name"),
    (sweep_body(axes={"optimizer": [{}], "optimizer.lr": [0.1]}), "axes.optimizer.lr", "inside"),
    (sweep_body(axes={"a..b": [1]}), "axes.a..b", "dotted path"),
    (sweep_body(axes={"optimizer.lr": list(range(1, 34)), "batch.global": list(range(1, 34))}),
     "axes", "more than the 1000"),
    (sweep_body(nope=1), "nope", "unknown field"),
    (sweep_body(method="bayes"), "method", "grid"),
    (sweep_body(method="random"), "samples", "required"),
    (sweep_body(method="random", samples=1001), "samples", "1000"),
    (sweep_body(samples=3), "samples", "only with"),
    (sweep_body(max_parallel=-1), "max_parallel", "integer"),
    (sweep_body(target={"metric": "val/accuracy"}), "target.value", "number"),
    (sweep_body(target={"metric": "val/accuracy", "value": 1, "mode": "up"}), "target.mode", "max"),
    (sweep_body(target={"metric": "val/accuracy", "value": 1, "x": 1}), "target", "unknown"),
    (sweep_body(early_stop={"rule": "median", "after_steps": 5}), "early_stop", "target"),
    (sweep_body(labels={"Bad": "x"}), "labels", "key"),
    (sweep_body(name="x" * 70), "name", "at most"),
    (sweep_body(name="bad name"), "name", "name"),
    ({"base": tiny_spec(), "axes": {"optimizer.lr": [0.1]}}, "name", "required"),
])
def test_bad_sweeps_store_nothing(srv, body, field, words):
    before = count_jobs(srv)
    r = srv.post("/v1/sweeps", srv.alice, body)
    err = assert_error(r, 400, "invalid_spec")
    assert err["detail"]["field"] == field, err
    assert words in err["message"], err
    assert count_jobs(srv) == before


def test_invalid_child_names_values_and_field(srv):
    before = count_jobs(srv)
    body = sweep_body(axes={"batch.global": [256, 1000], "batch.micro": [256]})
    err = assert_error(srv.post("/v1/sweeps", srv.alice, body), 400, "invalid_spec")
    assert err["detail"]["child"] == 1
    assert err["detail"]["params"] == {"batch.global": 1000, "batch.micro": 256}
    assert err["detail"]["field"].startswith("batch")
    assert "batch.global=1000" in err["message"]
    assert count_jobs(srv) == before


def test_malformed_and_huge_bodies(srv):
    r = requests.post(srv.url + "/v1/sweeps", headers=srv.alice, data="{nope", timeout=10)
    assert_error(r, 400, "bad_json")
    assert_error(srv.post("/v1/sweeps", srv.alice, [1, 2]), 400, "invalid_spec")
    r = requests.post(srv.url + "/v1/sweeps", headers=srv.alice,
                      data=json.dumps({"name": "x" * (2 << 20)}), timeout=30)
    assert r.status_code == 413
    assert_error(srv.get("/v1/sweeps/s-1", srv.alice), 404, "not_found")
    assert_error(srv.get("/v1/sweeps/j-000001", srv.alice), 404, "not_found")
    assert_error(srv.get("/v1/sweeps/s-999999", srv.alice), 404, "not_found")
    assert_error(srv.get("/v1/sweeps?x=1", srv.alice), 400, "bad_request")
    assert srv.post("/v1/sweeps", {"Content-Type": "application/json"},
                    sweep_body()).status_code == 401


def test_thousand_children(srv):
    body = sweep_body("big", axes={"optimizer.lr": [0.001 * (i + 1) for i in range(40)],
                                   "batch.global": [256 * (i + 1) for i in range(25)]},
                      max_parallel=1)
    t0 = time.monotonic()
    s = submit(srv, srv.alice, body)
    submit_s = time.monotonic() - t0
    assert s["children_count"] == 1000 and len(s["children"]) == 1000
    t0 = time.monotonic()
    again = get_sweep(srv, s["id"])
    get_s = time.monotonic() - t0
    assert again["children"][999]["params"] == {"optimizer.lr": 0.04, "batch.global": 6400}
    t0 = time.monotonic()
    r = requests.post(srv.url + f"/v1/sweeps/{s['id']}/cancel", headers=srv.alice, timeout=60)
    cancel_s = time.monotonic() - t0
    assert r.status_code == 200, r.text
    done = wait_sweep(srv, s["id"], {"CANCELLED", "COMPLETED"}, timeout=120)
    assert done["counts"]["CANCELLED"] + done["counts"]["COMPLETED"] == 1000
    t0 = time.monotonic()
    get_sweep(srv, s["id"])
    idle_s = time.monotonic() - t0
    print(f"\n1000-child sweep: submit {submit_s * 1000:.0f} ms, GET {get_s * 1000:.0f} ms while "
          f"the runner hands them over, {idle_s * 1000:.0f} ms after; cancel {cancel_s * 1000:.0f} ms")


# ---- the CLI ---------------------------------------------------------------------------

def test_cli_sweep(srv, tmp_path):
    import os
    import subprocess
    from larchd import BUILD
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LARCH_URL": srv.url,
           "LARCH_TOKEN": srv.alice["Authorization"].split()[1]}

    def larch(*args):
        return subprocess.run([str(BUILD / "service" / "larch"), *args], env=env,
                              capture_output=True, text=True, timeout=30)
    f = tmp_path / "sweep.json"
    f.write_text(json.dumps(sweep_body("clisw", axes={"optimizer.lr": [0.01, 0.02]},
                                       target={"metric": "val/accuracy", "value": 0.3})))
    out = larch("sweep", "submit", str(f))
    assert out.returncode == 0, out.stderr
    sid = out.stdout.strip()
    assert sid.startswith("s-")
    wait_sweep(srv, sid, {"COMPLETED"})
    out = larch("sweep", "show", sid)
    assert out.returncode == 0, out.stderr
    assert "clisw" in out.stdout and "optimizer.lr=0.02" in out.stdout and "COMPLETED" in out.stdout
    assert "5120" in out.stdout             # examples to target: step 20 x batch 256
    out = larch("sweep", "ls")
    assert out.returncode == 0 and sid in out.stdout
    out = larch("sweep", "show", sid, "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["id"] == sid
    out = larch("sweep", "cancel", sid)
    assert out.returncode == 0 and "COMPLETED" in out.stdout
    out = larch("sweep", "show", "s-999999")
    assert out.returncode == 1 and "no sweep s-999999" in out.stderr
    out = larch("sweep", "frob")
    assert out.returncode == 2 and 'no verb "frob"' in out.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(sweep_body(axes={"optimizer.lr": []})))
    out = larch("sweep", "submit", str(bad))
    assert out.returncode == 1 and "axes.optimizer.lr: must not be empty" in out.stderr
