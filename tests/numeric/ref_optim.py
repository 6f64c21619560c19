"""Float64 numpy reference optimizers, written from the papers and PyTorch's
documented semantics (not from trainer/optim.c), with the spec's defaults
from docs/spec.md.

State lives per tensor name; step() updates a {name: float64 array} dict of
parameters in place from a dict of gradients. Biases and normalisation
parameters are excluded by substring patterns on the tensor name.
"""
import numpy as np

DEFAULT_EPS = {"adamw": 1e-8, "lamb": 1e-6}


def _matches(name, patterns):
    return any(p in name for p in patterns)


class RefOptim:
    def __init__(self, cfg):
        """cfg: the spec's "optimizer" object (unset fields take docs/spec.md's defaults)."""
        self.type = cfg["type"]
        layerwise = self.type in ("lars", "lamb")
        self.wd = cfg.get("weight_decay", 0.0)
        self.no_decay = cfg.get("exclude_from_weight_decay",
                                ["bias", "norm"] if layerwise else [])
        self.no_adapt = cfg.get("exclude_from_adaptation", self.no_decay) if layerwise else None
        self.mu = cfg.get("momentum", 0.9)
        self.nesterov = cfg.get("nesterov", False)
        self.b1, self.b2 = cfg.get("betas", [0.9, 0.999])
        self.eps = cfg.get("eps", DEFAULT_EPS.get(self.type, 0.0))
        self.trust = cfg.get("trust_coef", 0.001)
        self.t = 0
        self.m, self.v = {}, {}
        self.ratio = {}                # last layer-wise ratio per tensor (1 when not adapted)

    def decay_of(self, name):
        return 0.0 if _matches(name, self.no_decay) else self.wd

    def adapts(self, name):
        return self.no_adapt is not None and not _matches(name, self.no_adapt)

    def step(self, params, grads, lr):
        self.t += 1
        for name, w in params.items():
            g = np.asarray(grads[name], dtype=np.float64)
            m = self.m.setdefault(name, np.zeros_like(w))
            v = self.v.setdefault(name, np.zeros_like(w))
            wd = self.decay_of(name)
            getattr(self, "_" + self.type)(name, w, g, m, v, wd, lr)

    def _sgd(self, name, w, g, m, v, wd, lr):
        # torch.optim.SGD: d = g + wd w; buf = mu buf + d (buf starts at d);
        # nesterov steps along d + mu buf, plain momentum along buf
        d = g + wd * w
        if self.mu == 0:
            w -= lr * d
            return
        m *= self.mu
        m += d
        w -= lr * (d + self.mu * m if self.nesterov else m)

    def _adamw(self, name, w, g, m, v, wd, lr):
        # Loshchilov & Hutter 2019 / torch.optim.AdamW: decoupled decay first,
        # then the bias-corrected Adam step
        w *= 1.0 - lr * wd
        m[:] = self.b1 * m + (1 - self.b1) * g
        v[:] = self.b2 * v + (1 - self.b2) * g * g
        m_hat = m / (1 - self.b1 ** self.t)
        v_hat = v / (1 - self.b2 ** self.t)
        w -= lr * m_hat / (np.sqrt(v_hat) + self.eps)

    def _lars(self, name, w, g, m, v, wd, lr):
        # You, Gitman & Ginsburg 2017, Algorithm 1:
        # local_lr = eta ||w|| / (||g|| + beta ||w||); v = m v + gamma local_lr (g + beta w)
        local = 1.0
        if self.adapts(name):
            wn, gn = np.linalg.norm(w), np.linalg.norm(g)
            if wn > 0 and gn > 0:
                local = self.trust * wn / (gn + wd * wn)
        self.ratio[name] = local
        m[:] = self.mu * m + lr * local * (g + wd * w)
        w -= m

    def _lamb(self, name, w, g, m, v, wd, lr):
        # You et al. 2020, Algorithm 2 with bias correction and phi(z) = z:
        # r = m_hat / (sqrt(v_hat) + eps); u = r + lambda w;
        # w -= lr ||w|| / ||u|| u (ratio 1 when either norm is 0)
        m[:] = self.b1 * m + (1 - self.b1) * g
        v[:] = self.b2 * v + (1 - self.b2) * g * g
        m_hat = m / (1 - self.b1 ** self.t)
        v_hat = v / (1 - self.b2 ** self.t)
        u = m_hat / (np.sqrt(v_hat) + self.eps) + wd * w
        ratio = 1.0
        if self.adapts(name):
            wn, un = np.linalg.norm(w), np.linalg.norm(u)
            if wn > 0 and un > 0:
                ratio = wn / un
        self.ratio[name] = ratio
        w -= lr * ratio * u


def with_fp32_betas(cfg):
    """cfg with Adam's betas (given or default) rounded to fp32, as the C kernels
    receive them. The raw second moment scales with 1 - beta2, which for 0.999
    moves by 1e-5 relative when rounded (0.99900001); the weights do not see it
    (the bias correction cancels it), the stored moments do."""
    if cfg["type"] not in ("adamw", "lamb"):
        return dict(cfg)
    return dict(cfg, betas=[float(np.float32(b)) for b in cfg.get("betas", [0.9, 0.999])])


def clip_grad_norm(grads, max_norm):
    """torch.nn.utils.clip_grad_norm_: scales every gradient by
    max_norm / (norm + 1e-6) when that is below 1; returns the norm before."""
    norm = np.sqrt(sum(float(np.sum(np.square(g, dtype=np.float64))) for g in grads.values()))
    coef = max_norm / (norm + 1e-6)
    if max_norm > 0 and coef < 1:
        for g in grads.values():
            g *= coef
    return norm
