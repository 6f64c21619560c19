#!/usr/bin/env python3
"""tests/bench/bench_slowloris.py - a well-behaved client's latency while
a thousand connections trickle request heads (slowloris), against its
latency with no attack, side by side in one run.

    python3 tests/bench/bench_slowloris.py [--build DIR] [--connections 1000]
                                           [--addresses 20] [--every 1.0]
                                           [--seconds 15] [--rounds 2]
                                           [--old-connections 1100] [--no-old]

Starts larchd as deployed (its defaults: header_timeout 10 s,
max_connections_per_ip 64, max_connections 4096; request log at info, to a
file) and times a probe: one client that GETs /healthz and then /v1/jobs
(a user's token) every 10 ms, each on a fresh connection (as the CLI and
curl do: a kept-alive connection would never need a new slot). Phases of
`--seconds`, in turn, each round:

  none    no attack;
  spread  `--connections` connections from `--addresses` loopback addresses
          (127.0.0.2 ...; 50 each by default, under the per-address cap),
          each sending one byte of a request head every `--every` seconds
          and never ending it; one closed by larchd is opened again at its
          next byte (a real slowloris reconnects);
  one     the same connections from 127.0.0.2 alone (the cap refuses all but
          64, and each refused one tries again a second later).

The attackers run in a process of their own. Then, unless `--no-old`, a
second larchd with the settings before header_timeout and the cap
(max_connections 1024, header_timeout 3600, max_connections_per_ip 0)
against `--old-connections` spread connections, more than its slots: what
the issue reported.

Printed per phase: the probe's p50 and p99 (ms) for each GET, the p99's
ratio to phase "none" (the target: within 2x), the probe's failures (no
reply in 5 s; they count as infinitely slow in the percentiles), larchd's
open connections midway, the connections it dropped (header_timeout,
per_ip_limit; GET /metrics), its CPU seconds per second and the machine's.
The machine is shared: the attackers, the probe and larchd run on the same
cores. Read the ratios, and repeat. Never fails on timing.
"""
import argparse
import errno
import http.client
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

ROOT = pathlib.Path(__file__).resolve().parents[2]
HEAD_LINE = b"GET /healthz HTTP/1.1\r\n"
HEADER = b"X-Slow: a\r\n"


# ---- the attackers -----------------------------------------------------------------------

def attack(port, n, sources, every, stop, ready, out):
    """n connections, connection i from sources[i % len(sources)], each
    sending the next byte of a head that never ends every `every` seconds,
    spread evenly over that time; reopened when larchd closes them."""
    socks, sent = [None] * n, [0] * n
    counts = {"opened": 0, "closed": 0}

    def open_one(i):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.bind((sources[i % len(sources)], 0))
        s.connect_ex(("127.0.0.1", port))
        socks[i], sent[i] = s, 0
        counts["opened"] += 1

    def byte(k):
        if k < len(HEAD_LINE):
            return HEAD_LINE[k:k + 1]
        k = (k - len(HEAD_LINE)) % len(HEADER)
        return HEADER[k:k + 1]

    for i in range(n):
        open_one(i)
    ready.set()
    start, done = time.monotonic(), 0
    while not stop.is_set():
        due = int((time.monotonic() - start) / every * n)
        while done < due:
            i = done % n
            done += 1
            s = socks[i]
            closed = False
            try:
                closed = s.recv(1) == b""
            except BlockingIOError:
                pass
            except OSError as e:
                closed = e.errno != errno.ENOTCONN    # ENOTCONN: still connecting
            if not closed:
                try:
                    s.send(byte(sent[i]))
                    sent[i] += 1
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError as e:
                    closed = e.errno not in (errno.ENOTCONN, errno.EAGAIN)
            if closed:
                s.close()
                counts["closed"] += 1
                open_one(i)
        stop.wait(0.005)
    for s in socks:
        s.close()
    out.put(counts)


# ---- the probe ---------------------------------------------------------------------------

def probe(port, token, seconds):
    """GET /healthz and GET /v1/jobs, alternately, every 10 ms, each on a
    new connection; returns {path: [seconds or None for a failure]}."""
    paths = [("/healthz", {}), ("/v1/jobs", {"Authorization": f"Bearer {token}"})]
    lat = {p: [] for p, _ in paths}
    end, i = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        path, headers = paths[i % 2]
        i += 1
        t0 = time.perf_counter()
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", path, headers=headers)
            r = c.getresponse()
            r.read()
            c.close()
            ok = r.status == 200
        except OSError:
            ok = False
        dt = time.perf_counter() - t0
        lat[path].append(dt if ok else None)
        time.sleep(max(0.0, 0.01 - dt))
    return lat


def pct(samples, q):
    """Quantile q in ms, a failure counting as infinitely slow."""
    if not samples:
        return float("nan")
    xs = sorted(float("inf") if x is None else x for x in samples)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3


# ---- larchd ------------------------------------------------------------------------------

class Larchd:
    def __init__(self, exe, tmp, name, args=()):
        self.dir = tmp / name
        self.dir.mkdir()
        self.proc = subprocess.Popen(
            [str(exe), "--listen", "127.0.0.1:0", "--state-dir", str(self.dir / "state"),
             "--log-file", str(self.dir / "larchd.log"), *args],
            stdout=subprocess.PIPE, stderr=open(self.dir / "stderr", "w"))
        line = self.proc.stdout.readline().decode()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if not m:
            sys.exit(f"bench_slowloris: larchd did not start: {line}"
                     f"{(self.dir / 'stderr').read_text()}")
        self.port = int(m.group(1))
        self.admin = (self.dir / "state" / "admin.token").read_text().strip()
        made = subprocess.run([str(exe), "token", "create", "--user", "bench", "--role", "user",
                               "--state-dir", str(self.dir / "state")],
                              capture_output=True, text=True, timeout=60)
        if made.returncode != 0:
            sys.exit(f"bench_slowloris: token create: {made.stderr}")
        self.user = made.stdout.strip()

    def metrics(self):
        """larchd's connection counters; {} when it does not answer in 5 s
        (the old settings under attack)."""
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            c.request("GET", "/metrics", headers={"Authorization": f"Bearer {self.admin}"})
            text = c.getresponse().read().decode()
            c.close()
        except OSError:
            return {}
        out = {}
        for name, labels, v in re.findall(r"^(larch_http_connections_\w+)(\{[^}]*\})? (\S+)$",
                                          text, re.M):
            out[name + (labels or "")] = float(v)
        return out

    def cpu_seconds(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def machine_cpu_seconds():
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    return (int(fields[0]) + int(fields[1]) + int(fields[2])) / os.sysconf("SC_CLK_TCK")


def phase(server, name, n, sources, every, seconds):
    """One phase: the attackers (n connections; none when 0) and the probe
    for `seconds`; what larchd dropped counts from the attack's start."""
    stop, ready = multiprocessing.Event(), multiprocessing.Event()
    out = multiprocessing.Queue()
    attacker = None
    m0 = server.metrics()
    try:
        if n:
            attacker = multiprocessing.Process(target=attack, daemon=True,
                                               args=(server.port, n, sources, every, stop,
                                                     ready, out))
            attacker.start()
            ready.wait(60)
            time.sleep(2)                   # the connections in and trickling
        cpu0, mcpu0, t0 = server.cpu_seconds(), machine_cpu_seconds(), time.monotonic()
        midway = {}
        sampler = threading.Timer(seconds / 2, lambda: midway.update(server.metrics()))
        sampler.start()
        lat = probe(server.port, server.user, seconds)
        sampler.join()
        took = time.monotonic() - t0
        cpu1, mcpu1 = server.cpu_seconds(), machine_cpu_seconds()
    finally:
        stop.set()
    counts = {}
    if attacker:
        counts = out.get(timeout=60)
        attacker.join()
        time.sleep(1)                       # larchd sees the attackers go
    m1 = server.metrics()

    def drop(reason):
        key = f'larch_http_connections_dropped_total{{reason="{reason}"}}'
        return int(m1.get(key, 0) - m0.get(key, 0))
    return {"name": name, "lat": lat, "open": int(midway.get("larch_http_connections_open", 0)),
            "head": drop("header_timeout"), "per_ip": drop("per_ip_limit"),
            "cpu": (cpu1 - cpu0) / took, "busy": (mcpu1 - mcpu0) / took / (os.cpu_count() or 1),
            "reopened": counts.get("closed", 0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("LARCH_BUILD", "build"))
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--addresses", type=int, default=20)
    ap.add_argument("--every", type=float, default=1.0)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--old-connections", type=int, default=1100)
    ap.add_argument("--no-old", action="store_true")
    a = ap.parse_args()
    build = pathlib.Path(a.build)
    build = build if build.is_absolute() else ROOT / build
    exe = build / "service" / "larchd"
    if not exe.exists():
        sys.exit(f"bench_slowloris: {exe} is missing (cmake --build {a.build})")
    spread = [f"127.0.0.{2 + i}" for i in range(a.addresses)]
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-slowloris."))
    servers = []
    try:
        server = Larchd(exe, tmp, "larchd")
        servers.append(server)
        phases = [("none", 0, spread), ("spread", a.connections, spread),
                  ("one", a.connections, ["127.0.0.2"])]
        rows = {name: [] for name, _, _ in phases}
        for r in range(a.rounds):
            for name, n, sources in (phases if r % 2 == 0 else phases[::-1]):
                row = phase(server, name, n, sources, a.every, a.seconds)
                rows[name].append(row)
                print(f"round {r + 1} {name:>6}: healthz p99 "
                      f"{pct(row['lat']['/healthz'], 0.99):.2f} ms, jobs p99 "
                      f"{pct(row['lat']['/v1/jobs'], 0.99):.2f} ms, open {row['open']}, "
                      f"dropped {row['head']} + {row['per_ip']}", flush=True)
        old = None
        if not a.no_old:
            server.stop()
            servers.remove(server)
            oldd = Larchd(exe, tmp, "old", ["--max-connections", "1024", "--header-timeout",
                                           "3600", "--max-connections-per-ip", "0"])
            servers.append(oldd)
            old = phase(oldd, "old", a.old_connections, spread, a.every, a.seconds)

        def merged(name):
            rs = rows[name]
            lat = {p: sum((r["lat"][p] for r in rs), []) for p in ("/healthz", "/v1/jobs")}
            return {"name": name, "lat": lat, "open": max(r["open"] for r in rs),
                    "head": sum(r["head"] for r in rs), "per_ip": sum(r["per_ip"] for r in rs),
                    "cpu": sum(r["cpu"] for r in rs) / len(rs),
                    "busy": sum(r["busy"] for r in rs) / len(rs)}

        base = merged("none")
        print(f"\nbench_slowloris: larchd defaults (header_timeout 10 s, max_connections_per_ip "
              f"64, max_connections 4096, {os.cpu_count()} HTTP threads); {a.connections} "
              f"trickling connections, a byte each every {a.every:g} s; {a.rounds} rounds of "
              f"{a.seconds:g} s phases; a probe GET every 10 ms on a new connection; "
              f"{os.cpu_count()} CPUs shared by larchd, attackers and probe")
        print(f"{'phase':<22} {'healthz p50/p99 ms':>19} {'x none':>7} {'jobs p50/p99 ms':>16} "
              f"{'x none':>7} {'failed':>9} {'open':>5} {'dropped head/ip':>16} "
              f"{'larchd CPU':>10} {'busy':>5}")
        labels = {"none": "none", "spread": f"{a.connections} from {a.addresses} addrs",
                  "one": f"{a.connections} from 1 addr",
                  "old": f"old, {a.old_connections} from {a.addresses}"}
        for row in [merged(n) for n in ("none", "spread", "one")] + ([old] if old else []):
            cells = []
            for p in ("/healthz", "/v1/jobs"):
                p50, p99 = pct(row["lat"][p], 0.5), pct(row["lat"][p], 0.99)
                cells.append(f"{p50:.2f} / {p99:.2f}")
                cells.append(f"{p99 / pct(base['lat'][p], 0.99):.2f}x")
            n_all = sum(len(v) for v in row["lat"].values())
            failed = sum(x is None for v in row["lat"].values() for x in v)
            failed_cell = f"{failed}/{n_all}"
            dropped_cell = "%d/%d" % (row["head"], row["per_ip"])
            print(f"{labels[row['name']]:<22} {cells[0]:>19} {cells[1]:>7} {cells[2]:>16} "
                  f"{cells[3]:>7} {failed_cell:>9} {row['open']:>5} {dropped_cell:>16} "
                  f"{row['cpu']:>9.2f}s {row['busy']:>5.0%}")
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
