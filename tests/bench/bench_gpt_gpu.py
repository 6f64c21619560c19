#!/usr/bin/env python3
"""tests/bench/bench_gpt_gpu.py - GPT-2 124M on one GPU: larch-train beside
PyTorch, in one run on the same GPU (issue #7's benchmark).

    python3 tests/bench/bench_gpt_gpu.py [--build build-gpu] [--micro auto|N] [--micro-cap 128]
                                         [--steps 30] [--no-torch] [--layers 12] [--dim 768]
                                         [--seq 1024] [--rows bf16,nondeterministic,torch,...]

The model: GPT-2 small (12 layers, 12 heads, dim 768, seq 1024, vocab
50257, tied embeddings), AdamW, on random tokens the script writes in
llm.c's format, at the largest micro-batch that fits (issue #7): with
--micro auto (the default) the largest power of two up to --micro-cap that
`larch plan` says fits in 80% of the GPU's free memory, for fp32 and for
bf16; PyTorch runs the same micro-batch, halved until it fits (the table
says which ran). Printed side by side:

  larch-train, --device cuda: fp32 and bf16, resident (weights, gradients,
  the master weights and AdamW on the GPU); bf16 keeps its activations as
  16-bit values that the GEMMs read in place (cuda_common.h), runs the
  fused attention and GELU in the fc GEMMs' cuBLASLt epilogues (the
  defaults since an H200 measured them); beside it "nondeterministic"
  (the spec's "deterministic": false: the 16-bit GEMMs tuned over 8 of
  cuBLASLt's candidates and the fused backward's dq added atomically) and
  "untuned" (LARCH_CUDA_KERNEL_PICKS=default: each op's default kernels,
  where the default rows time the variants that give the same bits at
  their first call and keep the fastest; the rows print each pick and its
  times, "kernels timed"). The variants that lost or never ran on a GPU
  left the trainer (docs/perf-log.md, "From kernels/README.md"); a
  variant to measure goes into tests/gpu/dev/ with its own benchmark.
  --rows names the rows to run, in order (a name again runs that row
  again: interleaved repeats show how much the machine's noise moves a
  row; the table then ends with each row's mean, spread and ratios over
  its runs)
  PyTorch, the same model in a short script: fp32 (TF32 off, as larch's
  GEMMs), and bf16 autocast with torch.compile, fused AdamW and SDPA
  (flash) attention, the baseline issue #7 names
  cuBLAS(Lt) through torch.matmul on the model's GEMM shapes (each
  layer's forward, input gradient and weight gradient, whose k is the
  batch's rows), fp32 and bf16, and a step's GEMMs at those rates: the
  bound a step's GEMMs could reach (beside the GEMMs' time in
  profile_gpt.py's table)

tokens/s of each (median over the logged intervals after the first two,
which include start-up and compilation), MFU = model FLOPs per token (the
formula larch-train uses: 72 L T C^2 + 12 L T^2 C + 6 T C V per sample of T
tokens) x tokens/s / the GPU's peak in that precision as larch-train
--list-devices prints it, the denominator of larch-train's own MFU (fp32:
from the SM count and clock; bf16: the dense tensor peak of NVIDIA's data
sheet for a part trainer/gpu_parts.c knows, 989.4 TFLOP/s for an H100 SXM
or an H200, else from the SM count and clock), and the ratio to PyTorch
bf16. Needs PyTorch with
CUDA for the baselines (--no-torch runs larch-train alone). Never fails on
timing.
"""
import argparse
import json
import os
import pathlib
import re
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]

def write_tokens(path, n, vocab, seed):
    """llm.c's token file: 256 int32 header (20240520, 1, count), uint16 tokens."""
    import random
    rnd = random.Random(seed)
    header = struct.pack("<256i", 20240520, 1, n, *([0] * 253))
    body = struct.pack(f"<{n}H", *(rnd.randrange(vocab) for _ in range(n)))
    path.write_bytes(header + body)


def flops_per_token(L, C, T, V):
    return (L * (72.0 * T * C * C + 12.0 * T * T * C) + 6.0 * T * C * V) / T


def larch_spec(tmp, a, precision, micro, tag="", deterministic=True):
    return {"name": f"gpt2-bench-{precision}{tag}",
            "precision": {"compute": precision, "deterministic": deterministic},
            "model": {"type": "gpt", "layers": a.layers, "heads": a.heads, "dim": a.dim,
                      "seq": a.seq, "vocab": a.vocab},
            "data": {"format": "tokens_u16", "train": str(tmp / "train.bin"),
                     "val": str(tmp / "val.bin")},
            "batch": {"global": micro, "micro": micro},
            "optimizer": {"type": "adamw", "lr": 6e-4, "betas": [0.9, 0.95],
                          "weight_decay": 0.1},
            "steps": a.steps, "log_every": a.log_every, "seed": 1,
            "resources": {"gpus_per_node": 1}, "checkpoint_at_end": False}


def plan_largest_micro(exe, path, cap, gpu_gib=0.0, host_gib=0.0):
    """The largest power-of-two micro-batch up to cap (the micro-batch of the
    spec in path) that the memory plan (`larch-train --plan`, the planner of
    `larch plan` and of larchd's 422, built where the larch CLI is not: a GPU
    machine without the service's libraries) says fits in gpu_gib and
    host_gib (0: no limit): 0 when not even 1 does, None when the plan
    cannot be had."""
    lim = ["--gpu-mem", f"{gpu_gib:.2f}"] if gpu_gib else []
    lim += ["--host-mem", f"{host_gib:.2f}"] if host_gib else []
    try:
        p = subprocess.run([str(exe), "--plan", str(path), *lim], capture_output=True,
                           text=True, timeout=120)
        plan = json.loads(p.stdout)
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
        err = p.stderr.strip()[-300:] if isinstance(e, json.JSONDecodeError) else e
        print(f"# the memory plan failed: {err}")
        return None
    most = cap if plan.get("fits") else plan.get("largest_micro", 0)
    micro = 1 if most >= 1 else 0
    while micro and micro * 2 <= most:
        micro *= 2
    return micro


def plan_micro(exe, tmp, a, precision, gpu_gib):
    """plan_largest_micro of this benchmark's spec at a.micro_cap (at least
    1), or None when the plan cannot be had."""
    path = tmp / f"plan-{precision}.json"
    path.write_text(json.dumps(larch_spec(tmp, a, precision, a.micro_cap)))
    micro = plan_largest_micro(exe, path, a.micro_cap, gpu_gib)
    return None if micro is None else max(micro, 1)


def run_larch(exe, tmp, a, precision, micro, env=None, tag="", deterministic=True):
    spec = larch_spec(tmp, a, precision, micro, tag, deterministic)
    (tmp / "spec.json").write_text(json.dumps(spec))
    job = tmp / f"job-{precision}{tag}"
    t0 = time.time()
    p = subprocess.run([str(exe), "--spec", str(tmp / "spec.json"), "--job-dir",
                        str(job), "--device", "cuda"], capture_output=True, text=True,
                       env=dict(os.environ, **(env or {})))
    wall = time.time() - t0
    if p.returncode != 0:
        print(p.stdout[-2000:], p.stderr[-2000:])
        return {"error": f"exit {p.returncode}: {p.stderr.strip()[-300:]}"}
    rates = [m["value"] for m in map(json.loads, (job / "metrics.jsonl").read_text()
                                     .splitlines()) if m["name"] == "train/tokens_per_s"]
    dev = next((l for l in p.stdout.splitlines() if l.startswith("device:")), "device: ?")
    done = next((l for l in p.stdout.splitlines() if l.startswith("done:")), "")
    # the kernels' variants timed at their first call (kern_cuda_variant_pick):
    # "<op>:<key>=<pick> (<name>): <variant> <ms> ms, ..."
    timed = [l.split("kernels timed: ", 1)[1] for l in p.stderr.splitlines()
             if "larch: kernels timed: " in l]
    # the GEMMs' same-bits tuning: how many of each problem's cuBLASLt
    # candidates gave the default path's bits ("gemm;ops=...: 3 of 8 ...")
    same = [l.split("GEMM same bits: ", 1)[1] for l in p.stderr.splitlines()
            if "larch: GEMM same bits: " in l]
    return {"tokens_s": statistics.median(rates[2:] or rates), "device": dev, "done": done,
            "wall": wall, "micro": micro, "timed": timed, "same": same}


TORCH_GPT = r'''
import math, time, torch, torch.nn as nn, torch.nn.functional as F

class Block(nn.Module):
    def __init__(s, C, NH):
        super().__init__()
        s.NH = NH
        s.ln1, s.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        s.qkv, s.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        s.fc, s.fcp = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, s.NH, C // s.NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + s.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + s.fcp(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))

class GPT(nn.Module):
    def __init__(s, L, NH, C, T, V):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        s.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        s.lnf = nn.LayerNorm(C)
        for mod in s.modules():            # GPT-2's: N(0, 0.02), zero biases
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, 0.0, 0.02)
            if isinstance(mod, nn.Linear):
                nn.init.zeros_(mod.bias)

    def forward(s, idx, targets):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in s.blocks:
            x = b(x)
        logits = F.linear(s.lnf(x), s.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))

def bench(L, NH, C, T, V, B, steps, bf16):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    model = GPT(L, NH, C, T, V).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=True)
    step_model = torch.compile(model) if bf16 else model
    x = torch.randint(0, V, (B, T), device="cuda")
    y = torch.randint(0, V, (B, T), device="cuda")
    times = []
    for i in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = step_model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    dt = sorted(times[len(times) // 3:])[len(times[len(times) // 3:]) // 2]
    return B * T / dt, loss.item()

def gemms(B, T, C, V, dtype, reps=20):
    """cuBLAS through torch.matmul on each GEMM of a GPT step, per layer
    kind: the forward x w^T, the input gradient dy w and the weight
    gradient dy^T x (its sum over the B T rows): (name, pass, m, k, n,
    FLOP/s, seconds a call)"""
    torch.backends.cuda.matmul.allow_tf32 = False
    out = []
    BT = B * T
    for name, (k, n) in [("qkv", (C, 3 * C)), ("proj", (C, C)), ("fc", (C, 4 * C)),
                         ("fcproj", (4 * C, C)), ("lm_head", (C, V))]:
        x = torch.randn(BT, k, device="cuda", dtype=dtype)
        w = torch.randn(n, k, device="cuda", dtype=dtype)
        dy = torch.randn(BT, n, device="cuda", dtype=dtype)
        for what, f, (mm, kk, nn) in (("fwd", lambda: x @ w.t(), (BT, k, n)),
                                      ("dinp", lambda: dy @ w, (BT, n, k)),
                                      ("dweight", lambda: dy.t() @ x, (n, BT, k))):
            for _ in range(3):
                f()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(reps):
                f()
            torch.cuda.synchronize()
            dt = (time.perf_counter() - t0) / reps
            out.append((name, what, mm, kk, nn, 2.0 * mm * kk * nn / dt, dt))
        del x, w, dy
        torch.cuda.empty_cache()
    return out
'''


def gemm_step_line(g, layers, label):
    """A step's GEMMs at the rates gemms() measured: every layer's forward,
    input and weight gradients, and lm_head's (whose input gradient the
    step also takes: the embedding's is tied), their time and rate."""
    secs = sum(dt * (1 if n == "lm_head" else layers) for n, _, _, _, _, _, dt in g)
    flop = sum(f * dt * (1 if n == "lm_head" else layers) for n, _, _, _, _, f, dt in g)
    return (f"a step's GEMMs at those rates ({label}, {layers} layers): {secs * 1e3:.1f} ms, "
            f"{flop / secs / 1e12:.1f} TFLOP/s")


def device_peaks(line):
    """fp32 and 16-bit tensor peaks (FLOP/s) from larch-train --list-devices'
    line: the MFU denominators larch-train itself divides by (the 16-bit one
    NVIDIA's data sheet for a part it knows, trainer/gpu_parts.c); NaN when
    the line lacks one."""
    peaks = []
    for what in ("fp32", "16-bit tensor"):
        m = re.search(r"([\d.]+) TFLOP/s " + what, line)
        peaks.append(float(m.group(1)) * 1e12 if m else float("nan"))
    return peaks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("LARCH_BUILD", "build-gpu"))
    ap.add_argument("--micro", default="auto",
                    help="micro-batch, or auto (default): the largest power of two up to "
                         "--micro-cap that larch plan says fits the GPU, for each precision; "
                         "PyTorch runs the same, halved until it fits")
    ap.add_argument("--micro-cap", type=int, default=128)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--log-every", type=int, default=5)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--rows", default="",
                    help="comma-separated rows to run, in order, a name again to repeat it "
                         "(default: all; a wrong name lists them)")
    a = ap.parse_args()
    build = pathlib.Path(a.build)
    exe = (build if build.is_absolute() else ROOT / build) / "trainer" / "larch-train"
    probe = subprocess.run([str(exe), "--list-devices"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"bench_gpt_gpu: no GPU: {probe.stdout.strip()}")
        return 77
    line = probe.stdout.splitlines()[0]
    fp32_peak, bf16_peak = device_peaks(line)
    print(f"# {line}")
    fpt = flops_per_token(a.layers, a.dim, a.seq, a.vocab)
    print(f"# GPT {a.layers} layers, {a.heads} heads, dim {a.dim}, seq {a.seq}, vocab {a.vocab}, "
          f"micro-batch {a.micro}, {a.steps} steps; {fpt / 1e9:.3f} GFLOP per token")
    # the micro-batch of each precision: given, or the largest larch plan
    # fits in 80% of the GPU's free memory (the rest for cuBLAS's workspace
    # and the kernels' stream-ordered scratch, which the plan leaves out)
    micro = {}
    if a.micro != "auto":
        micro = {"fp32": int(a.micro), "bf16": int(a.micro)}
    m = re.search(r"GiB \(([\d.]+) free\)", line)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-gpt-gpu.") as t:
        tmp = pathlib.Path(t)
        most = int(a.micro) if a.micro != "auto" else a.micro_cap
        write_tokens(tmp / "train.bin", max(most * a.seq * 4, 1 << 20), a.vocab, 1)
        write_tokens(tmp / "val.bin", a.seq * 2 + 1, a.vocab, 2)
        for prec in ("fp32", "bf16"):
            if prec not in micro:
                found = plan_micro(exe, tmp, a, prec, 0.8 * float(m.group(1))) if m else None
                micro[prec] = found or 8
                print(f"# micro-batch {prec}: {micro[prec]}"
                      + (" (larch plan)" if found else " (no plan: the default)"))
        torch_ns = {}

        def add_row(run, prec, tps, peak, b):
            rows.append((run, prec, tps, peak, b))
            print(f"# row: {run}, {prec}, micro-batch {b}: {tps:.0f} tokens/s, "
                  f"MFU {fpt * tps / peak:.1%}")

        def larch_row(prec, env=None, tag="", deterministic=True):
            r = run_larch(exe, tmp, a, prec, micro[prec], env, tag, deterministic)
            if "error" in r:
                print(f"larch-train {prec}{tag} failed: {r['error']}")
                return
            print(f"# larch-train {prec}{tag} {r['device']}\n"
                  f"# larch-train {prec}{tag} {r['done']}")
            for line in r["same"]:
                print(f"# larch-train {prec}{tag} GEMM same bits: {line}")
            for line in r["timed"]:
                print(f"# larch-train {prec}{tag} kernels timed: {line}")
            add_row("larch-train" + (f" ({tag[1:]})" if tag else ""), prec, r["tokens_s"],
                    fp32_peak if prec == "fp32" else bf16_peak, r["micro"])

        def torch_row(bf16):
            if a.no_torch or "failed" in torch_ns:
                return
            try:
                import torch
                if "bench" not in torch_ns:
                    exec(TORCH_GPT, torch_ns)
                r = torch_bench(torch, torch_ns, a, micro["bf16" if bf16 else "fp32"], bf16)
                add_row(f"PyTorch {torch.__version__}" + (" compile" if bf16 else ""),
                        "bf16" if bf16 else "fp32", r[0], bf16_peak if bf16 else fp32_peak,
                        r[1])
            except Exception as e:  # noqa: BLE001 - the baseline is optional: say why it is missing
                print(f"# PyTorch {'bf16' if bf16 else 'fp32'} baseline unavailable: "
                      f"{type(e).__name__}: {e}")
                if isinstance(e, ImportError):
                    torch_ns["failed"] = True

        def gemm_bound():
            if a.no_torch or "failed" in torch_ns:
                return
            try:
                import torch
                if "gemms" not in torch_ns:
                    exec(TORCH_GPT, torch_ns)
                for dtype, label in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
                    g = torch_ns["gemms"](micro["bf16"], a.seq, a.dim, a.vocab, dtype)
                    print(f"# cuBLAS GEMMs ({label}, torch.matmul): " + ", ".join(
                        f"{n} {w} {m}x{k}x{nn} {f / 1e12:.1f} TFLOP/s"
                        for n, w, m, k, nn, f, _ in g))
                    print("# " + gemm_step_line(g, a.layers, label))
            except Exception as e:  # noqa: BLE001
                print(f"# cuBLAS GEMM bound unavailable: {type(e).__name__}: {e}")

        def env_row(env, tag):
            return lambda: larch_row("bf16", env, "-" + tag)

        named = {"fp32": lambda: larch_row("fp32"), "bf16": lambda: larch_row("bf16"),
                 "torch": lambda: torch_row(True), "torch-fp32": lambda: torch_row(False),
                 "gemm-bound": gemm_bound,
                 "nondeterministic": lambda: larch_row("bf16", None, "-nondeterministic", False),
                 "untuned": env_row({"LARCH_CUDA_KERNEL_PICKS": "default"}, "untuned")}
        # in the order of what each row is worth, so that a run its time
        # limit cuts short still has the figures: larch fp32 and bf16
        # beside PyTorch bf16 first; --rows picks others (a name again runs
        # the row again: interleaved repeats show the machine's noise)
        order = a.rows.split(",") if a.rows else [
            "fp32", "bf16", "torch", "nondeterministic", "untuned", "torch-fp32", "gemm-bound"]
        unknown = [r for r in order if r not in named]
        if unknown:
            print(f"bench_gpt_gpu: unknown rows {', '.join(unknown)}; the rows: "
                  + ", ".join(named))
            return 2
        jobs = [named[r] for r in order]
        signal.signal(signal.SIGTERM, stop)
        try:
            for job in jobs:
                job()
        except Stopped:
            print("# stopped (SIGTERM: the time limit); the rows so far:")
        finally:
            table(rows, fpt)
    return 0


def torch_bench(torch, ns, a, b, bf16):
    """PyTorch's tokens/s at micro-batch b, halved until it fits: (tokens/s,
    the micro-batch that ran)."""
    import gc
    while True:
        oom = False
        try:
            tps, _ = ns["bench"](a.layers, a.heads, a.dim, a.seq, a.vocab, b, max(a.steps, 12),
                                 bf16)
            return tps, b
        except Exception as e:  # noqa: BLE001 - out of memory, in whichever form it comes
            if b == 1 or "out of memory" not in f"{type(e).__name__} {e}".lower():
                raise
            oom = True
        finally:
            # after the except block: its traceback held the failed try's
            # model, optimizer and activations
            if oom:
                gc.collect()
                torch._dynamo.reset()
                torch.cuda.empty_cache()
        b //= 2
        print(f"# PyTorch {'bf16' if bf16 else 'fp32'}: out of memory, micro-batch {b} next")


class Stopped(BaseException):
    """SIGTERM (run.sh's time limit): past every `except Exception`."""


def stop(_sig, _frame):
    raise Stopped()


def table(rows, fpt):
    base = next((r[2] for r in rows if r[0].startswith("PyTorch") and r[1] == "bf16"), None)
    f32 = next((r[2] for r in rows if r[0] == "larch-train" and r[1] == "fp32"), None)
    print(f"{'run':28s} {'precision':>9s} {'micro':>5s} {'tokens/s':>10s} {'MFU':>7s} "
          f"{'vs PyTorch bf16':>16s} {'vs larch fp32':>14s}")
    for run, prec, tps, peak, b in rows:
        mfu = fpt * tps / peak
        ratio = f"{tps / base:.2f}x" if base else "-"
        own = f"{tps / f32:.2f}x" if f32 and run.startswith("larch-train") else "-"
        print(f"{run:28s} {prec:>9s} {b:5d} {tps:10.0f} {mfu:7.1%} {ratio:>16s} {own:>14s}")
    repeats(rows, fpt)


def repeats(rows, fpt):
    """For rows run more than once (--rows naming them again, interleaved):
    each one's mean tokens/s and MFU, its spread (the runs' range over the
    mean), and its mean against larch-train bf16's mean and PyTorch bf16's:
    the figures a default is decided on, where one run's few percent of
    noise would decide it by chance."""
    runs = {}
    for run, prec, tps, peak, b in rows:
        runs.setdefault((run, prec, b), []).append((tps, peak))
    if all(len(v) < 2 for v in runs.values()):
        return

    def mean(key):
        return statistics.mean(t for t, _ in runs[key]) if key in runs else None

    base = next((mean(k) for k in runs if k[0] == "larch-train" and k[1] == "bf16"), None)
    torch_bf16 = next((mean(k) for k in runs if k[0].startswith("PyTorch") and k[1] == "bf16"),
                      None)
    print("# each row's mean over its runs (some ran more than once)")
    print(f"{'run':28s} {'precision':>9s} {'runs':>4s} {'mean tok/s':>10s} {'MFU':>7s} "
          f"{'spread':>7s} {'vs larch bf16':>14s} {'vs PyTorch bf16':>16s}")
    for (run, prec, b), got in runs.items():
        tps = [t for t, _ in got]
        m = statistics.mean(tps)
        spread = (max(tps) - min(tps)) / m
        own = f"{m / base:.3f}x" if base else "-"
        ratio = f"{m / torch_bf16:.3f}x" if torch_bf16 else "-"
        print(f"{run:28s} {prec:>9s} {len(tps):4d} {m:10.0f} {fpt * m / got[0][1]:7.1%} "
              f"{spread:7.1%} {own:>14s} {ratio:>16s}")


if __name__ == "__main__":
    sys.exit(main())
