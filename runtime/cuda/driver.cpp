// CUDA Driver API through dlopen("libcuda.so.1"): a table of the few entry points
// Tessera uses, primary contexts per device, module loading and launches. Every
// call is checked and a failure becomes a CudaError naming the call.
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "tessera/cuda_runtime.h"
#include "tessera/tensor_map_spec.h"
#include "launch_config.h"
#include "tensor_map_cache.h"

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
constexpr int kFuncAttrNonPortableClusterSizeAllowed = 14;  // CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED

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
  // Optional (nullptr when absent): recovery and error reports, see the end of the file.
  CUresult (*cuDevicePrimaryCtxReset)(CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice) = nullptr;
  CUresult (*cuPointerGetAttribute)(void*, int, unsigned long long) = nullptr;
  CUresult (*cuFuncGetAttribute)(int*, int, CUfunction) = nullptr;
  // sm_90 tensor maps (CUDA 12+): kernels whose loads the TMA copies take them as parameters.
  CUresult (*cuTensorMapEncodeTiled)(void*, int, unsigned, void*, const uint64_t*, const uint64_t*, const unsigned*,
                                     const unsigned*, int, int, int, int) = nullptr;
  // Launches with attributes (CUDA 12+): programmatic dependent launch (launch_config.h).
  CUresult (*cuLaunchKernelEx)(const LaunchConfig*, CUfunction, void**, void**) = nullptr;

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

void load_optional_symbols(Driver& d) {
  d.cuDevicePrimaryCtxReset = reinterpret_cast<decltype(d.cuDevicePrimaryCtxReset)>(
      dlsym(d.lib, "cuDevicePrimaryCtxReset_v2"));
  if (!d.cuDevicePrimaryCtxReset)
    d.cuDevicePrimaryCtxReset = reinterpret_cast<decltype(d.cuDevicePrimaryCtxReset)>(
        dlsym(d.lib, "cuDevicePrimaryCtxReset"));
  d.cuDevicePrimaryCtxRelease = reinterpret_cast<decltype(d.cuDevicePrimaryCtxRelease)>(
      dlsym(d.lib, "cuDevicePrimaryCtxRelease_v2"));
  if (!d.cuDevicePrimaryCtxRelease)
    d.cuDevicePrimaryCtxRelease = reinterpret_cast<decltype(d.cuDevicePrimaryCtxRelease)>(
        dlsym(d.lib, "cuDevicePrimaryCtxRelease"));
  d.cuPointerGetAttribute =
      reinterpret_cast<decltype(d.cuPointerGetAttribute)>(dlsym(d.lib, "cuPointerGetAttribute"));
  d.cuFuncGetAttribute = reinterpret_cast<decltype(d.cuFuncGetAttribute)>(dlsym(d.lib, "cuFuncGetAttribute"));
  d.cuTensorMapEncodeTiled =
      reinterpret_cast<decltype(d.cuTensorMapEncodeTiled)>(dlsym(d.lib, "cuTensorMapEncodeTiled"));
  d.cuLaunchKernelEx = reinterpret_cast<decltype(d.cuLaunchKernelEx)>(dlsym(d.lib, "cuLaunchKernelEx"));
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
    load_optional_symbols(d);

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

// After a sticky error: resets the context of this thread's current device and
// throws (defined with the recovery code at the end of the file).
[[noreturn]] void throw_sticky(CUresult r, const std::string& message);

void check(CUresult r, const char* call) {
  if (r == 0) return;
  Driver& d = driver();
  const char* name = "?";
  const char* text = "";
  if (d.lib) {
    d.cuGetErrorName(r, &name);
    d.cuGetErrorString(r, &text);
  }
  std::string message = std::string(call) + " failed: " + name + " (" + text + ")";
  if (is_sticky_error(r)) throw_sticky(r, message);
  throw CudaError(message, r);
}

Driver& require() {
  Driver& d = driver();
  if (!d.lib) throw CudaError("CUDA is not available: " + d.error, -1);
  return d;
}

std::mutex g_mutex;
std::map<int, CUcontext> g_contexts;
// Devices whose primary context the driver refused to recreate after a sticky error
// (reset_context, at the end of the file) -> the driver's answers, for the error of
// every later call.
std::map<int, std::string> g_refused;

// Resets of each device's primary context (reset_context, at the end of the file).
constexpr int kMaxDevices = 64;
std::atomic<uint64_t> g_generation[kMaxDevices];

uint64_t generation_of(int device) {
  return device >= 0 && device < kMaxDevices ? g_generation[device].load(std::memory_order_acquire) : 0;
}

// Last (device, context) this thread made current: if the context is still current
// (torch may have switched it) and was not reset since, launching needs no lock and
// no cuCtxSetCurrent.
thread_local int t_device = -1;
thread_local CUcontext t_context = nullptr;
thread_local uint64_t t_generation = 0;

void make_current(int device) {
  Driver& d = require();
  if (t_device == device && t_generation == generation_of(device)) {
    CUcontext cur = nullptr;
    if (d.cuCtxGetCurrent(&cur) == 0 && cur == t_context) return;
  }
  // Driver errors are checked after the lock is released: check() of a sticky error
  // resets the context, which takes g_mutex itself.
  CUresult r = 0;
  const char* call = "";
  CUcontext ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_contexts.find(device);
    if (it != g_contexts.end()) {
      ctx = it->second;
    } else {
      CUdevice dev;
      call = "cuDeviceGet";
      r = d.cuDeviceGet(&dev, device);
      if (r == 0) {
        call = "cuDevicePrimaryCtxRetain";
        r = d.cuDevicePrimaryCtxRetain(&ctx, dev);
        auto refused = g_refused.find(device);
        if (r != 0 && refused != g_refused.end())  // not a reset again: say what the driver answered
          throw CudaError("cuda:" + std::to_string(device) + " cannot be used again in this process: after an "
                          "earlier sticky error the CUDA driver refuses to recreate its context (" +
                          refused->second + "); restart the process to use the GPU again", r, true);
        if (r == 0) {
          if (refused != g_refused.end()) g_refused.erase(refused);
          g_contexts.emplace(device, ctx);
        }
      }
    }
    if (r == 0) {  // under the lock: a reset on another thread cannot destroy ctx in between
      call = "cuCtxSetCurrent";
      r = d.cuCtxSetCurrent(ctx);
    }
  }
  check(r, call);
  t_device = device;
  t_context = ctx;
  t_generation = generation_of(device);
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

// Kernels keep all their shared memory in one dynamic array (its size is the
// compiled metadata's "shared"), passed as sharedMemBytes at launch. Beyond 48 KB a
// kernel must opt in; more than the device's opt-in maximum is a clear error here,
// not a launch failure later.
static void allow_dynamic_shared(int device, CUfunction fn, const std::string& kernel_name, int shared_bytes) {
  if (shared_bytes <= 48 * 1024) return;
  Driver& d = require();
  constexpr int kAttrMaxSharedPerBlockOptin = 97;  // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
  CUdevice dev;
  check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  int max_bytes = 0;
  check(d.cuDeviceGetAttribute(&max_bytes, kAttrMaxSharedPerBlockOptin, dev), "cuDeviceGetAttribute");
  if (shared_bytes > max_bytes)
    throw CudaError("kernel " + kernel_name + " needs " + std::to_string(shared_bytes) +
                        " bytes of shared memory, but device " + std::to_string(device) + " allows at most " +
                        std::to_string(max_bytes) + " per block (use smaller tiles)",
                    -1);
  check(d.cuFuncSetAttribute(fn, kFuncAttrMaxDynamicShared, shared_bytes), "cuFuncSetAttribute");
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
  allow_dynamic_shared(device, fn, kernel_name, shared_bytes);
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

// --- Loaded kernels, launch errors and recovery from sticky errors ----------------
// (declared at the end of cuda_runtime.h)

namespace {

constexpr int kAttrMaxSharedPerBlockOptin = 97;     // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
constexpr int kFuncAttrMaxThreads = 0;              // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
constexpr int kFuncAttrSharedBytes = 1;             // CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES (static)
constexpr int kFuncAttrLocalBytes = 3;              // CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
constexpr int kFuncAttrNumRegs = 4;                 // CU_FUNC_ATTRIBUTE_NUM_REGS
constexpr int kPointerAttrDeviceOrdinal = 9;        // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr CUresult kErrorInvalidValue = 1;          // CUDA_ERROR_INVALID_VALUE
constexpr CUresult kErrorOutOfResources = 701;      // CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES

// A kernel loaded by load_kernel. Never freed (modules stay loaded until exit);
// `function` is reloaded from `image` when the context was reset since.
struct LoadedKernel {
  int device = 0;
  std::string image, name;
  int shared_bytes = 0;
  std::mutex mutex;  // guards reloading
  std::atomic<uint64_t> generation{0};
  std::atomic<CUfunction> function{nullptr};
  int max_threads = 1024;  // what the kernel's register use allows per block
  int num_regs = 0;
  int local_bytes = 0;          // per thread: spills and local arrays
  int static_shared_bytes = 0;
  KernelTensorMaps tensor_maps;  // built at each launch, passed after the kernel's parameters
  mutable TensorMapCache map_cache;  // those maps already encoded (encode_tensor_map_cached)
  // Launched with programmatic dependent launch (cuLaunchKernelEx, launch_with_driver):
  // asked for by the compiled metadata's "pdl" (the kernel calls gdc_wait) and kept only
  // where the device (sm_90+) and the driver (cuLaunchKernelEx) have it.
  bool pdl = false;
  int cluster = 0;  // CTAs per thread-block cluster (0: none)
};

// The last kernel launched on each device: a later asynchronous error is reported
// at a synchronization, where only this says which kernel it probably was.
std::atomic<LoadedKernel*> g_last_kernel[kMaxDevices];

std::string describe(CUresult r) {
  Driver& d = driver();
  const char* name = "?";
  const char* text = "";
  if (d.lib) {
    d.cuGetErrorName(r, &name);
    d.cuGetErrorString(r, &text);
  }
  return std::string(name) + " (" + text + ")";
}

int device_attribute(int device, int attribute) {
  Driver& d = require();
  CUdevice dev;
  check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  int v = 0;
  check(d.cuDeviceGetAttribute(&v, attribute, dev), "cuDeviceGetAttribute");
  return v;
}

// Resets the device's primary context after a sticky error: every allocation and
// module on it is gone; the next make_current retains it again and kernels are
// reloaded on their next launch (LoadedKernel::generation).
//
// The order matters. The broken context is first made not current on this thread,
// then Tessera's own reference is released (the last reference going away destroys
// the context), then the reset destroys it for holders that still keep a reference
// (torch, CuPy). Then the context is retained again right away, to learn whether
// the driver lets this process use the device again: after an illegal address the
// H100 driver of 2026-11 does not (cuDevicePrimaryCtxRetain keeps answering
// CUDA_ERROR_ILLEGAL_ADDRESS, also seconds later, as NVIDIA documents: "the process
// must be terminated and relaunched"), and then the error says so instead of
// promising that later launches work. Returns the note for the error message.
std::string reset_context(int device) {
  Driver& d = driver();
  std::lock_guard<std::mutex> lock(g_mutex);
  CUdevice dev;
  std::string refused;
  const bool retained = g_contexts.erase(device) > 0;
  if (d.cuDeviceGet(&dev, device) == 0) {
    d.cuCtxSetCurrent(nullptr);
    if (retained && d.cuDevicePrimaryCtxRelease) d.cuDevicePrimaryCtxRelease(dev);
    CUresult reset = d.cuDevicePrimaryCtxReset ? d.cuDevicePrimaryCtxReset(dev) : 0;
    CUcontext ctx = nullptr;
    CUresult again = d.cuDevicePrimaryCtxRetain(&ctx, dev);
    if (again == 0)
      g_contexts.emplace(device, ctx);
    else
      refused = "cuDevicePrimaryCtxReset: " + describe(reset) + ", then cuDevicePrimaryCtxRetain: " + describe(again);
  }
  if (refused.empty())
    g_refused.erase(device);
  else
    g_refused[device] = refused;
  if (device >= 0 && device < kMaxDevices) g_generation[device].fetch_add(1, std::memory_order_acq_rel);
  t_device = -1;
  t_context = nullptr;
  std::string where = "cuda:" + std::to_string(device);
  std::string note = "; this error is sticky (it leaves the CUDA context unusable), so Tessera reset the primary "
                     "context of " + where + ": every allocation on it (torch tensors, CuPy arrays, tessera.Array) "
                     "is gone";
  if (refused.empty()) return note + " and must be made again; later launches with new arrays work";
  return note + ", and the CUDA driver refuses to recreate the context in this process (" + refused +
         "): restart the process to use " + where + " again";
}

[[noreturn]] void throw_sticky_aware(int device, CUresult r, const std::string& message) {
  if (is_sticky_error(r)) throw CudaError(message + reset_context(device), r, true);
  throw CudaError(message, r);
}

void load_into_context(LoadedKernel& k) {
  Driver& d = require();
  make_current(k.device);
  uint64_t gen = generation_of(k.device);
  // load_function does the loading (and the function attributes, such as more than
  // 48 KB of dynamic shared memory); this adds what survives a reset.
  auto fn = reinterpret_cast<CUfunction>(load_function(k.device, k.image, k.name, k.shared_bytes));
  if (k.cluster > 8)  // 16: the H100's non-portable cluster size, which the function must allow
    check(d.cuFuncSetAttribute(fn, kFuncAttrNonPortableClusterSizeAllowed, 1), "cuFuncSetAttribute");
  if (d.cuFuncGetAttribute) {
    int v = 0;
    if (d.cuFuncGetAttribute(&v, kFuncAttrMaxThreads, fn) == 0 && v > 0) k.max_threads = v;
    if (d.cuFuncGetAttribute(&v, kFuncAttrNumRegs, fn) == 0) k.num_regs = v;
    if (d.cuFuncGetAttribute(&v, kFuncAttrLocalBytes, fn) == 0) k.local_bytes = v;
    if (d.cuFuncGetAttribute(&v, kFuncAttrSharedBytes, fn) == 0) k.static_shared_bytes = v;
  }
  k.function.store(fn, std::memory_order_release);
  k.generation.store(gen, std::memory_order_release);
}

CUfunction current_function(LoadedKernel& k) {
  if (k.generation.load(std::memory_order_acquire) == generation_of(k.device))
    return k.function.load(std::memory_order_acquire);
  std::lock_guard<std::mutex> lock(k.mutex);  // reset since: load the module again
  if (k.generation.load(std::memory_order_acquire) != generation_of(k.device)) load_into_context(k);
  return k.function.load(std::memory_order_acquire);
}

// Every driver call goes through make_current(device) first, so the thread's
// current device is the one whose context the error broke.
void throw_sticky(CUresult r, const std::string& message) {
  int device = t_device;
  if (device < 0 || device >= kMaxDevices) throw CudaError(message, r);
  LoadedKernel* last = g_last_kernel[device].load();
  throw_sticky_aware(device, r, last ? message + " (an earlier kernel caused it, probably " + last->name +
                                           ", the last one Tessera launched on cuda:" + std::to_string(device) + ")"
                                     : message);
}

}  // namespace

bool is_sticky_error(int code) {
  switch (code) {
    case 700:  // CUDA_ERROR_ILLEGAL_ADDRESS
    case 702:  // CUDA_ERROR_LAUNCH_TIMEOUT
    case 710:  // CUDA_ERROR_ASSERT
    case 714:  // CUDA_ERROR_HARDWARE_STACK_ERROR
    case 715:  // CUDA_ERROR_ILLEGAL_INSTRUCTION
    case 716:  // CUDA_ERROR_MISALIGNED_ADDRESS
    case 717:  // CUDA_ERROR_INVALID_ADDRESS_SPACE
    case 718:  // CUDA_ERROR_INVALID_PC
    case 719:  // CUDA_ERROR_LAUNCH_FAILED
      return true;
    default:
      return false;
  }
}

uint64_t context_generation(int device) { return generation_of(device); }

uintptr_t load_kernel(int device, const std::string& image, const std::string& kernel_name, int shared_bytes,
                      const std::string& tensor_maps, bool pdl, int cluster) {
  if (device < 0 || device >= kMaxDevices || device >= device_count())
    throw CudaError("there is no CUDA device " + std::to_string(device) + " (this machine has " +
                        std::to_string(device_count()) + ")",
                    -1);
  int limit = device_attribute(device, kAttrMaxSharedPerBlockOptin);
  if (shared_bytes > limit)
    throw CudaError("kernel " + kernel_name + " needs " + std::to_string(shared_bytes) +
                        " bytes of shared memory per block, but cuda:" + std::to_string(device) + " (" +
                        device_name(device) + ") allows at most " + std::to_string(limit) +
                        ": use smaller blocks or fewer num_stages",
                    kErrorInvalidValue);
  auto k = std::make_unique<LoadedKernel>();
  k->device = device;
  k->image = image;
  k->name = kernel_name;
  k->shared_bytes = shared_bytes;
  try {
    k->tensor_maps = parse_tensor_maps(tensor_maps);
    k->map_cache.resize(k->tensor_maps.maps.size());
  } catch (const std::invalid_argument& e) {
    throw CudaError("kernel " + kernel_name + ": " + e.what() + " (this is a Tessera bug)", kErrorInvalidValue);
  }
  if (!k->tensor_maps.maps.empty() && !driver().cuTensorMapEncodeTiled)
    throw CudaError("kernel " + kernel_name + " loads through tensor maps (TMA), but this libcuda has no "
                    "cuTensorMapEncodeTiled (CUDA 12+ drivers have it); TESSERA_TMA=0 compiles it without",
                    kErrorInvalidValue);
  // Without PDL a kernel that calls gdc_wait still runs correctly: griddepcontrol.wait
  // returns at once when the grid was not launched early.
  k->pdl = pdl && driver().cuLaunchKernelEx && compute_capability(device) >= 90;
  k->cluster = cluster;
  load_into_context(*k);
  return reinterpret_cast<uintptr_t>(k.release());
}

std::string kernel_name(uintptr_t kernel) { return reinterpret_cast<LoadedKernel*>(kernel)->name; }

KernelAttributes kernel_attributes(uintptr_t kernel) {
  auto& k = *reinterpret_cast<LoadedKernel*>(kernel);
  current_function(k);  // reloaded after a reset: the attributes below are its own again
  std::lock_guard<std::mutex> lock(k.mutex);
  return KernelAttributes{k.num_regs, k.local_bytes, k.max_threads, k.static_shared_bytes};
}

namespace {

// The kernel's parameters followed by its tensor maps (CUtensorMap: 128 bytes,
// 64-byte aligned), alive until cuLaunchKernel has copied them.
struct TensorMapParams {
  struct alignas(64) Map {
    unsigned char bytes[128];
  };
  std::vector<Map> maps;
  std::vector<void*> params;
};

// A 16-byte aligned buffer of zeros per device: the stand-in tensor for a map whose
// extent is 0 or negative at this launch (every element of it is out of bounds,
// which the kernel's masks made zeros; the map must still be valid).
uintptr_t zeros_for_empty_maps(int device) {
  static std::mutex mutex;
  static uintptr_t buf[kMaxDevices] = {};
  static uint64_t gen[kMaxDevices] = {};
  std::lock_guard<std::mutex> lock(mutex);
  if (!buf[device] || gen[device] != generation_of(device)) {
    buf[device] = mem_alloc(device, 256);
    mem_set(device, buf[device], 0, 256);
    gen[device] = generation_of(device);
  }
  return buf[device];
}

// Map i of kernel k for these launch values into `bytes` (128): from k.map_cache when
// an earlier launch encoded the same fields (the operands' addresses repeat call to
// call under PyTorch's caching allocator), else cuTensorMapEncodeTiled, kept there.
void encode_tensor_map_cached(const LoadedKernel& k, size_t i, uint64_t base, int64_t inner, int64_t outer,
                              int64_t stride, unsigned char* bytes) {
  const TensorMapFields fields{base, static_cast<uint64_t>(inner), static_cast<uint64_t>(outer),
                               static_cast<uint64_t>(stride)};
  if (k.map_cache.find(i, fields, bytes)) return;
  Driver& d = require();
  const TensorMapSpec& m = k.tensor_maps.maps[i];
  const uint64_t dims[2] = {static_cast<uint64_t>(inner), static_cast<uint64_t>(outer)};
  const uint64_t strides[1] = {static_cast<uint64_t>(stride)};
  const unsigned box[2] = {static_cast<unsigned>(m.box_inner), static_cast<unsigned>(m.box_outer)};
  const unsigned elem_strides[2] = {1, 1};
  // CU_TENSOR_MAP_DATA_TYPE_UINT8 / UINT16 / UINT32: the copy moves bits.
  const int dtype = m.elem_bytes == 1 ? 0 : m.elem_bytes == 2 ? 1 : 2;
  const int swizzle = m.swizzle_bytes == 128 ? 3 : m.swizzle_bytes == 64 ? 2 : m.swizzle_bytes == 32 ? 1 : 0;
  CUresult r = d.cuTensorMapEncodeTiled(bytes, dtype, 2, reinterpret_cast<void*>(base), dims, strides, box,
                                        elem_strides, /*interleave=*/0, swizzle, /*L2 promotion 128B=*/2,
                                        /*out-of-bounds fill zeros=*/0);
  if (r != 0)
    throw CudaError("kernel " + k.name + ": cuTensorMapEncodeTiled failed (" + describe(r) + ") for tensor map " +
                        std::to_string(i) + ": base 0x" + [&] {
                          char b[32];
                          std::snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(base));
                          return std::string(b);
                        }() + ", extents " + std::to_string(inner) + " x " + std::to_string(outer) +
                        ", row stride " + std::to_string(stride) +
                        " bytes (TMA needs a 16-byte aligned base and row stride); TESSERA_TMA=0 compiles it without",
                    r);
  k.map_cache.store(i, fields, bytes);  // (failures are not kept: the next launch reports them again)
}

// Encodes the kernel's tensor maps from this launch's parameter values (the base
// pointer, extents and strides the compiler named) with cuTensorMapEncodeTiled.
// Worked example, the A operand of a 128x128x64 f16 matmul (A row-major M x K,
// stride s_am): dims {K, M}, strides {2 s_am} bytes, box {64, 128}, 128-byte swizzle.
void** encode_tensor_maps(const LoadedKernel& k, void** params, TensorMapParams& out) {
  const KernelTensorMaps& t = k.tensor_maps;
  out.maps.resize(t.maps.size());
  out.params.assign(params, params + t.num_params);
  for (size_t i = 0; i < t.maps.size(); ++i) {
    const TensorMapSpec& m = t.maps[i];
    uint64_t base;
    std::memcpy(&base, params[m.base_param], 8);
    int64_t inner = m.dim_inner.read(params), outer = m.dim_outer.read(params);
    int64_t stride = m.stride_outer.read(params) * m.elem_bytes;
    if (inner <= 0 || outer <= 0) {  // nothing in bounds: any valid map of zeros
      base = zeros_for_empty_maps(k.device);
      inner = outer = 1;
      stride = 16;
    }
    encode_tensor_map_cached(k, i, base, inner, outer, stride, out.maps[i].bytes);
    out.params.push_back(out.maps[i].bytes);
  }
  return out.params.data();
}

// cuLaunchKernel, or for a PDL kernel cuLaunchKernelEx with programmatic stream
// serialization: the grid may start while the previous one in the stream finishes
// (once that grid's programs have called gdc_launch_dependents or exited) and waits
// for it with griddepcontrol.wait before reading its output.
CUresult launch_with_driver(Driver& d, const LoadedKernel& k, CUfunction fn, int g0, int g1, int g2, int threads,
                            int shared_bytes, uintptr_t stream, void** params) {
  if (!k.pdl)
    return d.cuLaunchKernel(fn, g0, g1, g2, threads, 1, 1, shared_bytes, reinterpret_cast<CUstream>(stream), params,
                            nullptr);
  LaunchAttribute overlap{};
  overlap.id = kLaunchAttributeProgrammaticStreamSerialization;
  overlap.value.programmatic_stream_serialization_allowed = 1;
  LaunchConfig config{};
  config.grid_dim_x = g0, config.grid_dim_y = g1, config.grid_dim_z = g2;
  config.block_dim_x = threads, config.block_dim_y = 1, config.block_dim_z = 1;
  config.shared_mem_bytes = shared_bytes;
  config.stream = reinterpret_cast<CUstream>(stream);
  config.attrs = &overlap;
  config.num_attrs = 1;
  return d.cuLaunchKernelEx(&config, fn, params, nullptr);
}

}  // namespace

void launch_kernel(uintptr_t kernel, int g0, int g1, int g2, int threads, int shared_bytes, uintptr_t stream,
                   void** params) {
  Driver& d = require();
  auto& k = *reinterpret_cast<LoadedKernel*>(kernel);
  make_current(k.device);
  CUfunction fn = current_function(k);
  if (threads > k.max_threads)
    throw CudaError("kernel " + k.name + " can run at most " + std::to_string(k.max_threads) +
                        " threads per block on cuda:" + std::to_string(k.device) + " (the number it was compiled " +
                        "for, or fewer for its " + std::to_string(k.num_regs) +
                        " registers per thread), but this launch asks for " + std::to_string(threads) +
                        " (num_warps=" + std::to_string(threads / 32) + "): use fewer warps",
                    kErrorOutOfResources);
  // A plain load, and a store only when the kernel changes: a locked exchange on
  // every launch costs more than this bookkeeping is worth.
  LoadedKernel* previous = g_last_kernel[k.device].load(std::memory_order_relaxed);
  if (previous != &k) g_last_kernel[k.device].store(&k, std::memory_order_relaxed);
  // Per thread and reused: two heap allocations per launch otherwise (the launch
  // copies the parameters before it returns; launch_kernel never nests).
  thread_local TensorMapParams maps;
  if (!k.tensor_maps.maps.empty()) params = encode_tensor_maps(k, params, maps);
  CUresult r = launch_with_driver(d, k, fn, g0, g1, g2, threads, shared_bytes, stream, params);
  if (r == 0) return;
  // The same message through either driver call: what failed is the launch.
  std::string msg = "cuLaunchKernel failed: " + describe(r);
  if (r == kErrorOutOfResources)
    msg += ": kernel " + k.name + " with " + std::to_string(threads) + " threads per block, " +
           std::to_string(k.num_regs) + " registers per thread and " + std::to_string(shared_bytes) +
           " bytes of dynamic shared memory does not fit on cuda:" + std::to_string(k.device) +
           "; use fewer warps or smaller blocks";
  else if (r == kErrorInvalidValue)
    msg += ": kernel " + k.name + ", grid (" + std::to_string(g0) + ", " + std::to_string(g1) + ", " +
           std::to_string(g2) + "), " + std::to_string(threads) + " threads per block, " +
           std::to_string(shared_bytes) + " bytes of dynamic shared memory";
  else if (is_sticky_error(r))
    msg += " (reported at the launch of " + k.name + "; an earlier kernel caused it" +
           (previous ? ", probably " + previous->name + ", the last one Tessera launched on cuda:" +
                           std::to_string(k.device) : std::string()) + ")";
  throw_sticky_aware(k.device, r, msg);
}

void synchronize_checked(int device) {
  Driver& d = require();
  make_current(device);
  CUresult r = d.cuCtxSynchronize();
  if (r == 0) return;
  std::string msg = "cuCtxSynchronize failed: " + describe(r);
  LoadedKernel* last = device >= 0 && device < kMaxDevices ? g_last_kernel[device].load() : nullptr;
  if (last) msg += " (the last kernel Tessera launched on cuda:" + std::to_string(device) + " was " + last->name + ")";
  throw_sticky_aware(device, r, msg);
}

int pointer_device(uintptr_t ptr) {
  Driver& d = require();
  if (!d.cuPointerGetAttribute) throw CudaError("libcuda has no cuPointerGetAttribute", -1);
  int ordinal = -1;
  check(d.cuPointerGetAttribute(&ordinal, kPointerAttrDeviceOrdinal, static_cast<unsigned long long>(ptr)),
        "cuPointerGetAttribute");
  return ordinal;
}

// --- Events (tessera.testing.do_bench) ----------------------------------------------
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
