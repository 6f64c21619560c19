#!/usr/bin/env python3
"""What running each job as its owner costs: submit -> RUNNING on the local
executor, run_as owner against run_as service, side by side.

Two larchd on the same machine (run as root): one runs jobs as their owners
(a fork that sets groups, gid and uid, a job directory given to the owner,
the submit's probe run as the owner), the other as larchd's own user (the
probe confined to data_roots for the user-role token). Rounds alternate a
submit to each, one job at a time (each waits for the last to end, so the
machine is quiet for the next). The latency is the job's own record: the
time of its RUNNING event minus its submit event's, both written by larchd,
so the client's polling adds nothing. It also prints the client-side submit
answer time (POST -> 201), which holds the preflight.

    sudo python3 tests/bench/bench_run_as.py [--rounds 20] [--build build]

Prints per mode the median, p90 and mean of each figure, and the
owner - service differences of the medians.
"""
import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import requests

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))


def parse_ms(stamp):
    import datetime
    t = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ")
    return t.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000.0


def spec(i, data):
    return {"name": f"b{i}", "model": {"type": "gpt", "layers": 1, "heads": 1, "dim": 8,
                                       "seq": 8},
            "data": {"format": "text", "path": str(data), "val_fraction": 0.1},
            "batch": {"global": 2}, "optimizer": {"type": "sgd", "lr": 0.01}, "steps": 1,
            "checkpoint_at_end": False}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--build", default=str(HERE.parent.parent / "build"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_run_as: run as root (owner mode starts jobs as other users)")
    os.environ["LARCH_BUILD_DIR"] = str(pathlib.Path(args.build).resolve())
    import unix_users
    from larchd import Larchd
    unix_users.ensure(("alice",))
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-run-as-"))
    unix_users.make_reachable(tmp)
    os.chmod(tmp, 0o755)
    data = tmp / "data"
    data.mkdir()
    os.chmod(data, 0o755)
    corpus = data / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog " * 20)
    os.chmod(corpus, 0o644)
    servers = {
        "owner": Larchd(tmp / "owner", args=["--max-local-jobs", "1"]),
        "service": Larchd(tmp / "service", args=["--run-as", "service", "--data-roots",
                                                   str(data), "--max-local-jobs", "1"]),
    }
    tokens = {}
    for mode, d in servers.items():
        (tmp / mode).mkdir()
        d.start()
        out = subprocess.run([str(d.exe), "token", "create", "--user", "alice", "--role", "user",
                              "--state-dir", str(d.state_dir)], capture_output=True, text=True,
                             check=True)
        tokens[mode] = {"Authorization": f"Bearer {out.stdout.strip()}"}
    figures = {m: {"running_ms": [], "submit_ms": []} for m in servers}
    try:
        for r in range(args.rounds + 1):              # round 0 warms up (page cache, NSS)
            for mode in (("owner", "service") if r % 2 == 0 else ("service", "owner")):
                d = servers[mode]
                t0 = time.perf_counter()
                resp = requests.post(d.url + "/v1/jobs", headers=tokens[mode],
                                     json=spec(r, corpus), timeout=30)
                t1 = time.perf_counter()
                assert resp.status_code == 201, resp.text
                job = resp.json()["id"]
                while True:
                    j = requests.get(f"{d.url}/v1/jobs/{job}", headers=d.auth(),
                                     timeout=10).json()
                    if j["state"] in ("COMPLETED", "FAILED", "CANCELLED"):
                        break
                    time.sleep(0.02)
                assert j["state"] == "COMPLETED", j
                ev = requests.get(f"{d.url}/v1/jobs/{job}/events", headers=d.auth(),
                                  timeout=10).json()["events"]
                submitted = next(e for e in ev if e["to"] == "PENDING")
                running = next(e for e in ev if e["to"] == "RUNNING")
                if r == 0:
                    continue
                figures[mode]["running_ms"].append(parse_ms(running["time"]) -
                                                   parse_ms(submitted["time"]))
                figures[mode]["submit_ms"].append((t1 - t0) * 1000.0)
    finally:
        for d in servers.values():
            d.stop()

    def row(name, xs):
        xs = sorted(xs)
        p90 = xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]
        return f"  {name:<34} {statistics.median(xs):9.2f} {p90:9.2f} {statistics.mean(xs):9.2f}"

    print(f"bench_run_as: {args.rounds} rounds, one job at a time, local executor, "
          f"{os.cpu_count()} CPUs")
    print(f"  {'figure (ms)':<34} {'median':>9} {'p90':>9} {'mean':>9}")
    for mode in servers:
        print(row(f"{mode}: submit -> RUNNING (events)", figures[mode]["running_ms"]))
        print(row(f"{mode}: POST answered (client)", figures[mode]["submit_ms"]))
    for fig in ("running_ms", "submit_ms"):
        o = statistics.median(figures["owner"][fig])
        s = statistics.median(figures["service"][fig])
        print(f"  owner - service, {fig:<12}: {o - s:+8.2f} ms (x{o / s:.2f})")


if __name__ == "__main__":
    main()
