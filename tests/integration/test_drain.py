"""An admin drains the node under a running job (POST /v1/nodes/{name}/drain,
docs/api.md "Admin"), on the session's Slurm cluster (tests/integration/
slurm.py) with larchd's Slurm executor: the running job goes on and ends
COMPLETED while the node shows draining, then drained; a job submitted
after the drain stays QUEUED with Slurm's reason in larch's; resume
(POST .../resume) lets it run and complete. The jobs are a stand-in for
larch-train that runs until the test lets it end. The node is resumed at
the end whatever happens."""
import time

import pytest
import requests

from larchd import Larchd, stand_in_trainer

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}


def spec(name):
    return {"name": name, "model": {"type": "mlp", "hidden": [8]},
            "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
            "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 10}


class Server:
    def __init__(self, d):
        self.d = d

    def req(self, method, path, body=None):
        return requests.request(method, self.d.url + path, headers=self.d.auth(), json=body,
                                timeout=30)

    def ok(self, method, path, body=None):
        r = self.req(method, path, body)
        assert r.status_code in (200, 201), f"{method} {path}: {r.status_code} {r.text}"
        return r.json()

    def job(self, jid):
        return self.ok("GET", f"/v1/jobs/{jid}")

    def wait(self, jid, pred, what, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            j = self.job(jid)
            if pred(j):
                return j
            assert j["state"] not in FINAL, f"{jid} ended {j['state']} ({j['reason']}) " \
                                            f"waiting for {what}"
            assert time.monotonic() < deadline, \
                f"{jid} is {j['state']} ({j['reason']}) after {timeout}s, not {what}\n" \
                f"{self.d.log()[-2000:]}"
            time.sleep(0.2)

    def wait_final(self, jid, timeout=60):
        deadline = time.monotonic() + timeout
        while (j := self.job(jid))["state"] not in FINAL:
            assert time.monotonic() < deadline, f"{jid} is {j['state']} after {timeout}s"
            time.sleep(0.2)
        return j


@pytest.fixture
def server(tmp_path, slurm_cluster):
    release = tmp_path / "release"
    # stands in for larch-train: runs until the test creates `release`
    trainer = stand_in_trainer(tmp_path / "until-released",
                               f"while [ ! -e {release} ]; do sleep 0.2; done\nexit 0\n")
    d = Larchd(tmp_path, args=["--executor", "slurm", "--slurm-poll-ms", "300",
                               "--trainer-path", str(trainer)],
               env=dict(slurm_cluster.env)).start()
    s = Server(d)
    s.release = release
    yield s
    if d.running():
        for j in s.ok("GET", "/v1/jobs?limit=500")["jobs"]:
            if j["state"] not in FINAL:
                s.req("POST", f"/v1/jobs/{j['id']}/cancel")
        d.stop()


def node_state(cluster, node):
    return cluster.run("sinfo", "-h", "-N", "-n", node, "-o", "%t").stdout.split()[0]


def test_drain_lets_the_running_job_finish_and_holds_new_ones(server, slurm_cluster):
    node = slurm_cluster.run("sinfo", "-h", "-N", "-o", "%N").stdout.split()[0]
    try:
        running = server.ok("POST", "/v1/jobs", spec("before-drain"))["id"]
        server.wait(running, lambda j: j["state"] == "RUNNING", "RUNNING")

        v = server.ok("POST", f"/v1/nodes/{node}/drain", {"reason": "fan swap"})
        assert v["nodes"][0]["state"] == "draining", v
        assert node_state(slurm_cluster, node) == "drng"
        assert server.job(running)["state"] == "RUNNING"     # the drain does not touch it

        # nothing new starts on a drained node: Slurm keeps the job pending
        # and says why, and larch shows that reason
        later = server.ok("POST", "/v1/jobs", spec("after-drain"))["id"]
        j = server.wait(later, lambda j: j["state"] == "QUEUED" and j["reason"] and
                        "slurm job" in j["reason"], "QUEUED with Slurm's reason")
        sid = j["slurm_job_id"]
        sj = slurm_cluster.job(sid)
        assert sj["JobState"] == "PENDING", sj
        # Slurm says "Nodes_required_for_job_are_DOWN,_DRAINED..." first, then
        # "ReqNodeNotAvail, UnavailableNodes:<node>"
        j = server.wait(later, lambda j: "DRAINED" in j["reason"] or node in j["reason"],
                        "the drain in larch's reason")
        assert f"slurm job {sid} pending" in j["reason"], j

        # the running job ends as it would have: COMPLETED; the node is
        # drained then, and the later job still waits
        server.release.touch()
        done = server.wait_final(running)
        assert done["state"] == "COMPLETED", done
        deadline = time.monotonic() + 30
        while node_state(slurm_cluster, node) != "drain":
            assert time.monotonic() < deadline, node_state(slurm_cluster, node)
            time.sleep(0.2)
        assert slurm_cluster.job(sid)["JobState"] == "PENDING"
        assert server.job(later)["state"] == "QUEUED"

        v = server.ok("POST", f"/v1/nodes/{node}/resume")
        assert v["nodes"][0]["state"] in ("idle", "mixed", "alloc"), v
        done = server.wait_final(later)
        assert done["state"] == "COMPLETED", done
        events = server.ok("GET", f"/v1/jobs/{later}/events")["events"]
        moves = [e["to"] for e in events if e["to"] != e["from"]]
        assert moves[-2:] == ["RUNNING", "COMPLETED"] and "QUEUED" in moves, events
    finally:
        slurm_cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
