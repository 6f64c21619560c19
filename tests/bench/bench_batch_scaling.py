#!/usr/bin/env python3
"""A critical-batch study of the Fashion-MNIST MLP through larchd: a
batch_scaling sweep (docs/api.md, "Batch-scaling studies") over batch sizes
from 64 to 16384 to a val/accuracy target, on the local executor, one child
at a time. Prints per batch size the steps S, examples E and seconds to the
target and the speed-up against the reference batch, then the McCandlish et
al. fit (S_min, E_min, b_crit, residuals), and the mean online gradient
noise scale train/gns of each child over its last evaluations before the
target when the trainer reports it.

    LARCH_BUILD_DIR=build /usr/bin/python3 tests/bench/bench_batch_scaling.py \\
        [--sizes 64,256,1024,2048,4096,16384] [--target 0.88] [--epochs 40]
        [--hidden 256,256] [--optimizer lamb|lars|sgd] [--parallel 1]

The base: MLP (ReLU), per-feature standardised inputs, LAMB (lr 0.002 at
reference 256, sqrt scaling, 1-epoch warmup from the base lr, no decay,
wd 0.01) by default: one recipe at every size, which LAMB's layer-wise
trust ratio carries to 16k. Not a pass/fail test.
"""
import argparse
import pathlib
import sys
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from larchd import Larchd  # noqa: E402

RECIPES = {
    "lamb": {"type": "lamb", "lr": 0.002, "weight_decay": 0.01},
    "lars": {"type": "lars", "lr": 1.0, "momentum": 0.9, "weight_decay": 1e-4},
    "sgd": {"type": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4},
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="64,256,1024,2048,4096,16384")
    ap.add_argument("--target", type=float, default=0.88)
    ap.add_argument("--epochs", type=float, default=40)
    ap.add_argument("--hidden", default="256,256")
    ap.add_argument("--optimizer", default="lamb", choices=sorted(RECIPES))
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=40, help="steps at batch 256")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    base = {"model": {"type": "mlp", "hidden": [int(x) for x in a.hidden.split(",")]},
            "data": {"name": "fashion-mnist", "standardize": "per_feature"},
            "batch": {"global": 256, "reference": 256}, "optimizer": RECIPES[a.optimizer],
            "schedule": {"lr_scaling": "sqrt", "warmup": {"epochs": 1}},
            "epochs": a.epochs, "eval_every": a.eval_every, "log_every": 100,
            "checkpoint_at_end": False, "resources": {"cpus_per_task": 2}}
    body = {"kind": "batch_scaling", "name": "bench-bs", "base": base, "batch_sizes": sizes,
            "target": {"metric": "val/accuracy", "value": a.target, "mode": "max"},
            "max_parallel": a.parallel}
    import tempfile
    with tempfile.TemporaryDirectory(prefix="bench-bs-") as tmp:
        d = Larchd(pathlib.Path(tmp), args=["--max-local-jobs", str(a.parallel)]).start()
        h = {**d.auth(), "Content-Type": "application/json"}
        try:
            run(d, body, sizes)
        finally:
            # a stopped larchd leaves its jobs running (a restart adopts them)
            for s in requests.get(d.url + "/v1/sweeps", headers=h, timeout=30).json()["sweeps"]:
                requests.post(f"{d.url}/v1/sweeps/{s['id']}/cancel", headers=h, timeout=60)
            d.stop()


def run(d, body, sizes):
    h = {**d.auth(), "Content-Type": "application/json"}
    t0 = time.monotonic()
    r = requests.post(d.url + "/v1/sweeps", headers=h, json=body, timeout=30)
    if r.status_code != 201:
        sys.exit(f"submit: {r.status_code} {r.text}")
    sid = r.json()["id"]
    print(f"study {sid}: batch sizes {sizes}, target val/accuracy >= {body['target']['value']}")
    last = None
    while True:
        s = requests.get(f"{d.url}/v1/sweeps/{sid}", headers=h, timeout=30).json()
        done = sum(s["counts"].get(k, 0) for k in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"))
        if done != last:
            print(f"  {time.monotonic() - t0:6.0f}s: {done}/{len(sizes)} children ended",
                  flush=True)
            last = done
        if s["state"] not in ("QUEUED", "RUNNING"):
            break
        time.sleep(2)
    st = s["study"]
    print(f"\n{'B':>6} {'state':>10} {'S':>7} {'E':>10} {'seconds':>8} {'speedup':>7} {'gns':>9}")
    for p in st["points"]:
        gns = mean_gns(d, h, p)
        f = lambda v, fmt: format(v, fmt) if v is not None else "-"  # noqa: E731
        print(f"{p['batch']:>6} {p['state']:>10} {f(p['steps'], '>7')} {f(p['examples'], '>10')} "
              f"{f(p['seconds'], '>8.1f')} {f(p['speedup'], '>7.2f')} {f(gns, '>9.1f')}")
    fit = st["fit"]
    if fit:
        print(f"\nfit: S_min {fit['s_min']:.1f} steps, E_min {fit['e_min']:.0f} examples, "
              f"b_crit {fit['b_crit']:.0f} (rms log residual {fit['rms']:.3f})")
        print("residuals (log S):", " ".join(f"{x:+.3f}" for x in fit["residuals"]))
    if st["note"]:
        print("note:", st["note"])
    print(f"wall: {time.monotonic() - t0:.0f}s")


def mean_gns(d, h, p, last=5):
    """The mean of train/gns over the child's last points before its target
    step (None when the trainer does not report it)."""
    q = {"names": "train/gns", "max_points": 10000}
    r = requests.get(f"{d.url}/v1/jobs/{p['job']}/metrics", headers=h, params=q, timeout=30)
    if r.status_code != 200:
        return None
    pts = [x for x in find_points(r.json()) if p["steps"] is None or x[0] <= p["steps"]]
    vals = [v for _, v in pts[-last:] if v is not None]
    return sum(vals) / len(vals) if vals else None


def find_points(j):
    for series in j.get("series", []):
        if series.get("name") == "train/gns":
            return [(pt[0], pt[1]) if isinstance(pt, list) else (pt["step"], pt["value"])
                    for pt in series.get("points", [])]
    return []


if __name__ == "__main__":
    main()
