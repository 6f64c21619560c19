#!/usr/bin/env python3
"""int8 optimizer state against fp32 on Fashion-MNIST: the same MLP, data
order and schedule with optimizer.state_dtype "fp32" and "int8", final test
accuracy side by side with the difference (target: within 0.3 points) and
the optimizer state's memory (target: 1/4).

    /usr/bin/python3 tests/bench/bench_int8_states.py [--epochs 5] [--optimizers adamw]
                                                      [--hidden 1024 1024] [--seeds 42]
                                                      [--build build]

The default row is bench_large_batch.py's b256 setting (784-1024-1024-10,
ReLU, batch 256, 1-epoch warmup, cosine) with AdamW (lr 1e-3, wd 0.01), 5
epochs: two runs of about 20 s each on 2 idle cores. --optimizers sgd adamw lars lamb runs
each. Accuracy is the test split's (t10k) at the end of the run. Not a
pass/fail test.
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]

OPTIMIZERS = {
    "sgd": {"type": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4},
    "adamw": {"type": "adamw", "lr": 1e-3, "weight_decay": 0.01},
    "lars": {"type": "lars", "lr": 2.0, "momentum": 0.9, "weight_decay": 5e-4, "trust_coef": 0.001,
             "exclude_from_weight_decay": [], "exclude_from_adaptation": []},
    "lamb": {"type": "lamb", "lr": 0.002, "weight_decay": 0.01},
}
SCHEDULE = {"lr_scaling": "linear", "warmup": {"epochs": 1}, "decay": "cosine"}


def run(exe, workdir, name, optimizer, dtype, args, seed):
    spec = {
        "name": name,
        "model": {"type": "mlp", "hidden": args.hidden, "activation": "relu"},
        "data": {"name": "fashion-mnist"},
        "batch": {"global": 256, "reference": 256},
        "optimizer": dict(optimizer, state_dtype=dtype),
        "schedule": SCHEDULE,
        "epochs": args.epochs,
        "seed": seed,
        "log_every": 1000,
    }
    tag = f"{name}-{dtype}-{seed}"
    spec_path = workdir / f"{tag}.json"
    spec_path.write_text(json.dumps(spec))
    job = workdir / tag
    cmd = [str(exe), "--spec", str(spec_path), "--job-dir", str(job)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if out.returncode != 0:
        return {"acc": None, "status": f"exit {out.returncode}: {out.stderr.strip()[-200:]}",
                "mib": float("nan"), "ratio": float("nan"), "wall": wall}
    final = json.loads((job / "result.json").read_text()).get("final") or {}
    line = next(l for l in out.stdout.splitlines() if l.lstrip().startswith("optimizer "))
    mib = float(re.search(r"([\d.]+) MiB", line).group(1))
    ratio = re.search(r"1/([\d.]+) of fp32", line)
    return {"acc": final.get("val/accuracy"), "status": "completed", "mib": mib,
            "ratio": float(ratio.group(1)) if ratio else 1.0, "wall": wall}


def mean(rows, key):
    vals = [r[key] for r in rows]
    return None if any(v is None for v in vals) else sum(vals) / len(vals)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=float, default=5)
    ap.add_argument("--optimizers", nargs="+", default=["adamw"], choices=sorted(OPTIMIZERS))
    ap.add_argument("--hidden", type=int, nargs="+", default=[1024, 1024])
    ap.add_argument("--seeds", type=int, nargs="+", default=[42])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--build", default=os.environ.get("LARCH_BUILD_DIR", ROOT / "build"))
    args = ap.parse_args()
    exe = pathlib.Path(args.build) / "trainer" / "larch-train"

    arch = "-".join(str(h) for h in [784] + args.hidden + [10])
    print(f"# Fashion-MNIST, MLP {arch}, batch 256, {args.epochs:g} epochs, seeds {args.seeds}")
    print(f"{'optimizer':9s} {'state':13s} {'test acc':>9s} {'vs fp32':>8s} {'optim MiB':>10s} "
          f"{'ratio':>6s} {'wall':>6s}")
    with tempfile.TemporaryDirectory(prefix="larch-bench-int8-") as tmp:
        for name in args.optimizers:
            base = None
            for dtype in ("fp32", "int8"):
                rows = [run(exe, pathlib.Path(tmp), name, OPTIMIZERS[name], dtype, args, s)
                        for s in args.seeds]
                acc, mib, wall = mean(rows, "acc"), rows[0]["mib"], mean(rows, "wall")
                if dtype == "fp32":
                    base = acc
                label = dtype
                if acc is None:
                    print(f"{name:9s} {label:13s} {rows[-1]['status']}", flush=True)
                    if dtype == "fp32":
                        base = None
                    continue
                delta = f"{(acc - base) * 100:+.2f} pt" if base is not None else "-"
                print(f"{name:9s} {label:13s} {acc:9.4f} {delta:>8s} {mib:10.2f} "
                      f"{rows[0]['ratio']:6.2f} {wall:5.0f}s", flush=True)
                if len(args.seeds) > 1:
                    print(f"{'':23s} per seed: " + ", ".join(f"{r['acc']:.4f}" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
