"""The builtins of tessera.language: names and signatures mirror triton.language.

A builtin is never executed as Python inside a compiled kernel: the code generator
(tessera.compiler.codegen) recognises it by its `__tessera_builtin__` name and emits
Tile IR. Called from plain Python while the interpreter runs a kernel
(TESSERA_INTERPRET=1), it dispatches to the interpreter's numpy implementation of the
same name. Called anywhere else it raises.
"""
from __future__ import annotations

import functools
import inspect

from .dtypes import dtype

# The interpreter installs an object here whose attributes are the numpy
# implementations, one per builtin name.
_interpreter_impl = None


class constexpr:
    """A compile-time constant; as a parameter annotation (`BLOCK: tl.constexpr`) it
    makes the argument part of the specialization."""

    def __init__(self, value):
        self.value = value.value if isinstance(value, constexpr) else value

    def __repr__(self):
        return f"constexpr[{self.value!r}]"

    def __index__(self):
        return self.value

    def __bool__(self):
        return bool(self.value)

    def __eq__(self, other):
        return self.value == (other.value if isinstance(other, constexpr) else other)

    def __hash__(self):
        return hash(self.value)


class tensor:
    """Type of tile and scalar values inside kernels (for annotations and isinstance
    checks). The code generator and the interpreter each use their own subclass."""


def builtin(fn=None, *, namespace="tl"):
    """Declares a builtin: `@builtin`, or `@builtin(namespace="tl.extra.cuda")` for one
    reached under another module (the name its messages show). Builtin names are one
    namespace for the code generator and the interpreter, whatever the module."""
    if fn is None:
        return lambda f: builtin(f, namespace=namespace)
    name = fn.__name__.rstrip("_")
    qualified = f"{namespace}.{name}"

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        impl = _interpreter_impl
        if impl is not None:
            return getattr(impl, name)(*args, **kwargs)
        raise RuntimeError(
            f"{qualified} can only be used inside a @tessera.kernel function "
            f"(or with TESSERA_INTERPRET=1)")

    wrapper.__tessera_builtin__ = name
    wrapper.__tessera_qualified_name__ = qualified
    wrapper.__tessera_signature__ = inspect.signature(fn)
    return wrapper


def is_builtin(obj) -> bool:
    return getattr(obj, "__tessera_builtin__", None) is not None


# --- program and index space -------------------------------------------------
@builtin
def program_id(axis): ...
@builtin
def num_programs(axis): ...
@builtin
def arange(start, end): ...
@builtin
def full(shape, value, dtype): ...
@builtin
def zeros(shape, dtype): ...
@builtin
def zeros_like(input): ...
@builtin
def full_like(input, value, dtype=None): ...
@builtin
def cdiv(x, div): ...


# --- memory ------------------------------------------------------------------
@builtin
def load(pointer, mask=None, other=None, boundary_check=(), padding_option="",
         cache_modifier="", eviction_policy="", volatile=False): ...
@builtin
def store(pointer, value, mask=None, boundary_check=(), cache_modifier="",
          eviction_policy=""): ...
@builtin
def make_block_ptr(base, shape, strides, offsets, block_shape, order): ...
@builtin
def advance(base, offsets): ...
@builtin
def atomic_add(pointer, val, mask=None, sem=None, scope=None): ...
@builtin
def atomic_max(pointer, val, mask=None, sem=None, scope=None): ...
@builtin
def atomic_min(pointer, val, mask=None, sem=None, scope=None): ...
@builtin
def atomic_and(pointer, val, mask=None, sem=None, scope=None): ...
@builtin
def atomic_or(pointer, val, mask=None, sem=None, scope=None): ...
@builtin
def atomic_xor(pointer, val, mask=None, sem=None, scope=None): ...
@builtin
def atomic_xchg(pointer, val, mask=None, sem=None, scope=None): ...
@builtin
def atomic_cas(pointer, cmp, val, sem=None, scope=None): ...


# --- elementwise -------------------------------------------------------------
class PropagateNan:
    """`propagate_nan=` of tl.maximum/minimum/clamp (as triton.language.PropagateNan):
    ALL makes a NaN operand give NaN; NONE (the default) returns the other operand."""
    NONE = 0x0000
    ALL = 0xFFFF


@builtin
def where(condition, x, y): ...
@builtin
def maximum(x, y, propagate_nan=None): ...
@builtin
def minimum(x, y, propagate_nan=None): ...
@builtin
def clamp(x, min, max, propagate_nan=None): ...
@builtin
def exp(x): ...
@builtin
def exp2(x): ...
@builtin
def log(x): ...
@builtin
def log2(x): ...
@builtin
def sqrt(x): ...
@builtin
def sqrt_rn(x): ...
@builtin
def rsqrt(x): ...
@builtin
def sin(x): ...
@builtin
def cos(x): ...
@builtin
def abs(x): ...
@builtin
def floor(x): ...
@builtin
def ceil(x): ...
@builtin
def erf(x): ...
@builtin
def tanh(x): ...
@builtin
def sigmoid(x): ...
@builtin
def softmax(x, ieee_rounding=False): ...
@builtin
def fma(x, y, z): ...
@builtin
def umulhi(x, y): ...
@builtin
def fdiv(x, y, ieee_rounding=False): ...
@builtin
def div_rn(x, y): ...
@builtin
def cast(input, dtype, fp_downcast_rounding=None, bitcast=False): ...


# --- reductions and scans ----------------------------------------------------
@builtin
def reduce(input, axis, combine_fn, keep_dims=False): ...
@builtin
def sum(input, axis=None, keep_dims=False, dtype=None): ...
@builtin
def max(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False): ...
@builtin
def min(input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False): ...
@builtin
def argmax(input, axis, tie_break_left=True, keep_dims=False): ...
@builtin
def argmin(input, axis, tie_break_left=True, keep_dims=False): ...
@builtin
def xor_sum(input, axis=None, keep_dims=False): ...
@builtin
def associative_scan(input, axis, combine_fn, reverse=False): ...
@builtin
def cumsum(input, axis=0, reverse=False, dtype=None): ...
@builtin
def cumprod(input, axis=0, reverse=False): ...


# --- linear algebra and shapes -----------------------------------------------
@builtin
def dot(input, other, acc=None, input_precision=None, allow_tf32=None,
        max_num_imprecise_acc=None, out_dtype=None): ...
@builtin
def trans(input, *dims): ...
@builtin
def permute(input, *dims): ...
@builtin
def reshape(input, *shape, can_reorder=False): ...
@builtin
def view(input, *shape): ...
@builtin
def broadcast(input, other): ...
@builtin
def broadcast_to(input, *shape): ...
@builtin
def expand_dims(input, axis): ...
@builtin
def join(a, b): ...
@builtin
def split(a): ...
@builtin
def ravel(x): ...
@builtin
def gather(src, index, axis): ...



# --- programs of a thread-block cluster ------------------------------------------------------
@builtin
def cluster_reduce_scatter(x, cluster_size):
    """The sum of the f32 tile `x` over the `cluster_size` programs of this program's
    cluster, split along dim 0: this program gets rows rank * R .. (rank + 1) * R - 1
    (R = x.shape[0] / cluster_size, rank = program_id(0) % cluster_size).

    A kernel that calls it runs its programs in clusters of `cluster_size` (2, 4, 8 or 16)
    consecutive programs along grid axis 0, whose x extent must be a multiple of it: on
    sm_90 GPUs a thread-block cluster, the tiles exchanged through distributed shared
    memory; on the CPU and in the interpreter the cluster's programs run at the same time.
    The sum adds the programs' tiles in rank order, the same bits on every backend. Every
    program of a cluster must make the same calls (a cluster-wide barrier): a program that
    returns while the others wait is an error on the CPU and in the interpreter and
    undefined on the GPU."""

# --- triton.language.standard's shape functions, sort, topk and histogram -----------------
# (compiler/stdlib_shapes.py builds them from the shape ops above: exact on every dtype)
@builtin
def interleave(a, b): ...
@builtin
def cat(input, other, can_reorder=False): ...
@builtin
def flip(x, dim=None): ...
@builtin
def sort(x, dim=None, descending=False): ...
@builtin
def topk(x, k, dim=None): ...
@builtin
def histogram(input, num_bins, mask=None): ...
@builtin
def swizzle2d(i, j, size_i, size_j, size_g): ...


# --- random numbers (Philox 4x32-10, as triton.language.random) ----------------
@builtin
def randint(seed, offset, n_rounds=10): ...
@builtin
def randint4x(seed, offset, n_rounds=10): ...
@builtin
def rand(seed, offset, n_rounds=10): ...
@builtin
def randn(seed, offset, n_rounds=10): ...


# --- compile-time and debugging ------------------------------------------------
@builtin
def static_assert(cond, msg=""): ...
@builtin
def static_print(*values, sep=" ", end="\n", file=None, flush=False): ...
@builtin
def device_print(prefix, *args, hex=False): ...
@builtin
def device_assert(cond, msg=""): ...
@builtin
def multiple_of(input, values): ...
@builtin
def max_contiguous(input, values): ...
@builtin
def max_constancy(input, values): ...
@builtin
def assume(cond): ...
@builtin
def debug_barrier(): ...


# --- loops ---------------------------------------------------------------------
class range:
    """`for i in tl.range(lo, hi, step, num_stages=...)`: a loop the compiler keeps as
    a loop (options are hints). Only meaningful inside kernels."""

    def __init__(self, arg1, arg2=None, step=None, num_stages=None, loop_unroll_factor=None,
                 disallow_acc_multi_buffer=False, flatten=False, warp_specialize=False, ping_pong=False,
                 l2_prefetch=None):
        if arg2 is None:
            self.start, self.end = 0, arg1
        else:
            self.start, self.end = arg1, arg2
        self.step = 1 if step is None else step
        self.num_stages = num_stages
        self.loop_unroll_factor = loop_unroll_factor
        # A GPU schedule hint (sm_90a: a producer warp issues the loop's TMA copies;
        # docs/language.md); the CPU back end and the interpreter ignore it.
        self.warp_specialize = warp_specialize
        # With warp_specialize: two consumer warpgroups take the loop's tiles in turn
        # (one's epilogue under the other's MMA; docs/language.md). Also a hint.
        self.ping_pong = ping_pong
        # sm_90a, a TMA ring: its boxes asked of the L2 this many iterations before the
        # ring copies them (docs/language.md). A hint too.
        self.l2_prefetch = l2_prefetch

    def __iter__(self):  # the interpreter iterates it like Python's range
        import builtins
        impl = _interpreter_impl
        if impl is not None and not isinstance(self, static_range):
            # Runtime loops yield i32 scalars, as the compiled loop variable is.
            return iter(impl.range_values(self.start, self.end, self.step))
        v = lambda x: x.value if isinstance(x, constexpr) else int(x)
        return iter(builtins.range(v(self.start), v(self.end), v(self.step)))


class static_range(range):
    """`for i in tl.static_range(...)`: fully unrolled at compile time; bounds must be
    constexpr."""
