"""The warp-specialized matmul's output tile written by TMA copies from shared memory
(compiler/codegen/nvptx/tma_store_nvptx.cpp), marked gpu: kernels/linear.py's persistent
kernel through L.matmul against float64 with NaN-poisoned outputs (an element no copy wrote
stays NaN), on shapes whose last row or column tiles are partial (the TMA clips a box's
rows past M and columns past N: they must stay unwritten in the neighbouring memory too),
with 4 stages (two chunk buffers, reused within a tile) and 3 (the whole tile's four),
training's forward storing Z and C through the same buffers, and N = 1030 (rows not 16-byte
aligned: no TMA store) still correct. The PTX side is tested without a GPU in
tests/cpp/test_nvptx_tma_store.cpp and test_warp_specialize.py."""
import pytest

torch = pytest.importorskip("torch")

from tessera.kernels import linear as L  # noqa: E402
import test_kernels_linear as T  # noqa: E402
from test_warp_specialize import _poisoned_outputs  # noqa: E402

# (M, K, N): M one row into a new tile; N = 520 (8 columns into a new 128x256 tile, in its
# first 64-column chunk; its other three chunks are wholly out of bounds); N = 1032 (a
# multiple of 8 only); one K step; K not a multiple of BK.
SHAPES = [(4097, 1024, 2048), (300, 48, 520), (1000, 200, 1032), (129, 64, 264), (2048, 80, 1030)]


def _tiles(stages):
    return (128, 256, 64, {"num_warps": 8, "num_stages": stages, "persistent": 1, "warp_specialize": True})


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [4, 3])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_tma_store_on_gpu(dtype, stages, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _poisoned_outputs(monkeypatch)
    for m, k, n in SHAPES:
        for act in (L.ACT_RELU, L.ACT_GELU, L.ACT_NONE):
            c, want = T._persistent_product("cuda", dtype, 1, m, k, n, False, True, _tiles(stages), act)
            assert not torch.isnan(c).any(), f"unwritten outputs s{stages} {m}x{k}x{n} act {act}"
            T._close(c, want, T.TOL[dtype], f"TMA store s{stages} {m}x{k}x{n} act {act}")


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [4, 3])
def test_tma_store_leaves_neighbours_alone(stages):
    # C at the start of a larger NaN-filled buffer, M = 1000 (the last row tile holds 104 rows):
    # the last tiles' boxes must stop at row M (the memory after C stays NaN), and columns
    # past N = 1032 must not land in the next row (C would then differ from the reference).
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    m, k, n = 1000, 128, 1032
    g = torch.Generator().manual_seed(3)
    a, b, bias = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g), torch.randn(n, generator=g)
    ad, bd, biasd = a.cuda().half(), b.cuda().half(), bias.cuda().half()
    plan = L._matmul_plan((0,) + ad.stride(), (0, bd.stride(1), bd.stride(0)), 1, m, n, k, ad, biasd, L.ACT_RELU,
                          None, False, _tiles(stages))
    assert plan[0] is L._persistent_matmul_kernel
    flat = torch.full((m * n + 64 * 1024,), float("nan"), device="cuda", dtype=torch.float16)
    c = flat[:m * n].view(1, m, n)
    L._Launch(plan)(ad, bd, biasd, c, c)
    torch.cuda.synchronize()
    assert torch.isnan(flat[m * n:]).all(), "a copy wrote past the end of C"
    assert not torch.isnan(c).any(), "unwritten outputs"
    T._close(c[0], torch.relu(a.double() @ b.double().t() + bias.double()), T.TOL[torch.float16],
             f"TMA store s{stages} into a larger buffer")


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [4, 3])
def test_tma_store_with_preactivation(stages, monkeypatch):
    # Training's forward: Z (pre-activation) and C through the same chunk buffers, two maps.
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _poisoned_outputs(monkeypatch)
    m, k, n = 1000, 200, 1032
    g = torch.Generator().manual_seed(5)
    a, b, bias = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g), torch.randn(n, generator=g)
    ad, bd, biasd = a.cuda().half(), b.cuda().half(), bias.cuda().half()
    c, z = L.matmul(ad, bd, (0,) + ad.stride(), (0, bd.stride(1), bd.stride(0)), 1, m, n, k, ad, bias=biasd,
                    act=L.ACT_GELU, store_z=True, tiles=_tiles(stages))
    torch.cuda.synchronize()
    pre = a.double() @ b.double().t() + bias.double()
    assert not torch.isnan(c).any() and not torch.isnan(z).any()
    T._close(z[0], pre, T.TOL[torch.float16], f"Z s{stages}")
    T._close(c[0], torch.nn.functional.gelu(pre), T.TOL[torch.float16], f"C s{stages}")
