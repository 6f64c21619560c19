#!/usr/bin/env python3
"""The client side of tests/bench/bench_slurm.sh (run by it; needs requests).

    bench_slurm.py submit  --url URL --token T --jobs N --clients C --name NAME --log FILE
    bench_slurm.py poll    --url URL --token T --pollers P --seconds S --poll-ms MS
    bench_slurm.py counter --url URL --token T --metric LINE
    bench_slurm.py freeport [--cluster]

submit: C threads POST N jobs (a small mlp spec named NAME) as fast as larchd
answers; a watcher reads GET /metrics every 50 ms until no job is PENDING
(larchd's PENDING = not yet taken by Slurm). Prints "key value" lines for the
script (posted, post_s, handover_s, rate, ...) and a description of where the
time went from larchd's log (its "PENDING -> QUEUED" lines, ms timestamps):
when the first job was handed over, and the bursts of hand-overs.

poll: P threads each GET /v1/jobs once per second (staggered) for S seconds;
the squeue counter of GET /metrics is read at the window's two ends.

counter: one value of GET /metrics (the line's name with labels).
freeport: a free TCP port on 127.0.0.1 (--cluster: one whose next two ports are free too,
for slurmctld, slurmd and slurmdbd).
"""
import argparse
import datetime
import re
import resource
import socket
import sys
import threading
import time

import requests

SPEC = {"model": {"type": "mlp", "hidden": [16]}, "data": {"name": "fashion-mnist"},
        "batch": {"global": 256}, "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 5}
PENDING = 'larch_jobs{state="PENDING"}'


def session(token):
    s = requests.Session()
    s.headers["Authorization"] = "Bearer " + token
    return s


def metrics(s, url):
    r = s.get(url + "/metrics", timeout=30)
    r.raise_for_status()
    out = {}
    for line in r.text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


def ts(text):
    """larchd's log timestamp (2026-11-23T03:28:55.222Z) as epoch seconds."""
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def log_queued(path, ids):
    """Epoch times of the "PENDING -> QUEUED" log lines of these job ids."""
    pat = re.compile(r"^(\S+Z) \w+\s+job (j-\d+): PENDING -> QUEUED")
    times = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                m = pat.match(line)
                if m and m.group(2) in ids:
                    times.append(ts(m.group(1)))
    except OSError:
        pass
    return sorted(times)


def bursts(times, t0, gap=0.08):
    """Groups of hand-overs separated by more than gap seconds: (start, end, n)."""
    out = []
    for t in times:
        if out and t - out[-1][1] <= gap:
            out[-1][1] = t
            out[-1][2] += 1
        else:
            out.append([t, t, 1])
    return [(a - t0, b - t0, n) for a, b, n in out]


def cmd_submit(a):
    lock = threading.Lock()
    state = {"next": 0, "ok": 0, "bad": {}, "last_post": 0.0, "ids": set()}
    spec = dict(SPEC, name=a.name)

    def client():
        s = session(a.token)
        while True:
            with lock:
                if state["next"] >= a.jobs:
                    return
                state["next"] += 1
            try:
                r = s.post(a.url + "/v1/jobs", json=spec, timeout=60)
                code = r.status_code
                jid = r.json().get("id") if code == 201 else None
            except requests.RequestException as e:
                code, jid = type(e).__name__, None
            with lock:
                if code == 201:
                    state["ok"] += 1
                    state["ids"].add(jid)
                    state["last_post"] = time.time()
                else:
                    state["bad"][code] = state["bad"].get(code, 0) + 1

    ms = session(a.token)
    m0 = metrics(ms, a.url)
    threads = [threading.Thread(target=client) for _ in range(a.clients)]
    t0 = time.time()
    for t in threads:
        t.start()
    # the watcher: until every POST is answered and nothing is PENDING
    done_at = None
    deadline = t0 + a.timeout
    while time.time() < deadline:
        time.sleep(0.05)
        alive = any(t.is_alive() for t in threads)
        m = metrics(ms, a.url)
        if not alive and m.get(PENDING, 1) == 0:
            done_at = time.time()
            break
    for t in threads:
        t.join()
    m1 = metrics(ms, a.url)
    posted = state["ok"]
    post_s = state["last_post"] - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(f"client_cpu_s {ru.ru_utime + ru.ru_stime:.3f}")
    print(f"posted {posted}")
    print(f"post_errors {sum(state['bad'].values())}")
    if state["bad"]:
        print("post_error_kinds " + ",".join(f"{k}x{v}" for k, v in state["bad"].items()))
    print(f"post_s {post_s:.3f}")
    print(f"post_rate {posted / post_s if post_s > 0 else 0:.1f}")
    for cmd in ("sbatch", "slurm_submit_batch_job", "squeue"):
        key = 'larch_slurm_calls_total{command="%s"}' % cmd
        print(f"{cmd}_calls {m1.get(key, 0) - m0.get(key, 0):.0f}")
    if done_at is None:
        print(f"timeout {a.timeout}")
        print(f"still_pending {m1.get(PENDING, -1):.0f}")
        return 1

    # every job of this batch must have a Slurm id now
    have_sid, states, cursor = 0, {}, None
    while True:
        params = {"name": a.name, "limit": 500}
        if cursor:
            params["cursor"] = cursor
        r = ms.get(a.url + "/v1/jobs", params=params, timeout=60)
        r.raise_for_status()
        body = r.json()
        for j in body["jobs"]:
            if j["id"] in state["ids"]:
                states[j["state"]] = states.get(j["state"], 0) + 1
                have_sid += j.get("slurm_job_id") is not None
        cursor = body.get("next_cursor")
        if not cursor:
            break
    print(f"with_slurm_id {have_sid}")
    print("states " + ",".join(f"{k}:{v}" for k, v in sorted(states.items())))

    # the log: the client-side end (watcher, 50 ms steps) and larchd's own
    times = log_queued(a.log, state["ids"]) if a.log else []
    end = times[-1] if len(times) == posted else done_at
    handover_s = end - t0
    print(f"handover_s {handover_s:.3f}")
    print(f"watcher_s {done_at - t0:.3f}")
    print(f"rate {posted / handover_s if handover_s > 0 else 0:.1f}")
    if times:
        print(f"first_queued_s {times[0] - t0:.3f}")
        print(f"tail_after_last_post_s {times[-1] - state['last_post']:.3f}")
        b = bursts(times, t0)
        sizes = [n for _, _, n in b]
        busy = sum(e - s for s, e, _ in b)
        print(f"bursts {len(b)}")
        print(f"burst_sizes {','.join(map(str, sizes[:40]))}{',...' if len(sizes) > 40 else ''}")
        print("burst_spans " + ",".join(f"{s:.2f}-{e:.2f}" for s, e, _ in b[:40]) +
              (",..." if len(b) > 40 else ""))
        print(f"burst_busy_s {busy:.3f}")
        gaps = [b[i + 1][0] - b[i][1] for i in range(len(b) - 1)]
        if gaps:
            print(f"burst_gap_max_s {max(gaps):.3f}")
            print(f"burst_gap_sum_s {sum(gaps):.3f}")
    return 0


def cmd_poll(a):
    stop_at = [0.0]
    lock = threading.Lock()
    stats = {"ok": 0, "bad": 0, "lat": [], "bytes": 0}

    def poller(k):
        s = session(a.token)
        nxt = time.time() + k / a.pollers     # staggered over the first second
        while True:
            now = time.time()
            if nxt > now:
                time.sleep(nxt - now)
            if time.time() >= stop_at[0]:
                return
            t = time.time()
            try:
                r = s.get(a.url + "/v1/jobs", timeout=30)
                ok, n = r.status_code == 200, len(r.content)
            except requests.RequestException:
                ok, n = False, 0
            dt = time.time() - t
            with lock:
                if ok:
                    stats["ok"] += 1
                    stats["bytes"] += n
                    stats["lat"].append(dt)
                else:
                    stats["bad"] += 1
            nxt += 1.0

    ms = session(a.token)
    key = 'larch_slurm_calls_total{command="squeue"}'

    def all_calls(m):
        return sum(v for k, v in m.items() if k.startswith("larch_slurm_calls_total{"))
    m0, t0 = metrics(ms, a.url), time.time()
    if a.pollers == 0:                        # the quiet baseline: no HTTP reads
        time.sleep(a.seconds)
    else:
        stop_at[0] = t0 + a.seconds
        threads = [threading.Thread(target=poller, args=(k,)) for k in range(a.pollers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    m1, t1 = metrics(ms, a.url), time.time()
    window = t1 - t0
    intervals = window * 1000 / a.poll_ms
    calls = m1.get(key, 0) - m0.get(key, 0)
    print(f"window_s {window:.2f}")
    print(f"squeue_calls {calls:.0f}")
    print(f"slurm_calls {all_calls(m1) - all_calls(m0):.0f}")
    print(f"intervals {intervals:.1f}")
    print(f"calls_per_interval {calls / intervals if intervals else 0:.3f}")
    if a.pollers:
        lat = sorted(stats["lat"])
        print(f"gets {stats['ok']}")
        print(f"get_errors {stats['bad']}")
        print(f"get_rate {stats['ok'] / window:.1f}")
        if lat:
            print(f"get_p50_ms {1000 * lat[len(lat) // 2]:.1f}")
            print(f"get_p99_ms {1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))]:.1f}")
            print(f"get_bytes {stats['bytes'] // max(1, stats['ok'])}")
    return 0


def cmd_counter(a):
    print(f"{metrics(session(a.token), a.url).get(a.metric, 0):.0f}")
    return 0


def cmd_freeport(a):
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not a.cluster:
            return print(port) or 0
        if port >= 65533:
            continue
        try:
            with socket.socket() as s2, socket.socket() as s3, socket.socket() as s4:
                # slurmctld and slurmd bind every address: check the ports there
                s2.bind(("0.0.0.0", port))
                s3.bind(("0.0.0.0", port + 1))
                s4.bind(("0.0.0.0", port + 2))
        except OSError:
            continue
        return print(port) or 0
    return 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("submit")
    s.add_argument("--url", required=True)
    s.add_argument("--token", required=True)
    s.add_argument("--jobs", type=int, default=500)
    s.add_argument("--clients", type=int, default=16)
    s.add_argument("--name", default="bench")
    s.add_argument("--log", default="")
    s.add_argument("--timeout", type=float, default=300)
    s = sub.add_parser("poll")
    s.add_argument("--url", required=True)
    s.add_argument("--token", required=True)
    s.add_argument("--pollers", type=int, default=100)
    s.add_argument("--seconds", type=float, default=20)
    s.add_argument("--poll-ms", type=float, default=1000)
    s = sub.add_parser("counter")
    s.add_argument("--url", required=True)
    s.add_argument("--token", required=True)
    s.add_argument("--metric", required=True)
    s = sub.add_parser("freeport")
    s.add_argument("--cluster", action="store_true")
    a = p.parse_args()
    return {"submit": cmd_submit, "poll": cmd_poll, "counter": cmd_counter,
            "freeport": cmd_freeport}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
