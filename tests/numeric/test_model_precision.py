"""16-bit storage in trainer/model_mlp.c and trainer/model_gpt.c (through
trn_capi_model_*): with precision.compute fp16 or bf16 every activation and
activation gradient is rounded to the dtype after the op that writes it and
every weight gradient before it is handed on, while GEMMs and reductions
accumulate in fp32.

Each 16-bit model is compared with the fp32 model on the same weights and
inputs, both already rounded to the dtype (as the trainer keeps them), so
that what differs is the storage of activations and gradients alone. The
unit roundoff is u = 2^-11 = 4.9e-4 for fp16 (11 significant bits) and
u = 2^-8 = 3.9e-3 for bf16 (8). Measured over a few seeds, the loss moves by
at most 0.3u and a gradient tensor by at most 4.2u in relative norm
(||g16 - g32|| / ||g32||, the GPT's LayerNorm weights the worst), so the
tolerances are 2u for the loss and 10u for the gradients: fp16 held to
bf16's precision would fail them.

The bf16 MLP is also checked element by element against a float64 numpy
emulation that rounds where the model should (ref_model's layers, rounded
after each): the two agree bit for bit unless an fp32 sum falls on the other
side of a rounding boundary than its float64 value, which over 400 runs never
happened for bf16, while an emulation that skips the rounding of activation
gradients matches at most 70% of the elements. fp16's grid is 8 times finer
and such flips are common, so fp16 gets only the fp32 comparison.

The loss-scaling cases follow Micikevicius et al. 2018 (Mixed Precision
Training): gradients below fp16's smallest subnormal (2^-24) flush to zero
unless the loss is scaled up before backward and the gradients are scaled
down in fp32 afterwards; too large a scale overflows fp16 (max 65504) into
inf, which the loss scaler sees and answers by skipping the step.
"""
import numpy as np
import pytest

import capi
from ref_model import gelu_bwd, gelu_fwd, linear_bwd, linear_fwd, relu_bwd, relu_fwd, xent_fwd
from test_model_gpt import SEQ, VOCAB, gpt_shapes, gpt_spec, random_params
from test_model_mlp import mlp_shapes, mlp_spec

UNIT_ROUNDOFF = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}
RTOL_LOSS_U = 2      # loss, in units of u
RTOL_GRAD_U = 10     # each gradient tensor's relative norm error, in units of u

IN_DIM, HIDDEN, CLASSES, N = 24, [16, 12], 7, 8
GPT_LAYERS, GPT_BATCH = 2, 3


def with_compute(spec, dtype):
    return {**spec, "precision": {"compute": dtype}}


def rounded(lib, a, dtype):
    """a as float32, rounded to dtype (fp32: unchanged)."""
    a = np.array(a, dtype=np.float32)
    if dtype == "fp16":
        capi.round_fp16(lib, a)
    elif dtype == "bf16":
        capi.round_bf16(lib, a)
    return a


def representable(g, dtype):
    """Per element: g holds a value of dtype exactly."""
    if dtype == "fp16":
        with np.errstate(over="ignore"):
            return (g == g.astype(np.float16).astype(np.float32)) | np.isnan(g)
    return (g.view(np.uint32) & 0xffff) == 0


def flat(grads):
    """{name: gradient} as one array, in table order."""
    return np.concatenate(list(grads.values()))


def rel_norm(got, want):
    return np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want.astype(np.float64))


def mlp_case(lib, dtype, seed=42):
    """Weights, inputs and labels of test_model_mlp's kind, rounded to dtype."""
    rng = np.random.default_rng(seed)
    shapes = mlp_shapes([IN_DIM] + HIDDEN + [CLASSES])
    params = {k: rounded(lib, rng.standard_normal(s) / np.sqrt(s[1]) if len(s) == 2
                         else 0.3 * rng.standard_normal(s), dtype) for k, s in shapes.items()}
    x = rounded(lib, rng.standard_normal((N, IN_DIM)), dtype)
    y = rng.integers(0, CLASSES, N).astype(np.int32)
    return params, x, y


def mlp_step(lib, dtype, params, x, y, activation, scale=None):
    """(loss, {name: gradient}) of one step of the dtype model on params."""
    with capi.Model(lib, with_compute(mlp_spec(HIDDEN, activation), dtype), in_dim=IN_DIM,
                    n_classes=CLASSES, max_batch=N) as m:
        w = m.weights()
        for name, a in params.items():
            m.tensor(w, name)[:] = a.ravel()
        loss = m.step(len(x), x=x, targets=y, scale=scale)
        return loss, {name: m.tensor(m.grads(), name).copy() for name in params}


def gpt_case(lib, dtype, seed=7):
    rng = np.random.default_rng(seed)
    params = {k: rounded(lib, a, dtype)
              for k, a in random_params(gpt_shapes(GPT_LAYERS), rng).items()}
    tokens = rng.integers(0, VOCAB, (GPT_BATCH, SEQ)).astype(np.int32)
    targets = rng.integers(0, VOCAB, (GPT_BATCH, SEQ)).astype(np.int32)
    return params, tokens, targets


def gpt_step(lib, dtype, params, tokens, targets, scale=None):
    with capi.Model(lib, with_compute(gpt_spec(GPT_LAYERS), dtype), vocab=VOCAB,
                    max_batch=GPT_BATCH) as m:
        w = m.weights()
        for name, a in params.items():
            m.tensor(w, name)[:] = a.ravel()
        loss = m.step(len(tokens), tokens=tokens, targets=targets, scale=scale)
        return loss, {name: m.tensor(m.grads(), name).copy() for name in params}


def check_close_to_fp32(dtype, loss, grads, loss32, grads32):
    u = UNIT_ROUNDOFF[dtype]
    # the weights and inputs are the same: a difference comes from activation storage
    assert loss != loss32, "the 16-bit model computed exactly the fp32 loss"
    assert abs(loss - loss32) <= RTOL_LOSS_U * u * abs(loss32), (loss, loss32)
    errors = {k: rel_norm(grads[k], grads32[k]) for k in grads32}
    worst = max(errors, key=errors.get)
    assert errors[worst] <= RTOL_GRAD_U * u, (
        f"{dtype}: gradient of {worst} off by {errors[worst] / u:.1f}u; "
        + ", ".join(f"{k} {e / u:.1f}u" for k, e in errors.items()))
    for name, g in grads.items():
        bad = np.flatnonzero(~representable(g, dtype))
        assert bad.size == 0, f"{name}: {g[bad[:3]]} are not {dtype} values"


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_mlp_16bit_close_to_fp32(libtrainer_path, dtype, activation):
    lib = capi.load(libtrainer_path)
    params, x, y = mlp_case(lib, dtype)
    loss32, grads32 = mlp_step(lib, "fp32", params, x, y, activation)
    loss, grads = mlp_step(lib, dtype, params, x, y, activation)
    check_close_to_fp32(dtype, loss, grads, loss32, grads32)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_gpt_16bit_close_to_fp32(libtrainer_path, dtype):
    lib = capi.load(libtrainer_path)
    params, tokens, targets = gpt_case(lib, dtype)
    loss32, grads32 = gpt_step(lib, "fp32", params, tokens, targets)
    loss, grads = gpt_step(lib, dtype, params, tokens, targets)
    check_close_to_fp32(dtype, loss, grads, loss32, grads32)


def emulated_mlp(lib, dtype, params, x, y, activation):
    """ref_model's MLP in float64, rounded to dtype after every op that the C
    model rounds after: (loss, {name: gradient})."""
    def r(a):
        return rounded(lib, a, dtype).astype(np.float64)

    act_fwd, act_bwd = {"relu": (relu_fwd, relu_bwd), "gelu": (gelu_fwd, gelu_bwd)}[activation]
    p = {k: v.astype(np.float64) for k, v in params.items()}
    n_layers = len(p) // 2
    h, caches = x.astype(np.float64), []
    for i in range(1, n_layers + 1):
        pre = r(linear_fwd(h, p[f"fc{i}.weight"], p[f"fc{i}.bias"])[0])
        caches.append((h, pre))
        h = r(act_fwd(pre)) if i < n_layers else pre
    loss, d = xent_fwd(h, y)
    d = r(d)
    grads = {}
    for i in range(n_layers, 0, -1):
        inp, pre = caches[i - 1]
        if i < n_layers:
            d = r(act_bwd(d, pre))
        d, dw, db = linear_bwd(d, inp, p[f"fc{i}.weight"])
        d = r(d)
        grads[f"fc{i}.weight"], grads[f"fc{i}.bias"] = r(dw).ravel(), r(db)
    return loss, grads


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_mlp_bf16_matches_rounding_emulation(libtrainer_path, activation):
    lib = capi.load(libtrainer_path)
    params, x, y = mlp_case(lib, "bf16")
    loss, grads = mlp_step(lib, "bf16", params, x, y, activation)
    want_loss, want = emulated_mlp(lib, "bf16", params, x, y, activation)
    # the loss is an fp32 sum over the same rounded logits
    assert abs(loss - want_loss) <= 1e-6 * abs(want_loss), (loss, want_loss)
    same = np.concatenate([grads[k] == want[k] for k in grads])
    assert same.mean() >= 0.97, (
        f"{same.mean():.1%} of the gradient elements equal the emulation's; per tensor: "
        + ", ".join(f"{k} {np.mean(grads[k] == want[k]):.0%}" for k in grads))


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_fp16_loss_scaling_recovers_underflowing_gradients(libtrainer_path, activation):
    """Backward scale 2^-20 (a loss term weighted that little) makes the
    fp32 gradients 3e-7 and less: stored in fp16 (smallest subnormal 6e-8)
    most of them flush to zero. With the loss scale 65536 on top and the
    gradients divided by it afterwards in fp32, every one comes back, within
    the 10u that a step at scale 1 is held to."""
    lib = capi.load(libtrainer_path)
    small, loss_scale = 2.0 ** -20, 65536.0
    params, x, y = mlp_case(lib, "fp16")
    _, grads32 = mlp_step(lib, "fp32", params, x, y, activation, scale=small)
    _, plain = mlp_step(lib, "fp16", params, x, y, activation, scale=small)
    _, scaled = mlp_step(lib, "fp16", params, x, y, activation, scale=small * loss_scale)

    g32, g_plain = flat(grads32), flat(plain)
    assert np.abs(g32).max() < 2.0 ** -21        # the regime meant: fp16 keeps a few bits at most
    flushed = np.mean(g_plain[g32 != 0] == 0)
    assert flushed >= 0.5, f"only {flushed:.0%} of the fp16 gradients flushed to zero"
    assert rel_norm(g_plain, g32) >= 0.5

    u = UNIT_ROUNDOFF["fp16"]
    for k in grads32:
        unscaled = scaled[k] / np.float32(loss_scale)
        assert np.all(unscaled[grads32[k] != 0] != 0), k
        err = rel_norm(unscaled, grads32[k])
        assert err <= RTOL_GRAD_U * u, f"{k}: scaled and unscaled off by {err / u:.1f}u"


def test_fp16_gpt_activation_gradients_underflow_first(libtrainer_path):
    """The paper's point: activation gradients are smaller than the weight
    gradients summed from them. At backward scale 2^-18 the GPT's fp32 weight
    gradients, rounded to fp16 as they stand, keep all but 7% of their norm
    (measured), but the fp16 model's are more than half off: its dlogits
    (1.6e-7 and less) and the activation gradients behind them were stored
    in fp16 first. A model that rounded only its weight gradients would land
    at those 7%. The loss scale 65536 brings them back to within 10u."""
    lib = capi.load(libtrainer_path)
    small, loss_scale = 2.0 ** -18, 65536.0
    params, tokens, targets = gpt_case(lib, "fp16")
    _, grads32 = gpt_step(lib, "fp32", params, tokens, targets, scale=small)
    _, plain = gpt_step(lib, "fp16", params, tokens, targets, scale=small)
    _, scaled = gpt_step(lib, "fp16", params, tokens, targets, scale=small * loss_scale)

    g32 = flat(grads32)
    weights_only = rel_norm(rounded(lib, g32, "fp16"), g32)
    assert weights_only <= 0.1
    through_activations = rel_norm(flat(plain), g32)
    assert through_activations >= 0.4, (through_activations, weights_only)

    u = UNIT_ROUNDOFF["fp16"]
    for k in grads32:
        err = rel_norm(scaled[k] / np.float32(loss_scale), grads32[k])
        assert err <= RTOL_GRAD_U * u, f"{k}: scaled and unscaled off by {err / u:.1f}u"


def test_fp16_huge_loss_scale_overflows(libtrainer_path):
    """Scale 2^24 puts dlogits past fp16's 65504: inf gradients (and NaNs
    where an inf meets its opposite), which the dynamic loss scaler answers by
    skipping the step and halving its scale. fp32 and bf16 hold the same
    gradients finitely (bf16 has fp32's exponent range)."""
    lib = capi.load(libtrainer_path)
    huge = 2.0 ** 24
    params, x, y = mlp_case(lib, "fp16")
    by_dtype = {dtype: flat(mlp_step(lib, dtype, params, x, y, "gelu", scale=huge)[1])
                for dtype in ("fp32", "bf16", "fp16")}
    assert np.isfinite(by_dtype["fp32"]).all() and np.isfinite(by_dtype["bf16"]).all()
    g = by_dtype["fp16"]
    assert np.isinf(g).any()
    assert capi.nonfinite(lib, g)
    with capi.LossScale(lib, with_compute(mlp_spec(HIDDEN, "gelu"), "fp16")) as ls:
        assert ls.update(capi.nonfinite(lib, g)) is False
        assert ls.state() == (32768.0, 0, 1)


def test_scaled_step_with_scale_1_is_step_in_fp32(libtrainer_path):
    """trn_capi_model_step is the scaled step with scale 1, bit for bit, and
    an fp32 model rounds nothing: a power-of-two scale scales every gradient
    exactly."""
    lib = capi.load(libtrainer_path)
    params, x, y = mlp_case(lib, "fp32")
    gparams, tokens, targets = gpt_case(lib, "fp32")
    runs = [lambda s: mlp_step(lib, "fp32", params, x, y, "gelu", scale=s),
            lambda s: gpt_step(lib, "fp32", gparams, tokens, targets, scale=s)]
    for run in runs:
        loss, grads = run(None)
        loss1, grads1 = run(1.0)
        loss8, grads8 = run(8.0)
        assert loss1 == loss and loss8 == loss
        for k in grads:
            assert np.array_equal(grads1[k].view(np.uint32), grads[k].view(np.uint32)), k
            assert np.array_equal(grads8[k], 8 * grads[k]), k


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_step_rounds_mlp_input_of_16bit_models(libtrainer_path, dtype):
    """capi rounds x to the dtype, as the trainer rounds its input features:
    raw and pre-rounded inputs give the same bits; the caller's x is kept."""
    lib = capi.load(libtrainer_path)
    params, _, y = mlp_case(lib, dtype)
    x = np.random.default_rng(5).standard_normal((N, IN_DIM)).astype(np.float32)
    x_rounded = rounded(lib, x, dtype)
    assert np.any(x != x_rounded)
    keep = x.copy()
    loss_raw, raw = mlp_step(lib, dtype, params, x, y, "relu")
    loss_rounded, pre = mlp_step(lib, dtype, params, x_rounded, y, "relu")
    assert np.array_equal(x, keep)
    assert loss_raw == loss_rounded
    for k in raw:
        assert np.array_equal(raw[k], pre[k]), k
