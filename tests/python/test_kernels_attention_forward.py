"""attention_score's forward on sm_90 GPUs (kernels/attention.py
_score_forward_flat_kernel: q, k and the scores as 2-D arrays of all batches' rows, a
persistent grid, TMA loads): which calls take it, the kernel compiled for the CPU against
torch in fp64 (poisoned scores, several programs, more tiles than programs), its PTX for
sm_90a (no GPU needed), and the op on a GPU (`gpu` marker; the poisoned-output test of
every attention path is test_kernels_matmul_backward.py's)."""
import importlib

import pytest

import tessera
import tessera.kernels as tk
import tessera.language as tl
from ptxas_check import assemble_if_available, launch_signature  # noqa: E402

torch = pytest.importorskip("torch")

AT = importlib.import_module("tessera.kernels.attention")
L = importlib.import_module("tessera.kernels.linear")


def _close(got, want, tol, what):
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    err = (got - want).abs().max().item()
    assert err <= tol * max(1.0, want.abs().max().item()), f"{what}: max abs error {err:.3g}"


def test_flat_forward_decision(monkeypatch):
    monkeypatch.setattr(AT, "_has_tma", lambda like: True)
    monkeypatch.setattr(AT, "_sm_count", lambda like: 132)
    bm, bn, warps, stages, per_sm, ws, stream = AT.SCORE_FORWARD_FLAT_TILES
    q = torch.empty(1, dtype=torch.float16)

    def grid(bt, m, n, d, qs=None, ks=None, name="float16"):
        return AT._score_forward_flat_grid(q, bt, m, n, d, qs or (m * d, d, 1), ks or (n * d, d, 1), name)
    g, kw = grid(8, 2048, 2048, 64)
    tiles = 8 * (2048 // bm) * (2048 // bn)
    assert g == (min(tiles, per_sm * 132), 1, 1) and kw["tiles"] == tiles
    assert (kw["rows_q"], kw["rows_k"], kw["BLOCK_D"], kw["num_warps"], kw["WS"], kw["STREAM"]) == \
        (8 * 2048, 8 * 2048, 64, warps, ws, stream)
    assert grid(2, bm, bn, 48)[1]["BLOCK_D"] == 64 and grid(1, bm, bn, 8)[1]["BLOCK_D"] == 16
    assert grid(1, bm, bn, 64)[0] == (1, 1, 1)                     # one tile: one program
    assert grid(8, 2048, 2048, 128) is None                        # past one 128-byte TMA box
    assert grid(8, 2048, 2048, 36) is None                         # rows not 16-byte aligned
    assert grid(8, 2048 + bm // 2, 2048, 64) is None               # a tile would cross a batch
    assert grid(8, 2048, 2048 + 8, 64) is None
    assert grid(8, 2048, 2048, 64, name="float32") is None         # tf32x3: the batched matmul
    assert grid(8, 2048, 2048, 64, qs=(4096 * 64, 64, 1)) is None  # q's batches apart
    assert grid(1, 2048, 2048, 64, qs=(4096 * 64, 64, 1)) is not None  # one batch: any batch stride
    assert grid(8, 2048, 2048, 64, ks=(2048 * 64, 1, 2048)) is None  # k transposed
    assert grid(64, 8192, 8192, 64) is None                        # offsets past int32
    monkeypatch.setattr(AT, "_has_tma", lambda like: False)
    assert grid(8, 2048, 2048, 64) is None                         # not sm_90


@pytest.mark.parametrize("ws", [False, True], ids=["plain", "ws"])
@pytest.mark.parametrize("bt,m,n,d,bm,bn,programs", [(3, 64, 128, 64, 64, 128, 2), (2, 128, 256, 24, 64, 128, 3),
                                                     (1, 64, 64, 16, 64, 64, 1), (4, 32, 96, 40, 32, 32, 5)])
def test_flat_forward_kernel_on_the_cpu(bt, m, n, d, bm, bn, programs, ws):
    # Programs taking several tiles each (and a grid not dividing them), D below its block,
    # M != N, into NaN-filled scores; evict-first stores with the plain loop.
    gen = torch.Generator().manual_seed(bt * m + n + d)
    q, k = torch.randn(bt, m, d, generator=gen), torch.randn(bt, n, d, generator=gen)
    s = torch.full((bt, m, n), float("nan"))
    tiles = bt * (m // bm) * (n // bn)
    AT._score_forward_flat_kernel[(programs, 1, 1)](q, k, s, m, n, d, bt * m, bt * n, 0.25, tiles, ACC=tl.float32,
                                                     BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=tessera.next_power_of_2(d), WS=ws,
                                                     STREAM=not ws)
    assert not torch.isnan(s).any()
    _close(s, q.double() @ k.double().transpose(1, 2) * 0.25, 1e-5, "scores")


@pytest.mark.parametrize("shape", [(2, 128, 256, 64), (2, 3, 64, 384, 48), (1, 64, 128, 8)],
                         ids=lambda s: "x".join(map(str, s)))
def test_attention_score_launches_the_flat_kernel(shape, monkeypatch):
    # The forward's sm_90 plan run on the CPU (the launch's grid and tiles as on a GPU),
    # float16, through the general path and the fast one (bound launch): the flat kernel,
    # the same scores.
    monkeypatch.setattr(L.H, "on_gpu", lambda t: True)
    monkeypatch.setattr(AT, "_has_tma", lambda like: True)
    monkeypatch.setattr(AT, "_sm_count", lambda like: 4)
    *lead, m, n, d = shape
    gen = torch.Generator().manual_seed(m + n + d)
    q, k = torch.randn(*lead, m, d, generator=gen).half(), torch.randn(*lead, n, d, generator=gen).half()
    launched = []
    cls = AT._score_forward_flat_kernel.__class__
    real = cls.__getitem__

    def spy(kernel, grid):
        launched.append(kernel.__name__)
        return real(kernel, grid)
    monkeypatch.setattr(cls, "__getitem__", spy)
    s = AT.attention_score_forward(q, k, 0.25)
    assert launched == ["_score_forward_flat_kernel"]
    _close(s, q.double() @ k.double().transpose(-1, -2) * 0.25, 2e-3, "scores")
    AT._FAST_SCORE_PLANS.clear()
    fast = AT._attention_score_fast(q, k, 0.25)
    assert torch.equal(fast, s)
    plan = next(iter(AT._FAST_SCORE_PLANS.values()))
    assert plan[1].__name__ == "<lambda>"  # (the flat kernel's bound launch, not the matmul's)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_ptx_flat_forward_loads_by_tma_into_wgmma(dtype, tmp_path):
    # The shipped tiles: q's and k's tiles by TMA (two tensor maps), one K step of wgmma
    # (k^T K-major), the scores through shared memory in 16-byte evict-first stores; no
    # cp.async, no mma.sync, no spills.
    bm, bn, warps, stages, per_sm, ws, stream = AT.SCORE_FORWARD_FLAT_TILES
    ptr = f"*{dtype}:16"
    sig, ce, opts = launch_signature(AT._score_forward_flat_kernel, {p: ptr for p in ("Q", "KEY", "S")},
                                     (2048, 2048, 64, 8 * 2048, 8 * 2048, 0.125, 4096),
                                     dict(ACC=tl.float32, BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=64, WS=ws, STREAM=stream,
                                          num_warps=warps, num_stages=stages))
    ck = tessera.compile(AT._score_forward_flat_kernel, sig, ce, target="cuda:90a", **opts)
    ptx = ck.asm["ptx"]
    err = assemble_if_available(ptx, "90a", tmp_path, verbose=True)
    if err is not None:
        assert "0 bytes spill stores" in err, err
    assert len(ck.metadata["tensor_maps"].split("|")) == 1 + 2  # (its parameter index, then the maps)
    assert ptx.count("cp.async.bulk.tensor.2d.shared") >= 2 and "cp.async.cg" not in ptx and "mma.sync" not in ptx
    assert ptx.count("wgmma.mma_async") == 4  # 64 x 128 x 64: four k16 steps
    assert ptx.count("st.global.cs.v4") == bm * bn * 2 // 16 // (warps * 32)  # (16 bytes a thread a store)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(8, 2048, 2048, 64), (2, 3, 128, 384, 48), (3, 320, 256, 16)],
                         ids=lambda s: "x".join(map(str, s)))
def test_flat_forward_on_gpu(shape, dtype, monkeypatch):
    # On an sm_90 GPU these shapes take the flat kernel (elsewhere the batched matmul):
    # NaN-filled scores, near fp64, the fast and autograd paths' bits equal.
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **kw: real_empty(*a, **kw).fill_(float("nan")))
    AT._FAST_SCORE_PLANS.clear()
    *lead, m, n, d = shape
    gen = torch.Generator().manual_seed(sum(shape))
    q = torch.randn(*lead, m, d, generator=gen).to("cuda", dtype)
    k = torch.randn(*lead, n, d, generator=gen).to("cuda", dtype)
    with torch.no_grad():
        s = tk.attention_score(q, k)
    _close(s, q.double() @ k.double().transpose(-1, -2) * d ** -0.5, 1e-2 if dtype == torch.float16 else 6e-2,
           f"scores {shape}")
    qg = q.clone().requires_grad_(True)
    torch.testing.assert_close(tk.attention_score(qg, k).detach(), s, rtol=0, atol=0)
    bt = q.numel() // (m * d)
    taken = AT._score_forward_flat_grid(q, bt, m, n, d, (m * d, d, 1), (n * d, d, 1), str(dtype)[6:]) is not None
    assert taken == (torch.cuda.get_device_capability()[0] == 9)
    torch.cuda.synchronize()
