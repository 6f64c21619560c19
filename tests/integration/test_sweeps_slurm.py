"""Sweeps on the Slurm executor, against the real dev cluster
(tests/integration/slurm.py): a sweep is one job array, each child a task
of it (Slurm id <array>_<task>), followed through squeue's array rows, the
pending tasks included; a child's cancel stops only its task, a sweep's
cancel the whole array; a larchd restarted mid-sweep adopts the tasks.
Submission goes through sbatch and libslurm (the array is built both ways).

One larchd per test (own state dir, own instance id in the array's name);
the cluster is the session's. At the end nothing of this module is left
in Slurm: every array is cancelled and the node is idle again.
"""
import re
import signal
import time

import pytest
import requests

from larchd import Larchd

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
LONG = 20000            # steps of a child that runs until cancelled


def base(steps=30):
    return {"name": "sw", "model": {"type": "mlp", "hidden": [16]},
            "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
            "optimizer": {"type": "sgd", "lr": 0.1}, "steps": steps, "log_every": 5}


@pytest.fixture(scope="module")
def cluster(slurm_cluster):
    yield slurm_cluster
    # this module's arrays (named larch-<instance>-s-...) cancelled, the node idle
    out = slurm_cluster.run("squeue", "-h", "-t", "pending,running", "-O", "JobID:|,Name:|").stdout
    ids = [line.split("|")[0] for line in out.splitlines() if "|larch-" in line and "-s-" in line]
    if ids:
        slurm_cluster.run("scancel", *ids, check=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = slurm_cluster.run("sinfo", "-h", "-o", "%T").stdout.split()
        if states and all(s == "idle" for s in states):
            break
        time.sleep(0.5)


@pytest.fixture
def servers():
    started = []
    yield started
    for s in started:
        if s.running():
            s.proc.kill()
            s.wait()


def start(tmp_path, cluster, via="sbatch", state_dir=None):
    return Larchd(tmp_path, args=["--executor", "slurm", "--slurm-poll-ms", "300",
                                  "--cancel-grace", "10", "--slurm-submit", via],
                  env=dict(cluster.env), state_dir=state_dir).start()


def api(server, method, path, body=None, status=200):
    r = requests.request(method, server.url + path, json=body, headers=server.auth(), timeout=60)
    assert r.status_code == status, r.text
    return r.json()


def submit_sweep(server, axes, max_parallel, steps=30):
    body = {"name": "arr", "base": base(steps), "axes": axes, "max_parallel": max_parallel}
    return api(server, "POST", "/v1/sweeps", body, status=201)


def children(server, sid):
    s = api(server, "GET", f"/v1/sweeps/{sid}")
    return [api(server, "GET", f"/v1/jobs/{c['job']}") for c in
            sorted(s["children"], key=lambda c: c["index"])]


def wait_for(pred, what, server, timeout=90):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{server.log()[-3000:]}"
        time.sleep(0.3)


def wait_children(server, sid, ok, timeout=90):
    def check():
        cs = children(server, sid)
        return cs if all(ok(c) for c in cs) else None
    return wait_for(check, f"children of {sid}", server, timeout)


def slurm_calls(server):
    text = requests.get(server.url + "/metrics", headers=server.auth(), timeout=10).text
    return {m[0]: int(m[1]) for m in
            re.findall(r'^larch_slurm_calls_total\{command="([a-z_]+)"\} (\d+)', text, re.M)}


def array_of(c):
    sid = c["slurm_job_id"] or ""
    assert re.fullmatch(r"\d+_\d+", sid), c
    return sid.split("_")


@pytest.mark.parametrize("via", ["sbatch", "libslurm"])
def test_sweep_is_one_array(tmp_path, cluster, servers, via):
    server = start(tmp_path, cluster, via)
    servers.append(server)
    s = submit_sweep(server, {"optimizer.lr": [0.05, 0.1], "batch.global": [128, 256]}, 2)
    done = wait_children(server, s["id"], lambda c: c["state"] in FINAL)
    assert [c["state"] for c in done] == ["COMPLETED"] * 4, [(c["state"], c["reason"]) for c in done]
    # one array: every child is a task of it, task = its index in the sweep
    arrays = {array_of(c)[0] for c in done}
    assert len(arrays) == 1, [c["slurm_job_id"] for c in done]
    assert [int(array_of(c)[1]) for c in done] == [c["sweep_index"] for c in done] == [0, 1, 2, 3]
    calls = slurm_calls(server)
    assert calls["sbatch"] + calls["slurm_submit_batch_job"] == 1, calls
    # what Slurm says: one array job id, its tasks COMPLETED, named after the sweep
    array = arrays.pop()
    show = cluster.run("scontrol", "-o", "show", "job", array).stdout
    tasks = dict(re.findall(r"ArrayTaskId=(\d+) .*?JobState=(\w+)", show))
    assert tasks == {str(i): "COMPLETED" for i in range(4)}, show
    inst = (server.state_dir / "instance-id").read_text().strip()
    assert f"JobName=larch-{inst}-s-" in show
    # each child has its own metrics and its own logs in its own directory
    for c in done:
        m = api(server, "GET", f"/v1/jobs/{c['id']}/metrics?name=train/loss")
        assert [p[0] for p in m["series"]["train/loss"]][-1] == 30
        d = server.state_dir / "jobs" / c["id"]
        assert (d / "slurm-job-id").read_text().strip() == c["slurm_job_id"]
        assert "step" in (d / "stdout.log").read_text() + (d / "stderr.log").read_text()
    sw = api(server, "GET", f"/v1/sweeps/{s['id']}")
    assert sw["state"] == "COMPLETED", sw


def test_cancel_one_child_then_the_sweep(tmp_path, cluster, servers):
    server = start(tmp_path, cluster)
    servers.append(server)
    s = submit_sweep(server, {"optimizer.lr": [0.05, 0.1, 0.2]}, 1, steps=LONG)
    cs = wait_children(server, s["id"], lambda c: c["slurm_job_id"])
    array = array_of(cs[0])[0]
    # max_parallel 1: task 0 runs, 1 and 2 wait together in one pending row
    wait_for(lambda: children(server, s["id"])[0]["state"] == "RUNNING", "task 0 running", server)
    out = cluster.run("squeue", "-h", "-j", array, "-O", "JobArrayID:|,State:|").stdout
    assert f"{array}_[1-2%1]|PENDING|" in out, out
    # a pending task of the range is cancelled on its own; the others go on
    api(server, "POST", f"/v1/jobs/{cs[1]['id']}/cancel")
    wait_for(lambda: children(server, s["id"])[1]["state"] == "CANCELLED", "task 1 cancelled",
             server)
    now = children(server, s["id"])
    assert now[0]["state"] == "RUNNING" and now[2]["state"] == "QUEUED", now
    before = slurm_calls(server)["scancel"]
    api(server, "POST", f"/v1/sweeps/{s['id']}/cancel")
    done = wait_children(server, s["id"], lambda c: c["state"] in FINAL)
    assert [c["state"] for c in done] == ["CANCELLED"] * 3
    assert slurm_calls(server)["scancel"] - before == 1    # the whole array, in one order
    assert "cancelled by" in done[2]["reason"], done[2]
    show = cluster.run("scontrol", "-o", "show", "job", array).stdout
    assert set(re.findall(r"JobState=(\w+)", show)) == {"CANCELLED"}, show


def test_restart_adopts_the_tasks(tmp_path, cluster, servers):
    server = start(tmp_path, cluster)
    servers.append(server)
    s = submit_sweep(server, {"optimizer.lr": [0.05, 0.1]}, 1, steps=LONG)
    wait_for(lambda: children(server, s["id"])[0]["state"] == "RUNNING", "task 0 running", server)
    before = children(server, s["id"])
    server.signal(signal.SIGKILL)
    server.wait()
    again = start(tmp_path, cluster, state_dir=server.state_dir)
    servers.append(again)
    # followed again by the ids it had, nothing submitted anew
    time.sleep(1.5)
    after = children(again, s["id"])
    assert [(c["state"], c["slurm_job_id"]) for c in after] == \
        [("RUNNING", before[0]["slurm_job_id"]), ("QUEUED", before[1]["slurm_job_id"])]
    calls = slurm_calls(again)
    assert calls["sbatch"] + calls["slurm_submit_batch_job"] == 0, calls
    # the adopted running task cancelled: the next one starts, from the same array
    api(again, "POST", f"/v1/jobs/{after[0]['id']}/cancel")
    wait_for(lambda: children(again, s["id"])[1]["state"] == "RUNNING", "task 1 running", again)
    # task 0's end may be read (from accounting) a poll after task 1's start
    wait_for(lambda: children(again, s["id"])[0]["state"] == "CANCELLED", "task 0 cancelled",
             again)
    api(again, "POST", f"/v1/sweeps/{s['id']}/cancel")
    done = wait_children(again, s["id"], lambda c: c["state"] in FINAL)
    assert [c["state"] for c in done] == ["CANCELLED", "CANCELLED"]
