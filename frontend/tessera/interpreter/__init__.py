"""The Tessera interpreter (TESSERA_INTERPRET=1): runs a kernel op by op with numpy.

It is the test oracle of the compiled paths, so its semantics are the compiled
semantics: Triton's, with the promotion/broadcast rules of
tessera.language.semantics (used, not re-implemented) and the op semantics of
docs/tile_ir.md. How it works: run_grid installs a `Builtins` object as
tessera.language.core._interpreter_impl; every tl.* builtin then calls the method of
the same name. Kernel values are `Tensor`s (numpy array + Tessera type) whose Python
operators implement the language's operators.

Decisions where the documents leave room (the compiled paths must agree):
  * Programs run one at a time, x fastest, then y, then z. Atomics are therefore
    sequential; lanes of one atomic that hit the same address apply in lane order.
    Masked-off atomic lanes return 0. Float atomic max/min are IEEE maxNum/minNum;
    atomic_cas compares bit patterns.
  * Memory: the array arguments are the only memory. An access (of a lane whose mask
    is on) must lie inside the byte span of some array argument, else
    InterpreterError names the op, lane, address and nearest argument. Stores into
    read-only arrays are errors. When lanes of one store collide, the later lane wins.
  * Weak Python scalars that do not fit the computation type wrap modulo 2**bits
    (semantics.py has no range check; Triton raises there). Pointer offsets:
    signed types sign-extend, unsigned zero-extend.
  * Integer // and % truncate toward zero; x // 0 and x % 0 are 0; MIN // -1 wraps.
    Float // is an error (as Triton); float % is C fmod. Unary minus is `neg`
    (-0.0 for 0.0). Shifts by >= the bit width follow numpy (undefined in Tile IR).
  * Floats: f16 and bf16 arithmetic and math are computed in f32 and rounded to
    nearest even after every op; bf16 values are float32 arrays rounded to bf16.
    Integer inputs of math functions (exp, sqrt, floor, ...) become f32.
    fma rounds once (f16/bf16: an f32 fma, then rounded). Casts are exact:
    float->int truncates and saturates, NaN -> 0; int->float and float->float round
    once to nearest even ('rtz' supported for downcasts).
  * Reductions are pairwise trees along the axis (element i combined with i + n/2);
    scans are sequential. tl.sum keeps f16/bf16 as the accumulator type (Triton's
    _pick_sum_dtype widens only integers narrower than 32 bits: to i32, or u32 for
    unsigned and i1); pass dtype=tl.float32 for an f32 sum. tl.max/tl.min without
    indices widen types narrower than 32 bits to f32/i32 and bf16 to f32 (as
    Triton); float max/min ignore NaN (maxNum). argmax/argmin follow Triton's combine
    (ties go to the smaller index with tie_break_left=True). tl.cumsum/cumprod
    promote bf16 to f32. A combine_fn is called on whole tiles; if it branches on
    its inputs (`if a < b:`) it is re-run one element at a time.
  * tl.dot: f16/bf16/f32 inputs accumulate in f32, f64 in f64, i8 in i32 (wrapping);
    products and sums are computed in float64 and rounded once to the accumulator
    (plus acc), so float results match compiled code only up to summation order.
    input_precision defaults to "ieee"; "tf32" rounds f32 inputs to tf32 first.
    out_dtype=tl.float16 (f16 inputs) rounds the f32 result.
  * Random numbers: Philox 4x32 bit-exact with triton.language.random (see
    interpreter/random.py); randn agrees to a few ulp only (numpy's log/cos).
  * tl.device_assert is always checked (AssertionError with the message, the
    program id, the failing lane and the kernel source line). tl.device_print prints
    "(x, y, z) prefix value" per value, as Triton's interpreter. assume,
    multiple_of, max_contiguous, max_constancy, debug_barrier and tl.extra.cuda's
    gdc_wait / gdc_launch_dependents do nothing.
  * Loop variables of Python `range` in the kernel function are scalar tensors typed
    like the compiled induction variable (i32 for ordinary bounds), not weak ints
    (Builtins.range_values; helpers called by the kernel keep Python's range).
    tl.range/tl.static_range iterate Python ints (core.range.__iter__).
  * Arguments (run_grid): numpy arrays become pointers to their element [0, ...]
    (any strides, also negative; element type from the numpy dtype or `types`);
    int -> i32, i64 or u64 (Triton's specialization), float -> fp32, bool -> i1,
    numpy scalars keep their type, None stays None. torch tensors, CuPy /
    __cuda_array_interface__ / __dlpack__ arrays and tessera.Array are taken too
    (foreign_arrays.py): host ones as views of the same memory, GPU ones copied to the
    host before the grid and back after it, layout and aliasing kept (as Triton's
    interpreter does). Constexpr parameters are
    tl.constexpr values that also have Python's operators (constexprs.py).
  * Block pointers: padding_option "" (undefined in Triton) loads 0.
"""
from .errors import InterpreterError  # noqa: F401
from .grid import Builtins, run_grid  # noqa: F401
from .memory import BlockPointer  # noqa: F401
from .values import Tensor, TileTruthValueError  # noqa: F401

__all__ = ["run_grid", "Tensor", "InterpreterError", "Builtins", "BlockPointer",
           "TileTruthValueError"]
