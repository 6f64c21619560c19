"""The multi-node dev cluster (deploy/slurm/start.sh --nodes 3; the session's
`slurm_nodes`, tests/integration/slurm.py): three idle nodes, each slurmd in a
network and UTS namespace of its own; a data-parallel job of larchd's on two
of them, its ranks on two hosts, whose checkpoints equal byte for byte those
of the same two ranks on one host (mpirun here); the batch node of a
running two-node job killed outright (every process in its namespace), which
Slurm marks DOWN, ending the job NODE_FAIL and requeueing it, and larch
resuming it from its checkpoint on the nodes left as attempt 2; an elastic
ZeRO-1 job of 3 ranks on the 3 nodes (min_ranks 2) losing one the same way,
whose next attempt Slurm starts on the 2 nodes left (--nodes=2-3) and which
resumes there from the 3 ranks' checkpoint with the global batch kept; and
stop.sh, which must leave no process, namespace, veth or bridge of the cluster
behind.
"""
import os
import re
import signal
import subprocess
import time

import pytest
import requests

from datasets import read_safetensors
from larchd import Larchd, pause_trainers
from mpi import mpi_env
from test_cli_larch import clean_env, run as larch
from test_python_client import Client
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


def start_larchd(cluster, tmp_path, args=()):
    """larchd with the Slurm executor, listening on the bridge's address:
    the jobs on the nodes report to it there."""
    return Larchd(tmp_path, args=["--executor", "slurm", "--slurm-poll-ms", "300",
                                  "--listen", f"{cluster.gateway}:0", *args],
                  env=cluster.env).start()


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


@pytest.mark.parametrize("mpi", ["auto", "none"])
def test_two_node_job_equals_the_same_ranks_on_one_host(slurm_nodes, trainer, mpirun, tmp_path,
                                                        mpi):
    """auto: srun --mpi=pmix, Open MPI between the nodes; none: the tasks
    without MPI, larch-train's TCP fallback (rank 0 publishes an address the
    other node reaches: the node names resolve to nothing here), which says
    in its header that it is one. Two ranks sum as MPI does (a + b): the
    same bytes either way."""
    s = spec(2, steps=20, micro=64, checkpoint_every=10,
             parallel={"ranks": 2, "zero_stage": 1}, resources={"nodes": 2})
    server = start_larchd(slurm_nodes, tmp_path, args=["--slurm-mpi", mpi])
    try:
        r = requests.post(server.url + "/v1/jobs", json=s, headers=server.auth(), timeout=30)
        assert r.status_code == 201, r.text
        jid = r.json()["id"]
        j = wait_job(server, jid, 180)
        # the nodes, as the CLI and the Python client show them
        shown = larch(clean_env(tmp_path, server.url, server.admin_token), "show", jid)
        got = Client(server.url, server.admin_token).get(jid)
    finally:
        server.stop()
    job = server.state_dir / "jobs" / jid
    stderr = (job / "stderr.log").read_text(errors="replace") if (job / "stderr.log").exists() else ""
    assert j["state"] == "COMPLETED", f"{j}\n{stderr[-3000:]}"
    assert j["node_list"] == "node[1-2]", j
    assert shown.returncode == 0 and re.search(r"^nodes: +node\[1-2\]$", shown.stdout, re.M), \
        shown.stdout + shown.stderr
    assert got["node_list"] == "node[1-2]", got
    hosts = dict(re.findall(r"rank (\d) of 2 on host (\S+)", stderr))
    assert hosts == {"0": "node1", "1": "node2"}, stderr[-3000:]
    stdout = (job / "stdout.log").read_text(errors="replace")
    over = {"auto": "mpi (started by srun --mpi=pmix)", "none": "tcp (started by srun)"}[mpi]
    assert f"parallel: 2 ranks over {over}" in stdout, stdout[-3000:]
    assert ("\ncomm: tcp star through rank 0" in stdout) == (mpi == "none"), stdout[-3000:]

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


KILL_STEPS = 1000


def hosts(node_list):
    """Slurm's compact NodeList ("node[1-2]", "node[1,3]", "node2") as a list."""
    m = re.fullmatch(r"(\w+?)\[([\d,-]+)\]", node_list)
    if not m:
        return node_list.split(",")
    out = []
    for part in m.group(2).split(","):
        lo, _, hi = part.partition("-")
        out += [f"{m.group(1)}{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def all_idle(cluster):
    """Whether every node of the cluster is idle (a node killed by an earlier
    test back in service)."""
    rows = cluster.run("sinfo", "-h", "-N", "-p", "debug", "-o", "%N %T").stdout.split("\n")
    return [r.split()[1] for r in rows if r.strip()] == ["idle"] * cluster.nodes


def kill_batch_node(cluster, server, jid, sid):
    """Kills the batch node of larch job jid (Slurm job sid) once it has
    reported step 200, waits for Slurm to end it NODE_FAIL and requeue it
    and for larch to say so, then releases Slurm's hold on the requeued job.
    Returns scontrol's fields of the first attempt."""
    wait_for(lambda: progress_step(server, jid) >= 200, "step 200", 120)
    # its ranks paused (on both nodes): a fast machine would end the job
    # before the node is gone; the one on the node left dies with the job
    paused = []
    wait_for(lambda: paused.extend(pause_trainers(server.state_dir / "jobs" / jid)) or paused,
             "the ranks", 30)
    first = cluster.job(sid)
    assert cluster.kill_node(first["BatchHost"])
    # SlurmdTimeout (10 s here) after its last answer, Slurm marks it DOWN,
    # the job ends NODE_FAIL and is requeued
    wait_state(server, jid, {"REQUEUED", "QUEUED"}, timeout=90)
    wait_for(lambda: cluster.job(sid)["JobState"] == "PENDING", "PENDING again", 60)
    # why, as Slurm's job history says: on the queued job
    wait_for(lambda: any("NODE_FAIL" in e[3] for e in events(server, jid)), "NODE_FAIL", 30)
    down = cluster.run("sinfo", "-h", "-N", "-n", first["BatchHost"], "-o", "%T").stdout.split()
    assert down and down[0].startswith("down"), down
    seen = requests.get(f"{server.url}/v1/jobs/{jid}/metrics?name=train/loss",
                        headers=server.auth(), timeout=30).json()["series"]["train/loss"]
    assert seen[-1][0] < KILL_STEPS, "the first attempt ended before the node was killed"
    for pid in paused:              # a rank Slurm has not ended yet: ended here
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    # Slurm holds a requeued job ~120 s (BeginTime): release it now; on the
    # nodes left
    time.sleep(1.5)
    cluster.run("scontrol", "update", f"jobid={sid}", "StartTime=now")
    return first


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
        first = kill_batch_node(slurm_nodes, server, jid, sid)
        batch_host = first["BatchHost"]
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


ELASTIC_GLOBAL, ELASTIC_MICRO = 192, 32     # 3 ranks x 2 micro-batches, or 2 x 3


def test_an_elastic_job_losing_a_node_resumes_on_the_two_left(slurm_nodes, tmp_path):
    s = spec(3, steps=KILL_STEPS, hidden=(16,), checkpoint_every=100, log_every=20,
             batch={"global": ELASTIC_GLOBAL, "micro": ELASTIC_MICRO},
             parallel={"ranks": 3, "zero_stage": 1, "elastic": {"min_ranks": 2}},
             resources={"nodes": 3})
    # the node an earlier test killed back in service: on fewer idle nodes
    # Slurm would start this job on them (--nodes=2-3)
    wait_for(lambda: all_idle(slurm_nodes), "three idle nodes", 60)
    server = start_larchd(slurm_nodes, tmp_path)
    try:
        r = requests.post(server.url + "/v1/jobs", json=s, headers=server.auth(), timeout=30)
        assert r.status_code == 201, r.text
        jid = r.json()["id"]
        j = wait_state(server, jid, "RUNNING")
        sid = j["slurm_job_id"]
        first = kill_batch_node(slurm_nodes, server, jid, sid)
        assert first["NumNodes"] == "3" and first["NodeList"] == "node[1-3]", first
        j = wait_state(server, jid, "COMPLETED", timeout=180)
        left = sorted(set(hosts(first["NodeList"])) - {first["BatchHost"]})
        assert j["attempt"] == 2 and j["slurm_job_id"] == sid, j
        assert hosts(j["node_list"]) == left, (j["node_list"], left)

        job = server.state_dir / "jobs" / jid
        out = (job / "stdout.log").read_text(errors="replace")   # both attempts (append)
        err = (job / "stderr.log").read_text(errors="replace")
        # attempt 1 on 3 ranks of 2 micro-batches, attempt 2 on the 2 nodes
        # left with 3: the same 192 examples a step
        assert "batch 192 = micro 32 x 3 ranks x 2 accum" in out, out[:3000]
        assert "batch 192 = micro 32 x 2 ranks x 3 accum" in out, out[-5000:]
        why = ("elastic: 2 of the spec's 3 ranks started (parallel.elastic.min_ranks 2): "
               "accumulation 2 -> 3, global batch 192 kept")
        assert out.count(why) == 1, out[-5000:]
        resumed = re.findall(r"resume: from \S+ \(step (\d+)\), written by 3 ranks, "
                             r"resharded over 2", out)
        assert len(resumed) == 1 and 200 <= int(resumed[0]) < KILL_STEPS, out[-5000:]
        ranks = set(re.findall(r"rank (\d) of 2 on host (\S+)", err))
        assert sorted(h for _, h in ranks) == left, err[-3000:]
        # the loader where KILL_STEPS steps of 192 examples leave it
        _, meta = read_safetensors(job / "checkpoints" / f"step-{KILL_STEPS:08d}.safetensors")
        per_epoch = int(re.search(r"(\d+) steps/epoch", out).group(1))
        assert meta["ranks"] == "2" and meta["epoch"] == str(KILL_STEPS // per_epoch), meta
        assert meta["pos"] == str(KILL_STEPS % per_epoch * ELASTIC_GLOBAL), meta

        # larch: NODE_FAIL on the queued job, then attempt 2 running, then
        # the trainer's note with the old and new rank count
        ev = events(server, jid)
        fail = next(i for i, e in enumerate(ev) if "NODE_FAIL" in e[3])
        assert ev[fail][:2] == ("QUEUED", "QUEUED") and first["NodeList"] in ev[fail][3], ev
        again = next(i for i, e in enumerate(ev) if i > fail and e[1] == "RUNNING")
        note = [i for i, e in enumerate(ev) if e[2] == "trainer" and why in e[3]]
        assert len(note) == 1 and note[0] > again, ev
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
