"""Memory of an interpreted kernel: the array arguments, addressed by byte, and the
builtins that touch them (load, store, block pointers, atomics).

A pointer value is a uint64 tile of byte addresses plus its element type. Accesses
are checked lane by lane against the array arguments (see Memory); a lane outside
all of them raises InterpreterError naming the op and the lane. Masked-off lanes
are never looked at.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..language import dtypes as D
from ..language import core
from ..language import semantics as S
from ..language.semantics import SemanticError
from . import numerics as N
from .errors import InterpreterError
from .values import Tensor, to_tensor, unwrap, convert, broadcast_to_shape


VIRTUAL_BASE = 1 << 56     # above every x86-64/AArch64 user-space address
VIRTUAL_STRIDE = 1 << 44   # each argument gets its own 16 TiB window


class Region:
    """One array argument: the bytes [lo, hi) it spans in real memory, viewed as
    uint8, and the window [vlo, vhi) of the same bytes in the virtual address space
    kernel pointers live in. Virtual addresses keep the real address modulo 4096, so
    alignment checks on pointers see the real alignment."""

    def __init__(self, index: int, name: str, array: np.ndarray):
        self.name = name
        self.array = array
        try:
            from numpy.lib.array_utils import byte_bounds
        except ImportError:  # numpy < 2
            byte_bounds = np.byte_bounds
        self.lo, self.hi = byte_bounds(array) if array.size else (array.ctypes.data,) * 2
        n = self.hi - self.lo
        if n >= VIRTUAL_STRIDE // 2:
            raise InterpreterError(f"argument '{name}' spans {n} bytes; the interpreter "
                                   f"supports arrays up to {VIRTUAL_STRIDE // 2} bytes")
        self.vlo = VIRTUAL_BASE + index * VIRTUAL_STRIDE + self.lo % 4096
        self.vhi = self.vlo + n
        self.bytes = (np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(self.lo))
                      if n else np.zeros(0, np.uint8))
        self.writeable = bool(array.flags.writeable)

    def describe(self) -> str:
        return f"'{self.name}' ({self.array.dtype}{list(self.array.shape)})"


class Memory:
    """All memory a kernel can reach: its array arguments.

    Pointers derived from an argument carry virtual addresses inside that argument's
    window, so an access is checked against the argument it came from: running off
    the end of `x` is caught even when another array follows `x` in real memory.
    Real addresses (e.g. a table of pointers built on the host) are accepted when
    they fall inside an argument's real span."""

    def __init__(self):
        self.regions: list[Region] = []

    def add_array(self, name: str, array: np.ndarray) -> int:
        """Registers an argument; returns the (virtual) address of its element [0, ...]."""
        r = Region(len(self.regions), name, array)
        self.regions.append(r)
        return r.vlo + (int(array.ctypes.data) - r.lo)

    def _locate(self, addrs: np.ndarray, size: int, writing: bool):
        """(region index or -1, byte offset into it) for each access [addr, addr+size)."""
        found = np.full(addrs.shape, -1, dtype=np.int64)
        offset = np.zeros(addrs.shape, dtype=np.int64)
        virtual = addrs >= np.uint64(VIRTUAL_BASE)
        if virtual.any():
            k = ((addrs - np.uint64(VIRTUAL_BASE)) // np.uint64(VIRTUAL_STRIDE)).astype(np.int64)
            for i in np.unique(k[virtual]):
                if i >= len(self.regions):
                    continue
                r = self.regions[i]
                inside = virtual & (k == i) & (addrs >= np.uint64(r.vlo)) & \
                    (addrs + np.uint64(size) <= np.uint64(r.vhi))
                found[inside] = i
                offset[inside] = (addrs[inside] - np.uint64(r.vlo)).astype(np.int64)
        real = ~virtual
        if real.any():
            order = sorted(range(len(self.regions)),
                           key=lambda i: not self.regions[i].writeable) if writing else \
                range(len(self.regions))
            for i in order:
                r = self.regions[i]
                inside = real & (found < 0) & (addrs >= np.uint64(r.lo)) & \
                    (addrs + np.uint64(size) <= np.uint64(r.hi))
                found[inside] = i
                offset[inside] = (addrs[inside] - np.uint64(r.lo)).astype(np.int64)
        return found, offset

    def resolve(self, op: str, addrs: np.ndarray, lanes: np.ndarray, shape: tuple, size: int,
                writing: bool):
        """Checks every access; returns (region index, byte offset) per access."""
        found, offset = self._locate(addrs, size, writing)
        bad = np.flatnonzero(found < 0)
        if bad.size:
            raise InterpreterError(self._out_of_bounds(op, addrs, lanes, shape, size, bad))
        if writing:
            writeable = np.array([r.writeable for r in self.regions], dtype=bool)
            ro = np.flatnonzero(~writeable[found])
            if ro.size:
                k = ro[0]
                raise InterpreterError(
                    f"{op}: {_lane_text(int(lanes[k]), shape)} writes into argument "
                    f"{self.regions[found[k]].describe()}, which is read-only")
        return found, offset

    def _out_of_bounds(self, op, addrs, lanes, shape, size, bad) -> str:
        k = bad[0]
        addr = int(addrs[k])
        msg = (f"{op}: address out of bounds of every array argument "
               f"({_lane_text(int(lanes[k]), shape)}, {size}-byte access")
        if bad.size > 1:
            msg += f"; {bad.size} lanes in all"
        msg += ")"
        # A virtual address names the argument whose window is nearest: an access just
        # before an array whose window starts it at page offset 0..3 lies below its
        # window (below VIRTUAL_BASE for the first argument).
        virtual = addr >= VIRTUAL_BASE - VIRTUAL_STRIDE // 2
        if virtual and (addr - VIRTUAL_BASE) // VIRTUAL_STRIDE >= len(self.regions):
            return msg + "; the pointer does not come from any argument"
        if self.regions:
            def distance(r):
                lo, hi = (r.vlo, r.vhi) if virtual else (r.lo, r.hi)
                return lo - addr if addr < lo else addr + size - hi
            r = min(self.regions, key=distance)
            lo, hi = (r.vlo, r.vhi) if virtual else (r.lo, r.hi)
        else:
            return msg
        if addr < lo:
            return msg + f": it starts {lo - addr} bytes before argument {r.describe()}"
        return msg + f": it ends {addr + size - hi} bytes past the end of argument {r.describe()}"

    def read(self, op: str, addrs: np.ndarray, lanes: np.ndarray, shape: tuple,
             mdt: np.dtype) -> np.ndarray:
        size = mdt.itemsize
        found, offset = self.resolve(op, addrs, lanes, shape, size, writing=False)
        out = np.empty((addrs.size, size), np.uint8)
        cols = np.arange(size)
        for i in np.unique(found):
            sel = np.flatnonzero(found == i)
            out[sel] = self.regions[i].bytes[offset[sel][:, None] + cols]
        return out.view(mdt).reshape(addrs.shape)

    def write(self, op: str, addrs: np.ndarray, lanes: np.ndarray, shape: tuple,
              raw: np.ndarray) -> None:
        """Writes raw[k] to addrs[k]; when lanes collide the later lane wins."""
        size = raw.dtype.itemsize
        found, offset = self.resolve(op, addrs, lanes, shape, size, writing=True)
        data = np.ascontiguousarray(raw).view(np.uint8).reshape(addrs.size, size)
        cols = np.arange(size)
        for i in np.unique(found):
            sel = np.flatnonzero(found == i)
            self.regions[i].bytes[offset[sel][:, None] + cols] = data[sel]


def _lane_text(lane: int, shape: tuple) -> str:
    n = int(np.prod(shape)) if shape else 1
    text = f"lane {lane} of {n}"
    if len(shape) > 1:
        text += f", index {tuple(int(i) for i in np.unravel_index(lane, shape))}"
    return text


class BlockPointer(core.tensor):
    """tl.make_block_ptr: a block_shape window at `offsets` into a strided tensor."""

    def __init__(self, base: int, element_ty: D.dtype, shape, strides, offsets, block_shape, order):
        self.base, self.element_ty = base, element_ty
        self.tensor_shape, self.strides = tuple(shape), tuple(strides)
        self.offsets, self.block_shape, self.order = tuple(offsets), tuple(block_shape), tuple(order)

    @property
    def dtype(self):
        return D.pointer_type(self.element_ty)

    def __repr__(self):
        return (f"block_ptr<{self.element_ty}>(shape={list(self.tensor_shape)}, "
                f"strides={list(self.strides)}, offsets={list(self.offsets)}, "
                f"block_shape={list(self.block_shape)})")

    def materialize(self, boundary_check) -> tuple[np.ndarray, np.ndarray]:
        """(addresses, in-bounds mask) of the block; only dims in boundary_check are
        checked, as in Triton."""
        rank = len(self.block_shape)
        checks = set()
        for d in boundary_check:
            d = int(unwrap(d))
            if not 0 <= d < rank:
                raise SemanticError(f"boundary_check dimension {d} is out of range for a "
                                    f"block pointer of rank {rank}")
            checks.add(d)
        addr = np.full(self.block_shape, self.base, dtype=np.int64)
        mask = np.ones(self.block_shape, dtype=bool)
        size = self.element_ty.itemsize
        for d in range(rank):
            shape = [1] * rank
            shape[d] = self.block_shape[d]
            off = (self.offsets[d] + np.arange(self.block_shape[d], dtype=np.int64)).reshape(shape)
            addr = addr + off * (self.strides[d] * size)
            if d in checks:
                mask = mask & (off >= 0) & (off < self.tensor_shape[d])
        return addr.astype(np.uint64), mask


def _int_list(values, what: str) -> list[int]:
    values = unwrap(values)
    if not isinstance(values, (list, tuple)):
        values = [values]
    out = []
    for v in values:
        v = unwrap(v)
        if isinstance(v, Tensor):
            if not (v.is_scalar() and v.dtype.is_int()):
                raise SemanticError(f"{what} must be integer scalars, got a {v.dtype} of shape "
                                    f"{list(v.shape)}")
        elif not isinstance(v, (int, np.integer)):
            raise SemanticError(f"{what} must be integers, got {v!r}")
        out.append(int(v))
    return out


def _wrap_i32(v: int) -> int:
    return ((v + 2**31) % 2**32) - 2**31


class MemoryOps:
    """The memory builtins of tessera.language (mixed into the interpreter's builtins)."""

    memory: Memory

    # --- helpers ---------------------------------------------------------------------
    @staticmethod
    def _pointer_operand(pointer, op: str) -> Tensor:
        pointer = unwrap(pointer)
        if isinstance(pointer, BlockPointer):
            raise SemanticError(f"{op} does not accept block pointers")
        if not (isinstance(pointer, Tensor) and pointer.dtype.is_ptr()):
            what = pointer.dtype if isinstance(pointer, Tensor) else type(pointer).__name__
            raise SemanticError(f"{op}: the pointer argument must be a pointer or a tile of "
                                f"pointers, got {what}")
        return pointer

    @staticmethod
    def _with_mask(ptr: Tensor, mask, op: str):
        """(pointer addresses, active lanes) with mask broadcast against the pointer."""
        if mask is None:
            return ptr.data, np.ones(ptr.shape, dtype=bool)
        mask = to_tensor(mask, f"{op} mask")
        if not mask.dtype.is_bool():
            raise SemanticError(f"{op}: the mask must be of type int1 (a comparison result), "
                                f"got {mask.dtype}")
        if ptr.is_scalar() and not mask.is_scalar():
            raise SemanticError(f"{op}: the mask is a tile of shape {list(mask.shape)} but "
                                f"the pointer is a scalar")
        shape = S.broadcast_shapes(ptr.shape, mask.shape)
        return np.broadcast_to(ptr.data, shape), np.broadcast_to(mask.data, shape)

    def _read(self, op, addrs, active, elem):
        lanes = np.flatnonzero(active)
        raw = self.memory.read(op, addrs.reshape(-1)[lanes], lanes, addrs.shape,
                               N.memory_dtype(elem))
        return N.from_memory(raw, elem)

    def _write(self, op, addrs, active, elem, values):
        lanes = np.flatnonzero(active)
        raw = N.to_memory(values.reshape(-1)[lanes], elem)
        self.memory.write(op, addrs.reshape(-1)[lanes], lanes, addrs.shape, raw)

    # --- load / store ----------------------------------------------------------------
    def load(self, pointer, mask=None, other=None, boundary_check=(), padding_option="",
             cache_modifier="", eviction_policy="", volatile=False):
        pointer = unwrap(pointer)
        padding_option = unwrap(padding_option) or ""
        if isinstance(pointer, BlockPointer):
            if mask is not None or other is not None:
                raise SemanticError("tl.load: `mask` and `other` cannot be used with block "
                                    "pointers; use boundary_check and padding_option")
            return self._load_block(pointer, boundary_check, padding_option)
        ptr = self._pointer_operand(pointer, "tl.load")
        if unwrap(boundary_check):
            raise SemanticError("tl.load: boundary_check works only with block pointers "
                                "(tl.make_block_ptr); use a mask for a tile of pointers")
        if padding_option:
            raise SemanticError("tl.load: padding_option works only with block pointers; "
                                "use `other` for a tile of pointers")
        elem = ptr.dtype.element_ty
        addrs, active = self._with_mask(ptr, mask, "tl.load")
        shape = addrs.shape
        if other is not None:
            other = convert(other, elem)
            shape = S.broadcast_shapes(shape, other.shape)
            addrs, active = np.broadcast_to(addrs, shape), np.broadcast_to(active, shape)
            result = np.array(np.broadcast_to(other.data, shape))
        else:
            result = np.zeros(shape, dtype=N.storage_dtype(elem))
        if active.any():
            result[active] = self._read("tl.load", addrs, active, elem)
        return Tensor(result, elem)

    def store(self, pointer, value, mask=None, boundary_check=(), cache_modifier="",
              eviction_policy=""):
        pointer = unwrap(pointer)
        if isinstance(pointer, BlockPointer):
            if mask is not None:
                raise SemanticError("tl.store: `mask` cannot be used with block pointers; "
                                    "use boundary_check")
            return self._store_block(pointer, value, boundary_check)
        ptr = self._pointer_operand(pointer, "tl.store")
        if unwrap(boundary_check):
            raise SemanticError("tl.store: boundary_check works only with block pointers "
                                "(tl.make_block_ptr); use a mask for a tile of pointers")
        elem = ptr.dtype.element_ty
        addrs, active = self._with_mask(ptr, mask, "tl.store")
        values = broadcast_to_shape(convert(value, elem), addrs.shape, "tl.store value")
        if active.any():
            self._write("tl.store", addrs, active, elem, values)

    # --- block pointers ----------------------------------------------------------------
    def make_block_ptr(self, base, shape, strides, offsets, block_shape, order):
        base = to_tensor(base, "tl.make_block_ptr base")
        if not (base.dtype.is_ptr() and base.is_scalar()):
            raise SemanticError(f"tl.make_block_ptr: base must be a scalar pointer, got "
                                f"{base.dtype} of shape {list(base.shape)}")
        shape = _int_list(shape, "tl.make_block_ptr shape")
        strides = _int_list(strides, "tl.make_block_ptr strides")
        offsets = [_wrap_i32(v) for v in _int_list(offsets, "tl.make_block_ptr offsets")]
        block_shape = _int_list(block_shape, "tl.make_block_ptr block_shape")
        order = _int_list(order, "tl.make_block_ptr order")
        n = len(block_shape)
        if not (len(shape) == len(strides) == len(offsets) == len(order) == n):
            raise SemanticError(f"tl.make_block_ptr: shape, strides, offsets, block_shape and "
                                f"order must have the same length, got {len(shape)}, "
                                f"{len(strides)}, {len(offsets)}, {n}, {len(order)}")
        for d in block_shape:
            if not S.is_power_of_two(d):
                raise SemanticError(f"tl.make_block_ptr: block_shape {block_shape} must contain "
                                    f"powers of two")
        if sorted(order) != list(range(n)):
            raise SemanticError(f"tl.make_block_ptr: order {order} is not a permutation of "
                                f"0..{n - 1}")
        return BlockPointer(int(base.data), base.dtype.element_ty, shape, strides, offsets,
                            block_shape, order)

    def advance(self, base, offsets):
        base = unwrap(base)
        if not isinstance(base, BlockPointer):
            raise SemanticError("tl.advance needs a block pointer made by tl.make_block_ptr")
        offsets = _int_list(offsets, "tl.advance offsets")
        if len(offsets) != len(base.offsets):
            raise SemanticError(f"tl.advance: {len(offsets)} offsets for a block pointer of "
                                f"rank {len(base.offsets)}")
        new = [_wrap_i32(a + b) for a, b in zip(base.offsets, offsets)]
        return BlockPointer(base.base, base.element_ty, base.tensor_shape, base.strides, new,
                            base.block_shape, base.order)

    def _load_block(self, bp: BlockPointer, boundary_check, padding_option):
        elem = bp.element_ty
        if padding_option not in ("", "zero", "nan"):
            raise SemanticError(f"tl.load: padding_option must be '', 'zero' or 'nan', got "
                                f"{padding_option!r}")
        if padding_option == "nan" and not elem.is_floating():
            raise SemanticError(f"tl.load: padding_option 'nan' needs a floating-point element "
                                f"type, got {elem}")
        addrs, active = bp.materialize(unwrap(boundary_check) or ())
        fill = np.nan if padding_option == "nan" else 0
        result = np.full(addrs.shape, fill, dtype=N.storage_dtype(elem))
        if active.any():
            result[active] = self._read("tl.load", addrs, active, elem)
        return Tensor(result, elem)

    def _store_block(self, bp: BlockPointer, value, boundary_check):
        elem = bp.element_ty
        addrs, active = bp.materialize(unwrap(boundary_check) or ())
        values = broadcast_to_shape(convert(value, elem), addrs.shape, "tl.store value")
        if active.any():
            self._write("tl.store", addrs, active, elem, values)

    # --- atomics -------------------------------------------------------------------------
    def _atomic(self, kind: str, pointer, val, mask, sem, scope, cmp=None):
        op = f"tl.atomic_{kind}"
        _check_sem_scope(op, sem, scope)
        ptr = self._pointer_operand(pointer, op)
        elem = ptr.dtype.element_ty
        if kind in ("and", "or", "xor") and not elem.is_int():
            raise SemanticError(f"{op} needs an integer element type, got {elem}")
        addrs, active = self._with_mask(ptr, mask, op)
        vals = broadcast_to_shape(convert(val, elem), addrs.shape, f"{op} value")
        cmps = None if cmp is None else broadcast_to_shape(convert(cmp, elem), addrs.shape,
                                                           f"{op} cmp")
        old = np.zeros(addrs.shape, dtype=N.storage_dtype(elem))
        lanes = np.flatnonzero(active)
        if lanes.size:
            flat_addrs = addrs.reshape(-1)[lanes]
            # Check every lane before the first write, so a fault leaves memory untouched.
            self.memory.resolve(op, flat_addrs, lanes, addrs.shape, N.memory_dtype(elem).itemsize,
                                writing=True)
            v = vals.reshape(-1)[lanes]
            c = None if cmps is None else cmps.reshape(-1)[lanes]
            old.reshape(-1)[lanes] = self._read_modify_write(op, kind, elem, flat_addrs, lanes,
                                                             addrs.shape, v, c)
        return Tensor(old, elem)

    def _read_modify_write(self, op, kind, elem, addrs, lanes, shape, vals, cmps):
        """Applies the update lane by lane in lane order: lanes hitting the same
        address see each other's results (as if the programs' atomics were serial)."""
        n = addrs.size
        order = np.argsort(addrs, kind="stable")
        sorted_addrs = addrs[order]
        first = np.r_[True, sorted_addrs[1:] != sorted_addrs[:-1]]
        group_start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n) - group_start
        olds = np.empty(n, dtype=N.storage_dtype(elem))
        mdt = N.memory_dtype(elem)
        for r in range(int(rank.max()) + 1):
            sel = np.flatnonzero(rank == r)
            cur = N.from_memory(self.memory.read(op, addrs[sel], lanes[sel], shape, mdt), elem)
            new = _rmw_update(kind, elem, cur, vals[sel], None if cmps is None else cmps[sel])
            self.memory.write(op, addrs[sel], lanes[sel], shape, N.to_memory(new, elem))
            olds[sel] = cur
        return olds

    def atomic_add(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("add", pointer, val, mask, sem, scope)

    def atomic_max(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("max", pointer, val, mask, sem, scope)

    def atomic_min(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("min", pointer, val, mask, sem, scope)

    def atomic_and(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("and", pointer, val, mask, sem, scope)

    def atomic_or(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("or", pointer, val, mask, sem, scope)

    def atomic_xor(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("xor", pointer, val, mask, sem, scope)

    def atomic_xchg(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("xchg", pointer, val, mask, sem, scope)

    def atomic_cas(self, pointer, cmp, val, sem=None, scope=None):
        return self._atomic("cas", pointer, val, None, sem, scope, cmp=cmp)


def _check_sem_scope(op, sem, scope):
    sem, scope = unwrap(sem), unwrap(scope)
    if sem not in (None, "acquire", "release", "acq_rel", "relaxed"):
        raise SemanticError(f"{op}: sem must be one of 'acquire', 'release', 'acq_rel', "
                            f"'relaxed', got {sem!r}")
    if scope not in (None, "gpu", "cta", "sys"):
        raise SemanticError(f"{op}: scope must be one of 'gpu', 'cta', 'sys', got {scope!r}")


def _rmw_update(kind, elem, cur, val, cmp):
    from .values import _int_compute
    if kind == "add":
        if elem.is_floating():
            return N.float_op(np.add, elem, cur, val)
        return _int_compute("add", cur, val, elem)
    if kind in ("max", "min"):
        if elem.is_floating():       # IEEE maxNum/minNum, like tl.maximum/tl.minimum
            return (np.fmax if kind == "max" else np.fmin)(cur, val)
        return (np.maximum if kind == "max" else np.minimum)(cur, val)
    if kind == "and":
        return cur & val
    if kind == "or":
        return cur | val
    if kind == "xor":
        return cur ^ val
    if kind == "xchg":
        return val
    if kind == "cas":                # compares bit patterns, like cmpxchg
        same = N.raw_bits(cur, elem) == N.raw_bits(cmp, elem)
        return np.where(same, val, cur)
    raise AssertionError(kind)
