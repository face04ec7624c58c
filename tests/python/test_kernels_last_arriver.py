"""Reductions finished by the last program to arrive (one launch instead of two):
cross_entropy's loss reduction (kernels/softmax_ce.py, _reduce_losses_when_last) and the
sliced column reductions (kernels/reduce.py, _finish_split). The counters must be back at
zero after every launch, the sum must not depend on which program finishes last, and on
a GPU a scalar atomic must come after a barrier (the other warps' partial stores)."""
import importlib

import numpy as np
import pytest

import tessera
import tessera.kernels as tk
import tessera.language as tl
from ptxas_check import PTXAS, assemble, assemble_if_available

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

H = importlib.import_module("tessera.kernels._host")
S = importlib.import_module("tessera.kernels.softmax_ce")
R = importlib.import_module("tessera.kernels.reduce")


def _counters_are_zero():
    return all(not np.asarray(c.cpu() if H.is_torch(c) else c).any() for c in H._ARRIVAL_COUNTERS.values())


def _ce_case(rows, n, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, n, generator=g)
    t = torch.randint(0, n, (rows,), generator=g)
    t[::7] = -100  # ignored rows: the mean divides by the others' count
    return x.to(device), t.to(device)


def _check_ce_reductions(device, rows, n):
    x, t = _ce_case(rows, n, device)
    xd, td = x.double().cpu(), t.cpu()
    for reduction in ("mean", "sum"):
        for smoothing in (0.0, 0.1):
            got = tk.cross_entropy(x, t, reduction=reduction, label_smoothing=smoothing)
            want = F.cross_entropy(xd, td, reduction=reduction, label_smoothing=smoothing)
            assert got.dim() == 0
            torch.testing.assert_close(got.double().cpu(), want, rtol=1e-5, atol=1e-6, equal_nan=True)
    # Repeated launches reuse the counters (each launch leaves them at 0) and add in the
    # same order: bitwise the same loss every time.
    runs = torch.stack([tk.cross_entropy(x, t, reduction="sum") for _ in range(20)])
    assert torch.equal(runs, runs[:1].expand(20)), runs
    if device == "cuda":
        torch.cuda.synchronize()
    assert _counters_are_zero()


# 1, 1023/1024/1025 rows: one group, a group boundary; 5000: five groups, the last partial.
@pytest.mark.parametrize("rows", [1, 1023, 1024, 1025, 5000])
def test_cross_entropy_reduction_in_one_launch(rows):
    _check_ce_reductions("cpu", rows, 33)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 1025, 5000, 16384])
@pytest.mark.parametrize("n", [37, 4096, 9000])
def test_cross_entropy_reduction_in_one_launch_on_the_gpu(rows, n):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _check_ce_reductions("cuda", rows, n)


@pytest.mark.parametrize("rows", [1, 7, 5000, 20000])
def test_cross_entropy_loss_bits_do_not_depend_on_the_program_count(monkeypatch, rows):
    # The rows' groups depend on the row count alone (at most CE_MAX_GROUPS; 20000 rows:
    # 10 a group, the last shorter), so 1, 3, 7, 64 or one program per group give the
    # same sum, bit for bit (CPU: the program count otherwise follows the thread count).
    x, t = _ce_case(rows, 33, "cpu", seed=rows)
    bits = {}
    try:
        for programs in (1, 3, 7, 64, rows):
            monkeypatch.setattr(H, "num_programs_for_partials", lambda like, n, per_sm=4, k=programs: min(n, k))
            S._CE_PLANS.clear()
            for reduction in ("mean", "sum"):
                for smoothing in (0.0, 0.1):
                    got = tk.cross_entropy(x, t, reduction=reduction, label_smoothing=smoothing)
                    key = (reduction, smoothing)
                    bits.setdefault(key, got)
                    assert torch.equal(got, bits[key]) or (got.isnan() and bits[key].isnan()), (programs, key)
        assert _counters_are_zero()
    finally:
        S._CE_PLANS.clear()


@pytest.mark.gpu
@pytest.mark.parametrize("rows,n", [(1, 17), (1025, 17), (16384, 17), (1, 4097), (1025, 4097), (16384, 4096),
                                    (1, 32000), (1025, 32000)])
def test_cross_entropy_forward_designs_on_the_gpu(monkeypatch, rows, n):
    # The reducing forward at 1, 3 and 8 programs per SM (rows not a multiple of the
    # programs, single rows): the same loss bits in each (the row groups depend on the
    # shape alone), close to torch in fp64, counters back at zero; fp16 logits as well.
    # (The walk also on fast-memory GPUs, whose plan takes slices: test_kernels_ce_slices.py.)
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    monkeypatch.setattr(S, "CE_SLICED_REDUCE_FAST_MEMORY", False)
    x, t = _ce_case(rows, n, "cuda", seed=rows + n)
    xd = x.double()
    bits = {}
    try:
        for per_sm in (1, 3, 8):
            monkeypatch.setattr(S, "_fwd_programs_per_sm", lambda *a, per_sm=per_sm: per_sm)
            S._CE_PLANS.clear()
            for reduction in ("mean", "sum"):
                for smoothing in (0.0, 0.1):
                    got = tk.cross_entropy(x, t, reduction=reduction, label_smoothing=smoothing)
                    want = F.cross_entropy(xd, t, reduction=reduction, label_smoothing=smoothing)
                    torch.testing.assert_close(got.double(), want, rtol=2e-5, atol=1e-5, equal_nan=True)
                    key = (reduction, smoothing)
                    bits.setdefault(key, got)
                    assert torch.equal(got, bits[key]) or (got.isnan() and bits[key].isnan()), \
                        (per_sm, key, got.item(), bits[key].item())
                    # (an fp16 sum of 16384 losses overflows to inf, as torch's)
                    h = tk.cross_entropy(x.half(), t, reduction=reduction, label_smoothing=smoothing)
                    torch.testing.assert_close(h, F.cross_entropy(x.half().double(), t, reduction=reduction,
                                                                  label_smoothing=smoothing).half(),
                                               rtol=2e-3, atol=2e-3, equal_nan=True)
        torch.cuda.synchronize()
        assert _counters_are_zero()
    finally:
        S._CE_PLANS.clear()


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["cross_entropy", "reduce_mean_abs_dim0"])
def test_reductions_launch_one_gpu_kernel(op):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from torch.profiler import ProfilerActivity, profile
    x, t = _ce_case(16384, 4096, "cuda")
    x = x.half()
    run = (lambda: tk.cross_entropy(x, t)) if op == "cross_entropy" else (lambda: tk.reduce_mean_abs(x, 0))
    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    if op == "cross_entropy" and S.H.fast_memory(x):  # the H200's plan: slices and the merge
        assert kernels == ["_xent_slice_kernel", "_xent_merge_kernel"], kernels
    else:
        assert len(kernels) == 1, kernels


def test_cross_entropy_mean_over_no_counted_rows_is_nan_and_no_rows():
    x = torch.randn(3000, 10)
    t = torch.full((3000,), -100)
    assert torch.isnan(tk.cross_entropy(x, t))
    assert tk.cross_entropy(x, t, reduction="sum").item() == 0.0
    empty, none = torch.randn(0, 10), torch.zeros(0, dtype=torch.long)
    assert torch.isnan(tk.cross_entropy(empty, none)) and torch.isnan(F.cross_entropy(empty, none))
    assert tk.cross_entropy(empty, none, reduction="sum").item() == 0.0
    assert tk.cross_entropy(empty, none, reduction="none").shape == (0,)
    assert _counters_are_zero()


def test_cross_entropy_reduction_backward_scale():
    # The backward takes the mean's 1/count from the forward's launch.
    x, t = _ce_case(2500, 40, "cpu", seed=4)
    a = x.double().requires_grad_(True)
    b = x.double().requires_grad_(True)
    tk.cross_entropy(a, t, label_smoothing=0.05).backward()
    F.cross_entropy(b, t, label_smoothing=0.05).backward()
    torch.testing.assert_close(a.grad, b.grad)


def test_cross_entropy_numpy_reduction():
    g = np.random.default_rng(1)
    x = g.standard_normal((1500, 20)).astype(np.float32)
    t = g.integers(0, 20, 1500)
    got = tk.cross_entropy(x, t, reduction="sum")
    assert isinstance(got, np.ndarray) and got.shape == () and got.dtype == np.float32
    want = F.cross_entropy(torch.from_numpy(x).double(), torch.from_numpy(t), reduction="sum").item()
    assert abs(float(got) - want) < 1e-5 * abs(want)


def test_zero_classes_is_a_clear_error():
    with pytest.raises(ValueError, match="cross_entropy: logits have 3 rows of 0 classes"):
        tk.cross_entropy(torch.randn(3, 0), torch.full((3,), -100))


def test_counters_are_per_thread_on_the_cpu():
    # Two threads reducing at once must not count into each other's counters.
    import threading
    x, t = _ce_case(4000, 300, "cpu", seed=2)
    want = tk.cross_entropy(x, t).item()
    got, errors = [], []

    def work():
        try:
            for _ in range(5):
                got.append(tk.cross_entropy(x, t).item())
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and got == [want] * 15


@pytest.mark.parametrize("shape", [(5000, 70), (3, 9000, 5)], ids=["5000x70", "3x9000x5"])
def test_sliced_column_reduction_in_one_launch(monkeypatch, shape):
    # The GPU plan (rows split in slices) on the CPU: one launch, the same result every
    # time, counters back at 0.
    monkeypatch.setattr(R, "_gpu_plan", lambda x: True)
    x = torch.randn(*shape)
    dim = 0 if len(shape) == 2 else 1
    (step,) = R._reduce_steps(x, *R._as_3d(x, dim)[2:], R.OP_MEAN_ABS, shape[dim])
    assert step[1][2] > 1 and step[3]["SPLIT_FINISH"]  # sliced, finished by the last slice
    runs = [tk.reduce_mean_abs(x, dim) for _ in range(5)]
    torch.testing.assert_close(runs[0].double(), x.double().abs().mean(dim), rtol=1e-5, atol=1e-6)
    assert all(torch.equal(runs[0], r) for r in runs[1:])
    assert _counters_are_zero()


@pytest.mark.gpu
def test_sliced_column_reduction_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = torch.randn(16384, 4096, device="cuda", dtype=torch.float16)
    runs = [tk.reduce_mean_abs(x, 0) for _ in range(10)]
    torch.testing.assert_close(runs[0].double(), x.double().abs().mean(0), rtol=2e-3, atol=1e-4)
    assert all(torch.equal(runs[0], r) for r in runs[1:])
    s = tk.reduce_sum_squared(x.float(), 0)
    torch.testing.assert_close(s, (x.float() ** 2).sum(0), rtol=1e-4, atol=1e-2)
    torch.cuda.synchronize()
    assert _counters_are_zero()


@pytest.mark.gpu
def test_counters_are_per_stream_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x, t = _ce_case(16384, 1000, "cuda", seed=6)
    want = tk.cross_entropy(x, t).item()
    streams = [torch.cuda.Stream() for _ in range(2)]
    outs = []
    torch.cuda.synchronize()
    for _ in range(10):
        for st in streams:
            with torch.cuda.stream(st):
                outs.append(tk.cross_entropy(x, t))
    torch.cuda.synchronize()
    assert [o.item() for o in outs] == [want] * 20



@pytest.mark.parametrize("num_warps", [2, 4])
def test_scalar_atomic_waits_for_every_warps_stores(num_warps, tmp_path):
    # _finish_split's partial is stored by several warps, its count by thread 0: the
    # PTX must have a barrier between the stores and the release fence of the atomic.
    ptx = tessera.compile(R._reduce_dim_kernel, "*fp16:16,*fp16:16,*fp32:16,*i32:16,i32:16,i32:16,i32,i32:16,i32,"
                          "fp32,i32:16", dict(OP=R.OP_MEAN_ABS, MEAN=True, ACC=tl.float32, BLOCK_R=16, BLOCK_I=64,
                                             UNROLL=4, SPLIT_FINISH=True, BLOCK_S=16),
                          target="cuda:90a", num_warps=num_warps).asm["ptx"]
    lines = [ln.strip() for ln in ptx.splitlines()]
    atom = next(i for i, ln in enumerate(lines) if ln.startswith("atom.global.add"))
    last_store = max(i for i, ln in enumerate(lines[:atom]) if "st.global" in ln)
    between = lines[last_store:atom]
    assert any(ln.startswith("bar.sync") for ln in between), between
    assert any(ln.startswith("fence.acq_rel.gpu") for ln in between), between
    assemble_if_available(ptx, "90a", tmp_path)


_H100_REGISTERS, _REGISTER_UNIT, _MAX_BLOCKS, _MAX_THREADS = 65536, 256, 32, 2048


def _resident_blocks(registers, warps):
    per_warp = -(-registers * 32 // _REGISTER_UNIT) * _REGISTER_UNIT
    return min(_MAX_BLOCKS, _MAX_THREADS // (32 * warps), _H100_REGISTERS // (per_warp * warps))


@pytest.mark.skipif(PTXAS is None, reason="no ptxas")
@pytest.mark.parametrize("dtype", ["fp16", "fp32", "fp64"])
@pytest.mark.parametrize("n,smooth", [(256, False), (256, True), (4096, False), (4096, True), (8192, False),
                                      (8192, True)])
def test_reducing_forward_programs_are_all_resident(dtype, n, smooth, tmp_path):
    # cross_entropy's reducing forward splits the rows evenly over the programs it
    # expects an SM to hold at once; each configuration's register use (ptxas, sm_90a)
    # must leave room for that many blocks, or part of the launch runs as a second wave.
    # (Longer rows take the sliced forward: a program per row slice, no such split.)
    block = S._ce_block(n)
    warps = max(1, min(S.CE_FWD_MAX_WARPS, block // 256))
    name = {"fp16": "float16", "fp32": "float32", "fp64": "float64"}[dtype]
    acc = tl.float64 if dtype == "fp64" else tl.float32
    sig = (f"*{dtype}:16,*i64:16,*{'fp64' if dtype == 'fp64' else 'fp32'}:16,*{'fp64' if dtype == 'fp64' else 'fp32'}:16,"
           f"*{'fp64' if dtype == 'fp64' else 'fp32'}:16,*{dtype}:16,*{'fp64' if dtype == 'fp64' else 'fp32'}:16,*i64:16,"
           f"i32:16,i32,i32,i32:16,i32,{'fp64' if dtype == 'fp64' else 'fp32'},i32,i32")
    ptx = tessera.compile(S._xent_fwd_kernel, sig, dict(SMOOTH=smooth, REDUCE=True, MEAN=True,
                                                         ACC=acc, BLOCK=block, FINAL=min(S.CE_LOSS_GROUP, 256 * warps)),
                          target="cuda:90a", num_warps=warps).asm["ptx"]
    log = assemble(ptx, "90a", tmp_path, verbose=True)
    registers = int(log.split("Used ")[1].split(" registers")[0])
    per_sm = S._fwd_programs_per_sm(warps, block, smooth, name)
    assert per_sm <= _resident_blocks(registers, warps), (registers, per_sm)
