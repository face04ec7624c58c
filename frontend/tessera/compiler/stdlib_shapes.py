"""tl.interleave, cat, flip, sort, topk, histogram and swizzle2d (triton.language.standard's),
built at compile time from the shape ops (reshape, permute, join, split) and compares.

Every one moves elements without arithmetic on them (no multiply-by-0/1 masks), so they
are exact on every dtype, NaN and infinities included. The shape ops work on any rank:
a flip or a sort step reshapes one dimension into size-2 axes, swaps or compares the two
halves of one of them (split / join along the last axis), and reshapes back.
"""
from __future__ import annotations

import builtins as py

from ..language import dtypes as D
from ..language.semantics import SemanticError
from .builtins_impl import _const_int, _tensor, builtin_impl
from .values import Value, describe, is_number


def _axis(x, dim, what):
    rank = len(x.shape)
    if dim is None:
        return rank - 1
    d = _const_int(dim, f"{what} dim")
    if not -rank <= d < rank:
        raise SemanticError(f"{what}: dim {d} is out of range for {describe(x)}")
    return d % rank


def _move_last(sem, x, axis):
    """(x with `axis` moved last, the permutation that moves it back)."""
    rank = len(x.shape)
    order = [d for d in range(rank) if d != axis] + [axis]
    back = [order.index(d) for d in range(rank)]
    return sem.permute(x, order), back


def _halves(sem, x, axis):
    """The two halves of x's size-2 axis `axis` (each without that axis), and a function
    joining two such halves back into x's shape."""
    y, back = _move_last(sem, x, axis)
    lo, hi = sem.split(y)
    return lo, hi, lambda a, b: sem.permute(sem.join(a, b), back)


@builtin_impl("interleave")
def _interleave(cg, a, b):
    """[..., n] and [..., n] -> [..., 2n]: a[0], b[0], a[1], b[1], ..."""
    joined = cg.sem.join(_tensor(cg, a, "tl.interleave"), _tensor(cg, b, "tl.interleave"))
    if len(joined.shape) < 2:
        raise SemanticError(f"tl.interleave needs tiles, got {describe(a)} and {describe(b)}")
    return cg.sem.reshape(joined, joined.shape[:-2] + (2 * joined.shape[-2],))


@builtin_impl("cat")
def _cat(cg, input, other, can_reorder=False):
    """[n, ...] and [n, ...] -> [2n, ...], input's rows then other's, in order (Triton's
    may reorder elements and asks for can_reorder=True; this one never does)."""
    a, b = _tensor(cg, input, "tl.cat"), _tensor(cg, other, "tl.cat")
    if not a.shape or a.shape != b.shape or a.dtype != b.dtype:
        raise SemanticError(f"tl.cat needs two tiles of the same shape and type, got {describe(a)} and "
                            f"{describe(b)}")
    joined = cg.sem.join(a, b)                                     # [n, ..., 2]
    rank = len(joined.shape)
    first = cg.sem.permute(joined, [rank - 1] + list(range(rank - 1)))  # [2, n, ...]
    return cg.sem.reshape(first, (2 * a.shape[0],) + a.shape[1:])


def _split_bits(sem, x, axis):
    """x with dimension `axis` (size 2^k) reshaped into k size-2 axes, most significant
    bit first, at axis .. axis + k - 1; and k."""
    k = x.shape[axis].bit_length() - 1
    return sem.reshape(x, x.shape[:axis] + (2,) * k + x.shape[axis + 1:]), k


@builtin_impl("flip")
def _flip(cg, x, dim=None):
    """x reversed along `dim` (default the last): every bit of the index flipped, one
    size-2 axis at a time."""
    x = _tensor(cg, x, "tl.flip")
    if not x.shape:
        raise SemanticError(f"tl.flip needs a tile, got {describe(x)}")
    axis = _axis(x, dim, "tl.flip")
    y, k = _split_bits(cg.sem, x, axis)
    for bit in py.range(k):
        lo, hi, join_back = _halves(cg.sem, y, axis + bit)
        y = join_back(hi, lo)
    return cg.sem.reshape(y, x.shape)


def _greater(sem, a, b):
    """a > b, with NaN above every number (torch.sort and numpy.sort put NaN last)."""
    gt = sem.cmp("gt", a, b)
    if not a.dtype.is_floating():
        return gt
    a_nan, b_nan = sem.cmp("ne", a, a), sem.cmp("ne", b, b)
    return sem.logical_or(gt, sem.logical_and(a_nan, sem.logical_not(b_nan)))


@builtin_impl("sort")
def _sort(cg, x, dim=None, descending=False):
    """x sorted along `dim` (default the last) by a bitonic network: log2(n) merge stages,
    each a compare-and-swap of the pairs 2^j apart for j = stage-1 .. 0, the blocks of
    2^stage alternating direction until the last stage. NaN sorts last ascending, first
    descending (as torch.sort)."""
    sem = cg.sem
    x = _tensor(cg, x, "tl.sort")
    if not x.shape:
        raise SemanticError(f"tl.sort needs a tile, got {describe(x)}")
    if x.dtype.is_ptr():
        raise SemanticError(f"tl.sort cannot sort pointers, got {describe(x)}")
    if not isinstance(descending, (py.bool, py.int)):
        raise SemanticError(f"tl.sort descending must be a compile-time bool, got {describe(descending)}")
    axis = _axis(x, dim, "tl.sort")
    y, back = _move_last(sem, x, axis)
    n = y.shape[-1]
    k = n.bit_length() - 1
    lead = y.shape[:-1]
    for stage in py.range(1, k + 1):
        for j in py.range(stage - 1, -1, -1):
            step = 1 << j
            outer = n // (2 * step)
            pairs = sem.reshape(y, lead + (outer, 2, step))
            lo, hi, join_back = _halves(sem, pairs, len(lead) + 1)   # [..., outer, step] each
            # Blocks of 2^stage elements alternate direction (bit `stage` of the index,
            # bit stage - j - 1 of `outer`'s index); the last stage sorts one way.
            if stage < k:
                o = sem.arange(0, outer)
                flipped = sem.cmp("ne", sem.and_(sem.shr(o, stage - j - 1), 1), 0)
                if descending:
                    flipped = sem.logical_not(flipped)
                flipped = sem.expand_dims(flipped, 1)                # [outer, 1]
                swap = sem.where(flipped, _greater(sem, hi, lo), _greater(sem, lo, hi))
            else:
                swap = _greater(sem, hi, lo) if descending else _greater(sem, lo, hi)
            y = sem.reshape(join_back(sem.where(swap, hi, lo), sem.where(swap, lo, hi)), lead + (n,))
    return sem.permute(y, back)


@builtin_impl("topk")
def _topk(cg, x, k, dim=None):
    """The k largest of x along `dim` (default the last), largest first: a descending
    sort, then the leading half kept log2(n / k) times."""
    sem = cg.sem
    x = _tensor(cg, x, "tl.topk")
    if not x.shape:
        raise SemanticError(f"tl.topk needs a tile, got {describe(x)}")
    axis = _axis(x, dim, "tl.topk")
    k = _const_int(k, "tl.topk k")
    n = x.shape[axis]
    if k < 1 or k > n or k & (k - 1):
        raise SemanticError(f"tl.topk: k must be a power of two from 1 to {n} (the size of dim {axis}), got {k}")
    y, back = _move_last(sem, _sort(cg, x, axis, True), axis)
    while y.shape[-1] > k:
        m = y.shape[-1] // 2
        halves = sem.reshape(y, y.shape[:-1] + (2, m))
        y = _halves(sem, halves, len(halves.shape) - 2)[0]        # the leading (larger) half
    return sem.permute(y, back)


@builtin_impl("histogram")
def _histogram(cg, input, num_bins, mask=None):
    """int32 counts of the values 0 .. num_bins - 1 in a 1-D integer tile (other values,
    and elements where `mask` is false, are not counted): one compare per element and bin
    (an n x num_bins tile), summed over the elements."""
    sem = cg.sem
    x = _tensor(cg, input, "tl.histogram")
    bins = _const_int(num_bins, "tl.histogram num_bins")
    if len(x.shape) != 1 or not x.dtype.is_int() or x.dtype.is_bool():
        raise SemanticError(f"tl.histogram needs a 1-D integer tile, got {describe(x)}")
    hit = sem.cmp("eq", sem.expand_dims(x, 1), sem.expand_dims(sem.cast(sem.arange(0, bins), x.dtype), 0))
    if mask is not None:
        m = mask if isinstance(mask, Value) or not is_number(mask) else sem.to_value(mask)
        hit = sem.logical_and(hit, sem.expand_dims(sem.broadcast_to(sem.to_bool(m), x.shape, "the mask"), 1))
    ones = sem.cast(hit, D.int32)
    return sem.reduce([ones], 0, lambda lhs, rhs: [sem.add(lhs[0], rhs[0])], False, "tl.histogram")[0]


@builtin_impl("swizzle2d")
def _swizzle2d(cg, i, j, size_i, size_j, size_g):
    """Row-major (i, j) of a size_i x size_j grid -> the (i, j) that visits it in groups
    of size_g rows, column by column within a group (Triton's tile order for L2 reuse)."""
    if py.all(isinstance(v, py.int) for v in (i, j, size_i, size_j, size_g)):
        ij, size_gj = i * size_j + j, size_g * size_j
        off_i = ij // size_gj * size_g
        rows = py.min(size_i - off_i, size_g)
        return off_i + ij % size_gj % rows, ij % size_gj // rows
    sem = cg.sem
    ij = sem.add(sem.mul(i, size_j), j)
    size_gj = sem.mul(size_g, size_j)
    off_i = sem.mul(sem.floordiv(ij, size_gj), size_g)
    rows = sem.minimum(sem.sub(size_i, off_i), size_g)
    ij = sem.mod(ij, size_gj)
    return sem.add(off_i, sem.mod(ij, rows)), sem.floordiv(ij, rows)
