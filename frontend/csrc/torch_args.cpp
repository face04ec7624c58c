// _C_torch: an optional module, built only where torch's C++ headers are found, that
// reads torch tensor arguments (data pointer, dtype, device) and torch's current CUDA
// stream through torch's C++ API, for the C++ launch path (launch_fastpath.cpp). The
// same reads through Python attributes cost ~0.45 us per launch of a CUDA tensor.
//
// THPVariable_Unpack and the tensor accessors are inline: they bake in the layout of
// torch's objects. So the module refuses to import under any torch other than the
// exact version it was built against, and tessera then keeps the attribute path.
#include <ATen/PythonTorchFunctionTLS.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>

#ifdef TESSERA_TORCH_CUDA_STREAM
#include <c10/cuda/CUDAStream.h>
#endif

#include "torch_args_api.h"

#ifndef TESSERA_TORCH_BUILD_VERSION
#error "the build sets TESSERA_TORCH_BUILD_VERSION to torch.__version__"
#endif

namespace tessera::binding {
namespace {

int read_tensor(PyObject* value, TorchTensorInfo* out) {
  // Subclasses may redefine data_ptr, device, ... through __torch_function__, and an
  // active torch function mode sees every attribute read: both stay with the
  // attribute path, which honours them.
  if (!THPVariable_CheckExact(value) || at::impl::PythonTorchFunctionTLS::stack_len() > 0) return 1;
  try {
    const at::Tensor& t = THPVariable_Unpack(value);
    if (!t.defined()) return 1;
    const c10::Device device = t.device();
    if (device.is_cuda()) {
      if (device.index() < 0) return 1;
      out->device = device.index();
    } else if (device.is_cpu()) {
      out->device = -1;
    } else {
      return 1;  // meta, mps, xpu, ...: the general path names them
    }
    out->dtype = reinterpret_cast<PyObject*>(torch::getTHPDtype(t.scalar_type()));
    out->data = reinterpret_cast<uint64_t>(t.data_ptr());
    return 0;
  } catch (...) {  // c10::Error (a tensor without storage, ...): let Python say why
    return 1;
  }
}

#ifdef TESSERA_TORCH_CUDA_STREAM
int current_stream(int device, uintptr_t* stream) {
  try {
    *stream = reinterpret_cast<uintptr_t>(
        c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream());
    return 0;
  } catch (...) {
    return 1;
  }
}
#endif

TorchArgsApi g_api = {
    kTorchArgsAbi,
    TESSERA_TORCH_BUILD_VERSION,
    read_tensor,
#ifdef TESSERA_TORCH_CUDA_STREAM
    current_stream,
#else
    nullptr,
#endif
};

// torch.__version__ of the torch this process imported, or nullptr (error set).
PyObject* running_torch_version() {
  PyObject* torch = PyImport_ImportModule("torch");
  if (!torch) return nullptr;
  PyObject* v = PyObject_GetAttrString(torch, "__version__");
  Py_DECREF(torch);
  if (!v) return nullptr;
  PyObject* s = PyObject_Str(v);  // a TorchVersion (a str subclass)
  Py_DECREF(v);
  return s;
}

PyModuleDef g_module = {PyModuleDef_HEAD_INIT, "_C_torch",
                        "Reads torch tensor arguments and torch's current stream for tessera's C++ launch path.",
                        -1, nullptr, nullptr, nullptr, nullptr, nullptr};

}  // namespace
}  // namespace tessera::binding

PyMODINIT_FUNC PyInit__C_torch() {
  using namespace tessera::binding;
  PyObject* running = running_torch_version();
  if (!running) return nullptr;
  const bool same = PyUnicode_CompareWithASCIIString(running, TESSERA_TORCH_BUILD_VERSION) == 0;
  if (!same) {
    PyErr_Format(PyExc_ImportError,
                 "_C_torch was built against torch %s but this process runs torch %U: rebuild tessera "
                 "(scripts/setup.sh) to read torch tensors from C++; launches read them through Python meanwhile",
                 TESSERA_TORCH_BUILD_VERSION, running);
    Py_DECREF(running);
    return nullptr;
  }
  Py_DECREF(running);
  if (!THPVariableClass) {
    PyErr_SetString(PyExc_ImportError, "_C_torch: torch._C is not initialised");
    return nullptr;
  }
  PyObject* m = PyModule_Create(&g_module);
  if (!m) return nullptr;
  PyObject* capsule = PyCapsule_New(&g_api, kTorchArgsCapsule, nullptr);
  if (!capsule || PyModule_AddObject(m, "api", capsule) < 0 ||
      PyModule_AddStringConstant(m, "torch_version", TESSERA_TORCH_BUILD_VERSION) < 0 ||
      PyModule_AddObject(m, "has_cuda_stream", PyBool_FromLong(g_api.current_stream != nullptr)) < 0) {
    Py_XDECREF(capsule);
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
