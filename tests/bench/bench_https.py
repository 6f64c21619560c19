#!/usr/bin/env python3
"""tests/bench/bench_https.py - what TLS costs larchd: GET one job over
HTTPS against plain HTTP, side by side in one run.

    python3 tests/bench/bench_https.py [--build DIR] [--threads T] [--seconds S]
                                       [--rounds R]

Two larchds from the same build, one plain and one with a certificate made
here (openssl: a CA and an RSA-2048 server certificate for 127.0.0.1), each
with one job submitted. T (4) client threads, each on one kept-alive
connection (http.client, TLS verified against the CA; the handshake is paid
once per thread), GET /v1/jobs/{id} with the admin token for S (3) seconds;
R (3) rounds, plain and HTTPS alternating. Prints req/s per round and
protocol, the medians and the ratio HTTPS/HTTP. The clients are Python and
share the machine with larchd: the ratio says more than the rates. Never
fails on timing.
"""
import argparse
import http.client
import json
import os
import pathlib
import re
import select
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC = {"name": "bench-https", "model": {"type": "mlp", "hidden": [16]},
        "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
        "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 20, "log_every": 5}
LISTENING = re.compile(r"^larchd: listening on (https?)://127\.0\.0\.1:(\d+)$")


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(d):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.pem", "-days", "2", "-subj", "/CN=bench CA", cwd=d)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
            "server.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "ext.cnf").write_text("subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf", cwd=d)
    os.chmod(d / "server.key", 0o600)


class Server:
    def __init__(self, build, state, args, ca=None):
        cmd = [str(build / "service" / "larchd"), "--listen", "127.0.0.1:0", "--state-dir",
               str(state), "--run-as", "service", "--log-level", "warn", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline().decode().strip() if ready else ""
        m = LISTENING.match(line)
        if not m:
            self.proc.kill()
            sys.exit(f"larchd did not start: {line!r}")
        self.scheme, self.port = m.group(1), int(m.group(2))
        self.token = (state / "admin.token").read_text().strip()
        self.ctx = ssl.create_default_context(cafile=str(ca)) if ca else None
        conn = self.connect()
        conn.request("POST", "/v1/jobs", body=json.dumps(SPEC),
                     headers={**self.headers(), "Content-Type": "application/json"})
        r = conn.getresponse()
        body = r.read()
        if r.status != 201:
            sys.exit(f"submit: {r.status} {body[:300]!r}")
        self.path = "/v1/jobs/" + json.loads(body)["id"]
        conn.close()

    def headers(self):
        return {"Authorization": f"Bearer {self.token}"}

    def connect(self):
        if self.scheme == "https":
            return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx,
                                               timeout=30)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def phase(server, threads, seconds):
    """req/s of threads clients, each on one kept-alive connection."""
    counts = [0] * threads
    errors = []
    start = threading.Barrier(threads + 1)

    def client(i):
        conn = server.connect()
        conn.request("GET", server.path, headers=server.headers())   # handshake off the clock
        conn.getresponse().read()
        start.wait()
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end:
            conn.request("GET", server.path, headers=server.headers())
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                errors.append(r.status)
                break
            n += 1
        counts[i] = n
        conn.close()

    ts = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.monotonic()
    for t in ts:
        t.join()
    elapsed = time.monotonic() - t0
    if errors:
        sys.exit(f"{server.scheme}: a GET answered {errors[0]}")
    return sum(counts) / elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    build = pathlib.Path(a.build).resolve()
    with tempfile.TemporaryDirectory(prefix="bench-https-") as tmp:
        tmp = pathlib.Path(tmp)
        make_pki(tmp)
        plain = Server(build, tmp / "plain", [])
        tls = Server(build, tmp / "tls", ["--tls-cert", str(tmp / "server.pem"),
                                          "--tls-key", str(tmp / "server.key")],
                     ca=tmp / "ca.pem")
        rates = {"http": [], "https": []}
        try:
            print(f"GET {plain.path}, {a.threads} kept-alive clients, {a.seconds:g} s a phase")
            print(f"{'round':>5}  {'http req/s':>11}  {'https req/s':>11}  {'ratio':>6}")
            for r in range(a.rounds):
                order = (plain, tls) if r % 2 == 0 else (tls, plain)
                got = {s.scheme: phase(s, a.threads, a.seconds) for s in order}
                for k, v in got.items():
                    rates[k].append(v)
                print(f"{r + 1:>5}  {got['http']:>11.0f}  {got['https']:>11.0f}  "
                      f"{got['https'] / got['http']:>6.2f}")
        finally:
            plain.stop()
            tls.stop()
        h, s = statistics.median(rates["http"]), statistics.median(rates["https"])
        print(f"median  http {h:.0f} req/s  https {s:.0f} req/s  https/http {s / h:.2f}")


if __name__ == "__main__":
    main()
