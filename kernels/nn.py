"""tk.nn: torch modules backed by the library's kernels, drop-in for their torch
counterparts (same constructor arguments, parameters and state_dict keys)."""
from __future__ import annotations

import math

import torch
from torch import nn

from . import activation as A
from . import linear as L
from . import norm as N
from . import softmax_ce as S


def _draw_seed() -> int:
    """A dropout seed from torch's generator: torch.manual_seed makes runs repeatable."""
    return int(torch.randint(0, 2**31 - 1, (1,)).item())


def _flat_affine(mod, x):
    """x and the affine parameters flattened over normalized_shape (kernels normalize
    the last dimension). With one normalized dimension (the common case) they are
    returned as they are: a reshape of a parameter that requires grad adds a view node
    to the autograd graph, which each backward pass then runs."""
    w, b = mod.weight, getattr(mod, "bias", None)
    k = len(mod.normalized_shape)
    if k == 1:
        return x, w, b
    n = math.prod(mod.normalized_shape)
    xv = x.reshape(tuple(x.shape[:x.ndim - k]) + (n,))
    return xv, (w.reshape(n) if w is not None else None), (b.reshape(n) if b is not None else None)


def _as(y, x):
    """y (x's elements, flattened as _flat_affine flattens x) in x's shape; y itself when
    it has that shape (a reshape would add a view node to the autograd graph)."""
    return y if y.shape == x.shape else y.reshape(x.shape)


class FusedLayerNorm(nn.LayerNorm):
    """torch.nn.LayerNorm; relu=True adds a fused ReLU after it."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, relu=False,
                 device=None, dtype=None):
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device=device, dtype=dtype)
        self.relu = relu

    def forward(self, x):
        xv, w, b = _flat_affine(self, x)
        return _as(N.layer_norm(xv, w, b, self.eps, self.relu), x)

    def extra_repr(self):
        return super().extra_repr() + (", relu=True" if self.relu else "")


class FusedRMSNorm(nn.RMSNorm):
    """torch.nn.RMSNorm (eps=None means torch.finfo(x.dtype).eps, as torch)."""

    def forward(self, x):
        xv, w, _ = _flat_affine(self, x)
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        return _as(N.rms_norm(xv, w, eps), x)


class FusedResidualLayerNorm(nn.LayerNorm):
    """forward(x, residual) -> (layer_norm(x + residual), x + residual)."""

    def forward(self, x, residual):
        xv, w, b = _flat_affine(self, x)
        rv = residual if residual.shape == xv.shape else residual.reshape(xv.shape)
        y, h = N.residual_add_layer_norm(xv, rv, w, b, self.eps)
        return _as(y, x), _as(h, x)


class FusedResidualRMSNorm(nn.RMSNorm):
    """forward(x, residual) -> (rms_norm(x + residual), x + residual)."""

    def forward(self, x, residual):
        xv, w, _ = _flat_affine(self, x)
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        rv = residual if residual.shape == xv.shape else residual.reshape(xv.shape)
        y, h = N.residual_add_rms_norm(xv, rv, w, eps)
        return _as(y, x), _as(h, x)


class FusedLinearReLU(nn.Linear):
    """nn.Sequential(nn.Linear(...), nn.ReLU()) as one matmul with a fused epilogue."""

    def forward(self, x):
        return L.linear_relu(x, self.weight, self.bias)


class FusedLinearGELU(nn.Linear):
    """nn.Sequential(nn.Linear(...), nn.GELU(approximate)) as one matmul with a fused epilogue."""

    def __init__(self, in_features, out_features, bias=True, approximate="none", device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.approximate = approximate

    def forward(self, x):
        return L.linear_gelu(x, self.weight, self.bias, self.approximate)


class FusedSoftmax(nn.Softmax):
    """torch.nn.Softmax; dropout_p > 0 adds fused dropout while training."""

    def __init__(self, dim=-1, dropout_p=0.0):
        super().__init__(dim)
        self.dropout_p = dropout_p

    def forward(self, x):
        p = self.dropout_p if self.training else 0.0
        return S.softmax(x, self.dim, p, _draw_seed() if p > 0 else 0)


class FusedLogSoftmax(nn.LogSoftmax):
    def forward(self, x):
        return S.log_softmax(x, self.dim)


class FusedCrossEntropyLoss(nn.CrossEntropyLoss):
    """torch.nn.CrossEntropyLoss for (rows, classes) logits and integer targets
    (no class weights)."""

    def forward(self, logits, target):
        if self.weight is not None:
            raise NotImplementedError("FusedCrossEntropyLoss does not support class weights")
        if logits.ndim > 2:  # (N, C, d1, ...) as torch: classes on dim 1
            logits = logits.movedim(1, -1).reshape(-1, logits.shape[1])
            target = target.reshape(-1)
        return S.cross_entropy(logits, target, self.ignore_index, self.reduction, self.label_smoothing)


class FusedGELUDropout(nn.Module):
    """nn.Sequential(nn.GELU(approximate), nn.Dropout(p)) in one kernel per direction."""

    def __init__(self, p=0.1, approximate="none"):
        super().__init__()
        self.p, self.approximate = p, approximate

    def forward(self, x):
        p = self.p if self.training else 0.0
        return A.gelu_dropout(x, p, _draw_seed() if p > 0 else 0, approximate=self.approximate)

    def extra_repr(self):
        return f"p={self.p}, approximate={self.approximate!r}"


class FusedSwiGLU(nn.Module):
    """forward(x) with x (..., 2H) -> silu(x[..., :H]) * x[..., H:]."""

    def forward(self, x):
        gate, up = x.chunk(2, dim=-1)
        return A.swiglu(gate, up)


class FusedGEGLU(nn.Module):
    """forward(x) with x (..., 2H) -> gelu(x[..., :H]) * x[..., H:]."""

    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        gate, up = x.chunk(2, dim=-1)
        return A.geglu(gate, up, self.approximate)
