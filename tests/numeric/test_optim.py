"""trainer/optim.c (through trn_capi_optim_*) against the float64 references
of ref_optim.py: a few steps on random tensors with a different lr each step.

Tolerance: the C code keeps weights and state in fp32, so each step rounds
every element a few times (half an ulp, 6e-8 of the value, per rounding);
after STEPS steps the error stays within a few 1e-7 of the tensor's scale
(measured at most 2.1e-7). Errors are therefore measured as
max|C - ref| / max|ref| per tensor (weights, momentum and second moment) and
held to RTOL = 1e-6. The hyperparameters make every update at least 1e-3 of
the tensor's scale (asserted), so an update off by 1% shows as an error of
1e-5 or more, ten times the tolerance.

The kernels take the hyperparameters as fp32: beta2 = 0.999 becomes
0.99900001, which changes the raw second moment v (weighted by 1 - beta2) by
1e-5 relative. The weights do not see it (the bias correction 1 - beta2^t
cancels it, kernels/optimizer.h), the stored state does: the reference runs
with the betas rounded to fp32 as the C code receives them.
"""
import numpy as np
import pytest

import capi
from ref_optim import RefOptim, with_fp32_betas

RTOL = 1e-6
STEPS = 4
LR_FACTORS = [1.0, 0.4, 1.7, 0.7]    # the lr changes every step

# name, shape, init: the exclusion patterns select by substring ("bias", "norm", "wte");
# "big" is past the kernels' threading threshold (32768), "zero" starts at 0
# (LARS/LAMB: ||w|| = 0 gives ratio 1), "frozen" never gets a gradient (||g|| = 0)
TENSORS = [
    ("fc1.weight", (37, 23), "normal"),
    ("fc1.bias", (37,), "small"),
    ("blocks.0.norm1.weight", (23,), "ones"),
    ("blocks.0.attn.qkv.weight", (69, 23), "normal"),
    ("wte.weight", (50, 16), "normal"),
    ("big.weight", (300, 128), "normal"),
    ("zero.weight", (11, 5), "zeros"),
    ("frozen.weight", (7, 3), "normal"),
    ("frozen.norm.bias", (7,), "small"),
]

CASES = {
    "sgd": {"type": "sgd", "lr": 0.1, "momentum": 0, "weight_decay": 0.01},
    "sgd_momentum": {"type": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.01},
    "sgd_momentum_exclude": {"type": "sgd", "lr": 0.1, "weight_decay": 0.05,
                             "exclude_from_weight_decay": ["bias", "norm"]},
    "sgd_nesterov": {"type": "sgd", "lr": 0.1, "momentum": 0.8, "nesterov": True,
                     "weight_decay": 0.05},
    "adamw": {"type": "adamw", "lr": 0.01, "weight_decay": 0.1},
    "adamw_exclude": {"type": "adamw", "lr": 0.01, "betas": [0.8, 0.95], "eps": 1e-6,
                      "weight_decay": 0.1, "exclude_from_weight_decay": ["bias", "norm", "wte"]},
    "lars": {"type": "lars", "lr": 10.0, "weight_decay": 5e-4},
    "lars_split_exclusions": {"type": "lars", "lr": 2.0, "momentum": 0.8, "trust_coef": 0.02,
                              "weight_decay": 0.01, "exclude_from_weight_decay": ["bias"],
                              "exclude_from_adaptation": ["norm", "wte"]},
    "lars_no_exclusions": {"type": "lars", "lr": 10.0, "weight_decay": 0.01,
                           "exclude_from_weight_decay": [], "exclude_from_adaptation": []},
    "lamb": {"type": "lamb", "lr": 0.01, "weight_decay": 0.01},
    "lamb_split_exclusions": {"type": "lamb", "lr": 0.02, "betas": [0.85, 0.99], "eps": 1e-8,
                              "weight_decay": 0.1, "exclude_from_weight_decay": ["norm"],
                              "exclude_from_adaptation": ["bias", "wte"]},
}


def spec_with(optimizer):
    """A valid job spec around optimizer (the validator does not open the data files)."""
    return {
        "model": {"type": "mlp", "hidden": [4]},
        "data": {"format": "idx", "train": {"images": "x.idx", "labels": "y.idx"}},
        "batch": {"global": 8},
        "optimizer": optimizer,
        "steps": 1,
    }


def make_tensors(rng):
    init = {
        "normal": lambda s: rng.standard_normal(s),
        "small": lambda s: 0.1 * rng.standard_normal(s),
        "ones": lambda s: 1 + 0.1 * rng.standard_normal(s),
        "zeros": np.zeros,
    }
    return {name: init[kind](shape).astype(np.float32) for name, shape, kind in TENSORS}


def make_grads(rng):
    return {name: (np.zeros(shape) if name.startswith("frozen") else
                   0.1 * rng.standard_normal(shape)).astype(np.float32)
            for name, shape, _ in TENSORS}


def flat(d):
    return np.concatenate([d[name].ravel() for name, _, _ in TENSORS])


def unflat(a):
    out, off = {}, 0
    for name, shape, _ in TENSORS:
        n = int(np.prod(shape))
        out[name] = a[off:off + n].reshape(shape)
        off += n
    return out


def rel_err(got, want):
    scale = np.max(np.abs(want))
    diff = np.max(np.abs(np.asarray(got, np.float64) - want))
    return diff / scale if scale > 0 else diff


@pytest.mark.parametrize("case", list(CASES))
def test_optimizer_matches_reference(libtrainer_path, case):
    cfg = CASES[case]
    lib = capi.load(libtrainer_path)
    rng = np.random.default_rng(1234)
    w0 = make_tensors(rng)
    grads = [make_grads(rng) for _ in range(STEPS)]

    names = [name for name, _, _ in TENSORS]
    numels = [int(np.prod(shape)) for _, shape, _ in TENSORS]
    ref = RefOptim(with_fp32_betas(cfg))
    ref_w = {k: v.astype(np.float64) for k, v in w0.items()}
    w = flat(w0)
    with capi.Optim(lib, spec_with(cfg), names, numels) as opt:
        for s in range(STEPS):
            lr = cfg["lr"] * LR_FACTORS[s]
            opt.step(w, flat(grads[s]), lr)
            ref.step(ref_w, grads[s], lr)
        m, v = opt.state(0), opt.state(1)
        got_w = unflat(w)
        got_m = unflat(m.copy()) if m is not None else None
        got_v = unflat(v.copy()) if v is not None else None

    has_m = cfg["type"] != "sgd" or cfg.get("momentum", 0.9) > 0
    has_v = cfg["type"] in ("adamw", "lamb")
    assert (got_m is not None) == has_m
    assert (got_v is not None) == has_v

    errors = {}
    for name, _, _ in TENSORS:
        errors[name] = rel_err(got_w[name], ref_w[name])
        if has_m:
            errors["m." + name] = rel_err(got_m[name], ref.m[name])
        if has_v:
            errors["v." + name] = rel_err(got_v[name], ref.v[name])
        # the test must be able to see a wrong update: every tensor that the
        # optimizer moves moves by at least 1e-3 of its scale
        moved = np.max(np.abs(ref_w[name] - w0[name])) / max(np.max(np.abs(ref_w[name])), 1e-30)
        frozen_still = name.startswith("frozen") and ref.decay_of(name) == 0
        if not frozen_still:
            assert moved > 1e-3, f"{case}: {name} barely moves ({moved:.2e}): test too weak"
        else:
            assert np.array_equal(got_w[name], w0[name]), f"{case}: {name} moved without grad"
    worst = max(errors, key=errors.get)
    assert errors[worst] <= RTOL, (
        f"{case}: {worst} off by {errors[worst]:.3e} of its scale (tolerance {RTOL:.0e}); "
        + ", ".join(f"{k} {e:.1e}" for k, e in sorted(errors.items())))


def test_exclusion_defaults_differ_per_optimizer(libtrainer_path):
    """With only weight_decay set, sgd and adamw decay every tensor while lars
    and lamb exclude "bias" and "norm" (docs/spec.md): seen on a tensor with a
    zero gradient, which only weight decay moves."""
    lib = capi.load(libtrainer_path)
    names = ["fc1.bias", "blocks.0.norm1.weight", "fc1.weight"]
    w0 = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    moved = {}
    for kind in ("sgd", "adamw", "lars", "lamb"):
        cfg = {"type": kind, "lr": 0.1, "weight_decay": 0.1}
        w = w0.copy()
        with capi.Optim(lib, spec_with(cfg), names, [1, 1, 1]) as opt:
            opt.step(w, np.zeros(3, np.float32), 0.1)
        moved[kind] = [bool(x) for x in w != w0]
    assert moved == {"sgd": [True, True, True], "adamw": [True, True, True],
                     "lars": [False, False, True], "lamb": [False, False, True]}


def test_optim_reports_spec_errors(libtrainer_path):
    lib = capi.load(libtrainer_path)
    with pytest.raises(capi.CapiError, match=r"optimizer\.momentum"):
        capi.Optim(lib, spec_with({"type": "adamw", "lr": 0.1, "momentum": 0.9}), ["w"], [1])
