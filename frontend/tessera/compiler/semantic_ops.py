"""Elementwise semantics of tessera.language: constants, casts, broadcasting, type
promotion and the arithmetic/compare/bitwise/math ops, emitted as Tile IR.

Every function takes `Value`s or Python numbers (weak scalars) and returns `Value`s;
operands of the emitted elementwise ops always have equal shapes and element types
(the IR contract), so broadcasts (`splat`, `expand_dims`, `broadcast`) and `cast`s are
inserted here. The promotion and broadcasting rules themselves live in
tessera.language.semantics and are only applied here. User mistakes raise
SemanticError; the code generator adds the source location.
"""
from __future__ import annotations

import math

from ..language import dtypes as D
from ..language import semantics as S
from ..language.semantics import SemanticError
from .ir_builder import IRBuilder, IRType, type_str
from .values import Value, describe, is_number

_OP_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "rem": "%",
              "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}
_SIGNED_TO_UNSIGNED = {"i32": D.uint32, "i64": D.uint64}


def _wrap_int(value: int, dtype: D.dtype) -> int:
    """The integer a constant of `dtype` holds: Python ints wrap to the type's width
    (two's complement), as a store of that bit pattern would. Constants live in an
    int64 attribute, so u64 values >= 2**63 are written as their int64 bit pattern
    (negative), as the C++ printer writes them."""
    if dtype.is_bool():
        return 1 if value else 0
    bits = dtype.primitive_bitwidth
    value &= (1 << bits) - 1
    if (dtype.is_int_signed() or bits == 64) and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def _float_to_int(value: float, dtype: D.dtype) -> int:
    """Python float -> integer constant with the IR's cast rules (truncate, saturate, NaN -> 0)."""
    if math.isnan(value):
        return 0
    bits = dtype.primitive_bitwidth
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dtype.is_int_signed() else (0, (1 << bits) - 1)
    if dtype.is_bool():
        return 1 if value != 0 else 0
    if math.isinf(value):
        return hi if value > 0 else lo
    return max(lo, min(hi, int(value)))


class ElementwiseOps:
    """The part of Semantic that needs nothing but a builder."""

    builder: IRBuilder

    # ------------------------------------------------------------------ emitting
    def _op(self, name, operands, dtype, shape, attrs=None) -> Value:
        op = self.builder.create(name, [v.handle for v in operands], [IRType(dtype, shape)], attrs)
        return Value(op.result)

    def const(self, value, dtype: D.dtype, shape=()) -> Value:
        if dtype.is_ptr():
            raise SemanticError(f"cannot make a constant of pointer type {dtype.ir}")
        if dtype.is_floating():
            value = float(value)
        elif isinstance(value, float):
            value = _float_to_int(value, dtype)
        else:
            value = _wrap_int(int(value), dtype)
        return self._op("const", [], dtype, tuple(shape), {"value": value})

    def to_value(self, x, dtype: D.dtype | None = None) -> Value:
        """A Value for x; Python numbers become constants (of `dtype` or their literal type)."""
        if isinstance(x, Value):
            return x
        if is_number(x):
            return self.const(x, dtype or S.literal_type(x))
        raise SemanticError(f"expected a tensor or a number, got {describe(x)}")

    # ------------------------------------------------------------------ shapes
    def splat(self, v: Value, shape) -> Value:
        shape = tuple(shape)
        if not shape:
            return v
        assert not v.shape, "splat of a tile"
        return self._op("splat", [v], v.dtype, shape)

    def expand_dims(self, v: Value, axis: int) -> Value:
        if not v.shape:
            return self.splat(v, (1,))
        shape = list(v.shape)
        shape.insert(axis, 1)
        return self._op("expand_dims", [v], v.dtype, tuple(shape), {"axis": axis})

    def broadcast_to(self, v: Value, shape, what="value") -> Value:
        """Broadcast v to exactly `shape` (scalars splat; missing leading dims are added
        with expand_dims; dims of size 1 are repeated with broadcast)."""
        shape = tuple(shape)
        if v.shape == shape:
            return v
        if not v.shape:
            return self.splat(v, shape)
        if len(v.shape) > len(shape) or S.broadcast_shapes(v.shape, shape) != shape:
            raise SemanticError(f"cannot broadcast {what} of shape {tuple(v.shape)} to shape {shape}")
        while len(v.shape) < len(shape):
            v = self.expand_dims(v, 0)
        if v.shape != shape:
            v = self._op("broadcast", [v], v.dtype, shape)
        return v

    def broadcast_pair(self, a: Value, b: Value):
        if a.shape == b.shape:
            return a, b
        shape = S.broadcast_shapes(a.shape, b.shape)
        return self.broadcast_to(a, shape), self.broadcast_to(b, shape)

    def broadcast_all(self, values):
        shape = ()
        for v in values:
            shape = S.broadcast_shapes(shape, v.shape)
        return [self.broadcast_to(v, shape) for v in values]

    # ------------------------------------------------------------------ casts
    def cast(self, v, dst: D.dtype, bitcast=False, rounding=None) -> Value:
        """rounding: None / "rtne" (to nearest even) or "rtz" (toward zero), for float
        downcasts only (fp_downcast_rounding)."""
        if rounding not in (None, "rtne", "rtz"):
            raise SemanticError(f"fp_downcast_rounding must be 'rtne' or 'rtz', got {rounding!r}")
        if rounding is not None:
            src = v.dtype if isinstance(v, Value) else S.literal_type(v)
            if bitcast or not (src.is_floating() and dst.is_floating()
                               and dst.primitive_bitwidth < src.primitive_bitwidth):
                raise SemanticError(f"fp_downcast_rounding applies to float downcasts only, not to a cast "
                                    f"from {src.ir} to {dst.ir}{' (bitcast)' if bitcast else ''}")
            if rounding == "rtz":
                return self._op("cast", [self.to_value(v)], dst, v.shape if isinstance(v, Value) else (),
                                {"rounding": "rtz"})
        if is_number(v):
            return self.const(v, dst) if not bitcast else self.cast(self.to_value(v), dst, True)
        src = v.dtype
        if src == dst and src.is_ptr() == dst.is_ptr():
            return v
        if src.is_ptr() or dst.is_ptr():
            if src.is_ptr() and dst.is_ptr():
                return self._op("bitcast", [v], dst, v.shape)
            if src.is_ptr():
                if not dst.is_int() or dst.is_bool():
                    raise SemanticError(f"cannot cast pointer {src.ir} to {dst.ir}")
                as_int = self._op("bitcast", [v], D.int64, v.shape)
                return self.cast(as_int, dst)
            if not src.is_int() or src.is_bool():
                raise SemanticError(f"cannot cast {src.ir} to pointer {dst.ir}")
            return self._op("bitcast", [self.cast(v, D.int64)], dst, v.shape)
        if bitcast:
            if src.primitive_bitwidth != dst.primitive_bitwidth:
                raise SemanticError(
                    f"cannot bitcast {src.ir} ({src.primitive_bitwidth} bits) to {dst.ir} "
                    f"({dst.primitive_bitwidth} bits): the sizes differ")
            return self._op("bitcast", [v], dst, v.shape)
        return self._op("cast", [v], dst, v.shape)

    def to_bool(self, v) -> Value:
        """x != 0 as i1 (the meaning of a number used as a condition)."""
        v = self.to_value(v)
        if v.dtype.is_bool():
            return v
        if v.dtype.is_ptr():
            raise SemanticError(f"cannot use a pointer ({v.type_str()}) as a condition")
        return self.cast(v, D.int1)

    # ------------------------------------------------------------------ promotion
    def _operand_types(self, a, b, opname):
        for x in (a, b):
            if not (isinstance(x, Value) or is_number(x)):
                raise SemanticError(f"unsupported operand types for {_OP_SYMBOL.get(opname, opname)}: "
                                    f"{describe(a)} and {describe(b)}")
        at = a.dtype if isinstance(a, Value) else S.literal_type(a)
        bt = b.dtype if isinstance(b, Value) else S.literal_type(b)
        return at, bt

    def _apply_promotion(self, a, b, ct: D.dtype):
        """Convert both operands to ct and broadcast them to a common shape; weak
        scalars become constants of the final shape directly."""
        a_shape = a.shape if isinstance(a, Value) else ()
        b_shape = b.shape if isinstance(b, Value) else ()
        for x in (a, b):
            if is_number(x) and not isinstance(x, bool) and x < 0 and ct.is_int_unsigned():
                raise SemanticError(
                    f"cannot combine the unsigned type {ct.ir} with the negative constant {x}; "
                    f"cast one of them explicitly")
        shape = S.broadcast_shapes(a_shape, b_shape)
        a = self.const(a, ct, shape) if is_number(a) else self.broadcast_to(self.cast(a, ct), shape)
        b = self.const(b, ct, shape) if is_number(b) else self.broadcast_to(self.cast(b, ct), shape)
        return a, b

    def promote(self, a, b, opname, kind="arith"):
        at, bt = self._operand_types(a, b, opname)
        if at.is_ptr() or bt.is_ptr():
            raise SemanticError(f"operator {_OP_SYMBOL.get(opname, opname)} is not defined for "
                                f"{describe(a)} and {describe(b)}")
        aw, bw = is_number(a), is_number(b)
        if kind == "truediv":
            ct = S.truediv_type(at, aw, bt, bw)
        elif kind == "divmod":
            ct = S.computation_type(at, aw, bt, bw, div_or_mod=True)
        elif kind == "bitwise":
            if not (at.is_int() and bt.is_int()):
                raise SemanticError(f"operator {_OP_SYMBOL[opname]} needs integer operands, got "
                                    f"{describe(a)} and {describe(b)}")
            ct = S.bitwise_type(at, aw, bt, bw, _OP_SYMBOL[opname])
        else:
            ct = S.computation_type(at, aw, bt, bw)
        return self._apply_promotion(a, b, ct)

    # ------------------------------------------------------------------ arithmetic
    def _binary(self, name, a, b, kind="arith"):
        a, b = self.promote(a, b, name, kind)
        return self._op(name, [a, b], a.dtype, a.shape)

    def addptr(self, ptr: Value, offset) -> Value:
        if is_number(offset):
            if isinstance(offset, float):
                raise SemanticError(f"pointer offsets must be integers, got {offset!r}")
            offset = self.const(offset, S.literal_type(int(offset)), ptr.shape)
        if not offset.dtype.is_int():
            raise SemanticError(f"pointer offsets must be integers, got {describe(offset)}")
        if offset.dtype.is_bool():
            offset = self.cast(offset, D.int32)
        ptr, offset = self.broadcast_pair(ptr, offset)
        return self._op("addptr", [ptr, offset], ptr.dtype, ptr.shape)

    @staticmethod
    def _is_ptr(x):
        return isinstance(x, Value) and x.dtype.is_ptr()

    def add(self, a, b):
        if self._is_ptr(a) or self._is_ptr(b):
            if self._is_ptr(a) and self._is_ptr(b):
                raise SemanticError(f"cannot add two pointers ({describe(a)} and {describe(b)})")
            ptr, off = (a, b) if self._is_ptr(a) else (b, a)
            if not (is_number(off) or isinstance(off, Value)):
                raise SemanticError(f"unsupported operand types for +: {describe(a)} and {describe(b)}")
            return self.addptr(ptr, off)
        return self._binary("add", a, b)

    def sub(self, a, b):
        if self._is_ptr(a) or self._is_ptr(b):
            if not self._is_ptr(a) or self._is_ptr(b):
                raise SemanticError(f"operator - is not defined for {describe(a)} and {describe(b)} "
                                    f"(only pointer - integer is)")
            if is_number(b):
                return self.addptr(a, -b)
            return self.addptr(a, self.neg(b))
        return self._binary("sub", a, b)

    def mul(self, a, b):
        return self._binary("mul", a, b)

    def truediv(self, a, b):
        return self._binary("div", a, b, "truediv")

    def floordiv(self, a, b):
        a, b = self.promote(a, b, "floordiv", "divmod")
        if not a.dtype.is_int():
            raise SemanticError(f"operator // needs integer operands, got {describe(a)}; "
                                f"use / and tl.floor for floats")
        # C semantics (truncation), like Triton; see semantics.py
        return self._op("div", [a, b], a.dtype, a.shape)

    def mod(self, a, b):
        return self._binary("rem", a, b, "divmod")

    def and_(self, a, b):
        return self._binary("and", a, b, "bitwise")

    def or_(self, a, b):
        return self._binary("or", a, b, "bitwise")

    def xor(self, a, b):
        return self._binary("xor", a, b, "bitwise")

    def shl(self, a, b):
        return self._binary("shl", a, b, "bitwise")

    def shr(self, a, b):
        return self._binary("shr", a, b, "bitwise")

    def cmp(self, pred, a, b):
        at, bt = self._operand_types(a, b, pred)
        if at.is_ptr() or bt.is_ptr():
            if not (at.is_ptr() and bt.is_ptr() and at == bt):
                raise SemanticError(f"cannot compare {describe(a)} and {describe(b)}")
            a, b = self.broadcast_pair(self.to_value(a), self.to_value(b))
        else:
            a, b = self.promote(a, b, pred)
        return self._op("cmp", [a, b], D.int1, a.shape, {"pred": pred})

    def minimum(self, a, b, propagate_nan=False):
        a, b = self.promote(a, b, "minimum")
        name = "minimum_nan" if propagate_nan and a.dtype.is_floating() else "min"
        return self._op(name, [a, b], a.dtype, a.shape)

    def maximum(self, a, b, propagate_nan=False):
        a, b = self.promote(a, b, "maximum")
        name = "maximum_nan" if propagate_nan and a.dtype.is_floating() else "max"
        return self._op(name, [a, b], a.dtype, a.shape)

    def logical_and(self, a, b):
        a, b = self.broadcast_pair(self.to_bool(a), self.to_bool(b))
        return self._op("and", [a, b], D.int1, a.shape)

    def logical_or(self, a, b):
        a, b = self.broadcast_pair(self.to_bool(a), self.to_bool(b))
        return self._op("or", [a, b], D.int1, a.shape)

    def logical_not(self, a):
        a = self.to_value(a)
        if a.dtype.is_bool():
            return self._op("not", [a], D.int1, a.shape)
        if a.dtype.is_ptr():
            raise SemanticError(f"operator 'not' is not defined for {describe(a)}")
        return self.cmp("eq", a, 0)

    # ------------------------------------------------------------------ unary
    def neg(self, a):
        a = self.to_value(a)
        if a.dtype.is_ptr():
            raise SemanticError(f"unary - is not defined for {describe(a)}")
        return self._op("neg", [a], a.dtype, a.shape)

    def invert(self, a):
        a = self.to_value(a)
        if not a.dtype.is_int():
            raise SemanticError(f"operator ~ needs an integer operand, got {describe(a)}")
        return self._op("not", [a], a.dtype, a.shape)

    def pos(self, a):
        if isinstance(a, Value) and a.dtype.is_ptr():
            raise SemanticError(f"unary + is not defined for {describe(a)}")
        return a

    def where(self, cond, x, y):
        cond = self.to_bool(cond)
        xt, yt = self._operand_types(x, y, "where")
        if xt.is_ptr() or yt.is_ptr():
            if xt != yt or not (isinstance(x, Value) and isinstance(y, Value)):
                raise SemanticError(f"tl.where needs both values of the same type, got "
                                    f"{describe(x)} and {describe(y)}")
        else:
            x, y = self.promote(x, y, "where")
        cond, x, y = self.broadcast_all([cond, x, y])
        return self._op("select", [cond, x, y], x.dtype, x.shape)

    # ------------------------------------------------------------------ math
    def _float_operand(self, x, what):
        """Math functions work on floats: numbers become f32, ints are cast to f32
        (f16/bf16/f64 keep their type; the backend computes f16/bf16 in f32)."""
        x = self.to_value(x, D.float32 if is_number(x) else None)
        if x.dtype.is_ptr():
            raise SemanticError(f"{what} is not defined for {describe(x)}")
        if not x.dtype.is_floating():
            x = self.cast(x, D.float32)
        return x

    def math_unary(self, name, x):
        if name == "abs":
            x = self.to_value(x)
            if x.dtype.is_ptr():
                raise SemanticError(f"tl.abs is not defined for {describe(x)}")
            if x.dtype.is_int_unsigned() or x.dtype.is_bool():
                return x
            return self._op("abs", [x], x.dtype, x.shape)
        x = self._float_operand(x, f"tl.{name}")
        return self._op(name, [x], x.dtype, x.shape)

    def fma(self, x, y, z):
        vals = [x, y, z]
        if not any(isinstance(v, Value) for v in vals):
            vals[0] = self.to_value(x, D.float32)
        types = [v.dtype if isinstance(v, Value) else S.literal_type(v) for v in vals]
        weak = [is_number(v) for v in vals]
        ct = S.computation_type(types[0], weak[0], types[1], weak[1])
        ct = S.computation_type(ct, weak[0] and weak[1], types[2], weak[2])
        if not ct.is_floating():
            ct = D.float32
        shape = ()
        for v in vals:
            if isinstance(v, Value):
                shape = S.broadcast_shapes(shape, v.shape)
        vals = [self.const(v, ct, shape) if is_number(v) else self.broadcast_to(self.cast(v, ct), shape)
                for v in vals]
        return self._op("fma", vals, ct, shape)

    def umulhi(self, x, y):
        x, y = self.promote(x, y, "umulhi")
        if x.dtype.ir not in ("i32", "u32", "i64", "u64"):
            raise SemanticError(f"tl.umulhi needs 32- or 64-bit integers, got {describe(x)}")
        # Triton's umulhi is the unsigned high half whatever the signedness; the IR op
        # follows the type, so signed operands go through their unsigned twin.
        signed = x.dtype.is_int_signed()
        if signed:
            u = _SIGNED_TO_UNSIGNED[x.dtype.ir]
            x, y = self.cast(x, u, bitcast=True), self.cast(y, u, bitcast=True)
        r = self._op("umulhi", [x, y], x.dtype, x.shape)
        if signed:
            r = self.cast(r, D.BY_IR["i" + x.dtype.ir[1:]], bitcast=True)
        return r

    def fdiv(self, x, y, what="tl.fdiv", ieee=False):
        # As Triton: both operands must be floats (Python numbers are weak).
        for v in (x, y):
            if isinstance(v, Value) and not v.dtype.is_floating():
                raise SemanticError(f"{what} needs floating-point operands, got {describe(v)}")
        if is_number(x) and is_number(y):
            x = self.to_value(float(x))
        if what == "tl.div_rn" or ieee:
            # IEEE round-to-nearest even where `/` may be approximate (GPUs: div.full.f32).
            x, y = self.promote(x, y, "truediv", "truediv")
            return self._op("div", [x, y], x.dtype, x.shape, {"rounding": "rn"})
        return self.truediv(x, y)

    def cdiv(self, x, y):
        return self.floordiv(self.sub(self.add(x, y), 1), y)

    def describe_type(self, dtype, shape):
        return type_str(dtype, shape)
