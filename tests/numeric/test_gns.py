"""The gradient noise scale larch-train measures (trainer/gns.c, its hooks in
train.c and dp.c) against per-example gradients computed in numpy.

The checkpoint is fixed: the run starts from init.safetensors with plain
SGD at lr 1e-30 (the smallest update the spec allows: no weight moves by a
representable amount), so every step measures the same model, and with
metrics.gns_ema 0 each step's train/gns_g2 and train/gns_trace are its own
unsmoothed estimates. A tiny MLP on 256 samples whose labels a linear
teacher gives (so that the mean gradient stands out of the noise).

1. Exactness, batch by batch (no shuffling: step s's samples are known):
   numpy's |G_small|^2 and |G_big|^2 over the same samples, put through
   McCandlish et al.'s estimators, must match each step's figures to 1e-4
   (fp32 gradients against float64, as test_train_mlp.py). The small batch
   is the first micro-batch with one rank, each rank's batch with two
   (mpirun; ZeRO-1 too). train/gns_g2 + train/gns_trace / B_big must also
   be train/grad_norm squared: the big batch is the step's.

2. Unbiasedness, over many shuffled batches: from the N per-example
   gradients g_i (mean G, population covariance S), batches drawn without
   replacement (an epoch's permutation) give E|G_B|^2 = |G|^2 +
   tr(S) (N - B) / (B (N - 1)), so the estimators' expectations are
   N/(N-1) tr(S) and |G|^2 - tr(S)/(N-1). The mean of T per-step estimates
   must lie within 4 standard errors of these (the standard error from the
   run's own per-step spread, sd / sqrt(T)); steps are nearly independent
   (batches of one epoch are disjoint, which only lowers the variance of
   their mean). With T = 1000 one standard error is about 5% of |G|^2 and
   1% of tr(S) here (measured by simulating the estimator in numpy), and
   the run is deterministic (seeded), so the test does not flake. An
   estimator with B_small and B_big swapped (tr(S) comes out negated) or a
   small batch not unscaled for the accumulation is tens of standard errors
   off; the test checks that it would see the swap.
"""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import safetensors_np
from ref_model import mlp_loss_and_grads
from test_train_mlp import standardise, write_idx

N_TRAIN, N_VAL, SIDE, CLASSES = 256, 32, 8, 4
HIDDEN = [16]
TOL = 1e-4


@pytest.fixture(scope="module")
def mpirun():
    """Open MPI's launcher and its environment here (tests/integration/mpi.py's)."""
    path = shutil.which("mpirun")
    if path is None:
        pytest.fail("mpirun is missing: run deploy/install-deps.sh (openmpi-bin)")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    return path, env


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The data set, the initial weights and the per-example gradients."""
    d = tmp_path_factory.mktemp("gns")
    rng = np.random.default_rng(7)
    images = rng.integers(0, 256, (N_TRAIN + N_VAL, SIDE, SIDE), dtype=np.uint8)
    x = standardise(images, N_TRAIN)
    labels = np.argmax(x @ rng.standard_normal((SIDE * SIDE, CLASSES)), axis=1)
    labels[:CLASSES] = np.arange(CLASSES)            # every class present
    files = {}
    for split, sl in (("train", slice(0, N_TRAIN)), ("val", slice(N_TRAIN, None))):
        img, lab = d / f"{split}-images-idx3-ubyte", d / f"{split}-labels-idx1-ubyte"
        write_idx(img, images[sl], 0x00000803, False)
        write_idx(lab, labels[sl], 0x00000801, False)
        files[split] = {"images": str(img), "labels": str(lab)}
    dims = [SIDE * SIDE] + HIDDEN + [CLASSES]
    init = {}
    for i in range(1, len(dims)):
        init[f"fc{i}.weight"] = (rng.standard_normal((dims[i], dims[i - 1]))
                                 * np.sqrt(2.0 / dims[i - 1]) * 1.5).astype(np.float32)
        init[f"fc{i}.bias"] = (0.1 * rng.standard_normal(dims[i])).astype(np.float32)
    safetensors_np.write(d / "init.safetensors", init)
    params = {k: v.astype(np.float64) for k, v in init.items()}
    y = labels.astype(np.int64)

    def flat(g):
        return np.concatenate([g[k].ravel() for k in sorted(g)])

    per_example = np.stack([flat(mlp_loss_and_grads(params, x[i:i + 1], y[i:i + 1])[1])
                            for i in range(N_TRAIN)])
    return {"dir": d, "files": files, "g": per_example}


def run_trainer(larch_train, mpirun, data, tmp_path, *, micro, accum, ranks, zero, steps,
                shuffle, every=1):
    spec = {
        "name": "numeric-gns",
        "model": {"type": "mlp", "hidden": HIDDEN, "activation": "relu"},
        "data": {"format": "idx", "train": data["files"]["train"],
                 "val": data["files"]["val"], "shuffle": shuffle},
        "batch": {"global": micro * accum * ranks, "micro": micro},
        "optimizer": {"type": "sgd", "lr": 1e-30, "momentum": 0.0},
        "parallel": {"ranks": ranks, "zero_stage": zero},
        "metrics": {"gns_every": every, "gns_ema": 0.0},
        "steps": steps,
        "log_every": 1,
        "checkpoint_at_end": False,
        "seed": 3,
        "init": {"from": str(data["dir"] / "init.safetensors")},
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    job = tmp_path / "job"
    cmd = [str(larch_train), "--spec", "spec.json", "--job-dir", str(job), "--threads", "1"]
    env = None
    if ranks > 1:
        cmd = [mpirun[0], "-n", str(ranks)] + cmd
        env = mpirun[1]
    run = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, f"larch-train exited {run.returncode}:\n{run.stdout}\n{run.stderr}"
    series = {}
    for line in (job / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        series.setdefault(m["name"], {})[m["step"]] = m["value"]
    return run.stdout, series


def estimate(b_small, sq_small, b_big, sq_big):
    """McCandlish et al. 2018, appendix A: unbiased |G|^2 and tr(S)."""
    g2 = (b_big * sq_big - b_small * sq_small) / (b_big - b_small)
    trace = (sq_small - sq_big) / (1.0 / b_small - 1.0 / b_big)
    return g2, trace


LAYOUTS = {   # name: micro, accum, ranks, zero_stage; B_small
    "micro": (8, 4, 1, 0),
    "ranks": (8, 2, 2, 0),
    "ranks_zero1": (8, 2, 2, 1),
}


def small_rows(micro, accum, ranks, step_rows, rank):
    """The samples of one rank's batch within a step's (loader's order)."""
    return np.concatenate([step_rows[(a * ranks + rank) * micro:(a * ranks + rank + 1) * micro]
                           for a in range(accum)])


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_gns_matches_numpy_batch_by_batch(larch_train, mpirun, data, tmp_path, layout):
    micro, accum, ranks, zero = LAYOUTS[layout]
    big = micro * accum * ranks
    steps = N_TRAIN // big
    out, series = run_trainer(larch_train, mpirun, data, tmp_path, micro=micro, accum=accum,
                              ranks=ranks, zero=zero, steps=steps, shuffle=False)
    b_small = micro if ranks == 1 else micro * accum
    assert f"gns: every 1 step, B_small {b_small}" in out
    g = data["g"]
    for s in range(1, steps + 1):
        rows = np.arange((s - 1) * big, s * big)
        gb = g[rows].mean(0)
        if ranks == 1:
            sq_small = np.sum(g[rows[:micro]].mean(0) ** 2)
        else:
            sq_small = np.mean([np.sum(g[small_rows(micro, accum, ranks, rows, r)].mean(0) ** 2)
                                for r in range(ranks)])
        want_g2, want_tr = estimate(b_small, sq_small, big, gb @ gb)
        got_g2, got_tr = series["train/gns_g2"][s], series["train/gns_trace"][s]
        # relative to the figures' scale: |G|^2 is a difference of two norms
        # about tr(S)/B_small apart
        scale = abs(want_tr) / b_small
        assert abs(got_g2 - want_g2) <= TOL * scale, (s, got_g2, want_g2)
        assert abs(got_tr - want_tr) <= TOL * abs(want_tr), (s, got_tr, want_tr)
        norm_sq = series["train/grad_norm"][s] ** 2
        assert abs(got_g2 + got_tr / big - norm_sq) <= TOL * norm_sq
        if got_g2 > 0:
            assert series["train/gns"][s] == pytest.approx(got_tr / got_g2, rel=1e-9)


@pytest.mark.parametrize("layout", ["micro", "ranks"])
def test_gns_unbiased_against_per_example_gradients(larch_train, mpirun, data, tmp_path,
                                                    layout):
    micro, accum, ranks, zero = LAYOUTS[layout]
    b_small = micro if ranks == 1 else micro * accum
    big = micro * accum * ranks
    steps = 1000
    _, series = run_trainer(larch_train, mpirun, data, tmp_path, micro=micro, accum=accum,
                            ranks=ranks, zero=zero, steps=steps, shuffle=True)
    g = data["g"]
    n = len(g)
    mean = g.mean(0)
    trace_pop = np.sum((g - mean) ** 2) / n
    want = {"train/gns_g2": mean @ mean - trace_pop / (n - 1),
            "train/gns_trace": trace_pop * n / (n - 1)}
    est = {k: np.array([series[k][s] for s in range(1, steps + 1)]) for k in want}
    for key, value in want.items():
        se = est[key].std(ddof=1) / np.sqrt(steps)
        off = (est[key].mean() - value) / se
        assert abs(off) <= 4, f"{key}: mean {est[key].mean():.5g}, brute force {value:.5g}, " \
                              f"{off:+.1f} standard errors ({se:.2g})"
    # the test sees an estimator with the batch sizes swapped: from each
    # step's two norms, recovered from its estimates
    sq_small = est["train/gns_g2"] + est["train/gns_trace"] / b_small
    sq_big = est["train/gns_g2"] + est["train/gns_trace"] / big
    _, swapped = estimate(big, sq_small, b_small, sq_big)
    se = swapped.std(ddof=1) / np.sqrt(steps)
    assert abs(swapped.mean() - want["train/gns_trace"]) > 10 * se


def test_gns_every_and_a_single_batch_size(larch_train, mpirun, data, tmp_path):
    """metrics.gns_every 3 measures steps 3 and 6 only (each reported at its
    own step, log_every 1); one rank without accumulation reports nothing
    and says why."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    out, series = run_trainer(larch_train, mpirun, data, tmp_path / "a", micro=8, accum=4,
                              ranks=1, zero=0, steps=7, shuffle=True, every=3)
    assert "gns: every 3 steps, B_small 8 (the first micro-batch) against B_big 32" in out
    assert sorted(series["train/gns_trace"]) == [3, 6]
    assert sorted(series["train/gns_g2"]) == [3, 6]
    out, series = run_trainer(larch_train, mpirun, data, tmp_path / "b", micro=32, accum=1,
                              ranks=1, zero=0, steps=3, shuffle=True)
    assert "gns: not measured: one rank and one micro-batch a step" in out
    assert not any(name.startswith("train/gns") for name in series)
    assert len(series["train/loss"]) == 3
