// Reads what a launch needs from an array argument (data address, dtype identity,
// device) with one cheap path per array type, and the DLPack capsule reader.
#pragma once

#include <Python.h>

#include <cstdint>

#include "torch_args_api.h"

namespace tessera::binding {

// Where a dtype identity comes from. Identities of different families never
// compare equal, so an identity only has to be unique within its family.
enum class DtypeFamily : uint8_t {
  kNone = 0,
  kNumpyDescr,  // address of a numpy dtype object (kept alive by the array)
  kTorchDtype,  // address of a torch.dtype object (a module-level singleton)
  kTypestr,     // a __cuda_array_interface__ typestr such as "<f4", packed into 8 bytes
  kDlpack,      // DLPack (code, bits, lanes) packed into 32 bits
};

struct ArrayArg {
  uint64_t data = 0;  // address of the first element
  DtypeFamily family = DtypeFamily::kNone;
  uint64_t dtype_id = 0;
  int device = -1;  // -1: host memory; N: CUDA device N
};

// What read_array_arg found.
enum class ArrayRead {
  kOk,          // *out is filled
  kNotAnArray,  // not a type with a fast path: scalars and unknown objects
  kGeneralPath, // an array, but something about it (a device type, an odd dtype, an
                // exception while reading it) is for the Python path to judge
};

// `value` must not be a Python scalar (bool, int, float, None): those are read by
// the caller. Never leaves a Python error set.
ArrayRead read_array_arg(PyObject* value, ArrayArg* out);

// The optional torch reader _C_torch (torch_args_api.h). Installed by
// tessera._torch_native.install(), which _C calls the first time it meets a torch
// tensor type; until then, and wherever it declines, torch tensors are read through
// Python attributes.
// (capsule, getter) installs, (None, None) uninstalls; false with a Python error set.
// `getter` is torch._C._cuda_getCurrentRawStream: launches whose stream getter is that
// object read the stream through the reader instead (torch_current_stream).
bool install_torch_args(PyObject* capsule, PyObject* getter);
// The installed reader's stream function, when `getter` is the one it replaces;
// nullptr otherwise.
using TorchStreamFn = int (*)(int device, uintptr_t* stream);
TorchStreamFn torch_stream_reader_for(PyObject* getter);

// How torch arguments were read since the process started (for tests and benchmarks).
struct TorchArgsStats {
  uint64_t native_tensors = 0;     // through _C_torch
  uint64_t attribute_tensors = 0;  // through Python attributes
  uint64_t native_streams = 0;     // current streams through _C_torch
};
TorchArgsStats& torch_args_stats();

// True when `type` is a numpy scalar type (np.int32, np.float32, ...).
bool is_numpy_scalar_type(PyTypeObject* type);

// DLPack (the __dlpack__ / __dlpack_device__ protocol), unversioned capsules.
struct DlpackInfo {
  uint64_t data = 0;  // data + byte_offset
  uint8_t code = 0;   // kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6
  uint8_t bits = 0;
  uint16_t lanes = 0;
  int32_t device_type = 0;  // kDLCPU 1, kDLCUDA 2, kDLCUDAHost 3, kDLCUDAManaged 13
  int32_t device_id = 0;
};
// Calls value.__dlpack__(), reads the tensor descriptor and lets the capsule go
// (its destructor calls the producer's deleter). False with a Python error set on
// failure.
bool read_dlpack(PyObject* value, DlpackInfo* out);

constexpr int32_t kDLCPU = 1;
constexpr int32_t kDLCUDA = 2;
constexpr int32_t kDLCUDAHost = 3;
constexpr int32_t kDLCUDAManaged = 13;

}  // namespace tessera::binding
