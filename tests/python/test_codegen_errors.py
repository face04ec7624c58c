"""Tests of the Python -> Tile IR code generator's user errors: for each wrong kernel, the
message, the file:line:col it names and the caret under the source line (the IR it prints
for correct kernels: test_codegen_ir.py).

Run: cd /work/main && PYTHONPATH=frontend python -m pytest tests/python/test_codegen_errors.py -q
"""
import inspect
import re

import pytest

import tessera.language as tl
from tessera.errors import InternalCompilerError

from codegen_ir_helpers import F32, I32, P, assert_error, col_of, compile_error, ir, line_of


# =========================================================================== errors

def e_arange(x):
    offs = tl.arange(0, 100)


def test_error_arange_not_power_of_two():
    err = compile_error(e_arange, x=F32)
    assert_error(err, e_arange, "tl.arange(0, 100)", "arange's range must be a power of 2, got 100")
    assert err.kernel_name == "e_arange"
    assert "in kernel e_arange" in str(err)


def e_arange_runtime(x, n):
    offs = tl.arange(0, n)


def test_error_arange_runtime_bound():
    err = compile_error(e_arange_runtime, x=F32, n=tl.int32)
    assert_error(err, e_arange_runtime, "tl.arange(0, n)", "compile-time integers")


def e_full_shape(x):
    z = tl.zeros((3, 4), dtype=tl.float32)


def test_error_full_shape():
    err = compile_error(e_full_shape, x=F32)
    assert_error(err, e_full_shape, "tl.zeros((3, 4)", "power-of-two dimensions, got (3, 4)")


def e_undefined(x):
    y = x + undefined_name  # noqa: F821


def test_error_undefined_name():
    err = compile_error(e_undefined, x=F32)
    assert_error(err, e_undefined, "undefined_name", "name 'undefined_name' is not defined", "undefined_name")


def e_shapes(x):
    a = tl.arange(0, 16)
    b = tl.arange(0, 32)
    c = a + b


def test_error_broadcast_shapes():
    err = compile_error(e_shapes, x=F32)
    assert_error(err, e_shapes, "c = a + b", "(16,) and (32,)", "a + b")


def e_bitwise_float(x):
    v = tl.load(x)
    w = v & 1


def test_error_bitwise_on_float():
    err = compile_error(e_bitwise_float, x=F32)
    assert_error(err, e_bitwise_float, "w = v & 1", "operator & needs integer operands", "v & 1")


def e_ptr_mul(x):
    y = x * 2


def test_error_pointer_times_int():
    err = compile_error(e_ptr_mul, x=F32)
    assert_error(err, e_ptr_mul, "y = x * 2", "operator * is not defined for ptr<f32>", "x * 2")


def e_load_non_pointer(x, n):
    v = tl.load(n)


def test_error_load_from_non_pointer():
    err = compile_error(e_load_non_pointer, x=F32, n=tl.int32)
    assert_error(err, e_load_non_pointer, "tl.load(n)", "tl.load expects a pointer", "tl.load")
    assert "got i32" in err.message


def e_store_shape(x):
    tl.store(x + tl.arange(0, 16), tl.zeros((32,), dtype=tl.float32))


def test_error_store_of_incompatible_shape():
    err = compile_error(e_store_shape, x=F32)
    assert_error(err, e_store_shape, "tl.store(x", "the stored value of shape (32,) does not match "
                 "the pointer shape (16,)", "tl.store")


def e_loop_type(x, n):
    acc = tl.zeros((16,), dtype=tl.float32)
    for i in range(n):
        acc = acc.to(tl.float16)


def test_error_loop_carried_type_change():
    err = compile_error(e_loop_type, x=F32, n=tl.int32)
    assert_error(err, e_loop_type, "for i in range(n)", "loop-carried variable 'acc' changes type", "for")
    assert "tile<16xf32>" in err.message and "tile<16xf16>" in err.message
    assert f"assigned at line {line_of(e_loop_type, 'acc = acc.to')}" in err.message


def e_while_type(x, n):
    i = 0
    while i < n:
        i = i + 0.5


def test_error_while_carried_type_change():
    err = compile_error(e_while_type, x=F32, n=tl.int32)
    assert_error(err, e_while_type, "while i < n", "'i' changes type in the while loop", "while")
    assert "i32" in err.message and "f32" in err.message


def e_if_one_branch(x, c):
    if c > 0:
        y = 1.0
    tl.store(x, y)


def test_error_variable_defined_in_one_branch():
    err = compile_error(e_if_one_branch, x=F32, c=tl.int32)
    assert_error(err, e_if_one_branch, "tl.store(x, y)", "'y' is assigned only in the then-branch", "y)")


def e_if_types(x, c):
    y = 1.0
    if c > 0:
        y = tl.zeros((4,), dtype=tl.float32)
    tl.store(x, y)


def test_error_if_branch_types_differ():
    err = compile_error(e_if_types, x=F32, c=tl.int32)
    assert_error(err, e_if_types, "if c > 0", "variable 'y' has type tile<4xf32> in the then-branch "
                 "but constant 1.0 in the else-branch", "if")


def e_loop_local(x, n):
    for i in range(n):
        z = i
    tl.store(x, z)


def test_error_loop_local_used_after_loop():
    err = compile_error(e_loop_local, x=I32, n=tl.int32)
    assert_error(err, e_loop_local, "tl.store(x, z)", "'z' is first assigned inside the loop", "z)")


def e_break(x, n):
    for i in range(n):
        break


def e_continue(x, n):
    while n > 0:
        continue


def e_with(x):
    with open("f"):
        pass


def e_lambda(x):
    f = lambda y: y


def e_listcomp(x):
    f = [i for i in range(3)]


def e_raise(x):
    raise ValueError("no")


def e_subscript_assign(x):
    v = tl.zeros((4,), dtype=tl.float32)
    v[0] = 1.0


@pytest.mark.parametrize("fn, snippet, message, token", [
    (e_break, "        break", "'break' is not supported", "break"),
    (e_continue, "        continue", "'continue' is not supported", "continue"),
    (e_with, "with open", "'with' is not supported", "with"),
    (e_lambda, "f = lambda", "lambda expressions", "lambda y: y"),
    (e_listcomp, "for i in range(3)", "list comprehensions", "[i for i in range(3)]"),
    (e_raise, "raise ValueError", "'raise'", None),
    (e_subscript_assign, "v[0] = 1.0", "assignment to a subscript", "v[0]"),
])
def test_error_unsupported_syntax(fn, snippet, message, token):
    err = compile_error(fn, x=F32, n=tl.int32) if "n" in inspect.signature(fn).parameters else compile_error(fn, x=F32)
    assert_error(err, fn, snippet, "unsupported syntax" if "subscript" not in message else message, token)
    assert message in err.message


def _bad_helper(v):
    return v | 1.5


def e_in_helper(x):
    v = tl.load(x)
    w = _bad_helper(v)


def test_error_inside_helper_points_into_helper_and_call_site():
    err = compile_error(e_in_helper, x=I32)
    assert "operator | needs integer operands" in err.message
    assert err.lineno == line_of(_bad_helper, "return v | 1.5")
    assert err.col_offset == col_of(_bad_helper, "return v | 1.5", "v | 1.5")
    assert err.function_name == "_bad_helper"
    assert err.kernel_name == "e_in_helper"
    assert len(err.call_stack) == 1
    site = err.call_stack[0]
    assert site.lineno == line_of(e_in_helper, "_bad_helper(v)")
    assert site.col_offset == col_of(e_in_helper, "_bad_helper(v)")
    text = str(err)
    assert "in function _bad_helper (inlined into kernel e_in_helper)" in text
    assert "called from:" in text and f"line {site.lineno}, col {site.col_offset + 1}, in kernel e_in_helper" in text


def e_builtin_args(x):
    tl.load()


def e_builtin_kwarg(x):
    tl.store(x, 1.0, maks=None)


def test_error_wrong_builtin_arguments():
    err = compile_error(e_builtin_args, x=F32)
    assert_error(err, e_builtin_args, "tl.load()", "tl.load(): missing a required argument: 'pointer'", "tl.load()")
    err = compile_error(e_builtin_kwarg, x=F32)
    assert_error(err, e_builtin_kwarg, "maks=None", "tl.store(): got an unexpected keyword argument 'maks'", "tl.store")


def e_dot_shapes(x):
    a = tl.zeros((16, 32), dtype=tl.float32)
    b = tl.zeros((16, 32), dtype=tl.float32)
    c = tl.dot(a, b)


def test_error_dot_inner_dims():
    err = compile_error(e_dot_shapes, x=F32)
    assert_error(err, e_dot_shapes, "tl.dot(a, b)", "the inner dimensions do not match", "tl.dot")


def e_static_assert(x, N: tl.constexpr):
    tl.static_assert(N % 2 == 0, "N must be even")


def test_error_static_assert():
    err = compile_error(e_static_assert, {"N": 3}, x=F32)
    assert_error(err, e_static_assert, "tl.static_assert", "static_assert failed: N must be even", "tl.static_assert")


def e_assert_const(x, N: tl.constexpr):
    assert N > 4, "N too small"


def test_error_constexpr_assert_statement():
    err = compile_error(e_assert_const, {"N": 3}, x=F32)
    assert_error(err, e_assert_const, "assert N > 4", "static assertion failed: N too small", "assert")


def e_if_tile(x):
    m = tl.arange(0, 4) > 2
    if m:
        pass


def test_error_if_on_tile():
    err = compile_error(e_if_tile, x=F32)
    assert_error(err, e_if_tile, "if m:", "must be a scalar, but it is a tile (tile<4xi1>)", "m:")


def e_return_in_loop(x, n):
    for i in range(n):
        return


def test_error_return_in_loop():
    err = compile_error(e_return_in_loop, x=F32, n=tl.int32)
    assert_error(err, e_return_in_loop, "        return", "'return' inside a loop is not supported", "return")


def e_pow(x):
    v = tl.load(x)
    w = v ** 2


def test_error_pow_on_tensor():
    err = compile_error(e_pow, x=F32)
    assert_error(err, e_pow, "v ** 2", "operator ** is only supported between compile-time constants", "v ** 2")


def e_mask_type(x):
    v = tl.load(x + tl.arange(0, 4), mask=tl.arange(0, 4))


def test_error_mask_not_bool():
    err = compile_error(e_mask_type, x=F32)
    assert_error(err, e_mask_type, "mask=", "mask must have type i1", "tl.load")


def e_bitcast_size(x):
    v = tl.load(x)
    w = v.to(tl.int16, bitcast=True)


def test_error_bitcast_size():
    err = compile_error(e_bitcast_size, x=F32)
    assert_error(err, e_bitcast_size, "bitcast=True", "cannot bitcast f32 (32 bits) to i16 (16 bits)", "v.to")


def e_unpack_tensor(x):
    a, b = tl.arange(0, 2)


def test_error_unpack_tensor():
    err = compile_error(e_unpack_tensor, x=F32)
    assert_error(err, e_unpack_tensor, "a, b =", "cannot unpack a tensor (tile<2xi32>)", "a, b")


def e_constexpr_div_zero(x, N: tl.constexpr):
    y = N // 0


def test_error_compile_time_exception():
    err = compile_error(e_constexpr_div_zero, {"N": 3}, x=F32)
    assert_error(err, e_constexpr_div_zero, "N // 0", "compile-time evaluation of N // 0 failed: ZeroDivisionError", "N // 0")


def e_unsigned_negative(x):
    v = tl.load(x)
    w = v + (-1)


def test_error_unsigned_with_negative_constant():
    err = compile_error(e_unsigned_negative, x=P(tl.uint32))
    assert_error(err, e_unsigned_negative, "v + (-1)", "unsigned type u32 with the negative constant -1", "v + (-1)")


def e_program_id_axis(x):
    p = tl.program_id(3)


def test_error_program_id_axis():
    err = compile_error(e_program_id_axis, x=F32)
    assert_error(err, e_program_id_axis, "tl.program_id(3)", "axis must be 0, 1 or 2, got 3", "tl.program_id")


def e_kernel_returns_value(x):
    return 1


def test_error_kernel_returns_value():
    err = compile_error(e_kernel_returns_value, x=F32)
    assert "a kernel cannot return a value" in err.message


def e_tensor_attr(x):
    v = tl.arange(0, 4)
    w = v.foo


def test_error_unknown_tensor_attribute():
    err = compile_error(e_tensor_attr, x=F32)
    assert_error(err, e_tensor_attr, "v.foo", "has no attribute 'foo'", "v.foo")


def e_module_attr(x):
    v = tl.not_a_builtin(x)


def test_error_unknown_module_attribute():
    err = compile_error(e_module_attr, x=F32)
    assert_error(err, e_module_attr, "tl.not_a_builtin", "has no attribute 'not_a_builtin'", "tl.not_a_builtin")


def e_index(x):
    v = tl.arange(0, 4)
    w = v[1]


def test_error_integer_tensor_index():
    err = compile_error(e_index, x=F32)
    assert_error(err, e_index, "v[1]", "unsupported tensor index 1", "v[1]")


def e_chained(x):
    v = tl.arange(0, 4)
    w = 0 < v < 3


def test_error_chained_comparison():
    err = compile_error(e_chained, x=F32)
    assert_error(err, e_chained, "0 < v < 3", "chained comparisons", "0 < v < 3")


def e_int_of_tensor(x):
    v = tl.load(x)
    w = int(v)


def test_error_int_of_tensor():
    err = compile_error(e_int_of_tensor, x=F32)
    assert_error(err, e_int_of_tensor, "int(v)", "int() of a tensor is not supported", "int(v)")


def _no_return_on_some_paths(x, c):
    if c > 0:
        return x


def e_partial_return(x, c):
    v = _no_return_on_some_paths(tl.load(x), c)


def test_error_helper_returns_on_some_paths():
    err = compile_error(e_partial_return, x=F32, c=tl.int32)
    assert_error(err, e_partial_return, "_no_return_on_some_paths(", "returns a value on some paths",
                 "_no_return_on_some_paths(")


def e_reshape(x):
    v = tl.reshape(tl.arange(0, 8), (4, 4))


def test_error_reshape_count():
    err = compile_error(e_reshape, x=F32)
    assert_error(err, e_reshape, "tl.reshape", "cannot reshape tile<8xi32> (8 elements) to shape (4, 4)", "tl.reshape")


def e_missing_param(x, y):
    pass


def test_error_missing_parameter():
    err = compile_error(e_missing_param, x=F32)
    assert "no type or value was given for kernel parameter 'y'" in err.message
    assert err.lineno == line_of(e_missing_param, "def e_missing_param")


def test_compilation_error_is_picklable():
    import pickle
    err = compile_error(e_arange, x=F32)
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and again.lineno == err.lineno


def test_internal_error_says_it_is_a_bug():
    e = InternalCompilerError("boom", "k", "/f.py", 3, 0, "x = 1")
    assert "this is a tessera bug" in str(e).lower()


# =========================================================================== more calls and errors

def _plain_cdiv(a, b):
    return (a + b - 1) // b


def _make_zeros(n):
    return tl.zeros((n,), dtype=tl.float32)


def k_plain_functions(out, n, N: tl.constexpr):
    blocks = _plain_cdiv(n, 16)           # tensor argument: inlined
    B: tl.constexpr = _plain_cdiv(N, 16)  # constexpr arguments: run as Python
    z = _make_zeros(B * 4)                # uses tl builtins: inlined although args are constexpr
    tl.store(out + blocks + tl.arange(0, B * 4), z)


def test_plain_python_functions():
    text = ir(k_plain_functions, {"N": 64}, out=F32, n=tl.int32)
    assert re.search(r"div %\d+, %\d+ : i32", text)  # (n + 16 - 1) // 16 on a tensor
    assert "const {value = 0.0} : tile<16xf32>" in text


def e_atomic_type(x):
    tl.atomic_add(x, 1)


def test_error_atomic_unsupported_type():
    err = compile_error(e_atomic_type, x=P(tl.int8))
    assert_error(err, e_atomic_type, "tl.atomic_add", "does not support elements of type i8", "tl.atomic_add")


def e_other_without_mask(x):
    v = tl.load(x, other=0.0)


def test_error_other_without_mask():
    err = compile_error(e_other_without_mask, x=F32)
    assert_error(err, e_other_without_mask, "other=0.0", "other= needs a mask=", "tl.load")


def e_dot_types(x):
    a = tl.zeros((16, 16), dtype=tl.float32)
    b = tl.zeros((16, 16), dtype=tl.float16)
    c = tl.dot(a, b)


def test_error_dot_operand_types():
    err = compile_error(e_dot_types, x=F32)
    assert_error(err, e_dot_types, "tl.dot(a, b)", "tl.dot needs both operands of the same type", "tl.dot")


def e_reduce_axis(x):
    s = tl.sum(tl.arange(0, 4), axis=2)


def test_error_reduce_axis():
    err = compile_error(e_reduce_axis, x=F32)
    assert_error(err, e_reduce_axis, "tl.sum", "axis 2 is out of range for a tile of rank 1", "tl.sum")


def e_block_ptr_rank(x, n):
    p = tl.make_block_ptr(x, (n, n), (n, 1), (0, 0), (16,), (0,))


def test_error_block_pointer_lengths():
    err = compile_error(e_block_ptr_rank, x=F32, n=tl.int32)
    assert_error(err, e_block_ptr_rank, "tl.make_block_ptr", "block_shape has 1 entries but shape has 2",
                 "tl.make_block_ptr")


def e_store_tile_scalar_ptr(x):
    tl.store(x, tl.arange(0, 4))


def test_error_store_tile_through_scalar_pointer():
    err = compile_error(e_store_tile_scalar_ptr, x=I32)
    assert_error(err, e_store_tile_scalar_ptr, "tl.store", "is a tile (tile<4xi32>) but the pointer is a scalar",
                 "tl.store")


def e_not_callable(x, N: tl.constexpr):
    y = N(3)


def test_error_not_callable():
    err = compile_error(e_not_callable, {"N": 3}, x=F32)
    assert_error(err, e_not_callable, "N(3)", "constant 3 is not callable", "N(3)")


def e_ternary_tile(x):
    m = tl.arange(0, 4) > 1
    y = 1.0 if m else 2.0


def test_error_ternary_on_tile():
    err = compile_error(e_ternary_tile, x=F32)
    assert_error(err, e_ternary_tile, "1.0 if m", "use tl.where", "m else")


def _deep(v):
    return _deeper(v)


def _deeper(v):
    return tl.arange(0, 3) + v


def e_two_levels(x):
    y = _deep(1)


def test_error_two_levels_of_helpers():
    err = compile_error(e_two_levels, x=F32)
    assert err.function_name == "_deeper"
    assert err.lineno == line_of(_deeper, "tl.arange(0, 3)")
    assert [s.function_name for s in err.call_stack] == ["e_two_levels", "_deep"]
    assert [s.lineno for s in err.call_stack] == [line_of(e_two_levels, "_deep(1)"), line_of(_deep, "_deeper(v)")]
    lines = str(err).splitlines()
    where = [ln.split(" in ", 1)[1] for ln in lines if ln.startswith("  File")]
    assert where == ["function _deeper (inlined into kernel e_two_levels)", "function _deep",
                     "kernel e_two_levels"]


def e_recursive(x):
    e_recursive(x)


def test_error_recursion():
    err = compile_error(e_recursive, x=F32)
    assert "recursive call of e_recursive() is not supported" in err.message


def e_static_while_runtime(x, n):
    i = 0
    while i < 4:
        i = i + n


def test_error_compile_time_while_becoming_runtime():
    err = compile_error(e_static_while_runtime, x=F32, n=tl.int32)
    assert_error(err, e_static_while_runtime, "while i < 4", "condition became i1 after 1 iteration", "i < 4")
