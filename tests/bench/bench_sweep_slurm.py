#!/usr/bin/env python3
"""A large sweep handed to Slurm: one job array against one sbatch per job.

    LARCH_BUILD_DIR=build [LARCH_SLURM_DIR=dir] python3 tests/bench/bench_sweep_slurm.py \
        [--children 1000] [--baseline 50] [--via sbatch|libslurm]

Runs a larchd with the Slurm executor on the dev cluster (the one up in
$LARCH_SLURM_DIR, else a fresh one, stopped at the end) and, side by side
on that larchd:
  sweep:    POST /v1/sweeps of --children children (max_parallel 2): the
            time the POST takes, the time until every child is QUEUED (Slurm
            took it), the Slurm submissions counted in /metrics
            (larch_slurm_calls_total), the array ids the children got; then
            the sweep's cancel and the time until every child is CANCELLED,
            with the scancel calls it took;
  baseline: --baseline ordinary jobs POSTed one by one (4 clients), the
            time until all are QUEUED and their submissions, then cancelled.
Prints "key value" lines and the per-child ratio of the two hand-overs.
Nothing runs long: the sweep is cancelled as soon as it is handed over.
"""
import argparse
import os
import pathlib
import re
import sys
import tempfile
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))

import requests  # noqa: E402

import slurm  # noqa: E402
import unix_users  # noqa: E402
from larchd import Larchd  # noqa: E402

BASE = {"name": "bench", "model": {"type": "mlp", "hidden": [16]},
        "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
        "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 5}


def calls(server):
    text = requests.get(server.url + "/metrics", headers=server.auth(), timeout=30).text
    return {m[0]: int(m[1]) for m in
            re.findall(r'^larch_slurm_calls_total\{command="([a-z_]+)"\} (\d+)', text, re.M)}


def states(server, ids):
    out = {}
    cursor = None
    while True:
        q = "?limit=500" + (f"&cursor={cursor}" if cursor else "")
        r = requests.get(server.url + "/v1/jobs" + q, headers=server.auth(), timeout=60).json()
        for j in r["jobs"]:
            if j["id"] in ids:
                out[j["id"]] = j
        cursor = r.get("next_cursor")
        if not cursor:
            return out


def wait_all(server, ids, ok, timeout=600):
    t0 = time.monotonic()
    while True:
        js = states(server, ids)
        if len(js) == len(ids) and all(ok(j) for j in js.values()):
            return time.monotonic() - t0, js
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"timed out: {sum(ok(j) for j in js.values())}/{len(ids)}")
        time.sleep(0.2)


def submits(c):
    return c.get("sbatch", 0) + c.get("slurm_submit_batch_job", 0)


def handed(j):
    return j["state"] not in ("PENDING",)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--children", type=int, default=1000)
    ap.add_argument("--baseline", type=int, default=50)
    ap.add_argument("--via", default="sbatch", choices=["sbatch", "libslurm"])
    a = ap.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    given = os.environ.get("LARCH_SLURM_DIR")
    cluster = slurm.SlurmCluster(pathlib.Path(given)) if given else None
    fresh = cluster is None or not cluster.running()
    if fresh:
        cluster = slurm.fresh_cluster(tmp / "slurm")
        for name in unix_users.TEST_USERS:
            cluster.add_user(name, "larch-test")
    server = Larchd(tmp, args=["--executor", "slurm", "--slurm-poll-ms", "500",
                               "--slurm-submit", a.via, "--sweep-max-children",
                               str(max(a.children, 1))], env=dict(cluster.env)).start()
    try:
        auth = server.auth()
        # ---- the sweep: one array
        c0 = calls(server)
        body = {"name": "big", "base": BASE, "max_parallel": 2,
                "axes": {"seed": list(range(1, a.children + 1))}}
        t0 = time.monotonic()
        r = requests.post(server.url + "/v1/sweeps", json=body, headers=auth, timeout=600)
        post_s = time.monotonic() - t0
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        s = requests.get(f"{server.url}/v1/sweeps/{sid}", headers=auth, timeout=60).json()
        ids = {c["job"] for c in s["children"]}
        handover_s, js = wait_all(server, ids, handed)
        c1 = calls(server)
        arrays = {(j["slurm_job_id"] or "?").split("_")[0] for j in js.values()}
        t1 = time.monotonic()
        requests.post(f"{server.url}/v1/sweeps/{sid}/cancel", headers=auth, timeout=600)
        cancel_post_s = time.monotonic() - t1
        cancel_s, js = wait_all(server, ids, lambda j: j["state"] in
                                ("CANCELLED", "COMPLETED", "FAILED"))
        cancel_s += cancel_post_s
        c2 = calls(server)
        print(f"sweep_children {a.children}")
        print(f"sweep_post_s {post_s:.3f}")
        print(f"sweep_handover_s {post_s + handover_s:.3f}   (POST to every child QUEUED)")
        print(f"sweep_submissions {submits(c1) - submits(c0)}   ({a.via})")
        print(f"sweep_arrays {len(arrays)} {sorted(arrays)[:3]}")
        print(f"sweep_cancel_s {cancel_s:.3f}   (POST cancel to every child final)")
        print(f"sweep_scancel_calls {c2.get('scancel', 0) - c1.get('scancel', 0)}")
        print(f"sweep_squeue_calls {c2.get('squeue', 0) - c0.get('squeue', 0)}")
        # ---- the baseline: ordinary jobs, one submission each
        b0 = calls(server)
        jobs, lock = [], threading.Lock()

        def client(n):
            with requests.Session() as ses:
                for i in range(n):
                    spec = dict(BASE, seed=i + 1)
                    rr = ses.post(server.url + "/v1/jobs", json=spec, headers=auth, timeout=120)
                    assert rr.status_code == 201, rr.text
                    with lock:
                        jobs.append(rr.json()["id"])
        t0 = time.monotonic()
        per = [a.baseline // 4 + (1 if i < a.baseline % 4 else 0) for i in range(4)]
        ts = [threading.Thread(target=client, args=(n,)) for n in per]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        bpost_s = time.monotonic() - t0
        bhand_s, _ = wait_all(server, set(jobs), handed)
        b1 = calls(server)
        for jid in jobs:
            requests.post(f"{server.url}/v1/jobs/{jid}/cancel", headers=auth, timeout=60)
        wait_all(server, set(jobs), lambda j: j["state"] in ("CANCELLED", "COMPLETED", "FAILED"))
        print(f"baseline_jobs {a.baseline}")
        print(f"baseline_post_s {bpost_s:.3f}")
        print(f"baseline_handover_s {bpost_s + bhand_s:.3f}")
        print(f"baseline_submissions {submits(b1) - submits(b0)}")
        per_sweep = (post_s + handover_s) / a.children * 1000
        per_job = (bpost_s + bhand_s) / a.baseline * 1000
        print(f"ms_per_child_sweep {per_sweep:.2f}")
        print(f"ms_per_job_baseline {per_job:.2f}")
        print(f"ratio_baseline_over_sweep {per_job / per_sweep:.1f}")
    finally:
        server.stop()
        if fresh:
            cluster.stop()


if __name__ == "__main__":
    main()
