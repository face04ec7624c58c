// CUDA Driver API through dlopen("libcuda.so.1"): a table of the few entry points
// Tessera uses, primary contexts per device, module loading and launches. Every
// call is checked and a failure becomes a CudaError naming the call.
#include <dlfcn.h>

#include <map>
#include <mutex>
#include <vector>

#include "tessera/cuda_runtime.h"

namespace tessera::runtime::cuda {

namespace {

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
using CUevent = void*;

constexpr int kAttrComputeMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttrComputeMinor = 76;
constexpr int kFuncAttrMaxDynamicShared = 8;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

struct Driver {
  void* lib = nullptr;
  std::string error;
  CUresult (*cuInit)(unsigned);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadDataEx)(CUmodule*, const void*, unsigned, void*, void**);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuMemAlloc)(unsigned long long*, size_t);
  CUresult (*cuMemFree)(unsigned long long);
  CUresult (*cuMemcpyHtoD)(unsigned long long, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, unsigned long long, size_t);
  CUresult (*cuMemsetD8)(unsigned long long, unsigned char, size_t);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
  // Events (for timing): optional, looked up without failing the driver when absent.
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;
};

template <typename F>
bool sym(Driver& d, F& f, const char* name) {
  f = reinterpret_cast<F>(dlsym(d.lib, name));
  if (!f) d.error = std::string("libcuda has no ") + name;
  return f != nullptr;
}

Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    d.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!d.lib) {
      d.error = "the CUDA driver (libcuda.so.1) is not installed";
      return;
    }
    bool ok = sym(d, d.cuInit, "cuInit") && sym(d, d.cuGetErrorName, "cuGetErrorName") &&
              sym(d, d.cuGetErrorString, "cuGetErrorString") && sym(d, d.cuDeviceGetCount, "cuDeviceGetCount") &&
              sym(d, d.cuDeviceGet, "cuDeviceGet") && sym(d, d.cuDeviceGetName, "cuDeviceGetName") &&
              sym(d, d.cuDeviceGetAttribute, "cuDeviceGetAttribute") &&
              sym(d, d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
              sym(d, d.cuCtxSetCurrent, "cuCtxSetCurrent") && sym(d, d.cuCtxGetCurrent, "cuCtxGetCurrent") && sym(d, d.cuCtxSynchronize, "cuCtxSynchronize") &&
              sym(d, d.cuModuleLoadDataEx, "cuModuleLoadDataEx") &&
              sym(d, d.cuModuleGetFunction, "cuModuleGetFunction") &&
              sym(d, d.cuFuncSetAttribute, "cuFuncSetAttribute") && sym(d, d.cuLaunchKernel, "cuLaunchKernel") &&
              sym(d, d.cuMemAlloc, "cuMemAlloc_v2") && sym(d, d.cuMemFree, "cuMemFree_v2") &&
              sym(d, d.cuMemcpyHtoD, "cuMemcpyHtoD_v2") && sym(d, d.cuMemcpyDtoH, "cuMemcpyDtoH_v2") &&
              sym(d, d.cuMemsetD8, "cuMemsetD8_v2");
    if (!ok) {
      dlclose(d.lib);
      d.lib = nullptr;
      return;
    }
    // cuEventElapsedTime_v2 (CUDA 12.8+) replaces the original, which newer headers hide.
    d.cuEventCreate = reinterpret_cast<decltype(d.cuEventCreate)>(dlsym(d.lib, "cuEventCreate"));
    d.cuEventRecord = reinterpret_cast<decltype(d.cuEventRecord)>(dlsym(d.lib, "cuEventRecord"));
    d.cuEventSynchronize = reinterpret_cast<decltype(d.cuEventSynchronize)>(dlsym(d.lib, "cuEventSynchronize"));
    d.cuEventDestroy = reinterpret_cast<decltype(d.cuEventDestroy)>(dlsym(d.lib, "cuEventDestroy_v2"));
    void* elapsed = dlsym(d.lib, "cuEventElapsedTime_v2");
    if (!elapsed) elapsed = dlsym(d.lib, "cuEventElapsedTime");
    d.cuEventElapsedTime = reinterpret_cast<decltype(d.cuEventElapsedTime)>(elapsed);
    CUresult r = d.cuInit(0);
    if (r != 0) {
      d.error = "cuInit failed with CUDA error " + std::to_string(r) + " (no GPU, or the driver is not usable)";
      d.lib = nullptr;
    }
  });
  return d;
}

void check(CUresult r, const char* call) {
  if (r == 0) return;
  Driver& d = driver();
  const char* name = "?";
  const char* text = "";
  if (d.lib) {
    d.cuGetErrorName(r, &name);
    d.cuGetErrorString(r, &text);
  }
  throw CudaError(std::string(call) + " failed: " + name + " (" + text + ")", r);
}

Driver& require() {
  Driver& d = driver();
  if (!d.lib) throw CudaError("CUDA is not available: " + d.error, -1);
  return d;
}

std::mutex g_mutex;
std::map<int, CUcontext> g_contexts;

// Last (device, context) this thread made current: if the context is still current
// (torch may have switched it), launching needs no lock and no cuCtxSetCurrent.
thread_local int t_device = -1;
thread_local CUcontext t_context = nullptr;

void make_current(int device) {
  Driver& d = require();
  if (t_device == device) {
    CUcontext cur = nullptr;
    if (d.cuCtxGetCurrent(&cur) == 0 && cur == t_context) return;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_contexts.find(device);
  if (it == g_contexts.end()) {
    CUdevice dev;
    check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
    CUcontext ctx;
    check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    it = g_contexts.emplace(device, ctx).first;
  }
  check(d.cuCtxSetCurrent(it->second), "cuCtxSetCurrent");
  t_device = device;
  t_context = it->second;
}

}  // namespace

bool available() { return driver().lib != nullptr; }
std::string unavailable_reason() { return driver().lib ? "" : driver().error; }

int device_count() {
  Driver& d = require();
  int n = 0;
  check(d.cuDeviceGetCount(&n), "cuDeviceGetCount");
  return n;
}

int compute_capability(int device) {
  Driver& d = require();
  CUdevice dev;
  check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  int major = 0, minor = 0;
  check(d.cuDeviceGetAttribute(&major, kAttrComputeMajor, dev), "cuDeviceGetAttribute");
  check(d.cuDeviceGetAttribute(&minor, kAttrComputeMinor, dev), "cuDeviceGetAttribute");
  return major * 10 + minor;
}

std::string device_name(int device) {
  Driver& d = require();
  CUdevice dev;
  check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  char buf[256] = {0};
  check(d.cuDeviceGetName(buf, sizeof buf, dev), "cuDeviceGetName");
  return buf;
}

uintptr_t load_function(int device, const std::string& image, const std::string& kernel_name, int shared_bytes) {
  Driver& d = require();
  make_current(device);
  CUmodule mod;
  // PTX must be NUL-terminated; a cubin is passed as is.
  std::string copy = image;
  copy.push_back('\0');
  check(d.cuModuleLoadDataEx(&mod, copy.data(), 0, nullptr, nullptr), "cuModuleLoadDataEx");
  CUfunction fn;
  check(d.cuModuleGetFunction(&fn, mod, kernel_name.c_str()), "cuModuleGetFunction");
  if (shared_bytes > 48 * 1024)
    check(d.cuFuncSetAttribute(fn, kFuncAttrMaxDynamicShared, shared_bytes), "cuFuncSetAttribute");
  return reinterpret_cast<uintptr_t>(fn);
}

void launch(int device, uintptr_t function, int g0, int g1, int g2, int threads, int shared_bytes, uintptr_t stream,
            void** params) {
  Driver& d = require();
  make_current(device);
  check(d.cuLaunchKernel(reinterpret_cast<CUfunction>(function), g0, g1, g2, threads, 1, 1, shared_bytes,
                         reinterpret_cast<CUstream>(stream), params, nullptr),
        "cuLaunchKernel");
}

void synchronize(int device) {
  Driver& d = require();
  make_current(device);
  check(d.cuCtxSynchronize(), "cuCtxSynchronize");
}

uintptr_t mem_alloc(int device, size_t bytes) {
  Driver& d = require();
  make_current(device);
  unsigned long long p = 0;
  check(d.cuMemAlloc(&p, bytes ? bytes : 1), "cuMemAlloc");
  return static_cast<uintptr_t>(p);
}

void mem_free(int device, uintptr_t ptr) {
  Driver& d = require();
  make_current(device);
  check(d.cuMemFree(ptr), "cuMemFree");
}

void copy_to_device(int device, uintptr_t dst, const void* src, size_t bytes) {
  Driver& d = require();
  make_current(device);
  if (bytes) check(d.cuMemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD");
}

void copy_to_host(int device, void* dst, uintptr_t src, size_t bytes) {
  Driver& d = require();
  make_current(device);
  if (bytes) check(d.cuMemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
}

void mem_set(int device, uintptr_t dst, unsigned char value, size_t bytes) {
  Driver& d = require();
  make_current(device);
  if (bytes) check(d.cuMemsetD8(dst, value, bytes), "cuMemsetD8");
}

namespace {
Driver& require_events() {
  Driver& d = require();
  if (!d.cuEventCreate || !d.cuEventRecord || !d.cuEventSynchronize || !d.cuEventElapsedTime || !d.cuEventDestroy)
    throw CudaError("this libcuda has no cuEvent* timing functions", -1);
  return d;
}
}  // namespace

uintptr_t event_create(int device) {
  Driver& d = require_events();
  make_current(device);
  CUevent e = nullptr;
  check(d.cuEventCreate(&e, 0), "cuEventCreate");
  return reinterpret_cast<uintptr_t>(e);
}

void event_record(int device, uintptr_t event, uintptr_t stream) {
  Driver& d = require_events();
  make_current(device);
  check(d.cuEventRecord(reinterpret_cast<CUevent>(event), reinterpret_cast<CUstream>(stream)), "cuEventRecord");
}

float event_elapsed_ms(int device, uintptr_t start, uintptr_t end) {
  Driver& d = require_events();
  make_current(device);
  check(d.cuEventSynchronize(reinterpret_cast<CUevent>(end)), "cuEventSynchronize");
  float ms = 0;
  check(d.cuEventElapsedTime(&ms, reinterpret_cast<CUevent>(start), reinterpret_cast<CUevent>(end)),
        "cuEventElapsedTime");
  return ms;
}

void event_destroy(int device, uintptr_t event) {
  Driver& d = require_events();
  make_current(device);
  check(d.cuEventDestroy(reinterpret_cast<CUevent>(event)), "cuEventDestroy");
}

}  // namespace tessera::runtime::cuda
