"""trainer/schedule.c (through trn_capi_schedule_lr) against the closed forms
of ref_schedule.py at every step of a run. Both sides compute in double, so
the tolerance is 1e-12 relative (a few ulps of cos and pow).
"""
import math

import pytest

import capi
from ref_schedule import lr_at

RTOL = 1e-12

# id: (optimizer lr, batch, schedule, steps per epoch, total steps)
CASES = {
    "constant": (0.1, {"global": 64}, {}, 10, 12),
    "linear_warmup_from_base": (0.1, {"global": 1024, "reference": 256},
                                {"lr_scaling": "linear", "warmup": {"steps": 10}}, 10, 30),
    "sqrt_warmup_epochs": (0.01, {"global": 1024, "reference": 256},
                           {"lr_scaling": "sqrt", "warmup": {"epochs": 2.5}}, 4, 20),
    "linear_unscaled_warmup_from_0": (0.1, {"global": 256, "reference": 256},
                                      {"lr_scaling": "linear", "warmup": {"steps": 5}}, 10, 10),
    "warmup_from_0_cosine": (0.5, {"global": 64},
                             {"warmup": {"steps": 4}, "decay": "cosine", "final_lr": 1e-3}, 10, 25),
    "cosine_no_warmup": (0.5, {"global": 64}, {"decay": "cosine"}, 10, 17),
    "start_lr_poly": (0.05, {"global": 2048, "reference": 256},
                      {"lr_scaling": "linear", "warmup": {"steps": 6, "start_lr": 0.01},
                       "decay": "poly", "final_lr": 0.002}, 5, 23),
    "poly_sqrt_power": (0.3, {"global": 64}, {"decay": "poly", "power": 0.5}, 10, 15),
    "step_decay_steps": (0.2, {"global": 512, "reference": 128},
                         {"lr_scaling": "sqrt", "warmup": {"steps": 5}, "decay": "step",
                          "step_size": {"steps": 7}, "gamma": 0.5}, 10, 30),
    "step_decay_epochs": (0.2, {"global": 64},
                          {"decay": "step", "step_size": {"epochs": 1.5}}, 4, 20),
    "warmup_longer_than_run": (0.1, {"global": 64}, {"warmup": {"epochs": 10}}, 4, 20),
}


def make_spec(lr, batch, schedule, total):
    return {
        "model": {"type": "mlp", "hidden": [4]},
        "data": {"format": "idx", "train": {"images": "x.idx", "labels": "y.idx"}},
        "batch": batch,
        "optimizer": {"type": "sgd", "lr": lr},
        "schedule": schedule,
        "steps": total,
    }


@pytest.mark.parametrize("case", list(CASES))
def test_schedule_matches_closed_form(libtrainer_path, case):
    lib = capi.load(libtrainer_path)
    lr, batch, schedule, spe, total = CASES[case]
    spec = make_spec(lr, batch, schedule, total)
    got = [capi.schedule_lr(lib, spec, spe, total, t) for t in range(total)]
    want = [lr_at(spec, spe, total, t) for t in range(total)]
    bad = [(t, g, w) for t, (g, w) in enumerate(zip(got, want))
           if not math.isclose(g, w, rel_tol=RTOL, abs_tol=1e-300)]
    assert not bad, f"{case}: (step, C, closed form) differ: {bad[:5]}"
    # the schedule is not constant where it should vary (the test can fail)
    if case != "constant":
        assert len(set(want)) > 2


def test_schedule_known_values(libtrainer_path):
    """Anchors for the closed forms themselves, worked by hand from docs/spec.md:
    0.1 x 1024/256 = 0.4 peak, warmup from 0.1 over 3 steps, then cosine to 0
    over 4 steps."""
    lib = capi.load(libtrainer_path)
    spec = make_spec(0.1, {"global": 1024, "reference": 256},
                     {"lr_scaling": "linear", "warmup": {"steps": 3}, "decay": "cosine"}, 7)
    got = [capi.schedule_lr(lib, spec, 7, 7, t) for t in range(7)]
    c = math.cos
    want = [0.2, 0.3, 0.4, 0.4, 0.2 * (1 + c(math.pi / 4)), 0.2, 0.2 * (1 + c(3 * math.pi / 4))]
    assert got == pytest.approx(want, rel=RTOL)


def test_schedule_reports_spec_errors(libtrainer_path):
    lib = capi.load(libtrainer_path)
    spec = make_spec(0.1, {"global": 64}, {"lr_scaling": "linear"}, 10)
    with pytest.raises(capi.CapiError, match=r"schedule\.lr_scaling: .*needs batch\.reference"):
        capi.schedule_lr(lib, spec, 10, 10, 0)
