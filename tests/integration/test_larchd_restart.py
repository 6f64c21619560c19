"""larchd killed with SIGKILL and started again on the same state dir: a
running job is found again and ends recorded with all of its metrics, an
acknowledged submit is never lost, a queued job runs after the restart, and
no job is started twice. Every wait polls with a generous deadline."""
import concurrent.futures
import json
import os
import signal
import time

import pytest
import requests

from larchd import Larchd

SPEC = {"name": "restart", "model": {"type": "mlp", "hidden": [16]},
        "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
        "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 30, "log_every": 5}
LONG = 1500          # steps: a few seconds of training
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}


def spec(steps, name="restart"):
    return dict(SPEC, steps=steps, name=name)


def submit(server, steps, name="restart"):
    r = requests.post(server.url + "/v1/jobs", json=spec(steps, name), headers=server.auth(),
                      timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def get_job(server, job_id):
    r = requests.get(f"{server.url}/v1/jobs/{job_id}", headers=server.auth(), timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def wait_job(server, job_id, states, timeout=60):
    """Polls the job until its state is one of states; returns the job."""
    deadline = time.monotonic() + timeout
    while True:
        job = get_job(server, job_id)
        if job["state"] in states:
            return job
        assert time.monotonic() < deadline, \
            f"{job_id} is {job['state']} after {timeout}s, not {states}: {server.log()[-3000:]}"
        time.sleep(0.05)


def events(server, job_id):
    r = requests.get(f"{server.url}/v1/jobs/{job_id}/events", headers=server.auth(), timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["events"]


def entered(server, job_id, state):
    """How many events moved the job into state."""
    return sum(1 for e in events(server, job_id) if e["to"] == state and e["from"] != state)


def job_dir(server, job_id):
    return server.state_dir / "jobs" / job_id


def wait_for(pred, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"no {what} after {timeout}s"
        time.sleep(0.02)


def launch_pid(server, job_id):
    path = job_dir(server, job_id) / "launch"
    return int(path.read_text()) if path.exists() else None


def jsonl_count(server, job_id, name="train/loss"):
    path = job_dir(server, job_id) / "metrics.jsonl"
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines()
               if line.endswith("}") and json.loads(line).get("name") == name)


def trainer_starts(server, job_id):
    """How often a trainer started in this job dir (its first line, per process)."""
    path = job_dir(server, job_id) / "stdout.log"
    return sum(1 for line in path.read_text().splitlines() if line.startswith("larch-train: "))


def kill9(server):
    server.signal(signal.SIGKILL)
    assert server.wait() == -signal.SIGKILL


def restart(tmp_path, old, args=()):
    return Larchd(tmp_path, args=args, state_dir=old.state_dir).start()


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def servers(tmp_path):
    """The larchd processes a test starts; the last one is stopped with SIGTERM
    (exit 0), and trainers a killed larchd left are stopped."""
    started = []
    yield started
    for server in started[:-1]:
        if server.running():
            server.proc.kill()
            server.wait()
    if started and started[-1].running():
        started[-1].stop()
    if started:
        for launch in (started[0].state_dir / "jobs").glob("*/launch"):
            try:
                os.killpg(int(launch.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


def test_kill9_mid_job(tmp_path, servers):
    first = Larchd(tmp_path).start()
    servers.append(first)
    job_id = submit(first, LONG)
    wait_job(first, job_id, {"RUNNING"})
    # past start-up, and reporting: some points reached the database already
    wait_for(lambda: jsonl_count(first, job_id) >= 50, "metrics")
    pid = launch_pid(first, job_id)
    assert pid
    kill9(first)
    assert alive(pid)            # the job outlives larchd

    second = restart(tmp_path, first)
    servers.append(second)
    assert get_job(second, job_id)["state"] in {"RUNNING", "COMPLETED"}
    job = wait_job(second, job_id, FINAL)
    assert job["state"] == "COMPLETED", job
    assert job["exit_code"] == 0
    assert job["progress"]["step"] == LONG
    # every point of metrics.jsonl is in the database
    r = requests.get(f"{second.url}/v1/jobs/{job_id}/metrics", params={"name": "train/loss"},
                     headers=second.auth(), timeout=30)
    assert r.status_code == 200, r.text
    losses = r.json()["series"]["train/loss"]
    assert len(losses) == jsonl_count(second, job_id) == LONG
    assert [step for step, _ in losses] == list(range(1, LONG + 1))
    # started once: one RUNNING event, one launch, one trainer start
    assert entered(second, job_id, "RUNNING") == 1
    assert entered(second, job_id, "COMPLETED") == 1
    assert launch_pid(second, job_id) == pid
    assert trainer_starts(second, job_id) == 1
    second.wait_log(rf"reconcile: 1 queued or running jobs handed back")


def test_acknowledged_submits_survive_kill9(tmp_path, servers):
    first = Larchd(tmp_path, args=["--max-local-jobs", "2"]).start()
    servers.append(first)
    n = 6
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        ids = list(pool.map(lambda i: submit(first, 30, f"burst-{i}"), range(n)))
    kill9(first)                 # right after the last 201
    assert len(set(ids)) == n

    second = restart(tmp_path, first, args=["--max-local-jobs", "2"])
    servers.append(second)
    for job_id in ids:
        job = wait_job(second, job_id, FINAL)
        assert job["state"] == "COMPLETED", job
        assert entered(second, job_id, "RUNNING") == 1, events(second, job_id)
        assert trainer_starts(second, job_id) == 1
        assert len([e for e in events(second, job_id) if e["from"] is None]) == 1
    r = requests.get(second.url + "/v1/jobs", params={"limit": 500}, headers=second.auth(),
                     timeout=30)
    assert sorted(j["id"] for j in r.json()["jobs"]) == sorted(ids)


def test_queued_job_runs_once_after_restart_and_cancel_works(tmp_path, servers):
    args = ["--max-local-jobs", "1"]
    first = Larchd(tmp_path, args=args).start()
    servers.append(first)
    running = submit(first, 1000000, "long")
    queued = submit(first, 30, "queued")
    wait_job(first, running, {"RUNNING"})
    wait_job(first, queued, {"QUEUED"})
    wait_for(lambda: trainer_starts(first, running) == 1, "trainer start")
    pid = launch_pid(first, running)
    kill9(first)
    assert launch_pid(first, queued) is None       # never started

    second = restart(tmp_path, first, args=args)
    servers.append(second)
    assert get_job(second, running)["state"] == "RUNNING"
    assert get_job(second, queued)["state"] == "QUEUED"     # the slot is taken
    # a cancel after the restart reaches the adopted process
    wait_for(lambda: "\nstep " in (job_dir(second, running) / "stdout.log").read_text(),
             "a progress line")
    r = requests.post(f"{second.url}/v1/jobs/{running}/cancel", headers=second.auth(),
                      timeout=30)
    assert r.status_code == 200, r.text
    job = wait_job(second, running, FINAL)
    assert job["state"] == "CANCELLED", job
    assert job["reason"] == "cancelled by admin"
    wait_for(lambda: not alive(pid), "the cancelled trainer's end", timeout=30)
    # then the queued job gets the slot, and runs once
    job = wait_job(second, queued, FINAL)
    assert job["state"] == "COMPLETED", job
    for job_id in (running, queued):
        assert entered(second, job_id, "RUNNING") == 1
        assert trainer_starts(second, job_id) == 1
    assert launch_pid(second, running) == pid


def test_cancel_then_kill9_ends_cancelled(tmp_path, servers):
    first = Larchd(tmp_path).start()
    servers.append(first)
    job_id = submit(first, 1000000)
    wait_job(first, job_id, {"RUNNING"})
    wait_for(lambda: "\nstep " in (job_dir(first, job_id) / "stdout.log").read_text(),
             "a progress line")
    r = requests.post(f"{first.url}/v1/jobs/{job_id}/cancel", headers=first.auth(), timeout=30)
    assert r.status_code == 200, r.text
    kill9(first)                 # before the trainer's end was recorded

    second = restart(tmp_path, first)
    servers.append(second)
    job = wait_job(second, job_id, FINAL)
    assert job["state"] == "CANCELLED", job
    assert job["reason"] == "cancelled by admin"
    assert entered(second, job_id, "CANCELLED") == 1
    assert trainer_starts(second, job_id) == 1
