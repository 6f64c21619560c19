"""ctypes bindings for trainer/capi.h, the trainer's flat C API.

Every function of capi.h gets its argtypes and restype here. Errors the C
side reports (a NULL handle or NaN with text in the caller's buffer) become
CapiError with the C message. Arrays cross as ndarray.ctypes.data_as
pointers: inputs are converted to C-contiguous float32/int32/uint16 first,
arrays the C code writes into must already be C-contiguous float32.

Arrays returned by Model.weights(), Model.grads() and Optim.state() are views
of memory the C handle owns: they are valid until the handle is closed.
"""
import ctypes
import json
import math

import numpy as np

_ERRLEN = 1024
_f32p = ctypes.POINTER(ctypes.c_float)
_i32p = ctypes.POINTER(ctypes.c_int)
_longp = ctypes.POINTER(ctypes.c_long)
_u16p = ctypes.POINTER(ctypes.c_uint16)


class CapiError(RuntimeError):
    """An error reported by the trainer's C API, with its message."""


def _declare(lib):
    v = ctypes.c_void_p
    sigs = {
        "trn_capi_model_new": (v, [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                   ctypes.c_int, ctypes.c_char_p, ctypes.c_int]),
        "trn_capi_model_free": (None, [v]),
        "trn_capi_model_n_floats": (ctypes.c_long, [v]),
        "trn_capi_model_n_params": (ctypes.c_int, [v]),
        "trn_capi_model_param": (ctypes.c_char_p, [v, ctypes.c_int, _longp, _longp]),
        "trn_capi_model_weights": (_f32p, [v]),
        "trn_capi_model_grads": (_f32p, [v]),
        "trn_capi_model_step": (ctypes.c_double, [v, _f32p, _i32p, _i32p, ctypes.c_int]),
        "trn_capi_model_gpt_logits": (ctypes.c_int, [v, _i32p, ctypes.c_int, _f32p]),
        "trn_capi_model_step_scaled": (ctypes.c_double, [v, _f32p, _i32p, _i32p, ctypes.c_int,
                                                         ctypes.c_float]),
        "trn_capi_optim_new": (v, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), _longp,
                                   ctypes.c_int, ctypes.c_char_p, ctypes.c_int]),
        "trn_capi_optim_free": (None, [v]),
        "trn_capi_optim_step": (None, [v, _f32p, _f32p, ctypes.c_double]),
        "trn_capi_optim_state": (_f32p, [v, ctypes.c_int]),
        "trn_capi_schedule_lr": (ctypes.c_double, [ctypes.c_char_p, ctypes.c_long, ctypes.c_long,
                                                   ctypes.c_long, ctypes.c_char_p, ctypes.c_int]),
        "trn_capi_fp32_to_fp16": (None, [_u16p, _f32p, ctypes.c_long]),
        "trn_capi_fp16_to_fp32": (None, [_f32p, _u16p, ctypes.c_long]),
        "trn_capi_fp32_to_bf16": (None, [_u16p, _f32p, ctypes.c_long]),
        "trn_capi_bf16_to_fp32": (None, [_f32p, _u16p, ctypes.c_long]),
        "trn_capi_round_fp16": (None, [_f32p, ctypes.c_long]),
        "trn_capi_round_bf16": (None, [_f32p, ctypes.c_long]),
        "trn_capi_nonfinite": (ctypes.c_int, [_f32p, ctypes.c_long]),
        "trn_capi_loss_scale_new": (v, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]),
        "trn_capi_loss_scale_free": (None, [v]),
        "trn_capi_loss_scale_update": (ctypes.c_int, [v, ctypes.c_int]),
        "trn_capi_loss_scale_state": (ctypes.c_double, [v, _longp, _longp]),
        "trn_capi_loss_scale_mode": (ctypes.c_char_p, [v]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


_libs = {}


def load(path):
    """The trainer library at path, loaded once per process."""
    path = str(path)
    if path not in _libs:
        _libs[path] = _declare(ctypes.CDLL(path))
    return _libs[path]


def _spec_bytes(spec):
    return (spec if isinstance(spec, str) else json.dumps(spec)).encode()


def _in_f32(a):
    return np.ascontiguousarray(a, dtype=np.float32)


def _in_i32(a):
    return np.ascontiguousarray(a, dtype=np.int32)


def _out_f32(a, what):
    if not (isinstance(a, np.ndarray) and a.dtype == np.float32 and a.flags.c_contiguous
            and a.flags.writeable):
        raise TypeError(f"{what}: must be a writable C-contiguous float32 array")
    return a


def _view(ptr, n):
    if not ptr:
        return None
    return np.ctypeslib.as_array(ptr, shape=(n,))


class Model:
    """trn_capi_model_*: a model built from a spec, its weights and gradients."""

    def __init__(self, lib, spec, in_dim=0, n_classes=0, vocab=0, max_batch=1):
        self._lib = lib
        err = ctypes.create_string_buffer(_ERRLEN)
        self._h = lib.trn_capi_model_new(_spec_bytes(spec), in_dim, n_classes, vocab, max_batch,
                                         err, _ERRLEN)
        if not self._h:
            raise CapiError(err.value.decode())
        self.n_floats = lib.trn_capi_model_n_floats(self._h)
        self.params = {}                  # name -> (offset, numel), in table order
        off, numel = ctypes.c_long(), ctypes.c_long()
        for i in range(lib.trn_capi_model_n_params(self._h)):
            name = lib.trn_capi_model_param(self._h, i, ctypes.byref(off), ctypes.byref(numel))
            self.params[name.decode()] = (off.value, numel.value)

    def close(self):
        if self._h:
            self._lib.trn_capi_model_free(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def weights(self):
        """[n_floats] float32 view, writable."""
        return _view(self._lib.trn_capi_model_weights(self._h), self.n_floats)

    def grads(self):
        """[n_floats] float32 view."""
        return _view(self._lib.trn_capi_model_grads(self._h), self.n_floats)

    def tensor(self, flat, name):
        """The slice of flat (weights() or grads()) holding parameter name."""
        off, numel = self.params[name]
        return flat[off:off + numel]

    def step(self, n, x=None, tokens=None, targets=None, scale=None):
        """Zero grads, forward and backward on n samples; returns the mean loss.

        With scale, trn_capi_model_step_scaled: the gradients are scale times
        those of the mean loss (float32 scale). Without, trn_capi_model_step.
        For an fp16/bf16 model the C side rounds x to the dtype first.
        """
        keep = []

        def ptr(a, conv, ctype):
            if a is None:
                return None
            a = conv(a)
            keep.append(a)
            return a.ctypes.data_as(ctype)

        args = (self._h, ptr(x, _in_f32, _f32p), ptr(tokens, _in_i32, _i32p),
                ptr(targets, _in_i32, _i32p), n)
        if scale is None:
            loss = self._lib.trn_capi_model_step(*args)
        else:
            loss = self._lib.trn_capi_model_step_scaled(*args, float(scale))
        if math.isnan(loss):
            raise CapiError(f"trn_capi_model_step: NaN loss (n = {n})")
        return loss


    def gpt_logits(self, tokens, vocab):
        """A gpt's forward on tokens [n, seq]: its logits [n, seq, vocab]."""
        tokens = _in_i32(tokens)
        out = np.zeros(tokens.shape + (vocab,), dtype=np.float32)
        if self._lib.trn_capi_model_gpt_logits(self._h, tokens.ctypes.data_as(_i32p),
                                               tokens.shape[0], out.ctypes.data_as(_f32p)):
            raise CapiError(f"trn_capi_model_gpt_logits: not a gpt, or n = {tokens.shape[0]}")
        return out


class Optim:
    """trn_capi_optim_*: an optimizer over named tensors laid out back to back."""

    def __init__(self, lib, spec, names, numels):
        self._lib = lib
        err = ctypes.create_string_buffer(_ERRLEN)
        n = len(names)
        c_names = (ctypes.c_char_p * n)(*[s.encode() for s in names])
        c_numels = (ctypes.c_long * n)(*numels)
        self.n_floats = int(sum(numels))
        self._h = lib.trn_capi_optim_new(_spec_bytes(spec), c_names, c_numels, n, err, _ERRLEN)
        if not self._h:
            raise CapiError(err.value.decode())

    def close(self):
        if self._h:
            self._lib.trn_capi_optim_free(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def step(self, w, g, lr):
        """Updates w (float32, [n_floats], in place) with gradient g."""
        _out_f32(w, "w")
        g = _in_f32(g)
        if w.size != self.n_floats or g.size != self.n_floats:
            raise ValueError(f"w and g must hold {self.n_floats} floats "
                             f"(got {w.size} and {g.size})")
        self._lib.trn_capi_optim_step(self._h, w.ctypes.data_as(_f32p), g.ctypes.data_as(_f32p),
                                      float(lr))

    def state(self, which):
        """First (0) or second (1) moment buffer as a float32 view, or None."""
        return _view(self._lib.trn_capi_optim_state(self._h, which), self.n_floats)


def schedule_lr(lib, spec, steps_per_epoch, total_steps, step):
    """trn_capi_schedule_lr; raises CapiError for a bad spec."""
    err = ctypes.create_string_buffer(_ERRLEN)
    lr = lib.trn_capi_schedule_lr(_spec_bytes(spec), steps_per_epoch, total_steps, step, err,
                                  _ERRLEN)
    if math.isnan(lr):
        raise CapiError(err.value.decode())
    return lr


def _in_u16(a):
    return np.ascontiguousarray(a, dtype=np.uint16)


def _convert(fn, src, src_in, src_p, dst_dtype, dst_p):
    """fn(out, inp, n) over src converted by src_in; out is a new dst_dtype array."""
    src = src_in(src)
    out = np.empty(src.shape, dst_dtype)
    fn(out.ctypes.data_as(dst_p), src.ctypes.data_as(src_p), src.size)
    return out


def fp32_to_fp16(lib, x):
    """trn_capi_fp32_to_fp16: the fp16 bit patterns of x, as uint16."""
    return _convert(lib.trn_capi_fp32_to_fp16, x, _in_f32, _f32p, np.uint16, _u16p)


def fp16_to_fp32(lib, h):
    """trn_capi_fp16_to_fp32: float32 values of the fp16 bit patterns h."""
    return _convert(lib.trn_capi_fp16_to_fp32, h, _in_u16, _u16p, np.float32, _f32p)


def fp32_to_bf16(lib, x):
    """trn_capi_fp32_to_bf16: the bf16 bit patterns of x, as uint16."""
    return _convert(lib.trn_capi_fp32_to_bf16, x, _in_f32, _f32p, np.uint16, _u16p)


def bf16_to_fp32(lib, h):
    """trn_capi_bf16_to_fp32: float32 values of the bf16 bit patterns h."""
    return _convert(lib.trn_capi_bf16_to_fp32, h, _in_u16, _u16p, np.float32, _f32p)


def round_fp16(lib, x):
    """trn_capi_round_fp16 in place on x (writable C-contiguous float32)."""
    _out_f32(x, "x")
    lib.trn_capi_round_fp16(x.ctypes.data_as(_f32p), x.size)


def round_bf16(lib, x):
    """trn_capi_round_bf16 in place on x (writable C-contiguous float32)."""
    _out_f32(x, "x")
    lib.trn_capi_round_bf16(x.ctypes.data_as(_f32p), x.size)


def nonfinite(lib, x):
    """trn_capi_nonfinite: whether x holds an inf or NaN."""
    x = _in_f32(x)
    return bool(lib.trn_capi_nonfinite(x.ctypes.data_as(_f32p), x.size))


class LossScale:
    """trn_capi_loss_scale_*: the loss scaler of a spec's "precision"."""

    def __init__(self, lib, spec):
        self._lib = lib
        err = ctypes.create_string_buffer(_ERRLEN)
        self._h = lib.trn_capi_loss_scale_new(_spec_bytes(spec), err, _ERRLEN)
        if not self._h:
            raise CapiError(err.value.decode())
        self.mode = lib.trn_capi_loss_scale_mode(self._h).decode()

    def close(self):
        if self._h:
            self._lib.trn_capi_loss_scale_free(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def update(self, found_nonfinite):
        """One step; True to apply it, False to skip it."""
        return bool(self._lib.trn_capi_loss_scale_update(self._h, int(bool(found_nonfinite))))

    def state(self):
        """(scale, clean_steps, skipped)."""
        clean, skipped = ctypes.c_long(), ctypes.c_long()
        scale = self._lib.trn_capi_loss_scale_state(self._h, ctypes.byref(clean),
                                                    ctypes.byref(skipped))
        return scale, clean.value, skipped.value
