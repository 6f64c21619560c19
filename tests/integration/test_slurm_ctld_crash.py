"""slurmctld losing its state under larchd: killed with -9 during a burst of
submissions, it comes back on the state it saved before the burst (made
certain here: its StateSaveLocation as it was before the burst is put back,
as a crash between two of its saves leaves it), knowing nothing of the jobs
larchd had handed it. deploy/slurm/start.sh restarts it with job ids above
every id handed out before, so no id comes back for another job and no node
is drained for running a job of an id slurmctld gives again; larchd hands
every forgotten job over again: one that never started goes back to PENDING,
one that was running (slurmctld kills what it does not know) is requeued as
a new attempt from its checkpoint once slurmctld has killed the attempt it
no longer knows. Every accepted job completes exactly once: once in larch's
events, once in Slurm's job completion log (none there for an attempt that
ran to its end as an orphan: larch takes that end from its result.json),
and in Slurm's accounting at most once (slurmctld's queue of records for
slurmdbd dies with it), once for each job handed over again.

Runs on the session's cluster (tests/integration/slurm.py), which it leaves
healthy: slurmctld up again through the cluster's own start.sh, the node
idle, the runaway jobs the crash left in slurmdbd closed.
"""
import os
import re
import shutil
import signal
import time

import pytest
import requests

from larchd import Larchd, pause_trainers

BURST = 20
# a byte-level GPT small enough to start at once: the others end in a
# fraction of a second; the first is stopped (SIGSTOP) once it has a
# checkpoint, so that it is still running when slurmctld is back however
# fast the machine is, and its remaining steps take a few seconds then
LONG_STEPS, STEPS = 3000, 20


def spec(i, steps, corpus):
    return {"name": f"crash{i}", "model": {"type": "gpt", "layers": 1, "heads": 1, "dim": 16,
                                           "seq": 16},
            "data": {"format": "text", "path": str(corpus)}, "batch": {"global": 32},
            "optimizer": {"type": "sgd", "lr": 0.1}, "steps": steps, "log_every": 10,
            "checkpoint_every": 100}


def submit(server, body):
    r = requests.post(server.url + "/v1/jobs", json=body, headers=server.auth(), timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def get(server, path):
    r = requests.get(server.url + path, headers=server.auth(), timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def wait_for(pred, what, timeout):
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.1)
    return value


def copy_state(src, dst):
    """StateSaveLocation as slurmctld last wrote it (it replaces its files
    by rename: a copy may meet one between two names, then it is redone)."""
    for _ in range(20):
        shutil.rmtree(dst, ignore_errors=True)
        try:
            shutil.copytree(src, dst, symlinks=True)
            return
        except (shutil.Error, FileNotFoundError):
            time.sleep(0.05)
    shutil.copytree(src, dst, symlinks=True)


def jobcomp_completed(cluster, names):
    """{job name: COMPLETED records} in Slurm's job completion log (sacct -c)."""
    out = cluster.run("sacct", "-c", "-n", "-P", "-o", "JobID,JobName,State").stdout
    count = dict.fromkeys(names, 0)
    for line in out.splitlines():
        f = line.split("|")
        if len(f) >= 3 and f[1] in count and f[2] == "COMPLETED":
            count[f[1]] += 1
    return count


def accounting_completed(cluster, names):
    """{job name: COMPLETED jobs} in Slurm's accounting (slurmdbd)."""
    out = cluster.run("sacct", "-a", "-X", "-n", "-P", "-S", "now-1hour", "-E", "now",
                      "-o", "JobID,JobName,State").stdout
    count = dict.fromkeys(names, 0)
    for line in out.splitlines():
        f = line.split("|")
        if len(f) >= 3 and f[1] in count and f[2] == "COMPLETED":
            count[f[1]] += 1
    return count


def node_states(cluster):
    return cluster.run("sinfo", "-h", "-N", "-o", "%N %T %E").stdout.strip()


@pytest.fixture
def healthy_after(slurm_cluster):
    """Whatever the test did: slurmctld up again (the cluster's start.sh),
    the node idle, the crash's runaway jobs closed in slurmdbd."""
    yield slurm_cluster
    if not slurm_cluster.running():
        slurm_cluster.start()
    ids = slurm_cluster.run("squeue", "-h", "-o", "%i").stdout.split()
    if ids:
        slurm_cluster.run("scancel", *ids, check=False)
    slurm_cluster.run("sacctmgr", "-i", "list", "runawayjobs", check=False)
    wait_for(lambda: "idle" in node_states(slurm_cluster).split(), "the node idle", 60)


def test_kill9_slurmctld_during_a_burst_every_job_completes_once(tmp_path, slurm_cluster,
                                                                 healthy_after):
    cluster = slurm_cluster
    server = Larchd(tmp_path, args=["--executor", "slurm", "--slurm-poll-ms", "300",
                                    "--slurm-timeout", "5"], env=dict(cluster.env)).start()
    try:
        corpus = tmp_path / "corpus.txt"
        corpus.write_text(" ".join(["larch", "slurm", "crash", "burst"][i % 4 * i % 7 % 4]
                                   for i in range(20000)))
        state = cluster.dir / "state"
        if not (state / "node_state").exists():
            # a cluster just started has saved nothing yet: a job makes it
            # save its node and job state, as a cluster in use has
            script = tmp_path / "true.sh"
            script.write_text("#!/bin/sh\ntrue\n")
            script.chmod(0o755)
            cluster.wait_job(cluster.submit(script, "--output=/dev/null", "--chdir=/tmp"))
            wait_for(lambda: (state / "node_state").exists() and (state / "job_state").exists(),
                     "slurmctld to save its state", 30)
        before = tmp_path / "state-before-burst"
        copy_state(state, before)
        # a job that runs when slurmctld dies, then the rest of the burst
        ids = [submit(server, spec(0, LONG_STEPS, corpus))]
        wait_for(lambda: get(server, f"/v1/jobs/{ids[0]}")["state"] == "RUNNING",
                 "the first job to run", 60)
        # paused with a checkpoint written: it runs through the crash
        first_dir = server.state_dir / "jobs" / ids[0]
        wait_for(lambda: list((first_dir / "checkpoints").glob("step-*")),
                 "the first job's first checkpoint", 60)
        stopped = wait_for(lambda: pause_trainers(first_dir), "the first job's trainer", 30)
        assert get(server, f"/v1/jobs/{ids[0]}")["state"] == "RUNNING"
        ids += [submit(server, spec(i, STEPS, corpus)) for i in range(1, BURST)]
        # Slurm took every job (larch recorded its id)
        jobs = wait_for(lambda: (js := {j: get(server, f"/v1/jobs/{j}") for j in ids}) and
                        all(x["slurm_job_id"] for x in js.values()) and js,
                        "Slurm to take the burst", 60)
        old_sids = {int(x["slurm_job_id"]) for x in jobs.values()}
        running = {j for j, x in jobs.items() if x["state"] == "RUNNING"}

        os.kill(cluster.pid("slurmctld"), signal.SIGKILL)
        wait_for(lambda: not cluster.running(), "slurmctld to die", 30)
        # it had saved none of them: its state from before the burst
        copy_state(before, state)
        r = cluster.script("start")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "FirstJobId" in r.stdout, r.stdout

        t0 = time.monotonic()
        final = {}
        for jid in ids:
            final[jid] = wait_for(lambda: (x := get(server, f"/v1/jobs/{jid}"))["state"] in
                                  {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"} and x,
                                  f"{jid} to end", 180)
        print(f"the burst ended {time.monotonic() - t0:.1f}s after slurmctld was back")
        bad = {j: (x["state"], x["reason"]) for j, x in final.items() if x["state"] != "COMPLETED"}
        assert not bad, f"{bad}\n{server.log()[-4000:]}"

        # exactly once in larch's events
        events = {j: get(server, f"/v1/jobs/{j}/events")["events"] for j in ids}
        for jid, evs in events.items():
            done = [e for e in evs if e["to"] == "COMPLETED"]
            assert len(done) == 1, (jid, evs)
        for jid, evs in events.items():
            print(jid, " ".join(e["to"] for e in evs))
        forgot = {j for j, evs in events.items()
                  if any("Slurm forgot" in (e["reason"] or "") for e in evs)}
        assert forgot, "the crash made Slurm forget no job: the test proves nothing"
        # the jobs still waiting went back to PENDING and were handed over
        # again; those that ran were requeued as a new attempt, or, finished
        # meanwhile, ended as their result says
        never = {j for j, evs in events.items()
                 if any(e["from"] == "QUEUED" and e["to"] == "PENDING" for e in evs)}
        assert never, {j: [(e["from"], e["to"], e["reason"]) for e in evs]
                       for j, evs in events.items()}
        for jid in never:
            assert final[jid]["attempt"] == 1, final[jid]
        for jid in running & forgot:
            requeued = any(e["to"] == "REQUEUED" for e in events[jid])
            by_result = any("result.json says completed" in (e["reason"] or "")
                            for e in events[jid])
            assert requeued or by_result, events[jid]
            if requeued:
                assert final[jid]["attempt"] == 2, final[jid]
        # the first job ran through the crash: its attempt was stopped (by
        # slurmctld, back, which kills what it does not know) and the next
        # one resumed from its newest checkpoint, every step reported once
        first = ids[0]
        assert any(e["to"] == "REQUEUED" for e in events[first]), \
            f"{first} was not requeued (it ended before slurmctld was back: make LONG_STEPS " \
            f"larger): {[(e['to'], e['reason']) for e in events[first]]}"
        out = (server.state_dir / "jobs" / first / "stdout.log").read_text()
        assert re.search(r"resume: from .*\(step [1-9]\d*\)", out), out[-2000:]
        r = requests.get(f"{server.url}/v1/jobs/{first}/metrics?name=train/loss",
                         headers=server.auth(), timeout=30)
        seen = [p[0] for p in r.json()["series"]["train/loss"]]
        assert seen == sorted(set(seen)) and seen[-1] == LONG_STEPS, seen[-5:]
        # no id of before the crash was handed out again
        again = {j for j, evs in events.items() if [e for e in evs if e["to"] == "PENDING"][1:]}
        new_sids = {int(x["slurm_job_id"]) for j, x in final.items() if j in again}
        assert new_sids and min(new_sids) > max(old_sids), (old_sids, new_sids)

        # exactly once in Slurm's records, but for a forgotten attempt that
        # ran to its end meanwhile: Slurm never learnt of that end, larch
        # took it from the job's result
        inst = (server.state_dir / "instance-id").read_text().strip()
        name = {f"larch-{inst}-{jid}": jid for jid in ids}
        by_result = {j for j, evs in events.items()
                     if any("result.json says completed" in (e["reason"] or "") for e in evs)}
        want = {n: 0 if jid in by_result else 1 for n, jid in name.items()}
        assert jobcomp_completed(cluster, name) == want, (jobcomp_completed(cluster, name), want)
        # slurmdbd hears of a job from slurmctld's agent, whose queue died with
        # it: a job that ended before the crash may be missing there, but
        # every job handed over again is there once, and none twice
        want_dbd = {n: want[n] for n, jid in name.items() if jid in again}

        def dbd_ok():
            have = accounting_completed(cluster, name)
            return all(v <= 1 for v in have.values()) and \
                all(have[n] == v for n, v in want_dbd.items())
        wait_for(dbd_ok, f"Slurm's accounting to have each job at most once and {want_dbd} "
                 f"(it has {accounting_completed(cluster, name)})", 30)
        # no node drained
        states = node_states(cluster)
        assert "drain" not in states and "down" not in states, states
    finally:
        for pid in locals().get("stopped", []):
            try:                          # slurmctld, back, kills it; if not, we do
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        server.stop()
