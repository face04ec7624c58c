"""tl.interleave, cat, flip, sort, topk, histogram and swizzle2d in numpy (the compiler builds
them from shape ops: compiler/stdlib_shapes.py; these are the reference)."""
from __future__ import annotations

import numpy as np

from ..language import dtypes as D
from ..language.semantics import SemanticError
from .values import Tensor, to_tensor, unwrap


def _axis(x, dim, what):
    rank = len(x.shape)
    dim = unwrap(dim)
    if dim is None:
        return rank - 1
    if not isinstance(dim, int) or not -rank <= dim < rank:
        raise SemanticError(f"{what}: dim {dim!r} is out of range for a tile of shape {list(x.shape)}")
    return dim % rank


class StandardOps:

    def interleave(self, a, b):
        joined = self.join(a, b)
        if len(joined.shape) < 2:
            raise SemanticError("tl.interleave needs tiles, got scalars")
        return Tensor(joined.data.reshape(joined.shape[:-2] + (2 * joined.shape[-2],)), joined.dtype)

    def cat(self, input, other, can_reorder=False):
        a, b = to_tensor(input, "tl.cat"), to_tensor(other, "tl.cat")
        if not a.shape or a.shape != b.shape or a.dtype != b.dtype:
            raise SemanticError(f"tl.cat needs two tiles of the same shape and type, got {list(a.shape)} "
                                f"{a.dtype} and {list(b.shape)} {b.dtype}")
        return Tensor(np.concatenate([a.data, b.data], axis=0), a.dtype)

    def flip(self, x, dim=None):
        x = to_tensor(x, "tl.flip")
        if not x.shape:
            raise SemanticError("tl.flip needs a tile, got a scalar")
        return Tensor(np.flip(x.data, _axis(x, dim, "tl.flip")).copy(), x.dtype)

    def sort(self, x, dim=None, descending=False):
        x = to_tensor(x, "tl.sort")
        if not x.shape:
            raise SemanticError("tl.sort needs a tile, got a scalar")
        axis = _axis(x, dim, "tl.sort")
        out = np.sort(x.data, axis=axis, kind="stable")      # NaN last, as torch.sort
        return Tensor(np.flip(out, axis).copy() if unwrap(descending) else out, x.dtype)

    def topk(self, x, k, dim=None):
        x = to_tensor(x, "tl.topk")
        if not x.shape:
            raise SemanticError("tl.topk needs a tile, got a scalar")
        axis = _axis(x, dim, "tl.topk")
        k = int(unwrap(k))
        n = x.shape[axis]
        if k < 1 or k > n or k & (k - 1):
            raise SemanticError(f"tl.topk: k must be a power of two from 1 to {n} (the size of dim {axis}), got {k}")
        out = np.flip(np.sort(x.data, axis=axis), axis)          # NaN first, as a descending torch.sort
        return Tensor(np.take(out, np.arange(k), axis=axis).copy(), x.dtype)

    def histogram(self, input, num_bins, mask=None):
        x = to_tensor(input, "tl.histogram")
        bins = int(unwrap(num_bins))
        if len(x.shape) != 1 or not x.dtype.is_int() or x.dtype.is_bool():
            raise SemanticError(f"tl.histogram needs a 1-D integer tile, got shape {list(x.shape)} {x.dtype}")
        v = x.data.astype(np.int64)
        keep = (v >= 0) & (v < bins)
        if mask is not None:
            keep &= np.broadcast_to(to_tensor(mask, "tl.histogram mask").data.astype(bool), v.shape)
        return Tensor(np.bincount(v[keep], minlength=bins).astype(np.int32), D.int32)

    def swizzle2d(self, i, j, size_i, size_j, size_g):
        ij = i * size_j + j
        size_gj = size_g * size_j
        off_i = ij // size_gj * size_g
        rows = self.minimum(size_i - off_i, size_g)
        ij = ij % size_gj
        return off_i + ij % rows, ij // rows
