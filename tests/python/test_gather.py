"""tl.gather(src, index, axis) (Triton's): out[i] = src[i with i[axis] = index[i]], an
index outside 0 .. n-1 clamped into it. Compiled on the CPU and run by the interpreter
against numpy's take_along_axis; its Tile IR op; PTX that ptxas assembles; a GPU run
with poisoned outputs; and the errors."""
import importlib

import numpy as np
import pytest

import tessera
import tessera.language as tl
from ptxas_check import assemble
from tessera.compiler import generate_tile_ir

J = importlib.import_module("tessera.jit")  # the module: tessera.jit is also the decorator


@tessera.kernel
def gather_2d(s_ptr, i_ptr, o_ptr, R: tl.constexpr, C: tl.constexpr, IR: tl.constexpr, IC: tl.constexpr,
              AXIS: tl.constexpr, SCALE: tl.constexpr):
    src = tl.load(s_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])
    if SCALE:
        src = src * 2  # a computed src, not a load
    idx = tl.load(i_ptr + tl.arange(0, IR)[:, None] * IC + tl.arange(0, IC)[None, :])
    tl.store(o_ptr + tl.arange(0, IR)[:, None] * IC + tl.arange(0, IC)[None, :], tl.gather(src, idx, AXIS))


@tessera.kernel
def gather_1d(s_ptr, i_ptr, o_ptr, N: tl.constexpr, M: tl.constexpr):
    tl.store(o_ptr + tl.arange(0, M), tl.gather(tl.load(s_ptr + tl.arange(0, N)), tl.load(i_ptr + tl.arange(0, M)), 0))


@tessera.kernel
def gather_3d(s_ptr, i_ptr, o_ptr, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr, K: tl.constexpr):
    # src [A, B, C] gathered along axis 1 with an index [A, K, C]
    so = tl.arange(0, A)[:, None, None] * (B * C) + tl.arange(0, B)[None, :, None] * C + tl.arange(0, C)[None, None, :]
    io = tl.arange(0, A)[:, None, None] * (K * C) + tl.arange(0, K)[None, :, None] * C + tl.arange(0, C)[None, None, :]
    tl.store(o_ptr + io, tl.gather(tl.load(s_ptr + so), tl.load(i_ptr + io), 1))


@pytest.fixture(params=["compiled", "interpreter"])
def mode(request):
    J.set_interpret(request.param == "interpreter")
    yield request.param
    J.set_interpret(False)


def _src(dtype, shape, rng):
    if np.issubdtype(dtype, np.floating):
        x = rng.standard_normal(shape).astype(dtype)
        x.flat[0], x.flat[-1] = np.nan, -np.inf
        return x
    return rng.integers(-100, 100, shape).astype(dtype)


def _want(src, idx, axis):
    return np.take_along_axis(src, np.clip(idx.astype(np.int64), 0, src.shape[axis] - 1), axis)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.int64])
@pytest.mark.parametrize("axis,shapes", [(0, (8, 16, 32, 16)), (0, (16, 4, 4, 4)), (1, (8, 16, 8, 64)),
                                         (1, (4, 32, 4, 2))])
def test_gather_2d_matches_take_along_axis(mode, dtype, axis, shapes):
    rng = np.random.default_rng(axis * 10 + shapes[0])
    R, C, IR, IC = shapes
    src = _src(dtype, (R, C), rng)
    idx = rng.integers(-3, (R, C)[axis] + 3, (IR, IC)).astype(np.int32)   # some outside: clamped
    out = np.zeros((IR, IC), dtype)
    gather_2d[(1,)](src, idx, out, R=R, C=C, IR=IR, IC=IC, AXIS=axis, SCALE=False)
    np.testing.assert_array_equal(out, _want(src, idx, axis))


@pytest.mark.parametrize("index_dtype", [np.int64, np.uint8, np.int16])
def test_gather_of_a_computed_tile_with_other_index_types(mode, index_dtype):
    rng = np.random.default_rng(1)
    src = rng.standard_normal((8, 16)).astype(np.float32)
    idx = rng.integers(0, 16, (8, 32)).astype(index_dtype)
    out = np.zeros((8, 32), np.float32)
    gather_2d[(1,)](src, idx, out, R=8, C=16, IR=8, IC=32, AXIS=-1, SCALE=True)
    np.testing.assert_array_equal(out, _want(src * 2, idx, 1))


def test_gather_1d_and_3d(mode):
    rng = np.random.default_rng(2)
    src = rng.standard_normal(64).astype(np.float32)
    idx = rng.integers(0, 64, 128).astype(np.int32)
    out = np.zeros(128, np.float32)
    gather_1d[(1,)](src, idx, out, N=64, M=128)
    np.testing.assert_array_equal(out, src[idx])
    src3 = rng.standard_normal((2, 8, 4)).astype(np.float32)
    idx3 = rng.integers(0, 8, (2, 16, 4)).astype(np.int32)
    out3 = np.zeros((2, 16, 4), np.float32)
    gather_3d[(1,)](src3, idx3, out3, A=2, B=8, C=4, K=16)
    np.testing.assert_array_equal(out3, _want(src3, idx3, 1))


def test_gather_is_one_tile_ir_op():
    def k(s_ptr, i_ptr, o_ptr):
        r = tl.arange(0, 16)
        tl.store(o_ptr + r, tl.gather(tl.load(s_ptr + r), tl.load(i_ptr + r), 0))

    text = generate_tile_ir(k, {"s_ptr": tl.pointer_type(tl.float32), "i_ptr": tl.pointer_type(tl.int32),
                                "o_ptr": tl.pointer_type(tl.float32)}, {}, {}, {})
    assert "= gather " in text and "axis = 0" in text


@pytest.mark.parametrize("arch", ["90a", "80"])
@pytest.mark.parametrize("dtype,axis", [("fp32", 0), ("fp16", 1), ("i64", 1)])
def test_ptx_assembles_with_one_shared_load_per_element(tmp_path, arch, dtype, axis):
    sig = {"s_ptr": f"*{dtype}:16", "i_ptr": "*i32:16", "o_ptr": f"*{dtype}:16"}
    ptx = tessera.compile(gather_2d, sig, dict(R=8, C=16, IR=32, IC=16, AXIS=axis, SCALE=False) if axis == 0 else
                          dict(R=8, C=16, IR=8, IC=64, AXIS=axis, SCALE=False), target=f"cuda:{arch}",
                          num_warps=4).asm["ptx"]
    assert ptx.count("ld.shared") == 4                       # 512 outputs / 128 threads
    assemble(ptx, arch, tmp_path)


@pytest.mark.gpu
def test_on_the_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float16, np.int64):
        for axis, (R, C, IR, IC) in ((0, (8, 16, 32, 16)), (1, (8, 16, 8, 64)), (1, (4, 32, 4, 2))):
            src = _src(dtype, (R, C), rng)
            idx = rng.integers(-3, (R, C)[axis] + 3, (IR, IC)).astype(np.int32)
            out = torch.full((IR, IC), -7, dtype=torch.from_numpy(src).dtype, device="cuda")
            for scale in (False, True):
                gather_2d[(1,)](torch.from_numpy(src).cuda(), torch.from_numpy(idx).cuda(), out, R=R, C=C, IR=IR,
                                IC=IC, AXIS=axis, SCALE=scale)
                want = _want(src * 2 if scale else src, idx, axis)
                np.testing.assert_array_equal(out.cpu().numpy(), want)
    src3 = rng.standard_normal((2, 8, 4)).astype(np.float32)
    idx3 = rng.integers(0, 8, (2, 16, 4)).astype(np.int32)
    out3 = torch.full((2, 16, 4), float("nan"), device="cuda")
    gather_3d[(1,)](torch.from_numpy(src3).cuda(), torch.from_numpy(idx3).cuda(), out3, A=2, B=8, C=4, K=16)
    np.testing.assert_array_equal(out3.cpu().numpy(), _want(src3, idx3, 1))


def test_errors_say_what_is_wrong():
    def bad(kind):
        def k(s_ptr, i_ptr, o_ptr):
            r = tl.arange(0, 16)
            src = tl.load(s_ptr + r[:, None] * 16 + r[None, :])
            idx = tl.load(i_ptr + r[:, None] * 16 + r[None, :])
            if kind == 0:
                out = tl.gather(src, idx.to(tl.float32), 0)
            elif kind == 1:
                out = tl.gather(src, tl.load(i_ptr + tl.arange(0, 8)[:, None] * 16 + tl.arange(0, 32)[None, :]), 0)
            elif kind == 2:
                out = tl.gather(src, idx, 2)
            else:
                out = tl.gather(src, tl.load(i_ptr + r), 0)
            tl.store(o_ptr + r[:, None] * 16 + r[None, :], out)
        return k

    types = {"s_ptr": tl.pointer_type(tl.float32), "i_ptr": tl.pointer_type(tl.int32),
             "o_ptr": tl.pointer_type(tl.float32)}
    want = ["tl.gather index must be an integer tile",
            "must have the shape of src",
            "tl.gather axis 2 is out of range for src tile<16x16xf32> (rank 2)",
            "must have the shape of src"]
    for kind, message in enumerate(want):
        with pytest.raises(tessera.CompilationError) as info:
            generate_tile_ir(bad(kind), types, {}, {}, {})
        assert message in info.value.message and "tl.gather(" in info.value.source_line
