"""The dev Slurm cluster of deploy/slurm: start.sh is idempotent, both
partitions show the node idle, a batch job in each partition runs to
COMPLETED with its output where it was asked and a jobcomp record, and
stop.sh leaves nothing of the cluster running, a second stop being a no-op.
Every wait polls with a generous deadline."""
import socket
import time
import uuid

import pytest

from slurm import DAEMONS, fresh_cluster, require_slurm

SCRIPT = '#!/bin/sh\necho "larch-test job=$SLURM_JOB_ID partition=$SLURM_JOB_PARTITION"\n'


def test_start_again_changes_nothing(slurm_cluster):
    pids = {d: slurm_cluster.pid(d) for d in DAEMONS}
    conf = slurm_cluster.conf.read_text()
    mtime = slurm_cluster.conf.stat().st_mtime_ns
    r = slurm_cluster.script("start")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "already running" in r.stdout
    assert f"export SLURM_CONF={slurm_cluster.conf}" in r.stdout
    assert {d: slurm_cluster.pid(d) for d in DAEMONS} == pids
    assert set(pids.values()) <= set(slurm_cluster.processes())
    assert slurm_cluster.conf.read_text() == conf
    assert slurm_cluster.conf.stat().st_mtime_ns == mtime


def test_sinfo_shows_three_partitions_with_the_node_idle(slurm_cluster):
    r = slurm_cluster.run("sinfo", "-h", "-o", "%P|%a|%l|%T|%N")
    rows = {line.split("|")[0]: line.split("|")[1:] for line in r.stdout.splitlines()}
    node = socket.gethostname().split(".")[0]
    assert rows == {"debug*": ["up", "30:00", "idle", node],
                    "batch": ["up", "infinite", "idle", node],
                    "urgent": ["up", "30:00", "idle", node]}, r.stdout


@pytest.mark.parametrize("partition", ["debug", "batch", "urgent"])
def test_batch_job_completes(slurm_cluster, tmp_path, partition):
    out_dir = tmp_path / "out"
    out_dir.mkdir()      # a missing --output directory fails the launch
    script = tmp_path / "job.sh"
    script.write_text(SCRIPT)
    name = f"larch-test-{uuid.uuid4().hex[:12]}"
    job_id = slurm_cluster.submit(script, "--partition", partition, "--job-name", name,
                                  "--time", "1", "--chdir", str(tmp_path),
                                  "--output", str(out_dir / "%j.out"))

    job = slurm_cluster.wait_job(job_id, timeout=60)
    assert (job["JobState"], job["ExitCode"], job["Partition"], job["JobName"]) == \
        ("COMPLETED", "0:0", partition, name), job
    out = out_dir / f"{job_id}.out"
    assert out.read_text() == f"larch-test job={job_id} partition={partition}\n"

    # the jobcomp file keeps the record (ids restart on a fresh cluster: match the name too)
    jobcomp = slurm_cluster.dir / "jobcomp.txt"
    deadline = time.monotonic() + 30
    while True:
        records = [line for line in (jobcomp.read_text() if jobcomp.exists() else "").splitlines()
                   if f"JobId={job_id} " in line and f" Name={name} " in line]
        if records or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(records) == 1, f"no single record of job {job_id} ({name}) in {jobcomp}"
    assert " JobState=COMPLETED " in records[0] and f" Partition={partition} " in records[0], records[0]
    assert " ExitCode=0:0" in records[0], records[0]


def test_stop_leaves_nothing_running_and_stopping_again_is_a_noop(tmp_path):
    require_slurm()
    cluster = fresh_cluster(tmp_path / "slurm")
    try:
        pids = {d: cluster.pid(d) for d in DAEMONS}
        assert set(pids.values()) <= set(cluster.processes()), (pids, cluster.processes())
        assert cluster.run("sinfo", "-h", "-o", "%P %T").stdout.split() == ["debug*", "idle", "batch", "idle",
                                                                   "urgent", "idle"]
        # a job still running when the cluster stops is cancelled, its processes gone
        script = tmp_path / "long.sh"
        script.write_text("#!/bin/sh\nsleep 300\n")
        job_id = cluster.submit(script, "--output", str(tmp_path / "%j.out"), "--chdir", str(tmp_path))
        deadline = time.monotonic() + 30
        while not any(c.startswith("sleep 300") for c in cluster.processes().values()):
            assert time.monotonic() < deadline, f"job {job_id} not running: {cluster.job(job_id)}"
            time.sleep(0.1)
    finally:
        r = cluster.stop()
    assert f"cancelling jobs {job_id}" in r.stdout, r.stdout
    assert "stopped slurmd slurmctld slurmdbd mariadbd munged" in r.stdout, r.stdout
    assert cluster.processes() == {}
    assert all(cluster.pid(d) is None for d in DAEMONS)

    again = cluster.stop()
    assert "not running" in again.stdout, again.stdout
    assert cluster.processes() == {}
    # the state stays for the next start: logs, config, jobcomp location
    assert cluster.conf.exists() and (cluster.dir / "log" / "slurmctld.log").exists()
