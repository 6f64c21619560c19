"""kernels/precision_cpu.c and trainer/loss_scale.c (through trn_capi_*).

fp16: numpy's astype(np.float16) is the reference, bit for bit, on edge
cases, on the fp32 patterns next to every rounding decision (ties and their
neighbours, at every exponent that rounds into fp16 or just past it) and on
millions of random patterns; fp16 -> fp32 and the round trip over all 65,536
fp16 patterns. One deliberate difference, for signalling NaNs only: both keep
the sign and the top 10 payload bits, but numpy leaves a signalling NaN
signalling (0x7fa00000 -> 0x7d00; 0x7f800001 -> 0x7c01, its low bit set so as
not to become inf), while larch sets the quiet bit (-> 0x7f00, 0x7e00), as
x86's F16C instructions and GCC's _Float16 do. Quiet NaNs give numpy's bits.

bf16: numpy has none; the reference below rounds the uint32 patterns to
nearest even with an explicit compare of the dropped half (not the +0x7fff
carry trick the C code uses), and quiets NaNs.

Tolerance: none; every comparison is of bit patterns. The loss scaler is
compared step by step with the rules restated here (PyTorch's GradScaler with
DeepSpeed's floor of 1).
"""
import numpy as np
import pytest

import capi

QUIET16 = 0x0200


def spec_with(precision):
    """A valid job spec around precision (the validator does not open data files)."""
    return {
        "model": {"type": "mlp", "hidden": [4]},
        "data": {"format": "idx", "train": {"images": "x.idx", "labels": "y.idx"}},
        "batch": {"global": 8},
        "optimizer": {"type": "sgd", "lr": 0.1},
        "steps": 1,
        "precision": precision,
    }


def as_f32(bits):
    return np.asarray(bits, np.uint32).view(np.float32)


def is_nan32(u):
    return (u & 0x7fffffff) > 0x7f800000


def tie_patterns(rng, exponents, dropped_bits, per_exponent=256):
    """fp32 patterns whose dropped significand bits are 0, 1, half - 1, half,
    half + 1 or all ones, with random kept bits (even and odd), both signs:
    dropped_bits(e) is how many of the 24 significand bits (leading 1
    included) a conversion drops at biased exponent e."""
    out = []
    for e in exponents:
        d = min(dropped_bits(e), 24)
        half = 1 << (d - 1)
        k_lo, k_hi = (1 << 24) >> (d + 1), (1 << 24) >> d    # kept bits, leading 1 set
        kept = rng.integers(k_lo, max(k_hi, k_lo + 1), per_exponent, dtype=np.uint64)
        kept[0::2] &= ~np.uint64(1)
        kept[1::2] |= np.uint64(1)
        for low in (0, 1, half - 1, half, half + 1, 2 * half - 1):
            sig = (kept << np.uint64(d)) | np.uint64(low)
            sig = sig[(sig >= 1 << 23) & (sig < 1 << 24)]
            u = (np.uint64(e) << np.uint64(23)) | (sig & np.uint64(0x7fffff))
            out += [u, u | np.uint64(0x80000000)]
    return np.concatenate(out).astype(np.uint32)


def fp16_dropped(e):
    return 13 if e >= 113 else 126 - e


FP16_EDGES = [
    0x00000000, 0x80000000,                      # +-0
    0x3f800000, 0x3f801000, 0x3f801001, 0x3f803000,  # 1 and ties after it
    0x45001000, 0x45003000,                      # 2049, 2051: ties
    0x477fe000, 0x477fefff, 0x477ff000, 0x477ff001,  # 65504, under / at / over 65520
    0x47800000, 0x7f7fffff, 0xc77ff000,           # 65536, FLT_MAX, -65520
    0x7f800000, 0xff800000,                      # +-inf
    0x38800000, 0x387fffff, 0x387fc000, 0x387fe000, 0x387fdfff, 0x387fa000,  # max subnormal
    0x33800000, 0x33000000, 0x33000001, 0x32ffffff, 0xb3000000,  # min subnormal, 2^-25 tie
    0x33c00000, 0x34200000,                      # 3 and 5 * 2^-25: ties
    0x322bcc77, 0x00000001, 0x80000001, 0x007fffff, 0x00800000,  # 1e-8, fp32 subnormals
]

NAN_EDGES = [0x7fc00000, 0xffc00000, 0x7fc02000, 0x7fffffff, 0xffffffff,   # quiet
             0x7f800001, 0x7fa00000, 0xff801fff, 0x7fbfe000]               # signalling


def numpy_fp16(bits):
    with np.errstate(over="ignore"):     # overflow to inf is the point of some cases
        return as_f32(bits).astype(np.float16).view(np.uint16)


def check_fp16_against_numpy(lib, bits):
    bits = np.asarray(bits, np.uint32)
    got = capi.fp32_to_fp16(lib, as_f32(bits))
    want = numpy_fp16(bits)
    nan = is_nan32(bits)
    quiet = nan & ((bits & 0x00400000) != 0)
    bad = np.flatnonzero((~nan | quiet) & (got != want))
    assert bad.size == 0, "fp16 differs from numpy: " + ", ".join(
        f"0x{bits[i]:08x} -> 0x{got[i]:04x} (numpy 0x{want[i]:04x})" for i in bad[:5])
    # signalling NaNs: numpy's sign and payload bits, and the quiet bit
    sig = nan & ~quiet
    rule = ((bits >> 16) & 0x8000) | 0x7e00 | ((bits >> 13) & 0x3ff)
    assert np.array_equal(got[sig], rule[sig].astype(np.uint16))
    # which is numpy's with the quiet bit, where numpy's had no low bit to set
    trunc_zero = ((bits >> 13) & 0x3ff) == 0
    numpy_sig = np.where(trunc_zero, want ^ 1, want) | QUIET16
    assert np.array_equal(got[sig], numpy_sig[sig])
    return got


def test_fp16_edge_cases_match_numpy(libtrainer_path):
    lib = capi.load(libtrainer_path)
    got = check_fp16_against_numpy(lib, FP16_EDGES + NAN_EDGES)
    # spelled out, so that numpy itself is checked on the decisive cases
    by_bits = dict(zip(FP16_EDGES + NAN_EDGES, got.tolist()))
    assert by_bits[0x80000000] == 0x8000            # -0 kept
    assert by_bits[0x477ff000] == 0x7c00            # 65520 overflows
    assert by_bits[0x477fefff] == 0x7bff            # just under stays 65504
    assert by_bits[0x33000000] == 0x0000            # 2^-25 ties to 0
    assert by_bits[0x33000001] == 0x0001
    assert by_bits[0x387fe000] == 0x0400            # tie above the largest subnormal
    assert by_bits[0x7f800001] == 0x7e00            # signalling NaN: quiet, not inf
    assert by_bits[0xffc00000] == 0xfe00


def test_fp16_ties_match_numpy(libtrainer_path):
    lib = capi.load(libtrainer_path)
    rng = np.random.default_rng(16)
    bits = tie_patterns(rng, range(90, 146), fp16_dropped)
    assert bits.size > 100_000
    check_fp16_against_numpy(lib, bits)


def test_fp16_random_match_numpy(libtrainer_path):
    lib = capi.load(libtrainer_path)
    rng = np.random.default_rng(1616)
    n = 1 << 22
    anywhere = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    # exponents from 2^-27 to 2^18: the subnormal, normal and overflow ranges of fp16
    near = ((rng.integers(100, 146, n, dtype=np.uint64) << np.uint64(23))
            | rng.integers(0, 1 << 23, n, dtype=np.uint64)
            | (rng.integers(0, 2, n, dtype=np.uint64) << np.uint64(31))).astype(np.uint32)
    check_fp16_against_numpy(lib, anywhere)
    check_fp16_against_numpy(lib, near)


def test_fp16_every_pattern(libtrainer_path):
    lib = capi.load(libtrainer_path)
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    x = capi.fp16_to_fp32(lib, h)
    want = h.view(np.float16).astype(np.float32)
    assert np.array_equal(x.view(np.uint32), want.view(np.uint32))  # NaN payloads included
    back = capi.fp32_to_fp16(lib, x)
    nan = np.isnan(x)
    assert nan.sum() == 2 * 1023
    assert np.array_equal(back[~nan], h[~nan])
    assert np.array_equal(back[nan], h[nan] | QUIET16)
    # emulated storage: rounding in place is the round trip, numpy's for non-NaNs
    y = x.copy()
    capi.round_fp16(lib, y)
    assert np.array_equal(y[~nan].view(np.uint32), x[~nan].view(np.uint32))


def test_round_fp16_matches_numpy(libtrainer_path):
    lib = capi.load(libtrainer_path)
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(1 << 20) * np.exp(rng.uniform(-25, 12, 1 << 20))).astype(np.float32)
    x[:4] = [np.inf, -np.inf, 70000.0, -0.0]
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).astype(np.float32)
    capi.round_fp16(lib, x)
    assert np.array_equal(x.view(np.uint32), want.view(np.uint32))


# ---- bf16 ---------------------------------------------------------------------

def ref_bf16(bits):
    """bf16 bits of fp32 bits: round to nearest even by comparing the dropped
    16 bits with half; a NaN is truncated and quieted (0x0040)."""
    u = np.asarray(bits, np.uint32).astype(np.uint64)
    hi, lo = u >> np.uint64(16), u & np.uint64(0xffff)
    up = (lo > 0x8000) | ((lo == 0x8000) & ((hi & np.uint64(1)) == 1))
    rounded = hi + up.astype(np.uint64)
    nan = is_nan32(u)
    return np.where(nan, hi | np.uint64(0x0040), rounded).astype(np.uint16)


def check_bf16(lib, bits):
    bits = np.asarray(bits, np.uint32)
    got = capi.fp32_to_bf16(lib, as_f32(bits))
    want = ref_bf16(bits)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, "bf16 differs from the reference: " + ", ".join(
        f"0x{bits[i]:08x} -> 0x{got[i]:04x} (want 0x{want[i]:04x})" for i in bad[:5])
    return got


def test_bf16_edge_cases(libtrainer_path):
    lib = capi.load(libtrainer_path)
    cases = {
        0x3f800000: 0x3f80, 0x3f808000: 0x3f80, 0x3f818000: 0x3f82, 0x3f808001: 0x3f81,  # ties
        0x80000000: 0x8000,                                    # -0
        0x7f7f0000: 0x7f7f, 0x7f7f7fff: 0x7f7f,                # the largest finite bf16
        0x7f7f8000: 0x7f80, 0x7f7fffff: 0x7f80, 0xff7fffff: 0xff80,  # past it: inf
        0x7f800000: 0x7f80, 0xff800000: 0xff80,                # inf
        0x00010000: 0x0001, 0x00008000: 0x0000, 0x00018000: 0x0002,  # subnormals, ties
        0x007fffff: 0x0080, 0x00008001: 0x0001, 0x80008000: 0x8000,
        0x7fc00000: 0x7fc0, 0xffc00000: 0xffc0,                # quiet NaN
        0x7f800001: 0x7fc0, 0x7f808000: 0x7fc0,                # would round into inf
        0x7fffffff: 0x7fff, 0xffffffff: 0xffff,                # would carry into the sign
    }
    got = check_bf16(lib, list(cases))
    assert got.tolist() == list(cases.values())
    assert np.all(np.isnan(capi.bf16_to_fp32(lib, got[-6:])))


def test_bf16_ties_and_random(libtrainer_path):
    lib = capi.load(libtrainer_path)
    rng = np.random.default_rng(1688)
    ties = tie_patterns(rng, range(0, 255), lambda e: 16, per_exponent=64)
    assert ties.size > 100_000
    check_bf16(lib, ties)
    check_bf16(lib, rng.integers(0, 1 << 32, 1 << 22, dtype=np.uint64).astype(np.uint32))
    # the reference is RNE by value: every finite result is the nearer bf16
    x = as_f32(rng.integers(0, 0x7f800000, 1 << 16, dtype=np.uint64).astype(np.uint32))
    got = capi.bf16_to_fp32(lib, capi.fp32_to_bf16(lib, x)).astype(np.float64)
    fin = np.isfinite(got)
    down = (x.view(np.uint32) & 0xffff0000).view(np.float32).astype(np.float64)
    up = ((x.view(np.uint32) & 0xffff0000) + 0x10000).view(np.float32).astype(np.float64)
    err = np.abs(got[fin] - x[fin])
    assert np.all(err <= np.minimum(np.abs(x[fin] - down[fin]), np.abs(up[fin] - x[fin])))


def test_bf16_every_pattern(libtrainer_path):
    lib = capi.load(libtrainer_path)
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    x = capi.bf16_to_fp32(lib, h)
    assert np.array_equal(x.view(np.uint32), h.astype(np.uint32) << 16)
    back = capi.fp32_to_bf16(lib, x)
    nan = np.isnan(x)
    assert np.array_equal(back[~nan], h[~nan])
    assert np.array_equal(back[nan], h[nan] | 0x0040)
    y = x.copy()
    capi.round_bf16(lib, y)
    assert np.array_equal(y[~nan].view(np.uint32), x[~nan].view(np.uint32))
    z = as_f32(np.random.default_rng(3).integers(0, 1 << 32, 1 << 20, dtype=np.uint64)
               .astype(np.uint32)).copy()
    want = ref_bf16(z.view(np.uint32)).astype(np.uint32) << 16
    capi.round_bf16(lib, z)
    assert np.array_equal(z.view(np.uint32), want)


def test_nonfinite(libtrainer_path):
    lib = capi.load(libtrainer_path)
    x = np.random.default_rng(2).standard_normal(100_003).astype(np.float32)
    x[:3] = [np.finfo(np.float32).max, -0.0, 1e-45]
    assert not capi.nonfinite(lib, x)
    assert not capi.nonfinite(lib, x[:0])
    for bad in (np.inf, -np.inf, np.nan):
        for i in (0, 50_001, 100_002):
            y = x.copy()
            y[i] = bad
            assert capi.nonfinite(lib, y), (bad, i)


# ---- loss scaling ------------------------------------------------------------

def test_loss_scaling_keeps_small_gradients(libtrainer_path):
    """The reason for loss scaling: gradients of 1e-9..1e-7 are below fp16's
    resolution (half of its smallest subnormal is 2^-25 = 3e-8), so stored in
    fp16 most of them become 0 and the rest keep a digit or two. Scaled by
    65536 they are normal fp16 numbers and come back, unscaled in fp32, within
    fp16's relative precision 2^-11."""
    lib = capi.load(libtrainer_path)
    g = np.geomspace(1e-9, 1e-7, 1000).astype(np.float32)
    plain = g.copy()
    capi.round_fp16(lib, plain)
    assert np.count_nonzero(plain == 0) > 500
    assert np.all(plain[g < 2.0 ** -25] == 0)
    rel_plain = np.abs(plain - g) / g
    assert np.median(rel_plain) > 0.1

    scale = np.float32(65536)
    scaled = g * scale
    capi.round_fp16(lib, scaled)
    unscaled = scaled / scale
    assert np.all(unscaled != 0)
    rel = np.abs(unscaled.astype(np.float64) - g) / g
    assert rel.max() <= 2.0 ** -11


def test_loss_scale_from_spec(libtrainer_path):
    lib = capi.load(libtrainer_path)
    with capi.LossScale(lib, spec_with({"compute": "fp16"})) as ls:
        assert ls.mode == "dynamic"
        assert ls.state() == (65536.0, 0, 0)
    with capi.LossScale(lib, spec_with({"compute": "fp16", "loss_scale": 512})) as ls:
        assert ls.mode == "static"
        assert ls.update(True) is False
        assert ls.state() == (512.0, 0, 1)
    with capi.LossScale(lib, spec_with({"compute": "bf16"})) as ls:
        assert ls.mode == "none"
        assert ls.update(True) is True
        assert ls.state() == (1.0, 0, 0)
    with pytest.raises(capi.CapiError, match=r"precision\.loss_scale"):
        capi.LossScale(lib, spec_with({"compute": "fp16", "loss_scale": "auto"}))


def test_loss_scale_sequence(libtrainer_path):
    """A scripted run: bursts of overflow, long clean stretches, the floor."""
    lib = capi.load(libtrainer_path)
    interval, init = 4, 1024.0
    flags = ([False] * 3 + [True] + [False] * 9 + [True, True] + [False] * 4
             + [True] * 14 + [False] * 12)
    scale, clean, skipped = init, 0, 0
    seen = []
    with capi.LossScale(lib, spec_with({"compute": "fp16", "init_scale": init,
                                        "growth_interval": interval})) as ls:
        for step, inf in enumerate(flags):
            applied = ls.update(inf)
            if inf:
                scale, clean, skipped = max(scale / 2, 1.0), 0, skipped + 1
            else:
                clean += 1
                if clean == interval:
                    scale, clean = scale * 2, 0
            assert applied == (not inf), step
            assert ls.state() == (scale, clean, skipped), step
            seen.append(scale)
    # the script does reach what it means to test
    assert seen[3] == 512 and seen[12] == 2048     # halved, then grown twice in 9 steps
    assert min(seen) == 1.0 and seen[-1] == 8.0    # the floor, then growth from it
    assert skipped == 17
