"""Tile-level semantics of tessera.language: creating tiles (arange, full), shape ops
(permute, reshape, expand_dims, join, split, ...), reductions and scans with combine
regions, dot, and the debugging ops (print, assert, hints).
"""
from __future__ import annotations

from ..language import dtypes as D
from ..language.semantics import SemanticError, cluster_reduce_scatter_shape, is_power_of_two
from .ir_builder import IRType, Region
from .values import Value, describe, is_number


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class TileOps:
    # ------------------------------------------------------------------ creation
    def program_id(self, axis):
        return self._op("program_id", [], D.int32, (), {"axis": axis})

    def num_programs(self, axis):
        return self._op("num_programs", [], D.int32, (), {"axis": axis})

    def arange(self, start, end):
        for x in (start, end):
            if not isinstance(x, int) or isinstance(x, bool):
                raise SemanticError(f"arange's arguments must be compile-time integers "
                                    f"(tl.constexpr), got {describe(x)}")
        if not (-2**31 <= start < 2**31 and -2**31 <= end <= 2**31):
            raise SemanticError(f"arange's bounds must fit in int32, got ({start}, {end})")
        if end <= start:
            raise SemanticError(f"arange's end must be greater than its start, got ({start}, {end})")
        n = end - start
        if not is_power_of_two(n):
            raise SemanticError(f"arange's range must be a power of 2, got {n}")
        return self._op("arange", [], D.int32, (n,), {"start": start, "end": end})

    def check_shape(self, shape, what):
        """A compile-time shape of power-of-two dims (a single int means (int,))."""
        if isinstance(shape, int) and not isinstance(shape, bool):
            shape = (shape,)
        if not isinstance(shape, (tuple, list)):
            raise SemanticError(f"{what} shape must be a tuple of compile-time integers, "
                                f"got {describe(shape)}")
        for d in shape:
            if not isinstance(d, int) or isinstance(d, bool):
                raise SemanticError(f"{what} shape must be compile-time integers, got "
                                    f"{describe(d)} in {describe(tuple(shape))}")
        if not all(is_power_of_two(d) for d in shape):
            raise SemanticError(f"{what} shape must have power-of-two dimensions, got {tuple(shape)}")
        return tuple(shape)

    def full(self, shape, value, dtype):
        shape = self.check_shape(shape, "tl.full")
        if not isinstance(dtype, D.dtype):
            raise SemanticError(f"tl.full dtype must be a tessera.language dtype, got {describe(dtype)}")
        if is_number(value):
            return self.const(value, dtype, shape)
        if isinstance(value, Value):
            if value.shape:
                raise SemanticError(f"tl.full value must be a scalar, got {describe(value)}")
            return self.splat(self.cast(value, dtype), shape)
        raise SemanticError(f"tl.full value must be a number or a scalar tensor, got {describe(value)}")

    # ------------------------------------------------------------------ shapes
    @staticmethod
    def _tile(x, what):
        if not isinstance(x, Value):
            raise SemanticError(f"{what} expects a tensor, got {describe(x)}")
        return x

    def permute(self, x, dims):
        x = self._tile(x, "tl.permute")
        dims = tuple(dims)
        if sorted(dims) != list(range(len(x.shape))):
            raise SemanticError(f"permute dims must be a permutation of {tuple(range(len(x.shape)))} "
                                f"for {describe(x)}, got {dims}")
        if dims == tuple(range(len(dims))):
            return x
        shape = tuple(x.shape[d] for d in dims)
        return self._op("permute", [x], x.dtype, shape, {"order": list(dims)})

    def reshape(self, x, shape):
        x = self.to_value(x)
        shape = self.check_shape(shape, "tl.reshape")
        if _numel(shape) != _numel(x.shape):
            raise SemanticError(f"cannot reshape {describe(x)} ({_numel(x.shape)} elements) to "
                                f"shape {shape} ({_numel(shape)} elements)")
        if shape == x.shape:
            return x
        if not shape:
            raise SemanticError("reshape to a scalar (shape ()) is not supported; use tl.sum")
        if not x.shape:
            return self.splat(x, shape)
        return self._op("reshape", [x], x.dtype, shape)

    def expand_dims_multi(self, x, axes):
        x = self.to_value(x)
        if not isinstance(axes, (tuple, list)):
            axes = (axes,)
        new_rank = len(x.shape) + len(axes)
        norm = []
        for a in axes:
            if not isinstance(a, int) or not -new_rank <= a < new_rank:
                raise SemanticError(f"expand_dims axis {a!r} is out of range for a result of rank {new_rank}")
            norm.append(a % new_rank)
        if len(set(norm)) != len(norm):
            raise SemanticError(f"expand_dims axes must be distinct, got {tuple(axes)}")
        for a in sorted(norm):
            x = self.expand_dims(x, a)
        return x

    def join(self, a, b):
        a, b = self.to_value(a), self.to_value(b)
        if a.dtype != b.dtype:
            raise SemanticError(f"tl.join needs operands of the same type, got {describe(a)} and {describe(b)}")
        a, b = self.broadcast_pair(a, b)
        scalars = not a.shape
        if scalars:
            a, b = self.splat(a, (1,)), self.splat(b, (1,))
        r = self._op("join", [a, b], a.dtype, a.shape + (2,))
        return self.reshape(r, (2,)) if scalars else r

    def split(self, x):
        x = self._tile(x, "tl.split")
        if not x.shape or x.shape[-1] != 2:
            raise SemanticError(f"tl.split needs a tile whose last dimension is 2, got {describe(x)}")
        rt = IRType(x.dtype, x.shape[:-1])
        op = self.builder.create("split", [x.handle], [rt, rt])
        return Value(op.results[0]), Value(op.results[1])

    def gather(self, src, index, axis):
        """out[i] = src[i with i[axis] replaced by index[i]] (Triton's tl.gather): index
        has src's rank and its dims off the axis; an index outside 0 .. n-1 is clamped
        into it (never a read outside the tile)."""
        src, index = self._tile(src, "tl.gather"), self._tile(index, "tl.gather")
        if src.dtype.is_ptr():
            raise SemanticError(f"tl.gather cannot gather pointers, got {describe(src)}")
        if not index.dtype.is_int() or index.dtype.is_bool():
            raise SemanticError(f"tl.gather index must be an integer tile, got {describe(index)}")
        rank = len(src.shape)
        if not isinstance(axis, int) or isinstance(axis, bool):
            raise SemanticError(f"tl.gather axis must be a compile-time integer, got {describe(axis)}")
        if not -rank <= axis < rank:
            raise SemanticError(f"tl.gather axis {axis} is out of range for src {describe(src)} (rank {rank})")
        axis %= rank
        if len(index.shape) != rank or any(index.shape[d] != src.shape[d] for d in range(rank) if d != axis):
            raise SemanticError(f"tl.gather index {describe(index)} must have the shape of src {describe(src)} in "
                                f"every dimension but the axis ({axis})")
        return self._op("gather", [src, index], src.dtype, index.shape, {"axis": axis})

    def cluster_reduce_scatter(self, x, cluster_size):
        """The f32 tile x summed over the programs of the cluster, this program's part of
        dim 0 (language/core.py's cluster_reduce_scatter)."""
        x = self._tile(x, "tl.cluster_reduce_scatter")
        c = cluster_size
        shape = cluster_reduce_scatter_shape(x.shape, x.dtype, c, describe(x))
        previous = getattr(self, "_cluster_size", None)
        if previous is not None and previous != c:
            raise SemanticError(f"tl.cluster_reduce_scatter: cluster size {c} here, {previous} in an earlier call; "
                                f"a kernel runs in clusters of one size")
        self._cluster_size = c
        return self._op("cluster_reduce_scatter", [x], D.float32, shape, {"cluster": c})

    # ------------------------------------------------------------------ reductions / scans
    def _normalize_axis(self, axis, rank, what):
        if not isinstance(axis, int) or isinstance(axis, bool):
            raise SemanticError(f"{what} axis must be a compile-time integer, got {describe(axis)}")
        if not -rank <= axis < rank:
            raise SemanticError(f"{what} axis {axis} is out of range for a tile of rank {rank}")
        return axis % rank

    def _combine_region(self, inputs, combine, what):
        """A region ^(a0, b0, ..., a1, b1, ...) whose body is combine(lhs, rhs)."""
        types = [IRType(v.dtype) for v in inputs]
        region = Region(types + types)
        n = len(inputs)
        with self.builder.at_end_of(region):
            lhs = [Value(a) for a in region.args[:n]]
            rhs = [Value(a) for a in region.args[n:]]
            outs = combine(lhs, rhs)
            if not isinstance(outs, (tuple, list)):
                outs = [outs]
            if len(outs) != n:
                raise SemanticError(f"the {what} combine function must return {n} value(s), "
                                    f"one per operand, but returned {len(outs)}")
            fixed = []
            for i, (o, v) in enumerate(zip(outs, inputs)):
                if is_number(o):
                    o = self.const(o, v.dtype)
                if not isinstance(o, Value) or o.shape or o.dtype != v.dtype:
                    raise SemanticError(f"the {what} combine function returned {describe(o)} for "
                                        f"operand {i}, but that operand's elements are {v.dtype.ir}")
                fixed.append(o)
            self.builder.create("yield", [o.handle for o in fixed])
        return region

    def _prepare_reduce_inputs(self, inputs, axis, what):
        inputs = [self._tile(v, what) for v in inputs]
        shape = inputs[0].shape
        for v in inputs[1:]:
            if v.shape != shape:
                raise SemanticError(f"{what} operands must have the same shape, got "
                                    f"{describe(inputs[0])} and {describe(v)}")
        if not shape:
            raise SemanticError(f"{what} needs a tile, got a scalar ({describe(inputs[0])})")
        if axis is None:
            n = _numel(shape)
            inputs = [self.reshape(v, (n,)) for v in inputs]
            axis = 0
        axis = self._normalize_axis(axis, len(inputs[0].shape), what)
        return inputs, axis

    def reduce(self, inputs, axis, combine, keep_dims=False, what="tl.reduce"):
        """inputs: list of tiles of one shape; combine(lhs_scalars, rhs_scalars) -> scalars."""
        full = axis is None
        orig_rank = len(getattr(inputs[0], "shape", ()) or ())
        inputs, axis = self._prepare_reduce_inputs(inputs, axis, what)
        region = self._combine_region(inputs, combine, what)
        shape = inputs[0].shape
        rshape = shape[:axis] + shape[axis + 1:]
        op = self.builder.create("reduce", [v.handle for v in inputs],
                                 [IRType(v.dtype, rshape) for v in inputs], {"axis": axis}, [region])
        results = [Value(r) for r in op.results]
        if keep_dims:
            if full:  # axis=None keeps every dimension as size 1 (as numpy and Triton)
                for _ in range(max(orig_rank, 1)):
                    results = [self.expand_dims(r, 0) for r in results]
            else:
                results = [self.expand_dims(r, axis) for r in results]
        return results

    def scan(self, inputs, axis, combine, reverse=False, what="tl.associative_scan"):
        inputs = [self._tile(v, what) for v in inputs]
        if axis is None:
            raise SemanticError(f"{what} needs an axis")
        inputs, axis = self._prepare_reduce_inputs(inputs, axis, what)
        region = self._combine_region(inputs, combine, what)
        op = self.builder.create("scan", [v.handle for v in inputs],
                                 [IRType(v.dtype, v.shape) for v in inputs],
                                 {"axis": axis, "reverse": bool(reverse)}, [region])
        return [Value(r) for r in op.results]

    def reduce_with_indices(self, x, axis, greater, tie_break_left, keep_dims, what):
        """(values, indices) of the max (greater=True) or min along axis; ties go to the
        smaller index when tie_break_left (as Triton's _argmax_combine)."""
        x = self._tile(x, what)
        full_rank = len(x.shape) if axis is None else None
        if axis is None:
            x = self.reshape(x, (_numel(x.shape),))
            axis = 0
        axis = self._normalize_axis(axis, len(x.shape), what)
        n = x.shape[axis]
        index = self.arange(0, n)
        if len(x.shape) > 1:
            index = self.expand_dims_multi(index, [d for d in range(len(x.shape)) if d != axis])
            index = self.broadcast_to(index, x.shape)

        def combine(lhs, rhs):
            (v1, i1), (v2, i2) = lhs, rhs
            better = self.cmp("gt" if greater else "lt", v1, v2)
            if tie_break_left:
                tie = self.logical_and(self.cmp("eq", v1, v2), self.cmp("lt", i1, i2))
                better = self.logical_or(better, tie)
            return [self.where(better, v1, v2), self.where(better, i1, i2)]

        results = self.reduce([x, index], axis, combine, keep_dims and full_rank is None, what)
        if keep_dims and full_rank is not None:  # axis=None: every dimension kept as 1
            for _ in range(max(full_rank, 1)):
                results = [self.expand_dims(r, 0) for r in results]
        return results

    # ------------------------------------------------------------------ dot
    def dot(self, a, b, acc, input_precision, out_dtype):
        a, b = self._tile(a, "tl.dot"), self._tile(b, "tl.dot")
        if len(a.shape) != 2 or len(b.shape) != 2:
            raise SemanticError(f"tl.dot supports 2-D operands only, got {describe(a)} and {describe(b)}")
        if a.shape[1] != b.shape[0]:
            raise SemanticError(f"tl.dot: the inner dimensions do not match: {describe(a)} "
                                f"(K = {a.shape[1]}) and {describe(b)} (K = {b.shape[0]})")
        if a.dtype != b.dtype:
            raise SemanticError(f"tl.dot needs both operands of the same type, got {describe(a)} and "
                                f"{describe(b)}; cast one with .to(...)")
        t = a.dtype
        if t.ir not in ("f16", "bf16", "f32", "f64", "i8"):
            raise SemanticError(f"tl.dot supports f16, bf16, f32, f64 and i8 operands, got {t.ir}")
        shape = (a.shape[0], b.shape[1])
        # The IR's accumulator type is fixed by the operand type; a requested f16 result
        # (out_dtype=tl.float16 with f16 operands, as Triton allows) is computed in f32
        # and cast back.
        acc_type = {"i8": D.int32, "f64": D.float64}.get(t.ir, D.float32)
        if out_dtype is None:
            ret_type = acc_type
        elif t.ir == "i8" or t.ir == "f64" or out_dtype.ir not in ("f32", "f16"):
            if out_dtype != acc_type:
                raise SemanticError(f"tl.dot out_dtype {out_dtype.ir} is not supported for {t.ir} "
                                    f"operands (the result is {acc_type.ir})")
            ret_type = acc_type
        elif out_dtype.is_fp16() and t.ir != "f16":
            raise SemanticError(f"tl.dot out_dtype=float16 needs f16 operands, got {t.ir}")
        else:
            ret_type = out_dtype
        if acc is None:
            acc_v = self.const(0, acc_type, shape)
        else:
            if not isinstance(acc, Value) or acc.shape != shape:
                raise SemanticError(f"tl.dot acc must be a tile of shape {shape}, got {describe(acc)}")
            if acc.dtype != ret_type:
                raise SemanticError(f"tl.dot acc has type {acc.dtype.ir} but the result of this dot "
                                    f"is {ret_type.ir}" + (" (pass out_dtype= to change it)"
                                                           if t.is_floating() else ""))
            acc_v = self.cast(acc, acc_type)
        if t.ir != "f32":
            input_precision = "ieee"
        r = self._op("dot", [a, b, acc_v], acc_type, shape, {"input_precision": input_precision})
        return self.cast(r, ret_type)

    # ------------------------------------------------------------------ debugging / hints
    def device_print(self, prefix, values, hex_=False):
        handles = []
        for v in values:
            if is_number(v):
                v = self.to_value(v)
            if not isinstance(v, Value):
                raise SemanticError(f"cannot print {describe(v)} at run time")
            handles.append(v.handle)
        self.builder.create("print", handles, attrs={"prefix": prefix, "hex": bool(hex_)})

    def device_assert(self, cond, msg):
        cond = self.to_bool(cond)
        self.builder.create("assert", [cond.handle], attrs={"msg": msg})

    def hint(self, x, kind, values, check=False):
        if not isinstance(x, Value):
            raise SemanticError(f"tl.{kind} expects a tensor, got {describe(x)}")
        if not isinstance(values, (tuple, list)):
            values = [values]
        values = list(values)
        for v in values:
            if not isinstance(v, int) or isinstance(v, bool):
                raise SemanticError(f"tl.{kind} values must be compile-time integers, got {describe(v)}")
        key = {"multiple_of": "divisibility", "max_contiguous": "contiguity",
               "max_constancy": "constancy"}[kind]
        if not x.shape:
            # On a scalar only divisibility means something: `n = tl.multiple_of(n, 16)`
            # makes `offs < n` constant over 16 lanes (wide masked loads), as a launch
            # with n divisible by 16 would by specialization.
            if kind != "multiple_of" or len(values) != 1:
                raise SemanticError(f"tl.{kind} on a scalar: only tl.multiple_of(x, value) with one "
                                    f"value describes a scalar, got tl.{kind}({describe(x)}, {values})")
            if not x.dtype.is_int() and not x.dtype.is_ptr():
                raise SemanticError(f"tl.multiple_of needs an integer or pointer scalar, got {describe(x)}")
            if values[0] < 1:
                raise SemanticError(f"tl.multiple_of needs a positive value, got {values[0]}")
            if check and x.dtype.is_int():
                # A wrong hint gives wrong answers; debug mode checks it like a device_assert.
                self.device_assert(self.cmp("eq", self.mod(x, values[0]), 0),
                                   f"tl.multiple_of: the value is not a multiple of {values[0]}")
            return self._op("hint", [x], x.dtype, (), {key: values})
        if len(values) != len(x.shape):
            raise SemanticError(f"tl.{kind} needs one value per dimension of {describe(x)}, "
                                f"got {len(values)}")
        return self._op("hint", [x], x.dtype, x.shape, {key: values})

    def assume(self, cond):
        cond = self.to_bool(cond)
        if cond.shape:
            raise SemanticError(f"tl.assume needs a scalar condition, got {describe(cond)}")
        self.builder.create("assume", [cond.handle])
