"""The multi-node dev cluster (deploy/slurm/start.sh --nodes 3; the session's
`slurm_nodes`, tests/integration/slurm.py): three idle nodes, each slurmd in a
network and UTS namespace of its own; a data-parallel job of larchd's on two
of them, its ranks on two hosts, whose checkpoints equal byte for byte those
of the same two ranks on one host (mpirun here); the batch node of a
running two-node job killed outright (every process in its namespace), which
Slurm marks DOWN, ending the job NODE_FAIL and requeueing it, and larch
resuming it from its checkpoint on the nodes left as attempt 2; and stop.sh,
which must leave no process, namespace, veth or bridge of the cluster behind.
"""
import re
import subprocess
import time

import requests

from larchd import Larchd
from mpi import mpi_env
from test_data_parallel import spec
from test_slurm_executor import assert_resumed_once, events, progress_step, wait_for, wait_state

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}


def test_three_idle_nodes_each_its_own_host(slurm_nodes):
    rows = slurm_nodes.run("sinfo", "-h", "-N", "-p", "debug", "-o", "%N %T %c").stdout.split("\n")
    nodes = {r.split()[0]: r.split()[1:] for r in rows if r.strip()}
    assert sorted(nodes) == ["node1", "node2", "node3"], rows
    assert all(state == "idle" and int(cpus) >= 1 for state, cpus in nodes.values()), nodes
    # one task on each: its hostname and its address are the node's own
    out = slurm_nodes.run("srun", "-N3", "-n3", "-l", "sh", "-c", "echo $(hostname) $(hostname -I)",
                          timeout=60).stdout
    hosts = {}
    for line in out.splitlines():
        task, host, addr = line.replace(":", " ", 1).split()[:3]
        hosts[host] = addr
    assert sorted(hosts) == ["node1", "node2", "node3"], out
    assert len(set(hosts.values())) == 3 and all(a.startswith("10.") for a in hosts.values()), out


def start_larchd(cluster, tmp_path):
    """larchd with the Slurm executor, listening on the bridge's address:
    the jobs on the nodes report to it there."""
    return Larchd(tmp_path, args=["--executor", "slurm", "--slurm-poll-ms", "300",
                                  "--listen", f"{cluster.gateway}:0"], env=cluster.env).start()


def wait_job(server, jid, timeout):
    deadline = time.monotonic() + timeout
    while True:
        r = requests.get(f"{server.url}/v1/jobs/{jid}", headers=server.auth(), timeout=30)
        assert r.status_code == 200, r.text
        j = r.json()
        if j["state"] in FINAL:
            return j
        assert time.monotonic() < deadline, f"{jid} is {j['state']} after {timeout}s\n{server.log()[-3000:]}"
        time.sleep(0.2)


def test_two_node_job_equals_the_same_ranks_on_one_host(slurm_nodes, trainer, mpirun, tmp_path):
    s = spec(2, steps=20, micro=64, checkpoint_every=10,
             parallel={"ranks": 2, "zero_stage": 1}, resources={"nodes": 2})
    server = start_larchd(slurm_nodes, tmp_path)
    try:
        r = requests.post(server.url + "/v1/jobs", json=s, headers=server.auth(), timeout=30)
        assert r.status_code == 201, r.text
        jid = r.json()["id"]
        j = wait_job(server, jid, 180)
    finally:
        server.stop()
    job = server.state_dir / "jobs" / jid
    stderr = (job / "stderr.log").read_text(errors="replace") if (job / "stderr.log").exists() else ""
    assert j["state"] == "COMPLETED", f"{j}\n{stderr[-3000:]}"
    assert j["node_list"] == "node[1-2]", j
    hosts = dict(re.findall(r"rank (\d) of 2 on host (\S+)", stderr))
    assert hosts == {"0": "node1", "1": "node2"}, stderr[-3000:]
    stdout = (job / "stdout.log").read_text(errors="replace")
    assert "parallel: 2 ranks over mpi" in stdout, stdout[-3000:]

    # the same spec, the same two ranks, on this host
    one = tmp_path / "one-host"
    path = trainer.write_spec(s, name="one-host.json")
    out = subprocess.run([mpirun, "-n", "2", str(trainer.exe), "--spec", str(path), "--job-dir",
                          str(one), "--threads", "1"], capture_output=True, text=True,
                         timeout=300, env=mpi_env())
    assert out.returncode == 0, out.stderr[-3000:]
    for step in (10, 20):
        name = f"checkpoints/step-{step:08d}.safetensors"
        assert (job / name).read_bytes() == (one / name).read_bytes(), f"{name} differs"


KILL_STEPS = 600


def test_a_node_killed_under_a_job_requeues_it_and_it_resumes(slurm_nodes, tmp_path):
    s = spec(2, steps=KILL_STEPS, hidden=(16,), checkpoint_every=100, log_every=20,
             parallel={"ranks": 2}, resources={"nodes": 2})
    server = start_larchd(slurm_nodes, tmp_path)
    try:
        r = requests.post(server.url + "/v1/jobs", json=s, headers=server.auth(), timeout=30)
        assert r.status_code == 201, r.text
        jid = r.json()["id"]
        j = wait_state(server, jid, "RUNNING")
        sid = j["slurm_job_id"]
        wait_for(lambda: progress_step(server, jid) >= 200, "step 200", 120)
        first = slurm_nodes.job(sid)
        batch_host = first["BatchHost"]
        assert slurm_nodes.kill_node(batch_host)
        # SlurmdTimeout (10 s here) after its last answer, Slurm marks it DOWN,
        # the job ends NODE_FAIL and is requeued
        j = wait_state(server, jid, {"REQUEUED", "QUEUED"}, timeout=90)
        wait_for(lambda: slurm_nodes.job(sid)["JobState"] == "PENDING", "PENDING again", 60)
        # why, as Slurm's job history says: on the queued job
        wait_for(lambda: any("NODE_FAIL" in e[3] for e in events(server, jid)), "NODE_FAIL", 30)
        down = slurm_nodes.run("sinfo", "-h", "-N", "-n", batch_host, "-o", "%T").stdout.split()
        assert down and down[0].startswith("down"), down
        seen = requests.get(f"{server.url}/v1/jobs/{jid}/metrics?name=train/loss",
                            headers=server.auth(), timeout=30).json()["series"]["train/loss"]
        assert seen[-1][0] < KILL_STEPS, "the first attempt ended before the node was killed"
        # Slurm holds a requeued job ~120 s (BeginTime): release it now; on the
        # two nodes left
        time.sleep(1.5)
        slurm_nodes.run("scontrol", "update", f"jobid={sid}", "StartTime=now")
        j = wait_state(server, jid, "COMPLETED", timeout=180)
        assert j["attempt"] == 2 and j["slurm_job_id"] == sid, j
        assert batch_host not in j["node_list"] and j["node_list"] != first["NodeList"], j
        states = [e[1] for e in events(server, jid)]
        assert "REQUEUED" in states and states.count("RUNNING") >= 2, events(server, jid)
        note = [e for e in events(server, jid) if "NODE_FAIL" in e[3]]
        assert note[0][:2] == ("QUEUED", "QUEUED") and first["NodeList"] in note[0][3], note
        assert_resumed_once(server, slurm_nodes, jid, sid, KILL_STEPS)
    finally:
        server.stop()
        slurm_nodes.start()         # the killed node's slurmd again


def test_stop_leaves_nothing_and_start_brings_the_nodes_back(slurm_nodes):
    made = slurm_nodes.leftovers()
    assert any(m.startswith("namespace ") for m in made) and \
        any(m.startswith("link lbr") for m in made), made
    r = slurm_nodes.stop()
    assert "removed" in r.stdout, r.stdout
    left = slurm_nodes.leftovers()
    assert not left, f"left after stop.sh: {left}\n{r.stdout}{r.stderr}"
    slurm_nodes.start()
    assert slurm_nodes.running()
    states = slurm_nodes.run("sinfo", "-h", "-N", "-p", "debug", "-o", "%N %T").stdout.split()
    assert states[0::2] == ["node1", "node2", "node3"], states
