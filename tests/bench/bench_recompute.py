#!/usr/bin/python3
"""offload.activations: step time and activation memory of none, recompute
and cpu side by side.

    /usr/bin/python3 tests/bench/bench_recompute.py [--build build] [--spec SPEC]
                                                    [--rounds 5] [--seconds 2] [--threads N]
                                                    [--clock wall|cpu]

Runs bench_step (tests/bench/bench_step.c) on SPEC (default specs/gpt-tiny.json:
4 layers, 4 heads, dim 256, seq 256, micro 16) once per mode per round, the
modes in turn (A/B/C, A/B/C, ...), each for about --seconds of full training
steps. Prints per round the ms per step of each mode and the ratios to none,
then the medians of the per-round ratios, and the activation memory each mode
holds (bench_step's figure: activations and their gradients, as trainer/model.h
counts them) with its ratio to none, and the host store of cpu. Recompute
costs about one more forward per step (a forward is about a third of a step);
cpu costs two copies of the offloaded blocks per step (memcpy here).

Each line also says how much of the machine's CPU time other processes took
during that run: a round someone else shared the cores with measured that too.
On a busy machine, --threads 1 --clock cpu times with the process's CPU time
(bench_step's --clock), which other processes disturb much less; it does not
count time spent waiting for memory bandwidth others use, nor is it wall time.
Prints figures; never fails on them.
"""
import argparse
import os
import pathlib
import statistics
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import stepbench  # noqa: E402  (beside this script)
ROOT = HERE.parent.parent
MODES = ("none", "recompute", "cpu")


def run(cmd):
    return stepbench.run(cmd, "bench_recompute")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--spec", default=str(HERE / "specs" / "gpt-tiny.json"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    a = ap.parse_args()
    exe = pathlib.Path(a.build) / "tests" / "bench" / "bench_step"
    if not exe.exists():
        raise SystemExit(f"bench_recompute: {exe} is missing: build first")

    steps = {m: [] for m in MODES}
    figures = {}
    first = True
    for r in range(a.rounds):
        line = []
        for mode in MODES:
            j, foreign, out = run([str(exe), a.spec, "--activations", mode, "--rounds", "1",
                                   "--seconds", str(a.seconds), "--warmup", "3",
                                   "--threads", str(a.threads), "--clock", a.clock, "--json"])
            if first:
                print("\n".join(l for l in out.splitlines()
                                if l.startswith(("bench_step:", "blas:", "threads:"))))
                first = False
            steps[mode].append(j["step_ms"])
            figures[mode] = j
            line.append("%-9s %8.1f ms (others %2.0f%%)" % (mode, j["step_ms"], 100 * foreign))
        print("round %d: %s" % (r, " | ".join(line)), flush=True)

    none = figures["none"]
    print("\n%-10s %10s %8s %14s %8s %12s" % ("mode", "step ms", "x none", "activations", "x none",
                                             "host store"))
    for mode in MODES:
        ratio = statistics.median(s / n for s, n in zip(steps[mode], steps["none"]))
        f = figures[mode]
        print("%-10s %10.1f %8.3f %10.1f MiB %8.3f %8.1f MiB" % (
            mode, statistics.median(steps[mode]), ratio, f["act_bytes"] / 2**20,
            f["act_bytes"] / none["act_bytes"], f["act_host_bytes"] / 2**20))
    print("step ms: median over rounds; x none: median of the per-round ratios")


if __name__ == "__main__":
    main()
