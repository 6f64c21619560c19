#!/usr/bin/python3
"""The larch MLP training step in numpy float32, timed as bench_step times it.

    OPENBLAS_CORETYPE=SkylakeX OMP_NUM_THREADS=2 \\
    LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp \\
        /usr/bin/python3 tests/bench/numpy_step.py [--rounds R] [--seconds S] [--json]

The model and step of trainer/examples/fmnist-mlp.json: 784-1024-1024-10 with
ReLU, batch 256, softmax cross-entropy (mean), SGD momentum 0.9 with L2 weight
decay 5e-4 on every tensor (PyTorch semantics, as kernels/optimizer.h), and
the global gradient norm that larch-train computes every step. Parameters,
gradients and momentum each live in one flat buffer, as in larch, so the
optimizer is three whole-buffer passes; activations are preallocated and
written in place. Synthetic data as bench_step: normal features, uniform
labels, a pool of batches used in turn.

Run it with the BLAS larch loads: Debian's numpy links libblas.so.3, which
LD_LIBRARY_PATH points at the OpenMP OpenBLAS; set OPENBLAS_CORETYPE and
OMP_NUM_THREADS to what larch uses (bench_speed.py does). The script prints
the library it really got, from /proc/self/maps and openblas_get_config.

Each round times a block of steps, then a block of the step's eight GEMMs
alone (the same calls, back to back): numpy's own GEMM bound.
"""
import argparse
import ctypes
import json
import statistics
import sys
import time

import numpy as np

DIMS = (784, 1024, 1024, 10)
BATCH = 256
LR, MU, WD = 0.05, 0.9, 5e-4
POOL_SAMPLES = 8192


def loaded_blas():
    """Path of the BLAS library numpy's extension loaded, and its own description."""
    path = None
    with open("/proc/self/maps") as maps:
        for line in maps:
            name = line.split()[-1] if len(line.split()) >= 6 else ""
            if "blas" in name.rsplit("/", 1)[-1] and name.endswith((".so", ".so.0", ".so.3")):
                path = name
                break
    if not path:
        return "unknown (no BLAS library mapped)"
    lib = ctypes.CDLL(path)  # already loaded: the same instance numpy uses
    desc = path
    try:
        lib.openblas_get_config.restype = ctypes.c_char_p
        lib.openblas_get_corename.restype = ctypes.c_char_p
        desc += " (%s), core %s, %d threads" % (
            lib.openblas_get_config().decode(), lib.openblas_get_corename().decode(),
            lib.openblas_get_num_threads())
    except AttributeError:
        pass
    return desc


class Mlp:
    def __init__(self, rng):
        shapes = []
        for i in range(len(DIMS) - 1):
            shapes += [(DIMS[i + 1], DIMS[i]), (DIMS[i + 1],)]
        total = sum(int(np.prod(s)) for s in shapes)
        self.w = np.zeros(total, np.float32)
        self.g = np.zeros(total, np.float32)
        self.m = np.zeros(total, np.float32)
        self.tmp = np.zeros(total, np.float32)
        self.W, self.G = [], []
        off = 0
        for s in shapes:
            n = int(np.prod(s))
            self.W.append(self.w[off:off + n].reshape(s))
            self.G.append(self.g[off:off + n].reshape(s))
            off += n
        for i in range(0, len(shapes), 2):  # He init, zero biases
            fan_in = shapes[i][1]
            self.W[i][...] = rng.standard_normal(shapes[i], np.float32) * np.sqrt(2.0 / fan_in)
        L = len(DIMS) - 1
        self.pre = [np.empty((BATCH, DIMS[i + 1]), np.float32) for i in range(L)]
        self.post = [np.empty((BATCH, DIMS[i + 1]), np.float32) for i in range(L - 1)]
        self.dpost = [np.empty((BATCH, DIMS[i + 1]), np.float32) for i in range(L - 1)]
        self.rows = np.arange(BATCH)

    def step(self, x, y):
        W, G, pre, post, dpost = self.W, self.G, self.pre, self.post, self.dpost
        L = len(DIMS) - 1
        n = x.shape[0]
        # forward
        inp = x
        for i in range(L):
            np.matmul(inp, W[2 * i].T, out=pre[i])
            pre[i] += W[2 * i + 1]
            if i + 1 < L:
                np.maximum(pre[i], 0, out=post[i])
                inp = post[i]
        logits = pre[L - 1]
        mx = logits.max(axis=1, keepdims=True)
        e = np.exp(logits - mx)
        s = e.sum(axis=1, keepdims=True)
        lse = np.log(s) + mx
        loss = float(np.mean(lse[:, 0] - logits[self.rows, y]))
        # backward: d(mean loss)/dlogits = (softmax - onehot) / n
        d = e
        d /= s
        d[self.rows, y] -= 1.0
        d *= 1.0 / n
        for i in range(L - 1, -1, -1):
            inp = x if i == 0 else post[i - 1]
            np.matmul(d.T, inp, out=G[2 * i])
            np.sum(d, axis=0, out=G[2 * i + 1])
            if i > 0:
                np.matmul(d, W[2 * i], out=dpost[i - 1])
                dpost[i - 1][pre[i - 1] <= 0] = 0.0
                d = dpost[i - 1]
        # global gradient norm, then SGD with momentum and L2 weight decay
        gnorm = float(np.sqrt(np.dot(self.g, self.g)))
        np.multiply(self.w, WD, out=self.tmp)
        self.tmp += self.g
        self.m *= MU
        self.m += self.tmp
        self.tmp[...] = self.m
        self.tmp *= LR
        self.w -= self.tmp
        return loss, gnorm

    def gemms(self, x):
        """The step's GEMMs alone, same shapes and operands."""
        W, G, pre, post, dpost = self.W, self.G, self.pre, self.post, self.dpost
        L = len(DIMS) - 1
        inp = x
        for i in range(L):
            np.matmul(inp, W[2 * i].T, out=pre[i])
            if i + 1 < L:
                inp = post[i]
        d = pre[L - 1]
        for i in range(L - 1, -1, -1):
            inp = x if i == 0 else post[i - 1]
            np.matmul(d.T, inp, out=G[2 * i])
            if i > 0:
                np.matmul(d, W[2 * i], out=dpost[i - 1])
                d = dpost[i - 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=0.5, help="per timed block")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", action="store_true", help='add a line "json: {...}"')
    a = ap.parse_args()

    rng = np.random.default_rng(1234)
    model = Mlp(rng)
    pool = [(rng.standard_normal((BATCH, DIMS[0]), np.float32),
             rng.integers(0, DIMS[-1], BATCH)) for _ in range(POOL_SAMPLES // BATCH)]
    k = 0

    def step():
        nonlocal k
        x, y = pool[k]
        k = (k + 1) % len(pool)
        return model.step(x, y)

    t0 = time.perf_counter()
    for _ in range(a.warmup):
        step()
    t_step = (time.perf_counter() - t0) / max(a.warmup, 1)
    n = max(2, int(a.seconds / max(t_step, 1e-4)))

    ms_step, ms_gemm, ratio = [], [], []
    loss = gnorm = float("nan")
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            loss, gnorm = step()
        ms_step.append((time.perf_counter() - t0) * 1e3 / n)
        x = pool[0][0]
        t0 = time.perf_counter()
        for _ in range(n):
            model.gemms(x)
        ms_gemm.append((time.perf_counter() - t0) * 1e3 / n)
        ratio.append(ms_gemm[-1] / ms_step[-1])

    flops = 2.0 * BATCH * sum((2 if i == 0 else 3) * DIMS[i] * DIMS[i + 1]
                              for i in range(len(DIMS) - 1))
    blas = loaded_blas()
    med_step, med_gemm = statistics.median(ms_step), statistics.median(ms_gemm)
    print("numpy_step: numpy %s, mlp %s, batch %d, sgd momentum %g wd %g"
          % (np.__version__, "-".join(map(str, DIMS)), BATCH, MU, WD))
    print("blas:", blas)
    print("rounds: %d x %d steps, then %d GEMM passes; last loss %.4f, grad norm %.4g"
          % (a.rounds, n, n, loss, gnorm))
    print("%-6s %10s %10s %12s %9s %8s" % ("round", "step ms", "gemm ms", "samples/s",
                                          "GFLOP/s", "ratio"))
    for r in range(a.rounds):
        print("%-6d %10.3f %10.3f %12.0f %9.1f %8.3f" % (
            r, ms_step[r], ms_gemm[r], BATCH / ms_step[r] * 1e3, flops / ms_step[r] * 1e-6,
            ratio[r]))
    print("%-6s %10.3f %10.3f %12.0f %9.1f %8.3f" % (
        "median", med_step, med_gemm, BATCH / med_step * 1e3, flops / med_step * 1e-6,
        statistics.median(ratio)))
    if a.json:
        print("json: " + json.dumps({
            "name": "numpy-mlp", "blas": blas, "rounds": a.rounds, "step_ms": med_step,
            "gemm_ms": med_gemm, "step_ms_min": min(ms_step), "gemm_ms_min": min(ms_gemm),
            "ratio": statistics.median(ratio), "samples_per_step": BATCH,
            "gflop_per_step": flops * 1e-9, "loss": loss, "grad_norm": gnorm,
            "numpy": np.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
