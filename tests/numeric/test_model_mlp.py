"""trainer/model_mlp.c (through trn_capi_model_*) against the float64 numpy
MLP of ref_model.py: the loss and the gradient of every weight and bias of
one forward/backward, with ReLU and with GELU (tanh approximation).

Errors are measured per tensor as max|C - ref| / max|ref|; fp32 GEMMs over
at most 24 terms leave them near 1e-7 (measured below 5e-7), held to
RTOL_GRAD = 2e-5 and RTOL_LOSS = 1e-6 as for the GPT.
"""
import numpy as np
import pytest

import capi
from ref_model import mlp_loss_and_grads

RTOL_LOSS = 1e-6
RTOL_GRAD = 2e-5

IN_DIM, HIDDEN, CLASSES, N = 24, [16, 12], 7, 6


def mlp_spec(hidden, activation):
    return {
        "model": {"type": "mlp", "hidden": hidden, "activation": activation},
        "data": {"format": "idx", "train": {"images": "x.idx", "labels": "y.idx"}},
        "batch": {"global": 8},
        "optimizer": {"type": "sgd", "lr": 0.1},
        "steps": 1,
    }


def mlp_shapes(dims):
    shapes = {}
    for i in range(1, len(dims)):
        shapes[f"fc{i}.weight"] = (dims[i], dims[i - 1])
        shapes[f"fc{i}.bias"] = (dims[i],)
    return shapes


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_mlp_forward_backward_matches_numpy(libtrainer_path, activation):
    lib = capi.load(libtrainer_path)
    rng = np.random.default_rng(42)
    shapes = mlp_shapes([IN_DIM] + HIDDEN + [CLASSES])
    params = {k: (rng.standard_normal(s) / np.sqrt(s[1]) if len(s) == 2 else
                  0.3 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}
    x = rng.standard_normal((N, IN_DIM)).astype(np.float32)
    y = rng.integers(0, CLASSES, N).astype(np.int32)

    with capi.Model(lib, mlp_spec(HIDDEN, activation), in_dim=IN_DIM, n_classes=CLASSES,
                    max_batch=8) as m:
        assert {k: n for k, (_, n) in m.params.items()} == \
            {k: int(np.prod(s)) for k, s in shapes.items()}
        w = m.weights()
        for name, a in params.items():
            m.tensor(w, name)[:] = a.ravel()
        loss = m.step(N, x=x, targets=y)
        grads = {k: m.tensor(m.grads(), k).reshape(s).astype(np.float64)
                 for k, s in shapes.items()}

    ref_loss, ref_grads = mlp_loss_and_grads({k: v.astype(np.float64) for k, v in params.items()},
                                             x.astype(np.float64), y, activation)
    assert abs(loss - ref_loss) <= RTOL_LOSS * abs(ref_loss), (loss, ref_loss)
    errors = {k: np.max(np.abs(grads[k] - ref_grads[k])) / np.max(np.abs(ref_grads[k]))
              for k in shapes}
    worst = max(errors, key=errors.get)
    assert errors[worst] <= RTOL_GRAD, (
        f"{activation}: gradient of {worst} off by {errors[worst]:.2e} of its scale; "
        + ", ".join(f"{k} {e:.1e}" for k, e in errors.items()))


def test_mlp_step_grads_are_zeroed_each_call(libtrainer_path):
    """trn_capi_model_step zeroes the gradients first: two calls on the same
    batch give the same gradients, not twice them."""
    lib = capi.load(libtrainer_path)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, IN_DIM)).astype(np.float32)
    y = rng.integers(0, CLASSES, 4).astype(np.int32)
    with capi.Model(lib, mlp_spec([8], "relu"), in_dim=IN_DIM, n_classes=CLASSES,
                    max_batch=4) as m:
        m.step(4, x=x, targets=y)
        first = m.grads().copy()
        m.step(4, x=x, targets=y)
        assert np.abs(first).max() > 0
        np.testing.assert_array_equal(m.grads(), first)
        with pytest.raises(capi.CapiError):
            m.step(5, x=np.zeros((5, IN_DIM)), targets=np.zeros(5))   # past max_batch


def test_reference_mlp_gradients_match_finite_differences():
    rng = np.random.default_rng(11)
    shapes = mlp_shapes([5, 4, 3, 3])
    for activation in ("relu", "gelu"):
        params = {k: rng.standard_normal(s) for k, s in shapes.items()}
        x = rng.standard_normal((4, 5))
        y = rng.integers(0, 3, 4)
        _, grads = mlp_loss_and_grads(params, x, y, activation)
        h = 1e-6
        for name, p in params.items():
            for idx in range(p.size):
                i = np.unravel_index(idx, p.shape)
                old = p[i]
                p[i] = old + h
                up, _ = mlp_loss_and_grads(params, x, y, activation)
                p[i] = old - h
                down, _ = mlp_loss_and_grads(params, x, y, activation)
                p[i] = old
                fd = (up - down) / (2 * h)
                assert abs(fd - grads[name][i]) <= 1e-6 + 1e-5 * abs(fd), (activation, name, i)
