#!/usr/bin/python3
"""offload.params: step time of "none" and "cpu" side by side, alone and with
offload.activations "recompute".

    /usr/bin/python3 tests/bench/bench_offload_params.py [--build build] [--layers 8]
                     [--dim 512] [--seq 256] [--micro 4] [--rounds 5] [--seconds 2]
                     [--threads N] [--clock wall|cpu]

Writes a gpt spec (default 8 layers, 8 heads, dim 512, seq 256, micro-batch 4,
AdamW) with each of four offload settings, and runs bench_step
(tests/bench/bench_step.c) on them once per round, the settings in turn
(A/B/C/D, A/B/C/D, ...), each for about --seconds of full training steps.
Prints per round the ms per step of each setting and the share of the
machine's CPU time other processes took meanwhile, then per setting the
median ms/step and the medians of the per-round ratios to "none" and to the
same activations without parameter offload; and, from `larch plan` of the
spec on a GPU (resources.gpus_per_node 1; fp32), the params and grads the
device holds and the host copies. On this CPU trainer parameter offload
costs its copies (memcpy): per micro-batch every block's weights in for
forward and all but the last two again for backward, and every block's
gradients out; the GEMMs are the same.

--threads 1 --clock cpu times with the process's CPU time (bench_step's
--clock), which other processes on a busy machine disturb much less.
Prints figures; never fails on them.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import stepbench  # noqa: E402  (beside this script)
ROOT = HERE.parent.parent
# (name, offload.params, offload.activations)
SETTINGS = (("none", "none", "none"), ("params", "cpu", "none"),
            ("recompute", "none", "recompute"), ("params+rec", "cpu", "recompute"))


def run(cmd):
    return stepbench.run(cmd, "bench_offload_params")


def write_specs(tmp, a):
    corpus = tmp / "corpus.txt"
    corpus.write_bytes(bytes(range(32, 127)) * 2000)
    paths = {}
    for name, params, act in SETTINGS:
        spec = {"name": "bench-offload-" + name.replace("+", "-"),
                "model": {"type": "gpt", "layers": a.layers, "heads": 8, "dim": a.dim,
                          "seq": a.seq},
                "data": {"format": "text", "path": str(corpus)},
                "batch": {"global": a.micro, "micro": a.micro},
                "optimizer": {"type": "adamw", "lr": 1e-3, "weight_decay": 0.1,
                              "clip_grad_norm": 1.0},
                "offload": {"params": params, "activations": act},
                "steps": 100, "seed": 1}
        paths[name] = tmp / (name + ".json")
        paths[name].write_text(json.dumps(spec))
    return paths


def device_mib(build, path):
    """(params + grads on the device, their host copies) in MiB from larch plan
    on one GPU, or None without the service build."""
    larch = pathlib.Path(build) / "service" / "larch"
    if not larch.exists():
        return None
    spec = json.loads(path.read_text())
    spec["resources"] = {"gpus_per_node": 1}
    gpu = path.with_suffix(".gpu.json")
    gpu.write_text(json.dumps(spec))
    p = subprocess.run([str(larch), "plan", str(gpu), "--json"], capture_output=True, text=True)
    if p.returncode not in (0, 1):
        return None
    items = json.loads(p.stdout)["items"]
    return ((items["params"] + items["grads"]) / 2**20, items.get("param_offload", 0) / 2**20)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    a = ap.parse_args()
    exe = pathlib.Path(a.build) / "tests" / "bench" / "bench_step"
    if not exe.exists():
        raise SystemExit(f"bench_offload_params: {exe} is missing: build first")

    with tempfile.TemporaryDirectory(prefix="bench-offload-params-") as d:
        paths = write_specs(pathlib.Path(d), a)
        memory = {name: device_mib(a.build, paths[name]) for name, _, _ in SETTINGS}
        steps = {name: [] for name, _, _ in SETTINGS}
        first = True
        for r in range(a.rounds):
            line = []
            for name, _, _ in SETTINGS:
                j, foreign, out = run([str(exe), str(paths[name]), "--rounds", "1",
                                       "--seconds", str(a.seconds), "--warmup", "2",
                                       "--threads", str(a.threads), "--clock", a.clock,
                                       "--json"])
                if first:
                    print("\n".join(l for l in out.splitlines()
                                    if l.startswith(("bench_step:", "blas:", "threads:"))))
                    first = False
                steps[name].append(j["step_ms"])
                line.append("%-10s %8.1f ms (others %2.0f%%)" % (name, j["step_ms"], 100 * foreign))
            print("round %d: %s" % (r, " | ".join(line)), flush=True)

    base_of = {"none": "none", "params": "none", "recompute": "recompute",
               "params+rec": "recompute"}
    print("\n%-11s %10s %8s %13s %18s %14s" % ("setting", "step ms", "x none", "x same acts",
                                               "device params+grads", "host copies"))
    for name, _, _ in SETTINGS:
        x_none = statistics.median(s / n for s, n in zip(steps[name], steps["none"]))
        x_same = statistics.median(s / n for s, n in zip(steps[name], steps[base_of[name]]))
        mem = memory[name]
        mem_text = "%14.1f MiB %10.1f MiB" % mem if mem else "%18s %14s" % ("-", "-")
        print("%-11s %10.1f %8.3f %13.3f %s" % (name, statistics.median(steps[name]), x_none,
                                                 x_same, mem_text))
    print("step ms: median over rounds; x none, x same acts: medians of the per-round ratios "
          "(x same acts: to the setting with the same activations and no parameter offload); "
          "memory: larch plan on one GPU, fp32")


if __name__ == "__main__":
    main()
