#!/usr/bin/env python3
"""Checkpoint download through larchd against cat of the same file (issue 39).

    LARCH_BUILD_DIR=build python tests/bench/bench_checkpoint_download.py
        [--mib 1024] [--rounds 3] [--no-cli] [--larchd NAME=BUILD_DIR ...] [--tmp DIR]

Starts a real larchd (tests/integration/larchd.py; run_as service) whose
trainer is a stand-in that copies a prepared file into its job directory as
checkpoints/step-00000001.safetensors and exits 0: larchd imports it as it
does a real trainer's checkpoint (size and sha256 into the database; the
route checks only those, not the file's structure). The file is a
safetensors header naming one U8 tensor, then pseudo-random bytes, --mib
MiB in all.

Each round times, in an order that rotates from round to round:

  cat          cat FILE > /dev/null (the baseline)
  curl first   curl -o /dev/null of GET /v1/jobs/{id}/checkpoints/1 after
               the file's mtime is touched, so that larchd's verdict cache
               misses and it hashes the file before the first byte
  curl cached  the same request again (the verdict cached)
  cli first    larch checkpoint download (writes FILE.part, hashes it,
               fsyncs, renames), after a touch as above
  cli cached   the same again
  cp+hash      cat FILE > OUT; openssl dgst -sha256 OUT; sync OUT: what the
               CLI does without HTTP (it hashes with OpenSSL too), its own
               baseline
  curl ceiling curl -o /dev/null from a minimal server in a thread here that
               answers with os.sendfile: what any HTTP server can reach on
               this loopback with curl as the client

"first" and "cached" run back to back on one larchd. With several
--larchd, each build's larchd runs in turn on the same state directory and
file (a restart when the build changes), so that builds compare side by
side. While each larchd request runs, the bench samples larchd's VmRSS
every 5 ms (/proc/PID/status) against its value just before, and prints
VmHWM before and after and the CPU time larchd used for the request. The
file is read from the page cache on all sides (it was just written and is
read again every round): the comparison is of the copying paths, not of
the disk. Prints a line per run and the medians, with the median of the
per-round ratios to cat (issue 39's goal: >= 0.8, and RSS growth < 32
MiB) and to the ceiling. Timing decides nothing here: it only prints.
"""
import argparse
import json
import os
import pathlib
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

import requests  # noqa: E402

from larchd import BUILD, Larchd, stand_in_trainer  # noqa: E402

MiB = 1 << 20


def make_file(path, mib):
    """A safetensors file of mib MiB: one U8 tensor of pseudo-random bytes."""
    size = mib * MiB
    header = {"__metadata__": {"step": "1"}}
    n = size - 8 - 256
    header["blob"] = {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}
    text = json.dumps(header).encode()
    text += b" " * (256 - len(text))
    block = os.urandom(4 * MiB)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        left = n
        i = 0
        while left:
            chunk = block[i % 64 * 8:][:min(left, 4 * MiB - 512)]
            f.write(chunk)
            left -= len(chunk)
            i += 1
    assert path.stat().st_size == size


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def cpu_s(pid):
    """pid's user + system CPU seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RssSampler:
    """Samples VmRSS of pid every 5 ms in a thread: the maximum seen; and
    the CPU time pid used meanwhile."""

    def __init__(self, pid):
        self.pid = pid
        self.cpu = cpu_s(pid)
        self.before = status_kib(pid, "VmRSS")
        self.hwm_before = status_kib(pid, "VmHWM")
        self.peak = self.before
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, status_kib(self.pid, "VmRSS"))
            time.sleep(0.005)

    def finish(self):
        self.stop.set()
        self.thread.join()
        self.peak = max(self.peak, status_kib(self.pid, "VmRSS"))
        self.hwm_after = status_kib(self.pid, "VmHWM")
        self.cpu = cpu_s(self.pid) - self.cpu
        return (self.peak - self.before) / 1024


class Ceiling:
    """The loopback ceiling for an HTTP download here: a minimal server in a
    thread that answers any request with the file through os.sendfile (the
    kernel copies nothing into user space; curl's receive is the one copy)."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/file"
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, open(self.path, "rb") as f:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    head += chunk
                size = os.fstat(f.fileno()).st_size
                conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n"
                             "Content-Type: application/octet-stream\r\n"
                             "Connection: close\r\n\r\n".encode())
                off = 0
                while off < size:
                    off += os.sendfile(conn.fileno(), f.fileno(), off, size - off)

    def close(self):
        self.sock.close()


def timed(cmd, stdout=subprocess.PIPE, **kw):
    t0 = time.perf_counter()
    out = subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=600,
                         **kw)
    dt = time.perf_counter() - t0
    if out.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({out.returncode}): {out.stderr.strip()}")
    return dt, out.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tmp", default=None, help="where the state dir and files go")
    ap.add_argument("--no-cli", action="store_true", help="curl only (the CLI's runs are "
                    "dominated by writing and fsyncing the file)")
    ap.add_argument("--larchd", action="append", metavar="NAME=DIR",
                    help="time the larchd of the build tree DIR (DIR/service/larchd with "
                         "DIR/{api,db,trainer} first on LD_LIBRARY_PATH: larchd's own code "
                         "is in those shared libraries); repeat to compare builds side by side "
                         "(default: BUILD alone)")
    args = ap.parse_args()
    variants = []
    for v in args.larchd or [f"={BUILD}"]:
        name, _, tree = v.rpartition("=")
        tree = pathlib.Path(tree).resolve()
        env = dict(os.environ, LD_LIBRARY_PATH=":".join(
            [str(tree / x) for x in ("api", "db", "trainer")] +
            [p for p in [os.environ.get("LD_LIBRARY_PATH")] if p]))
        variants.append((name, tree / "service" / "larchd", env))
    if not shutil.which("curl"):
        sys.exit("curl is missing (Debian: curl)")
    larch = BUILD / "service" / "larch"
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-ckpt-", dir=args.tmp))
    cur = {"d": None, "v": None}
    try:
        src = tmp / "source.safetensors"
        t0 = time.perf_counter()
        make_file(src, args.mib)
        print(f"file: {args.mib} MiB made in {time.perf_counter() - t0:.1f} s")
        trainer = stand_in_trainer(
            tmp / "fake-train",
            f"mkdir -p checkpoints && cp '{src}' checkpoints/step-00000001.safetensors\n")
        largs = ["--trainer-path", str(trainer), "--run-as", "service", "--log-level", "warn"]
        d = Larchd(tmp, args=largs, env=variants[0][2])
        d.exe = variants[0][1]
        cur.update(d=d, v=variants[0])
        d.start()
        auth = d.auth()
        spec = {"name": "bench-ckpt", "model": {"type": "mlp", "hidden": [16]},
                "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
                "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 1}
        r = requests.post(d.url + "/v1/jobs", json=spec, headers=auth, timeout=30)
        assert r.status_code == 201, r.text
        job = r.json()["id"]
        deadline = time.monotonic() + 300
        while True:
            j = requests.get(f"{d.url}/v1/jobs/{job}", headers=auth, timeout=10).json()
            if j["state"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
                break
            assert time.monotonic() < deadline, f"{job} still {j['state']}"
            time.sleep(0.1)
        assert j["state"] == "COMPLETED", j
        cks = requests.get(f"{d.url}/v1/jobs/{job}/checkpoints", headers=auth,
                           timeout=10).json()["checkpoints"]
        assert len(cks) == 1 and cks[0]["bytes"] == args.mib * MiB, cks
        ck = cks[0]
        path = pathlib.Path(ck["path"]) if "path" in ck else None
        if path is None or not path.exists():
            path = next((tmp / "state").rglob("step-00000001.safetensors"))
        src.unlink()
        size = args.mib * MiB
        out_dir = tmp / "out"
        out_dir.mkdir()
        print(f"larchd {d.url}, job {job}, {path.name}: {size} bytes, sha256 {ck['sha256'][:16]}")

        def touch():
            os.utime(path)   # a new mtime (and ctime): larchd's verdict cache misses

        ceiling = Ceiling(path)

        def run_ceiling():
            dt, out = timed(["curl", "-sS", "-o", "/dev/null", "-w",
                             "%{http_code} %{size_download}", ceiling.url])
            assert out.split() == ["200", str(size)], out
            return dt, None

        def run_cat():
            return timed(["cat", str(path)], stdout=subprocess.DEVNULL)[0], None

        def use(v):
            """Runs larchd v on the state dir (stopping another); returns it."""
            if cur["v"] != v:
                cur["d"].stop()
                cur["d"] = Larchd(tmp, args=largs, env=v[2], state_dir=d.state_dir)
                cur["d"].exe = v[1]
                cur["d"].start()
                cur["v"] = v
            return cur["d"]

        def run_curl(v, first):
            dd = use(v)
            url = f"{dd.url}/v1/jobs/{job}/checkpoints/1"
            s = RssSampler(dd.proc.pid)
            dt, out = timed(["curl", "-sS", "-o", "/dev/null", "-w",
                             "%{http_code} %{size_download}",
                             "-H", f"Authorization: Bearer {dd.admin_token}", url])
            grow = s.finish()
            assert out.split() == ["200", str(size)], out
            return dt, (grow, s.hwm_before, s.hwm_after, s.cpu)

        def run_cli(v, first):
            dd = use(v)
            env = dict(os.environ, LARCH_URL=dd.url, LARCH_TOKEN=dd.admin_token)
            target = out_dir / "cli.safetensors"
            target.unlink(missing_ok=True)
            s = RssSampler(dd.proc.pid)
            dt, out = timed([str(larch), "checkpoint", "download", job, "-o", str(target)],
                            env=env)
            grow = s.finish()
            assert target.stat().st_size == size
            target.unlink()
            return dt, (grow, s.hwm_before, s.hwm_after, s.cpu)

        def run_cp_hash():
            target = out_dir / "cp.safetensors"
            dt, out = timed(["sh", "-c", f"cat '{path}' > '{target}' && openssl dgst -sha256 -r "
                             f"'{target}' && sync '{target}'"])
            assert out.split()[0] == ck["sha256"], out
            target.unlink()
            return dt, None

        def pair(fn, v):
            """The first request after a touch, then the cached one, on one larchd."""
            def run():
                use(v)
                touch()
                return [fn(v, True), fn(v, False)]
            return run

        # units of the rotation: (names, function returning a (s, mem) per name)
        units = [(["cat"], lambda: [run_cat()]), (["curl ceiling"], lambda: [run_ceiling()])]
        for v in variants:
            tag = f" {v[0]}" if v[0] else ""
            units.append(([f"curl first{tag}", f"curl cached{tag}"], pair(run_curl, v)))
            if not args.no_cli:
                units.append(([f"cli first{tag}", f"cli cached{tag}"], pair(run_cli, v)))
        if not args.no_cli:
            units.append((["cp+hash"], lambda: [run_cp_hash()]))
        kinds = [(n, None) for names, _ in units for n in names]
        times = {k: [] for k, _ in kinds}
        rss = {k: [] for k, _ in kinds}
        cpu = {k: [] for k, _ in kinds}
        run_cat()   # warm the page cache
        print(f"\n{'round':>5}  {'run':<12} {'s':>7} {'MiB/s':>8}  {'rss +MiB':>8}  "
              f"{'hwm before -> after MiB':>22}  {'larchd cpu s':>12}")
        for rnd in range(args.rounds):
            k0 = rnd % len(units)
            for names, fn in units[k0:] + units[:k0]:
                for name, (dt, mem) in zip(names, fn()):
                    times[name].append(dt)
                    line = f"{rnd + 1:>5}  {name:<16} {dt:7.3f} {size / MiB / dt:8.0f}"
                    if mem:
                        rss[name].append(mem[0])
                        cpu[name].append(mem[3])
                        line += (f"  {mem[0]:8.1f}  {mem[1] / 1024:9.1f} -> "
                                 f"{mem[2] / 1024:<7.1f}  {mem[3]:6.2f}")
                    print(line, flush=True)
        print(f"\nmedians over {args.rounds} rounds ({size / MiB:.0f} MiB, loopback, page cache):")
        print(f"{'run':<16} {'MiB/s':>8} {'spread':>15} {'ratio to cat':>13} "
              f"{'ratio spread':>14} {'to ceiling':>10} {'max rss +MiB':>13} {'larchd cpu s':>13}")
        for name, _ in kinds:
            rates = [size / MiB / t for t in times[name]]
            ratios = [c / t for c, t in zip(times["cat"], times[name])]
            ceil = [c / t for c, t in zip(times["curl ceiling"], times[name])]
            grow = (f"{max(rss[name]):13.1f} {statistics.median(cpu[name]):13.2f}" if rss[name]
                    else "")
            print(f"{name:<16} {statistics.median(rates):8.0f} "
                  f"{min(rates):7.0f}-{max(rates):<7.0f} {statistics.median(ratios):13.2f} "
                  f"{min(ratios):6.2f}-{max(ratios):<7.2f} {statistics.median(ceil):10.2f} "
                  f"{grow}")
        for v in variants if not args.no_cli else ():
            tag = f" {v[0]}" if v[0] else ""
            cli_ratio = statistics.median(c / t for c, t in zip(times["cp+hash"],
                                                                times[f"cli cached{tag}"]))
            print(f"cli cached{tag} over cp+hash (its own baseline): {cli_ratio:.2f}")
        print("goal (issue 39): larchd >= 0.8 x cat, rss growth < 32 MiB")
    finally:
        if cur["d"] and cur["d"].running():
            cur["d"].stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
