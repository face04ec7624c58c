"""Reductions and scans: tl.reduce/associative_scan with user combine functions, and
sum/max/min/argmax/argmin/xor_sum/cumsum/cumprod/softmax with Triton's type rules.

Evaluation order (it decides float rounding): a reduction is a pairwise tree along
the axis (step k combines element i with element i + n/2 of what is left), a scan is
sequential from the first element (from the last with reverse=True).
"""
from __future__ import annotations

import numpy as np

from ..language import dtypes as D
from ..language.semantics import SemanticError
from . import numerics as N
from .values import Tensor, TileTruthValueError, to_tensor, unwrap, convert, arith


def _axis_arg(axis, rank: int, what: str, allow_none: bool = True):
    axis = unwrap(axis)
    if axis is None:
        if not allow_none:
            raise SemanticError(f"{what}: axis is required")
        return None
    axis = int(axis)
    if not -rank <= axis < rank:
        raise SemanticError(f"{what}: axis {axis} is out of range for a tile of rank {rank}")
    return axis % rank


def _operands(input, what: str):
    """(tensors, was_single) for an op taking a tensor or a tuple of tensors."""
    single = not isinstance(unwrap(input), (tuple, list))
    tensors = [to_tensor(x, what) for x in ([input] if single else unwrap(input))]
    shapes = {t.shape for t in tensors}
    if len(shapes) != 1:
        raise SemanticError(f"{what}: all operands must have the same shape, got "
                            f"{[list(s) for s in shapes]}")
    if tensors[0].is_scalar():
        raise SemanticError(f"{what}: the operand must be a tile, not a scalar")
    return tensors, single


def _tile(input, what: str) -> Tensor:
    x = to_tensor(input, what)
    if x.is_scalar():
        raise SemanticError(f"{what}: the operand must be a tile, not a scalar")
    return x


def _axis_last(arrays, axis):
    """Arrays with the reduced axis moved last (None: flattened)."""
    if axis is None:
        return [a.reshape(-1) for a in arrays]
    return [np.moveaxis(a, axis, -1) for a in arrays]


def _keep(result: np.ndarray, axis, rank: int, keep_dims: bool) -> np.ndarray:
    if not keep_dims:
        return result
    if axis is None:
        return result.reshape((1,) * rank)
    return np.expand_dims(result, axis)


def _tree_reduce(arrays, combine):
    """Pairwise tree along the last axis; combine(left_list, right_list) -> list."""
    cur = list(arrays)
    while cur[0].shape[-1] > 1:
        n = cur[0].shape[-1]
        h = n // 2
        out = combine([a[..., :h] for a in cur], [a[..., h:2 * h] for a in cur])
        if n % 2:
            out = [np.concatenate([o, a[..., 2 * h:]], axis=-1) for o, a in zip(out, cur)]
        cur = out
    return [a[..., 0] for a in cur]


def _sequential_scan(arrays, combine):
    """Inclusive scan along the last axis, acc = combine(acc, next)."""
    n = arrays[0].shape[-1]
    outs = [np.empty(a.shape, dtype=a.dtype) for a in arrays]
    acc = [a[..., 0] for a in arrays]
    for o, a in zip(outs, acc):
        o[..., 0] = a
    for i in range(1, n):
        acc = combine(acc, [a[..., i] for a in arrays])
        for o, a in zip(outs, acc):
            o[..., i] = a
    return outs


class _UserCombine:
    """Adapts a kernel-level combine_fn to numpy arrays, vectorized over tiles or one
    element at a time (for combine functions that branch on their scalar inputs)."""

    def __init__(self, fn, dtypes, what):
        self.fn, self.dtypes, self.what = fn, dtypes, what

    def _call(self, left, right, shape):
        args = [Tensor(x, t) for x, t in zip(left, self.dtypes)] + \
               [Tensor(x, t) for x, t in zip(right, self.dtypes)]
        res = self.fn(*args)
        res = list(res) if isinstance(res, (tuple, list)) else [res]
        if len(res) != len(self.dtypes):
            raise SemanticError(f"{self.what}: combine_fn returned {len(res)} values for "
                                f"{len(self.dtypes)} operands")
        out = []
        for i, (r, t) in enumerate(zip(res, self.dtypes)):
            r = unwrap(r)
            if isinstance(r, Tensor) and r.dtype != t:
                raise SemanticError(f"{self.what}: combine_fn returned {r.dtype} for operand {i} "
                                    f"of type {t}; cast it back with .to({t})")
            out.append(np.broadcast_to(convert(r, t).data, shape))
        return out

    def vectorized(self, left, right):
        return self._call(left, right, left[0].shape)

    def elementwise(self, left, right):
        shape = left[0].shape
        outs = [np.empty(shape, dtype=N.storage_dtype(t)) for t in self.dtypes]
        for idx in np.ndindex(*shape):
            res = self._call([x[idx] for x in left], [x[idx] for x in right], ())
            for o, r in zip(outs, res):
                o[idx] = r
        return outs


class ReductionOps:

    # --- generic -----------------------------------------------------------------------
    def reduce(self, input, axis, combine_fn, keep_dims=False):
        tensors, single = _operands(input, "tl.reduce")
        rank = len(tensors[0].shape)
        axis = _axis_arg(axis, rank, "tl.reduce")
        dtypes = [t.dtype for t in tensors]
        arrays = _axis_last([t.data for t in tensors], axis)
        combine = _UserCombine(combine_fn, dtypes, "tl.reduce")
        try:
            results = _tree_reduce(arrays, combine.vectorized)
        except TileTruthValueError:
            results = _tree_reduce(arrays, combine.elementwise)
        out = [Tensor(_keep(r, axis, rank, unwrap(keep_dims)), t) for r, t in zip(results, dtypes)]
        return out[0] if single else tuple(out)

    def associative_scan(self, input, axis, combine_fn, reverse=False):
        tensors, single = _operands(input, "tl.associative_scan")
        rank = len(tensors[0].shape)
        axis = _axis_arg(axis, rank, "tl.associative_scan", allow_none=False)
        dtypes = [t.dtype for t in tensors]
        arrays = _axis_last([t.data for t in tensors], axis)
        if unwrap(reverse):
            arrays = [a[..., ::-1] for a in arrays]
        combine = _UserCombine(combine_fn, dtypes, "tl.associative_scan")
        try:
            results = _sequential_scan(arrays, combine.vectorized)
        except TileTruthValueError:
            results = _sequential_scan(arrays, combine.elementwise)
        if unwrap(reverse):
            results = [r[..., ::-1] for r in results]
        out = [Tensor(np.moveaxis(r, -1, axis), t) for r, t in zip(results, dtypes)]
        return out[0] if single else tuple(out)

    # --- sums ----------------------------------------------------------------------------
    @staticmethod
    def _sum_dtype(t: D.dtype, dtype) -> D.dtype:
        """Triton's _pick_sum_dtype: integers narrower than 32 bits accumulate in
        (u)int32 (i1 counts as unsigned, as in Triton); floats keep their type."""
        dtype = unwrap(dtype)
        if dtype is not None:
            return dtype
        if t.is_bool() or (t.is_int_unsigned() and t.primitive_bitwidth < 32):
            return D.uint32
        if t.is_int_signed() and t.primitive_bitwidth < 32:
            return D.int32
        return t

    def sum(self, input, axis=None, keep_dims=False, dtype=None):
        x = _tile(input, "tl.sum")
        rank = len(x.shape)
        axis = _axis_arg(axis, rank, "tl.sum")
        t = self._sum_dtype(x.dtype, dtype)
        x = convert(x, t)
        (a,) = _axis_last([x.data], axis)
        if t.is_floating():
            (r,) = _tree_reduce([a], lambda l, r: [N.float_op(np.add, t, l[0], r[0])])
        elif t.is_bool():
            r = np.logical_xor.reduce(a, axis=-1)
        else:
            r = np.add.reduce(a, axis=-1, dtype=a.dtype)       # wraps
        return Tensor(_keep(r, axis, rank, unwrap(keep_dims)), t)

    def xor_sum(self, input, axis=None, keep_dims=False):
        x = _tile(input, "tl.xor_sum")
        if not x.dtype.is_int():
            raise SemanticError(f"tl.xor_sum needs an integer tile, got {x.dtype}")
        rank = len(x.shape)
        axis = _axis_arg(axis, rank, "tl.xor_sum")
        (a,) = _axis_last([x.data], axis)
        r = np.bitwise_xor.reduce(a, axis=-1)
        return Tensor(_keep(r, axis, rank, unwrap(keep_dims)), x.dtype)

    def cumsum(self, input, axis=0, reverse=False, dtype=None):
        x = _tile(input, "tl.cumsum")
        if x.dtype.is_bf16():
            x = convert(x, D.float32)
        t = self._sum_dtype(x.dtype, dtype)
        return self._accumulate(convert(x, t), axis, reverse, np.add, "tl.cumsum")

    def cumprod(self, input, axis=0, reverse=False):
        x = _tile(input, "tl.cumprod")
        if x.dtype.is_bf16():
            x = convert(x, D.float32)
        return self._accumulate(x, axis, reverse, np.multiply, "tl.cumprod")

    @staticmethod
    def _accumulate(x: Tensor, axis, reverse, ufunc, what):
        axis = _axis_arg(axis, len(x.shape), what, allow_none=False)
        a = x.data
        if x.dtype.is_bool():
            a = a.astype(np.uint8)
        if unwrap(reverse):
            a = np.flip(a, axis)
        # numpy accumulates sequentially and rounds to the array's type after every
        # step (f16 included), which is the scan order documented above.
        r = ufunc.accumulate(a, axis=axis, dtype=a.dtype)
        if unwrap(reverse):
            r = np.flip(r, axis)
        if x.dtype.is_bool():
            r = (r & 1) != 0
        return Tensor(r, x.dtype)

    # --- max / min ---------------------------------------------------------------------
    def _extremum(self, input, axis, return_indices, tie_break_left, keep_dims, is_max, what):
        x = _tile(input, what)
        if x.dtype.is_ptr():
            raise SemanticError(f"{what} is not defined on pointers")
        if x.dtype.is_bf16():
            x = convert(x, D.float32)
        rank = len(x.shape)
        axis = _axis_arg(axis, rank, what)
        keep = unwrap(keep_dims)
        if unwrap(return_indices):
            (a,) = _axis_last([x.data], axis)
            n = a.shape[-1]
            idx = np.broadcast_to(np.arange(n, dtype=np.int32), a.shape)
            left_wins_ties = bool(unwrap(tie_break_left))

            def combine(l, r):
                # Triton's _argmax_combine / _argmin_combine.
                v1, i1 = l
                v2, i2 = r
                better = (v1 > v2) if is_max else (v1 < v2)
                if left_wins_ties:
                    better = better | ((v1 == v2) & (i1 < i2))
                return [np.where(better, v1, v2), np.where(better, i1, i2)]

            v, i = _tree_reduce([a, idx], combine)
            return (Tensor(_keep(v, axis, rank, keep), x.dtype),
                    Tensor(_keep(i, axis, rank, keep), D.int32))
        if x.dtype.primitive_bitwidth < 32:
            x = convert(x, D.float32 if x.dtype.is_floating() else D.int32)
        (a,) = _axis_last([x.data], axis)
        if x.dtype.is_floating():
            fn = np.fmax if is_max else np.fmin          # tl.maximum: IEEE maxNum
        else:
            fn = np.maximum if is_max else np.minimum
        return Tensor(_keep(fn.reduce(a, axis=-1), axis, rank, keep), x.dtype)

    def max(self, input, axis=None, return_indices=False, return_indices_tie_break_left=True,
            keep_dims=False):
        return self._extremum(input, axis, return_indices, return_indices_tie_break_left,
                              keep_dims, True, "tl.max")

    def min(self, input, axis=None, return_indices=False, return_indices_tie_break_left=True,
            keep_dims=False):
        return self._extremum(input, axis, return_indices, return_indices_tie_break_left,
                              keep_dims, False, "tl.min")

    def argmax(self, input, axis, tie_break_left=True, keep_dims=False):
        return self._extremum(input, axis, True, tie_break_left, keep_dims, True, "tl.argmax")[1]

    def argmin(self, input, axis, tie_break_left=True, keep_dims=False):
        return self._extremum(input, axis, True, tie_break_left, keep_dims, False, "tl.argmin")[1]

    # --- softmax ------------------------------------------------------------------------
    def softmax(self, x, ieee_rounding=False):
        """Triton's definition, along axis 0: fdiv(exp(x - max(x, 0)), sum(..., 0))."""
        z = arith("sub", x, self.max(x, 0))
        num = self.exp(z)
        den = self.sum(num, 0)
        return self.fdiv(num, den, ieee_rounding)
