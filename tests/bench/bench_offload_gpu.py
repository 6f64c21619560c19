#!/usr/bin/env python3
"""tests/bench/bench_offload_gpu.py - offloading on one GPU (issue #8's GPU
figures): GPT-2 shaped models trained by `larch-train --device cuda`.

    python3 tests/bench/bench_offload_gpu.py [--build build-gpu] [--ratio-size 1.5B]
                                             [--ratio-accum 32] [--sizes 1.5B 2.7B 6.7B 13B]
                                             [--steps 6] [--micro 4] [--seq 1024]
                                             [--precision bf16] [--sweep-micro auto|N]
                                             [--parts ratio sweep]

1. At --ratio-size: tokens/s with offload.optimizer "cpu" beside the same
   run without it (the target: >= 0.7x), each with activations recomputed,
   at a large-batch step: --ratio-accum micro-batches a step (32 x 4 x 1024
   = 131k tokens, GPT-2's 0.5M-token batch in four steps), over which the
   host's update and the transfers are spent once, as ZeRO-Offload
   measured them; --ratio-accum 1 shows the one-micro-batch step's ratio.
2. --sizes in turn with offload.optimizer and offload.params "cpu",
   activations recomputed, int8 optimizer state and --largest-precision
   (bf16: the host copies are the master weights, rounded by the GPU as it
   reads them), one micro-batch a step and no clipping, so that the update
   follows backward and the host holds about 6 bytes a parameter; until
   one fails (out of
   device or host memory, or --timeout): the largest that trains, its
   tokens/s and the device memory it used (the `device memory:` line at the
   end of a run). The sweep's micro-batch (--sweep-micro auto, the default)
   is per size the largest power of two up to --sweep-micro-cap that
   `larch plan` fits in 80% of the GPU's free memory and 90% of the host's
   available memory: the host's update and the parameters' trips over PCIe
   cost a step the same at any micro-batch, so a larger one hides them
   behind more compute. A size the plan says cannot fit the host at all is
   reported so, not run.

--parts says which of the two run, in which order (a short lease can take
the sweep first, or each in a call of its own). Tokens/s are the median of
the logged intervals after the first (which
holds the start-up). The models: GPT-2's shapes (vocab 50257, 12 heads up
to 1.5B) on random tokens in llm.c's format. Exits 77 without a GPU. Never
fails on figures.
"""
import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench"))
from bench_gpt_gpu import plan_largest_micro, write_tokens  # noqa: E402

# name -> (layers, heads, dim): GPT-2's and GPT-3's table
SIZES = {
    "124M": (12, 12, 768), "350M": (24, 16, 1024), "774M": (36, 20, 1280),
    "1.5B": (48, 25, 1600), "2.7B": (32, 32, 2560), "6.7B": (32, 32, 4096),
    "13B": (40, 40, 5120),
}


def spec_for(a, tmp, size, offload, precision=None, state="fp32", accum=1, micro=None):
    layers, heads, dim = SIZES[size]
    micro = micro or a.micro
    return {"name": f"offload-{size}", "precision": {"compute": precision or a.precision},
            "model": {"type": "gpt", "layers": layers, "heads": heads, "dim": dim,
                      "seq": a.seq, "vocab": 50257},
            "data": {"format": "tokens_u16", "train": str(tmp / "train.bin")},
            "batch": {"global": micro * accum, "micro": micro},
            "optimizer": {"type": "adamw", "lr": 1e-4, "weight_decay": 0.1,
                          "state_dtype": state},
            "offload": offload, "steps": a.steps, "log_every": 1, "seed": 1,
            # 13B's fp32 parameters and state would not fit the machine's disk
            "checkpoint_at_end": False}


def run(a, exe, tmp, size, offload, **how):
    spec = spec_for(a, tmp, size, offload, **how)
    tag = "-".join(f"{k}-{v}" for k, v in sorted(offload.items()))
    path = tmp / f"{size}-{tag}.json"
    path.write_text(json.dumps(spec))
    job = tmp / f"job-{size}-{tag}"
    t0 = time.time()
    try:
        p = subprocess.run([str(exe), "--spec", str(path), "--job-dir", str(job), "--device",
                            "cuda"], capture_output=True, text=True, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {a.timeout} s"}
    wall = time.time() - t0
    if p.returncode != 0:
        tail = (p.stderr.strip() or p.stdout.strip())[-300:]
        how = (f"killed by signal {-p.returncode} (the host's OOM killer?)" if p.returncode < 0
               else f"exit {p.returncode}")
        return {"error": f"{how}: {tail}"}
    points = [json.loads(l) for l in (job / "metrics.jsonl").read_text().splitlines()]
    rates = [m["value"] for m in points if m["name"] == "train/tokens_per_s"]
    after = [m["value"] for m in points if m["name"] == "train/after_backward_s"]
    phases = {name: statistics.median(v[1:] or v)
              for name in PHASES
              for v in [[m["value"] for m in points if m["name"] == f"offload/{name}_s"]] if v}
    mem = " ".join(l for l in p.stdout.splitlines()
                   if l.startswith(("device memory:", "host memory:")))
    return {"tokens_s": statistics.median(rates[1:] or rates), "wall": wall, "memory": mem,
            "after_s": statistics.median(after[1:] or after) if after else float("nan"),
            "phases": phases}


def sweep_micro(a, tmp, size, offload, gpu_gib, host_gib):
    """The sweep's micro-batch for size: --sweep-micro, or the largest power
    of two up to --sweep-micro-cap that `larch plan` fits in gpu_gib and
    host_gib; 0 when not even 1 fits, None when the plan cannot be had."""
    if a.sweep_micro != "auto":
        return int(a.sweep_micro)
    path = tmp / f"plan-{size}.json"
    path.write_text(json.dumps(dict(spec_for(a, tmp, size, offload, a.largest_precision, "int8",
                                             micro=a.sweep_micro_cap),
                                    resources={"gpus_per_node": 1})))
    return plan_largest_micro(pathlib.Path(a.build) / "trainer" / "larch-train", path,
                              a.sweep_micro_cap, gpu_gib, host_gib)


def host_available_gib():
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


REC = {"activations": "recompute"}
# the parts of an offloaded step after its last backward (train.c's offload/*_s)
PHASES = ("grads", "norm", "update", "params")


def link_speed():
    """The host <-> device copy speed with page-locked memory (GB/s each
    way, 1 GiB copies), as PyTorch measures it; None without PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    n = 1 << 28
    host = torch.empty(n, dtype=torch.float32, pin_memory=True)
    dev = torch.empty(n, dtype=torch.float32, device="cuda")
    speeds = []
    for dst, src in ((dev, host), (host, dev)):
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(3):
            dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        speeds.append(3 * 4 * n / (time.perf_counter() - t0) / 1e9)
    del host, dev                   # the runs after want the memory
    torch.cuda.empty_cache()
    return speeds


def ratio_part(a, exe, tmp, _devices):
    """tokens/s with offload.optimizer cpu beside without, at --ratio-size."""
    ratio = argparse.Namespace(**{**vars(a), "steps": a.ratio_steps})
    base = run(ratio, exe, tmp, a.ratio_size, REC, accum=a.ratio_accum)
    opt = run(ratio, exe, tmp, a.ratio_size, {**REC, "optimizer": "cpu"}, accum=a.ratio_accum)
    def rate(r):
        return f"{r['tokens_s']:.0f}" if "tokens_s" in r else r.get("error")
    print(f"{a.ratio_size}, {a.ratio_accum} x {a.micro} sequences a step: tokens/s without "
          f"offload.optimizer {rate(base)}, with {rate(opt)}", end="")
    if "tokens_s" in base and "tokens_s" in opt:
        print(f" -> {opt['tokens_s'] / base['tokens_s']:.2f}x (target >= 0.7x); a step's time "
              f"after its last backward returned (the update on the host, the gradients' and "
              f"parameters' copies): {base['after_s']:.3f} s without, {opt['after_s']:.3f} s "
              "with")
        if opt["phases"]:
            print("  with offload, after the last backward: " +
                  ", ".join(f"{k} {v:.3f} s" for k, v in opt["phases"].items()))
    else:
        print()


def sweep_part(a, exe, tmp, devices):
    """--sizes in turn with both offloads until one fails: the largest that
    trains."""
    # int8 state, one micro-batch a step and no clipping, so the update
    # follows backward and the host keeps no block gradients: about 6 host
    # bytes a parameter in fp32 (trn_spec_streams_update)
    print(f"# sweep: {a.largest_precision}, int8 optimizer state, the update following "
          f"backward")
    m = re.search(r"GiB \(([\d.]+) free\)", devices)
    gpu_gib = 0.8 * float(m.group(1)) if m else 0.0
    host_gib = 0.9 * host_available_gib()
    largest = None
    for size in a.sizes:
        off = {**REC, "optimizer": "cpu", "params": "cpu"}
        micro = sweep_micro(a, tmp, size, off, gpu_gib, host_gib)
        if micro == 0:
            room = [f"{g:.0f} GiB of {what} memory" for g, what in
                    ((gpu_gib, "GPU"), (host_gib, "host")) if g]
            print(f"{size}: optimizer + params offload: larch plan says it does not fit "
                  f"{' and '.join(room)}")
            break
        micro = micro or a.micro
        while True:
            r = run(a, exe, tmp, size, off, precision=a.largest_precision, state="int8",
                    micro=micro)
            # the plan leaves out the CUDA context and the libraries' own
            # memory: a device that ran out at the planned micro-batch may
            # still train the size at half of it
            oom = any(t in r.get("error", "") for t in ("out of memory",
                                                         "of GPU memory at micro-batch"))
            if not oom or micro == 1:
                break
            print(f"{size}: micro-batch {micro}: out of memory, {micro // 2} next")
            micro //= 2
        if "error" in r:
            print(f"{size}: optimizer + params offload, micro-batch {micro}: {r['error']}")
            break
        largest = size
        print(f"{size}: optimizer + params offload, micro-batch {micro}: "
              f"{r['tokens_s']:.0f} tokens/s ({r['wall']:.0f} s); {r['memory']}")
    print(f"largest that trains: {largest or 'none'} (target >= 13B)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("LARCH_BUILD", "build-gpu"))
    ap.add_argument("--ratio-size", default="1.5B", choices=SIZES)
    ap.add_argument("--sizes", nargs="+", default=["1.5B", "2.7B", "6.7B", "13B"],
                    choices=SIZES)
    ap.add_argument("--ratio-accum", type=int, default=32,
                    help="micro-batches a step in the ratio's two runs")
    ap.add_argument("--ratio-steps", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--largest-precision", default="bf16", choices=["fp32", "bf16"],
                    help="the sweep's compute dtype")
    ap.add_argument("--sweep-micro", default="auto",
                    help="the sweep's micro-batch, or auto (default): the largest power of two "
                         "up to --sweep-micro-cap that larch plan fits")
    ap.add_argument("--sweep-micro-cap", type=int, default=32)
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--parts", nargs="+", choices=["ratio", "sweep"], default=["ratio", "sweep"],
                    help="what to run, in this order (default: ratio sweep)")
    a = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)    # each figure out as it comes
    if a.sweep_micro != "auto" and not a.sweep_micro.isdigit():
        ap.error("--sweep-micro: auto or a number")
    exe = pathlib.Path(a.build) / "trainer" / "larch-train"
    probe = subprocess.run([str(exe), "--list-devices"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"no CUDA device: skipping ({probe.stdout.strip()})")
        return 77
    print(f"# {probe.stdout.strip()}")
    print(f"# {a.precision}, micro-batch {a.micro}, seq {a.seq}, {a.steps} steps, AdamW; "
          f"activations recomputed throughout")
    speeds = link_speed()
    if speeds:
        print(f"# host <-> device, page-locked, 1 GiB copies (PyTorch): host -> device "
              f"{speeds[0]:.1f} GB/s, device -> host {speeds[1]:.1f} GB/s")
    with tempfile.TemporaryDirectory(prefix="larch-offload-gpu.") as d:
        tmp = pathlib.Path(d)
        most = a.sweep_micro_cap if a.sweep_micro == "auto" else int(a.sweep_micro)
        seqs = max(most * (a.steps + 2), a.micro * a.ratio_accum * (a.ratio_steps + 2))
        write_tokens(tmp / "train.bin", seqs * a.seq + 1, 50257, 1)
        for part in a.parts:
            (ratio_part if part == "ratio" else sweep_part)(a, exe, tmp, probe.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
