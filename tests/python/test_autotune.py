"""@tessera.autotune on the CPU, deterministically: a config made slow on purpose never
wins, the winner is cached in memory and on disk (a subprocess reuses it without
benchmarking), grid callables see the chosen meta-parameters, failing configs are
skipped with a warning and all failing is a clear error, pruning, reset_to_zero and
restore_value, and the verbose progress on stderr."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tessera
from tessera._core import _C
import tessera.language as tl
from tessera.autotune import AutotuneConfigSkipped


def _add_kernel():
    """A fresh kernel object per test (its in-memory tuning cache starts empty); the
    SLOW constexpr repeats the work so that config is slower by construction."""
    @tessera.kernel
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, SLOW: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        acc = tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m)
        for _ in range(SLOW):
            acc = tl.sqrt(acc * acc)
        tl.store(out_ptr + offs, acc, mask=m)
    return add


def _grid(meta):
    return (tessera.cdiv(meta["n"], meta["BLOCK"]),)


@pytest.fixture
def data():
    n = 1 << 16
    rng = np.random.default_rng(0)
    x = rng.random(n, dtype=np.float32) + 1
    y = rng.random(n, dtype=np.float32) + 1
    return x, y, np.zeros(n, np.float32), n


def test_slow_config_never_wins_and_result_is_right(data):
    x, y, out, n = data
    fast, slow = tessera.Config({"BLOCK": 1024, "SLOW": 0}), tessera.Config({"BLOCK": 1024, "SLOW": 400})
    tuned = tessera.autotune([slow, fast], key=["n"], use_disk_cache=False, warmup=2, rep=10)(_add_kernel())
    tuned[_grid](x, y, out, n)
    np.testing.assert_allclose(out, x + y, rtol=1e-6)
    assert tuned.best_config == fast
    assert set(tuned.configs_timings) == {fast, slow}
    assert tuned.configs_timings[slow][0] > tuned.configs_timings[fast][0]


def test_tunes_once_per_key_and_grid_sees_the_chosen_meta(data):
    x, y, out, n = data
    calls, seen = [], []

    def bench(fn):
        fn()
        calls.append(1)
        return 1.0

    def grid(meta):
        seen.append(meta["BLOCK"])
        return _grid(meta)

    configs = [tessera.Config({"BLOCK": b, "SLOW": 0}) for b in (256, 2048)]
    tuned = tessera.autotune(configs, key=["n"], use_disk_cache=False, do_bench=bench)(_add_kernel())
    tuned[grid](x, y, out, n)
    assert len(calls) == 2 and set(seen) == {256, 2048}
    seen.clear()
    tuned[grid](x, y, out, n)                  # same key: no benchmarking
    assert len(calls) == 2 and seen == [tuned.best_config.kwargs["BLOCK"]]
    tuned[grid](x[:1000], y[:1000], out[:1000], 1000)   # a new key value: tuned again
    assert len(calls) == 4
    np.testing.assert_allclose(out[:1000], x[:1000] + y[:1000], rtol=1e-6)


def test_failing_configs_are_skipped_with_a_warning(data):
    x, y, out, n = data
    good = tessera.Config({"BLOCK": 512, "SLOW": 0})
    bad = tessera.Config({"BLOCK": 100, "SLOW": 0})          # not a power of two
    tuned = tessera.autotune([bad, good], key=["n"], use_disk_cache=False, warmup=1, rep=2)(_add_kernel())
    with pytest.warns(AutotuneConfigSkipped,
                      match="BLOCK: 100.*power of 2"):
        tuned[_grid](x, y, out, n)
    assert tuned.best_config == good
    assert bad in tuned.skipped
    np.testing.assert_allclose(out, x + y, rtol=1e-6)


def test_all_configs_failing_is_a_clear_error(data):
    x, y, out, n = data
    configs = [tessera.Config({"BLOCK": b, "SLOW": 0}) for b in (100, 300)]
    tuned = tessera.autotune(configs, key=["n"], use_disk_cache=False, warmup=1, rep=2)(_add_kernel())
    with pytest.warns(UserWarning), pytest.raises(tessera.AutotuneError) as e:
        tuned[_grid](x, y, out, n)
    msg = str(e.value)
    assert "kernel add" in msg and "none of the 2" in msg and "BLOCK: 100" in msg and "BLOCK: 300" in msg


def test_bad_decorator_arguments_name_the_kernel():
    k = _add_kernel()
    with pytest.raises(ValueError, match="kernel add.*'BLK'"):
        tessera.autotune([tessera.Config({"BLK": 1})], key=["n"])(k)
    with pytest.raises(ValueError, match="key names 'm'"):
        tessera.autotune([tessera.Config({"BLOCK": 1})], key=["m"])(k)
    with pytest.raises(TypeError, match="@tessera.kernel"):
        tessera.autotune([tessera.Config({"BLOCK": 1})], key=["n"])(lambda x: x)
    with pytest.raises(ValueError, match="configs is empty"):
        tessera.autotune([], key=["n"])(k)


def test_passing_a_tuned_parameter_is_an_error(data):
    x, y, out, n = data
    tuned = tessera.autotune([tessera.Config({"BLOCK": 256, "SLOW": 0})], key=["n"], use_disk_cache=False)(
        _add_kernel())
    with pytest.raises(ValueError, match="BLOCK.*chosen by the autotuner"):
        tuned[_grid](x, y, out, n, BLOCK=128)


def test_prune_configs_by(data):
    x, y, out, n = data
    timed = []

    def bench(fn):
        fn()
        timed.append(1)
        return 1.0

    configs = [tessera.Config({"BLOCK": b, "SLOW": 0}) for b in (128, 256, 512, 1024)]
    early = lambda cs, named: [c for c in cs if c.kwargs["BLOCK"] >= 256]       # noqa: E731
    model = lambda n, BLOCK, **kw: -BLOCK                                      # bigger is "faster"  # noqa: E731
    tuned = tessera.autotune(configs, key=["n"], use_disk_cache=False, do_bench=bench,
                             prune_configs_by={"early_config_prune": early, "perf_model": model, "top_k": 2})(
        _add_kernel())
    tuned[_grid](x, y, out, n)
    assert len(timed) == 2
    assert {c.kwargs["BLOCK"] for c in tuned.configs_timings} == {512, 1024}
    with pytest.raises(ValueError, match="prune_configs_by"):
        tessera.autotune(configs, key=["n"], prune_configs_by={"topk": 1})(_add_kernel())


@tessera.kernel
def accumulate(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.atomic_add(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


def test_reset_to_zero_and_restore_value():
    n = 4096
    x = np.arange(n, dtype=np.float32)
    configs = [tessera.Config({"BLOCK": b}) for b in (256, 1024)]
    # reset_to_zero: every benchmark run starts from zero, and so does the real launch.
    out = np.full(n, 7.0, np.float32)
    tuned = tessera.autotune(configs, key=["n"], reset_to_zero=["out_ptr"], use_disk_cache=False, warmup=1,
                             rep=3)(accumulate)
    tuned[_grid](x, out, n)
    np.testing.assert_array_equal(out, x)
    # restore_value: tuning leaves the argument as it was; only the real launch adds once.
    out2 = np.full(n, 7.0, np.float32)
    tuned2 = tessera.autotune(configs, key=["n"], restore_value=["out_ptr"], use_disk_cache=False, warmup=1,
                              rep=3)(accumulate)
    tuned2[_grid](x, out2, n)
    np.testing.assert_array_equal(out2, x + 7)


_CHILD = textwrap.dedent(r"""
    import sys, numpy as np, tessera, tessera.language as tl
    sys.path.insert(0, {here!r})
    import test_autotune as T
    calls = []
    def bench(fn):
        fn()
        calls.append(1)
        return [2.0, 1.0, 3.0][len(calls) - 1]          # ms of BLOCK 256, 1024, 4096
    configs = [tessera.Config({{"BLOCK": b, "SLOW": 0}}) for b in (256, 1024, 4096)]
    tuned = tessera.autotune(configs, key=["n"], do_bench=bench)(T._add_kernel())
    n = 5000
    x = np.ones(n, np.float32); out = np.zeros(n, np.float32)
    tuned[T._grid](x, x, out, n)
    assert (out == 2).all()
    print("benchmarked", len(calls), "best", tuned.best_config.kwargs["BLOCK"])
""")


def test_disk_cache_is_reused_by_a_new_process(tmp_path):
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, TESSERA_CACHE_DIR=str(tmp_path / "cache"), TESSERA_AUTOTUNE_VERBOSE="1")
    script = _CHILD.format(here=here)
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "benchmarked 3 best 1024" in first.stdout
    assert "benchmarking 3 config(s)" in first.stderr and "[2/3] BLOCK: 1024" in first.stderr
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert "benchmarked 0 best 1024" in second.stdout
    assert "from the disk cache" in second.stderr and "benchmarking" not in second.stderr
    # The entry is listed by `tessera cache list` under the kernel's name.
    listing = subprocess.run([sys.executable, "-m", "tessera", "cache", "list"], env=env, capture_output=True,
                             text=True, timeout=120)
    assert "autotune:add" in listing.stdout
    # Another CPU (a different key for the timing) does not reuse it.
    third = subprocess.run([sys.executable, "-c", script], env=dict(env, TESSERA_CPU="haswell"),
                           capture_output=True, text=True, timeout=300)
    assert third.returncode == 0, third.stderr
    assert "benchmarked 3 best 1024" in third.stdout


def test_verbose_flag_prints_progress(data, capsys):
    x, y, out, n = data
    configs = [tessera.Config({"BLOCK": b, "SLOW": 0}) for b in (512, 1024)]
    tuned = tessera.autotune(configs, key=["n"], use_disk_cache=False, warmup=1, rep=2,
                             print_autotune_stats=True)(_add_kernel())
    tuned[_grid](x, y, out, n)
    err = capsys.readouterr().err
    assert "[tessera.autotune] kernel add, key (65536,): benchmarking 2 config(s)" in err
    assert "[1/2] BLOCK: 512" in err and "best BLOCK:" in err


def test_config_repr_and_equality():
    c = tessera.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=8, num_stages=2)
    assert repr(c) == "BLOCK_M: 64, BLOCK_N: 32, num_warps: 8, num_stages: 2"
    assert c == tessera.Config({"BLOCK_N": 32, "BLOCK_M": 64}, num_warps=8, num_stages=2)
    assert c != tessera.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=2)
    with pytest.raises(TypeError):
        tessera.Config(64)


@pytest.mark.gpu
@pytest.mark.skipif(not _C.cuda_available(), reason="no CUDA device")
def test_autotune_on_gpu_arrays():
    """On GPU arguments the configs are timed with CUDA events and the slow one loses."""
    n = 1 << 20
    x = tessera.from_numpy(np.ones(n, np.float32), device="cuda:0")
    out = tessera.from_numpy(np.zeros(n, np.float32), device="cuda:0")
    fast = tessera.Config({"BLOCK": 1024, "SLOW": 0}, num_warps=4)
    slow = tessera.Config({"BLOCK": 1024, "SLOW": 2000}, num_warps=4)
    tuned = tessera.autotune([slow, fast], key=["n"], use_disk_cache=False, warmup=5, rep=20)(_add_kernel())
    tuned[_grid](x, x, out, n)
    assert tuned.best_config == fast
    np.testing.assert_array_equal(out.numpy(), np.full(n, 2.0, np.float32))


def test_numpy_scalar_key_is_its_value(data):
    x, y, out, n = data
    calls = []

    def bench(fn):
        fn()
        calls.append(1)
        return 1.0

    tuned = tessera.autotune([tessera.Config({"BLOCK": 1024, "SLOW": 0})], key=["n"], use_disk_cache=False,
                             do_bench=bench)(_add_kernel())
    tuned[_grid](x, y, out, np.int64(n))
    tuned[_grid](x, y, out, n)                  # the same key as np.int64(n)
    tuned[_grid](x[:10], y[:10], out[:10], np.int32(10))
    assert len(calls) == 2
    assert set(tuned.cache) == {(n, "cpu"), (10, "cpu")}


def test_config_takes_tritons_num_ctas_and_maxnreg(data):
    """Config(kwargs, num_warps, num_stages, num_ctas, maxnreg) as in Triton: maxnreg tells
    configs apart and reaches the launch (a GPU option: on the CPU it changes nothing)."""
    x, y, out, n = data
    capped = tessera.Config({"BLOCK": 1024, "SLOW": 0}, num_warps=4, num_stages=3, num_ctas=1, maxnreg=64)
    plain = tessera.Config({"BLOCK": 1024, "SLOW": 0})
    assert capped != plain and "maxnreg: 64" in repr(capped) and "maxnreg" not in repr(plain)
    tuned = tessera.autotune([capped, plain], key=["n"], use_disk_cache=False, warmup=1, rep=3)(_add_kernel())
    tuned[_grid](x, y, out, n)
    np.testing.assert_allclose(out, x + y, rtol=1e-6)
    assert set(tuned.configs_timings) == {capped, plain}
    bad = tessera.autotune([tessera.Config({"BLOCK": 1024, "SLOW": 0}, maxnreg=4)], key=["n"],
                           use_disk_cache=False, warmup=1, rep=3)(_add_kernel())
    with pytest.raises(ValueError, match="kernel add: maxnreg must be an integer from 16 to 255"):
        bad[_grid](x, y, out, n)
