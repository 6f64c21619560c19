#!/usr/bin/env python3
"""tests/bench/bench_optim_cpu.py - AdamW in numpy against larch's, in one
process: the numpy side of bench_optim_cpu.sh.

    bench_optim_cpu.py [--n N] [--rounds R] [--reps K] [--larch LIB] [--raw]

The update of kern_adamw_update_cpu (kernels/optimizer.h) on N float32
elements (default 64 Mi, as bench_optim_cpu), written the fast way for
numpy: in place, one preallocated scratch buffer, no temporaries, the
scalars folded ahead (w *= 1 - lr*wd rather than w -= lr*wd*w). numpy's
elementwise ops run on one thread, a pass over memory each: 14 passes that
move BYTES = 128 B an element (reads and writes, not counting the
read-for-ownership of the scratch buffer's stores), against the 28 B of a
one-pass update.

Checks numpy's step against the formula in float64 on a small array, then
runs R rounds of K numpy steps and, with --larch (the path of
liblarch_kernels.so), K steps of kern_adamw_update_cpu through ctypes on
buffers of its own, the order swapped every other round, so that the two
share each round's conditions. Prints the medians of elements/s and of the
per-round ratio larch/numpy (--raw: "raw numpy RATE BYTES", "raw larch RATE
28", "raw larch/numpy RATIO").
"""
import argparse
import ctypes
import statistics
import sys
import time

import numpy as np

LR, B1, B2, EPS, WD = 1e-3, 0.9, 0.999, 1e-8, 0.1
T = 10
BYTES = 128  # adamw() below: 10 passes of 8 B, 4 of 12 B (two inputs)
BC1, BC2 = 1 - B1**T, 1 - B2**T


def adamw(w, m, v, g, t):
    """One AdamW step in place; t is scratch of w's size."""
    w *= np.float32(1 - LR * WD)
    m *= np.float32(B1)
    np.multiply(g, np.float32(1 - B1), out=t)
    m += t
    v *= np.float32(B2)
    np.multiply(g, g, out=t)
    t *= np.float32(1 - B2)
    v += t
    np.multiply(v, np.float32(1 / BC2), out=t)
    np.sqrt(t, out=t)
    t += np.float32(EPS)
    np.divide(m, t, out=t)
    t *= np.float32(LR / BC1)
    w -= t


def larch_adamw(lib):
    """kern_adamw_update_cpu as a function of (w, m, v, g)."""
    f = lib.kern_adamw_update_cpu
    fp = ctypes.POINTER(ctypes.c_float)
    f.argtypes = [fp, fp, fp, fp, ctypes.c_long] + [ctypes.c_float] * 7
    f.restype = None
    args = [ctypes.c_float(x) for x in (LR, B1, B2, EPS, WD, BC1, BC2)]

    def step(w, m, v, g):
        f(*(x.ctypes.data_as(fp) for x in (w, m, v, g)), w.size, *args)
    return step


def buffers(n):
    rng = np.random.default_rng(1)
    g = rng.uniform(-1, 1, n).astype(np.float32)
    w = rng.uniform(-0.5, 0.5, n).astype(np.float32)
    return w, 0.1 * g, 0.01 * g * g, g


def check(larch):
    w, m, v, g = buffers(1000)
    w64, m64, v64, g64 = (x.astype(np.float64) for x in (w, m, v, g))
    w64 = w64 - LR * WD * w64
    m64 = B1 * m64 + (1 - B1) * g64
    v64 = B2 * v64 + (1 - B2) * g64 * g64
    w64 = w64 - LR * (m64 / BC1) / (np.sqrt(v64 / BC2) + EPS)
    sides = [("numpy", lambda *x: adamw(*x, np.empty_like(w)))]
    if larch:
        sides.append(("larch", larch))
    for side, step in sides:
        got = [x.copy() for x in (w, m, v)]
        step(*got, g)
        for name, x, want in zip("wmv", got, (w64, m64, v64)):
            if not np.allclose(x, want, rtol=1e-5, atol=1e-7):
                sys.exit(f"bench_optim_cpu.py: {side} AdamW's {name} is off the formula")


def timed(step, reps, n):
    start = time.perf_counter()
    for _ in range(reps):
        step()
    return n * reps / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=64 << 20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--larch", help="liblarch_kernels.so, to time larch's AdamW beside numpy's")
    ap.add_argument("--raw", action="store_true")
    a = ap.parse_args()
    larch = larch_adamw(ctypes.CDLL(a.larch)) if a.larch else None
    check(larch)
    w, m, v, g = buffers(a.n)
    t = np.empty_like(w)
    sides = {"numpy": lambda: adamw(w, m, v, g, t)}
    if larch:
        lw, lm, lv = w.copy(), m.copy(), v.copy()
        sides["larch"] = lambda: larch(lw, lm, lv, g)
    for step in sides.values():  # warm-up: page faults, threads
        step()
    rates = {side: [] for side in sides}
    for r in range(a.rounds):
        for side in (sides if r % 2 == 0 else reversed(list(sides))):
            rates[side].append(timed(sides[side], a.reps, a.n))
    med = {side: statistics.median(x) for side, x in rates.items()}
    ratio = statistics.median(l / p for l, p in zip(rates.get("larch", []), rates["numpy"])) \
        if larch else None
    if a.raw:
        print(f"raw numpy {med['numpy']:.6g} {BYTES}")
        if larch:
            print(f"raw larch {med['larch']:.6g} 28")
            print(f"raw larch/numpy {ratio:.6g}")
        return
    print(f"numpy {np.__version__} AdamW, {a.n} float32: {med['numpy'] / 1e6:.1f} Melem/s "
          f"({med['numpy'] * BYTES / 1e9:.2f} GB/s in {BYTES} B an element)")
    if larch:
        print(f"larch AdamW: {med['larch'] / 1e6:.1f} Melem/s "
              f"({med['larch'] * 28 / 1e9:.2f} GB/s); larch/numpy {ratio:.2f}x")


if __name__ == "__main__":
    main()
