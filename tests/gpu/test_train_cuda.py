#!/usr/bin/env python3
"""tests/gpu/test_train_cuda.py - larch-train on a GPU against the same run
on the CPU (ctest label gpu; exits 77 without a GPU). Python's standard
library only: the GPU machine has no numpy of ours to rely on.

    python3 tests/gpu/test_train_cuda.py --larch-train build-gpu/trainer/larch-train

1. GPT tiny (2 layers, 4 heads, dim 64, seq 64, bytes) on a text the test
   writes, 10 steps of AdamW: every step's loss on the GPU within TOL of the
   CPU's (the GEMMs sum in another order: cuBLAS against OpenBLAS), the
   validation loss too.
2. The MLP on an IDX image set the test writes, 10 steps of SGD momentum:
   the same, with the validation accuracy.
3. A checkpoint written on the GPU resumes on the GPU: steps 6-10 from the
   step-5 checkpoint give the uninterrupted run's losses bit for bit (the
   kernels and cuBLAS are deterministic run to run). int8 optimizer state
   (AdamW, LAMB) stays on the device, within TOL of the CPU's int8 run,
   and its checkpoints resume bit for bit too. A spec's "deterministic":
   false tunes the GEMMs (8 candidates), whose picks the job directory's
   gemm-tune.txt keeps for the resume (bit for bit on the GEMM attention),
   and adds the fused attention's dq atomically: within bf16's noise as
   the others. The kernels' same-bits variants, timed at each op's first
   call by default, give the losses of a run with that timing off
   (LARCH_CUDA_KERNEL_PICKS=default) bit for bit, and the run names each
   of the two ops it timed.
4. bf16 on the GPU against bf16 on the CPU (16-bit storage, the GEMMs on
   the tensor cores), measured against bf16's own noise: how far the CPU's
   bf16 run is from its fp32 run at the same step. The first step (the
   same weights, a forward pass) must be closer to the CPU's bf16 than
   FIRST16 of that distance: a GPU that skipped the rounding would sit at
   the whole distance. Each later step within NOISE16 times the largest
   distance so far: ten AdamW updates of a tiny model amplify each
   rounding that flips (an ulp, 2^-8) until bf16 and fp32 differ by 16%
   by step 9, and the GPU's and the CPU's bf16 runs drift apart the same
   way; a fixed relative tolerance on the late steps measures that chaos,
   not the GPU. The same for a GPT with head size 64 on the fused
   attention (the GEMM path: the head size 16 of the runs before), with
   GELU in the fc GEMMs' epilogues (none of them refused by cuBLASLt). A
   later step may also be within LATE16 of the CPU's loss: where bf16's
   distance to fp32 stays small by chance, the GPU's other roundings still
   drift apart. fp16 with the dynamic loss
   scale trains (the loss falls, the scale is reported).
5. offload.activations "recompute" gives the losses of the run that keeps
   the activations, bit for bit; offload.params "cpu" (with and without
   recompute), offload.activations "cpu", and all three offloads together
   (one micro-batch a step, no clipping: the update follows backward)
   within TOL of them; the MLP's offloads likewise. A watchdog rollback
   after a step whose update followed backward (the optimizer offload's
   tensors sent to the device during backward): the CPU's losses after it.
6. The device memory larch's own buffers held at their peak (what
   kern_cuda_malloc handed out: the model's arena, weights, gradients,
   optimizer state, staging, the GEMM libraries' workspaces) against larch
   plan's device figure for the same spec: within PLAN_TOL of the plan's
   part beside those workspaces (a fixed 64 MiB that would hide a small
   model's error), for a GPT in fp32 and bf16, recomputed, with its
   parameters or its optimizer offloaded, with int8 optimizer state, on the
   fused attention, and for the MLP.
7. Logits past 2^31 elements: a one-layer GPT with GPT-2's vocabulary at
   seq 1024 and micro-batch 48 ([49152, 50304] logits, and their gradient)
   in fp32 and bf16, two steps, against the same 48 sequences as three
   micro-batches of 16 (each under 2^31): the losses within TOL, where an
   int index or size would have wrapped, read or written elsewhere, or
   failed. The GPT-2 benchmark's largest micro-batch that fits an H200 is
   128. Needs about 25 GiB of device memory; on the CPU stand-in of the
   unit suite (host memory, CI's 24 GiB) the same comparison runs at
   micro-batch 2 against 2 x 1, for its logic only.
"""
import argparse
import array
import gzip
import json
import os
import pathlib
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile

TOL = 2e-3           # relative, on losses after 10 updates
FIRST16 = 0.5        # step 1: |gpu - cpu| <= FIRST16 |cpu - cpu fp32|
NOISE16 = 2.0        # later: |gpu - cpu| <= NOISE16 max so far |cpu - cpu fp32|
LATE16 = 1e-2        # ... or LATE16 |cpu|: where bf16's distance to fp32 stays small by
                     # chance, the GPU's other roundings (attention's 16-bit probabilities)
                     # still drift apart over ten updates
PLAN_TOL = 0.10      # device buffers' peak against larch plan (issue #8's preflight)
WORKSPACE_MIB = 64   # kernels/cuda_common.h's KERN_CUDA_WORKSPACE_BYTES


def run(exe, spec, job, device, *extra, env=None):
    path = job.parent / f"{job.name}.json"
    path.write_text(json.dumps(spec))
    cmd = [exe, "--spec", str(path), "--job-dir", str(job), "--device", device, *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **env} if env else None)


def metrics(job, name):
    out = {}
    for line in (job / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        if m["name"] == name:
            out[m["step"]] = m["value"]
    return out


def write_idx(path, dims, data, compress):
    header = struct.pack(">HBB", 0, 0x08, len(dims)) + b"".join(struct.pack(">I", d) for d in dims)
    opener = gzip.open if compress else open
    with opener(path, "wb") as f:
        f.write(header + bytes(data))


def image_set(root, n_train=512, n_val=128, side=16, classes=10):
    rnd = random.Random(0)
    means = [[rnd.uniform(40, 215) for _ in range(side * side)] for _ in range(classes)]
    spec = {"format": "idx"}
    for split, n in (("train", n_train), ("val", n_val)):
        labels = [rnd.randrange(classes) for _ in range(n)]
        pixels = bytearray()
        for lab in labels:
            pixels += bytes(max(0, min(255, int(v + rnd.gauss(0, 40)))) for v in means[lab])
        images = root / f"{split}-images.idx.gz"
        labs = root / f"{split}-labels.idx"
        write_idx(images, (n, side, side), pixels, True)
        write_idx(labs, (n,), labels, False)
        spec[split] = {"images": str(images), "labels": str(labs)}
    return spec


def poisoned_set(root, bad_step, n=4096, batch=256, side=12, classes=10):
    """An easy image set read in order whose batch of step bad_step (1-based)
    has every label moved by 5: a loss spike for the watchdog
    (tests/integration/test_watchdog.py's, without numpy)."""
    rnd = random.Random(3)
    means = [[rnd.uniform(40, 215) for _ in range(side * side)] for _ in range(classes)]
    labels = [rnd.randrange(classes) for _ in range(n)]
    pixels = bytearray()
    for lab in labels:
        pixels += bytes(max(0, min(255, int(v + rnd.gauss(0, 20)))) for v in means[lab])
    for i in range((bad_step - 1) * batch, bad_step * batch):
        labels[i] = (labels[i] + 5) % classes
    images, labs = root / "poisoned-images.idx", root / "poisoned-labels.idx"
    write_idx(images, (n, side, side), pixels, False)
    write_idx(labs, (n,), labels, False)
    return {"format": "idx", "train": {"images": str(images), "labels": str(labs)},
            "val_fraction": 0.0, "shuffle": False}


def write_corpus(tmp):
    """A text of common words for the byte-level GPT tiny; its path."""
    corpus = tmp / "corpus.txt"
    rnd = random.Random(1)
    words = "the of and to in larch trains large batches on many ranks quickly".split()
    corpus.write_text(" ".join(rnd.choice(words) for _ in range(40000)))
    return corpus


def write_tokens(path, n, vocab, seed):
    """llm.c's token file: a 256 x int32 header (20240520, 1, n), then n
    uint16 tokens below vocab."""
    rnd = random.Random(seed)
    header = struct.pack("<256i", 20240520, 1, n, *([0] * 253))
    path.write_bytes(header + array.array("H", (rnd.randrange(vocab) for _ in range(n))).tobytes())


def check_big_logits(c, exe, tmp, micro, parts):
    """7. above: GPT-2's vocabulary at seq 1024, micro-batch micro against
    the same sequences as micro-batches of micro / parts, fp32 and bf16."""
    data = tmp / "big-logits.bin"
    write_tokens(data, 2 * micro * 1024 + 1025, 50257, 5)
    base = {"model": {"type": "gpt", "layers": 1, "heads": 1, "dim": 64, "seq": 1024},
            "data": {"format": "tokens_u16", "train": str(data)},
            "optimizer": {"type": "adamw", "lr": 1e-3}, "steps": 2, "log_every": 1,
            "seed": 11}
    for prec in ("fp32", "bf16"):
        losses = []
        for m in (micro, micro // parts):
            name = f"gpt-logits-{prec}-micro{m}"
            spec = {**base, "name": name, "precision": {"compute": prec},
                    "batch": {"global": micro, "micro": m}}
            r = run(exe, spec, tmp / name, "cuda")
            c.check(r.returncode == 0, f"{name}: GPU run, [{m * 1024}, 50304] logits "
                    f"({m * 1024 * 50304 / 2**31:.2f} x 2^31 elements; exit {r.returncode}) "
                    f"{r.stderr.strip()[-300:]}")
            losses.append(metrics(tmp / name, "train/loss") if r.returncode == 0 else {})
        a, b = losses
        worst = max((abs(a[s] - b[s]) / abs(a[s]) for s in a if s in b), default=1)
        c.check(len(a) == 2 and a.keys() == b.keys() and worst <= TOL,
                f"gpt-logits-{prec}: micro-batch {micro} against {parts} x {micro // parts}, "
                f"losses within {TOL:g} (largest {worst:.2e}; {sorted(a.items())})")


def resume_dir(job, step, dest, carry=()):
    """dest as a job dir holding only job's checkpoint of step (and the files
    of carry from job's directory), to resume from."""
    (dest / "checkpoints").mkdir(parents=True)
    shutil.copy(job / "checkpoints" / f"step-{step:08d}.safetensors", dest / "checkpoints")
    for name in carry:
        shutil.copy(job / name, dest)
    return dest


class Checks:
    def __init__(self):
        self.failed = 0

    def check(self, ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        self.failed += not ok


def check_metrics(c, name, cpu, gpu, names, tol):
    """Each metric of names logged at the same steps by both jobs, within a
    relative difference of tol."""
    for metric in names:
        a, b = metrics(cpu, metric), metrics(gpu, metric)
        worst = max((abs(a[s] - b[s]) / max(abs(a[s]), 1e-12) for s in a if s in b), default=0)
        c.check(a.keys() == b.keys() and worst <= tol,
                f"{name}: {metric} at {len(a)} steps, largest relative difference {worst:.2e} "
                f"(tolerance {tol:g})")


def check16(c, name, cpu, gpu, reference):
    """The 16-bit criterion (4. above) on train/loss and val/loss; prints
    the losses step by step."""
    a, b, r = (metrics(j, "train/loss") for j in (cpu, gpu, reference))
    print(f"     {'step':>4s} {'cpu fp32':>10s} {'cpu':>10s} {'gpu':>10s} "
          f"{'|gpu-cpu|':>10s} {'|cpu-fp32|':>10s} {'allowed':>10s}")
    noise, bad = 0.0, []
    for s in sorted(a):
        dist = abs(a[s] - r[s]) if s in r else float("inf")
        noise = max(noise, dist)
        gap = abs(b[s] - a[s]) if s in b else float("inf")
        allowed = FIRST16 * dist if s == min(a) else max(NOISE16 * noise, LATE16 * abs(a[s]))
        print(f"     {s:4d} {r.get(s, float('nan')):10.6f} {a[s]:10.6f} "
              f"{b.get(s, float('nan')):10.6f} {gap:10.2e} {dist:10.2e} {allowed:10.2e}")
        if not gap <= allowed:
            bad.append(s)
    c.check(a.keys() == b.keys() and len(a) > 0 and not bad,
            f"{name}: train/loss at {len(a)} steps within bf16's own noise (steps outside: {bad})")
    va, vb, vr = (metrics(j, "val/loss") for j in (cpu, gpu, reference))
    bad = [s for s in va if not abs(vb.get(s, float("inf")) - va[s]) <=
           max(NOISE16 * max(noise, abs(va[s] - vr.get(s, float("inf")))), LATE16 * abs(va[s]))]
    c.check(va.keys() == vb.keys() and len(va) > 0 and not bad,
            f"{name}: val/loss within bf16's own noise ({[(s, va[s], vb.get(s), vr.get(s)) for s in va]})")


def compare(c, exe, tmp, name, spec, extra_names=(), tol=TOL, reference=None, env=None,
            expect=()):
    """Runs spec on both devices (env: the GPU run's extra environment);
    checks losses per step within tol, or with reference (the CPU job dir of
    the same run in fp32) by check16; and that the GPU run printed each
    string of expect."""
    cpu, gpu = tmp / f"{name}-cpu", tmp / f"{name}-gpu"
    rc, rg = run(exe, spec, cpu, "cpu"), run(exe, spec, gpu, "cuda", env=env)
    c.check(rc.returncode == 0, f"{name}: CPU run (exit {rc.returncode}) {rc.stderr.strip()[-300:]}")
    c.check(rg.returncode == 0, f"{name}: GPU run (exit {rg.returncode}) {rg.stderr.strip()[-300:]}")
    if rc.returncode or rg.returncode:
        return None
    for line in rg.stdout.splitlines():
        if line.startswith(("device:", "done:")):
            print("     " + line)
    for text in expect:
        c.check(text in rg.stdout, f"{name}: the GPU run says \"{text}\"")
    if "GELU in the fc GEMMs' epilogues" in rg.stdout:
        # asked for, and not refused by cuBLASLt for any GEMM of the model
        # (its GELU_AUX_BIAS and DGELU epilogues: 164 and 192 in cublasLt.h)
        refused = [l for l in rg.stderr.splitlines() if "cuBLASLt: no algorithm" in l
                   and ("epilogue 164," in l or "epilogue 192," in l)]
        c.check("GELU in the fc GEMMs' epilogues" in rg.stdout and not refused,
                f"{name}: GELU went into the fc GEMMs' epilogues {refused[:2]}")
    if reference is not None:
        check16(c, name, cpu, gpu, reference)
        return gpu
    check_metrics(c, name, cpu, gpu, ("train/loss", "val/loss", *extra_names), tol)
    return gpu


def check_resume(c, exe, tmp, name, spec, job, env=None, carry=()):
    """Steps 6-10 resumed on the GPU from job's step-5 checkpoint (with the
    files of carry, under env) equal the uninterrupted run's bit for bit."""
    resumed = resume_dir(job, 5, tmp / f"{name}-resumed", carry)
    r = run(exe, spec, resumed, "cuda", "--resume", env=env)
    c.check(r.returncode == 0 and "resume: from" in r.stdout,
            f"{name}: resumed on the GPU from step 5 (exit {r.returncode}) "
            f"{r.stderr.strip()[-300:]}")
    if r.returncode == 0:
        a, b = metrics(job, "train/loss"), metrics(resumed, "train/loss")
        later = [s for s in a if s > 5]
        c.check(later and all(b.get(s) == a[s] for s in later),
                f"{name}: steps 6-10 after the resume equal the uninterrupted run's "
                f"bit for bit ({[(s, a[s], b.get(s)) for s in later][:2]})")


def check_plan(c, exe, tmp, name, spec, env=None, workspace_mib=WORKSPACE_MIB):
    """The run's device buffers' peak within PLAN_TOL of larch plan's device
    figure (both printed by larch-train, from the same spec and planner, under
    the same environment's layout switches); workspace_mib of the plan is the
    GEMM libraries' workspaces (cuBLASLt's alone, 32 MiB, where every GEMM
    goes through it)."""
    r = run(exe, {**spec, "name": name}, tmp / name, "cuda", env=env)
    m = re.search(r"larch's buffers peaked at ([\d.]+) MiB, planned ([\d.]+) MiB", r.stdout)
    if not m:
        c.check(False, f"{name}: GPU run with its device memory line (exit {r.returncode}) "
                f"{r.stderr.strip()[-300:]}")
        return
    got, want = float(m.group(1)), float(m.group(2))
    model = want - workspace_mib
    c.check(model > 0 and abs(got - want) <= PLAN_TOL * model,
            f"{name}: device buffers peaked at {got:.1f} MiB, larch plan said {want:.1f} MiB "
            f"({100 * (got - want) / model:+.1f}% of its {model:.1f} MiB beside the "
            f"workspaces; bound {PLAN_TOL:.0%})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--larch-train", required=True)
    a = ap.parse_args()
    exe = a.larch_train
    probe = subprocess.run([exe, "--list-devices"], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        print(f"no CUDA device: skipping test_train_cuda ({probe.stdout.strip()})")
        return 77
    print(probe.stdout.strip())
    c = Checks()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="larch-gpu-train."))
    try:
        corpus = write_corpus(tmp)
        gpt = {"name": "gpt", "model": {"type": "gpt", "layers": 2, "heads": 4, "dim": 64,
                                        "seq": 64},
               "data": {"format": "text", "path": str(corpus), "val_fraction": 0.05},
               "batch": {"global": 8}, "optimizer": {"type": "adamw", "lr": 3e-3},
               "steps": 10, "log_every": 1, "checkpoint_every": 5, "seed": 7}
        gpu_job = compare(c, exe, tmp, "gpt", gpt)

        mlp = {"name": "mlp", "model": {"type": "mlp", "hidden": [256, 128]},
               "data": image_set(tmp), "batch": {"global": 64},
               "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9},
               "steps": 10, "log_every": 1, "seed": 3}
        mlp_job = compare(c, exe, tmp, "mlp", mlp, ("val/accuracy",))
        # the gradient noise scale with accumulation (trainer/gns.h): the
        # first micro-batch's norm taken from the device's running sum
        compare(c, exe, tmp, "mlp-accum-gns", {**mlp, "name": "mlp-accum-gns",
                                               "batch": {"global": 64, "micro": 16}},
                ("train/gns_trace",), tol=1e-2)

        if gpu_job:
            check_resume(c, exe, tmp, "gpt", gpt, gpu_job)

        # int8 optimizer state on the device (kernels/quant8_cuda.cu), AdamW
        # and LAMB (its norm pass too): within TOL of the CPU's int8 run (the
        # same updates of gradients summed in another order), the state kept
        # on the device, and its checkpoint resumed bit for bit
        for name, opt in (("gpt-int8-adamw", "adamw"), ("gpt-int8-lamb", "lamb")):
            spec = {**gpt, "name": name,
                    "optimizer": {"type": opt, "lr": 3e-3, "state_dtype": "int8"}}
            job = compare(c, exe, tmp, name, spec,
                          expect=("weights, gradients and optimizer state on the device",))
            if job:
                check_resume(c, exe, tmp, name, spec, job)

        compare(c, exe, tmp, "gpt-bf16", {**gpt, "name": "gpt-bf16",
                                          "precision": {"compute": "bf16"}},
                reference=tmp / "gpt-cpu")
        # the fused attention (head size 64) in bf16, against the CPU's bf16
        # by the same criterion (gpt-bf16 above: the GEMM path, head size 16)
        h64 = {**gpt, "name": "gpt-h64",
               "model": {"type": "gpt", "layers": 2, "heads": 2, "dim": 128, "seq": 64}}
        r = run(exe, h64, tmp / "gpt-h64-cpu", "cpu")
        c.check(r.returncode == 0, f"gpt-h64: CPU fp32 run (exit {r.returncode})")
        compare(c, exe, tmp, "gpt-h64-bf16-flash", {**h64, "precision": {"compute": "bf16"}},
                reference=tmp / "gpt-h64-cpu", expect=("attention fused",))
        # GELU in the fc GEMMs' epilogues (a 16-bit run's), the same
        compare(c, exe, tmp, "gpt-bf16-gelu", {**gpt, "name": "gpt-bf16-gelu",
                                               "precision": {"compute": "bf16"}},
                reference=tmp / "gpt-cpu", expect=("GELU in the fc GEMMs' epilogues",))
        # "deterministic": false on the GEMM attention: the 16-bit GEMMs
        # tuned (8 candidates), within bf16's noise as the others; each
        # pick kept in the job directory's gemm-tune.txt, so that the
        # resume from there takes the same algorithms and gives the
        # uninterrupted run's losses bit for bit
        tuned = {**gpt, "name": "gpt-bf16-tuned",
                 "precision": {"compute": "bf16", "deterministic": False}}
        job = compare(c, exe, tmp, "gpt-bf16-tuned", tuned, reference=tmp / "gpt-cpu",
                      expect=("GEMMs tuned (8 candidates)",))
        if job:
            picks = job / "gemm-tune.txt"
            lines = picks.read_text().splitlines() if picks.exists() else []
            c.check(len(lines) > 0 and all(len(l.split(" ")) == 9 for l in lines),
                    f"gpt-bf16-tuned: {len(lines)} picks kept in gemm-tune.txt")
            check_resume(c, exe, tmp, "gpt-bf16-tuned", tuned, job, carry=("gemm-tune.txt",))
        # and on the fused attention: its dq added atomically in blocks of
        # 128 keys too, within bf16's noise as the others (a resume is not
        # bit for bit: the adds' order varies)
        nd = {**h64, "name": "gpt-h64-bf16-nondeterministic",
              "precision": {"compute": "bf16", "deterministic": False}}
        job = compare(c, exe, tmp, "gpt-h64-bf16-nondeterministic", nd,
                      reference=tmp / "gpt-h64-cpu",
                      expect=("GEMMs tuned (8 candidates)",
                              "dq added atomically, 128 keys a block"))
        if job:
            picks = job / "gemm-tune.txt"
            c.check(picks.exists() and picks.read_text().strip() != "",
                    "gpt-h64-bf16-nondeterministic: the picks kept in gemm-tune.txt")
        # the kernels' same-bits variants timed at each op's first call (the
        # default: kern_cuda_kernel_tune): the losses of the run that takes
        # every op's default way (LARCH_CUDA_KERNEL_PICKS=default) bit for
        # bit, each of the two timed ops named on stderr with its pick; the
        # GEMMs' same-bits tuning (kern_matmul_cuda_gemm_same) off, never
        # run on a GPU
        vspec = {**h64, "name": "gpt-h64-bf16-variants", "precision": {"compute": "bf16"}}
        runs = {}
        for tag, extra in (("timed", {}), ("untimed", {"LARCH_CUDA_KERNEL_PICKS": "default"})):
            job = tmp / f"gpt-h64-bf16-variants-{tag}"
            r = run(exe, vspec, job, "cuda", env=extra)
            c.check(r.returncode == 0, f"gpt-h64-bf16-variants ({tag}): GPU run (exit "
                    f"{r.returncode}) {r.stderr.strip()[-300:]}")
            runs[tag] = (r, job)
        if all(r.returncode == 0 for r, _ in runs.values()):
            # (the CPU stand-in's ops have one way each: none timed)
            ops = sorted(set(re.findall(r"larch: kernels timed: ([a-z-]+):",
                                        runs["timed"][0].stderr)))
            want = [] if "CPU shim" in probe.stdout else ["residual-layernorm", "xent-fwd-bwd"]
            c.check(ops == want and "kernels timed" not in runs["untimed"][0].stderr,
                    f"gpt-h64-bf16-variants: the ops timed {ops}, none with the timing off")
            checked = [runs[t][0].stderr.count("larch: GEMM same bits: ")
                       for t in ("timed", "untimed")]
            c.check(checked == [0, 0],
                    f"gpt-h64-bf16-variants: {checked} GEMM problems checked for the same "
                    f"bits (the tuning is off)")
            for name in ("train/loss", "val/loss"):
                a = metrics(runs["timed"][1], name)
                b = metrics(runs["untimed"][1], name)
                c.check(a and a == b, f"gpt-h64-bf16-variants: {name} with the variants timed "
                        f"equals the default ways' bit for bit "
                        f"({[(k, a[k], b.get(k)) for k in sorted(a)][:2]})")
        fp16 = {**gpt, "name": "gpt-fp16", "precision": {"compute": "fp16"}, "steps": 30}
        r = run(exe, fp16, tmp / "gpt-fp16", "cuda")
        c.check(r.returncode == 0, f"gpt-fp16: GPU run (exit {r.returncode}) "
                f"{r.stderr.strip()[-300:]}")
        if r.returncode == 0:
            loss = metrics(tmp / "gpt-fp16", "train/loss")
            scale = metrics(tmp / "gpt-fp16", "train/loss_scale")
            c.check(loss[30] < 0.8 * loss[1] and scale and all(v >= 1 for v in scale.values()),
                    f"gpt-fp16: the loss falls {loss[1]:.3f} -> {loss[30]:.3f} with the loss "
                    f"scale reported ({min(scale.values(), default=0):g}..."
                    f"{max(scale.values(), default=0):g})")

        # offload.activations "recompute": the same bits as keeping them
        rec = {**gpt, "name": "gpt-recompute", "offload": {"activations": "recompute"}}
        r = run(exe, rec, tmp / "gpt-recompute", "cuda")
        c.check(r.returncode == 0, f"gpt-recompute: GPU run (exit {r.returncode}) "
                f"{r.stderr.strip()[-300:]}")
        if r.returncode == 0 and gpu_job:
            a, b = metrics(gpu_job, "train/loss"), metrics(tmp / "gpt-recompute", "train/loss")
            c.check(a and a == b, f"gpt-recompute: the losses equal the run that keeps the "
                    f"activations bit for bit ({[(s, a[s], b.get(s)) for s in sorted(a)][:2]})")

        # the same with clipping, for the optimizer offload that steps after
        # backward
        gpt_clip = {**gpt, "name": "gpt-clip",
                    "optimizer": {"type": "adamw", "lr": 3e-3, "clip_grad_norm": 1.0}}
        r = run(exe, gpt_clip, tmp / "gpt-clip", "cuda")
        c.check(r.returncode == 0, f"gpt-clip: GPU run (exit {r.returncode}) "
                f"{r.stderr.strip()[-300:]}")
        gpu_clip = tmp / "gpt-clip" if r.returncode == 0 else None

        # micro-batches that add up (4 a step), resident, in fp32 and bf16:
        # the plain runs of the optimizer offload's below, whose gradients add
        # up on the device in the same order (trn_model_more_micro)
        acc = {}
        for prec in ("fp32", "bf16"):
            spec = {**gpt, "name": f"gpt-accum-{prec}", "batch": {"global": 8, "micro": 2},
                    "precision": {"compute": prec}}
            r = run(exe, spec, tmp / spec["name"], "cuda")
            c.check(r.returncode == 0, f"{spec['name']}: GPU run (exit {r.returncode}) "
                    f"{r.stderr.strip()[-300:]}")
            acc[prec] = (spec, tmp / spec["name"] if r.returncode == 0 else None)

        # the offloads: blocks' weights and gradients, and activations,
        # through the device's slots and the copy stream, and the optimizer
        # on the host; the same model, its gradients summed in another order
        # only where micro-batches add up with the params offloaded (none
        # here): within TOL of the plain run, the memory report naming each
        # offload
        all3 = {"params": "cpu", "activations": "cpu", "optimizer": "cpu"}
        for spec, plain, name, off in (
                (*acc["fp32"], "gpt-accum-offload-optimizer", {"optimizer": "cpu"}),
                (*acc["bf16"], "gpt-accum-bf16-offload-optimizer", {"optimizer": "cpu"}),
                (gpt, gpu_job, "gpt-offload-params", {"params": "cpu"}),
                (gpt, gpu_job, "gpt-offload-both", {"params": "cpu", "activations": "recompute"}),
                (gpt, gpu_job, "gpt-offload-acts", {"activations": "cpu"}),
                (gpt, gpu_job, "gpt-offload-all", all3),
                (gpt, gpu_job, "gpt-offload-optimizer", {"optimizer": "cpu"}),
                (gpt_clip, gpu_clip, "gpt-offload-optimizer-clip", {"optimizer": "cpu"}),
                (mlp, mlp_job, "mlp-offload-params", {"params": "cpu"}),
                (mlp, mlp_job, "mlp-offload-acts", {"activations": "cpu"}),
                (mlp, mlp_job, "mlp-offload-all", all3)):
            r = run(exe, {**spec, "name": name, "offload": off}, tmp / name, "cuda")
            said = all(f"offload.{k} cpu" in r.stdout for k, v in off.items() if v == "cpu")
            # the optimizer's, one micro-batch a step, no clipping: the update
            # follows backward (with the params offloaded each block's
            # gradients read from a window; without, each tensor sent back
            # to the device as it is updated); with clipping after it, the
            # parameters sent back chunk by chunk
            if "optimizer" in off:
                follows = "the update follows backward" in r.stdout
                said = said and follows == (spec is not gpt_clip and "micro" not in spec["batch"])
            c.check(r.returncode == 0 and said,
                    f"{name}: GPU run (exit {r.returncode}, the memory report names the "
                    f"offloads: {said}) {r.stderr.strip()[-300:]}")
            # the optimizer's alone: each step's parameters went to the
            # device chunk by chunk as the host rounded them, and the next
            # forward sent none of them again (only the first forward sent
            # all of them)
            if r.returncode == 0 and "optimizer" in off and "params" not in off:
                sent = re.search(r"^weights: sent to the device whole (\d+) times, and (\d+) "
                                 r"times as the update wrote them$", r.stdout, re.M)
                steps = len(metrics(tmp / name, "train/loss"))
                c.check(sent and int(sent[1]) == 1 and int(sent[2]) >= steps - 1,
                        f"{name}: weights sent whole once, then as written "
                        f"({sent[0] if sent else 'no weights line'}; {steps} steps)")
            if r.returncode == 0 and plain:
                a, b = metrics(plain, "train/loss"), metrics(tmp / name, "train/loss")
                worst = max((abs(a[s] - b[s]) / abs(a[s]) for s in a if s in b), default=1)
                c.check(a.keys() == b.keys() and worst <= TOL,
                        f"{name}: losses within {TOL:g} of the plain run's (largest {worst:.2e})")

        # a watchdog rollback after a step whose update followed backward:
        # that step sent each updated tensor to the device during its
        # backward, so the restored weights must reach the device again
        # before the next forward (not only the step's last copy be waited
        # for); the GPU run within TOL of the CPU's after the rollback too
        spike = {"name": "spike", "model": {"type": "mlp", "hidden": [32, 24]},
                 "data": poisoned_set(tmp, bad_step=12), "batch": {"global": 256},
                 "optimizer": {"type": "adamw", "lr": 0.01}, "offload": {"optimizer": "cpu"},
                 "steps": 15, "log_every": 1, "checkpoint_every": 10, "seed": 1,
                 "watchdog": {"max_rollbacks": 2, "spike_factor": 3, "window": 5}}
        job = compare(c, exe, tmp, "mlp-rollback-streamed", spike,
                      expect=("rolled back to step 10", "the update follows backward"))
        if job:
            c.check(max(metrics(job, "train/loss")) == 15,
                    "mlp-rollback-streamed: the run went on to step 15 after the rollback")

        # logits past 2^31 elements (7. above), on a GPU; the stand-in
        # checks the comparison's logic at a size its host memory holds
        if "CPU shim" in probe.stdout:
            check_big_logits(c, exe, tmp, 2, 2)
        else:
            check_big_logits(c, exe, tmp, 48, 3)

        # the device memory against the plan, at a size where the model's
        # buffers, not the workspaces, are most of it
        big = {**gpt, "model": {"type": "gpt", "layers": 2, "heads": 4, "dim": 128, "seq": 128},
               "batch": {"global": 16}, "steps": 2, "checkpoint_every": 0}
        big64 = {**big, "model": {**big["model"], "heads": 2}, "precision": {"compute": "bf16"}}
        for name, spec in (
                ("plan-gpt-flash", big64),
                ("plan-gpt-flash-recompute", {**big64, "offload": {"activations": "recompute"}})):
            check_plan(c, exe, tmp, name, spec)
        # "deterministic": false: the backward's fp32 dq for the atomic adds,
        # and cuBLASLt's workspace alone (every GEMM tuned, through it)
        check_plan(c, exe, tmp, "plan-gpt-flash-nondeterministic",
                   {**big64, "precision": {"compute": "bf16", "deterministic": False}},
                   workspace_mib=WORKSPACE_MIB // 2)
        for name, spec in (
                ("plan-gpt", big),
                ("plan-gpt-bf16", {**big, "precision": {"compute": "bf16"}}),
                ("plan-gpt-recompute", {**big, "precision": {"compute": "bf16"},
                                        "offload": {"activations": "recompute"}}),
                ("plan-gpt-params", {**big, "offload": {"params": "cpu"}}),
                ("plan-gpt-optimizer", {**big, "precision": {"compute": "bf16"},
                                        "offload": {"optimizer": "cpu"}}),
                ("plan-gpt-int8", {**big, "optimizer": {"type": "adamw", "lr": 3e-3,
                                                        "state_dtype": "int8"}}),
                ("plan-mlp", {**mlp, "model": {"type": "mlp", "hidden": [2048, 2048]},
                              "batch": {"global": 256}, "steps": 2})):
            check_plan(c, exe, tmp, name, spec)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"test_train_cuda: {'all passed' if not c.failed else f'{c.failed} FAILED'}")
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
