"""Host time of a cached tiny launch taking torch CUDA tensors, in one run: Tessera
reading the tensors and torch's current stream in C++ (_C_torch) and through Python
attributes (the path without it), torch's own add_, Triton on the same kernel source
(bench/gpu_kernels.py), and the C floor (cuLaunchKernel of an empty kernel alone,
bench/launch/launch_floor.c) before and after, and the same C loop inside this process
(bench/launch/launch_loop.c) on an empty kernel and on Tessera's compiled tiny_kernel.
On the GPU host:
    python3 bench/launch/launch_native.py --out DIR   (writes DIR/launch_native.{md,json})
Each Python row is the loop of bench_gpu.py's launch row (2000 back-to-back calls,
then one synchronize), repeated round-robin; best and median over the rounds."""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

import bench_gpu  # noqa: E402  (Triton's copy of the kernels, host_us)
import gpu_kernels as TK  # noqa: E402
from tessera import _torch_native as native  # noqa: E402
from tessera._core import _C  # noqa: E402


def c_floor():
    """us per cuLaunchKernel on the legacy stream, n = 5000 (two lines of launch_floor.c)."""
    exe = os.path.join(tempfile.mkdtemp(prefix="tessera-floor-"), "floor")
    cc = subprocess.run(["cc", "-O2", os.path.join(HERE, "launch_floor.c"), "-o", exe, "-ldl"],
                        capture_output=True, text=True)
    if cc.returncode:
        return None, cc.stderr[-300:]
    out = subprocess.run([exe], capture_output=True, text=True, timeout=120).stdout
    legacy = [float(v) for v in re.findall(r"legacy default stream 0.*n= 5000\s+([\d.]+)", out)]
    return (min(legacy) if legacy else None), out


NOP_PTX = b""".version 7.0
.target sm_50
.address_size 64
.visible .entry nop(.param .u64 p) { ret; }
\0"""


def in_process_loops(ck, arg):
    """{row name: () -> us} for launch_loop.c's C loop in this process, or {} (why printed)."""
    lib_path = os.path.join(tempfile.mkdtemp(prefix="tessera-loop-"), "loop.so")
    cc = subprocess.run(["cc", "-O2", "-shared", "-fPIC", os.path.join(HERE, "launch_loop.c"), "-o", lib_path, "-ldl"],
                        capture_output=True, text=True)
    if cc.returncode:
        print("launch_loop.c did not build:", cc.stderr[-300:])
        return {}
    lib = ctypes.CDLL(lib_path)
    lib.loop_us.restype = ctypes.c_double
    lib.loop_us.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_uint64]
    if lib.loop_init():
        print("launch_loop.c: no libcuda")
        return {}
    rows = {}
    for name, image, entry, threads in (("empty kernel (32 threads)", NOP_PTX, b"nop", 32),
                                        ("Tessera's compiled tiny_kernel", bytes(ck.binary) + b"\0",
                                         ck.entry_symbol.encode(), 32 * int(ck.metadata.get("num_warps", 4)))):
        fn = ctypes.c_void_p()
        r = lib.loop_load(image, entry, ctypes.byref(fn))
        if r:
            print(f"launch_loop.c: loading {name} failed with CUresult {r}")
            continue
        rows[f"C loop in this process: {name}"] = (lambda f=fn, t=threads: lib.loop_us(f, t, 2000, arg))
    return rows


class AttributePath:
    """Within it, torch tensors are read through Python attributes (no _C_torch)."""

    def __enter__(self):
        _C._install_torch_args(None, None)

    def __exit__(self, *exc):
        native.install()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(HERE), "results"))
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    TR = bench_gpu.load_triton_kernels()
    host_us = bench_gpu.host_us
    tiny = torch.zeros(16, device="cuda")
    x, y, out = (torch.rand(1024, device="cuda") for _ in range(3))
    k, add = TK.tiny_kernel, TK.add_kernel
    floor_start, floor_log = c_floor()
    k[(1,)](tiny, BLOCK=16)
    loops = in_process_loops(next(iter(k._compiled.values())), tiny.data_ptr())

    rows = {  # name -> (fn, reader); reader "C": fn returns its own sample
        **{name: (fn, "C") for name, fn in loops.items()},
        "tessera tiny_kernel[(1,)](t, BLOCK=16), C++ torch reader": (lambda: k[(1,)](tiny, BLOCK=16), "native"),
        "tessera tiny_kernel, attribute reads": (lambda: k[(1,)](tiny, BLOCK=16), "attr"),
        "tessera tiny_kernel, stream=0, C++ torch reader": (lambda: k[(1,)](tiny, BLOCK=16, stream=0), "native"),
        "tessera add_kernel[(1,)](x, y, out, n), C++ torch reader": (
            lambda: add[(1,)](x, y, out, 1024, BLOCK=1024), "native"),
        "tessera add_kernel, attribute reads": (lambda: add[(1,)](x, y, out, 1024, BLOCK=1024), "attr"),
        # An empty grid: the whole path (binding, key, packing) but the stream and the driver call.
        "tessera tiny_kernel[(0,)], C++ torch reader (no driver call)": (lambda: k[(0,)](tiny, BLOCK=16), "native"),
        "tessera tiny_kernel[(0,)], attribute reads (no driver call)": (lambda: k[(0,)](tiny, BLOCK=16), "attr"),
        "torch tiny.add_(1.0)": (lambda: tiny.add_(1.0), None),
        "python loop (lambda: None)": (lambda: None, None),
    }
    if TR is not None:
        rows["triton tiny_kernel[(1,)](t, BLOCK=16)"] = (lambda: TR.tiny_kernel[(1,)](tiny, BLOCK=16), None)
        rows["triton add_kernel[(1,)](x, y, out, n)"] = (
            lambda: TR.add_kernel[(1,)](x, y, out, 1024, BLOCK=1024), None)
    samples = {name: [] for name in rows}
    before = native.stats()
    for _ in range(args.rounds):
        for name, (fn, reader) in rows.items():
            if reader == "attr":
                with AttributePath():
                    samples[name].append(host_us(fn))
            elif reader == "C":
                samples[name].append(fn())
            else:
                samples[name].append(host_us(fn))
    after = native.stats()
    floor_end, _ = c_floor()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x + y)
    assert k._fast_path_size() == 1 and add._fast_path_size() == 1, "a row did not run from the C++ launch path"

    dev = torch.cuda.get_device_name()
    res = {"device": dev, "torch": str(torch.__version__), "reader": native.state(),
           "reads": {key: after[key] - before[key] for key in after},
           "c_floor_us": [floor_start, floor_end],
           "rows": {n: {"best": min(v), "median": statistics.median(v)} for n, v in samples.items()}}
    floor = min(f for f in (floor_start, floor_end) if f is not None) if (floor_start or floor_end) else None
    lines = [f"# Cached tiny launch, host time — {dev}", "",
             f"Generated by `python bench/launch/launch_native.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())};"
             f" torch {torch.__version__}, Triton {getattr(bench_gpu.triton, '__version__', 'absent')}.", "",
             f"C++ torch reader: {native.state()}; reads during the rows: {res['reads']}.", "",
             "| per call, us | best | median | best minus the C floor |", "|---|---|---|---|"]
    for n, v in res["rows"].items():
        over = f"{v['best'] - floor:+.2f}" if floor is not None and not n.startswith("python") else ""
        lines.append(f"| {n} | {v['best']:.2f} | {v['median']:.2f} | {over} |")
    lines += ["", f"C floor (cuLaunchKernel of an empty kernel, legacy stream, n = 5000, bench/launch/launch_floor.c): "
              f"{floor_start} us before the rows, {floor_end} us after.", "",
              f"{args.rounds} rounds, round-robin; each sample is 2000 back-to-back launches then one synchronize."]
    md = "\n".join(lines) + "\n"
    print(md)
    print(floor_log)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "launch_native.md"), "w") as fh:
        fh.write(md)
    with open(os.path.join(args.out, "launch_native.json"), "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
