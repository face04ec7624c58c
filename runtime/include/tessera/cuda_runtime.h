// The CUDA runtime of Tessera: the CUDA Driver API loaded with dlopen, so that
// importing Tessera and every CPU path work on machines without a GPU or driver.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace tessera::runtime::cuda {

// A CUDA failure: `what()` names the call, the CUDA error name and its text.
class CudaError : public std::runtime_error {
 public:
  CudaError(const std::string& msg, int code, bool sticky = false)
      : std::runtime_error(msg), code(code), sticky(sticky) {}
  int code;
  bool sticky;  // the context was reset after this error (see below)
};

// True when libcuda could be loaded and cuInit succeeded (never throws).
bool available();
// Why available() is false ("" when it is true).
std::string unavailable_reason();
int device_count();
// Compute capability as major*10 + minor (e.g. 90).
int compute_capability(int device);
std::string device_name(int device);

// Loads PTX or a cubin into the device's primary context; returns a CUfunction
// handle for `kernel_name`. Modules stay loaded until the process exits.
uintptr_t load_function(int device, const std::string& image, const std::string& kernel_name,
                        int shared_bytes);

// Launches `function` with the given grid, block of `threads` threads, dynamic
// shared memory and stream (0 = the legacy default stream). `params` points to
// `count` pointers to the argument values.
void launch(int device, uintptr_t function, int g0, int g1, int g2, int threads, int shared_bytes,
            uintptr_t stream, void** params);

// Blocks until all work on the device's primary context is done.
void synchronize(int device);

// Device memory (for tessera.Array without torch/CuPy): allocation, free and
// synchronous copies between host and device.
uintptr_t mem_alloc(int device, size_t bytes);
void mem_free(int device, uintptr_t ptr);
void copy_to_device(int device, uintptr_t dst, const void* src, size_t bytes);
void copy_to_host(int device, void* dst, uintptr_t src, size_t bytes);
void mem_set(int device, uintptr_t dst, unsigned char value, size_t bytes);

// --- Loaded kernels, launch errors and recovery from sticky errors ---------------
//
// A sticky error (an illegal address, a trap, a misaligned access, a kernel
// assert) leaves the device's primary context unusable. Whichever Tessera driver
// call first sees it (a launch, a synchronize, a copy, an allocation) resets the
// primary context (cuDevicePrimaryCtxReset): every allocation on it and every
// module loaded into it is gone (torch's and CuPy's too), so later launches with
// new arrays work. The CudaError says so; `sticky` is true on it.

// Loads PTX or a cubin for `kernel_name` on `device` and returns a handle that
// stays valid across a reset: launch_kernel reloads the module when the context
// was reset since. Fails with a clear CudaError when the kernel needs more shared
// memory than the device allows per block. tensor_maps: the compiled metadata's
// "tensor_maps" (tensor_map_spec.h; "" for none): each launch encodes them from its
// parameter values and passes them after the kernel's own parameters. pdl: the
// compiled metadata's "pdl" (the kernel calls gdc_wait): launch_kernel then launches it
// with programmatic dependent launch (cuLaunchKernelEx), where the device is sm_90+ and
// the driver has cuLaunchKernelEx, so it may start while the previous grid in its
// stream finishes; elsewhere it launches as any kernel. cluster: the compiled metadata's
// "cluster" (0: none), CTAs per thread-block cluster, which the PTX itself names
// (.reqnctapercluster); more than 8 needs the function's non-portable-size attribute.
uintptr_t load_kernel(int device, const std::string& image, const std::string& kernel_name, int shared_bytes,
                      const std::string& tensor_maps = "", bool pdl = false, int cluster = 0);

// Launches a load_kernel handle on its device. A failure names the kernel's limits
// that the launch broke (threads, registers, shared memory).
void launch_kernel(uintptr_t kernel, int g0, int g1, int g2, int threads, int shared_bytes, uintptr_t stream,
                   void** params);

// Name of a load_kernel handle.
std::string kernel_name(uintptr_t kernel);

// What the driver reports of a load_kernel handle's function (loading it into the
// device's context first if a reset unloaded it): registers per thread, local memory
// per thread (register spills and local arrays), the most threads per block its
// registers allow, and its static shared memory.
struct KernelAttributes {
  int num_regs = 0;
  int local_bytes = 0;
  int max_threads = 0;
  int static_shared_bytes = 0;
};
KernelAttributes kernel_attributes(uintptr_t kernel);

// synchronize(), but an error names the last kernel launched on the device and a
// sticky error resets the context (see above).
void synchronize_checked(int device);

// Counts the resets of the device's primary context: memory allocated under an
// older generation is gone and must not be freed.
uint64_t context_generation(int device);

// The device that owns a device pointer (CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL).
int pointer_device(uintptr_t ptr);

// True for CUDA errors that leave the context unusable.
bool is_sticky_error(int code);

// Events, for timing work on a stream (tessera.testing.do_bench): create, record on a
// stream (0 = the legacy default stream), milliseconds between two recorded events
// (waits for `end`), destroy.
uintptr_t event_create(int device);
void event_record(int device, uintptr_t event, uintptr_t stream);
float event_elapsed_ms(int device, uintptr_t start, uintptr_t end);
void event_destroy(int device, uintptr_t event);

}  // namespace tessera::runtime::cuda
