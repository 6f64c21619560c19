#!/usr/bin/env python3
"""larchd at cluster scale on the dev Slurm cluster (issue 40): a database
of 100,000 jobs, 5,000 of them active in Slurm, then 50 Slurm state changes
a second.

    LARCH_BUILD_DIR=build [LARCH_SLURM_DIR=dir] python3 tests/bench/bench_cluster_scale.py \\
        [--jobs 100000] [--active 5000] [--poll-ms 1000] [--window 20] [--rate 50]
        [--change-s 20] [--clients 4] [--api-rate 25] [--via auto|sbatch|libslurm]
        [--users 1-4] [--keep]

Runs one larchd with the Slurm executor on the dev cluster (the one up in
$LARCH_SLURM_DIR, else a fresh one in a temporary directory, stopped at the
end; the temporary directory, larchd's state and log in it, is removed
unless --keep). The Slurm jobs are held by a down partition: larchd submits to
`batch` (--slurm-partition), set State=DOWN first, so Slurm keeps them
PENDING (PartitionDown) and runs none. Phases:

  fill     larchd makes its database at a first start and is stopped; the
           bench writes --jobs minus --active finished Slurm jobs (COMPLETED,
           with a Slurm id, their submit and end events) in one transaction
           with Python's sqlite3, as bench_usage.py does: larchd's schema,
           not its API (100,000 POSTs would take the 2-core machine most of
           an hour). larchd starts again on it.
  idle     the baseline: no job active in Slurm (larchd runs no squeue);
           --clients threads each GET, --api-rate times a second, in turn:
           one job (GET /v1/jobs/{id}, a random finished one), a list page
           (GET /v1/jobs?limit=50) and the change feed (GET /v1/events);
           latencies by kind, larchd's CPU and RSS.
  submit   --active jobs POSTed (8 clients; with --users K, round robin
           over the admin and K-1 test users, user-role tokens made with
           `larchd token create`) through larchd's submit path,
           until every one is QUEUED (Slurm took it): POST time and rate,
           hand-over time and rate, sbatch/libslurm calls.
  quiet    --window seconds with the jobs held and no HTTP reads: larchd's
           CPU (utime+stime of /proc/PID/stat; its children's, squeue's,
           apart) over the squeue calls of the window = CPU a poll cycle;
           the poll histogram of /metrics (larch_slurm_poll_seconds, wall;
           larch_slurm_poll_cpu_seconds_total, the executor thread's CPU).
  polling  the same API load as idle while larchd polls: p50/p99 by kind,
           their ratio to idle's, and larchd's own p99 (the bucket of its
           request histogram in /metrics that 99% fell in) with the number
           of requests over 20 ms by that histogram.
  changes  --rate jobs a second are cancelled with scancel from outside
           larchd (a Slurm state change each: PENDING -> CANCELLED) for
           --change-s seconds, while a client long-polls /v1/events and the
           API load goes on. Then, for every cancelled job: the delay from
           its scancel to its CANCELLED in /v1/events (time the bench got it)
           and to its ended_at in the database (GET /v1/jobs/{id}), in poll
           intervals; how many arrived within 2 intervals, how many never.

Prints "key value" lines and each figure's ratio to its issue-40 target
(poll CPU 200 ms, API p99 20 ms, RSS 200 MiB; ratio < 1 is within). Never
fails on timing: the machine is shared; read the ratios against idle.
"""
import argparse
import calendar
import json
import os
import pathlib
import random
import re
import shutil
import sqlite3
import subprocess
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

SPEC = {"name": "scale", "model": {"type": "mlp", "hidden": [16]},
        "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
        "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 5}
TICK = os.sysconf("SC_CLK_TCK")
TARGET_POLL_CPU_MS = 200.0
TARGET_P99_MS = 20.0
TARGET_RSS_MIB = 200.0
KINDS = ("get", "list", "events")
PENDING = 'larch_jobs{state="PENDING"}'


def out(key, value):
    print(f"{key} {value}", flush=True)


def proc_cpu(pid):
    """(own CPU s, waited-for children's CPU s) of pid."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3): utime is field 14
    own = (int(fields[11]) + int(fields[12])) / TICK
    children = (int(fields[13]) + int(fields[14])) / TICK
    return own, children


def proc_rss_mib(pid):
    text = pathlib.Path(f"/proc/{pid}/status").read_text()
    rss = int(re.search(r"^VmRSS:\s+(\d+) kB", text, re.M).group(1)) / 1024
    hwm = int(re.search(r"^VmHWM:\s+(\d+) kB", text, re.M).group(1)) / 1024
    return rss, hwm


def metrics(s, url):
    text = s.get(url + "/metrics", timeout=60).text
    m = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            try:
                m[k] = float(v)
            except ValueError:
                pass
    return m


def squeue_calls(m):
    return m.get('larch_slurm_calls_total{command="squeue"}', 0)


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * q))] if v else float("nan")


def fill(db_path, n, rng):
    """n finished Slurm jobs of the admin, with their submit and end
    events; returns (seconds, ids)."""
    db = sqlite3.connect(db_path, isolation_level=None)
    db.execute("PRAGMA foreign_keys = ON")
    owner = db.execute("SELECT name FROM users WHERE role = 'admin' ORDER BY name").fetchone()[0]
    now = int(time.time() * 1000)
    spec = json.dumps(dict(SPEC, name="history"), separators=(",", ":"))
    t0 = time.monotonic()
    db.execute("BEGIN")
    first = (db.execute("SELECT coalesce(max(id), 0) FROM jobs").fetchone()[0]) + 1
    rows, events = [], []
    for i in range(n):
        sub = now - 30 * 86400 * 1000 + i * 20000
        start = sub + rng.randrange(1000, 600000)
        end = start + rng.randrange(60000, 4 * 3600 * 1000)
        rows.append((first + i, owner, spec, str(100000 + i), sub, start, end))
        events.append((first + i, 1, sub, None, "PENDING", owner, "submitted"))
        events.append((first + i, 2, end, "RUNNING", "COMPLETED", "slurm", "exit 0"))
    db.executemany("INSERT INTO jobs (id, owner, name, spec, state, executor, slurm_job_id,"
                   " partition, submit_time, start_time, end_time, exit_code, reason)"
                   " VALUES (?, ?, 'history', ?, 'COMPLETED', 'slurm', ?, 'batch', ?, ?, ?, 0,"
                   " 'slurm job COMPLETED')", rows)
    db.executemany("INSERT INTO job_events (job, seq, time, from_state, to_state, by, reason)"
                   " VALUES (?, ?, ?, ?, ?, ?, ?)", events)
    db.execute("COMMIT")
    took = time.monotonic() - t0
    db.close()
    return took, [f"j-{first + i:06d}" for i in range(n)]


class ApiLoad:
    """--clients threads, each --api-rate requests a second in turn over
    KINDS; latencies (ms) by kind."""

    def __init__(self, url, token, ids, clients, rate):
        self.url, self.token, self.ids = url, token, ids
        self.clients, self.rate = clients, rate
        self.lat = {k: [] for k in KINDS}
        self.errors = 0
        self.lock = threading.Lock()
        self.stop_at = 0.0

    def worker(self, k):
        s = requests.Session()
        s.headers["Authorization"] = "Bearer " + self.token
        rng = random.Random(k)
        nxt = time.time() + k / (self.clients * self.rate)
        i = k
        while True:
            now = time.time()
            if nxt > now:
                time.sleep(nxt - now)
            if time.time() >= self.stop_at:
                return
            kind = KINDS[i % len(KINDS)]
            i += 1
            if kind == "get":
                path = "/v1/jobs/" + rng.choice(self.ids)
            elif kind == "list":
                path = "/v1/jobs?limit=50"
            else:
                path = "/v1/events"
            t = time.perf_counter()
            try:
                ok = s.get(self.url + path, timeout=30).status_code == 200
            except requests.RequestException:
                ok = False
            dt = (time.perf_counter() - t) * 1000
            with self.lock:
                if ok:
                    self.lat[kind].append(dt)
                else:
                    self.errors += 1
            nxt += 1.0 / self.rate

    def run(self, seconds):
        self.stop_at = time.time() + seconds
        ts = [threading.Thread(target=self.worker, args=(k,)) for k in range(self.clients)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return self


def window(server, s, seconds, load=None):
    """larchd's CPU, squeue calls and RSS over a window (with load running)."""
    pid = server.proc.pid
    m0, c0, t0 = metrics(s, server.url), proc_cpu(pid), time.monotonic()
    if load:
        load.run(seconds)
    else:
        time.sleep(seconds)
    m1, c1, t1 = metrics(s, server.url), proc_cpu(pid), time.monotonic()
    rss, hwm = proc_rss_mib(pid)
    return {"s": t1 - t0, "cpu": c1[0] - c0[0], "child_cpu": c1[1] - c0[1],
            "polls": squeue_calls(m1) - squeue_calls(m0), "rss": rss, "hwm": hwm,
            "m0": m0, "m1": m1}


def report_window(name, w):
    out(f"{name}_window_s", f"{w['s']:.1f}")
    out(f"{name}_larchd_cpu_s_per_s", f"{w['cpu'] / w['s']:.3f}")
    out(f"{name}_children_cpu_s_per_s", f"{w['child_cpu'] / w['s']:.3f}")
    out(f"{name}_squeue_calls", f"{w['polls']:.0f}")
    if w["polls"]:
        per = 1000 * w["cpu"] / w["polls"]
        out(f"{name}_larchd_cpu_ms_per_poll", f"{per:.1f} (target {TARGET_POLL_CPU_MS:.0f}: "
            f"ratio {per / TARGET_POLL_CPU_MS:.2f})")
        out(f"{name}_squeue_cpu_ms_per_poll", f"{1000 * w['child_cpu'] / w['polls']:.1f}")
    # larchd's own poll timings, where /metrics has them
    m0, m1 = w["m0"], w["m1"]
    n = m1.get("larch_slurm_poll_seconds_count", 0) - m0.get("larch_slurm_poll_seconds_count", 0)
    if n:
        wall = m1["larch_slurm_poll_seconds_sum"] - m0["larch_slurm_poll_seconds_sum"]
        cpu = (m1.get("larch_slurm_poll_cpu_seconds_total", 0) -
               m0.get("larch_slurm_poll_cpu_seconds_total", 0))
        out(f"{name}_poll_wall_ms_mean", f"{1000 * wall / n:.1f} (over {n:.0f} polls)")
        out(f"{name}_poll_thread_cpu_ms_mean", f"{1000 * cpu / n:.1f} (target "
            f"{TARGET_POLL_CPU_MS:.0f}: ratio {1000 * cpu / n / TARGET_POLL_CPU_MS:.2f})")
        b = sorted(((float(re.search(r'le="([^"]+)"', k).group(1).replace("+Inf", "inf")),
                     v - m0.get(k, 0)) for k, v in m1.items()
                    if k.startswith("larch_slurm_poll_seconds_bucket")))
        out(f"{name}_poll_wall_buckets", " ".join(f"le{le:g}:{c:.0f}" for le, c in b))
    out(f"{name}_rss_mib", f"{w['rss']:.1f} (peak {w['hwm']:.1f}; target {TARGET_RSS_MIB:.0f}: "
        f"ratio {w['hwm'] / TARGET_RSS_MIB:.2f})")


ROUTES = {"get": "/v1/jobs/{id}", "list": "/v1/jobs", "events": "/v1/events"}


def server_side(m0, m1, route):
    """larchd's own view of a route over a window (its request histogram,
    first byte to completion): (requests, the bucket bound under which 99%
    fell in ms, requests over 20 ms)."""
    pat = re.compile(r'^larch_http_request_duration_seconds_bucket\{method="GET",'
                     r'route="' + re.escape(route) + r'",le="([^"]+)"\}$')
    b = []
    for k, v in m1.items():
        mm = pat.match(k)
        if mm:
            b.append((float(mm.group(1).replace("+Inf", "inf")), v - m0.get(k, 0)))
    b.sort()
    if not b or not b[-1][1]:
        return 0, float("nan"), 0
    n = b[-1][1]
    p99 = next(le for le, c in b if c >= 0.99 * n)
    at20 = max((c for le, c in b if le <= 0.02), default=0)
    return n, 1000 * p99, n - at20


def report_load(name, load, w, base=None):
    for k in KINDS:
        lat = load.lat[k]
        p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
        line = (f"n {len(lat)} p50 {p50:.2f} p99 {p99:.2f} ms (target {TARGET_P99_MS:.0f}: "
                f"ratio {p99 / TARGET_P99_MS:.2f})")
        if base and base.lat[k]:
            line += f"; p99 x{p99 / pct(base.lat[k], 0.99):.2f} of idle"
        n, sp99, over = server_side(w["m0"], w["m1"], ROUTES[k])
        if k == "events" and name == "changes":
            line += "; in larchd: with the follower's long polls, not shown"
        else:
            line += f"; in larchd p99 <= {sp99:g} ms, {over:.0f} of {n:.0f} over 20 ms"
        out(f"{name}_{k}", line)
    out(f"{name}_api_errors", load.errors)


def all_jobs(s, url, name):
    jobs, cursor = {}, None
    while True:
        params = {"name": name, "limit": 500}
        if cursor:
            params["cursor"] = cursor
        body = s.get(url + "/v1/jobs", params=params, timeout=120).json()
        for j in body["jobs"]:
            jobs[j["id"]] = j
        cursor = body.get("next_cursor")
        if not cursor:
            return jobs


def user_tokens(server, users):
    """The admin's token and user-role tokens of the first users-1 test users."""
    tokens = [server.admin_token]
    for name in unix_users.TEST_USERS[:users - 1]:
        r = subprocess.run([str(server.exe), "token", "create", "--user", name, "--role", "user",
                            "--state-dir", str(server.state_dir)], capture_output=True,
                           text=True, timeout=30, check=True)
        tokens.append(r.stdout.strip())
    return tokens


def submit(server, s, n, clients, tokens):
    lock = threading.Lock()
    st = {"next": 0, "ids": [], "bad": 0, "last": 0.0}

    def client(k):
        c = requests.Session()
        c.headers["Authorization"] = "Bearer " + tokens[k % len(tokens)]
        while True:
            with lock:
                if st["next"] >= n:
                    return
                st["next"] += 1
            try:
                r = c.post(server.url + "/v1/jobs", json=SPEC, timeout=120)
                jid = r.json()["id"] if r.status_code == 201 else None
            except requests.RequestException:
                jid = None
            with lock:
                if jid:
                    st["ids"].append(jid)
                    st["last"] = time.monotonic()
                else:
                    st["bad"] += 1

    m0 = metrics(s, server.url)
    cpu0 = proc_cpu(server.proc.pid)
    t0 = time.monotonic()
    ts = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in ts:
        t.start()
    done = None
    while done is None and time.monotonic() - t0 < 3600:
        time.sleep(0.5)
        m = metrics(s, server.url)
        if not any(t.is_alive() for t in ts) and m.get(PENDING, 1) == 0:
            done = time.monotonic()
    for t in ts:
        t.join()
    m1 = metrics(s, server.url)
    cpu1 = proc_cpu(server.proc.pid)
    posted = len(st["ids"])
    post_s = st["last"] - t0
    out("submit_posted", f"{posted} ({st['bad']} errors) by {len(tokens)} user(s)")
    out("submit_post_s", f"{post_s:.1f} ({posted / post_s:.0f} POST/s)")
    for cmd in ("sbatch", "slurm_submit_batch_job"):
        k = f'larch_slurm_calls_total{{command="{cmd}"}}'
        out(f"submit_{cmd}_calls", f"{m1.get(k, 0) - m0.get(k, 0):.0f}")
    if done is None:
        out("submit_timeout", f"{m1.get(PENDING, -1):.0f} still PENDING")
        return st["ids"]
    handover = done - t0
    out("submit_handover_s", f"{handover:.1f} ({posted / handover:.1f} jobs/s into Slurm)")
    out("submit_larchd_cpu_ms_per_job", f"{1000 * (cpu1[0] - cpu0[0]) / max(1, posted):.2f}")
    return st["ids"]


class Follower(threading.Thread):
    """Long-polls /v1/events; the first time each (job, state) arrived."""

    def __init__(self, url, token):
        super().__init__(daemon=True)
        self.url = url
        self.s = requests.Session()
        self.s.headers["Authorization"] = "Bearer " + token
        self.seen = {}
        self.resets = 0
        self.stopping = False

    def run(self):
        body = self.s.get(self.url + "/v1/events", timeout=30).json()
        stream, last = body["stream"], body["last"]
        while not self.stopping:
            try:
                body = self.s.get(self.url + "/v1/events", params={
                    "after": last, "stream": stream, "timeout": 2}, timeout=30).json()
            except requests.RequestException:
                continue
            now = time.time()
            if body.get("reset"):
                self.resets += 1
            for c in body["changes"]:
                self.seen.setdefault((c["job"], c["state"]), now)
            last = body["last"]


def iso_ms(text):
    if not text:
        return None
    base, _, frac = text.rstrip("Z").partition(".")
    t = calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S"))
    return t + (float("0." + frac) if frac else 0.0)


def changes(server, s, cluster, ids, a, load):
    """Cancels --rate jobs a second with scancel for --change-s seconds."""
    jobs = all_jobs(s, server.url, SPEC["name"])
    sids = [(jid, jobs[jid]["slurm_job_id"]) for jid in ids
            if jid in jobs and jobs[jid].get("slurm_job_id")]
    n = min(len(sids), a.rate * a.change_s)
    victims = sids[:n]
    follower = Follower(server.url, server.admin_token)
    follower.start()
    time.sleep(0.5)
    cancelled_at = {}
    load.stop_at = time.time() + a.change_s + 2 * a.poll_ms / 1000 + 2
    lt = [threading.Thread(target=load.worker, args=(k,)) for k in range(load.clients)]
    for t in lt:
        t.start()
    pid = server.proc.pid
    m0, c0, t0 = metrics(s, server.url), proc_cpu(pid), time.monotonic()
    scancel_s = []
    for sec in range(a.change_s):
        batch = victims[sec * a.rate:(sec + 1) * a.rate]
        if not batch:
            break
        due = t0 + sec
        if due > time.monotonic():
            time.sleep(due - time.monotonic())
        t = time.perf_counter()
        subprocess.run(["scancel"] + [sid for _, sid in batch], env=cluster.env, check=True)
        scancel_s.append(time.perf_counter() - t)
        now = time.time()
        for jid, _ in batch:
            cancelled_at[jid] = now
    # what is late still has time to arrive; later than 10 s counts as missed
    deadline = time.time() + 10 + 4 * a.poll_ms / 1000
    while time.time() < deadline and not all((j, "CANCELLED") in follower.seen
                                             for j in cancelled_at):
        time.sleep(0.2)
    follower.stopping = True
    for t in lt:
        t.join()
    follower.join(timeout=10)
    w = {"s": time.monotonic() - t0}
    m1, c1 = metrics(s, server.url), proc_cpu(pid)
    w.update(cpu=c1[0] - c0[0], child_cpu=c1[1] - c0[1],
             polls=squeue_calls(m1) - squeue_calls(m0), m0=m0, m1=m1)
    w["rss"], w["hwm"] = proc_rss_mib(pid)

    interval = a.poll_ms / 1000
    jobs = all_jobs(s, server.url, SPEC["name"])
    feed, db = [], []
    missed_feed = missed_db = 0
    for jid, at in cancelled_at.items():
        seen = follower.seen.get((jid, "CANCELLED"))
        if seen is None:
            missed_feed += 1
        else:
            feed.append(seen - at)
        j = jobs.get(jid, {})
        end = iso_ms(j.get("ended_at"))
        if j.get("state") != "CANCELLED" or end is None:
            missed_db += 1
        else:
            db.append(end - at)
    out("changes_cancelled", f"{len(cancelled_at)} in {len(scancel_s)} scancel calls "
        f"({len(cancelled_at) / max(1, len(scancel_s)):.0f} a second; scancel "
        f"{1000 * pct(scancel_s, 0.5):.0f} ms median)")
    for name, d, missed in (("feed", feed, missed_feed), ("db", db, missed_db)):
        within = sum(x <= 2 * interval for x in d)
        out(f"changes_to_{name}", f"p50 {pct(d, 0.5):.2f} s p99 {pct(d, 0.99):.2f} s max "
            f"{max(d) if d else float('nan'):.2f} s; within 2 polls {within}/{len(cancelled_at)}"
            f"; missed {missed}")
    out("changes_feed_resets", follower.resets)
    report_window("changes", w)
    report_load("changes", load, w)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100000)
    ap.add_argument("--active", type=int, default=5000)
    ap.add_argument("--poll-ms", type=int, default=1000)
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--rate", type=int, default=50)
    ap.add_argument("--change-s", type=int, default=20)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--api-rate", type=float, default=25)
    ap.add_argument("--via", default="auto", choices=["auto", "sbatch", "libslurm"])
    ap.add_argument("--users", type=int, default=1, metavar="1-4",
                    choices=range(1, len(unix_users.TEST_USERS) + 2),
                    help="submitters: the admin and up to 3 test users")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = ap.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-scale-"))
    given = os.environ.get("LARCH_SLURM_DIR")
    cluster = slurm.SlurmCluster(pathlib.Path(given)) if given else None
    fresh = cluster is None or not cluster.running()
    t = time.monotonic()
    if fresh:
        cluster = slurm.fresh_cluster(tmp / "slurm")
        for name in unix_users.TEST_USERS:
            cluster.add_user(name, "larch-test")
    out("cpus", f"{os.cpu_count()} load {os.getloadavg()[0]:.1f}")
    out("cluster", f"{'fresh' if fresh else 'given'} ({time.monotonic() - t:.0f} s)")
    args = ["--executor", "slurm", "--slurm-poll-ms", str(a.poll_ms), "--slurm-partition",
            "batch", "--slurm-submit", a.via, "--log-level", "warn"]
    server = Larchd(tmp, args=args, env=dict(cluster.env)).start()
    try:
        server.stop()
        took, history = fill(server.state_dir / "larch.db", a.jobs - a.active,
                             random.Random(1))
        size = (server.state_dir / "larch.db").stat().st_size / 2**20
        out("fill", f"{len(history)} finished jobs in {took:.1f} s "
            f"({len(history) / took:.0f}/s), database {size:.0f} MiB")
        server.start()
        cluster.run("scontrol", "update", "PartitionName=batch", "State=DOWN")
        s = requests.Session()
        s.headers["Authorization"] = "Bearer " + server.admin_token
        s.get(server.url + "/v1/jobs?limit=1", timeout=60)

        idle_load = ApiLoad(server.url, server.admin_token, history, a.clients, a.api_rate)
        w = window(server, s, a.window, idle_load)
        report_window("idle", w)
        report_load("idle", idle_load, w)

        ids = submit(server, s, a.active, 8, user_tokens(server, a.users))
        w = window(server, s, a.window)
        report_window("quiet", w)
        load = ApiLoad(server.url, server.admin_token, history + ids, a.clients, a.api_rate)
        w = window(server, s, a.window, load)
        report_window("polling", w)
        report_load("polling", load, w, idle_load)

        changes(server, s, cluster, ids, a,
                ApiLoad(server.url, server.admin_token, history + ids, a.clients, a.api_rate))
    finally:
        try:
            cluster.run("scontrol", "update", "PartitionName=batch", "State=UP", check=False)
            cluster.run("scancel", "--partition=batch", check=False)
        finally:
            server.stop(timeout=120)
            if fresh:
                cluster.stop()
            if not a.keep:
                shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
