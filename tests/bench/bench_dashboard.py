#!/usr/bin/env python3
"""tests/bench/bench_dashboard.py - what live dashboards cost larchd: 1
dashboard client against C (100) of them, side by side in one run, with the
same stream of jobs going through.

    python3 tests/bench/bench_dashboard.py [--build DIR] [--clients C]
                                           [--seconds S] [--slurm] [--rounds R]
                                           [--client-impl c|python] [--job small|fmnist]

Each simulated client does what the dashboard's jobs page does: it
long-polls GET /v1/events, and on each change GETs the job list
(?limit=50, with If-None-Match) and every changed job (with If-None-Match).
Meanwhile one job is submitted every second (larch-train, 20 steps of a tiny
MLP). Phase "1 client" and phase "C clients" each run S (20) seconds, R (2)
rounds, alternating.

The clients are, by default, build/tests/bench/dash_clients (C, libcurl's
multi interface, all in one thread): real dashboards run in browsers
elsewhere, and a hundred Python threads (--client-impl python) take about a
core of the two larchd has. The jobs are, by default, an MLP on a small IDX
set the bench writes (512 images of 16x16, about 50 ms of CPU); --job fmnist
trains on Fashion-MNIST instead (about 0.7 s of CPU a job, most of it
reading the data: a third of the machine at one job a second).

With --slurm the bench starts its own single-node cluster
(deploy/slurm/start.sh in a temporary directory, a free port; as root) and
larchd uses the Slurm executor: the Slurm commands larchd ran in each phase
come from /metrics (larch_slurm_calls_total) and must not grow with the
clients (HTTP reads never reach Slurm). Without --slurm the local executor
runs the jobs (no Slurm calls to count).

Printed: Slurm calls per second in each phase, the GETs served and their
latency (p50/p99 measured by the clients, and p99 from larchd's own
histogram, which leaves out the clients' Python), the share of 304s, and
the latency a separate probe sees (one thread GETting the job list or a job
every 50 ms): the 100 clients' own clocks include their queueing for the
2 CPUs they share with larchd, the probe's far less.
Never fails on timing: the machine is shared; read the figures.
"""
import argparse
import concurrent.futures
import json
import multiprocessing
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC = {"name": "dash", "model": {"type": "mlp", "hidden": [16]},
        "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
        "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 20, "log_every": 5}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- one simulated dashboard ------------------------------------------------------------

def dashboard(url, token, stop_at, out):
    """Follows the feed until stop_at; appends (latency_s, status) of every
    non-poll GET to out."""
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {token}"
    etags = {}

    def get(path):
        headers = {"If-None-Match": etags[path]} if path in etags else {}
        t0 = time.perf_counter()
        r = s.get(url + path, headers=headers, timeout=30)
        out.append((time.perf_counter() - t0, r.status_code))
        if r.status_code == 200 and "ETag" in r.headers:
            etags[path] = r.headers["ETag"]

    start = s.get(url + "/v1/events", timeout=30).json()
    last, stream = start["last"], start["stream"]
    get("/v1/jobs?limit=50")
    while time.monotonic() < stop_at:
        wait = max(1, min(25, int(stop_at - time.monotonic())))
        body = s.get(url + "/v1/events", params={"after": last, "stream": stream,
                                                "timeout": wait}, timeout=wait + 30).json()
        last = body["last"]
        if not body["changes"] and not body["reset"]:
            continue
        get("/v1/jobs?limit=50")
        for job in sorted({c["job"] for c in body["changes"]}):
            get(f"/v1/jobs/{job}")


def c_clients(exe, url, token, n, seconds, queue):
    """Runs dash_clients; puts its summary (a dict) on queue."""
    out = subprocess.run([str(exe), "--url", url, "--token", token, "--clients", str(n),
                          "--seconds", str(seconds)], capture_output=True, text=True,
                         timeout=seconds + 120)
    if out.returncode != 0:
        sys.exit(f"bench_dashboard: dash_clients failed: {out.stderr}")
    queue.put(json.loads(out.stdout))


def client_process(url, token, n, seconds, queue):
    stop_at = time.monotonic() + seconds
    out = []
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        for f in [pool.submit(dashboard, url, token, stop_at, out) for _ in range(n)]:
            f.result()
    queue.put(out)


# ---- larchd and its counters -------------------------------------------------------------

def scrape(url, token):
    text = requests.get(url + "/metrics", headers={"Authorization": f"Bearer {token}"},
                        timeout=30).text
    slurm = sum(float(v) for v in re.findall(r"^larch_slurm_calls_total\{[^}]*\} (\S+)$",
                                             text, re.M))
    # larchd's latency histogram of every GET but the long poll
    buckets = {}
    for route, le, v in re.findall(
            r'^larch_http_request_duration_seconds_bucket\{method="GET",route="([^"]+)",'
            r'le="([^"]+)"\} (\S+)$', text, re.M):
        if route in ("/v1/events", "/metrics"):
            continue
        buckets[le] = buckets.get(le, 0) + float(v)
    return slurm, buckets


def hist_p(before, after, q):
    """The upper bound of the bucket that holds quantile q of what was
    observed between two scrapes."""
    les = sorted((float(le) if le != "+Inf" else float("inf"), le) for le in after)
    total = after["+Inf"] - before.get("+Inf", 0)
    if total <= 0:
        return float("nan")
    for bound, le in les:
        if after[le] - before.get(le, 0) >= q * total:
            return bound
    return float("inf")


def submitter(url, token, stop, ids, spec):
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {token}"
    while not stop.wait(1.0):
        r = s.post(url + "/v1/jobs", json=spec, timeout=30)
        if r.status_code == 201:
            ids.append(r.json()["id"])


def probe(url, token, stop, out):
    """One more client, not a dashboard: a GET of the job list or the newest
    job every 50 ms, timing larchd under the dashboards' load (its own
    Python is one thread, not a hundred)."""
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {token}"
    i = 0
    while not stop.wait(0.05):
        path = "/v1/jobs?limit=50" if i % 2 == 0 else "/v1/jobs/j-000001"
        t0 = time.perf_counter()
        s.get(url + path, timeout=30)
        out.append(time.perf_counter() - t0)
        i += 1


def cpu_seconds():
    """CPU seconds the whole machine spent (user + system), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    return (int(fields[0]) + int(fields[1]) + int(fields[2])) / os.sysconf("SC_CLK_TCK")


def phase(url, token, clients, seconds, dash_exe):
    slurm0, hist0 = scrape(url, token)
    probe_stop, probe_lat = threading.Event(), []
    prober = threading.Thread(target=probe, args=(url, token, probe_stop, probe_lat))
    prober.start()
    t0, cpu0 = time.monotonic(), cpu_seconds()
    queue = multiprocessing.Queue()
    if dash_exe:
        c_clients(dash_exe, url, token, clients, seconds, queue)
        summary = queue.get()
    else:
        procs_n = min(4, clients)
        procs = []
        for i in range(procs_n):
            n = clients // procs_n + (1 if i < clients % procs_n else 0)
            p = multiprocessing.Process(target=client_process,
                                        args=(url, token, n, seconds, queue))
            p.start()
            procs.append(p)
        samples = []
        for _ in procs:
            samples += queue.get()
        for p in procs:
            p.join()
        lat = sorted(s[0] for s in samples)
        summary = {"gets": len(samples),
                   "not_modified": sum(1 for s in samples if s[1] == 304),
                   "errors": sum(1 for s in samples if s[1] not in (200, 304)),
                   "p50_ms": lat[len(lat) // 2] * 1e3 if lat else float("nan"),
                   "p99_ms": lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3
                   if lat else float("nan")}
    probe_stop.set()
    prober.join()
    took, cpu = time.monotonic() - t0, cpu_seconds() - cpu0
    slurm1, hist1 = scrape(url, token)
    probe_lat.sort()

    def pct(q, lat=probe_lat):
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1e3 if lat else float("nan")
    return {"clients": clients, "seconds": took, "slurm_per_s": (slurm1 - slurm0) / took,
            "gets": summary["gets"], "not_modified": summary["not_modified"],
            "errors": summary["errors"], "p50": summary["p50_ms"], "p99": summary["p99_ms"],
            "busy": cpu / took / (os.cpu_count() or 1),
            "probe_p50": pct(0.50), "probe_p99": pct(0.99),
            "server_p99": hist_p(hist0, hist1, 0.99) * 1e3}


def start_cluster(tmp):
    sdir = tmp / "slurm"
    env = {**os.environ, "LARCH_SLURM_DIR": str(sdir), "LARCH_SLURM_PORT": str(free_port())}
    r = subprocess.run([str(ROOT / "deploy/slurm/start.sh")], env=env, capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0:
        sys.exit(f"bench_dashboard: the Slurm cluster did not start:\n{r.stdout}{r.stderr}")
    os.environ["LARCH_SLURM_DIR"] = str(sdir)
    os.environ["SLURM_CONF"] = str(sdir / "slurm.conf")
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("LARCH_BUILD", "build"))
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--slurm", action="store_true")
    ap.add_argument("--client-impl", choices=("c", "python"), default="c")
    ap.add_argument("--job", choices=("small", "fmnist"), default="small")
    a = ap.parse_args()
    build = pathlib.Path(a.build)
    build = build if build.is_absolute() else ROOT / build
    larchd = build / "service" / "larchd"
    dash_exe = build / "tests" / "bench" / "dash_clients" if a.client_impl == "c" else None
    if dash_exe and not dash_exe.exists():
        sys.exit(f"bench_dashboard: {dash_exe} is missing (cmake --build {a.build})")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-dash."))
    spec = dict(SPEC)
    if a.job == "small":
        sys.path.insert(0, str(ROOT / "tests" / "integration"))
        from datasets import write_image_set
        (tmp / "data").mkdir()
        spec["data"] = write_image_set(tmp / "data")
    cluster = start_cluster(tmp) if a.slurm else None
    args = [str(larchd), "--listen", "127.0.0.1:0", "--state-dir", str(tmp / "state"),
            "--log-level", "warn"]
    if a.slurm:
        args += ["--executor", "slurm", "--slurm-poll-ms", "1000"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=open(tmp / "larchd.log", "w"))
    stop = threading.Event()
    try:
        line = proc.stdout.readline().decode()
        m = re.search(r"listening on (http://\S+)", line)
        if not m:
            sys.exit(f"bench_dashboard: larchd did not start: {line}")
        url = m.group(1)
        token = (tmp / "state" / "admin.token").read_text().strip()
        ids = []
        sub = threading.Thread(target=submitter, args=(url, token, stop, ids, spec), daemon=True)
        sub.start()
        time.sleep(2)
        rows = []
        for r in range(a.rounds):
            order = (1, a.clients) if r % 2 == 0 else (a.clients, 1)
            for c in order:
                rows.append(phase(url, token, c, a.seconds, dash_exe))
        stop.set()
        sub.join()
        executor = "slurm" if a.slurm else "local"
        print(f"\nbench_dashboard: {executor} executor, one job submitted a second "
              f"({len(ids)} in all, {a.job} jobs), {a.client_impl} clients, "
              f"{a.seconds:.0f} s phases, {a.rounds} rounds, {os.cpu_count()} CPUs")
        print(f"{'clients':>8} {'slurm/s':>8} {'GETs':>6} {'304':>5} {'err':>4} "
              f"{'p50 ms':>7} {'p99 ms':>7} {'larchd p99':>10} {'probe p50':>9} {'probe p99':>9}"
              f" {'CPU busy':>8}")
        for row in rows:
            print(f"{row['clients']:>8} {row['slurm_per_s']:>8.2f} {row['gets']:>6} "
                  f"{row['not_modified']:>5} {row['errors']:>4} {row['p50']:>7.1f} "
                  f"{row['p99']:>7.1f} {'<= %g' % row['server_p99']:>10} "
                  f"{row['probe_p50']:>9.1f} {row['probe_p99']:>9.1f} {row['busy']:>8.0%}")
        one = [r for r in rows if r["clients"] == 1]
        many = [r for r in rows if r["clients"] == a.clients]
        mean = lambda rs, k: sum(r[k] for r in rs) / len(rs)  # noqa: E731
        if a.slurm:
            print(f"Slurm calls per second, {a.clients} clients / 1 client: "
                  f"{mean(many, 'slurm_per_s'):.2f} / {mean(one, 'slurm_per_s'):.2f} = "
                  f"{mean(many, 'slurm_per_s') / max(mean(one, 'slurm_per_s'), 1e-9):.2f}x")
        print(f"GET p99 with {a.clients} clients: probe {max(r['probe_p99'] for r in many):.1f} ms"
              f" (1 client: {max(r['probe_p99'] for r in one):.1f} ms), larchd's histogram <= "
              f"{max(r['server_p99'] for r in many):g} ms, the clients' own clocks "
              f"{max(r['p99'] for r in many):.1f} ms")
    finally:
        stop.set()
        proc.terminate()
        proc.wait(timeout=60)
        if cluster:
            subprocess.run([str(ROOT / "deploy/slurm/stop.sh")], env=cluster,
                           capture_output=True, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
