"""Sweeps on the Slurm executor, against the real dev cluster
(tests/integration/slurm.py): a sweep is one job array, each child a task
of it (Slurm id <array>_<task>), followed through squeue's array rows, the
pending tasks included; a child's cancel stops only its task, a sweep's
cancel the whole array; a larchd restarted mid-sweep adopts the tasks.
Submission goes through sbatch and libslurm (the array is built both ways).
Also: the CLI's sweep verbs and the dashboard's sweep page on such a
larchd; an admin's scontrol requeue of one task (that child requeued,
attempt 2, completed; its sibling untouched) and the urgent partition's
preemption of one; the median early stop cancelling a bad child's task.

One larchd per test (own state dir, own instance id in the array's name);
the cluster is the session's. At the end nothing of this module is left
in Slurm: every array is cancelled and the node is idle again.
"""
import json
import os
import re
import signal
import subprocess
import time

import pytest
import requests

from larchd import BUILD, Larchd

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
LONG = 20000            # steps of a child that runs until cancelled
# requeued or preempted soon after step 400, still running on a fast machine
# (about 3000 steps a second with hidden [16]); some 15 s here
INTERRUPT_STEPS = 8000
# the bad child is stopped some 1000 steps after its first evaluation past
# after_steps (once its reporter sends that point, and larchd's next pass)
EARLY_STEPS = 5000


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


def larch(server, home, *args):
    """The larch CLI against server, as its admin."""
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "LARCH_URL": server.url,
           "LARCH_TOKEN": server.admin_token, "COLUMNS": "200"}
    out = subprocess.run([str(BUILD / "service" / "larch"), *args], env=env,
                         capture_output=True, text=True, timeout=60)
    return out


def show_rows(text):
    """`larch sweep show`'s children table: {index: [cells]}."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:3] == ["#", "JOB", "SLURM"])
    return {int(line.split()[0]): line.split() for line in lines[head + 1:]
            if line.split() and line.split()[0].isdigit()}


def test_cli_submit_ls_show_cancel(tmp_path, cluster, servers):
    """larch sweep submit, ls, show (each child with its task <array>_<k>,
    in the state Slurm has it in) and cancel (the whole array)."""
    server = start(tmp_path, cluster)
    servers.append(server)
    f = tmp_path / "sweep.json"
    f.write_text(json.dumps({"name": "cli", "base": base(LONG),
                             "axes": {"optimizer.lr": [0.05, 0.1]}, "max_parallel": 1}))
    out = larch(server, tmp_path, "sweep", "submit", str(f))
    assert out.returncode == 0, out.stderr
    sid = out.stdout.strip()
    assert re.fullmatch(r"s-\d{6}", sid), out.stdout
    wait_for(lambda: children(server, sid)[0]["state"] == "RUNNING", "task 0 running", server)
    cs = wait_children(server, sid, lambda c: c["slurm_job_id"])
    array = array_of(cs[0])[0]

    out = larch(server, tmp_path, "sweep", "ls")
    assert out.returncode == 0, out.stderr
    row = next(line.split() for line in out.stdout.splitlines() if line.startswith(sid))
    assert row[1:4] == ["cli", "admin", "RUNNING"], out.stdout

    # show: each child with its task of the one array, as Slurm runs it
    out = larch(server, tmp_path, "sweep", "show", sid)
    assert out.returncode == 0, out.stderr
    assert "state:     RUNNING" in out.stdout and "1 QUEUED, 1 RUNNING" in out.stdout, out.stdout
    rows = show_rows(out.stdout)
    assert [rows[i][1:5] for i in (0, 1)] == [
        [cs[0]["id"], f"{array}_0", "optimizer.lr=0.05", "RUNNING"],
        [cs[1]["id"], f"{array}_1", "optimizer.lr=0.1", "QUEUED"]], out.stdout
    sq = cluster.run("squeue", "-h", "-j", array, "-O", "JobArrayID:|,State:|").stdout
    assert f"{array}_0|RUNNING|" in sq and f"{array}_1|PENDING|" in sq, sq

    out = larch(server, tmp_path, "sweep", "cancel", sid)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"{sid}: "), out.stdout
    done = wait_children(server, sid, lambda c: c["state"] in FINAL)
    assert [c["state"] for c in done] == ["CANCELLED"] * 2, done
    out = larch(server, tmp_path, "sweep", "show", sid)
    assert out.returncode == 0 and "state:     CANCELLED" in out.stdout, out.stdout
    assert [r[3:5] for r in show_rows(out.stdout).values()] == \
        [["optimizer.lr=0.05", "CANCELLED"], ["optimizer.lr=0.1", "CANCELLED"]], out.stdout
    show = cluster.run("scontrol", "-o", "show", "job", array).stdout
    assert set(re.findall(r"JobState=(\w+)", show)) == {"CANCELLED"}, show
    # again: nothing left to cancel
    out = larch(server, tmp_path, "sweep", "cancel", sid)
    assert out.returncode == 0 and "CANCELLED" in out.stdout, out


def test_dashboard_sweep_page_follows_the_array(tmp_path, cluster, servers):
    """The sweep page of a Slurm-backed larchd, in headless chromium: its
    children's rows, each with its task <array>_<k>, take the states Slurm
    gives their tasks, live: task 1 waits QUEUED (Slurm's reason on the
    row) behind max_parallel 1 while task 0 runs; task 0 cancelled, task 1
    runs and completes, and the sweep is COMPLETED."""
    from browser import chrome
    from test_dashboard import console_problems, css, one, open_fresh, sign_in, tid, wait
    server = start(tmp_path, cluster)
    servers.append(server)
    driver = chrome()

    def rows(d):
        return d.execute_script(
            "return [...document.querySelectorAll('[data-testid=\"child-row\"]')]"
            ".map(r => [Number(r.dataset.index), r.dataset.state, r.textContent])")

    def states(d):
        return sorted((i, st) for i, st, _ in rows(d))
    try:
        sign_in(driver, server, server.admin_token)
        body = {"name": "dash", "base": base(), "axes": {"steps": [LONG, 60]}, "max_parallel": 1}
        sid = api(server, "POST", "/v1/sweeps", body, status=201)["id"]
        open_fresh(driver, f"{server.url}/#/sweeps/{sid}")
        one(driver, tid("child-row"))
        driver.execute_script("window.__noReload = 1")
        wait(driver, 90).until(lambda d: states(d) == [(0, "RUNNING"), (1, "QUEUED")],
                               "never task 0 RUNNING and task 1 QUEUED")
        cs = children(server, sid)
        array = array_of(cs[0])[0]
        assert array_of(cs[1]) == [array, "1"], cs
        waiting = next(text for i, _, text in rows(driver) if i == 1)
        assert f"slurm job {array}_1" in waiting, waiting
        # each row says its task of the array
        cells = driver.execute_script(
            "return [...document.querySelectorAll('[data-testid=\"child-row\"]')]"
            ".map(r => [Number(r.dataset.index),"
            "           r.querySelector('[data-testid=\"child-slurm\"]').textContent])")
        assert sorted(cells) == [[0, f"{array}_0"], [1, f"{array}_1"]], cells
        sq = cluster.run("squeue", "-h", "-j", array, "-O", "JobArrayID:|,State:|").stdout
        assert f"{array}_0|RUNNING|" in sq and f"{array}_1|PENDING|" in sq, sq
        # task 0 ends (its task cancelled): Slurm starts task 1, which completes
        api(server, "POST", f"/v1/jobs/{cs[0]['id']}/cancel")
        wait(driver, 120).until(lambda d: states(d) == [(0, "CANCELLED"), (1, "COMPLETED")],
                                "never task 0 CANCELLED and task 1 COMPLETED")
        wait(driver, 30).until(lambda d: css(d, tid("sweep-state", '[data-state="COMPLETED"]')),
                               f"the page never showed {sid} COMPLETED")
        assert driver.execute_script("return window.__noReload") == 1, "the page was reloaded"
        show = cluster.run("scontrol", "-o", "show", "job", array).stdout
        tasks = dict(re.findall(r"ArrayTaskId=(\d+) .*?JobState=(\w+)", show))
        assert tasks == {"0": "CANCELLED", "1": "COMPLETED"}, show
        assert console_problems(driver) == []
    finally:
        driver.quit()


def events_of(server, jid):
    return [(e["from"], e["to"], e["reason"]) for e in
            api(server, "GET", f"/v1/jobs/{jid}/events")["events"]]


def transitions(server, jid):
    """The states the job went through, in order (notes, such as the
    trainer's result, which may come before or after Slurm's event, left out)."""
    return [to for frm, to, _ in events_of(server, jid) if frm != to]


def test_requeue_of_one_task(tmp_path, cluster, servers):
    """An admin requeues task 1 of the array with scontrol while it runs:
    larch shows that child REQUEUED, then QUEUED and RUNNING again as
    attempt 2, resumed from its checkpoint, and it completes; task 0 runs
    on untouched and completes as attempt 1."""
    server = start(tmp_path, cluster)
    servers.append(server)
    body = {"name": "rq", "base": {**base(INTERRUPT_STEPS), "checkpoint_every": 200},
            "axes": {"seed": [1, 2]}, "max_parallel": 2}
    s = api(server, "POST", "/v1/sweeps", body, status=201)
    ids = [c["job"] for c in s["children"]]
    wait_children(server, s["id"], lambda c: c["state"] == "RUNNING")
    wait_for(lambda: (api(server, "GET", f"/v1/jobs/{ids[1]}")["progress"] or {})
             .get("step", 0) >= 400, "task 1 at step 400", server)
    task = api(server, "GET", f"/v1/jobs/{ids[1]}")["slurm_job_id"]
    array = task.split("_")[0]
    cluster.run("scontrol", "requeue", task)
    wait_for(lambda: any(e[1] == "REQUEUED" for e in events_of(server, ids[1])), "REQUEUED",
             server)
    sibling = api(server, "GET", f"/v1/jobs/{ids[0]}")
    assert sibling["state"] == "RUNNING" and sibling["attempt"] == 1, sibling
    # Slurm holds a requeued job ~120 s (BeginTime): let it go now, a second
    # after its first run ended (slurmd revokes that run's credential)
    wait_for(lambda: cluster.job(task)["JobState"] == "PENDING", "task 1 PENDING again", server)
    wait_for(lambda: api(server, "GET", f"/v1/jobs/{ids[1]}")["state"] == "QUEUED",
             "child 1 QUEUED", server)
    time.sleep(1.5)
    cluster.run("scontrol", "update", f"jobid={task}", "StartTime=now")
    done = wait_children(server, s["id"], lambda c: c["state"] in FINAL, timeout=240)
    assert [c["state"] for c in done] == ["COMPLETED"] * 2, \
        [(c["state"], c["reason"]) for c in done]
    assert [c["attempt"] for c in done] == [1, 2], done
    assert [c["slurm_job_id"] for c in done] == [f"{array}_0", task], done
    # child 1: REQUEUED, then QUEUED and RUNNING again; resumed, each step once
    states = transitions(server, ids[1])
    i = states.index("REQUEUED")
    assert states[i + 1] == "QUEUED" and "RUNNING" in states[i + 1:], states
    assert (server.state_dir / "jobs" / ids[1] / "slurm-attempt").read_text().strip() == "1"
    log = (server.state_dir / "jobs" / ids[1] / "stdout.log").read_text()
    assert re.search(r"resume: from .*\(step \d+\)", log), log[-2000:]
    m = api(server, "GET", f"/v1/jobs/{ids[1]}/metrics?name=train/loss")
    seen = [p[0] for p in m["series"]["train/loss"]]
    assert seen == sorted(set(seen)) and seen[-1] == INTERRUPT_STEPS, seen[-5:]
    # child 0: never requeued
    assert "REQUEUED" not in [e[1] for e in events_of(server, ids[0])]
    show = cluster.run("scontrol", "-o", "show", "job", array).stdout
    tasks = dict(re.findall(r"ArrayTaskId=(\d+) .*?Restarts=(\d+)", show))
    assert tasks == {"0": "0", "1": "1"}, show
    sw = api(server, "GET", f"/v1/sweeps/{s['id']}")
    assert sw["state"] == "COMPLETED" and [c["attempt"] for c in sw["children"]] == [1, 2], sw


def test_early_stop_cancels_the_bad_task(tmp_path, cluster, servers):
    """The median rule on Slurm: of three children the one with a learning
    rate of 1e-6 falls below its peers' median val/accuracy at its first
    evaluation past after_steps and is stopped with scancel of its array
    task (CANCELLED, reason early-stopped); the two others (the same
    training twice, so neither is ever below the other) complete."""
    server = start(tmp_path, cluster)
    servers.append(server)
    body = {"name": "es", "base": {**base(EARLY_STEPS), "eval_every": 100},
            "axes": {"optimizer.lr": [0.1, 0.1, 1e-6]}, "max_parallel": 3,
            "target": {"metric": "val/accuracy", "value": 0.99, "mode": "max"},
            "early_stop": {"rule": "median", "after_steps": 100}}
    s = api(server, "POST", "/v1/sweeps", body, status=201)
    done = wait_children(server, s["id"], lambda c: c["state"] in FINAL, timeout=180)
    assert [c["state"] for c in done] == ["COMPLETED", "COMPLETED", "CANCELLED"], \
        [(c["state"], c["reason"]) for c in done]
    bad = done[2]
    assert bad["reason"] == "early-stopped", bad
    m = api(server, "GET", f"/v1/jobs/{bad['id']}/metrics?name=train/loss")
    assert m["series"]["train/loss"][-1][0] < EARLY_STEPS, "it ran to its end"
    sw = api(server, "GET", f"/v1/sweeps/{s['id']}")
    assert sw["early_stopped"] == 1 and sw["state"] == "COMPLETED", sw
    # Slurm ended that task as cancelled (scancel <array>_2), the others completed
    array, task = array_of(bad)
    assert task == "2"
    show = cluster.run("scontrol", "-o", "show", "job", array).stdout
    tasks = dict(re.findall(r"ArrayTaskId=(\d+) .*?JobState=(\w+)", show))
    assert tasks == {"0": "COMPLETED", "1": "COMPLETED", "2": "CANCELLED"}, show


def test_preemption_of_one_task(tmp_path, cluster, servers):
    """A job of the urgent partition takes every CPU of the node while task 0
    runs (max_parallel 1): Slurm preempts and requeues that task, larch
    shows the child PREEMPTED, then it resumes as attempt 2 and completes;
    task 1 is never preempted and completes as attempt 1."""
    server = start(tmp_path, cluster)
    servers.append(server)
    body = {"name": "pre", "base": {**base(), "checkpoint_every": 200},
            "axes": {"steps": [INTERRUPT_STEPS, 60]}, "max_parallel": 1}
    s = api(server, "POST", "/v1/sweeps", body, status=201)
    ids = [c["job"] for c in s["children"]]
    wait_for(lambda: (api(server, "GET", f"/v1/jobs/{ids[0]}")["progress"] or {})
             .get("step", 0) >= 400, "task 0 at step 400", server)
    task = api(server, "GET", f"/v1/jobs/{ids[0]}")["slurm_job_id"]
    cpus = int(cluster.run("sinfo", "-h", "-N", "-o", "%c").stdout.split()[0])
    script = tmp_path / "urgent.sh"
    script.write_text("#!/bin/sh\nsleep 2\n")
    urgent = cluster.submit(script, "-p", "urgent", "-n", "1", "-c", str(cpus), "-o", "/dev/null")
    wait_for(lambda: any(e[1] == "PREEMPTED" for e in events_of(server, ids[0])), "PREEMPTED",
             server)
    ev = [e for e in events_of(server, ids[0]) if e[1] == "PREEMPTED"]
    assert ev[0][0] == "RUNNING" and f"slurm job {task} preempted" in ev[0][2], ev
    cluster.wait_job(urgent, timeout=60)
    # Slurm holds the requeued task ~120 s (BeginTime): let it go, a second
    # after its first run ended (slurmd revokes that run's credential)
    wait_for(lambda: cluster.job(task)["JobState"] == "PENDING", "task 0 PENDING again", server)
    time.sleep(1.5)
    cluster.run("scontrol", "update", f"jobid={task}", "StartTime=now")
    done = wait_children(server, s["id"], lambda c: c["state"] in FINAL, timeout=240)
    assert [c["state"] for c in done] == ["COMPLETED"] * 2, \
        [(c["state"], c["reason"]) for c in done]
    assert [c["attempt"] for c in done] == [2, 1], done
    states = transitions(server, ids[0])
    i = states.index("PREEMPTED")
    assert states[i + 1] == "QUEUED" and "RUNNING" in states[i + 1:], states
    assert "REQUEUED" not in states, states
    log = (server.state_dir / "jobs" / ids[0] / "stdout.log").read_text()
    assert re.search(r"resume: from .*\(step \d+\)", log), log[-2000:]
    assert {"PREEMPTED", "REQUEUED"}.isdisjoint(e[1] for e in events_of(server, ids[1]))
