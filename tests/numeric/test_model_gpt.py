"""trainer/model_gpt.c (through trn_capi_model_*) against the float64 numpy
GPT-2 of ref_model.py: the loss and every parameter's gradient of one
forward/backward, for 1 and 2 blocks, and with some targets ignored (< 0).

The C model computes in fp32 (GEMMs through BLAS, LayerNorm and softmax
sums in fp32, GELU from its own exp of ~2 ulp); the reference in float64 on
the same fp32 weights and tokens. Errors are measured per tensor as
max|C - ref| / max|ref|. fp32 rounding (2^-24 = 6e-8 per operation) through
the layers and sums of up to a few hundred terms gives errors of 1e-7 to 1e-6
(measured at most 8e-7 for the gradients, 1e-8 for the loss), so the
tolerances, RTOL_GRAD = 2e-5 and RTOL_LOSS = 1e-6, leave a margin of 25x and
more while still seeing a LayerNorm eps of 1e-6 instead of 1e-5 or GELU's
exact erf form instead of the tanh approximation.
"""
import numpy as np
import pytest

import capi
from ref_model import gpt_loss_and_grads

RTOL_LOSS = 1e-6
RTOL_GRAD = 2e-5

DIM, HEADS, SEQ, VOCAB, BATCH = 32, 4, 8, 64, 3


def gpt_spec(layers, dim=DIM, heads=HEADS, seq=SEQ, vocab=VOCAB):
    return {
        "model": {"type": "gpt", "layers": layers, "heads": heads, "dim": dim, "seq": seq,
                  "vocab": vocab},
        "data": {"format": "tokens_u16", "train": "train.bin"},
        "batch": {"global": 4},
        "optimizer": {"type": "adamw", "lr": 1e-3},
        "steps": 1,
    }


def random_params(shapes, rng):
    """Weights large enough that attention is far from uniform and every
    nonlinearity is exercised (GPT-2's 0.02 init would make them nearly linear)."""
    out = {}
    for name, shape in shapes.items():
        if "norm" in name:
            a = (1.0 if name.endswith("weight") else 0.0) + 0.2 * rng.standard_normal(shape)
        elif name.endswith("bias"):
            a = 0.1 * rng.standard_normal(shape)
        elif name in ("wte.weight", "wpe.weight"):
            a = 0.5 * rng.standard_normal(shape)
        else:
            a = rng.standard_normal(shape) / np.sqrt(shape[1])
        out[name] = a.astype(np.float32)
    return out


def gpt_shapes(layers, C=DIM, T=SEQ, V=VOCAB):
    shapes = {"wte.weight": (V, C), "wpe.weight": (T, C)}
    block = {"norm1.weight": (C,), "norm1.bias": (C,), "attn.qkv.weight": (3 * C, C),
             "attn.qkv.bias": (3 * C,), "attn.proj.weight": (C, C), "attn.proj.bias": (C,),
             "norm2.weight": (C,), "norm2.bias": (C,), "mlp.fc.weight": (4 * C, C),
             "mlp.fc.bias": (4 * C,), "mlp.proj.weight": (C, 4 * C), "mlp.proj.bias": (C,)}
    for l in range(layers):
        shapes.update({f"blocks.{l}.{k}": v for k, v in block.items()})
    shapes.update({"norm_f.weight": (C,), "norm_f.bias": (C,)})
    return shapes


def rel_err(got, want):
    return np.max(np.abs(got - want)) / np.max(np.abs(want))


@pytest.mark.parametrize("layers,ignore", [(1, False), (2, False), (2, True)],
                         ids=["1-block", "2-blocks", "2-blocks-ignored-targets"])
def test_gpt_forward_backward_matches_numpy(libtrainer_path, layers, ignore):
    lib = capi.load(libtrainer_path)
    rng = np.random.default_rng(100 + layers)
    shapes = gpt_shapes(layers)
    params = random_params(shapes, rng)
    tokens = rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32)
    targets = rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32)
    if ignore:
        targets[rng.random((BATCH, SEQ)) < 0.3] = -1
        targets[0, :] = -1                 # a whole sample ignored

    with capi.Model(lib, gpt_spec(layers), vocab=VOCAB, max_batch=4) as m:
        assert list(m.params) == list(shapes), "parameter table differs from GPT-2's"
        assert {k: n for k, (_, n) in m.params.items()} == \
            {k: int(np.prod(s)) for k, s in shapes.items()}
        w = m.weights()
        for name, a in params.items():
            m.tensor(w, name)[:] = a.ravel()
        loss = m.step(BATCH, tokens=tokens, targets=targets)
        grads = {name: m.tensor(m.grads(), name).reshape(shapes[name]).astype(np.float64)
                 for name in shapes}

    ref_loss, ref_grads = gpt_loss_and_grads({k: v.astype(np.float64) for k, v in params.items()},
                                             tokens, targets, layers, HEADS)
    assert abs(loss - ref_loss) <= RTOL_LOSS * abs(ref_loss), (loss, ref_loss)
    errors = {name: rel_err(grads[name], ref_grads[name]) for name in shapes}
    worst = max(errors, key=errors.get)
    assert errors[worst] <= RTOL_GRAD, (
        f"gradient of {worst} off by {errors[worst]:.2e} of its scale (tolerance "
        f"{RTOL_GRAD:.0e}); " + ", ".join(f"{k} {e:.1e}" for k, e in errors.items()))


def test_reference_gpt_gradients_match_finite_differences():
    """The numpy backward is checked against central differences of its own
    float64 forward (step 1e-6: truncation and rounding both near 1e-9)."""
    rng = np.random.default_rng(7)
    L, NH, C, T, V, B = 2, 2, 8, 4, 11, 2
    params = {k: v.astype(np.float64)
              for k, v in random_params(gpt_shapes(L, C, T, V), rng).items()}
    tokens = rng.integers(0, V, (B, T))
    targets = rng.integers(0, V, (B, T))
    targets[1, 2] = -1
    _, grads = gpt_loss_and_grads(params, tokens, targets, L, NH)
    h = 1e-6
    for name, p in params.items():
        for idx in rng.choice(p.size, 3, replace=False):
            i = np.unravel_index(idx, p.shape)
            old = p[i]
            p[i] = old + h
            up, _ = gpt_loss_and_grads(params, tokens, targets, L, NH)
            p[i] = old - h
            down, _ = gpt_loss_and_grads(params, tokens, targets, L, NH)
            p[i] = old
            fd = (up - down) / (2 * h)
            assert abs(fd - grads[name][i]) <= 1e-6 + 1e-5 * abs(fd), (name, i, fd, grads[name][i])


def test_model_new_reports_errors(libtrainer_path):
    lib = capi.load(libtrainer_path)
    with pytest.raises(capi.CapiError, match=r"heads"):
        capi.Model(lib, gpt_spec(1, heads=5), vocab=VOCAB, max_batch=4)
    with pytest.raises(capi.CapiError, match=r"model\.vocab"):
        capi.Model(lib, gpt_spec(1), vocab=VOCAB + 1, max_batch=4)
