"""Shape builtins (trans, permute, reshape, broadcast, expand_dims, join, split, ravel, gather)
and tl.dot."""
from __future__ import annotations

import numpy as np

from ..language import dtypes as D
from ..language import semantics as S
from ..language.semantics import SemanticError
from . import numerics as N
from .values import Tensor, to_tensor, unwrap


def _dims_arg(dims) -> list[int]:
    """`f(x, 1, 0)` and `f(x, (1, 0))` both mean dims (1, 0)."""
    dims = [unwrap(d) for d in dims]
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = [unwrap(d) for d in dims[0]]
    return [int(d) for d in dims]


def _check_pow2_shape(shape, what):
    for d in shape:
        if not S.is_power_of_two(d):
            raise SemanticError(f"{what}: shape {list(shape)} must contain powers of two")


def _round_tf32(x: np.ndarray) -> np.ndarray:
    """float32 -> tf32 (10 explicit mantissa bits), round half away from zero as
    PTX cvt.rna.tf32.f32."""
    b = np.asarray(x, dtype=np.float32, order="C").view(np.uint32)
    finite = (b & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    r = (b + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return np.where(finite, r, b).view(np.float32)


class ShapeOps:

    def trans(self, input, *dims):
        x = to_tensor(input, "tl.trans")
        dims = _dims_arg(dims)
        if not dims:
            if len(x.shape) != 2:
                raise SemanticError(f"tl.trans without dims needs a 2-D tile, got shape "
                                    f"{list(x.shape)}; pass the permutation")
            dims = [1, 0]
        return self.permute(x, dims)

    def permute(self, input, *dims):
        x = to_tensor(input, "tl.permute")
        dims = _dims_arg(dims)
        if sorted(dims) != list(range(len(x.shape))):
            raise SemanticError(f"tl.permute: {dims} is not a permutation of the dims of a tile "
                                f"of shape {list(x.shape)}")
        return Tensor(np.transpose(x.data, dims), x.dtype)

    def reshape(self, input, *shape, can_reorder=False):
        x = to_tensor(input, "tl.reshape")
        shape = tuple(_dims_arg(shape))
        _check_pow2_shape(shape, "tl.reshape")
        if int(np.prod(shape)) != x.numel:
            raise SemanticError(f"tl.reshape: cannot reshape {list(x.shape)} ({x.numel} elements) "
                                f"to {list(shape)}")
        return Tensor(x.data.reshape(shape), x.dtype)       # row-major order kept

    def view(self, input, *shape):
        return self.reshape(input, *shape)

    def ravel(self, x):
        x = to_tensor(x, "tl.ravel")
        return Tensor(x.data.reshape(-1), x.dtype)

    def broadcast(self, input, other):
        a, b = to_tensor(input, "tl.broadcast"), to_tensor(other, "tl.broadcast")
        shape = S.broadcast_shapes(a.shape, b.shape)
        return (Tensor(np.broadcast_to(a.data, shape), a.dtype),
                Tensor(np.broadcast_to(b.data, shape), b.dtype))

    def broadcast_to(self, input, *shape):
        x = to_tensor(input, "tl.broadcast_to")
        shape = tuple(_dims_arg(shape))
        _check_pow2_shape(shape, "tl.broadcast_to")
        if S.broadcast_shapes(x.shape, shape) != shape:
            raise SemanticError(f"tl.broadcast_to: cannot broadcast {list(x.shape)} to {list(shape)}")
        return Tensor(np.broadcast_to(x.data, shape), x.dtype)

    def expand_dims(self, input, axis):
        x = to_tensor(input, "tl.expand_dims")
        axis = unwrap(axis)
        axes = [int(unwrap(a)) for a in axis] if isinstance(axis, (tuple, list)) else [int(axis)]
        new_rank = len(x.shape) + len(axes)
        wrapped = []
        for a in axes:
            if not -new_rank <= a < new_rank:
                raise SemanticError(f"tl.expand_dims: axis {a} is out of range for rank {new_rank}")
            wrapped.append(a % new_rank)
        if len(set(wrapped)) != len(wrapped):
            raise SemanticError(f"tl.expand_dims: repeated axes {axes}")
        data = x.data
        for a in sorted(wrapped):
            data = np.expand_dims(data, a)
        return Tensor(data, x.dtype)

    def join(self, a, b):
        a, b = to_tensor(a, "tl.join"), to_tensor(b, "tl.join")
        if a.dtype != b.dtype or a.dtype.is_ptr() != b.dtype.is_ptr():
            raise SemanticError(f"tl.join: both operands must have the same type, got {a.dtype} "
                                f"and {b.dtype}")
        shape = S.broadcast_shapes(a.shape, b.shape)
        return Tensor(np.stack([np.broadcast_to(a.data, shape), np.broadcast_to(b.data, shape)],
                               axis=-1), a.dtype)

    def split(self, a):
        x = to_tensor(a, "tl.split")
        if not x.shape or x.shape[-1] != 2:
            raise SemanticError(f"tl.split needs a tile whose last dimension is 2, got "
                                f"{list(x.shape)}")
        return Tensor(x.data[..., 0], x.dtype), Tensor(x.data[..., 1], x.dtype)

    def gather(self, src, index, axis):
        x, idx = to_tensor(src, "tl.gather"), to_tensor(index, "tl.gather")
        axis = int(unwrap(axis))
        rank = len(x.shape)
        if not x.shape or not -rank <= axis < rank:
            raise SemanticError(f"tl.gather axis {axis} is out of range for a tile of shape {list(x.shape)}")
        axis %= rank
        if not idx.dtype.is_int() or idx.dtype.is_bool():
            raise SemanticError(f"tl.gather index must be an integer tile, got {idx.dtype}")
        if len(idx.shape) != rank or any(idx.shape[d] != x.shape[d] for d in range(rank) if d != axis):
            raise SemanticError(f"tl.gather index of shape {list(idx.shape)} must have the shape of src "
                                f"{list(x.shape)} in every dimension but the axis ({axis})")
        i = np.clip(idx.data.astype(np.int64), 0, x.shape[axis] - 1)   # as the compiled kernels clamp
        return Tensor(np.take_along_axis(x.data, i, axis=axis), x.dtype)

    # --- dot ------------------------------------------------------------------------------
    def dot(self, input, other, acc=None, input_precision=None, allow_tf32=None,
            max_num_imprecise_acc=None, out_dtype=None):
        a, b = to_tensor(input, "tl.dot"), to_tensor(other, "tl.dot")
        if a.dtype != b.dtype:
            raise SemanticError(f"tl.dot: both inputs must have the same type, got {a.dtype} "
                                f"and {b.dtype}")
        t = a.dtype
        if not (t in (D.float16, D.bfloat16, D.float32, D.float64, D.int8)):
            raise SemanticError(f"tl.dot supports f16, bf16, f32, f64 and i8 inputs, got {t}")
        ra, rb = len(a.shape), len(b.shape)
        if ra != rb or ra not in (2, 3):
            raise SemanticError(f"tl.dot needs two 2-D (or two batched 3-D) tiles, got "
                                f"{list(a.shape)} and {list(b.shape)}")
        if a.shape[-1] != b.shape[-2] or (ra == 3 and a.shape[0] != b.shape[0]):
            raise SemanticError(f"tl.dot: shapes {list(a.shape)} and {list(b.shape)} do not "
                                f"multiply")
        out_shape = a.shape[:-1] + (b.shape[-1],)
        out_dtype = unwrap(out_dtype)
        if t.is_int():
            acc_t = D.int32
        elif t.is_fp64():
            acc_t = D.float64
        else:
            acc_t = D.float32
            if out_dtype is not None and out_dtype not in (D.float32, D.float16):
                raise SemanticError(f"tl.dot: out_dtype must be tl.float32 or tl.float16, got "
                                    f"{out_dtype}")
        ret_t = out_dtype if (out_dtype is not None and t.is_fp16()) else acc_t
        precision = unwrap(input_precision)
        if precision is None and unwrap(allow_tf32) is not None:
            precision = "tf32" if unwrap(allow_tf32) else "ieee"
        precision = precision or "ieee"
        if precision not in ("ieee", "tf32", "tf32x3"):
            raise SemanticError(f"tl.dot: input_precision must be 'ieee', 'tf32' or 'tf32x3', "
                                f"got {precision!r}")

        if acc is not None:
            acc = to_tensor(acc, "tl.dot acc")
            if acc.dtype != ret_t or acc.shape != out_shape:
                raise SemanticError(f"tl.dot: acc must be a {ret_t} tile of shape "
                                    f"{list(out_shape)}, got {acc.dtype} of shape {list(acc.shape)}")

        if t.is_int():
            prod = np.matmul(a.data.astype(np.int64), b.data.astype(np.int64))
            if acc is not None:
                prod = prod + acc.data.astype(np.int64)
            return Tensor(prod.astype(np.int32), D.int32)      # wraps like an i32 accumulator
        x, y = a.data, b.data
        if precision == "tf32" and t.is_fp32():
            x, y = _round_tf32(x), _round_tf32(y)
        # Products and sums in float64, then one rounding to the accumulator type.
        prod = np.matmul(x.astype(np.float64), y.astype(np.float64))
        if acc is not None:
            prod = prod + acc.data.astype(np.float64)
        return Tensor(N.round_float(prod, ret_t), ret_t)
