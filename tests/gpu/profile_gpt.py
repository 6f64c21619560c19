#!/usr/bin/env python3
"""tests/gpu/profile_gpt.py - where a GPT training step's GPU time goes: runs
larch-train (--device cuda) on GPT-2 124M for a few steps under Nsight
Compute, reading one metric (gpu__time_duration.sum) per kernel, and prints
the kernels grouped by name: time per step, launches per step, share.

    python3 tests/gpu/profile_gpt.py --build build-gpu [--precision bf16]
                                     [--micro 8] [--steps 2] [--layers 12]
                                     [--nondeterministic]

ncu runs the kernels one at a time (--cache-control none, --clock-control
none), so the sum is the step's kernel time without overlap or launch gaps;
the step's wall time beside it (from a run without ncu) shows what the gaps
cost. The validation pass at the end is left out by giving the run no
validation set. --nondeterministic profiles the spec's "deterministic":
false (tuned GEMMs, attention's dq added atomically): the run under ncu
takes the plain run's GEMM picks (its gemm-tune.txt), so that no tuning
runs are among its kernels. Exit 77 when ncu or a GPU is missing.
"""
import argparse
import collections
import csv
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench"))
from bench_gpt_gpu import write_tokens  # noqa: E402


def find_ncu():
    for cand in (shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if cand and os.access(cand, os.X_OK):
            return cand
    found = sorted(pathlib.Path("/opt/nvidia").glob("nsight-compute/*/ncu"))
    return str(found[-1]) if found else None


def spec_for(a, tmp):
    return {"name": f"profile-{a.precision}",
            "precision": {"compute": a.precision, "deterministic": not a.nondeterministic},
            "model": {"type": "gpt", "layers": a.layers, "heads": a.heads, "dim": a.dim,
                      "seq": a.seq, "vocab": a.vocab},
            "data": {"format": "tokens_u16", "train": str(tmp / "train.bin")},
            "batch": {"global": a.micro, "micro": a.micro},
            "optimizer": {"type": "adamw", "lr": 6e-4, "betas": [0.9, 0.95],
                          "weight_decay": 0.1},
            "steps": a.steps, "log_every": 1, "seed": 1, "checkpoint_at_end": False}


def short(name):
    """cuBLAS kernel names run to hundreds of characters; keep the head."""
    name = name.split("(")[0]
    return name if len(name) <= 70 else name[:67] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("LARCH_BUILD", "build-gpu"))
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--nondeterministic", action="store_true")
    a = ap.parse_args()
    exe = pathlib.Path(a.build) / "trainer" / "larch-train"
    ncu = find_ncu()
    if ncu is None:
        print("ncu (Nsight Compute) not found: skipping")
        return 77
    probe = subprocess.run([str(exe), "--list-devices"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"no CUDA device: skipping ({probe.stdout.strip()})")
        return 77
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="larch-profile."))
    try:
        write_tokens(tmp / "train.bin", a.micro * a.seq * (a.steps + 2) + 1, a.vocab, 1)
        (tmp / "spec.json").write_text(json.dumps(spec_for(a, tmp)))
        cmd = [str(exe), "--spec", str(tmp / "spec.json"), "--device", "cuda"]
        plain = subprocess.run(cmd + ["--job-dir", str(tmp / "plain")], capture_output=True,
                               text=True)
        if plain.returncode != 0:
            print(plain.stdout[-2000:], plain.stderr[-2000:])
            return 1
        walls = [json.loads(l) for l in (tmp / "plain" / "metrics.jsonl").read_text()
                 .splitlines()]
        tok_s = [m["value"] for m in walls if m["name"] == "train/tokens_per_s"]
        step_ms = [a.micro * a.seq / r * 1e3 for r in tok_s if r > 0]
        picks = tmp / "plain" / "gemm-tune.txt"
        if picks.exists():
            (tmp / "ncu").mkdir()
            shutil.copy(picks, tmp / "ncu" / "gemm-tune.txt")
        prof = subprocess.run([ncu, "--clock-control", "none", "--cache-control", "none",
                               "--metrics", "gpu__time_duration.sum", "--csv", "--page", "raw",
                               "--print-units", "base",
                               *cmd, "--job-dir", str(tmp / "ncu")],
                              capture_output=True, text=True)
        if prof.returncode != 0:
            print(prof.stdout[-3000:], prof.stderr[-3000:])
            return 1
        text = prof.stdout[prof.stdout.find('"ID"'):]
        rows = list(csv.DictReader(io.StringIO(text)))
        rows = [r for r in rows if r.get("ID", "").isdigit()]
        per = collections.defaultdict(lambda: [0.0, 0])
        total = 0.0
        for r in rows:
            ns = float(r["gpu__time_duration.sum"].replace(",", ""))
            per[short(r["Kernel Name"])][0] += ns
            per[short(r["Kernel Name"])][1] += 1
            total += ns
        n = a.steps
        print(f"# GPT L={a.layers} C={a.dim} T={a.seq} V={a.vocab} micro {a.micro}, "
              f"{a.precision}{', nondeterministic' if a.nondeterministic else ''}, {n} steps; "
              f"{len(rows)} kernels in all")
        print(f"# wall per step without ncu: {', '.join(f'{s:.1f}' for s in step_ms)} ms; "
              f"kernel time per step under ncu: {total / n / 1e6:.1f} ms "
              f"(the first step's uploads and set-up included)")
        print(f"{'kernel':72s} {'ms/step':>9s} {'calls/step':>10s} {'share':>6s}")
        for name, (ns, cnt) in sorted(per.items(), key=lambda kv: -kv[1][0])[:a.top]:
            print(f"{name:72s} {ns / n / 1e6:9.3f} {cnt / n:10.1f} {100 * ns / total:5.1f}%")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
