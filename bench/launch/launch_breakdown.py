# Where the host time of a cached tiny launch goes, piece by piece (run on the GPU
# host: python3 bench/launch/launch_breakdown.py; results: bench/results/launch_breakdown_h100.md).
import ctypes, os, sys, time
import torch, tessera
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gpu_kernels as TK
def host_us(fn, n=2000):
    fn(); torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n): fn()
    dt = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize(); return dt
tiny = torch.zeros(16, device="cuda")
ta = tessera.zeros(16, device="cuda")
k = TK.tiny_kernel
g = (1,)
rows = {}
for rep in range(2):
  rows["python loop (lambda: None)"] = host_us(lambda: None)
  rows["tessera tiny n=2000"] = host_us(lambda: k[g](tiny, BLOCK=16))
  rows["tessera tiny n=300"] = host_us(lambda: k[g](tiny, BLOCK=16), 300)
  rows["tessera tiny stream=0"] = host_us(lambda: k[g](tiny, BLOCK=16, stream=0))
  rows["tessera tiny tessera.Array"] = host_us(lambda: k[g](ta, BLOCK=16))
  rows["tessera tiny tessera.Array stream=0"] = host_us(lambda: k[g](ta, BLOCK=16, stream=0))
  rows["torch add_"] = host_us(lambda: tiny.add_(1.0))
  rows["torch add_ n=300"] = host_us(lambda: tiny.add_(1.0), 300)
  rows["k[g] only"] = host_us(lambda: k[g])
  rows["data_ptr"] = host_us(lambda: tiny.data_ptr())
  rows["get_device"] = host_us(lambda: tiny.get_device())
  rows["is_cuda"] = host_us(lambda: tiny.is_cuda)
  rows["dtype"] = host_us(lambda: tiny.dtype)
  raw = torch._C._cuda_getCurrentRawStream
  rows["raw stream getter"] = host_us(lambda: raw(0))
  cu = ctypes.CDLL("libcuda.so.1")
  c = ctypes.c_void_p()
  rows["ctypes cuCtxGetCurrent"] = host_us(lambda: cu.cuCtxGetCurrent(ctypes.byref(c)))
print("fast path size", k._fast_path_size())
for name, v in rows.items(): print(f"{name:40s} {v:7.2f} us")
# sync-free pure launch rate with cuLaunchKernel via ctypes on a trivial PTX kernel
PTX = b""".version 7.0
.target sm_50
.address_size 64
.visible .entry nop(.param .u64 p) { ret; }
"""
cu.cuCtxGetCurrent(ctypes.byref(c))
mod = ctypes.c_void_p(); cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(PTX))
fn = ctypes.c_void_p(); cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"nop")
p = ctypes.c_uint64(tiny.data_ptr()); params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(p), ctypes.c_void_p))
L = cu.cuLaunchKernel
for n in (300, 2000):
  print(f"ctypes cuLaunchKernel nop n={n}", round(host_us(lambda: L(fn, 1, 1, 1, 32, 1, 1, 0, None, params, None), n), 2))
