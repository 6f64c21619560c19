"""offload.activations in trainer/model_gpt.c and model_mlp.c (through
trn_capi_model_*): "recompute" and "cpu" give the loss and every gradient
of "none" bit for bit, on the same weights and batch, in fp32, bf16 and
fp16 (the recompute must repeat every rounding to the 16-bit dtype), for a
full micro-batch and then a smaller one through the same buffers. gpt has 5
blocks and the mlp 4 hidden layers, so that "cpu" really sends blocks to
its host store and brings them back (the last two stay in staging).
offload.params "cpu" (trainer/param_offload.h) with each of them gives the
same bits again: blocks compute with staged weights into staged gradients
that are copied out to the host's."""
import numpy as np
import pytest

import capi

MODES = ("none", "recompute", "cpu")
DTYPES = ("fp32", "bf16", "fp16")


def gpt_spec(mode, dtype):
    return {"model": {"type": "gpt", "layers": 5, "heads": 4, "dim": 32, "seq": 16, "vocab": 64},
            "data": {"format": "tokens_u16", "train": "train.bin"},
            "batch": {"global": 4}, "optimizer": {"type": "adamw", "lr": 1e-3}, "steps": 1,
            "precision": {"compute": dtype}, "offload": {"activations": mode}}


def mlp_spec(mode, dtype, activation):
    return {"model": {"type": "mlp", "hidden": [48, 40, 56, 32], "activation": activation},
            "data": {"format": "idx", "train": {"images": "x.idx", "labels": "y.idx"}},
            "batch": {"global": 8}, "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 1,
            "precision": {"compute": dtype}, "offload": {"activations": mode}}


def run_mode(lib, model, mode, dtype, w0, params="none"):
    """Loss and gradients of a full batch then a smaller one, from weights w0
    (None: from the seed's initialisation, returned for the next modes)."""
    rng = np.random.default_rng(8)
    if model == "gpt":
        spec, kw, n = gpt_spec(mode, dtype), {"vocab": 64, "max_batch": 4}, 4
        tokens = rng.integers(0, 64, (n, 16)).astype(np.int32)
        targets = rng.integers(0, 64, (n, 16)).astype(np.int32)
        batches = [dict(tokens=tokens, targets=targets),
                   dict(tokens=tokens[:3], targets=targets[:3])]
    else:
        spec, n = mlp_spec(mode, dtype, model.split("-")[1]), 8
        kw = {"in_dim": 20, "n_classes": 10, "max_batch": n}
        x = rng.standard_normal((n, 20)).astype(np.float32)
        y = rng.integers(0, 10, n).astype(np.int32)
        batches = [dict(x=x, targets=y), dict(x=x[:5], targets=y[:5])]
    spec["offload"]["params"] = params
    with capi.Model(lib, spec, **kw) as m:
        w = m.weights()
        if w0 is None:
            # gpt: 10x GPT-2's initialisation, so that attention and GELU are far from linear
            w0 = (w * (10 if model == "gpt" else 1)).astype(np.float32)
        w[:] = w0
        out = []
        for b in batches:
            loss = m.step(len(b["targets"]), **b)
            out.append((loss, m.grads().copy()))
    return out, w0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model", ["gpt", "mlp-gelu", "mlp-relu"])
def test_gradients_are_bit_identical_in_every_mode(libtrainer_path, model, dtype):
    lib = capi.load(libtrainer_path)
    want, w0 = run_mode(lib, model, "none", dtype, None)
    assert all(np.isfinite(loss) and np.any(g != 0) for loss, g in want)
    for mode in MODES[1:]:
        got, _ = run_mode(lib, model, mode, dtype, w0)
        for i, ((loss, g), (wloss, wg)) in enumerate(zip(got, want)):
            assert loss == wloss, (mode, i)
            assert g.tobytes() == wg.tobytes(), \
                f"{mode} batch {i}: max diff {np.max(np.abs(g - wg))}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model", ["gpt", "mlp-gelu", "mlp-relu"])
def test_params_cpu_gradients_are_bit_identical(libtrainer_path, model, dtype):
    lib = capi.load(libtrainer_path)
    want, w0 = run_mode(lib, model, "none", dtype, None)
    for mode in MODES:
        got, _ = run_mode(lib, model, mode, dtype, w0, params="cpu")
        for i, ((loss, g), (wloss, wg)) in enumerate(zip(got, want)):
            assert loss == wloss, (mode, i)
            assert g.tobytes() == wg.tobytes(), \
                f"params cpu, activations {mode}, batch {i}: max diff {np.max(np.abs(g - wg))}"
