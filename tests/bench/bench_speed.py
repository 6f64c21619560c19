#!/usr/bin/python3
"""Issue #3's speed figures in one run, with one BLAS setting for everything.

    /usr/bin/python3 tests/bench/bench_speed.py [--build build] [--repeats 3]
                                                [--threads N] [--no-e2e]

Runs, interleaved, --repeats times over:
  1. bench_step on specs/fmnist-mlp.json: the larch MLP step and its GEMM
     bound (the step's own GEMMs replayed alone);
  2. numpy_step.py: the same MLP step in numpy, on the same OpenBLAS;
  3. bench_step on specs/gpt-tiny.json: GPT tiny (4 layers, 4 heads, dim 256,
     seq 256, bytes), tokens/s and its GEMM bound;
  4. larch-train on Fashion-MNIST for one epoch (specs/fmnist-mlp.json),
     samples/s from DIR/metrics.jsonl (the median of its progress intervals);
then prints one table. Every process gets the same OPENBLAS_CORETYPE (the core
larch picks, unless set already), OMP_NUM_THREADS (--threads, default the CPUs
this process may use) and library (LD_LIBRARY_PATH = the directory of the
OpenBLAS larch loads, whose libblas.so.3 numpy then links). Ratios pair runs
of the same repeat (adjacent in time) and take the median over repeats.

Prints figures; never fails on them. Timings on a shared machine vary: the
ratios, measured side by side, are the figures to read.
"""
import argparse
import json
import os
import resource
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TARGET_BOUND, TARGET_NUMPY = 0.85, 1.2


def cpu_ticks():
    """(busy, total) CPU time of the whole machine, in clock ticks, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v[:8]) - idle, sum(v[:8])


def run_child(cmd, env):
    """Runs cmd; returns (CompletedProcess, share of the machine's CPU time that
    other processes took meanwhile). A benchmark that shared the cores with
    someone else's work measured that, not larch."""
    hz = os.sysconf("SC_CLK_TCK")
    b0, t0 = cpu_ticks()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    b1, t1 = cpu_ticks()
    ours = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * hz
    foreign = max(0.0, (b1 - b0) - ours) / max(1, t1 - t0)
    return p, foreign


def run_quiet(cmd, env, a):
    """Runs cmd up to a.attempts times until other processes took at most
    a.max_foreign of the CPU time meanwhile; returns the least disturbed run."""
    best = None
    for attempt in range(a.attempts):
        p, foreign = run_child(cmd, env)
        if p.returncode != 0:
            sys.stderr.write(p.stdout + p.stderr)
            raise SystemExit("bench_speed: %s failed (exit %d)" % (cmd[0], p.returncode))
        if best is None or foreign < best[1]:
            best = (p, foreign)
        if foreign <= a.max_foreign:
            break
        print("  (%s disturbed: other processes took %.0f%% of the CPU time; again)"
              % (os.path.basename(cmd[1] if cmd[0].endswith("python3") else cmd[0]),
                 100 * foreign), flush=True)
        time.sleep(a.pause)
    return best


def run_json(cmd, env, a):
    """Runs a benchmark printing a "json: {...}" line; returns the dict, with
    "foreign" (see run_child) added."""
    p, foreign = run_quiet(cmd, env, a)
    for line in p.stdout.splitlines():
        if line.startswith("json: "):
            d = json.loads(line[6:])
            d["foreign"] = foreign
            return d
    raise SystemExit("bench_speed: %s printed no json line" % cmd[0])


def run_e2e(larch_train, spec, env, a):
    """One epoch of larch-train; returns (median samples/s of its progress
    intervals, final val/accuracy, foreign CPU share)."""
    job = tempfile.mkdtemp(prefix="larch-bench-")
    try:
        cmd = [str(larch_train), "--spec", str(spec), "--job-dir", job, "--quiet"]
        best = None
        for attempt in range(a.attempts):
            shutil.rmtree(job, ignore_errors=True)
            p, foreign = run_child(cmd, env)
            if p.returncode != 0:
                sys.stderr.write(p.stdout + p.stderr)
                raise SystemExit("bench_speed: larch-train failed (exit %d)" % p.returncode)
            rates, acc = [], None
            with open(os.path.join(job, "metrics.jsonl")) as f:
                for line in f:
                    m = json.loads(line)
                    if m["name"] == "train/samples_per_s":
                        rates.append(m["value"])
                    elif m["name"] == "val/accuracy":
                        acc = m["value"]
            if best is None or foreign < best[2]:
                best = (statistics.median(rates), acc, foreign)
            if foreign <= a.max_foreign:
                break
            print("  (larch-train disturbed: other processes took %.0f%% of the CPU time; "
                  "again)" % (100 * foreign), flush=True)
            time.sleep(a.pause)
        return best
    finally:
        shutil.rmtree(job, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build"), help="release build directory")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--rounds", type=int, default=5, help="A/B rounds per benchmark process")
    ap.add_argument("--no-e2e", action="store_true", help="skip the larch-train epoch")
    ap.add_argument("--python", default="/usr/bin/python3", help="an interpreter with numpy")
    ap.add_argument("--max-foreign", type=float, default=0.05,
                    help="rerun a benchmark when other processes took more than this share "
                         "of the CPU time while it ran")
    ap.add_argument("--attempts", type=int, default=5, help="runs at most per benchmark")
    ap.add_argument("--pause", type=float, default=10, help="seconds before a rerun")
    a = ap.parse_args()

    build = pathlib.Path(a.build)
    bench_step = build / "tests" / "bench" / "bench_step"
    larch_train = build / "trainer" / "larch-train"
    for exe in (bench_step, larch_train):
        if not exe.exists():
            raise SystemExit("bench_speed: %s is missing: build first" % exe)
    mlp_spec, gpt_spec = HERE / "specs" / "fmnist-mlp.json", HERE / "specs" / "gpt-tiny.json"

    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    line = subprocess.run([str(bench_step), "--blas"], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()
    core = re.search(r"core (\S+)", line)
    lib = line.split()[1]
    if core and "OPENBLAS_CORETYPE" not in env:
        env["OPENBLAS_CORETYPE"] = core.group(1)
    env["LD_LIBRARY_PATH"] = os.path.dirname(lib) + (
        ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    print("settings: OPENBLAS_CORETYPE=%s OMP_NUM_THREADS=%s LD_LIBRARY_PATH=%s"
          % (env.get("OPENBLAS_CORETYPE", "(auto)"), env["OMP_NUM_THREADS"],
             env["LD_LIBRARY_PATH"]), flush=True)

    res = {"mlp": [], "numpy": [], "gpt": [], "e2e": [], "foreign": 0.0}
    blas = {}
    for r in range(a.repeats):
        mlp = run_json([str(bench_step), str(mlp_spec), "--rounds", str(a.rounds), "--json"],
                       env, a)
        npy = run_json([a.python, str(HERE / "numpy_step.py"), "--rounds", str(a.rounds),
                        "--json"], env, a)
        gpt = run_json([str(bench_step), str(gpt_spec), "--rounds", str(max(2, a.rounds // 2)),
                        "--seconds", "1", "--warmup", "2", "--json"], env, a)
        res["mlp"].append(mlp)
        res["numpy"].append(npy)
        res["gpt"].append(gpt)
        blas["larch"], blas["numpy"] = mlp["blas"], npy["blas"]
        msg = "repeat %d: mlp %.0f samples/s (bound %.3f), numpy %.0f samples/s, gpt %.0f tokens/s " \
              "(bound %.3f)" % (r + 1, mlp["samples_per_step"] / mlp["step_ms"] * 1e3, mlp["ratio"],
                                npy["samples_per_step"] / npy["step_ms"] * 1e3,
                                gpt["tokens_per_step"] / gpt["step_ms"] * 1e3, gpt["ratio"])
        foreign = [mlp["foreign"], npy["foreign"], gpt["foreign"]]
        if not a.no_e2e:
            rate, acc, f = run_e2e(larch_train, mlp_spec, env, a)
            res["e2e"].append((rate, acc))
            foreign.append(f)
            msg += ", larch-train %.0f samples/s (val acc %.4f)" % (rate, acc or float("nan"))
        res["foreign"] = max(res.get("foreign", 0.0), *foreign)
        print(msg + "; others took <= %.0f%% CPU" % (100 * max(foreign)), flush=True)

    med = statistics.median
    mlp_sps = med(m["samples_per_step"] / m["step_ms"] * 1e3 for m in res["mlp"])
    mlp_bound = med(m["samples_per_step"] / m["gemm_ms"] * 1e3 for m in res["mlp"])
    mlp_ratio = med(m["ratio"] for m in res["mlp"])
    np_sps = med(n["samples_per_step"] / n["step_ms"] * 1e3 for n in res["numpy"])
    np_bound = med(n["samples_per_step"] / n["gemm_ms"] * 1e3 for n in res["numpy"])
    np_ratio = med(n["ratio"] for n in res["numpy"])
    vs_numpy = med(n["step_ms"] / m["step_ms"] for m, n in zip(res["mlp"], res["numpy"]))
    gpt_tps = med(g["tokens_per_step"] / g["step_ms"] * 1e3 for g in res["gpt"])
    gpt_bound = med(g["tokens_per_step"] / g["gemm_ms"] * 1e3 for g in res["gpt"])
    gpt_ratio = med(g["ratio"] for g in res["gpt"])
    mlp_gf = med(m["gflop_per_step"] / m["step_ms"] * 1e3 for m in res["mlp"])
    np_gf = med(n["gflop_per_step"] / n["step_ms"] * 1e3 for n in res["numpy"])
    gpt_gf = med(g["gflop_per_step"] / g["step_ms"] * 1e3 for g in res["gpt"])

    def mark(value, target):
        return "%.3f (target >= %.2f: %s)" % (value, target, "met" if value >= target else "NOT met")

    print()
    print("BLAS (larch): %s" % blas["larch"])
    print("BLAS (numpy): %s" % blas["numpy"])
    print("threads: %s, OPENBLAS_CORETYPE=%s, %d repeats, medians over repeats; other processes "
          "took at most %.0f%% of the CPU time during any run"
          % (env["OMP_NUM_THREADS"], env.get("OPENBLAS_CORETYPE", "(auto)"), a.repeats,
             100 * res["foreign"]))
    print()
    rows = [
        ("benchmark", "figure", "GFLOP/s", "GEMM bound", "step/bound", "vs numpy"),
        ("mlp step, larch", "%.0f samples/s" % mlp_sps, "%.1f" % mlp_gf,
         "%.0f samples/s" % mlp_bound, mark(mlp_ratio, TARGET_BOUND),
         "%.2fx (target >= %.1fx: %s)" % (vs_numpy, TARGET_NUMPY,
                                           "met" if vs_numpy >= TARGET_NUMPY else "NOT met")),
        ("mlp step, numpy", "%.0f samples/s" % np_sps, "%.1f" % np_gf,
         "%.0f samples/s" % np_bound, "%.3f" % np_ratio, "1.00x"),
        ("gpt tiny step, larch", "%.0f tokens/s" % gpt_tps, "%.1f" % gpt_gf,
         "%.0f tokens/s" % gpt_bound, "%.3f" % gpt_ratio, "-"),
    ]
    if res["e2e"]:
        e2e = med(r for r, _ in res["e2e"])
        e2e_ratio = med(r / (m["samples_per_step"] / m["gemm_ms"] * 1e3)
                        for (r, _), m in zip(res["e2e"], res["mlp"]))
        e2e_np = med(r / (n["samples_per_step"] / n["step_ms"] * 1e3)
                     for (r, _), n in zip(res["e2e"], res["numpy"]))
        accs = [x for _, x in res["e2e"] if x is not None]
        rows.append(("larch-train 1 epoch fmnist", "%.0f samples/s" % e2e, "-",
                     "(mlp bound above)", "%.3f" % e2e_ratio, "%.2fx" % e2e_np))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    if res["e2e"] and accs:
        print("\nlarch-train epoch: val/accuracy %s (one epoch)" % ", ".join("%.4f" % x for x in accs))
    print("\nGEMM bound: the step's own GEMMs replayed back to back (larch: kern_sgemm_trace_*; "
          "numpy: its eight\nmatmuls); step/bound = step samples/s over bound samples/s. "
          "larch-train's samples/s is train.c's:\nthe step plus the loader's copy of the batch, "
          "without evaluation and checkpoints; its ratio is to\nthe mlp bound of the same repeat.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
