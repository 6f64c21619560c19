"""larchd with `--executor slurm` against the real single-node dev cluster
(tests/integration/slurm.py): submit -> COMPLETED with metrics, a failure at
run time, cancels while Slurm holds the job pending and while it runs, the
time limit, scontrol requeue and preemption by the urgent partition with
resume from the checkpoint, slurmctld down
while jobs are submitted, larchd killed with -9 (also in the window between
sbatch and the database), hostile names and paths, partitions checked at
submit, the Slurm calls counted in /metrics, and a job held while it is
being handed over (sbatch slowed by a wrapper in PATH that sleeps, then runs
the real sbatch; and slurmctld down) staying held in Slurm too. Submission
goes through libslurm unless a test asks for sbatch; the ones that matter
for both run both ways.

Each test runs its own larchd (own state dir, so its own instance id in the
Slurm job names); the cluster is the session's.
"""
import os
import re
import signal
import sqlite3
import subprocess
import time

import pytest
import requests

from larchd import Larchd

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}


def spec(steps=30, name="sl", **extra):
    s = {"name": name, "model": {"type": "mlp", "hidden": [16]},
         "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
         "optimizer": {"type": "sgd", "lr": 0.1}, "steps": steps, "log_every": 5}
    s.update(extra)
    return s


SUBMIT_WAYS = ["libslurm", "sbatch"]


def start(tmp_path, cluster, args=(), state_dir=None, via="libslurm", env=None):
    env = dict(cluster.env, **(env or {}))
    return Larchd(tmp_path, args=["--executor", "slurm", "--slurm-poll-ms", "300",
                                  "--cancel-grace", "10", "--slurm-submit", via, *args],
                  env=env, state_dir=state_dir).start()


@pytest.fixture
def servers(slurm_cluster):
    """The test's larchds: killed at its end, and their Slurm jobs that are
    still there cancelled (a failed test's job would keep the module's next
    tests waiting on Resources)."""
    started = []
    yield started
    for s in started:
        if s.running():
            s.proc.kill()
            s.wait()
    for s in started:
        inst = s.state_dir / "instance-id"
        if inst.exists():
            slurm_cluster.cancel_named(f"larch-{inst.read_text().strip()}-")


def submit(server, body, status=201):
    r = requests.post(server.url + "/v1/jobs", json=body, headers=server.auth(), timeout=30)
    assert r.status_code == status, r.text
    return r.json()


def job(server, jid):
    r = requests.get(f"{server.url}/v1/jobs/{jid}", headers=server.auth(), timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def wait_state(server, jid, states, timeout=60):
    states = {states} if isinstance(states, str) else set(states)
    deadline = time.monotonic() + timeout
    while True:
        j = job(server, jid)
        if j["state"] in states:
            return j
        assert j["state"] not in FINAL - states, f"{jid} ended {j['state']}: {j['reason']}\n" \
            f"{server.log()[-3000:]}"
        assert time.monotonic() < deadline, \
            f"{jid} is {j['state']} ({j['reason']}) after {timeout}s, not {states}\n" \
            f"{server.log()[-3000:]}"
        time.sleep(0.2)


def wait_for(pred, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def events(server, jid):
    r = requests.get(f"{server.url}/v1/jobs/{jid}/events", headers=server.auth(), timeout=30)
    return [(e["from"], e["to"], e["by"], e["reason"]) for e in r.json()["events"]]


def slurm_jobs_named(cluster, server, jid):
    """Slurm job ids whose name is this larchd's name for jid (squeue and jobcomp)."""
    inst = (server.state_dir / "instance-id").read_text().strip()
    name = f"larch-{inst}-{jid}"
    ids = set()
    out = cluster.run("squeue", "-h", "-t", "all", "-O", "JobID:|,Name:|").stdout
    for line in out.splitlines():
        sid, n = line.split("|")[:2]
        if n == name:
            ids.add(sid)
    out = cluster.run("sacct", "-c", "-n", "-P", "-o", "JobID,JobName", check=False).stdout
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) >= 2 and parts[1] == name:
            ids.add(parts[0])
    return ids


def default_partition(cluster):
    """The cluster's default partition (sinfo marks it with *)."""
    parts = cluster.run("sinfo", "-h", "-o", "%P").stdout.split()
    return next(p.rstrip("*") for p in parts if p.endswith("*"))


def node_cpus(cluster):
    return int(cluster.run("sinfo", "-h", "-N", "-o", "%c").stdout.split()[0])


def progress_step(server, jid):
    p = job(server, jid).get("progress") or {}
    return p.get("step", 0)


# Long enough that a requeue or preemption a second after step 400 finds the
# first attempt still running on a fast machine (hidden [16] and 3000 steps
# took 0.45 s on one), short enough to finish in well under a minute here.
LONG_STEPS = 20000


def long_spec(name, **extra):
    return spec(LONG_STEPS, name=name, model={"type": "mlp", "hidden": [64]},
                checkpoint_every=200, **extra)


def assert_interrupted_midway(server, jid):
    """The first attempt was stopped before its last step: had it finished
    first, the test would prove nothing about resuming."""
    r = requests.get(f"{server.url}/v1/jobs/{jid}/metrics?name=train/loss",
                     headers=server.auth(), timeout=30)
    seen = [p[0] for p in r.json()["series"].get("train/loss", [])]
    assert seen and seen[-1] < LONG_STEPS, \
        f"the first attempt reached step {seen[-1] if seen else 0} of {LONG_STEPS} " \
        "before it was interrupted: make LONG_STEPS larger"


def assert_resumed_once(server, cluster, jid, sid, steps):
    """The job's second attempt resumed from a checkpoint, its loss series has
    every step once up to the last, and Slurm knows one job by its name."""
    out = (server.state_dir / "jobs" / jid / "stdout.log").read_text()
    assert re.search(r"resume: from .*\(step \d+\)", out), out[-2000:]
    r = requests.get(f"{server.url}/v1/jobs/{jid}/metrics?name=train/loss",
                     headers=server.auth(), timeout=30)
    seen = [p[0] for p in r.json()["series"]["train/loss"]]
    assert seen == sorted(set(seen)) and seen[-1] == steps, seen[-5:]
    assert slurm_jobs_named(cluster, server, jid) == {sid}


@pytest.mark.parametrize("via", SUBMIT_WAYS)
def test_submit_completes_with_metrics(tmp_path, slurm_cluster, servers, via):
    server = start(tmp_path, slurm_cluster, via=via)
    servers.append(server)
    jid = submit(server, spec(30, resources={"cpus_per_task": 2}))["id"]
    j = wait_state(server, jid, "COMPLETED")
    assert j["executor"] == "slurm" and j["exit_code"] == 0
    assert j["slurm_job_id"] and j["slurm_job_id"].isdigit()
    assert slurm_jobs_named(slurm_cluster, server, jid) == {j["slurm_job_id"]}
    # no partition named: the one Slurm put it in, its default
    assert j["partition"] == default_partition(slurm_cluster), j
    r = requests.get(f"{server.url}/v1/jobs/{jid}/metrics?name=train/loss",
                     headers=server.auth(), timeout=30)
    points = r.json()["series"]["train/loss"]
    assert [p[0] for p in points][-1] == 30 and len(points) >= 6, points
    # Notes keep the state (why Slurm kept it waiting; the trainer's result,
    # which may come before larchd's poll has seen the job run): the moves
    # are these, and the trainer's note is there whatever the state was.
    evs = events(server, jid)
    states = [e[1] for e in evs if e[0] != e[1]]
    assert states == ["PENDING", "QUEUED", "RUNNING", "COMPLETED"], evs
    assert [e for e in evs if e[2] == "trainer" and e[0] == e[1]], evs
    d = server.state_dir / "jobs" / jid
    assert (d / "slurm-job-id").read_text().strip() == j["slurm_job_id"]
    assert oct((d / "job-token").stat().st_mode & 0o777) == "0o600"
    # the token is in no command line or script
    assert "lt_" not in (d / "slurm.sh").read_text()
    health = requests.get(server.url + "/healthz", timeout=10).json()
    assert health["status"] == "ok" and health["executor"]["name"] == "slurm"
    metrics = requests.get(server.url + "/metrics", headers=server.auth(), timeout=10).text
    counted = {m[0]: int(m[1]) for m in
               re.findall(r'^larch_slurm_calls_total\{command="([a-z_]+)"\} (\d+)', metrics, re.M)}
    used = "sbatch" if via == "sbatch" else "slurm_submit_batch_job"
    other = "slurm_submit_batch_job" if via == "sbatch" else "sbatch"
    assert counted[used] >= 1 and counted[other] == 0, counted
    # each poll cycle timed: a Prometheus histogram (cumulative buckets, the
    # +Inf one the count) and the polling thread's CPU
    polls = int(re.search(r"^larch_slurm_poll_seconds_count (\d+)$", metrics, re.M).group(1))
    assert 1 <= polls <= counted["squeue"], (polls, counted)
    buckets = [(le, int(n)) for le, n in
               re.findall(r'^larch_slurm_poll_seconds_bucket\{le="([^"]+)"\} (\d+)$', metrics,
                          re.M)]
    assert buckets[-1] == ("+Inf", polls), buckets
    assert [n for _, n in buckets] == sorted(n for _, n in buckets), buckets
    assert float(re.search(r"^larch_slurm_poll_seconds_sum (\S+)$", metrics, re.M).group(1)) > 0
    assert re.search(r"^larch_slurm_poll_cpu_seconds_total \d+\.\d+$", metrics, re.M), metrics
    assert f"submits with {via}" in server.log()
    # what Slurm recorded for it, whichever way it was submitted
    show = slurm_cluster.run("scontrol", "-o", "show", "job", j["slurm_job_id"],
                             check=False).stdout
    if show:
        assert f"Comment=larch {jid}" in show and "Requeue=1" in show, show
        assert f"StdOut={d}/stdout.log" in show and f"WorkDir={d}" in show, show
        assert "NumCPUs=2" in show and "CPUs/Task=2" in show, show


def user_auth(server, user):
    out = subprocess.run([str(server.exe), "token", "create", "--user", user, "--role", "user",
                          "--state-dir", str(server.state_dir)], capture_output=True, text=True,
                         timeout=10)
    assert out.returncode == 0, out.stderr
    return {"Authorization": f"Bearer {out.stdout.strip()}"}


@pytest.mark.parametrize("via", SUBMIT_WAYS)
def test_jobs_run_as_their_owner_in_slurm(tmp_path, slurm_cluster, servers, via):
    """larchd as root submits each job on its owner's behalf: Slurm's job is
    the owner's (squeue, scontrol, the job's files), so Slurm's limits,
    fair share and accounting apply to that user."""
    if os.geteuid() != 0:
        pytest.skip("jobs run as their owners only where larchd is root")
    server = start(tmp_path, slurm_cluster, via=via)
    servers.append(server)
    alice = user_auth(server, "alice")
    r = requests.post(server.url + "/v1/jobs", json=spec(100000, name="own"), headers=alice,
                      timeout=30)
    assert r.status_code == 201, r.text
    jid = r.json()["id"]
    j = wait_state(server, jid, "RUNNING")
    assert j["run_as"] == "alice"
    sid = j["slurm_job_id"]
    assert slurm_cluster.run("squeue", "-h", "-j", sid, "-o", "%u").stdout.strip() == "alice"
    import pwd
    uid = pwd.getpwnam("alice").pw_uid
    show = slurm_cluster.run("scontrol", "-o", "show", "job", sid).stdout
    assert re.search(rf"\bUserId=alice\({uid}\)", show), show
    d = server.state_dir / "jobs" / jid
    wait_for(lambda: (d / "slurm-attempt").exists(), "the batch script to start")
    for name in ("slurm-attempt", "job-token", "spec.json"):
        assert (d / name).stat().st_uid == uid, name
    requests.post(f"{server.url}/v1/jobs/{jid}/cancel", headers=alice, timeout=30)
    wait_state(server, jid, "CANCELLED")
    # an admin's job is larchd's own user's
    jid = submit(server, spec(5, name="adm"))["id"]
    j = wait_state(server, jid, "COMPLETED")
    assert j["run_as"] == "root"


def test_runtime_failure_is_failed_with_exit_code(tmp_path, slurm_cluster, servers):
    server = start(tmp_path, slurm_cluster)
    servers.append(server)
    bad = spec(10, data={"format": "text", "path": str(tmp_path / "missing.txt")},
               model={"type": "gpt", "layers": 1, "heads": 1, "dim": 8, "seq": 8})
    jid = submit(server, bad)["id"]
    j = wait_state(server, jid, "FAILED")
    assert j["exit_code"] == 1, j
    assert "FAILED" in j["reason"] and "exit 1" in j["reason"], j["reason"]
    log = (server.state_dir / "jobs" / jid / "stderr.log").read_text()
    assert "missing.txt" in log


def test_cancel_while_pending_in_slurm_and_while_running(tmp_path, slurm_cluster, servers):
    server = start(tmp_path, slurm_cluster)
    servers.append(server)
    cpus = node_cpus(slurm_cluster)
    big = {"cpus_per_task": cpus}
    first = submit(server, spec(10**6, name="hog", resources=big, checkpoint_every=50))["id"]
    wait_state(server, first, "RUNNING")
    second = submit(server, spec(30, name="waits", resources=big))["id"]
    j = wait_state(server, second, "QUEUED")
    sid = j["slurm_job_id"]
    assert slurm_cluster.job(sid)["JobState"] == "PENDING"

    r = requests.post(f"{server.url}/v1/jobs/{second}/cancel", headers=server.auth(), timeout=30)
    assert r.status_code in (200, 202), r.text
    j = wait_state(server, second, "CANCELLED", timeout=30)
    assert j["reason"] == "cancelled by admin" and j["started_at"] is None, j
    assert slurm_cluster.wait_job(sid)["JobState"] == "CANCELLED"

    wait_for(lambda: progress_step(server, first) >= 50, "the first checkpoint", 60)
    r = requests.post(f"{server.url}/v1/jobs/{first}/cancel", headers=server.auth(), timeout=30)
    assert r.status_code in (200, 202), r.text
    j = wait_state(server, first, "CANCELLED", timeout=60)
    assert j["reason"] == "cancelled by admin", j
    assert ("RUNNING", "CANCELLED", "admin", "cancelled by admin") in events(server, first)


def test_time_limit_ends_timeout(tmp_path, slurm_cluster, servers):
    server = start(tmp_path, slurm_cluster)
    servers.append(server)
    jid = submit(server, spec(10**6, name="late", resources={"time_limit": "00:05"}))["id"]
    j = wait_state(server, jid, "TIMEOUT", timeout=150)
    assert "TIMEOUT" in j["reason"], j


def test_requeue_resumes_from_checkpoint(tmp_path, slurm_cluster, servers):
    server = start(tmp_path, slurm_cluster)
    servers.append(server)
    steps = LONG_STEPS
    jid = submit(server, long_spec("requeue"))["id"]
    j = wait_state(server, jid, "RUNNING")
    sid = j["slurm_job_id"]
    wait_for(lambda: progress_step(server, jid) >= 400, "step 400", 120)
    slurm_cluster.run("scontrol", "requeue", sid)
    j = wait_state(server, jid, {"REQUEUED", "QUEUED"}, timeout=60)
    # Slurm holds a requeued job ~120 s (BeginTime); release it now
    wait_for(lambda: slurm_cluster.job(sid)["JobState"] == "PENDING", "PENDING again", 60)
    assert_interrupted_midway(server, jid)
    # slurmd revokes the job's credential when its first run ends, at a
    # second's resolution: a launch within that second is refused ("Job
    # credential revoked") and Slurm ends the job FAILED, exit 1
    time.sleep(1.5)
    slurm_cluster.run("scontrol", "update", f"jobid={sid}", "StartTime=now")
    j = wait_state(server, jid, "COMPLETED", timeout=240)
    assert j["attempt"] == 2 and j["slurm_job_id"] == sid, j
    states = [e[1] for e in events(server, jid)]
    assert "REQUEUED" in states and states.count("RUNNING") >= 2, states
    assert (server.state_dir / "jobs" / jid / "slurm-attempt").read_text().strip() == "1"
    assert_resumed_once(server, slurm_cluster, jid, sid, steps)


def test_preemption_shows_preempted_and_resumes(tmp_path, slurm_cluster, servers):
    """A job of the urgent partition (a higher PriorityTier, PreemptMode=REQUEUE)
    preempts a running larch job: larch shows PREEMPTED, Slurm requeues it,
    and it resumes from its checkpoint as attempt 2 with its metrics history
    continued without duplicates."""
    server = start(tmp_path, slurm_cluster)
    servers.append(server)
    cpus = node_cpus(slurm_cluster)
    steps = LONG_STEPS
    jid = submit(server, long_spec("preempted", resources={"partition": "debug",
                                                           "cpus_per_task": cpus}))["id"]
    sid = wait_state(server, jid, "RUNNING")["slurm_job_id"]
    wait_for(lambda: progress_step(server, jid) >= 400, "step 400", 120)
    script = tmp_path / "urgent.sh"
    script.write_text("#!/bin/sh\nsleep 2\n")
    urgent = slurm_cluster.submit(script, "-p", "urgent", "-n", "1", "-c", str(cpus),
                                  "-o", "/dev/null")
    wait_for(lambda: any(e[1] == "PREEMPTED" for e in events(server, jid)), "PREEMPTED", 60)
    ev = [e for e in events(server, jid) if e[1] == "PREEMPTED"]
    assert ev[0][0] == "RUNNING" and "preempted" in ev[0][3], ev
    assert not any(e[1] == "REQUEUED" for e in events(server, jid)), events(server, jid)
    wait_for(lambda: slurm_cluster.job(urgent)["JobState"] in ("RUNNING", "COMPLETED"),
             "the urgent job to run", 60)
    # Slurm holds a requeued job ~120 s (BeginTime); release it now
    wait_for(lambda: slurm_cluster.job(sid)["JobState"] == "PENDING", "PENDING again", 60)
    assert_interrupted_midway(server, jid)
    # slurmd revokes the job's credential when its first run ends, at a
    # second's resolution: a launch within that second is refused ("Job
    # credential revoked") and Slurm ends the job FAILED, exit 1
    time.sleep(1.5)
    slurm_cluster.run("scontrol", "update", f"jobid={sid}", "StartTime=now")
    j = wait_state(server, jid, "COMPLETED", timeout=240)
    assert j["attempt"] == 2 and j["slurm_job_id"] == sid, j
    states = [e[1] for e in events(server, jid)]
    i = states.index("PREEMPTED")
    assert states[i + 1] == "QUEUED" and "RUNNING" in states[i + 1:], states
    d = server.state_dir / "jobs" / jid
    assert "DUE TO PREEMPTION" in (d / "stderr.log").read_text()
    assert_resumed_once(server, slurm_cluster, jid, sid, steps)


@pytest.mark.parametrize("how", ["auto", "mpirun", "none"])
def test_two_ranks_run_as_one_slurm_job(tmp_path, slurm_cluster, servers, how):
    """parallel.ranks 2: sbatch --ntasks=2, and the batch script starts the
    ranks as a job step of 2 tasks with srun --mpi=pmix (auto: the dev
    cluster's srun has Slurm's PMIx plugin), or with Open MPI's mpirun
    inside the allocation, or as a step of 2 tasks without MPI that meet
    through the job dir (none: larch-train's TCP communicator)."""
    env = {"OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
    server = start(tmp_path, slurm_cluster, args=["--slurm-mpi", how], env=env)
    servers.append(server)
    jid = submit(server, spec(40, name="ranks2", parallel={"ranks": 2}))["id"]
    j = wait_state(server, jid, "COMPLETED", timeout=120)
    d = server.state_dir / "jobs" / jid
    script = (d / "slurm.sh").read_text()
    assert ("mpirun -n 2" in script) == (how != "none"), script
    assert ("srun --mpi=pmix --ntasks=2" in script) == (how == "auto"), script
    assert ("srun --mpi=none --ntasks=2" in script) == (how in ("auto", "none")), script
    show = slurm_cluster.job(j["slurm_job_id"]) if slurm_cluster.run(
        "scontrol", "-o", "show", "job", j["slurm_job_id"], check=False).returncode == 0 else {}
    if show:
        assert show["NumTasks"] == "2" and show["NumCPUs"] == "2", show
    out = (d / "stdout.log").read_text()
    want = {"auto": "over mpi (started by srun --mpi=pmix)", "mpirun": "over mpi (started by mpirun)",
            "none": "over tcp (started by srun)"}[how]
    assert f"parallel: 2 ranks {want}" in out, out[-2000:]
    assert out.count("step 40/40") == 1, out[-2000:]


def test_a_rank_killed_under_srun_fails_the_job_without_a_hang(tmp_path, slurm_cluster,
                                                               servers):
    """srun --mpi=pmix --kill-on-bad-exit: kill -9 of one rank ends the step,
    the other rank with it, and the job is FAILED, not left waiting in an
    allreduce."""
    env = {"OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
    server = start(tmp_path, slurm_cluster, env=env)
    servers.append(server)
    jid = submit(server, spec(10**6, name="ranks2-kill", parallel={"ranks": 2}))["id"]
    wait_state(server, jid, "RUNNING", timeout=60)
    wait_for(lambda: progress_step(server, jid) >= 20, "step 20", 120)
    d = str(server.state_dir / "jobs" / jid)
    ranks = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            cwd = os.readlink(f"/proc/{p}/cwd")
        except OSError:
            continue
        if argv and argv[0].endswith(b"larch-train") and cwd == d:
            ranks.append(int(p))
    assert len(ranks) == 2, ranks
    t0 = time.monotonic()
    os.kill(ranks[1], signal.SIGKILL)
    j = wait_state(server, jid, {"FAILED"}, timeout=90)
    assert time.monotonic() - t0 < 60, "the other rank must not wait forever"
    assert "FAILED" in j["reason"], j


def test_slurmctld_down_submits_wait_pending_then_run_once(tmp_path, slurm_cluster, servers):
    server = start(tmp_path, slurm_cluster, args=["--slurm-timeout", "5"])
    servers.append(server)
    pid = slurm_cluster.pid("slurmctld")
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not slurm_cluster.running(), "slurmctld to stop", 30)
    try:
        ids = [submit(server, spec(20, name=f"outage{i}"))["id"] for i in range(3)]
        t0 = time.monotonic()
        for jid in ids:
            assert job(server, jid)["state"] == "PENDING"
        assert time.monotonic() - t0 < 2, "reads must not wait for Slurm"
        wait_for(lambda: requests.get(server.url + "/healthz", timeout=10).json()["status"]
                 == "degraded", "/healthz degraded", 40)
        h = requests.get(server.url + "/healthz", timeout=10).json()
        assert "unreachable" in h["executor"]["detail"], h
        time.sleep(2)
        assert all(job(server, jid)["state"] == "PENDING" for jid in ids)
    finally:
        slurm_cluster.start()
    for jid in ids:
        wait_state(server, jid, "COMPLETED", timeout=120)
        assert len(slurm_jobs_named(slurm_cluster, server, jid)) == 1
    wait_for(lambda: requests.get(server.url + "/healthz", timeout=10).json()["status"] == "ok",
             "/healthz ok again", 30)


def test_kill9_and_restart_adopts_without_duplicates(tmp_path, slurm_cluster, servers):
    server = start(tmp_path, slurm_cluster)
    servers.append(server)
    ids = [submit(server, spec(40, name=f"k{i}"))["id"] for i in range(6)]
    server.signal(signal.SIGKILL)
    server.wait()
    again = start(tmp_path, slurm_cluster, state_dir=server.state_dir)
    servers.append(again)
    part = default_partition(slurm_cluster)
    for jid in ids:
        j = wait_state(again, jid, "COMPLETED", timeout=120)
        assert slurm_jobs_named(slurm_cluster, again, jid) == {j["slurm_job_id"]}, jid
        assert j["partition"] == part, j      # however larchd learnt how the job ended


def test_owners_cannot_point_larchd_at_anothers_slurm_job(tmp_path, slurm_cluster, servers):
    """bob's job directory is bob's: he rewrites its slurm-job-id to name
    alice's Slurm job, and alice (or he) names a Slurm job of hers after
    his larch job. After a restart larchd, root, still follows bob's own
    job, and bob's cancel stops his job, never alice's."""
    if os.geteuid() != 0:
        pytest.skip("jobs run as their owners only where larchd is root")
    server = start(tmp_path, slurm_cluster)
    servers.append(server)
    bob = user_auth(server, "bob")
    r = requests.post(server.url + "/v1/jobs", json=spec(100000, name="bobs"), headers=bob,
                      timeout=30)
    assert r.status_code == 201, r.text
    jid = r.json()["id"]
    sid = wait_state(server, jid, "RUNNING")["slurm_job_id"]
    # alice's own job, held, named as larchd names bob's
    inst = (server.state_dir / "instance-id").read_text().strip()
    script = tmp_path / "alice.sh"
    script.write_text("#!/bin/sh\nsleep 300\n")
    script.chmod(0o755)
    alices = slurm_cluster.submit(script, "--uid=alice", "--gid=alice", "--hold",
                                  f"--job-name=larch-{inst}-{jid}", "--output=/dev/null",
                                  "--chdir=/tmp")
    try:
        d = server.state_dir / "jobs" / jid
        (d / "slurm-job-id").write_text(f"{alices}\n")   # as bob could
        server.signal(signal.SIGKILL)
        server.wait()
        again = start(tmp_path, slurm_cluster, state_dir=server.state_dir)
        servers.append(again)
        time.sleep(2)                       # a few squeues
        assert job(again, jid)["state"] == "RUNNING"
        r = requests.post(f"{again.url}/v1/jobs/{jid}/cancel", headers=bob, timeout=30)
        assert r.status_code == 200, r.text
        j = wait_state(again, jid, "CANCELLED")
        assert j["slurm_job_id"] == sid
        assert slurm_cluster.job(alices)["JobState"] == "PENDING"   # untouched
    finally:
        slurm_cluster.run("scancel", str(alices), check=False)


def test_killed_between_sbatch_and_commit_is_found_by_name(tmp_path, slurm_cluster, servers):
    """The window between sbatch answering and the database: made by hand
    after a kill -9 (the job back to PENDING without its Slurm id, the id
    file gone); the restarted larchd finds the Slurm job by its name."""
    server = start(tmp_path, slurm_cluster)
    servers.append(server)
    jid = submit(server, spec(400, name="window", checkpoint_every=100))["id"]
    sid = wait_state(server, jid, {"QUEUED", "RUNNING"})["slurm_job_id"]
    server.signal(signal.SIGKILL)
    server.wait()
    db = sqlite3.connect(server.state_dir / "larch.db")
    with db:
        db.execute("UPDATE jobs SET state = 'PENDING', slurm_job_id = NULL WHERE id = ?",
                   (int(jid[2:]),))
    db.close()
    (server.state_dir / "jobs" / jid / "slurm-job-id").unlink()
    again = start(tmp_path, slurm_cluster, state_dir=server.state_dir)
    servers.append(again)
    j = wait_state(again, jid, "COMPLETED", timeout=120)
    assert j["slurm_job_id"] == sid
    assert slurm_jobs_named(slurm_cluster, again, jid) == {sid}


@pytest.mark.parametrize("via", SUBMIT_WAYS)
def test_hostile_names_and_paths_stay_inert(tmp_path, slurm_cluster, servers, via):
    pwned = tmp_path / "pwned"
    server = start(tmp_path, slurm_cluster, via=via,
                   state_dir=tmp_path / f"st $(touch {pwned}1) ;`touch {pwned}2`; 'q' \"dq\" 50%j")
    servers.append(server)
    for name in (f"$(touch {pwned}3)", f"`touch {pwned}4`", "a;b", "a\nb", "q'uote", 'd"q'):
        r = requests.post(server.url + "/v1/jobs", json=spec(5, name=name),
                          headers=server.auth(), timeout=30)
        assert r.status_code == 400 and "name" in r.text, r.text
    jid = submit(server, spec(10, name="inert"))["id"]
    wait_state(server, jid, "COMPLETED")
    assert (server.state_dir / "jobs" / jid / "stdout.log").exists()
    assert not list(tmp_path.glob("pwned*")) and not os.path.exists("/tmp/pwned")


def test_partition_checked_at_submit(tmp_path, slurm_cluster, servers):
    server = start(tmp_path, slurm_cluster)
    servers.append(server)
    # the executor learns the partitions on its first pass
    wait_for(lambda: requests.post(server.url + "/v1/jobs", json=spec(5, resources={
        "partition": "nope"}), headers=server.auth(), timeout=30).status_code == 400,
        "partition check", 15)
    r = requests.post(server.url + "/v1/jobs", json=spec(5, resources={"partition": "nope"}),
                      headers=server.auth(), timeout=30)
    assert r.status_code == 400 and "nope" in r.json()["error"]["message"], r.text
    jid = submit(server, spec(10, resources={"partition": "batch"}))["id"]
    j = wait_state(server, jid, "COMPLETED")
    assert slurm_cluster.job(j["slurm_job_id"])["Partition"] == "batch"
    assert j["spec"]["resources"]["partition"] == "batch" and j["partition"] == "batch"


def test_polling_reads_cause_no_slurm_calls(tmp_path, slurm_cluster, servers):
    server = start(tmp_path, slurm_cluster, args=["--slurm-poll-ms", "1000"])
    servers.append(server)
    jid = submit(server, spec(10**6, name="followed"))["id"]
    wait_state(server, jid, "RUNNING")

    def squeues():
        text = requests.get(server.url + "/metrics", headers=server.auth(), timeout=10).text
        return int(re.search(r'larch_slurm_calls_total\{command="squeue"\} (\d+)', text).group(1))

    before, t0 = squeues(), time.monotonic()
    session = requests.Session()
    n = 0
    while time.monotonic() - t0 < 3:
        assert session.get(server.url + "/v1/jobs", headers=server.auth(), timeout=10).ok
        n += 1
    calls = squeues() - before
    window = time.monotonic() - t0
    assert n >= 30            # many reads in the window (not a speed check)
    assert calls <= window / 1.0 + 2, (calls, window)
    requests.post(f"{server.url}/v1/jobs/{jid}/cancel", headers=server.auth(), timeout=30)
    wait_state(server, jid, "CANCELLED", timeout=60)


def admin(server, method, path, **kw):
    r = requests.request(method, server.url + path, headers=server.auth(), timeout=60, **kw)
    return r


def slurm_reason(cluster, sid):
    out = cluster.run("squeue", "-h", "-j", sid, "-O", "State:|,Reason:|", check=False).stdout
    return out.strip()


def test_hold_while_sbatch_runs_keeps_it_held_in_slurm(tmp_path, slurm_cluster, servers):
    """Held while its sbatch is under way (slowed by a wrapper that sleeps
    and then runs the real sbatch): the job stays HELD when Slurm answers,
    with its Slurm id recorded and the hold sent to Slurm; released, it runs."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    real = subprocess.run(["sh", "-c", "command -v sbatch"], capture_output=True,
                          text=True, check=True).stdout.strip()
    wrapper = bindir / "sbatch"
    wrapper.write_text(f"#!/bin/sh\nsleep 3\nexec {real} \"$@\"\n")
    wrapper.chmod(0o755)
    server = start(tmp_path, slurm_cluster, via="sbatch",
                   env={"PATH": f"{bindir}:{os.environ['PATH']}"})
    servers.append(server)
    jid = submit(server, spec(20, name="held-in-flight"))["id"]
    time.sleep(1)                       # its sbatch sleeps now
    assert job(server, jid)["state"] == "PENDING"
    r = admin(server, "POST", f"/v1/jobs/{jid}/hold")
    assert r.status_code == 200 and r.json()["state"] == "HELD", r.text
    wait_for(lambda: job(server, jid).get("slurm_job_id"), "the Slurm id recorded", 30)
    j = job(server, jid)
    assert j["state"] == "HELD", j
    sid = j["slurm_job_id"]
    wait_for(lambda: "JobHeld" in slurm_reason(slurm_cluster, sid), "the hold in Slurm", 30)
    time.sleep(1.5)                     # several polls: still held on both sides
    assert job(server, jid)["state"] == "HELD"
    assert "PENDING|JobHeld" in slurm_reason(slurm_cluster, sid)
    assert any("held there too" in e[3] for e in events(server, jid)), events(server, jid)
    r = admin(server, "POST", f"/v1/jobs/{jid}/release")
    assert r.status_code == 200, r.text
    j = wait_state(server, jid, "COMPLETED", timeout=120)
    assert j["slurm_job_id"] == sid
    assert slurm_jobs_named(slurm_cluster, server, jid) == {sid}


@pytest.mark.parametrize("via", SUBMIT_WAYS)
def test_hold_during_outage_is_submitted_held(tmp_path, slurm_cluster, servers, via):
    """slurmctld down: the job waits PENDING with the executor; held then, it
    is handed over held when Slurm is back (never runs), then released."""
    server = start(tmp_path, slurm_cluster, args=["--slurm-timeout", "5"], via=via)
    servers.append(server)
    wait_for(lambda: requests.get(server.url + "/healthz", timeout=10).json()["status"] == "ok",
             "larchd up", 30)
    os.kill(slurm_cluster.pid("slurmctld"), signal.SIGTERM)
    wait_for(lambda: not slurm_cluster.running(), "slurmctld to stop", 30)
    try:
        jid = submit(server, spec(20, name="held-outage"))["id"]
        wait_for(lambda: requests.get(server.url + "/healthz", timeout=10).json()["status"]
                 == "degraded", "/healthz degraded", 40)
        r = admin(server, "POST", f"/v1/jobs/{jid}/hold")
        assert r.status_code == 200 and r.json()["state"] == "HELD", r.text
    finally:
        slurm_cluster.start()
    wait_for(lambda: job(server, jid).get("slurm_job_id"), "the Slurm id recorded", 60)
    sid = job(server, jid)["slurm_job_id"]
    wait_for(lambda: "JobHeld" in slurm_reason(slurm_cluster, sid), "the hold in Slurm", 30)
    time.sleep(1.5)
    j = job(server, jid)
    assert j["state"] == "HELD" and j["started_at"] is None, j
    r = admin(server, "POST", f"/v1/jobs/{jid}/release")
    assert r.status_code == 200, r.text
    wait_state(server, jid, "COMPLETED", timeout=120)
    assert slurm_jobs_named(slurm_cluster, server, jid) == {sid}
