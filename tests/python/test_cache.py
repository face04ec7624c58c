"""The disk cache seen from outside: reuse across processes, concurrent compiles of one
kernel, corrupt entries rebuilt, failures and killed compiles never cached, what
changes the key, and the warm first launch of a new process."""
import glob
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tessera
import tessera.language as tl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FRONTEND = os.path.join(ROOT, "frontend")

KERNEL_MODULE = textwrap.dedent('''
    import tessera
    import tessera.language as tl

    @tessera.kernel
    def add(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)
''')

# Runs `add` once and prints {"from_cache", "ok", "first_ms"} as JSON. With a file
# name in argv[2], waits until that file exists before launching (a start barrier).
CHILD = textwrap.dedent('''
    import json, os, sys, time
    import numpy as np
    import tessera
    sys.path.insert(0, sys.argv[1])
    from kmod import add
    x = np.arange(5000, dtype=np.float32); y = np.full_like(x, 0.5); out = np.zeros_like(x)
    if len(sys.argv) > 2:
        while not os.path.exists(sys.argv[2]):
            time.sleep(0.001)
    t = time.perf_counter()
    ck = add[(tessera.cdiv(x.size, 1024),)](x, y, out, x.size, BLOCK=1024)
    ms = (time.perf_counter() - t) * 1e3
    print(json.dumps({"from_cache": ck.from_cache, "ok": bool(np.array_equal(out, x + y)),
                      "first_ms": ms, "key": ck.cache_key}))
''')


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "kmod.py").write_text(KERNEL_MODULE)
    (tmp_path / "child.py").write_text(CHILD)
    return tmp_path


def child_env(cache_dir):
    e = dict(os.environ)
    e["PYTHONPATH"] = FRONTEND + os.pathsep + e.get("PYTHONPATH", "")
    e["TESSERA_CACHE_DIR"] = str(cache_dir)
    e.pop("PYTHONDONTWRITEBYTECODE", None)  # warm start is measured as users see it
    return e


def run_child(workdir, cache_dir, *extra):
    r = subprocess.run([sys.executable, str(workdir / "child.py"), str(workdir), *extra],
                       env=child_env(cache_dir), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def entries(cache_dir):
    return sorted(glob.glob(os.path.join(str(cache_dir), "??", "*.tcache")))


def temporaries(cache_dir):
    return sorted(glob.glob(os.path.join(str(cache_dir), "??", "*.tmp")))


def test_second_process_reuses_the_entry(workdir, tmp_path):
    cache = tmp_path / "cache"
    first = run_child(workdir, cache)
    assert first["ok"] and not first["from_cache"]
    assert len(entries(cache)) == 1
    second = run_child(workdir, cache)
    assert second["ok"] and second["from_cache"]
    assert second["key"] == first["key"]


def test_concurrent_processes_compile_the_same_kernel(workdir, tmp_path):
    cache, go = tmp_path / "cache", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, str(workdir / "child.py"), str(workdir), str(go)],
                              env=child_env(cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    time.sleep(1.0)  # let them import; they then start compiling at once
    go.write_text("go")
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["ok"] for r in results)
    assert len({r["key"] for r in results}) == 1
    assert len(entries(cache)) == 1 and temporaries(cache) == []
    assert run_child(workdir, cache)["from_cache"]


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "garbage"])
def test_corrupt_entry_is_rebuilt(workdir, tmp_path, damage):
    cache = tmp_path / "cache"
    assert not run_child(workdir, cache)["from_cache"]
    [path] = entries(cache)
    good = open(path, "rb").read()
    bad = bytearray(good)
    if damage == "flip":
        for i in range(len(bad) // 3, len(bad) // 3 + 8):
            bad[i] ^= 0xFF
    elif damage == "truncate":
        bad = bad[: len(bad) // 2]
    elif damage == "empty":
        bad = b""
    else:
        bad = os.urandom(len(good))
    with open(path, "wb") as f:
        f.write(bytes(bad))

    again = run_child(workdir, cache)
    assert again["ok"] and not again["from_cache"], "a damaged entry must be rebuilt, never trusted"
    assert entries(cache) == [path]
    assert open(path, "rb").read() == good  # rewritten (the compiler is deterministic)
    assert run_child(workdir, cache)["from_cache"]


@tessera.kernel
def bad_arange(x, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)  # BLOCK=1000 is not a power of two
    tl.store(x + offs, tl.load(x + offs))


def test_compile_failure_is_not_cached(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(cache))
    x = np.zeros(1024, np.float32)
    for _ in range(2):  # the second attempt compiles again and fails the same way
        with pytest.raises(tessera.CompilationError, match="power of 2"):
            bad_arange[(1,)](x, BLOCK=1000)
    assert entries(cache) == [] and temporaries(cache) == []
    bad_arange[(1,)](x, BLOCK=1024)  # the kernel itself is fine with a good constexpr
    assert len(entries(cache)) == 1


HUGE = textwrap.dedent('''
    import sys, numpy as np, tessera, tessera.language as tl

    @tessera.kernel
    def huge(x, out, N: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        acc = tl.load(x + offs)
        for i in tl.static_range(N):
            acc = acc * 1.0001 + tl.load(x + offs + (i % 7))
        tl.store(out + offs, acc)

    x = np.ones(72, np.float32); out = np.zeros(64, np.float32)
    print("compiling", flush=True)
    ck = huge[(1,)](x, out, N=int(sys.argv[1]), BLOCK=64)
    print("done", ck.from_cache, flush=True)
''')


# 4000 unrolled steps take ~1 s of Python code generation then ~1.5 s of LLVM on an
# idle 2-core machine: the kills land in each phase (or later on a slower machine).
@pytest.mark.parametrize("kill_after_s", [0.3, 1.5])
def test_killed_compile_leaves_no_partial_entry(tmp_path, kill_after_s):
    cache = tmp_path / "cache"
    script = tmp_path / "huge.py"
    script.write_text(HUGE)
    p = subprocess.Popen([sys.executable, str(script), "4000"], env=child_env(cache),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "compiling"
    time.sleep(kill_after_s)
    if p.poll() is not None:
        pytest.skip("the compile finished before the kill; this machine is too fast for this unroll")
    os.kill(p.pid, signal.SIGKILL)
    p.communicate(timeout=60)
    if p.returncode == 0:  # it finished between poll() and the kill
        pytest.skip("the compile finished before the kill landed")
    assert p.returncode == -signal.SIGKILL
    # The kill may land before the entry is written (no entry) or, on a fast machine,
    # just after its atomic rename (a complete entry). Never a partial one: only
    # temporaries, which are never read.
    killed_after_write = entries(cache) != []
    for t in temporaries(cache):  # a write cut short: never read, removed by `cache clear`
        assert t.endswith(".tmp")
    done = subprocess.run([sys.executable, str(script), "4000"], env=child_env(cache),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["compiling", "done", str(killed_after_write)]
    assert len(entries(cache)) == 1


# --- the key ---------------------------------------------------------------------------

VARIANT = textwrap.dedent('''
    import tessera
    import tessera.language as tl

    @tessera.jit
    def helper(v):
        return v * {helper_factor}

    @tessera.kernel
    def k(x, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        m = offs < n
        tl.store(x + offs, helper(tl.load(x + offs, mask=m)) + {kernel_term}, mask=m)
''')


def _key_of(tmp_path, name, helper_factor="2.0", kernel_term="1.0", signature="*fp32,i32", block=128):
    import importlib.util
    path = tmp_path / f"{name}.py"
    path.write_text(VARIANT.format(helper_factor=helper_factor, kernel_term=kernel_term))
    # One module name for every variant: the key includes it, and only the input
    # under test may differ.
    spec = importlib.util.spec_from_file_location("variant", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return tessera.compile(mod.k, signature=signature, constexprs={"BLOCK": block}).cache_key


def test_key_changes_with_every_input(tmp_path):
    base = _key_of(tmp_path, "base")
    assert _key_of(tmp_path, "same") == base, "identical source and specialization: same key"
    changed = {
        "kernel source": _key_of(tmp_path, "ksrc", kernel_term="3.0"),
        "helper source": _key_of(tmp_path, "hsrc", helper_factor="4.0"),
        "constexpr": _key_of(tmp_path, "cexpr", block=256),
        "pointer dtype": _key_of(tmp_path, "dtype", signature="*fp64,i32"),
        "scalar dtype": _key_of(tmp_path, "sdtype", signature="*fp32,i64"),
    }
    for what, key in changed.items():
        assert key != base, f"changing the {what} must change the key"
    assert len(set(changed.values())) == len(changed)


def test_launch_key_changes_with_dtype_and_constexpr(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(cache))
    (tmp_path / "kmod.py").write_text(KERNEL_MODULE)
    import importlib.util
    spec = importlib.util.spec_from_file_location("kmod_launch", tmp_path / "kmod.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    keys = set()
    for dt in (np.float32, np.float64, np.int32):
        for block in (64, 128):
            x = np.arange(100).astype(dt)
            out = np.zeros_like(x)
            keys.add(mod.add[(tessera.cdiv(100, block),)](x, x, out, 100, BLOCK=block).cache_key)
            np.testing.assert_array_equal(out, x + x)
    assert len(keys) == 6 and len(entries(cache)) == 6


# --- warm start ------------------------------------------------------------------------

def test_warm_first_launch_in_a_new_process(workdir, tmp_path):
    """The first launch of a cached kernel in a fresh process (imports excluded). The
    target (<10 ms) is measured by the benchmark; this only guards against regressions
    to "recompiles every run"."""
    cache = tmp_path / "cache"
    cold = run_child(workdir, cache)
    warm = [run_child(workdir, cache) for _ in range(3)]
    assert all(w["from_cache"] and w["ok"] for w in warm)
    best = min(w["first_ms"] for w in warm)
    print(f"\ncold first launch {cold['first_ms']:.1f} ms, warm first launch {best:.1f} ms")
    assert best < 200


def test_closure_kernels_of_one_factory_launch_with_their_own_values(tmp_path, monkeypatch):
    """One code object, different cells: different kernels, in memory and in the disk cache."""
    import tessera.language as tl
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))

    def make(value):
        @tessera.kernel
        def k(o_ptr):
            tl.store(o_ptr, value)
        return k

    for value in (10, 20, 10, 30):
        o = np.zeros(1, np.int32)
        make(value)[(1,)](o)
        assert o[0] == value
