#!/usr/bin/env python3
"""Large-batch accuracy on Fashion-MNIST: the same MLP (784-1024-1024-10, ReLU)
for the same number of epochs at batch 256, 2048 and 8192, printed side by side
with the difference to batch 256.

    /usr/bin/python3 tests/bench/bench_large_batch.py [--epochs 20] [--only NAME ...]
                                                     [--seeds 42] [--build build]
                                                     [--standardize per_feature|global]

Rows (the issue's reference, numpy on this machine kind: 256 -> 0.902;
2048 linear + 5-epoch warmup -> 0.903; 8192 linear diverged, sqrt 0.885,
LARS 0.883):
  b256          SGD momentum 0.9, wd 5e-4, lr 0.05, 1-epoch warmup, cosine
  b2048-linear  the same at batch 2048: lr x8 = 0.4 (linear scaling), warmup
                5 epochs from the base lr (Goyal et al.)
  b8192-linear  SGD, lr x32 = 1.6: the rule that breaks down past ~8k
  b8192-sqrt    SGD, lr x sqrt(32)
  b8192-lars    LARS (trust 0.001), global lr 10, 5-epoch warmup, poly decay,
                wd 1e-4 (the best of a sweep, docs/perf-log.md); every layer adapted
  b8192-lamb    LAMB, lr 0.002 x sqrt(32), 5-epoch warmup from the base lr,
                cosine, wd 0.01 (biases excluded from decay and adaptation)
  b256-fp16     b256 with fp16 compute (dynamic loss scale), fp32 master weights
  b256-bf16     b256 with bf16 compute
  b8192-lars-2r b8192-lars over 2 ranks (mpirun, one thread each), ZeRO-1
Every row standardises its inputs the same way: per_feature (each pixel with
its own train mean and std, data.standardize) by default, global (one mean
and std over all pixels) with --standardize global. Accuracy is the test
split's (t10k) at the end of the run. Not a pass/fail test.
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]

SGD = {"type": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4}
LARS = {"type": "lars", "lr": 10.0, "momentum": 0.9, "weight_decay": 5e-4, "trust_coef": 0.001,
        "exclude_from_weight_decay": [], "exclude_from_adaptation": []}
B256 = {"lr_scaling": "linear", "warmup": {"epochs": 1}, "decay": "cosine"}
# rows beyond the batch-size ones: name -> (base row, what the spec adds)
VARIANTS = {
    "b256-fp16": ("b256", {"precision": {"compute": "fp16"}}),
    "b256-bf16": ("b256", {"precision": {"compute": "bf16"}}),
    "b8192-lars-2r": ("b8192-lars", {"parallel": {"ranks": 2, "zero_stage": 1}}),
}
CONFIGS = [
    ("b256", 256, 256, SGD, {"lr_scaling": "linear", "warmup": {"epochs": 1}, "decay": "cosine"}),
    ("b2048-linear", 2048, 2048, SGD,
     {"lr_scaling": "linear", "warmup": {"epochs": 5}, "decay": "cosine"}),
    ("b8192-linear", 8192, 2048, SGD,
     {"lr_scaling": "linear", "warmup": {"epochs": 5}, "decay": "cosine"}),
    ("b8192-sqrt", 8192, 2048, SGD,
     {"lr_scaling": "sqrt", "warmup": {"epochs": 5}, "decay": "cosine"}),
    ("b8192-lars", 8192, 2048,
     {"type": "lars", "lr": 10.0, "momentum": 0.9, "weight_decay": 1e-4, "trust_coef": 0.001,
      "exclude_from_weight_decay": [], "exclude_from_adaptation": []},
     {"lr_scaling": "none", "warmup": {"epochs": 5}, "decay": "poly"}),
    ("b8192-lamb", 8192, 2048, {"type": "lamb", "lr": 0.002, "weight_decay": 0.01},
     {"lr_scaling": "sqrt", "warmup": {"epochs": 5}, "decay": "cosine"}),
]


def run(exe, workdir, name, batch, micro, optimizer, schedule, epochs, seed, threads, extra=None,
        standardize="per_feature"):
    extra = extra or {}
    ranks = extra.get("parallel", {}).get("ranks", 1)
    if ranks > 1:
        micro = min(micro, batch // ranks)
    spec = {
        "name": name,
        "model": {"type": "mlp", "hidden": [1024, 1024], "activation": "relu"},
        "data": {"name": "fashion-mnist", "standardize": standardize},
        "batch": {"global": batch, "micro": micro, "reference": 256},
        "optimizer": optimizer,
        "schedule": schedule,
        "epochs": epochs,
        "seed": seed,
        "log_every": 1000,
        **extra,
    }
    spec_path = workdir / f"{name}-{seed}.json"
    spec_path.write_text(json.dumps(spec))
    job = workdir / f"{name}-{seed}"
    cmd = [str(exe), "--spec", str(spec_path), "--job-dir", str(job), "--quiet"]
    if threads or ranks > 1:
        cmd += ["--threads", str(threads or 1)]
    if ranks > 1:
        mpirun = ["mpirun", "--oversubscribe", "--bind-to", "none", "-n", str(ranks)]
        if os.geteuid() == 0:
            mpirun.append("--allow-run-as-root")
        cmd = mpirun + cmd
        if not shutil.which("mpirun"):
            raise SystemExit("bench_large_batch: mpirun is missing (deploy/install-deps.sh)")
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    res = json.loads((job / "result.json").read_text())
    final = res.get("final") or {}
    train = [json.loads(l) for l in (job / "metrics.jsonl").read_text().splitlines()]
    sps = [m["value"] for m in train if m["name"] == "train/samples_per_s"]
    blas = next((l[len("blas: "):] for l in out.stdout.splitlines() if l.startswith("blas: ")), "?")
    return {
        "blas": blas,
        "status": res["status"] if out.returncode in (0, 4) else f"exit {out.returncode}",
        "acc": final.get("val/accuracy"),
        "loss": final.get("val/loss"),
        "steps": res["steps"],
        "wall": wall,
        "sps": sum(sps) / len(sps) if sps else float("nan"),
        "peak_lr": max((m["value"] for m in train if m["name"] == "train/lr"), default=float("nan")),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=float, default=20)
    ap.add_argument("--seeds", type=int, nargs="+", default=[42])
    ap.add_argument("--only", nargs="+", help="run only these rows (b256 always runs)")
    ap.add_argument("--build", default=os.environ.get("LARCH_BUILD_DIR", ROOT / "build"))
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--standardize", choices=["per_feature", "global"], default="per_feature")
    args = ap.parse_args()
    exe = pathlib.Path(args.build) / "trainer" / "larch-train"
    rows = {c[0]: (c, {}) for c in CONFIGS}
    for name, (base, extra) in VARIANTS.items():
        rows[name] = ((name,) + rows[base][0][1:], extra)
    configs = [v for k, v in rows.items() if not args.only or k == "b256" or k in args.only]

    print(f"# Fashion-MNIST, MLP 784-1024-1024-10, {args.epochs:g} epochs, seeds {args.seeds}, "
          f"inputs standardised {args.standardize}")
    print(f"{'run':14s} {'batch':>6s} {'optimizer':>9s} {'prec':>5s} {'ranks':>5s} {'peak lr':>8s} {'steps':>6s} "
          f"{'test acc':>9s} {'vs b256':>8s} {'val loss':>9s} {'samples/s':>10s} {'wall':>7s}")
    base = None
    with tempfile.TemporaryDirectory(prefix="larch-bench-") as tmp:
        for (name, batch, micro, opt, sched), extra in configs:
            rows = [run(exe, pathlib.Path(tmp), name, batch, micro, opt, sched, args.epochs, s,
                        args.threads, extra, args.standardize) for s in args.seeds]
            accs = [r["acc"] for r in rows if r["acc"] is not None and r["status"] == "completed"]
            acc = sum(accs) / len(accs) if len(accs) == len(rows) else None
            if name == "b256":
                base = acc
            r = rows[-1]
            delta = f"{(acc - base) * 100:+.2f} pt" if acc is not None and base is not None else "-"
            acc_s = f"{acc:.4f}" if acc is not None else r["status"]
            loss_s = f"{r['loss']:.4f}" if r["loss"] is not None else "-"
            prec = extra.get("precision", {}).get("compute", "fp32")
            nranks = extra.get("parallel", {}).get("ranks", 1)
            print(f"{name:14s} {batch:6d} {opt['type']:>9s} {prec:>5s} {nranks:5d} {r['peak_lr']:8.4g} {r['steps']:6d} "
                  f"{acc_s:>9s} {delta:>8s} {loss_s:>9s} {r['sps']:10.0f} {r['wall']:6.0f}s",
                  flush=True)
            if len(args.seeds) > 1:
                print(f"{'':14s} per seed: " + ", ".join(
                    f"{a:.4f}" if a is not None else "-" for a in (x["acc"] for x in rows)))
    print(f"# blas: {r['blas']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
