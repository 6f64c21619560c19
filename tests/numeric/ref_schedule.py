"""The learning-rate schedule in closed form, from docs/spec.md ("schedule"
and "Large-batch rules"); lr(t) is the lr of the update that ends step t
(0-based), so warmup reaches the peak at its last step.
"""
import math


def period_steps(period, steps_per_epoch):
    """{"steps": N} or {"epochs": E}, epochs rounded to the nearest step."""
    if "steps" in period:
        return period["steps"]
    return math.floor(period["epochs"] * steps_per_epoch + 0.5)


def lr_at(spec, steps_per_epoch, total_steps, t):
    opt, batch, sched = spec["optimizer"], spec["batch"], spec.get("schedule", {})
    base = opt["lr"]
    scaling = sched.get("lr_scaling", "none")
    ratio = batch["global"] / batch.get("reference", batch["global"])
    k = {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[scaling]
    peak = base * k
    warm = sched.get("warmup")
    warmup_steps = min(period_steps(warm, steps_per_epoch), total_steps) if warm else 0
    if t < warmup_steps:
        # Goyal et al. 2017: from the base lr when scaling raised it, else from 0
        default_start = base if scaling != "none" and ratio != 1 else 0.0
        start = warm.get("start_lr", default_start)
        return start + (peak - start) * (t + 1) / warmup_steps
    decay = sched.get("decay", "none")
    final = sched.get("final_lr", 0.0)
    span = total_steps - warmup_steps
    p = min((t - warmup_steps) / span, 1.0) if span > 0 else 0.0
    if decay == "cosine":
        return final + (peak - final) * 0.5 * (1 + math.cos(math.pi * p))
    if decay == "poly":
        return final + (peak - final) * (1 - p) ** sched.get("power", 2.0)
    if decay == "step":
        every = max(period_steps(sched["step_size"], steps_per_epoch), 1)
        return peak * sched.get("gamma", 0.1) ** ((t - warmup_steps) // every)
    return peak
