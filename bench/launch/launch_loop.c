// The launch floor inside the benchmark's own process: cuLaunchKernel in a C loop,
// with whatever context is current there (torch's). launch_native.py builds it as a
// shared library (cc -O2 -shared -fPIC launch_loop.c -ldl) and calls it through ctypes
// once per sample, so Python costs nothing per launch. Next to the separate C process
// of launch_floor.c it shows what the process (torch loaded, its context) adds, and
// with Tessera's own compiled kernel, what the kernel itself costs the driver.
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef void* P;
static CUresult (*load)(P*, const void*);
static CUresult (*getfn)(P*, P, const char*);
static CUresult (*launch)(P, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, P, void**, void**);
static CUresult (*sync)(void);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// 0 on success. Call with a current context (after any torch CUDA call).
int loop_init(void) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) return 1;
  load = (CUresult(*)(P*, const void*))dlsym(h, "cuModuleLoadData");
  getfn = (CUresult(*)(P*, P, const char*))dlsym(h, "cuModuleGetFunction");
  launch = (CUresult(*)(P, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, P, void**,
                        void**))dlsym(h, "cuLaunchKernel");
  sync = (CUresult(*)(void))dlsym(h, "cuCtxSynchronize");
  return !(load && getfn && launch && sync);
}

// Loads a module image (PTX text NUL-terminated, or a cubin) and returns its function `name`.
int loop_load(const void* image, const char* name, P* fn) {
  P mod;
  CUresult r = load(&mod, image);
  return r ? r : getfn(fn, mod, name);
}

// us per launch of `fn` (grid 1, `threads` threads, one 8-byte argument) over n
// back-to-back launches on the legacy stream, timed before the final synchronize
// (as bench_gpu.py's host_us); negative on a launch error.
double loop_us(P fn, unsigned threads, int n, uint64_t arg) {
  void* params[1] = {&arg};
  sync();
  double t = now();
  for (int i = 0; i < n; ++i)
    if (launch(fn, 1, 1, 1, threads, 1, 1, 0, 0, params, 0)) return -1.0;
  double dt = (now() - t) / n * 1e6;
  sync();
  return dt;
}
