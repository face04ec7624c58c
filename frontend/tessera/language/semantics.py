"""Type promotion and broadcasting rules of tessera.language, shared by the code
generator and the interpreter so that both agree by construction.

These follow triton.language (3.x). Where Triton is loose we pin the behaviour
down here and in docs/language.md:
  * Python scalars (literals, constexprs) are "weak": combined with a tensor of the
    same or a higher kind (bool < integer < float) they take the tensor's type.
  * Integer `//` and `%` truncate toward zero (C semantics, like Triton), not
    Python's floor semantics.
"""
from __future__ import annotations

from . import dtypes as D

# Triton's dtype kinds: BOOLEAN < INTEGRAL (signed and unsigned alike) < FLOATING.
_KIND_ORDER = {"bool": 0, "uint": 1, "int": 1, "float": 2}


class SemanticError(TypeError):
    """A user-facing type error; the code generator attaches the source location."""


def literal_type(value) -> D.dtype:
    """The type a Python literal takes when it becomes a tensor value."""
    if isinstance(value, bool):
        return D.int1
    if isinstance(value, int):
        if -2**31 <= value < 2**31:
            return D.int32
        if 2**31 <= value < 2**32:
            return D.uint32
        if -2**63 <= value < 2**63:
            return D.int64
        if 2**63 <= value < 2**64:
            return D.uint64
        raise SemanticError(f"integer literal {value} does not fit in 64 bits")
    if isinstance(value, float):
        return D.float32
    raise SemanticError(f"cannot use a value of Python type {type(value).__name__} in a kernel")


def integer_promote(a: D.dtype, b: D.dtype) -> D.dtype:
    ua, ub = a.is_int_unsigned(), b.is_int_unsigned()
    wa, wb = a.primitive_bitwidth, b.primitive_bitwidth
    if ua == ub:
        return a if wa >= wb else b
    if ua:
        return a if wa >= wb else b
    return b if wb >= wa else a


def computation_type(a: D.dtype, a_is_scalar: bool, b: D.dtype, b_is_scalar: bool,
                     div_or_mod: bool = False) -> D.dtype:
    """The type both operands of an arithmetic operator are converted to."""
    if a.is_ptr() or b.is_ptr():
        raise SemanticError(f"arithmetic between {a} and {b} is not defined")
    if a_is_scalar != b_is_scalar:
        scalar, tensor = (a, b) if a_is_scalar else (b, a)
        if _KIND_ORDER[scalar.kind] <= _KIND_ORDER[tensor.kind]:
            if div_or_mod and tensor in (D.float16, D.bfloat16):
                return D.float32
            return tensor
    if a.is_fp64() or b.is_fp64():
        return D.float64
    if a.is_fp32() or b.is_fp32():
        return D.float32
    if a.is_fp16() or b.is_fp16():
        if a.is_bf16() or b.is_bf16():
            return D.float32
        return D.float32 if div_or_mod else D.float16
    if a.is_bf16() or b.is_bf16():
        return D.float32 if div_or_mod else D.bfloat16
    if div_or_mod and a.is_int_unsigned() != b.is_int_unsigned() and not (a.is_bool() or b.is_bool()):
        raise SemanticError(
            f"cannot use /, // or % with {a} and {b}: they have different signedness; "
            f"cast one of them first")
    return integer_promote(a, b)


def truediv_type(a: D.dtype, a_is_scalar: bool, b: D.dtype, b_is_scalar: bool) -> D.dtype:
    """`/` always produces a float: integers divide as fp32."""
    if a.is_int() and b.is_int():
        return D.float32
    if a.is_floating() and b.is_int():
        return a
    if a.is_int() and b.is_floating():
        return b
    return computation_type(a, a_is_scalar, b, b_is_scalar, div_or_mod=True)


def bitwise_type(a: D.dtype, a_is_scalar: bool, b: D.dtype, b_is_scalar: bool, op: str) -> D.dtype:
    if not (a.is_int() and b.is_int()):
        raise SemanticError(f"operator {op} needs integer operands, got {a} and {b}")
    return computation_type(a, a_is_scalar, b, b_is_scalar)


def broadcast_shapes(a: tuple, b: tuple) -> tuple:
    """numpy/Triton broadcasting of two static shapes."""
    ra, rb = len(a), len(b)
    a = (1,) * (rb - ra) + tuple(a)
    b = (1,) * (ra - rb) + tuple(b)
    out = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise SemanticError(
                f"shapes {tuple(a)} and {tuple(b)} cannot be broadcast together "
                f"(dimension {i}: {x} vs {y})")
    return tuple(out)


def is_power_of_two(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


def cluster_reduce_scatter_shape(shape: tuple, dtype: D.dtype, cluster_size, shown: str) -> tuple:
    """The result shape of tl.cluster_reduce_scatter(x, cluster_size) for x of `shape` and
    `dtype` (`shown`: how the error names x), or a SemanticError saying what is wrong."""
    c = cluster_size
    if not isinstance(c, int) or isinstance(c, bool) or c not in (2, 4, 8, 16):
        raise SemanticError(f"tl.cluster_reduce_scatter: cluster_size must be 2, 4, 8 or 16 (a compile-time "
                            f"integer), got {c!r}")
    if not shape:
        raise SemanticError(f"tl.cluster_reduce_scatter needs a tile, got {shown}")
    if dtype != D.float32:
        raise SemanticError(f"tl.cluster_reduce_scatter sums f32 tiles, got {shown}; convert with .to(tl.float32)")
    if shape[0] % c:
        raise SemanticError(f"tl.cluster_reduce_scatter: dim 0 of {shown} is not a multiple of the cluster size {c}")
    return (shape[0] // c,) + tuple(shape[1:])
