// The C interface between tessera._C and the optional module _C_torch (torch_args.cpp),
// which reads torch tensor arguments and torch's current CUDA stream through torch's
// C++ API instead of Python attribute calls. Plain C types only: _C never includes a
// torch header and imports without torch; it reaches _C_torch through a PyCapsule.
#pragma once

#include <Python.h>

#include <cstdint>

namespace tessera::binding {

// Bumped whenever TorchArgsApi changes; _C refuses a table of another version.
constexpr uint32_t kTorchArgsAbi = 1;
constexpr const char* kTorchArgsCapsule = "_C_torch.api";

// What a launch needs from one tensor argument.
struct TorchTensorInfo {
  uint64_t data = 0;        // tensor.data_ptr()
  PyObject* dtype = nullptr;  // tensor.dtype: the torch.dtype singleton (borrowed)
  int device = -1;          // -1: CPU; N: cuda:N
};

struct TorchArgsApi {
  uint32_t abi;
  const char* torch_version;  // the torch.__version__ the module was built against
  // 0: *out is filled. 1: not for this reader (a Tensor subclass, a device other than
  // CPU/CUDA, a torch function mode is active, torch threw): the attribute path reads
  // it. Never leaves a Python error set; needs the GIL.
  int (*read_tensor)(PyObject* value, TorchTensorInfo* out);
  // torch.cuda.current_stream(device).cuda_stream. 0: *stream is filled; 1: it threw.
  // nullptr when the module was built without torch's CUDA headers.
  int (*current_stream)(int device, uintptr_t* stream);
};

}  // namespace tessera::binding
