// Host cost of cuLaunchKernel alone (an empty kernel) on different streams: the floor
// under any launch path. On the GPU host: gcc -O2 bench/launch/launch_floor.c -ldl && ./a.out
#include <dlfcn.h>
#include <stdio.h>
#include <stdint.h>
#include <time.h>
typedef int CUresult; typedef void* P;
static const char* PTX = ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry nop(.param .u64 p) { ret; }\n";
static double now() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  CUresult (*cuInit)(unsigned) = dlsym(h, "cuInit");
  CUresult (*cuDeviceGet)(int*, int) = dlsym(h, "cuDeviceGet");
  CUresult (*retain)(P*, int) = dlsym(h, "cuDevicePrimaryCtxRetain");
  CUresult (*setcur)(P) = dlsym(h, "cuCtxSetCurrent");
  CUresult (*getcur)(P*) = dlsym(h, "cuCtxGetCurrent");
  CUresult (*load)(P*, const void*) = dlsym(h, "cuModuleLoadData");
  CUresult (*getfn)(P*, P, const char*) = dlsym(h, "cuModuleGetFunction");
  CUresult (*launch)(P, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, P, void**, void**) = dlsym(h, "cuLaunchKernel");
  CUresult (*launch_ptsz)(P, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, P, void**, void**) = dlsym(h, "cuLaunchKernel_ptsz");
  CUresult (*sync)(void) = dlsym(h, "cuCtxSynchronize");
  CUresult (*screate)(P*, unsigned) = dlsym(h, "cuStreamCreate");
  CUresult (*sync_stream)(P) = dlsym(h, "cuStreamSynchronize");
  int dev; P ctx, mod, fn, s_nb, s_b;
  cuInit(0); cuDeviceGet(&dev, 0); retain(&ctx, dev); setcur(ctx);
  printf("load %d\n", load(&mod, PTX)); printf("getfn %d\n", getfn(&fn, mod, "nop"));
  screate(&s_nb, 1); screate(&s_b, 0);
  uint64_t arg = 0; void* params[1] = {&arg};
  struct { const char* name; P stream; int ptsz; } cases[] = {
    {"legacy default stream 0", 0, 0}, {"CU_STREAM_PER_THREAD (0x2)", (P)2, 0}, {"cuLaunchKernel_ptsz stream 0", 0, 1},
    {"created non-blocking stream", s_nb, 0}, {"created blocking stream", s_b, 0}, {"legacy default stream 0 (again)", 0, 0}};
  for (int c = 0; c < 6; ++c) {
    for (int n = 200; n <= 5000; n *= 25) {
      sync();
      double t = now();
      for (int i = 0; i < n; ++i) {
        if (cases[c].ptsz) launch_ptsz(fn, 1, 1, 1, 32, 1, 1, 0, cases[c].stream, params, 0);
        else launch(fn, 1, 1, 1, 32, 1, 1, 0, cases[c].stream, params, 0);
      }
      double dt = (now() - t) / n * 1e6;
      sync();
      printf("%-34s n=%5d %6.2f us/launch\n", cases[c].name, n, dt);
    }
  }
  double t = now(); P cur; for (int i = 0; i < 100000; ++i) getcur(&cur);
  printf("cuCtxGetCurrent %.3f us\n", (now() - t) / 100000 * 1e6);
  return 0;
}
