"""The `tessera` command line (python -m tessera), run as a subprocess: cache
list/clear/info, and dump of every compiler stage with its error cases (exit codes,
one-line messages, never a traceback)."""
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FRONTEND = os.path.join(ROOT, "frontend")

KERNELS = textwrap.dedent('''
    import tessera
    import tessera.language as tl

    @tessera.kernel
    def add(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)

    @tessera.kernel
    def scale(x, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x + offs, tl.load(x + offs, mask=offs < n) * 2.0, mask=offs < n)

    def not_a_kernel():
        pass

    if __name__ == "__main__":
        raise SystemExit("the CLI must import this file as a module, not run it")
''')

ADD_ARGS = ["--signature", "*fp32,*fp32,*fp32,i32", "--constexpr", "BLOCK=1024"]


@pytest.fixture
def env(tmp_path):
    e = dict(os.environ)
    e["PYTHONPATH"] = FRONTEND + os.pathsep + e.get("PYTHONPATH", "")
    e["TESSERA_CACHE_DIR"] = str(tmp_path / "cache")
    return e


@pytest.fixture
def kfile(tmp_path):
    path = tmp_path / "kernels.py"
    path.write_text(KERNELS)
    return str(path)


def tessera(env, *args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tessera", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def assert_clean_error(r, code, *needles):
    """Exit `code`, a `tessera: error:` message naming each needle, no traceback."""
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("tessera: error: "), r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


# --- dump ------------------------------------------------------------------------------

@pytest.mark.parametrize("stage,needle", [
    ("tir", "kernel @add("), ("tir-opt", "kernel @add("), ("llir", "define"), ("llir-opt", "define"),
    ("asm", ".text"),
])
def test_dump_each_cpu_stage(env, kfile, stage, needle):
    r = tessera(env, "dump", f"{kfile}:add", *ADD_ARGS, "--target", "cpu", "--stage", stage)
    assert r.returncode == 0, r.stderr
    assert needle in r.stdout
    assert r.stderr == ""


def test_dump_default_stage_is_asm_and_single_kernel_needs_no_name(env, tmp_path):
    path = tmp_path / "one.py"
    path.write_text(KERNELS.split("@tessera.kernel\ndef scale")[0])
    r = tessera(env, "dump", str(path), *ADD_ARGS)
    assert r.returncode == 0, r.stderr
    assert ".text" in r.stdout


def test_dump_relative_path_and_sibling_imports(env, tmp_path):
    (tmp_path / "helpers_mod.py").write_text("FACTOR = 3.0\n")
    (tmp_path / "uses_sibling.py").write_text(KERNELS.replace("import tessera\n", "import tessera\nimport helpers_mod\n", 1))
    r = tessera(env, "dump", "uses_sibling.py:scale", "-s", "*fp32,i32", "-c", "BLOCK=16", "--stage", "tir",
                cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "kernel @scale(" in r.stdout


def test_dump_constexpr_values_reach_the_compiler(env, kfile):
    r = tessera(env, "dump", f"{kfile}:add", "-s", "*fp32,*fp32,*fp32,i32", "-c", "BLOCK=256", "--stage", "tir")
    assert r.returncode == 0, r.stderr
    assert "tile<256x" in r.stdout and "tile<1024x" not in r.stdout


@pytest.mark.parametrize("target", ["sm_90a", "cuda:90a", "sm_80"])
def test_dump_gpu_target_prints_ptx(env, kfile, target):
    r = tessera(env, "dump", f"{kfile}:add", *ADD_ARGS, "--target", target, "--stage", "ptx")
    assert r.returncode == 0, r.stderr
    assert ".version" in r.stdout and ".entry add" in r.stdout


def test_dump_unknown_stage_lists_the_stages(env, kfile):
    r = tessera(env, "dump", f"{kfile}:add", *ADD_ARGS, "--stage", "sass")
    assert_clean_error(r, 2, "'sass'", "tir, tir-opt, llir, llir-opt, asm, ptx")


def test_dump_ptx_on_cpu_lists_the_available_stages(env, kfile):
    r = tessera(env, "dump", f"{kfile}:add", *ADD_ARGS, "--stage", "ptx")
    assert_clean_error(r, 2, "'ptx'", "available: tir, tir-opt, llir, llir-opt, asm")


@pytest.mark.parametrize("spec,needles", [
    ("{f}:nope", ["'nope'", "not found", "add, scale"]),
    ("{f}:not_a_kernel", ["not a @tessera.kernel"]),
    ("{f}", ["name the kernel", "add, scale"]),
    ("{d}/missing.py:add", ["no such file"]),
])
def test_dump_bad_file_or_kernel(env, kfile, spec, needles):
    r = tessera(env, "dump", spec.format(f=kfile, d=os.path.dirname(kfile)), *ADD_ARGS)
    assert_clean_error(r, 2, *needles)


@pytest.mark.parametrize("args,needles", [
    (["-s", "*fp32,i32", "-c", "BLOCK=1024"], ["signature lists 2 types", "kernel add"]),
    (["-s", "*fp99,*fp32,*fp32,i32", "-c", "BLOCK=1024"], ["unknown type"]),
    (["-s", "*fp32,*fp32,*fp32,i32"], ["BLOCK"]),
    (["-s", "*fp32,*fp32,*fp32,i32", "-c", "BLOCK"], ["NAME=VALUE"]),
    (["-s", "*fp32,*fp32,*fp32,i32", "-c", "BLOCK=1024", "--target", "tpu"], ["unknown target 'tpu'"]),
    ([], ["--signature"]),
])
def test_dump_bad_command_line(env, kfile, args, needles):
    r = tessera(env, "dump", f"{kfile}:add", *args)
    assert_clean_error(r, 2, *needles)


def test_dump_compile_error_shows_the_source_line(env, kfile):
    r = tessera(env, "dump", f"{kfile}:add", "-s", "*fp32,*fp32,*fp32,i32", "-c", "BLOCK=1000")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "power of 2" in r.stderr and "tl.arange(0, BLOCK)" in r.stderr and "^" in r.stderr


def test_dump_import_failure_is_one_line(env, tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("import tessera\nraise RuntimeError('boom at import')\n")
    r = tessera(env, "dump", f"{bad}:k", *ADD_ARGS)
    assert_clean_error(r, 1, "importing", "RuntimeError: boom at import")


def test_unknown_command_and_version(env):
    assert_clean_error(tessera(env, "frobnicate"), 2, "frobnicate")
    assert_clean_error(tessera(env, "cache", "purge"), 2, "purge")
    r = tessera(env, "--version")
    assert r.returncode == 0 and r.stdout.startswith("tessera ")


# --- cache -----------------------------------------------------------------------------

RUN_KERNEL = textwrap.dedent('''
    import sys, numpy as np
    sys.path.insert(0, {dir!r})
    from kernels import add
    x = np.arange(100, dtype=np.float32); out = np.empty_like(x)
    add[(1,)](x, x, out, 100, BLOCK=128)
    assert np.array_equal(out, 2 * x)
''')


def test_cache_list_info_clear(env, kfile, tmp_path):
    r = tessera(env, "cache", "info")
    assert r.returncode == 0, r.stderr
    assert str(tmp_path / "cache") in r.stdout and "entries:            0" in r.stdout
    assert "no entries" in tessera(env, "cache", "list").stdout

    run = subprocess.run([sys.executable, "-c", RUN_KERNEL.format(dir=os.path.dirname(kfile))],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr

    listed = tessera(env, "cache", "list")
    assert listed.returncode == 0, listed.stderr
    rows = listed.stdout.strip().splitlines()
    assert rows[0].split() == ["KEY", "KERNEL", "SIZE", "AGE"]
    assert len(rows) == 2
    key, name = rows[1].split()[:2]
    assert len(key) == 32 and name == "add"
    assert (tmp_path / "cache" / key[:2] / f"{key}.tcache").is_file()

    info = tessera(env, "cache", "info").stdout
    sys.path.insert(0, FRONTEND)
    from tessera._core import _C
    assert "entries:            1" in info
    assert _C.build_id() in info and _C.host_cpu_name() in info and "+avx" in info

    cleared = tessera(env, "cache", "clear")
    assert cleared.returncode == 0 and "removed 1 entry" in cleared.stdout
    assert "no entries" in tessera(env, "cache", "list").stdout


def test_cache_dir_option_overrides_env(env, tmp_path):
    other = tmp_path / "other"
    r = tessera(env, "cache", "info", "--dir", str(other))
    assert r.returncode == 0 and str(other) in r.stdout


def test_cache_list_marks_corrupt_entries(env, tmp_path):
    shard = tmp_path / "cache" / "ab"
    shard.mkdir(parents=True)
    (shard / ("ab" * 16 + ".tcache")).write_bytes(b"not a cache entry")
    r = tessera(env, "cache", "list")
    assert r.returncode == 0 and "<corrupt>" in r.stdout
