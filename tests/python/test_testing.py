"""tessera.testing: do_bench's call counts, statistics and argument checks (on a busy-wait
workload whose duration is known; lower bounds are exact, upper bounds allow for a
shared, loaded machine), and perf_report / Benchmark sweeps, table
and plot output."""
import os
import time

import pytest

import tessera
from tessera._core import _C
from tessera.testing import Benchmark, do_bench, perf_report


def _sleeper(ms):
    def fn():
        end = time.perf_counter() + ms / 1e3
        while time.perf_counter() < end:
            pass
    return fn


def test_do_bench_measures_a_known_duration():
    t = do_bench(_sleeper(1.0), warmup=2, rep=20, return_mode="min")
    assert 0.95 <= t < 5.0
    lo, med, hi = do_bench(_sleeper(0.5), warmup=1, rep=10, quantiles=[0.0, 0.5, 1.0])
    assert 0.45 <= lo <= med <= hi


def test_do_bench_call_counts_follow_the_budgets():
    calls = []
    fn = _sleeper(1.0)
    do_bench(lambda: (calls.append(1), fn()), warmup=5, rep=10)
    # 1 first call + 5 for the estimate + ~5 warm-up + ~10 measured (fewer if the machine is
    # busy and the estimate comes out long)
    assert 8 <= len(calls) <= 24


def test_do_bench_return_modes_and_errors():
    samples = do_bench(_sleeper(0.2), warmup=1, rep=4, return_mode="all")
    assert isinstance(samples, list) and len(samples) >= 1 and all(s >= 0.19 for s in samples)
    assert do_bench(_sleeper(0.2), warmup=1, rep=4, return_mode="min") >= 0.19
    with pytest.raises(ValueError, match="return_mode"):
        do_bench(lambda: None, return_mode="average")
    with pytest.raises(ValueError, match="quantiles"):
        do_bench(lambda: None, quantiles=[1.5])
    with pytest.raises(ValueError, match="device"):
        do_bench(lambda: None, device="tpu")


def test_do_bench_times_a_tessera_kernel():
    import numpy as np
    import tessera.language as tl

    @tessera.kernel
    def scale(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 1.0, mask=offs < n)

    x = np.ones(1 << 16, np.float32)
    t = do_bench(lambda: scale[(64,)](x, x.size, BLOCK=1024), warmup=1, rep=5)
    assert 0 < t < 100


def test_perf_report_sweeps_prints_and_plots(tmp_path, capsys):
    calls = []

    @perf_report(Benchmark(x_names=["n"], x_vals=[1, 2, 4], line_arg="impl", line_vals=["a", "b"],
                           line_names=["A", "B"], plot_name="toy", ylabel="score", args={"scale": 10}))
    def bench(n, impl, scale):
        calls.append((n, impl, scale))
        return (n * scale, n * scale - 1, n * scale + 1) if impl == "a" else n * scale * 2

    rows = bench.run(print_data=True, save_path=str(tmp_path))
    assert calls == [(1, "a", 10), (1, "b", 10), (2, "a", 10), (2, "b", 10), (4, "a", 10), (4, "b", 10)]
    assert [(r["n"], r["A"], r["B"]) for r in rows] == [(1, 10, 20), (2, 20, 40), (4, 40, 80)]
    assert rows[0]["A-min"] == 9 and rows[0]["A-max"] == 11
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert lines[0] == "toy: (score)"
    assert lines[1].split() == ["n", "A", "B"]
    assert lines[-1].split() == ["4", "40", "80"]
    with open(tmp_path / "toy.csv") as f:
        assert f.read().splitlines() == ["n,A,B", "1,10,20", "2,20,40", "4,40,80"]
    pytest.importorskip("matplotlib")
    assert os.path.getsize(tmp_path / "toy.png") > 1000


def test_benchmark_checks_its_arguments():
    with pytest.raises(ValueError, match="line_names has 1 entries, line_vals 2"):
        Benchmark(["n"], [1], "impl", ["a", "b"], ["A"], "bad")
    mark = perf_report(Benchmark(["m", "n"], [(1, 2, 3)], "impl", ["a"], ["A"], "bad2"))(lambda **k: 1.0)
    with pytest.raises(ValueError, match="does not match x_names"):
        mark.run(print_data=False)


@pytest.mark.gpu
@pytest.mark.skipif(not _C.cuda_available(), reason="no CUDA device")
def test_do_bench_on_the_gpu_uses_cuda_events():
    """A kernel on GPU arrays timed with the runtime's CUDA events: positive, finite, and
    a bigger launch takes longer."""
    import numpy as np
    import tessera.language as tl

    @tessera.kernel
    def fill(x_ptr, n, REPS: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs, mask=offs < n)
        for _ in range(REPS):
            v = tl.sqrt(v * v + 1.0)
        tl.store(x_ptr + offs, v, mask=offs < n)

    n = 1 << 22
    x = tessera.from_numpy(np.ones(n, np.float32), device="cuda:0")
    small = do_bench(lambda: fill[(n // 1024,)](x, n, REPS=1, BLOCK=1024), warmup=5, rep=20, device="cuda:0")
    large = do_bench(lambda: fill[(n // 1024,)](x, n, REPS=200, BLOCK=1024), warmup=5, rep=20, device="cuda:0")
    assert 0 < small < large < 1000
