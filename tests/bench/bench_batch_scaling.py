#!/usr/bin/env python3
"""A critical-batch study of a small Fashion-MNIST MLP through larchd: one
batch_scaling sweep (docs/api.md, "Batch-scaling studies") per seed over
batch sizes from 32 to 8192 to a val/accuracy target, on the local
executor, one child at a time. Prints per study and batch size the steps S,
examples E and seconds to the target, the speed-up in time against the
reference batch and B_simple, the online gradient noise scale (the mean
of the child's train/gns_trace over the mean of its train/gns_g2, both over
the second half of its way to the target); then the study's McCandlish et
al. fit (S_min, E_min, B_crit and the residuals of log S) and B_crit over
B_simple; then the studies side by side (S per size and seed, and the
fits).

    LARCH_BUILD_DIR=build /usr/bin/python3 tests/bench/bench_batch_scaling.py \\
        [--sizes 32,64,128,256,512,1024,2048,4096,8192] [--target 0.86] [--epochs 30]
        [--hidden 128] [--optimizer adamw|lamb|lars|sgd] [--micro 16] [--seeds 0,1,2]
        [--parallel 1] [--threads 1] [--eval-every 10] [--gns-from 0.5] [--timeout 720]

The base: MLP 784-128-10 (ReLU), per-feature standardised inputs, AdamW at
lr 0.001 for the reference batch 256 with sqrt scaling, no warmup or decay,
micro-batch 16 at every size, so that the trainer measures the noise scale
(B_small the step's first micro-batch, B_big the step's batch; a size must
be a multiple of micro, and 2 x micro at least for a B_simple). One child
at a time with one thread (larchd's OMP_NUM_THREADS), so that children do
not share the two cores with one another; the seconds still move with the
machine's load and hold the child's start (reading the data, about 3 s)
and its evaluations. Not a pass/fail test.
"""
import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from larchd import Larchd  # noqa: E402

RECIPES = {
    "adamw": {"type": "adamw", "lr": 0.001},
    "lamb": {"type": "lamb", "lr": 0.002, "weight_decay": 0.01},
    "lars": {"type": "lars", "lr": 1.0, "momentum": 0.9, "weight_decay": 1e-4},
    "sgd": {"type": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4},
}
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="32,64,128,256,512,1024,2048,4096,8192")
    ap.add_argument("--target", type=float, default=0.86)
    ap.add_argument("--epochs", type=float, default=30)
    ap.add_argument("--hidden", default="128")
    ap.add_argument("--optimizer", default="adamw", choices=sorted(RECIPES))
    ap.add_argument("--reference", type=int, default=256)
    ap.add_argument("--micro", type=int, default=16)
    ap.add_argument("--seeds", default="0,1,2", help="one study per seed, one after the other")
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of each child")
    ap.add_argument("--eval-every", type=int, default=10, help="steps at the reference batch")
    ap.add_argument("--gns-from", type=float, default=0.5,
                    help="a child's B_simple averages its train/gns_trace and train/gns_g2 "
                    "points from this fraction of its steps to the target up to the target")
    ap.add_argument("--timeout", type=float, default=720,
                    help="seconds the whole run may take: past them the running study is "
                    "cancelled, what ended is printed and no further study starts")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    seeds = [int(x) for x in a.seeds.split(",")]
    scaling = "linear" if a.optimizer in ("sgd", "lars") else "sqrt"
    base = {"model": {"type": "mlp", "hidden": [int(x) for x in a.hidden.split(",")]},
            "data": {"name": "fashion-mnist", "standardize": "per_feature"},
            "batch": {"global": a.reference, "micro": a.micro, "reference": a.reference},
            "optimizer": RECIPES[a.optimizer], "schedule": {"lr_scaling": scaling},
            "epochs": a.epochs, "eval_every": a.eval_every, "log_every": 5,
            "checkpoint_at_end": False, "resources": {"cpus_per_task": a.threads}}
    print(f"base: mlp 784-{a.hidden.replace(',', '-')}-10, {a.optimizer} lr "
          f"{RECIPES[a.optimizer]['lr']} at batch {a.reference} ({scaling} scaling), "
          f"micro {a.micro}, eval every {a.eval_every * a.reference} examples, "
          f"{a.parallel} child(ren) at a time, {a.threads} thread(s) each")
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads)}
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-bs-") as tmp:
        d = Larchd(pathlib.Path(tmp), env=env,
                   args=["--max-local-jobs", str(a.parallel * a.threads)]).start()
        h = {**d.auth(), "Content-Type": "application/json"}
        a.deadline = time.monotonic() + a.timeout
        try:
            for seed in seeds:
                if time.monotonic() > a.deadline:
                    print(f"\npast --timeout: seed {seed} and after not run")
                    break
                body = {"kind": "batch_scaling", "name": f"bench-bs-{seed}",
                        "base": {**base, "seed": seed}, "batch_sizes": sizes,
                        "target": {"metric": "val/accuracy", "value": a.target, "mode": "max"},
                        "max_parallel": a.parallel}
                results.append((seed, run(d, h, body, sizes, a)))
        finally:
            # a stopped larchd leaves its jobs running (a restart adopts them)
            for s in requests.get(d.url + "/v1/sweeps", headers=h, timeout=30).json()["sweeps"]:
                requests.post(f"{d.url}/v1/sweeps/{s['id']}/cancel", headers=h, timeout=60)
            d.stop()
    if len(results) > 1:
        summary(results, sizes)


def run(d, h, body, sizes, a):
    """Runs one study to its end; prints its table and fit and returns
    {"fit", "b_simple", "b_simple_ref", "steps": {B: S}, "wall"}."""
    t0 = time.monotonic()
    r = requests.post(d.url + "/v1/sweeps", headers=h, json=body, timeout=60)
    if r.status_code != 201:
        sys.exit(f"submit: {r.status_code} {r.text}")
    sid = r.json()["id"]
    print(f"\nstudy {sid} (seed {body['base']['seed']}): batch sizes {sizes}, "
          f"target val/accuracy >= {a.target}")
    last = None
    while True:
        s = requests.get(f"{d.url}/v1/sweeps/{sid}", headers=h, timeout=30).json()
        done = sum(s["counts"].get(k, 0) for k in ENDED)
        if done != last:
            print(f"  {time.monotonic() - t0:6.0f}s: {done}/{len(sizes)} children ended",
                  flush=True)
            last = done
        if s["state"] not in ("QUEUED", "RUNNING"):
            break
        if time.monotonic() > a.deadline:
            print(f"  past --timeout {a.timeout:.0f}s: cancelling the rest")
            requests.post(f"{d.url}/v1/sweeps/{sid}/cancel", headers=h, timeout=60)
            time.sleep(3)
            s = requests.get(f"{d.url}/v1/sweeps/{sid}", headers=h, timeout=30).json()
            break
        time.sleep(2)
    wall = time.monotonic() - t0
    st = s["study"]
    best = {c["job"]: c.get("best") for c in s.get("children", [])}
    print(f"\n{'B':>6} {'state':>10} {'best':>6} {'S':>6} {'E':>8} {'seconds':>7} "
          f"{'speedup':>7} {'B_simple':>8}")
    gns = {}
    for p in st["points"]:
        gns[p["batch"]] = child_gns(d, h, p, a.gns_from)
        print(f"{p['batch']:>6} {p['state']:>10} {fmt(best.get(p['job']), '>6.4f')} "
              f"{fmt(p['steps'], '>6')} {fmt(p['examples'], '>8')} "
              f"{fmt(p['seconds'], '>7.1f')} {fmt(p['speedup'], '>7.2f')} "
              f"{fmt(gns[p['batch']], '>8.0f')}")
    fit = st["fit"]
    if fit:
        print(f"\nfit over {fit['points']} sizes: S_min {fit['s_min']:.1f} steps, "
              f"E_min {fit['e_min']:.0f} examples, B_crit {fit['b_crit']:.0f} "
              f"(rms log residual {fit['rms']:.3f})")
        print("residuals (log S):", " ".join(f"{x:+.3f}" for x in fit["residuals"]))
    if st["note"]:
        print("note:", st["note"])
    vals = [v for v in gns.values() if v is not None]
    ref = gns.get(st["speedup_against"])
    med = statistics.median(vals) if vals else None
    if vals:
        line = (f"B_simple (each child's mean train/gns_trace over mean train/gns_g2 from "
                f"{a.gns_from:g} x S to S): "
                f"median over {len(vals)} children {med:.0f} "
                f"(range {min(vals):.0f}-{max(vals):.0f})")
        if ref is not None:
            line += f", reference batch {st['speedup_against']}: {ref:.0f}"
        print(line)
        if fit:
            line = f"B_crit / B_simple: {fit['b_crit'] / med:.2f} (median)"
            if ref is not None:
                line += f", {fit['b_crit'] / ref:.2f} (reference child)"
            print(line)
    else:
        print("B_simple: no child reported train/gns")
    print(f"wall: {wall:.0f}s")
    return {"fit": fit, "b_simple": med, "b_simple_ref": ref, "wall": wall,
            "steps": {p["batch"]: p["steps"] for p in st["points"]}}


def child_gns(d, h, p, frac):
    """B_simple of the child: the mean of its train/gns_trace points from
    step frac x S to its target step S (the last (1 - frac) of its run
    when it did not reach the target) over the mean of its train/gns_g2
    points there, each averaged before dividing as the trainer smooths them
    (a median of train/gns would see only the points whose |G|^2 came out
    positive); None when it reported none there or the mean |G|^2 is not
    positive (the noise swamps it: the step is not much larger than
    micro)."""
    r = requests.get(f"{d.url}/v1/jobs/{p['job']}/metrics", headers=h,
                     params={"name": ["train/gns_trace", "train/gns_g2"]}, timeout=30)
    if r.status_code != 200:
        print(f"  metrics of {p['job']}: {r.status_code} {r.text}")
        return None
    series = r.json()["series"]
    tr, g2 = series.get("train/gns_trace", []), series.get("train/gns_g2", [])
    end = p["steps"] if p["steps"] is not None else max((s for s, _ in tr), default=0)
    tr = [v for s, v in tr if frac * end <= s <= end and v is not None]
    g2 = [v for s, v in g2 if frac * end <= s <= end and v is not None]
    if not tr or not g2 or statistics.mean(g2) <= 0:
        return None
    return statistics.mean(tr) / statistics.mean(g2)


def summary(results, sizes):
    """The studies side by side: S per size and seed, then each fit."""
    print(f"\nsummary over {len(results)} seeds")
    print(f"{'B':>6} " + " ".join(f"{'S s' + str(seed):>8}" for seed, _ in results)
          + f" {'max/min':>7}")
    for b in sizes:
        ss = [r["steps"].get(b) for _, r in results]
        ok = [x for x in ss if x]
        spread = max(ok) / min(ok) if len(ok) > 1 else None
        print(f"{b:>6} " + " ".join(fmt(x, '>8') for x in ss) + f" {fmt(spread, '>7.2f')}")
    print(f"\n{'seed':>6} {'S_min':>7} {'E_min':>8} {'B_crit':>7} {'rms':>6} {'B_simple':>8} "
          f"{'B_crit/B_simple':>15} {'wall s':>6}")
    for seed, r in results:
        f = r["fit"] or {}
        ratio = f["b_crit"] / r["b_simple"] if f and r["b_simple"] else None
        print(f"{seed:>6} {fmt(f.get('s_min'), '>7.1f')} {fmt(f.get('e_min'), '>8.0f')} "
              f"{fmt(f.get('b_crit'), '>7.0f')} {fmt(f.get('rms'), '>6.3f')} "
              f"{fmt(r['b_simple'], '>8.0f')} {fmt(ratio, '>15.2f')} {r['wall']:>6.0f}")
    bc = [r["fit"]["b_crit"] for _, r in results if r["fit"]]
    bs = [r["b_simple"] for _, r in results if r["b_simple"]]
    if bc and bs:
        print(f"median over seeds: B_crit {statistics.median(bc):.0f} "
              f"({min(bc):.0f}-{max(bc):.0f}), B_simple {statistics.median(bs):.0f} "
              f"({min(bs):.0f}-{max(bs):.0f}), B_crit / B_simple "
              f"{statistics.median(bc) / statistics.median(bs):.2f}")


def fmt(v, spec):
    """v formatted by spec; None as "-" in the same width."""
    return format(v, spec) if v is not None else format("-", spec.split(".")[0].rstrip("d"))


if __name__ == "__main__":
    main()
