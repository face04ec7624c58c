"""tl.cluster_reduce_scatter: clusters of programs that sum a tile and keep a part each.

On the CPU (compiled: one thread per program of a cluster, runtime/cpu/cluster.cpp) and
in the interpreter (Python threads): the sum in rank order, bit for bit; several calls in
a loop; clusters along x of 2-D and 3-D grids; every size; the errors (grid not a multiple
of the cluster, programs that do not make the same calls, the semantic checks). Without a
GPU: the sm_90a PTX names the cluster shape and exchanges through distributed shared
memory, and ptxas takes it; sm_80 and warp specialization are compile errors. With a GPU
(-m gpu): the same results from thread-block clusters, poisoned outputs, sizes up to 16."""
import importlib
import re

import numpy as np
import pytest

import tessera
import tessera.language as tl
from ptxas_check import assemble
from tessera._core import _C
from tessera.errors import CompilationError
from tessera.interpreter import InterpreterError
from tessera.language.semantics import SemanticError

J = importlib.import_module("tessera.jit")  # the module: tessera.jit is also the decorator


@tessera.kernel
def scatter_sums(X, Y, steps, C: tl.constexpr, R: tl.constexpr, N: tl.constexpr):
    """Program p (x, y) holds X[y, x, step] (R x N); its cluster's sum of them, rows
    rank * R / C .., goes to Y[y, x // C, step, rank * R / C + i]: `steps` exchanges."""
    px = tl.program_id(0)
    py = tl.program_id(1)
    nx = tl.num_programs(0)
    rows = tl.arange(0, R)
    cols = tl.arange(0, N)
    part = tl.arange(0, R // C)
    rank = px % C
    for s in range(steps):
        x = tl.load(X + ((py * nx + px) * steps + s) * R * N + rows[:, None] * N + cols[None, :])
        y = tl.cluster_reduce_scatter(x * 1.0, C)
        out = ((py * (nx // C) + px // C) * steps + s) * R * N
        tl.store(Y + out + (rank * (R // C) + part[:, None]) * N + cols[None, :], y)


def rank_order_sums(x, c):
    """x: (ny, nx, steps, R, N) -> (ny, nx / c, steps, R, N), summed in rank order in f32."""
    ny, nx, steps, r, n = x.shape
    g = x.reshape(ny, nx // c, c, steps, r, n)
    out = g[:, :, 0].copy()
    for k in range(1, c):
        out = out + g[:, :, k]  # float32 + float32: one rounding per add
    return out


@pytest.fixture(params=["compiled", "interpreter"])
def mode(request):
    J.set_interpret(request.param == "interpreter")
    yield request.param
    J.set_interpret(False)


def run_scatter(c, nx, ny, steps, r, n, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((ny, nx, steps, r, n)) * 1e3).astype(np.float32)  # big spread: order shows
    y = np.full((ny, nx // c, steps, r, n), np.nan, np.float32)
    ck = scatter_sums[(nx, ny)](x, y, steps, C=c, R=r, N=n)
    return x, y, ck


@pytest.mark.parametrize("c, nx, ny, steps, r, n", [
    (2, 4, 1, 1, 2, 4),      # one row each
    (4, 8, 3, 3, 16, 8),     # 2-D grid, three exchanges
    (8, 8, 2, 2, 8, 32),
    (16, 16, 1, 2, 32, 4),
])
def test_sums_in_rank_order_bit_for_bit(mode, c, nx, ny, steps, r, n):
    x, y, ck = run_scatter(c, nx, ny, steps, r, n)
    np.testing.assert_array_equal(y, rank_order_sums(x, c))
    if mode == "compiled":
        assert ck.metadata["cluster"] == str(c)


def test_one_cluster_takes_the_whole_grid(mode):
    x, y, _ = run_scatter(4, 4, 1, 2, 4, 16, seed=3)
    np.testing.assert_array_equal(y, rank_order_sums(x, 4))


def test_a_grid_not_a_multiple_of_the_cluster_is_a_value_error(mode):
    x = np.zeros((1, 6, 1, 4, 4), np.float32)
    y = np.zeros((1, 1, 1, 4, 4), np.float32)
    with pytest.raises(ValueError, match=r"scatter_sums runs its programs in clusters of 4 along grid axis 0.*"
                                         r"multiple of 4; it is 6"):
        scatter_sums[(6, 1)](x, y, 1, C=4, R=4, N=4)


def test_bound_launches_run_in_clusters_and_check_the_grid():
    """Kernel.bind: the C++ launch path leaves cluster kernels to the Python launcher, which
    groups the programs and checks the grid as a plain launch does."""
    x = np.random.default_rng(2).standard_normal((1, 8, 2, 8, 4)).astype(np.float32)
    y = np.full((1, 2, 2, 8, 4), np.nan, np.float32)
    scatter_sums.bind((8, 1), C=4, R=8, N=4)(x, y, 2)
    np.testing.assert_array_equal(y, rank_order_sums(x, 4))
    with pytest.raises(ValueError, match="multiple of 4; it is 6"):
        scatter_sums.bind((6, 1), C=4, R=8, N=4)(x, y, 2)


def test_a_cpu_launch_without_clusters_is_an_error_not_a_crash():
    """The runtime's entry point called as for any kernel (no cluster size): the exchanges
    find no cluster, and the launch says so."""
    x = np.ones((1, 4, 1, 4, 4), np.float32)
    y = np.zeros((1, 1, 1, 4, 4), np.float32)
    ck = scatter_sums[(4, 1)](x, y, 1, C=4, R=4, N=4)
    with pytest.raises(_C.ClusterError, match="launched without clusters"):
        _C.launch_cpu(ck.entry, 4, 1, 1, (x, y, 1), ck.kinds)
    scatter_sums[(4, 1)](x, y, 1, C=4, R=4, N=4)  # the next launch is clean
    np.testing.assert_array_equal(y, np.full_like(y, 4.0))


@tessera.kernel
def uneven_calls(X, Y, SKIP: tl.constexpr, C: tl.constexpr, N: tl.constexpr):
    """Program SKIP of each cluster leaves out the exchange."""
    px = tl.program_id(0)
    cols = tl.arange(0, N)
    x = tl.load(X + px * C * N + tl.arange(0, C)[:, None] * N + cols[None, :])
    if px % C != SKIP:
        y = tl.cluster_reduce_scatter(x, C)
        tl.store(Y + px * N + tl.arange(0, 1)[:, None] * N + cols[None, :], y)


@pytest.mark.parametrize("skip", [0, 2])
def test_a_program_that_skips_the_exchange_is_an_error_not_a_hang(mode, skip):
    x = np.ones((8, 4, 8), np.float32)
    y = np.zeros((8, 8), np.float32)
    expected = (_C.ClusterError if mode == "compiled" else InterpreterError)
    with pytest.raises(expected, match=r"every program of a cluster must make the same calls") as e:
        uneven_calls[(8,)](x, y, SKIP=skip, C=4, N=8)
    assert "program (" in str(e.value)
    if mode == "compiled":
        assert str(e.value).startswith("kernel uneven_calls: ")


@tessera.kernel
def raises_in_a_mate(X, Y, C: tl.constexpr, N: tl.constexpr):
    px = tl.program_id(0)
    cols = tl.arange(0, N)
    x = tl.load(X + px * C * N + tl.arange(0, C)[:, None] * N + cols[None, :])
    y = tl.cluster_reduce_scatter(x, C)
    tl.device_assert(px != 1, "program 1 fails")
    tl.store(Y + px * N + tl.arange(0, 1)[:, None] * N + cols[None, :], y)


def test_a_failed_assertion_is_reported_not_the_cluster_it_broke():
    """debug=True on the CPU: program 1's assertion fails before its exchange, so it returns
    early and breaks its cluster; the launch reports the assertion."""
    with pytest.raises(AssertionError, match="program 1 fails"):
        assert_before_exchange[(4,)](np.ones((4, 4, 8), np.float32), np.zeros((4, 8), np.float32), C=4, N=8,
                                     debug=True)


@tessera.kernel
def assert_before_exchange(X, Y, C: tl.constexpr, N: tl.constexpr):
    px = tl.program_id(0)
    cols = tl.arange(0, N)
    x = tl.load(X + px * C * N + tl.arange(0, C)[:, None] * N + cols[None, :])
    tl.device_assert(px != 1, "program 1 fails")
    y = tl.cluster_reduce_scatter(x, C)
    tl.store(Y + px * N + tl.arange(0, 1)[:, None] * N + cols[None, :], y)


def test_the_interpreter_reports_an_error_of_another_program_of_the_cluster():
    J.set_interpret(True)
    try:
        with pytest.raises(AssertionError, match="program 1 fails"):
            raises_in_a_mate[(4,)](np.ones((4, 4, 8), np.float32), np.zeros((4, 8), np.float32), C=4, N=8)
    finally:
        J.set_interpret(False)


# --------------------------------------------------------------------------- semantic errors

@tessera.kernel
def bad_exchange(X, Y, WHAT: tl.constexpr):
    x = tl.load(X + tl.arange(0, 8)[:, None] * 4 + tl.arange(0, 4)[None, :])
    if WHAT == "f16":
        y = tl.cluster_reduce_scatter(x.to(tl.float16), 2)
    elif WHAT == "size":
        y = tl.cluster_reduce_scatter(x, 3)
    elif WHAT == "rows":
        y = tl.cluster_reduce_scatter(x, 16)
    elif WHAT == "scalar":
        y = tl.cluster_reduce_scatter(tl.sum(tl.sum(x, 1), 0), 2)
    else:
        a = tl.cluster_reduce_scatter(x, 2)
        y = tl.cluster_reduce_scatter(x, 4)
    tl.store(Y, tl.sum(tl.sum(y, 1), 0))


@pytest.mark.parametrize("what, message", [
    ("f16", r"sums f32 tiles, got tile<8x4xf16>; convert with \.to\(tl\.float32\)"),
    ("size", r"cluster_size must be 2, 4, 8 or 16"),
    ("rows", r"dim 0 of .* is not a multiple of the cluster size 16"),
    ("scalar", r"needs a tile"),
    ("mixed", r"cluster size 4 here, 2 in an earlier call"),
])
def test_semantic_errors_name_the_line(what, message):
    with pytest.raises(CompilationError, match=message) as e:
        bad_exchange[(16,)](np.zeros((8, 4), np.float32), np.zeros(1, np.float32), WHAT=what)
    assert "test_cluster.py" in str(e.value)


@pytest.mark.parametrize("what, message", [
    ("f16", r"sums f32 tiles, got a fp16 tile of shape \[8, 4\]; convert with \.to\(tl\.float32\)"),
    ("size", r"cluster_size must be 2, 4, 8 or 16"),
    ("rows", r"dim 0 of a fp32 tile of shape \[8, 4\] is not a multiple of the cluster size 16"),
    ("scalar", r"needs a tile, got a fp32 scalar"),
])
def test_the_interpreter_gives_the_same_semantic_errors(what, message):
    J.set_interpret(True)
    try:
        with pytest.raises(SemanticError, match=message) as e:
            bad_exchange[(16,)](np.zeros((8, 4), np.float32), np.zeros(1, np.float32), WHAT=what)
        assert "test_cluster.py" in "".join(getattr(e.value, "__notes__", []))
    finally:
        J.set_interpret(False)


# --------------------------------------------------------------------------- PTX (no GPU needed)

SIG = {"X": "*fp32:16", "Y": "*fp32:16", "steps": "i32"}


def cluster_ptx(c=4, r=16, n=8, target="cuda:90a", **options):
    ck = tessera.compile(scatter_sums, SIG, constexprs={"C": c, "R": r, "N": n}, target=target, **options)
    return ck, ck.asm["ptx"]


@pytest.mark.parametrize("c", [2, 16])
def test_ptx_names_the_cluster_shape_and_reads_peers_through_dsmem(c, tmp_path):
    ck, ptx = cluster_ptx(c=c, r=16, n=8, num_warps=4)
    assert ck.metadata["cluster"] == str(c)
    entry = ptx[ptx.index(".entry"):ptx.index("{", ptx.index(".entry"))]
    assert ".explicitcluster" in entry and f".reqnctapercluster {c}, 1, 1" in entry
    assert "mov.u32 %r" in ptx and "%cluster_ctarank" in ptx
    # one peer read per rank for each of this thread's elements (16 / c rows x 8 cols / 128 threads)
    per_thread = max(1, 16 // c * 8 // 128)
    assert len(re.findall(r"ld\.shared::cluster\.f32", ptx)) == c * per_thread
    assert len(re.findall(r"mapa\.shared::cluster\.u32", ptx)) == c * per_thread
    # the opening phase, wait + publish + wait per exchange, close: and a wait at the return
    assert ptx.count("barrier.cluster.arrive.relaxed;") == 1
    assert ptx.count("barrier.cluster.arrive.release;") == 2
    assert ptx.count("barrier.cluster.wait.acquire;") == 3
    assemble(ptx, "90a", tmp_path)


def test_ptx_reads_runs_of_four_with_vector_loads_all_before_the_sums(tmp_path):
    """A 64 x 64 tile in clusters of 2 over 8 warps: each thread's 8 elements of its part
    are two runs of 4, so 2 ranks x 2 ld.v4, every one issued before the first add."""
    _, ptx = cluster_ptx(c=2, r=64, n=64, num_warps=8)
    loads = [m.start() for m in re.finditer(r"ld\.shared::cluster\.v4\.f32", ptx)]
    assert len(loads) == 4 and "ld.shared::cluster.f32" not in ptx
    first_add = ptx.index("add.rn.f32", loads[0])
    assert all(at < first_add for at in loads)
    assemble(ptx, "90a", tmp_path)


def test_without_clusters_no_cluster_metadata_or_directive():
    @tessera.kernel
    def plain(X, Y):
        tl.store(Y + tl.arange(0, 8), tl.load(X + tl.arange(0, 8)))
    ck = tessera.compile(plain, {"X": "*fp32", "Y": "*fp32"}, target="cuda:90a")
    assert "cluster" not in ck.metadata and "cluster" not in ck.asm["ptx"]


def test_before_sm_90_is_a_compile_error_at_the_call():
    with pytest.raises(CompilationError, match=r"needs thread-block clusters \(sm_90 or newer\); this target is "
                                               r"sm_80") as e:
        cluster_ptx(target="cuda:80")
    assert "y = tl.cluster_reduce_scatter(x * 1.0, C)" in str(e.value)


@tessera.kernel
def specialized_with_exchange(A, B, Y, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], tl.float32)
    for k in tl.range(0, K, BK, warp_specialize=True):
        a = tl.load(A + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(B + (k + rk)[:, None] * BN + rn[None, :])
        acc = tl.dot(a, b, acc)
    part = tl.cluster_reduce_scatter(acc, 2)
    tl.store(Y + tl.arange(0, BM // 2)[:, None] * BN + rn[None, :], part)


def test_warp_specialization_with_an_exchange_is_a_compile_error():
    with pytest.raises(CompilationError, match=r"warp_specialize=True.*cluster_reduce_scatter"):
        tessera.compile(specialized_with_exchange, {"A": "*fp16:16", "B": "*fp16:16", "Y": "*fp32:16", "K": "i32:16"},
                        constexprs={"BM": 64, "BN": 64, "BK": 64}, target="cuda:90a", num_warps=4, num_stages=3)


# --------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("c, nx, ny, steps, r, n", [(2, 8, 2, 3, 4, 64), (8, 16, 3, 2, 64, 64),
                                                    (16, 32, 2, 2, 64, 64)])
def test_gpu_clusters_sum_in_rank_order_bit_for_bit(c, nx, ny, steps, r, n):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs an sm_90 GPU")
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((ny, nx, steps, r, n)) * 1e3).astype(np.float32)
    y = torch.full((ny, nx // c, steps, r, n), float("nan"), device="cuda")
    ck = scatter_sums[(nx, ny)](torch.from_numpy(x).cuda(), y, steps, C=c, R=r, N=n, num_warps=4)
    torch.cuda.synchronize()
    assert ck.metadata["cluster"] == str(c)
    np.testing.assert_array_equal(y.cpu().numpy(), rank_order_sums(x, c))
    with pytest.raises(ValueError, match=f"multiple of {c}"):
        scatter_sums[(nx + c // 2, ny)](torch.from_numpy(x).cuda(), y, steps, C=c, R=r, N=n, num_warps=4)


# --------------------------------------------------------------------------- the attention experiment

def test_the_attention_backward_cluster_experiment_is_exact_on_the_cpu(mode):
    """bench/attention_cluster_kernels.py (timed on GPUs by bench/attention_score_gpu.py):
    dq and dk against float64, every element written (NaN-poisoned outputs)."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    from attention_cluster_kernels import score_backward_cluster_kernel
    rng = np.random.default_rng(1)
    b, m, n, d, bm, bk = 2, 64, 96, 24, 16, 32
    q = rng.standard_normal((b, m, d)).astype(np.float32)
    k = rng.standard_normal((b, n, d)).astype(np.float32)
    ds = rng.standard_normal((b, m, n)).astype(np.float32)
    dq = np.full((b, m, d), np.nan, np.float32)
    dk = np.full((b, n, d), np.nan, np.float32)
    score_backward_cluster_kernel[(b * (m // bm),)](ds, q, k, dq, dk, m, n, d, n, d, d, 0.125, b * m, b * n,
                                                    ACC=tl.float32, BLOCK_M=bm, BLOCK_D=32, BLOCK_K=bk,
                                                    CLUSTER=m // bm)
    np.testing.assert_allclose(dq, np.einsum("bmn,bnd->bmd", ds.astype(np.float64), k) * 0.125, atol=2e-5)
    np.testing.assert_allclose(dk, np.einsum("bmn,bmd->bnd", ds.astype(np.float64), q) * 0.125, atol=2e-5)
