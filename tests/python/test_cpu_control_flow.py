"""Compiled CPU path, control flow: for over range/tl.range/tl.static_range with
loop-carried tiles (also zero-trip, negative steps, nested), while loops, if/elif/else
on run-time scalars and on constexprs (dead branches not compiled), conditional
expressions, early returns, helper-function inlining and calling another kernel."""
import numpy as np
import pytest

import tessera
import tessera.language as tl
from cpu_helpers import grid_for, poisoned, run_compiled_and_interpreted, run_interpreted


# --- for loops -----------------------------------------------------------------------------------
@tessera.kernel
def row_sum_loop_kernel(x_ptr, out_ptr, M, N, BN: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BN,), tl.float32)
    for start in range(0, N, BN):                            # run-time bound, step BN
        cols = start + tl.arange(0, BN)
        acc += tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


@pytest.mark.parametrize("N", [0, 1, 17, 64, 1000])
def test_for_range_with_carried_tile(N):
    M = 5
    x = (np.arange(M * max(N, 1), dtype=np.float32) % 13).reshape(M, -1)[:, :N].copy()
    out = poisoned(M, np.float32)
    row_sum_loop_kernel[(M,)](x, out, M, N, BN=64)
    np.testing.assert_array_equal(out, x.sum(axis=1))       # N = 0: zero-trip loop keeps the zeros


@tessera.kernel
def loop_forms_kernel(out_ptr, lo, hi, STEP: tl.constexpr):
    # A Python range, tl.range (with hints) and a negative step; each records the loop
    # variables it saw as a polynomial fingerprint.
    h1 = 0
    for i in range(lo, hi, STEP):
        h1 = h1 * 31 + i + 1
    h2 = 0
    for i in tl.range(lo, hi, STEP, num_stages=2):
        h2 = h2 * 31 + i + 1
    h3 = 0
    for i in range(hi, lo, -STEP):
        h3 = h3 * 31 + i + 1
    n = 0
    for _ in tl.range(hi):
        n += 1
    tl.store(out_ptr + 0, h1)
    tl.store(out_ptr + 1, h2)
    tl.store(out_ptr + 2, h3)
    tl.store(out_ptr + 3, n)


def _fingerprint(values):
    h = 0
    for v in values:
        h = (h * 31 + v + 1) & 0xFFFFFFFF
    return np.array(h, np.uint32).view(np.int32)


@pytest.mark.parametrize("lo,hi,step", [(0, 10, 1), (3, 20, 4), (-5, 7, 3), (7, 7, 1), (9, 2, 2), (0, 100, 7)])
def test_for_range_forms_and_negative_steps(lo, hi, step):
    out = poisoned(4, np.int32)
    loop_forms_kernel[(1,)](out, lo, hi, STEP=step)
    np.testing.assert_array_equal(out, [_fingerprint(range(lo, hi, step)), _fingerprint(range(lo, hi, step)),
                                        _fingerprint(range(hi, lo, -step)), max(hi, 0)])


@tessera.kernel
def static_range_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr, K: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.int32)
    for k in tl.static_range(K):
        tl.static_assert(k < K)                              # k is a compile-time int
        acc += tl.load(x_ptr + k * BLOCK + offs) * (k + 1)
    for k in tl.static_range(1, K, 2):
        acc += k
    tl.store(out_ptr + offs, acc)


def test_static_range_unrolls_with_constexpr_index():
    K, B = 4, 16
    x = np.arange(K * B, dtype=np.int32).reshape(K, B)
    out = poisoned(B, np.int32)
    static_range_kernel[(1,)](x, out, BLOCK=B, K=K)
    want = sum(x[k] * (k + 1) for k in range(K)) + sum(range(1, K, 2))
    np.testing.assert_array_equal(out, want)


@tessera.kernel
def nested_loops_kernel(a_ptr, out_ptr, M, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    total = tl.zeros((BLOCK,), tl.int64)
    for i in range(M):
        row = tl.zeros((BLOCK,), tl.int64)
        for j in range(N):
            row += tl.load(a_ptr + (i * N + j) * BLOCK + offs).to(tl.int64) * (j + 1)
        total = total * 3 + row
    tl.store(out_ptr + offs, total)


def test_nested_loops_carry_tiles_of_both_levels():
    M, N, B = 3, 5, 8
    a = np.arange(M * N * B, dtype=np.int32).reshape(M, N, B)
    out = poisoned(B, np.int64)
    nested_loops_kernel[(1,)](a, out, M, N, BLOCK=B)
    total = np.zeros(B, np.int64)
    for i in range(M):
        total = total * 3 + sum(a[i, j].astype(np.int64) * (j + 1) for j in range(N))
    np.testing.assert_array_equal(out, total)


@tessera.kernel
def loop_carried_pointer_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    ptrs = x_ptr + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for _ in range(n):
        acc = acc * 0.5 + tl.load(ptrs)
        ptrs += BLOCK                                        # a pointer tile carried by the loop
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)


def test_loop_carried_pointer_tile():
    n, B = 6, 32
    x = np.arange(n * B, dtype=np.float32).reshape(n, B) / 7
    out = poisoned(B, np.float32)
    loop_carried_pointer_kernel[(1,)](x, out, n, BLOCK=B)
    acc = np.zeros(B, np.float32)
    for i in range(n):
        acc = acc * np.float32(0.5) + x[i]
    np.testing.assert_array_equal(out, acc)


# --- while loops ---------------------------------------------------------------------------------
@tessera.kernel
def collatz_kernel(x_ptr, out_ptr):
    pid = tl.program_id(0)
    v = tl.load(x_ptr + pid)
    steps = 0
    while v != 1:
        if v % 2 == 0:
            v = v // 2
        else:
            v = 3 * v + 1
        steps += 1
    tl.store(out_ptr + pid, steps)


def test_while_with_runtime_condition_and_branches():
    x = np.array([1, 2, 3, 6, 7, 27, 97, 871], np.int64)
    out = poisoned(x.size, np.int32)
    collatz_kernel[(x.size,)](x, out)

    def steps(v):
        s = 0
        while v != 1:
            v = v // 2 if v % 2 == 0 else 3 * v + 1
            s += 1
        return s
    np.testing.assert_array_equal(out, [steps(int(v)) for v in x])


@tessera.kernel
def while_tile_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    it = 0
    while tl.max(x, axis=0) > 1.0:                           # tile carried, reduced condition
        x = tl.where(x > 1.0, x * 0.5, x)
        it += 1
    tl.store(out_ptr + offs, x)
    tl.store(out_ptr + BLOCK, it.to(tl.float32))


def test_while_with_tile_state():
    x = np.array([0.5, 3.0, 100.0, 1.0, 7.0, 0.0, 64.0, 1.5], np.float32)
    out = poisoned(9, np.float32)
    while_tile_kernel[(1,)](x, out, BLOCK=8)
    want, it = x.copy(), 0
    while want.max() > 1:
        want = np.where(want > 1, want * 0.5, want)
        it += 1
    np.testing.assert_array_equal(out[:8], want)
    assert out[8] == it


@tessera.kernel
def static_while_kernel(out_ptr, N: tl.constexpr):
    k = 1
    while k < N:                                             # constexpr condition: unrolled
        k *= 2
    tl.static_assert(k >= N)
    tl.store(out_ptr, k)


def test_while_on_constexprs_runs_at_compile_time():
    out = poisoned(1, np.int32)
    static_while_kernel[(1,)](out, N=37)
    assert out[0] == 64


# --- if / elif / else ----------------------------------------------------------------------------
@tessera.kernel
def branches_kernel(out_ptr, t1, t2, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    v = tl.zeros((BLOCK,), tl.int32)
    if pid < t1:
        v = offs + 100
    elif pid < t2:
        v = offs * 2
        if pid % 2 == 0:
            v += 1
    else:
        v = -offs
    w = 7 if pid > 2 else 9                                  # conditional expression, run time
    ok = (pid >= 1) and not (pid == 4 or pid == 5)
    if ok:
        w += 1000
    tl.store(out_ptr + pid * BLOCK + offs, v * 10000 + w)


def test_if_elif_else_on_runtime_scalars():
    G, B = 8, 4
    out = poisoned((G, B), np.int32)
    branches_kernel[(G,)](out, 2, 5, BLOCK=B)
    offs = np.arange(B)
    for pid in range(G):
        if pid < 2:
            v = offs + 100
        elif pid < 5:
            v = offs * 2 + (1 if pid % 2 == 0 else 0)
        else:
            v = -offs
        w = (7 if pid > 2 else 9) + (1000 if (pid >= 1 and not (pid in (4, 5))) else 0)
        np.testing.assert_array_equal(out[pid], v * 10000 + w, err_msg=f"pid {pid}")


@tessera.kernel
def constexpr_branch_kernel(x_ptr, out_ptr, MODE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    if MODE == "square":
        y = x * x
    elif MODE == "neg":
        y = -x
    else:
        tl.static_assert(MODE == "id", "unknown MODE")     # only compiled when MODE is neither
        y = x
    if BLOCK > 1000:
        y = undefined_name_never_compiled(y)                # noqa: F821 (dead branch)
    tl.store(out_ptr + offs, y)


@pytest.mark.parametrize("mode,ref", [("square", lambda x: x * x), ("neg", lambda x: -x), ("id", lambda x: x)])
def test_if_on_constexpr_compiles_only_the_taken_branch(mode, ref):
    x = np.arange(-8, 8, dtype=np.float32)
    out = poisoned(16, np.float32)
    constexpr_branch_kernel[(1,)](x, out, MODE=mode, BLOCK=16)
    np.testing.assert_array_equal(out, ref(x))


@tessera.kernel
def if_inside_loop_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.int32)
    for i in range(n):
        if i % 3 == 0:
            acc += offs
        elif i % 3 == 1:
            acc = acc * 2
        else:
            acc -= 1
    if n > 5:
        for i in range(2):
            acc += 1000
    tl.store(out_ptr + offs, acc)


@pytest.mark.parametrize("n", [0, 4, 9])
def test_if_inside_loop_and_loop_inside_if(n):
    out = poisoned(8, np.int32)
    if_inside_loop_kernel[(1,)](out, n, BLOCK=8)
    acc = np.zeros(8, np.int64)
    for i in range(n):
        acc = acc + np.arange(8) if i % 3 == 0 else (acc * 2 if i % 3 == 1 else acc - 1)
    if n > 5:
        acc += 2000
    np.testing.assert_array_equal(out, acc)


# --- early return --------------------------------------------------------------------------------
@tessera.kernel
def early_return_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if pid * BLOCK >= n:
        return                                              # programs past the end do nothing
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    if pid == 1:
        tl.store(out_ptr + offs, -x, mask=offs < n)
        return
    tl.store(out_ptr + offs, x * 2, mask=offs < n)


def test_early_returns():
    n, B = 50, 16
    x = np.arange(n, dtype=np.float32) + 1
    out = poisoned(80, np.float32)
    early_return_kernel[(6,)](x, out, n, BLOCK=B)             # 6 programs for 4 blocks
    want = x * 2
    want[16:32] = -x[16:32]
    np.testing.assert_array_equal(out[:n], want)
    assert np.isnan(out[n:]).all()


# --- helpers and kernels calling kernels ---------------------------------------------------------
def scale_and_shift(x, s, SHIFT: tl.constexpr):
    tl.static_assert(SHIFT >= 0)
    return x * s + SHIFT


def min_max_pair(x):
    return tl.min(x, axis=0), tl.max(x, axis=0)


def clamp_helper(x, lo, hi):
    return inner_clamp(x, lo, hi)                           # helpers call helpers


def inner_clamp(x, lo, hi):
    return tl.minimum(tl.maximum(x, lo), hi)


def next_pow2(n):                                            # plain Python at compile time
    return 1 << (n - 1).bit_length()


@tessera.kernel
def add_one_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + 1)


@tessera.kernel
def helpers_kernel(x_ptr, out_ptr, tmp_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = scale_and_shift(x, 3, SHIFT=2)
    lo, hi = min_max_pair(x)
    z = clamp_helper(y, lo, hi)
    P: tl.constexpr = next_pow2(BLOCK + 1)
    tl.static_assert(P == 2 * BLOCK)
    tl.store(out_ptr + offs, z + lo * 0 + (hi - hi))
    add_one_kernel(x_ptr, tmp_ptr, BLOCK)                   # another kernel, inlined
    add_one_kernel(tmp_ptr, tmp_ptr + BLOCK, BLOCK=BLOCK)


def test_helper_inlining_and_calling_another_kernel():
    x = np.arange(-8, 8, dtype=np.int32)
    out, tmp = poisoned(16, np.int32), poisoned(32, np.int32)
    helpers_kernel[(1,)](x, out, tmp, BLOCK=16)
    np.testing.assert_array_equal(out, np.clip(x * 3 + 2, x.min(), x.max()))
    np.testing.assert_array_equal(tmp[:16], x + 1)
    np.testing.assert_array_equal(tmp[16:], x + 2)


def test_kernel_cannot_be_called_from_python():
    with pytest.raises(RuntimeError, match="must be launched with a grid"):
        add_one_kernel(np.zeros(4, np.int32), np.zeros(4, np.int32), 4)


@tessera.kernel
def scalar_loop_types_kernel(out_ptr, n):
    # the loop variable is an i32 scalar: it mixes with tiles like a run-time value
    acc = tl.zeros((4,), tl.int64)
    for i in range(n):
        acc += tl.arange(0, 4) * i
    tl.store(out_ptr + tl.arange(0, 4), acc)


def test_loop_variable_type_and_interpreter_agreement():
    out_c, out_i = poisoned(4, np.int64), poisoned(4, np.int64)
    scalar_loop_types_kernel[(1,)](out_c, 10)
    run_interpreted(scalar_loop_types_kernel, (1,), out_i, 10)
    np.testing.assert_array_equal(out_c, np.arange(4) * 45)
    np.testing.assert_array_equal(out_c, out_i)


def test_control_flow_kernels_agree_with_interpreter():
    x = np.array([1, 2, 3, 6, 7, 27], np.int64)
    c, i = run_compiled_and_interpreted(collatz_kernel, (6,), x, poisoned(6, np.int32))
    np.testing.assert_array_equal(c[1], i[1])
    c, i = run_compiled_and_interpreted(branches_kernel, (8,), poisoned((8, 4), np.int32), 2, 5, BLOCK=4)
    np.testing.assert_array_equal(c[0], i[0])
    xf = np.arange(50, dtype=np.float32)
    c, i = run_compiled_and_interpreted(early_return_kernel, grid_for(80, 16), xf, poisoned(80, np.float32), 50,
                                        BLOCK=16)
    np.testing.assert_array_equal(c[1], i[1])
    c, i = run_compiled_and_interpreted(loop_forms_kernel, (1,), poisoned(4, np.int32), -5, 7, STEP=3)
    np.testing.assert_array_equal(c[0], i[0])


@tessera.kernel
def carried_literal_kernel(out_ptr, n):
    c = 0
    for _ in range(n):
        c += 1                                               # compiled: an i32 carried by the loop
    tl.store(out_ptr, c.to(tl.float32))


def test_number_carried_by_a_loop_is_a_tensor_in_the_interpreter_too():
    out = poisoned(1, np.float32)
    carried_literal_kernel[(1,)](out, 5)
    assert out[0] == 5                                       # compiled: fine
    out[0] = np.nan
    run_interpreted(carried_literal_kernel, (1,), out, 5)
    assert out[0] == 5


@tessera.kernel
def carried_semantics_kernel(out_ptr, n):
    c = -7
    i = 0
    while i < n:                                             # a run-time while (n is a tensor)
        c = c // 2                                           # i32 division truncates: -7 -> -3 -> -1 -> 0
        i += 1
    s = 0
    for k in tl.static_range(3):                             # unrolled: s stays a Python int
        s += k
    tl.static_assert(s == 3)
    w = 2147483647
    for _ in tl.range(0, n, 4):
        w += 1                                               # i32 wraps
    tl.store(out_ptr, c)
    tl.store(out_ptr + 1, w)


def test_carried_numbers_follow_i32_semantics_compiled_and_interpreted():
    out_c, out_i = poisoned(2, np.int32), poisoned(2, np.int32)
    carried_semantics_kernel[(1,)](out_c, 2)
    run_interpreted(carried_semantics_kernel, (1,), out_i, 2)
    np.testing.assert_array_equal(out_c, [-1, -2147483648])
    np.testing.assert_array_equal(out_i, out_c)


def test_carried_numbers_in_a_kernel_with_a_closure():
    scale = 3

    @tessera.kernel
    def closure_kernel(out_ptr, n):
        c = 0
        for _ in range(n):
            c += scale
        tl.store(out_ptr, c.to(tl.float32))

    out = poisoned(1, np.float32)
    run_interpreted(closure_kernel, (1,), out, 4)
    assert out[0] == 12


# --- a kernel calling another kernel -------------------------------------------------------
@tessera.kernel
def _scaled_store(ptr, offs, v, SCALE: tl.constexpr):
    if SCALE:
        v = v * 2.0
    tl.store(ptr + offs, v)


@tessera.kernel
def calls_a_kernel(x_ptr, out_ptr, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    _scaled_store(out_ptr, offs, tl.load(x_ptr + offs) + 1.0, SCALE)


@pytest.mark.parametrize("scale", [False, True])
def test_a_kernel_called_from_a_kernel_is_inlined_compiled_and_interpreted(scale):
    # Compiled, the callee is inlined (its constexpr parameter folds the branch); the
    # interpreter runs its body in place. Launched on its own it still needs a grid.
    x = np.arange(16, dtype=np.float32)
    compiled, interpreted = run_compiled_and_interpreted(calls_a_kernel, (1,), x, np.zeros(16, np.float32),
                                                         SCALE=scale, BLOCK=16)
    expected = (x + 1) * (2 if scale else 1)
    np.testing.assert_array_equal(compiled[1], expected)
    np.testing.assert_array_equal(interpreted[1], expected)
    with pytest.raises(RuntimeError, match="must be launched with a grid"):
        _scaled_store(x, 0, 1.0, True)
