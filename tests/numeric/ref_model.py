"""Float64 numpy references of the trainer's models, forward and backward by
hand (no autograd): the MLP classifier and GPT-2 (Radford et al. 2019:
pre-LayerNorm blocks, causal self-attention scaled by 1/sqrt(head size), GELU
with the tanh approximation, token embedding tied to the output head, mean
cross-entropy over the scored positions).

Parameters are {name: array} with the trainer's names and PyTorch's layouts
(Linear weights [out, in]); gradients come back under the same names.
"""
import numpy as np

LN_EPS = 1e-5          # GPT-2's LayerNorm epsilon
GELU_S = np.sqrt(2.0 / np.pi)
GELU_A = 0.044715


# ---- building blocks: forward returns (out, cache), backward takes the cache

def linear_fwd(x, w, b):
    y = x @ w.T
    return (y + b if b is not None else y), x


def linear_bwd(dy, x, w):
    """(dx, dw, db) for y = x w^T + b over leading batch axes."""
    dy2, x2 = dy.reshape(-1, dy.shape[-1]), x.reshape(-1, x.shape[-1])
    return dy @ w, dy2.T @ x2, dy2.sum(0)


def gelu_fwd(x):
    return 0.5 * x * (1 + np.tanh(GELU_S * (x + GELU_A * x ** 3)))


def gelu_bwd(dy, x):
    t = np.tanh(GELU_S * (x + GELU_A * x ** 3))
    return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_S * (1 + 3 * GELU_A * x * x))


def relu_fwd(x):
    return np.maximum(x, 0)


def relu_bwd(dy, x):
    return np.where(x > 0, dy, 0)


def layernorm_fwd(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)       # biased, as LayerNorm
    rstd = 1 / np.sqrt(var + LN_EPS)
    xhat = (x - mu) * rstd
    return xhat * w + b, (xhat, rstd, w)


def layernorm_bwd(dy, cache):
    xhat, rstd, w = cache
    dxhat = dy * w
    dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    axes = tuple(range(dy.ndim - 1))
    return dx, (dy * xhat).sum(axes), dy.sum(axes)


def xent_fwd(logits, targets):
    """Mean softmax cross-entropy over rows whose target is >= 0, and dlogits."""
    z = logits.reshape(-1, logits.shape[-1])
    t = targets.reshape(-1)
    keep = t >= 0
    z = z - z.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    count = keep.sum()
    rows = np.nonzero(keep)[0]
    loss = -logp[rows, t[rows]].sum() / count
    d = np.exp(logp)
    d[rows, t[rows]] -= 1
    d[~keep] = 0
    return loss, (d / count).reshape(logits.shape)


# ---- the MLP classifier: fc1 -> act -> ... -> fcL -> softmax cross-entropy

def mlp_loss_and_grads(params, x, y, activation="relu"):
    act_fwd, act_bwd = {"relu": (relu_fwd, relu_bwd), "gelu": (gelu_fwd, gelu_bwd)}[activation]
    n_layers = len(params) // 2
    h, caches = x, []
    for i in range(1, n_layers + 1):
        pre, inp = linear_fwd(h, params[f"fc{i}.weight"], params[f"fc{i}.bias"])
        caches.append((inp, pre))
        h = act_fwd(pre) if i < n_layers else pre
    loss, d = xent_fwd(h, y)
    grads = {}
    for i in range(n_layers, 0, -1):
        inp, pre = caches[i - 1]
        if i < n_layers:
            d = act_bwd(d, pre)
        w = params[f"fc{i}.weight"]
        d, grads[f"fc{i}.weight"], grads[f"fc{i}.bias"] = linear_bwd(d, inp, w)
    return loss, grads


# ---- GPT-2

def attention_fwd(qkv, n_head):
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    q, k, v = (a.reshape(B, T, n_head, hs).transpose(0, 2, 1, 3) for a in np.split(qkv, 3, -1))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hs)
    future = np.triu(np.ones((T, T), dtype=bool), 1)   # position i sees j <= i
    scores = np.where(future, -np.inf, scores)
    att = np.exp(scores - scores.max(-1, keepdims=True))
    att /= att.sum(-1, keepdims=True)
    y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
    return y, (q, k, v, att)


def attention_bwd(dy, cache):
    q, k, v, att = cache
    B, NH, T, hs = q.shape
    dy = dy.reshape(B, T, NH, hs).transpose(0, 2, 1, 3)
    datt = dy @ v.transpose(0, 1, 3, 2)
    dv = att.transpose(0, 1, 3, 2) @ dy
    dscores = att * (datt - (datt * att).sum(-1, keepdims=True)) / np.sqrt(hs)
    dq = dscores @ k
    dk = dscores.transpose(0, 1, 3, 2) @ q
    merge = [a.transpose(0, 2, 1, 3).reshape(B, T, NH * hs) for a in (dq, dk, dv)]
    return np.concatenate(merge, -1)


def gpt_loss_and_grads(params, tokens, targets, n_layer, n_head):
    P = params
    B, T = tokens.shape
    x = P["wte.weight"][tokens] + P["wpe.weight"][:T]
    caches = []
    for l in range(n_layer):
        p = lambda s: P[f"blocks.{l}.{s}"]                 # noqa: E731
        h1, ln1 = layernorm_fwd(x, p("norm1.weight"), p("norm1.bias"))
        qkv, _ = linear_fwd(h1, p("attn.qkv.weight"), p("attn.qkv.bias"))
        y, att = attention_fwd(qkv, n_head)
        o, _ = linear_fwd(y, p("attn.proj.weight"), p("attn.proj.bias"))
        x2 = x + o
        h2, ln2 = layernorm_fwd(x2, p("norm2.weight"), p("norm2.bias"))
        f, _ = linear_fwd(h2, p("mlp.fc.weight"), p("mlp.fc.bias"))
        fg = gelu_fwd(f)
        m, _ = linear_fwd(fg, p("mlp.proj.weight"), p("mlp.proj.bias"))
        caches.append((h1, ln1, y, att, h2, ln2, f, fg))
        x = x2 + m
    hf, lnf = layernorm_fwd(x, P["norm_f.weight"], P["norm_f.bias"])
    logits = hf @ P["wte.weight"].T                        # tied head, no bias
    loss, dlogits = xent_fwd(logits, targets)

    G = {}
    dhf = dlogits @ P["wte.weight"]
    dwte_head = dlogits.reshape(-1, dlogits.shape[-1]).T @ hf.reshape(-1, hf.shape[-1])
    dx, G["norm_f.weight"], G["norm_f.bias"] = layernorm_bwd(dhf, lnf)
    for l in range(n_layer - 1, -1, -1):
        h1, ln1, y, att, h2, ln2, f, fg = caches[l]
        p = lambda s: P[f"blocks.{l}.{s}"]                 # noqa: E731
        name = lambda s: f"blocks.{l}.{s}"                 # noqa: E731
        # x = x2 + m: the residual passes dx to both
        dfg, G[name("mlp.proj.weight")], G[name("mlp.proj.bias")] = linear_bwd(
            dx, fg, p("mlp.proj.weight"))
        df = gelu_bwd(dfg, f)
        dh2, G[name("mlp.fc.weight")], G[name("mlp.fc.bias")] = linear_bwd(
            df, h2, p("mlp.fc.weight"))
        dx2, G[name("norm2.weight")], G[name("norm2.bias")] = layernorm_bwd(dh2, ln2)
        dx = dx + dx2
        # x2 = x + o
        dy, G[name("attn.proj.weight")], G[name("attn.proj.bias")] = linear_bwd(
            dx, y, p("attn.proj.weight"))
        dqkv = attention_bwd(dy, att)
        dh1, G[name("attn.qkv.weight")], G[name("attn.qkv.bias")] = linear_bwd(
            dqkv, h1, p("attn.qkv.weight"))
        dx1, G[name("norm1.weight")], G[name("norm1.bias")] = layernorm_bwd(dh1, ln1)
        dx = dx + dx1
    dwte = dwte_head.copy()
    np.add.at(dwte, tokens.reshape(-1), dx.reshape(-1, dx.shape[-1]))
    G["wte.weight"] = dwte
    dwpe = np.zeros_like(P["wpe.weight"])
    dwpe[:T] = dx.sum(0)
    G["wpe.weight"] = dwpe
    return loss, G
