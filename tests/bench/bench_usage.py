#!/usr/bin/env python3
"""tests/bench/bench_usage.py - GET /v1/usage over many finished jobs: a
real larchd's database filled with N (100,000) finished jobs of the local
executor and M (100,000) Slurm jobs as larchd's sacct reader stores them,
then the endpoint timed against GET /v1/jobs?limit=1 (the cheapest read of
the API), side by side, and against the same totals computed from the job
rows themselves (what the endpoint would cost without db/usage.h's hour
rows).

    python3 tests/bench/bench_usage.py [--build DIR] [--jobs N] [--slurm-jobs M]
                                       [--users U] [--days D] [--rounds R] [--requests K]

The database is larchd's own: larchd makes it (and its admin token) at a
first start and is stopped; the bench then writes the jobs as larchd's
state machine leaves them (RUNNING with a start time, then one UPDATE to
COMPLETED with an end time: the schema's trigger adds each to the usage
tables, as it does when the runner records a job's end) and the Slurm jobs
into usage_jobs (as db_usage_add does), in one transaction each; then
larchd serves it. Jobs last 1 minute to 4 hours, start over the last D (30)
days, belong to U (20) users and 5 accounts, with 1 to 8 CPUs x 1 to 2
ranks and a GPU for one in ten.

Timed, in R (5) rounds, alternating, K (50) requests each with one
keep-alive connection:
  jobs        GET /v1/jobs?limit=1                       (baseline)
  usage       GET /v1/usage                              (30 days, user,account)
  usage-day   GET /v1/usage?group_by=user,day            (the dashboard's chart)
  usage-90d   GET /v1/usage?from=<90 days ago>&group_by=user,account,partition,executor
and, in this process with Python's sqlite3 on a copy of the database, the
30-day user,account totals computed from the jobs table (json_extract of each
job's CPUs, clipped to the range): "from jobs".

Prints each one's median and p90 milliseconds and the ratios to the
baseline, and checks that the endpoint's CPU hours equal those computed
from the job rows (local jobs of the range in whole hours). Never fails on
timing: the machine is shared; read the ratios.
"""
import argparse
import calendar
import json
import os
import pathlib
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
HOUR_MS = 3600 * 1000
ACCOUNTS = ["ml-team", "physics", "bio", "vision", ""]
PARTITIONS = ["debug", "batch", "gpu"]


def start_larchd(exe, state, trainer):
    proc = subprocess.Popen([str(exe), "--listen", "127.0.0.1:0", "--state-dir", str(state),
                             "--trainer-path", trainer, "--log-level", "warn"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        sys.exit(f"bench_usage: larchd did not start: {line!r}")
    return proc, line.strip().rsplit(" ", 1)[1]


def stop(proc):
    proc.terminate()
    proc.wait(timeout=30)


def fill(db_path, jobs, slurm_jobs, users, days, rng):
    """Writes the jobs; returns seconds taken for each part."""
    db = sqlite3.connect(db_path, isolation_level=None)
    db.execute("PRAGMA foreign_keys = ON")
    names = [f"user{i:02d}" for i in range(users)]
    now = int(time.time() * 1000)
    t0 = time.monotonic()
    db.execute("BEGIN")
    for n in names:
        db.execute("INSERT OR IGNORE INTO users (name, role, created) VALUES (?, 'user', ?)",
                   (n, now))
    rows = []
    for i in range(jobs):
        start = now - rng.randrange(days * 24 * HOUR_MS)
        res = {"cpus_per_task": rng.randint(1, 8), "gpus_per_node": int(rng.random() < 0.1),
               "nodes": 1}
        acct = rng.choice(ACCOUNTS)
        if acct:
            res["account"] = acct
        spec = json.dumps({"name": "bench", "resources": res,
                           "parallel": {"ranks": rng.randint(1, 2)}}, separators=(",", ":"))
        rows.append((rng.choice(names), spec, rng.choice(PARTITIONS), start - 1000, start))
    db.executemany("INSERT INTO jobs (owner, name, spec, state, executor, partition, submit_time,"
                   " start_time) VALUES (?, 'bench', ?, 'RUNNING', 'local', ?, ?, ?)", rows)
    db.execute("COMMIT")
    t1 = time.monotonic()
    # the end of every job, as db_jobs_transition writes it: the trigger does the rest
    db.execute("BEGIN")
    db.execute("UPDATE jobs SET state = 'COMPLETED', end_time = min(?1, start_time + "
               "60000 + abs(random()) % (4 * 3600000)) WHERE state = 'RUNNING'", (now,))
    db.execute("COMMIT")
    t2 = time.monotonic()
    db.execute("BEGIN")
    srows = []
    for i in range(slurm_jobs):
        start = now - rng.randrange(days * 24 * HOUR_MS)
        end = min(now, start + rng.randrange(60000, 4 * HOUR_MS))
        srows.append((f"{i + 1}@{start // 1000 - 5}@{start // 1000}", rng.choice(names),
                      rng.choice(ACCOUNTS), rng.choice(PARTITIONS), start, end,
                      rng.randint(1, 16), rng.choice([0, 0, 0, 1, 2])))
    db.executemany("INSERT OR IGNORE INTO usage_jobs (source, key, user, account, partition, "
                   "start_ms, end_ms, cpus, gpus) VALUES ('slurm', ?, ?, ?, ?, ?, ?, ?, ?)",
                   srows)
    db.execute("COMMIT")
    t3 = time.monotonic()
    hours = db.execute("SELECT count(*) FROM usage_hours").fetchone()[0]
    db.close()
    return t1 - t0, t2 - t1, t3 - t2, hours


def from_jobs(db, from_ms, to_ms):
    """The 30-day local totals by user and account, computed from the job rows."""
    return db.execute(
        "SELECT owner, coalesce(json_extract(spec, '$.resources.account'), ''),"
        " sum((min(end_time, ?2) - max(start_time, ?1)) *"
        " json_extract(spec, '$.resources.cpus_per_task') * json_extract(spec, '$.parallel.ranks'))"
        " FROM jobs WHERE executor = 'local' AND start_time IS NOT NULL AND end_time > ?1"
        " AND start_time < ?2 GROUP BY 1, 2", (from_ms, to_ms)).fetchall()


def epoch_ms(text):
    return calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")) * 1000


def timed(fn, k):
    out = []
    for _ in range(k):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("LARCH_BUILD", "build"))
    ap.add_argument("--jobs", type=int, default=100000)
    ap.add_argument("--slurm-jobs", type=int, default=100000)
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=50)
    a = ap.parse_args()
    exe = pathlib.Path(a.build).resolve() / "service" / "larchd"
    if not exe.exists():
        sys.exit(f"bench_usage: {exe} is missing: build first")
    rng = random.Random(1)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-usage-"))
    proc = None
    try:
        state = tmp / "state"
        proc, _ = start_larchd(exe, state, shutil.which("true"))
        stop(proc)
        proc = None
        db_path = state / "larch.db"
        f_jobs, f_end, f_slurm, hours = fill(db_path, a.jobs, a.slurm_jobs, a.users, a.days, rng)
        size = db_path.stat().st_size / 2**20
        print(f"bench_usage: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
              f"{a.jobs} local jobs ({f_jobs:.1f} s to insert, {f_end:.1f} s to end them: "
              f"{a.jobs / f_end:.0f} job ends/s through the trigger), {a.slurm_jobs} Slurm jobs "
              f"({f_slurm:.1f} s, {a.slurm_jobs / f_slurm:.0f}/s), {hours} hour rows, "
              f"database {size:.0f} MiB")

        proc, url = start_larchd(exe, state, shutil.which("true"))
        token = (state / "admin.token").read_text().strip()
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {token}"
        now = time.time()
        ninety = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 90 * 86400))

        def get(path, **params):
            def call():
                r = s.get(url + path, params=params, timeout=60)
                assert r.status_code == 200, r.text
                return r
            return call

        # a read-only copy for the computation from the job rows
        copy = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        to_ms = int(now * 1000)
        from_ms = to_ms - 30 * 86400 * 1000
        cases = {
            "jobs": get("/v1/jobs", limit=1),
            "usage": get("/v1/usage"),
            "usage-day": get("/v1/usage", group_by="user,day"),
            "usage-90d": get("/v1/usage", **{"from": ninety,
                                             "group_by": "user,account,partition,executor"}),
            "from jobs": lambda: from_jobs(copy, from_ms, to_ms),
        }
        for fn in cases.values():
            fn()                       # warm: connections, page cache, statements
        times = {name: [] for name in cases}
        for _ in range(a.rounds):
            for name, fn in cases.items():
                times[name] += timed(fn, a.requests if name != "from jobs" else
                                     max(3, a.requests // 10))
        base = statistics.median(times["jobs"])
        print(f"{'what':<11} {'median ms':>10} {'p90 ms':>8} {'x jobs':>8}   "
              f"({a.rounds} rounds, {a.requests} requests each)")
        for name, t in times.items():
            t.sort()
            med, p90 = statistics.median(t), t[int(0.9 * (len(t) - 1))]
            print(f"{name:<11} {med:>10.2f} {p90:>8.2f} {med / base:>8.2f}")
        med_usage, med_jobs = statistics.median(times["usage"]), statistics.median(times["from jobs"])
        print(f"from jobs / usage: {med_jobs / med_usage:.1f}x")

        # the same CPU hours, whole hours of local jobs computed from the rows
        u = s.get(url + "/v1/usage", params={"group_by": "executor"}, timeout=60).json()
        lo, hi = epoch_ms(u["from"]), epoch_ms(u["to"])
        local = next((r["cpu_hours"] for r in u["usage"] if r["executor"] == "local"), 0)
        rows = sum(r[2] for r in from_jobs(copy, lo, hi)) / 3.6e6
        print(f"check: local CPU hours {local:.1f} from /v1/usage, {rows:.1f} from the job rows "
              f"({'same' if abs(local - rows) < 0.01 * max(rows, 1) else 'DIFFERENT'})")
        copy.close()
    finally:
        if proc:
            stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
