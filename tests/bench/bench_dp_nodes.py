#!/usr/bin/env python3
"""Data parallel over 3 nodes: MPI beside larch-train's TCP fallback.

Starts a 3-node dev cluster of its own (deploy/slurm/start.sh --nodes 3 through
tests/integration/slurm.py: free ports, a temporary directory, stopped at the
end with nothing left) and runs the same 3-rank job, one rank a node, as a
step from this host in alternating rounds: `srun --mpi=pmix` (Open MPI's
allreduce over its TCP transport between the nodes) and `srun --mpi=none`
(trainer/comm_tcp.c: a star through rank 0). Both train the same spec from
scratch in a new job dir. Figures come from larch-train's own lines: `done:`
(training seconds over steps: ms a step) and the `parallel:` summary
(communication and waiting per step, the ZeRO-1 all-gather). A third arm,
mpi-y, is MPI with OMPI_MCA_mpi_yield_when_idle=1: Open MPI spins while it
waits, and with more ranks than cores that spinning takes the cores the other
ranks compute on. Prints a line per run, then the medians and tcp / mpi of
each (per round, the median). As root.

    LARCH_BUILD_DIR=build python3 tests/bench/bench_dp_nodes.py [--rounds 3] [--steps 40]
        [--hidden 1024 1024] [--global 192] [--micro 64] [--zero 0]
"""
import argparse
import json
import os
import pathlib
import re
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

import slurm  # noqa: E402  (tests/integration/slurm.py)

DONE = re.compile(r"done: (\d+) steps in ([\d.]+)s of training, (\d+) samples/s")
PARALLEL = re.compile(r"parallel: (\d+) ranks, ([\d.]+) MiB ([\w-]+) per step, ([\d.]+) s per step "
                      r"in communication of which ([\d.]+) s waited \((\d+)% hidden\)"
                      r"(?:; parameter all-gather ([\d.]+) s per step)?")
HOW = {"mpi": "pmix", "mpi-y": "pmix", "tcp": "none"}
ARMS = ("mpi", "mpi-y", "tcp")


def spec(a):
    return {"name": "dp-nodes", "model": {"type": "mlp", "hidden": a.hidden},
            "data": {"name": "fashion-mnist"}, "batch": {"global": a.global_batch, "micro": a.micro},
            "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9},
            "steps": a.steps, "log_every": a.steps, "checkpoint_every": 0, "seed": 7,
            "parallel": {"ranks": 3, "zero_stage": a.zero}}


def run(cluster, exe, spec_path, job, how):
    """One 3-rank step from this host, a rank a node; returns its figures."""
    env = dict(cluster.env)
    env = {k: v for k, v in env.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if how == "mpi-y":      # a waiting rank yields its core (Open MPI spins by default)
        env["OMPI_MCA_mpi_yield_when_idle"] = "1"
    t0 = time.monotonic()
    r = cluster.run("srun", f"--mpi={HOW[how]}", "-N3", "-n3", "--ntasks-per-node=1",
                    "--kill-on-bad-exit=1", str(exe), "--spec", str(spec_path), "--job-dir",
                    str(job), "--threads", "1", timeout=900, check=False)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"{how}: srun exited {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    done, par = DONE.search(r.stdout), PARALLEL.search(r.stdout)
    if not done or not par:
        sys.exit(f"{how}: no done:/parallel: line\n{r.stdout[-3000:]}")
    over = re.search(r"parallel: 3 ranks over (\w+)", r.stdout)
    if not over or over.group(1) != how.split("-")[0]:
        sys.exit(f"{how}: the run went over {over.group(1) if over else '?'}\n{r.stdout[:3000]}")
    steps, train_s = int(done.group(1)), float(done.group(2))
    return {"step_ms": 1e3 * train_s / steps, "samples_s": int(done.group(3)),
            "comm_ms": 1e3 * float(par.group(4)), "wait_ms": 1e3 * float(par.group(5)),
            "hidden": int(par.group(6)), "mib": float(par.group(2)), "what": par.group(3),
            "gather_ms": 1e3 * float(par.group(7)) if par.group(7) else 0.0, "wall_s": wall,
            "caveat": next((line for line in r.stdout.splitlines() if line.startswith("comm:")),
                           "")}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.environ.get("LARCH_BUILD_DIR", str(ROOT / "build")))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--hidden", type=int, nargs="+", default=[1024, 1024])
    p.add_argument("--global", dest="global_batch", type=int, default=192)
    p.add_argument("--micro", type=int, default=64)
    p.add_argument("--zero", type=int, choices=(0, 1), default=0)
    a = p.parse_args()
    exe = pathlib.Path(a.build).resolve() / "trainer" / "larch-train"
    if not exe.exists():
        sys.exit(f"{exe}: missing (cmake --build {a.build})")
    if os.geteuid() != 0:
        sys.exit("bench_dp_nodes.py: the dev cluster needs root")

    with tempfile.TemporaryDirectory(prefix="bench-dp-nodes-") as tmp:
        tmp = pathlib.Path(tmp)
        t0 = time.monotonic()
        cluster = slurm.fresh_cluster(tmp / "slurm", nodes=3)
        try:
            load = os.getloadavg()
            print(f"cluster: 3 nodes up in {time.monotonic() - t0:.1f} s (gateway {cluster.gateway}); "
                  f"{os.cpu_count()} CPUs, load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
            spec_path = tmp / "spec.json"
            spec_path.write_text(json.dumps(spec(a)))
            print(f"job: mlp 784-{'-'.join(map(str, a.hidden))}-10, batch {a.global_batch} = "
                  f"micro {a.micro} x 3 ranks x {a.global_batch // (a.micro * 3)} accum, "
                  f"{a.steps} steps, zero_stage {a.zero}; a rank a node, 1 thread each")
            res = {how: [] for how in ARMS}
            print(f"{'round':>5} {'comm':>5} {'ms/step':>8} {'comm ms':>8} {'waited':>7} "
                  f"{'gather':>7} {'hidden':>6} {'MiB':>6} {'wall s':>7}")
            for i in range(a.rounds):
                order = ARMS if i % 2 == 0 else ARMS[::-1]
                for how in order:
                    r = run(cluster, exe, spec_path, tmp / f"{how}-{i}", how)
                    res[how].append(r)
                    print(f"{i + 1:>5} {how:>5} {r['step_ms']:>8.1f} {r['comm_ms']:>8.1f} "
                          f"{r['wait_ms']:>7.1f} {r['gather_ms']:>7.1f} {r['hidden']:>5}% "
                          f"{r['mib']:>6.1f} {r['wall_s']:>7.1f}", flush=True)
            print(f"tcp's header: {res['tcp'][0]['caveat'] or '(no comm: line)'}")
            print(f"mpi's header: {res['mpi'][0]['caveat'] or '(no comm: line)'}")
            print(f"medians over {a.rounds} rounds ({res['mpi'][0]['mib']:.1f} MiB "
                  f"{res['mpi'][0]['what']} a step):")
            for key, name in (("step_ms", "ms a step"), ("comm_ms", "communication ms a step"),
                              ("wait_ms", "waited ms a step"), ("gather_ms", "all-gather ms")):
                med = {h: statistics.median(r[key] for r in res[h]) for h in ARMS}
                if not any(med.values()):
                    continue
                out = "  ".join(f"{h} {med[h]:>6.1f}" for h in ARMS)
                for base in ("mpi", "mpi-y"):       # per round, then the median
                    ratios = [t[key] / b[key] for b, t in zip(res[base], res["tcp"]) if b[key] > 0]
                    out += f"  tcp/{base} " + (f"{statistics.median(ratios):.2f}" if ratios else "-")
                print(f"  {name:<24} {out}")
            # Open MPI's own allreduce of the gradients' bytes over the same
            # three nodes, alone (tests/bench/bench_allreduce.c)
            bench = pathlib.Path(a.build).resolve() / "tests" / "bench" / "bench_allreduce"
            mib = res["mpi"][0]["mib"]
            if bench.exists():
                env = dict(cluster.env, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
                r = slurm.subprocess.run(["srun", "--mpi=pmix", "-N3", "-n3", "--ntasks-per-node=1",
                                          str(bench), "--mib", f"{mib:.2f}", "--rounds", "5"],
                                         env=env, capture_output=True, text=True, timeout=300)
                med = re.search(r"median\s+([\d.]+)\s+([\d.]+)", r.stdout)
                if med:
                    gbs = float(med.group(1))
                    ms = 1e3 * mib * 2 ** 20 * 4 / 3 / (gbs * 1e9) if gbs else float("nan")
                    print(f"MPI_Allreduce of {mib:.1f} MiB alone over the 3 nodes: bus {gbs:.2f} GB/s, "
                          f"{ms:.0f} ms (bench_allreduce, median of 5 rounds)")
                else:
                    print(f"bench_allreduce: no median line\n{r.stdout[-1000:]}{r.stderr[-1000:]}")
        finally:
            cluster.stop()
            left = cluster.leftovers()
            if left:
                print(f"left after stop.sh: {left}", file=sys.stderr)


if __name__ == "__main__":
    main()
