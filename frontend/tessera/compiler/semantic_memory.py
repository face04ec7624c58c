"""Memory semantics of tessera.language: load/store (masks, `other`, broadcasting to the
pointer's shape, casts to the element type), atomics, and block pointers
(tl.make_block_ptr / tl.advance), which expand into a tile of pointers plus a mask.
"""
from __future__ import annotations

from ..language import dtypes as D
from ..language.semantics import SemanticError, is_power_of_two
from .values import BlockPointer, Value, describe, is_number

# tl.store's cache_modifier values, PTX's store cache operators (st.global.wb/.cg/.cs/.wt on
# NVPTX; the CPU ignores them): ".cs" streams an output read at most once (evict-first).
STORE_CACHE_MODIFIERS = ("", ".wb", ".cg", ".cs", ".wt")

_ATOMIC_UNSUPPORTED = {"i1", "i8", "i16", "u8", "u16", "bf16"}


class MemoryOps:
    # ------------------------------------------------------------------ helpers
    def _pointer(self, ptr, what):
        if isinstance(ptr, Value) and ptr.dtype.is_ptr():
            return ptr
        raise SemanticError(f"{what} expects a pointer or a tile of pointers as its first "
                            f"argument, got {describe(ptr)}")

    def _mask_for(self, mask, shape, what):
        if mask is None:
            return None
        if is_number(mask):
            mask = self.const(bool(mask), D.int1)
        elif not isinstance(mask, Value):
            raise SemanticError(f"{what} mask must be a boolean tensor, got {describe(mask)}")
        if not mask.dtype.is_bool():
            raise SemanticError(f"{what} mask must have type i1 (a comparison result), "
                                f"got {describe(mask)}")
        return mask

    def _to_shape(self, v, shape, what, ptr):
        if not shape and isinstance(v, Value) and v.shape:
            raise SemanticError(f"{what} is a tile ({describe(v)}) but the pointer is a scalar "
                                f"({describe(ptr)})")
        try:
            return self.broadcast_to(v, shape, what)
        except SemanticError:
            raise SemanticError(f"{what} of shape {tuple(v.shape)} does not match the pointer "
                                f"shape {tuple(shape)} ({describe(ptr)})") from None

    # ------------------------------------------------------------------ load / store
    def load(self, ptr, mask=None, other=None, boundary_check=(), padding_option=""):
        if isinstance(ptr, BlockPointer):
            if mask is not None or other is not None:
                raise SemanticError("tl.load through a block pointer takes no mask or other; "
                                    "use boundary_check and padding_option")
            return self._load_block(ptr, boundary_check, padding_option)
        ptr = self._pointer(ptr, "tl.load")
        if boundary_check or padding_option:
            raise SemanticError("boundary_check and padding_option need a block pointer "
                                "(tl.make_block_ptr); with a tile of pointers, use mask and other")
        mask = self._mask_for(mask, ptr.shape, "tl.load")
        if other is not None and mask is None:
            raise SemanticError("tl.load: other= needs a mask=")
        if mask is not None:
            if not ptr.shape and mask.shape:
                raise SemanticError(f"tl.load mask is a tile ({describe(mask)}) but the pointer is "
                                    f"a scalar ({describe(ptr)})")
            ptr, mask = self.broadcast_pair(ptr, mask)
        elt = ptr.dtype.element_ty
        if other is not None:
            if is_number(other):
                other = self.const(other, elt, ptr.shape)
            elif isinstance(other, Value):
                other = self.cast(other, elt)
                if not ptr.shape and other.shape:
                    raise SemanticError(f"tl.load other is a tile ({describe(other)}) but the "
                                        f"pointer is a scalar ({describe(ptr)})")
                ptr, other = self.broadcast_pair(ptr, other)
                if mask is not None and mask.shape != ptr.shape:
                    mask = self.broadcast_to(mask, ptr.shape)
            else:
                raise SemanticError(f"tl.load other must be a number or a tensor, got {describe(other)}")
        return self._emit_load(ptr, mask, other)

    def _emit_load(self, ptr, mask, other):
        elt = ptr.dtype.element_ty
        if elt.is_bool():
            # i1 lives in memory as one byte (as in Triton): load i8, then != 0.
            ptr = self.cast(ptr, D.pointer_type(D.int8))
            if other is not None:
                other = self.cast(other, D.int8)
            return self.cast(self._emit_load(ptr, mask, other), D.int1)
        operands = [ptr] + ([mask] if mask is not None else []) + ([other] if other is not None else [])
        return self._op("load", operands, elt, ptr.shape)

    def store(self, ptr, value, mask=None, boundary_check=(), cache_modifier=""):
        if cache_modifier not in STORE_CACHE_MODIFIERS:
            raise SemanticError(f"tl.store cache_modifier must be one of {', '.join(map(repr, STORE_CACHE_MODIFIERS))}, "
                                f"got {cache_modifier!r}")
        if isinstance(ptr, BlockPointer):
            if mask is not None:
                raise SemanticError("tl.store through a block pointer takes no mask; use boundary_check")
            return self._store_block(ptr, value, boundary_check, cache_modifier)
        ptr = self._pointer(ptr, "tl.store")
        if boundary_check:
            raise SemanticError("boundary_check needs a block pointer (tl.make_block_ptr); "
                                "with a tile of pointers, use mask")
        elt = ptr.dtype.element_ty
        if is_number(value):
            value = self.const(value, elt, ptr.shape)
        elif isinstance(value, Value):
            if value.dtype.is_ptr() and not elt.is_ptr():
                raise SemanticError(f"cannot store a pointer ({describe(value)}) to {describe(ptr)}")
            value = self._to_shape(self.cast(value, elt), ptr.shape, "the stored value", ptr)
        else:
            raise SemanticError(f"tl.store value must be a number or a tensor, got {describe(value)}")
        mask = self._mask_for(mask, ptr.shape, "tl.store")
        if mask is not None:
            mask = self._to_shape(mask, ptr.shape, "the store mask", ptr)
        self._emit_store(ptr, value, mask, cache_modifier)

    def _emit_store(self, ptr, value, mask, cache_modifier=""):
        if ptr.dtype.element_ty.is_bool():
            ptr = self.cast(ptr, D.pointer_type(D.int8))
            value = self.cast(value, D.int8)
        operands = [ptr.handle, value.handle] + ([mask.handle] if mask is not None else [])
        self.builder.create("store", operands, attrs={"cache_modifier": cache_modifier} if cache_modifier else None)

    # ------------------------------------------------------------------ atomics
    def atomic_rmw(self, op, ptr, val, mask=None):
        ptr = self._pointer(ptr, f"tl.atomic_{op}")
        elt = ptr.dtype.element_ty
        if elt.ir in _ATOMIC_UNSUPPORTED or (elt.is_fp16() and op != "add"):
            raise SemanticError(f"tl.atomic_{op} does not support elements of type {elt.ir}")
        if op in ("and", "or", "xor") and not elt.is_int():
            raise SemanticError(f"tl.atomic_{op} needs integer elements, got {describe(ptr)}")
        val = self._atomic_operand(val, ptr, f"tl.atomic_{op} value")
        mask = self._mask_for(mask, ptr.shape, f"tl.atomic_{op}")
        if mask is not None:
            mask = self._to_shape(mask, ptr.shape, f"the tl.atomic_{op} mask", ptr)
        if op == "add" and elt.is_floating():
            kind = "fadd"
        elif op in ("max", "min") and elt.is_int_unsigned():
            kind = "u" + op
        else:
            kind = op
        operands = [ptr, val] + ([mask] if mask is not None else [])
        return self._op("atomic_rmw", operands, elt, ptr.shape, {"kind": kind})

    def _atomic_operand(self, v, ptr, what):
        elt = ptr.dtype.element_ty
        if is_number(v):
            return self.const(v, elt, ptr.shape)
        if not isinstance(v, Value):
            raise SemanticError(f"{what} must be a number or a tensor, got {describe(v)}")
        return self._to_shape(self.cast(v, elt), ptr.shape, what, ptr)

    def atomic_cas(self, ptr, cmp, val):
        ptr = self._pointer(ptr, "tl.atomic_cas")
        elt = ptr.dtype.element_ty
        if elt.primitive_bitwidth not in (16, 32, 64):
            raise SemanticError(f"tl.atomic_cas needs 16-, 32- or 64-bit elements, got {describe(ptr)}")
        cmp = self._atomic_operand(cmp, ptr, "tl.atomic_cas cmp")
        val = self._atomic_operand(val, ptr, "tl.atomic_cas val")
        return self._op("atomic_cas", [ptr, cmp, val], elt, ptr.shape)

    # ------------------------------------------------------------------ block pointers
    def _scalar_int(self, x, dtype, what):
        if is_number(x) and not isinstance(x, float):
            return self.const(int(x), dtype)
        if isinstance(x, Value) and not x.shape and x.dtype.is_int() and not x.dtype.is_bool():
            if dtype == D.int32 and x.dtype.primitive_bitwidth > 32:
                raise SemanticError(f"{what} must be 32-bit integers, got {describe(x)}; "
                                    f"add .to(tl.int32)")
            return self.cast(x, dtype)
        raise SemanticError(f"{what} must be integer scalars, got {describe(x)}")

    def make_block_ptr(self, base, shape, strides, offsets, block_shape, order):
        if not (isinstance(base, Value) and base.dtype.is_ptr() and not base.shape):
            raise SemanticError(f"tl.make_block_ptr base must be a scalar pointer, got {describe(base)}")
        seqs = {}
        for name, seq in (("shape", shape), ("strides", strides), ("offsets", offsets),
                          ("block_shape", block_shape), ("order", order)):
            if not isinstance(seq, (tuple, list)):
                seq = (seq,)
            seqs[name] = list(seq)
        rank = len(seqs["block_shape"])
        for name, seq in seqs.items():
            if len(seq) != rank:
                raise SemanticError(f"tl.make_block_ptr: shape, strides, offsets, block_shape and "
                                    f"order must have the same length; block_shape has {rank} "
                                    f"entries but {name} has {len(seq)}")
        for d in seqs["block_shape"]:
            if not (isinstance(d, int) and is_power_of_two(d)):
                raise SemanticError(f"tl.make_block_ptr block_shape must be compile-time powers of "
                                    f"two, got {describe(d)}")
        order = seqs["order"]
        if sorted(order) != list(range(rank)):
            raise SemanticError(f"tl.make_block_ptr order must be a permutation of "
                                f"{tuple(range(rank))}, got {tuple(order)}")
        return BlockPointer(
            base,
            [self._scalar_int(s, D.int64, "tl.make_block_ptr shape entries") for s in seqs["shape"]],
            [self._scalar_int(s, D.int64, "tl.make_block_ptr strides") for s in seqs["strides"]],
            [self._scalar_int(s, D.int32, "tl.make_block_ptr offsets") for s in seqs["offsets"]],
            seqs["block_shape"], order)

    def advance(self, bp, offsets):
        if not isinstance(bp, BlockPointer):
            raise SemanticError(f"tl.advance expects a block pointer, got {describe(bp)}")
        if not isinstance(offsets, (tuple, list)):
            offsets = (offsets,)
        if len(offsets) != len(bp.block_shape):
            raise SemanticError(f"tl.advance: the block pointer has {len(bp.block_shape)} "
                                f"dimensions but {len(offsets)} offsets were given")
        new = []
        for old, delta in zip(bp.offsets, offsets):
            if is_number(delta) and delta == 0:
                new.append(old)
            else:
                new.append(self.add(old, self._scalar_int(delta, D.int32, "tl.advance offsets")))
        return BlockPointer(bp.base, bp.shape, bp.strides, new, bp.block_shape, bp.order)

    def _check_boundary(self, bp, boundary_check):
        if not isinstance(boundary_check, (tuple, list)):
            boundary_check = (boundary_check,)
        rank = len(bp.block_shape)
        for d in boundary_check:
            if not isinstance(d, int) or not 0 <= d < rank:
                raise SemanticError(f"boundary_check entries must be dimensions in [0, {rank}), "
                                    f"got {describe(d)}")
        return sorted(set(boundary_check))

    def _expand_block_ptr(self, bp, boundary_check):
        """The pointer tile and the in-bounds mask (None without boundary_check) of a
        block pointer. For block_shape (M, N):
            rows = off0 + arange(M)          cols = off1 + arange(N)
            ptrs = base + rows[:, None] * stride0 + cols[None, :] * stride1   (in i64)
            mask = (0 <= rows < shape0)[:, None] & (0 <= cols < shape1)[None, :]
        with the mask only over the dimensions listed in boundary_check."""
        checks = self._check_boundary(bp, boundary_check)
        rank = len(bp.block_shape)
        offsets = None
        mask = None
        for d, size in enumerate(bp.block_shape):
            idx = self.add(self.splat(bp.offsets[d], (size,)),
                           self._op("arange", [], D.int32, (size,), {"start": 0, "end": size}))
            term = self.mul(self.cast(idx, D.int64), bp.strides[d])
            term = self._expand_to_rank(term, d, rank)
            offsets = term if offsets is None else self.add(offsets, term)
            if d in checks:
                ok = self.logical_and(self.cmp("ge", idx, 0), self.cmp("lt", idx, bp.shape[d]))
                ok = self._expand_to_rank(ok, d, rank)
                mask = ok if mask is None else self.logical_and(mask, ok)
        shape = bp.block_shape
        offsets = self.broadcast_to(offsets, shape)
        ptrs = self.addptr(self.splat(bp.base, shape), offsets)
        if mask is not None:
            mask = self.broadcast_to(mask, shape)
        return ptrs, mask

    def _expand_to_rank(self, v, dim, rank):
        for axis in range(rank):
            if axis != dim:
                v = self.expand_dims(v, axis)
        return v

    def _load_block(self, bp, boundary_check, padding_option):
        if padding_option not in ("", "zero", "nan", None):
            raise SemanticError(f'padding_option must be "zero" or "nan", got {padding_option!r}')
        elt = bp.base.dtype.element_ty
        if padding_option == "nan" and not elt.is_floating():
            raise SemanticError(f'padding_option="nan" needs floating-point elements, got {elt.ir}')
        ptrs, mask = self._expand_block_ptr(bp, boundary_check)
        other = None
        if mask is not None and padding_option in ("zero", "nan"):
            other = self.const(0 if padding_option == "zero" else float("nan"), elt, ptrs.shape)
        return self._emit_load(ptrs, mask, other)

    def _store_block(self, bp, value, boundary_check, cache_modifier=""):
        ptrs, mask = self._expand_block_ptr(bp, boundary_check)
        elt = bp.base.dtype.element_ty
        if is_number(value):
            value = self.const(value, elt, ptrs.shape)
        elif isinstance(value, Value):
            value = self._to_shape(self.cast(value, elt), ptrs.shape, "the stored value", bp)
        else:
            raise SemanticError(f"tl.store value must be a number or a tensor, got {describe(value)}")
        self._emit_store(ptrs, value, mask, cache_modifier)
