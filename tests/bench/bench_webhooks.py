#!/usr/bin/env python3
"""Webhooks: 1,000 job ends delivered across a kill -9 of larchd (issue 39).

    LARCH_BUILD_DIR=build python tests/bench/bench_webhooks.py
        [--jobs 1000] [--slots 32] [--submitters 8] [--no-baseline] [--no-backlog]
        [--larchd NAME=BUILD_DIR ...] [--tmp DIR]

A real larchd (tests/integration/larchd.py; run_as service) whose trainer
is a stand-in that exits 0 at once, with --slots local job slots, and a real
receiver: http.server in a process of its own on loopback that answers 200
and appends a line per request (arrival time, X-Larch-Delivery, the body's
event id, type, job and time) to a file. The admin subscribes one webhook to
job.completed, job.failed and job.cancelled (every way a job ends), then
--submitters threads POST --jobs jobs (each with an Idempotency-Key, retried
while larchd is down, so that no job is lost or made twice). The events
measured are the jobs' ends: job.completed, and job.failed for the jobs
whose trainer ended while larchd was dead (the restart cannot know their
exit status).

Four runs, each on a new larchd and state directory:

  completions, baseline     the jobs end as they run (about 20 a second
                            here: the runner, not the sender, sets the pace)
  completions, kill -9      the same, larchd killed with SIGKILL once half
                            of the events have been received and started
                            again on the same state directory
  backlog, baseline         the receiver holds the first delivery until
                            every job has ended (larchd's webhook timeout
                            is raised to 10 minutes), so that all the
                            deliveries are pending at once: the sender's
                            own rate, from the outbox
  backlog, kill -9          the same, killed at half of the backlog: the
                            outbox is full across the kill

Each run waits until every job has ended and its end event was received,
and prints: events expected (one per job, its final state), distinct
delivery ids and event ids received, duplicates (receipts beyond the first
of a delivery: an attempt cut by the kill is sent again, as at-least-once
allows), missing ones, the events by type, job ends per second and
deliveries per second (first to last receipt), and the latency from the
job's state change (the event's time: that of the job event larchd
recorded) to the first receipt, p50, p99 and max; with a kill, also for
the state changes after the restart and for the events that changed
before the kill and were received after the restart. The baselines are
the same runs without the kill, side by side. Timing decides nothing; a
lost event is printed as MISSING and the exit status is 1.
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
EVENTS = ["job.completed", "job.failed", "job.cancelled"]


# ---- the receiver (a process of its own: --receive OUT) ---------------------------------

def receive(out, gate=None):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    lock = threading.Lock()
    f = open(out, "a")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            while gate and not os.path.exists(gate):
                time.sleep(0.005)
            t = time.time()
            body = self.rfile.read(int(self.headers["Content-Length"]))
            doc = json.loads(body)
            line = json.dumps({"t": t, "delivery": self.headers["X-Larch-Delivery"],
                               "event": doc["id"], "type": doc["type"],
                               "job": doc["job"]["id"], "time": doc["time"]})
            with lock:
                f.write(line + "\n")
                f.flush()
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    print(httpd.server_address[1], flush=True)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    httpd.serve_forever()


def read_receipts(path):
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.endswith("}")]


def iso_ms(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def states(s, url, auth):
    """Every job's state: {id: state}."""
    finals = {}
    cursor = None
    while True:
        params = {"limit": 500, **({"cursor": cursor} if cursor else {})}
        r = s.get(url + "/v1/jobs", params=params, headers=auth, timeout=30)
        assert r.status_code == 200, r.text
        page = r.json()
        for j in page["jobs"]:
            finals[j["id"]] = j["state"]
        cursor = page.get("next_cursor")
        if not cursor:
            return finals


def wait_ended(s, url, auth, jobs, timeout):
    deadline = time.monotonic() + timeout
    while True:
        finals = states(s, url, auth)
        if all(finals.get(j) in FINAL for j in jobs):
            return
        assert time.monotonic() < deadline, "jobs still running"
        time.sleep(0.25)


# ---- one run ----------------------------------------------------------------------------

def run(args, tmp, kill, burst, variant):
    import requests
    from larchd import Larchd, stand_in_trainer

    trainer = stand_in_trainer(tmp / "fake-train", "exit 0\n")
    out = tmp / "receipts.jsonl"
    gate = tmp / "gate"
    rx = subprocess.Popen([sys.executable, __file__, "--receive", str(out)] +
                          ([str(gate)] if burst else []), stdout=subprocess.PIPE, text=True)
    port = int(rx.stdout.readline())
    largs = ["--trainer-path", str(trainer), "--run-as", "service", "--log-level", "warn",
             "--max-local-jobs", str(args.slots), "--webhook-timeout-ms", "600000"]
    d = Larchd(tmp, args=largs, env=variant[2])
    d.exe = variant[1]
    d.start()
    state = {"d": d, "restarted_at": None, "killed_at": None}
    try:
        auth = {**d.auth(), "Content-Type": "application/json"}
        r = requests.post(d.url + "/v1/webhooks", headers=auth, timeout=10,
                          json={"url": f"http://127.0.0.1:{port}/hook", "events": EVENTS,
                                "secret": "bench-secret-bench"})
        assert r.status_code == 201, r.text
        spec = {"name": "wh", "model": {"type": "mlp", "hidden": [16]},
                "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
                "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 1}
        local = threading.local()

        def submit(i):
            if not hasattr(local, "s"):
                local.s = requests.Session()
            key = {"Idempotency-Key": f"bench-{uuid.uuid4()}"}
            deadline = time.monotonic() + 120
            while True:
                try:
                    r = local.s.post(state["d"].url + "/v1/jobs", json=dict(spec, seed=i),
                                     headers={**auth, **key}, timeout=30)
                    if r.status_code in (200, 201):
                        return r.json()["id"]
                    err = r.text
                except requests.RequestException as e:
                    err = str(e)
                    local.s = requests.Session()
                assert time.monotonic() < deadline, f"submit {i}: {err}"
                time.sleep(0.1)

        def killer():
            while len(read_receipts(out)) < args.jobs // 2:
                time.sleep(0.02)
            old = state["d"]
            old.proc.kill()
            old.proc.wait(10)
            state["killed_at"] = time.time()
            n = len(read_receipts(out))
            # the stand-in trainers of the killed larchd exit by themselves
            new = Larchd(tmp, args=largs, env=variant[2], state_dir=old.state_dir)
            new.exe = variant[1]
            state["d"] = new.start()
            state["restarted_at"] = time.time()
            print(f"  killed larchd (SIGKILL) at {n} receipts; restarted in "
                  f"{state['restarted_at'] - state['killed_at']:.2f} s", flush=True)

        t0 = t_start = time.time()
        k = threading.Thread(target=killer, daemon=True) if kill else None
        if k and not burst:
            k.start()
        with concurrent.futures.ThreadPoolExecutor(args.submitters) as pool:
            jobs = list(pool.map(submit, range(args.jobs)))
        t_submitted = time.time()
        assert len(set(jobs)) == args.jobs, "a submit made the same job twice"
        if burst:   # the receiver holds the first delivery until every job has ended
            wait_ended(requests.Session(), state["d"].url, auth, jobs, args.timeout)
            t0 = time.time()
            gate.touch()
            if k:
                k.start()
        if k:
            k.join(300)
            assert not k.is_alive(), "the kill never came: too few receipts"
        # every job ended, and its end received
        deadline = time.monotonic() + args.timeout
        s = requests.Session()
        while True:
            finals = states(s, state["d"].url, auth)
            ended = [j for j in jobs if finals.get(j) in FINAL]
            got = {x["event"] for x in read_receipts(out)}
            if len(ended) == args.jobs and len(got) >= args.jobs:
                break
            if time.monotonic() > deadline:
                print(f"  timed out: {len(ended)} jobs ended, {len(got)} events received")
                break
            time.sleep(0.25)
        t_end = time.time()
        failed = [j for j in jobs if finals.get(j) == "FAILED"]
        if failed:
            r = s.get(f"{state['d'].url}/v1/jobs/{failed[0]}", headers=auth, timeout=30)
            print(f"  {len(failed)} jobs FAILED, e.g. {failed[0]}: {r.json().get('reason')!r}")
        time.sleep(1.0)   # late duplicates
        print(f"  jobs {args.jobs}: submitted in {t_submitted - t_start:.1f} s; all ended and "
              f"their events received {t_end - t0:.1f} s after "
              f"{'the receiver opened' if burst else 'the first submit'}")
        return report(args, read_receipts(out), jobs, finals, state, t0)
    finally:
        if state["d"].running():
            state["d"].stop()
        rx.send_signal(signal.SIGTERM)
        rx.wait(10)


def report(args, receipts, jobs, finals, state, t0):
    by_delivery = {}
    for x in receipts:
        by_delivery.setdefault(x["delivery"], []).append(x)
    events = {}
    for x in receipts:
        events.setdefault(x["event"], x)
    expected = {j: "job." + finals.get(j, "?").lower() for j in jobs}
    got = {}
    for x in events.values():
        got.setdefault(x["job"], []).append(x["type"])
    missing = [j for j in jobs if expected[j] not in got.get(j, [])]
    extra = sum(len(v) for v in got.values()) - (args.jobs - len(missing))
    dups = len(receipts) - len(by_delivery)
    lat = {e: (x["t"] - iso_ms(x["time"])) * 1000 for e, x in events.items()}
    restarted = state["restarted_at"]
    after = [v for e, v in lat.items() if restarted and iso_ms(events[e]["time"]) >= restarted]
    across = [v for e, v in lat.items() if restarted and
              iso_ms(events[e]["time"]) < state["killed_at"] and events[e]["t"] >= restarted]
    types = {}
    for x in events.values():
        types[x["type"]] = types.get(x["type"], 0) + 1
    last_time = max((iso_ms(x["time"]) for x in events.values()), default=t0)
    first_time = min((iso_ms(x["time"]) for x in events.values()), default=t0)
    last_rx = max((x["t"] for x in events.values()), default=t0)
    first_rx = min((x["t"] for x in events.values()), default=t0)
    print(f"  job ends/s {len(events) / max(last_time - first_time, 1e-9):.0f}, "
          f"deliveries/s {len(events) / max(last_rx - first_rx, 1e-9):.0f}")
    print(f"  events expected {args.jobs}, distinct delivery ids {len(by_delivery)}, distinct "
          f"event ids {len(events)}, receipts {len(receipts)}, duplicates {dups}, "
          f"missing {len(missing)}, unexpected {extra}")
    print(f"  by type: {', '.join(f'{k} {v}' for k, v in sorted(types.items()))}")
    v = list(lat.values())
    print(f"  latency state change -> receipt, ms: p50 {pct(v, 50):.0f}, p99 {pct(v, 99):.0f}, "
          f"max {max(v, default=float('nan')):.0f} (n={len(v)})")
    if restarted:
        print(f"    state change after the restart: p50 {pct(after, 50):.0f}, p99 "
              f"{pct(after, 99):.0f} (n={len(after)}); before the kill, received after the "
              f"restart: p50 {pct(across, 50):.0f}, max {max(across, default=float('nan')):.0f} "
              f"(n={len(across)})")
    if missing:
        print(f"  MISSING: {', '.join(f'{j} ({expected[j]})' for j in missing[:20])}")
    return {"missing": len(missing), "dups": dups, "p50": pct(v, 50), "p99": pct(v, 99)}


def main():
    if len(sys.argv) in (3, 4) and sys.argv[1] == "--receive":
        return receive(*sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--slots", type=int, default=32, help="larchd's max_local_jobs")
    ap.add_argument("--submitters", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run after submits")
    ap.add_argument("--no-baseline", action="store_true", help="only the runs with the kill")
    ap.add_argument("--no-backlog", action="store_true", help="only the job completions")
    ap.add_argument("--tmp", default=None, help="where the state dirs go")
    ap.add_argument("--larchd", action="append", metavar="NAME=DIR",
                    help="run each scenario with the larchd of the build tree DIR (its "
                         "DIR/{api,db,trainer} first on LD_LIBRARY_PATH); repeat to compare "
                         "builds side by side, in alternating order (default: BUILD alone)")
    args = ap.parse_args()
    from larchd import BUILD
    variants = []
    for v in args.larchd or [f"={BUILD}"]:
        name, _, tree = v.rpartition("=")
        tree = pathlib.Path(tree).resolve()
        env = dict(os.environ, LD_LIBRARY_PATH=":".join(
            [str(tree / x) for x in ("api", "db", "trainer")] +
            [p for p in [os.environ.get("LD_LIBRARY_PATH")] if p]))
        variants.append((name, tree / "service" / "larchd", env))
    runs = []
    for burst in (False, True)[:1 if args.no_backlog else 2]:
        what = "backlog" if burst else "completions"
        if not args.no_baseline:
            runs.append((f"{what}, baseline (no kill)", False, burst))
        runs.append((f"{what}, kill -9 at half, restart", True, burst))
    bad = 0
    for i, (name, kill, burst) in enumerate(runs):
        order = variants if i % 2 == 0 else variants[::-1]
        for variant in order:
            tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-wh-", dir=args.tmp))
            print(f"{name}{' [' + variant[0] + ']' if variant[0] else ''}:", flush=True)
            try:
                res = run(args, tmp, kill, burst, variant)
                bad += res["missing"]
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    print("goal (issue 39): every event delivered across the kill (missing 0), p50 printed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
