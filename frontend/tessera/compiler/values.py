"""What kernel variables hold while the code generator runs.

A variable holds either an SSA value (`Value`: a scalar or a tile with a static shape),
a block pointer (`BlockPointer`, a Python-side struct of SSA values), a tuple of those,
or a plain Python object (a compile-time constant: int, float, bool, None, str, dtype,
function, module, ...). Python numbers are "weak": they take the type of the tensor
they meet (semantics.py).
"""
from __future__ import annotations

from ..language import core
from ..language import dtypes as D
from .ir_builder import IRType, IRValue, type_str


class Value(core.tensor):
    """An SSA value of Tile IR seen from the code generator: a scalar (shape ()) or a
    tile. Immutable."""

    __slots__ = ("handle",)

    def __init__(self, handle: IRValue):
        self.handle = handle

    @property
    def dtype(self) -> D.dtype:
        return self.handle.type.dtype

    @property
    def shape(self) -> tuple:
        return self.handle.type.shape

    @property
    def type(self) -> IRType:
        return self.handle.type

    @property
    def is_tile(self) -> bool:
        return bool(self.handle.type.shape)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def type_str(self) -> str:
        return type_str(self.dtype, self.shape)

    def __repr__(self):
        return f"<tensor {self.type_str()}>"

    # A tensor used as a Python bool inside the compiler is a bug in the compiler or a
    # constexpr that is not one: make it loud.
    def __bool__(self):
        raise TypeError("a tensor has no compile-time truth value")


class ShapeTuple(tuple):
    """`x.shape`: a tuple of ints that also concatenates with lists (Triton's shape is a
    list, so kernels write `x.shape[:-1] + [2]`)."""

    def __add__(self, other):
        return ShapeTuple(tuple(self) + tuple(other))

    def __radd__(self, other):
        return ShapeTuple(tuple(other) + tuple(self))

    def __getitem__(self, item):
        r = tuple.__getitem__(self, item)
        return ShapeTuple(r) if isinstance(item, slice) else r


class TileTypeInfo:
    """`x.type` of a tile (Triton's block_type): element_ty, scalar, shape."""

    def __init__(self, dtype, shape):
        self.element_ty = dtype
        self.scalar = dtype
        self.shape = ShapeTuple(shape)

    def is_block(self):
        return True

    def get_block_shapes(self):
        return self.shape

    def __eq__(self, other):
        return (isinstance(other, TileTypeInfo) and self.element_ty == other.element_ty
                and self.shape == other.shape)

    def __hash__(self):
        return hash((self.element_ty, tuple(self.shape)))

    def __repr__(self):
        return type_str(self.element_ty, tuple(self.shape))


class BlockPointer(core.tensor):
    """tl.make_block_ptr(...): a pointer to a block_shape window of a strided 2-D (or N-D)
    array. Loads and stores through it expand into a tile of pointers plus a mask."""

    def __init__(self, base: Value, shape, strides, offsets, block_shape, order):
        self.base = base                      # scalar ptr<T>
        self.shape = list(shape)              # scalar i64 Values
        self.strides = list(strides)          # scalar i64 Values
        self.offsets = list(offsets)          # scalar i32 Values
        self.block_shape = tuple(block_shape)  # ints
        self.order = tuple(order)             # ints

    @property
    def dtype(self):
        return self.base.dtype

    def leaves(self):
        return [self.base, *self.shape, *self.strides, *self.offsets]

    def rebuild(self, leaves):
        n = len(self.block_shape)
        return BlockPointer(leaves[0], leaves[1:1 + n], leaves[1 + n:1 + 2 * n],
                            leaves[1 + 2 * n:1 + 3 * n], self.block_shape, self.order)

    def type_str(self):
        return f"block pointer to {type_str(self.base.dtype.element_ty, self.block_shape)}"

    def __repr__(self):
        return f"<{self.type_str()}>"


class BoundMethod:
    """`x.sum` before it is called: a tensor method bound to its tensor."""

    def __init__(self, receiver, builtin_name):
        self.receiver = receiver
        self.builtin_name = builtin_name


def is_runtime(x) -> bool:
    """True for things that live in the IR (values, block pointers, tuples holding them)."""
    if isinstance(x, (Value, BlockPointer)):
        return True
    if isinstance(x, (tuple, list)):
        return any(is_runtime(e) for e in x)
    return False


def is_number(x) -> bool:
    return isinstance(x, (bool, int, float))


def describe(x) -> str:
    """A short description of a kernel value for error messages."""
    if isinstance(x, Value):
        return x.type_str()
    if isinstance(x, BlockPointer):
        return x.type_str()
    if isinstance(x, tuple):
        return "(" + ", ".join(describe(e) for e in x) + ("," if len(x) == 1 else "") + ")"
    if isinstance(x, D.dtype):
        return f"dtype {x.ir}"
    if x is None:
        return "None"
    if is_number(x) or isinstance(x, str):
        return f"constant {x!r}"
    return f"{type(x).__name__} {x!r}"
