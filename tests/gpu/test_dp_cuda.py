#!/usr/bin/env python3
"""tests/gpu/test_dp_cuda.py - data parallel on GPUs: two ranks under mpirun,
one GPU each, weights, gradients and optimizer state on the devices and the
gradients reduced there by the GPU backend's device communicator (NCCL;
trainer/comm_nccl_cuda.c), against the same two-rank run on the CPU.

    python3 tests/gpu/test_dp_cuda.py --larch-train build/trainer/larch-train

On GPUs (two or more; exits 77 with fewer, or without mpirun or MPI): each
run's losses within TOL of the CPU's. Through the CPU stand-in of the GPU
backend (LARCH_CUDA_BACKEND=tests/unit's liblarch_trainer_cuda_shim.so, whose
device communicator is MPI on host memory; ctest unit.test_dp_cuda_shim),
bit for bit: the checkpoints at steps 6 and 12 equal the CPU run's byte for
byte, which checks the trainer's side of it (the device's gradient buckets,
their division, the ZeRO shard and the all-gather of the updated ranges,
the master weights and optimizer state gathered into the checkpoint), and
every gradient bucket starts its reduction during backward (the model
reports each parameter as it is final on the device).

1. The MLP, fp32, LARS (per-tensor norms across the shards), ZeRO-1; AdamW
   without ZeRO; bf16 AdamW with ZeRO-1 (fp32 master weights on the
   device); fp16 SGD with the dynamic loss scale and ZeRO-1.
2. GPT tiny, bf16, LAMB, ZeRO-1.
3. A resume on the devices from the step-6 checkpoint gives the
   uninterrupted run's step-12 checkpoint (ZeRO-1, bf16).
4. (Stand-in only) a device communicator that fails on one rank: both
   ranks go over the host together, say so, and still match.
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from test_train_cuda import (Checks, check_metrics, image_set, resume_dir,  # noqa: E402
                             write_corpus)

TOL = 2e-3           # relative, on losses after 12 updates, GPUs against the CPU
TOL16 = 3e-2         # the same in 16 bits (the GEMMs round in another order)


def mpirun(n):
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-n", str(n)]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


def run(exe, spec, job, device, *extra, env=None):
    import json
    path = job.parent / f"{job.name}.json"
    path.write_text(json.dumps(spec))
    cmd = mpirun(spec["parallel"]["ranks"]) + [exe, "--spec", str(path), "--job-dir", str(job),
                                               "--device", device, "--threads", "1", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


def ckpt(job, step):
    return (job / "checkpoints" / f"step-{step:08d}.safetensors").read_bytes()


def compare(c, exe, tmp, name, spec, exact, tol, env=None, expect=None):
    cpu, gpu = tmp / f"{name}-cpu", tmp / f"{name}-gpu"
    rc = run(exe, spec, cpu, "cpu")
    rg = run(exe, spec, gpu, "cuda", env=env)
    c.check(rc.returncode == 0, f"{name}: CPU run (exit {rc.returncode}) {rc.stderr.strip()[-300:]}")
    c.check(rg.returncode == 0, f"{name}: GPU run (exit {rg.returncode}) {rg.stderr.strip()[-300:]}")
    if rc.returncode or rg.returncode:
        return None
    lines = [l for l in rg.stdout.splitlines() if l.startswith(("parallel:", "device:",
                                                                  "data parallel:"))]
    for line in lines:
        print("     " + line)
    want = expect or "weights, gradients and optimizer state on the device"
    c.check(any(want in l for l in lines), f"{name}: the GPU run says {want!r}")
    if not expect:
        # every bucket starts its reduction during backward, on the device
        m = [re.search(r"([\d.]+) of (\d+) buckets a step started during backward", l)
             for l in lines]
        m = next((x for x in m if x), None)
        c.check(m is not None and int(m.group(2)) > 1 and float(m.group(1)) == int(m.group(2)),
                f"{name}: all of several buckets start during backward "
                f"({m.group(0) if m else 'no such line'})")
    if exact:
        for step in (6, 12):
            same = ckpt(cpu, step) == ckpt(gpu, step)
            c.check(same, f"{name}: the step-{step} checkpoint equals the CPU run's byte for byte")
    else:
        check_metrics(c, name, cpu, gpu, ("train/loss", "val/loss"), tol)
    return gpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--larch-train", required=True)
    exe = ap.parse_args().larch_train
    if not shutil.which("mpirun"):
        print("no mpirun: skipping test_dp_cuda")
        return 77
    probe = subprocess.run([exe, "--list-devices"], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        print(f"no CUDA device: skipping test_dp_cuda ({probe.stdout.strip()})")
        return 77
    print(probe.stdout.strip())
    shim = "CPU shim" in probe.stdout
    gpus = len([l for l in probe.stdout.splitlines() if l.startswith("cuda:")])
    if not shim and gpus < 2:
        print(f"data parallel on GPUs needs two; this machine has {gpus}: skipping test_dp_cuda")
        return 77
    c = Checks()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="larch-gpu-dp."))
    try:
        mlp = {"name": "mlp", "model": {"type": "mlp", "hidden": [96, 48]},
               "data": image_set(tmp), "batch": {"global": 64, "micro": 16},
               "optimizer": {"type": "lars", "lr": 1.0, "momentum": 0.9, "weight_decay": 1e-4,
                             "trust_coef": 0.01},
               "parallel": {"ranks": 2, "zero_stage": 1, "bucket_mb": 0.01},
               "steps": 12, "log_every": 1, "checkpoint_every": 6, "seed": 3}
        probe_cpu = run(exe, mlp, tmp / "probe", "cpu")
        if probe_cpu.returncode != 0 and "MPI" in probe_cpu.stderr:
            print(f"no MPI in this larch-train: skipping test_dp_cuda "
                  f"({probe_cpu.stderr.strip()[-200:]})")
            return 77
        compare(c, exe, tmp, "mlp-lars-zero1", mlp, shim, TOL)
        adamw = {"type": "adamw", "lr": 3e-3}
        compare(c, exe, tmp, "mlp-adamw", {**mlp, "optimizer": adamw,
                                           "parallel": {"ranks": 2, "zero_stage": 0,
                                                        "bucket_mb": 0.01}},
                shim, TOL)
        compare(c, exe, tmp, "mlp-bf16-zero1", {**mlp, "optimizer": adamw,
                                                "precision": {"compute": "bf16"}}, shim, TOL16)
        compare(c, exe, tmp, "mlp-fp16-zero1",
                {**mlp, "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9},
                 "precision": {"compute": "fp16"}}, shim, TOL16)

        corpus = write_corpus(tmp)
        gpt = {"name": "gpt", "model": {"type": "gpt", "layers": 2, "heads": 4, "dim": 64,
                                        "seq": 64},
               "data": {"format": "text", "path": str(corpus), "val_fraction": 0.05},
               "batch": {"global": 8, "micro": 2},
               "optimizer": {"type": "lamb", "lr": 3e-3, "weight_decay": 0.01},
               "precision": {"compute": "bf16"},
               "parallel": {"ranks": 2, "zero_stage": 1, "bucket_mb": 0.05},
               "steps": 12, "log_every": 1, "checkpoint_every": 6, "seed": 7}
        gpu_job = compare(c, exe, tmp, "gpt-bf16-lamb-zero1", gpt, shim, TOL16)

        if gpu_job:
            resumed = resume_dir(gpu_job, 6, tmp / "gpt-resumed")
            r = run(exe, gpt, resumed, "cuda", "--resume")
            c.check(r.returncode == 0 and "resume: from" in r.stdout,
                    f"gpt: resumed on the devices from step 6 (exit {r.returncode}) "
                    f"{r.stderr.strip()[-300:]}")
            if r.returncode == 0:
                c.check(ckpt(resumed, 12) == ckpt(gpu_job, 12),
                        "gpt: the resumed run's step-12 checkpoint equals the uninterrupted "
                        "run's byte for byte")

        if shim:
            compare(c, exe, tmp, "mlp-no-device-comm", mlp, True, TOL,
                    env={"LARCH_SHIM_NO_DEVICE_COMM": "1"},
                    expect="the gradients go over the host")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"test_dp_cuda: {'FAILED ' + str(c.failed) + ' check(s)' if c.failed else 'all passed'}")
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
