// The cached launch of a kernel in C++ (tessera._C.KernelLauncher, the base class
// of tessera.jit.Kernel). See launch_fastpath.cpp.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "tessera/cuda_runtime.h"

namespace tessera::binding {

// tessera._C.CudaError, a RuntimeError subclass (borrowed reference).
PyObject* cuda_error_type();
// Sets CudaError(prefix + e.what()) with its `code` and `sticky` attributes.
void set_cuda_error(const runtime::cuda::CudaError& e, const std::string& prefix);

// Adds KernelLauncher to the module. Call after CudaError and DeviceAssertError are
// registered: the launcher raises them.
void register_launch_fastpath(pybind11::module_& m);

}  // namespace tessera::binding
