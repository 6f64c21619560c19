#!/usr/bin/python3
"""The gradient noise scale's cost: larch-train's step time with
metrics.gns_every 1 (measured every step) and 0 (never) side by side.

    /usr/bin/python3 tests/bench/bench_gns.py [--build build] [--rounds 5] [--steps 40]
                                              [--hidden 1024 1024] [--micro 32] [--threads 1]
                                              [--no-ranks]

Two layouts, each trained with the measurement on and off per round, the
order alternating (A/B, B/A, ...): one rank with accumulation (global =
micro x 4: the small batch is the first micro-batch, one extra norm over
the gradients a step) and, unless --no-ranks, two ranks under mpirun
(global = micro x 2 ranks x 2: each rank's norm summed as its buckets
are reduced). An MLP 784-hidden-10 on Fashion-MNIST with SGD; the micro-batch
is small so that a step is short next to the norm (the measurement's worst
case on a CPU). Step times are larch-train's train/samples_per_s over the
whole run (training steps only). Prints per round the ms per step of both
and on/off, then per layout the median of the rounds' ratios of step time
(on/off; the issue's budget is 1.02) with its plan's gns: line, and the
time larch-train itself counts in the measurement's extra norm (its "gns:"
line after "done:"), per measurement and as a share of the training time:
on a shared machine the A/B ratio moves by more than the measurement
costs, the in-run share does not. Prints figures; never fails on them.
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MPI_ENV = dict(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none",
               OMPI_MCA_rmaps_base_oversubscribe="1")


def spec(every, ranks, a):
    accum = 4 // ranks
    return {"name": f"bench-gns-{every}",
            "model": {"type": "mlp", "hidden": a.hidden},
            "data": {"name": "fashion-mnist"},
            "batch": {"global": a.micro * accum * ranks, "micro": a.micro},
            "optimizer": {"type": "sgd", "lr": 0.01},
            "parallel": {"ranks": ranks},
            "metrics": {"gns_every": every},
            "steps": a.steps, "log_every": a.steps, "eval_every": 0,
            "checkpoint_at_end": False, "seed": 1}


def train(exe, every, ranks, a, tmp):
    path = pathlib.Path(tmp) / f"gns-{every}-{ranks}.json"
    path.write_text(json.dumps(spec(every, ranks, a)))
    job = pathlib.Path(tmp) / f"job-{every}-{ranks}"
    shutil.rmtree(job, ignore_errors=True)
    cmd = [str(exe), "--spec", str(path), "--job-dir", str(job), "--threads", str(a.threads)]
    env = None
    if ranks > 1:
        cmd = [shutil.which("mpirun"), "-n", str(ranks)] + cmd
        env = dict(os.environ, **MPI_ENV)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"bench_gns: larch-train (gns_every {every}, {ranks} ranks) failed")
    # train/samples_per_s over all the steps (log_every = steps): the
    # "done:" line's seconds have one decimal
    rate = [json.loads(l)["value"] for l in (job / "metrics.jsonl").read_text().splitlines()
            if '"train/samples_per_s"' in l]
    return 1000 * spec(every, ranks, a)["batch"]["global"] / rate[-1], p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--hidden", type=int, nargs="+", default=[1024, 1024])
    ap.add_argument("--micro", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-ranks", action="store_true")
    a = ap.parse_args()
    exe = pathlib.Path(a.build) / "trainer" / "larch-train"
    if not exe.exists():
        raise SystemExit(f"bench_gns: {exe} is missing: build first")
    layouts = [1] if a.no_ranks or not shutil.which("mpirun") else [1, 2]
    ms = {(r, e): [] for r in layouts for e in (1, 0)}
    out = {}
    spent = {r: [] for r in layouts}
    share = {r: [] for r in layouts}
    with tempfile.TemporaryDirectory(prefix="bench-gns-") as tmp:
        for rnd in range(a.rounds):
            for ranks in layouts:
                for every in ((1, 0) if rnd % 2 == 0 else (0, 1)):
                    t, out[ranks, every] = train(exe, every, ranks, a, tmp)
                    ms[ranks, every].append(t)
                    if every:
                        m = re.search(r"^gns: \d+ measurements, ([\d.]+) ms each in the extra "
                                      r"norm, ([\d.]+)% of the training time", out[ranks, 1], re.M)
                        spent[ranks].append(float(m.group(1)))
                        share[ranks].append(float(m.group(2)))
                print("round %d, %d rank%s: on %7.2f ms/step | off %7.2f ms/step | on/off %.3f"
                      % (rnd, ranks, "s" if ranks > 1 else "", ms[ranks, 1][-1], ms[ranks, 0][-1],
                         ms[ranks, 1][-1] / ms[ranks, 0][-1]), flush=True)
    params = int(re.search(r"mlp model, (\d+) parameters", out[1, 0]).group(1))
    print(f"\n{params} parameters, SGD, micro {a.micro}, global {4 * a.micro}, {a.steps} steps "
          f"a run, {a.threads} thread{'s' if a.threads > 1 else ''} a rank, {a.rounds} rounds")
    for ranks in layouts:
        gns = re.search(r"^gns: every.*$", out[ranks, 1], re.M).group(0)
        ratio = statistics.median(n / f for n, f in zip(ms[ranks, 1], ms[ranks, 0]))
        print("%d rank%s: %s\n  on %.2f ms/step, off %.2f ms/step (medians); on/off %.3f "
              "(median of the rounds' ratios; budget 1.02)" % (
                  ranks, "s" if ranks > 1 else "", gns, statistics.median(ms[ranks, 1]),
                  statistics.median(ms[ranks, 0]), ratio))
        print("  in the run (rank 0's own clock): %.3f ms a measurement, %.2f%% of the "
              "training time (medians)" % (statistics.median(spent[ranks]),
                                           statistics.median(share[ranks])))


if __name__ == "__main__":
    main()
