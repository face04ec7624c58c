// Reads the data address, dtype identity and device of array arguments, one cheap
// path per array type (numpy, torch, tessera.Array, __cuda_array_interface__,
// DLPack), and packs one launch argument into its 8-byte slot.
#include "array_args.h"

#include <cstring>
#include <string>
#include <unordered_map>

#include "tessera/cuda_runtime.h"

namespace tessera::binding {

namespace {

// numpy's PyArrayObject_fields (numpy/ndarraytypes.h), unchanged from numpy 1.7 to
// 2.x: what PyArray_DATA / PyArray_DESCR read. Only used on objects whose type is
// exactly numpy.ndarray.
struct NumpyArrayFields {
  PyObject_HEAD
  char* data;
  int nd;
  Py_ssize_t* dimensions;
  Py_ssize_t* strides;
  PyObject* base;
  PyObject* descr;
  int flags;
  PyObject* weakreflist;
};

// How arguments of one Python type are read; decided once per type.
enum class Reader : uint8_t {
  kNone,           // not an array (or not one we know): the caller's business
  kNdarray,        // exactly numpy.ndarray: fields read from the object
  kTorch,          // torch.Tensor and subclasses: dtype, is_cuda/is_cpu, data_ptr()
  kTesseraArray,   // tessera.Array: _index, dtype, _ptr / _host
  kCudaInterface,  // __cuda_array_interface__ (CuPy, numba, ...)
  kDlpack,         // __dlpack__ + __dlpack_device__
};

PyObject* intern(const char* s) { return PyUnicode_InternFromString(s); }

struct Names {
  PyObject* dtype = intern("dtype");
  PyObject* is_cuda = intern("is_cuda");
  PyObject* is_cpu = intern("is_cpu");
  PyObject* get_device = intern("get_device");
  PyObject* data_ptr = intern("data_ptr");
  PyObject* index = intern("_index");
  PyObject* ptr = intern("_ptr");
  PyObject* host = intern("_host");
  PyObject* cai = intern("__cuda_array_interface__");
  PyObject* typestr = intern("typestr");
  PyObject* data = intern("data");
  PyObject* device = intern("device");
  PyObject* id = intern("id");
  PyObject* dlpack = intern("__dlpack__");
  PyObject* dlpack_device = intern("__dlpack_device__");
  PyObject* module = intern("__module__");
};

Names& names() {
  static Names* n = new Names();  // never freed: lives as long as the interpreter
  return *n;
}

PyTypeObject* g_ndarray_type = nullptr;
const TorchArgsApi* g_torch_api = nullptr;   // the installed _C_torch reader
PyObject* g_torch_capsule = nullptr;         // owned: keeps g_torch_api's module alive
PyObject* g_torch_stream_getter = nullptr;   // owned: the Python getter it replaces
TorchArgsStats g_torch_stats;

// Asks tessera._torch_native to install _C_torch, once: the first time a torch
// tensor type is met, when torch is imported for sure. Any failure leaves the
// attribute path, silently (tessera._torch_native.state() says why).
void load_torch_args_once() {
  static bool done = false;
  if (done) return;
  done = true;
  PyObject* mod = PyImport_ImportModule("tessera._torch_native");
  PyObject* r = mod ? PyObject_CallMethod(mod, "install", nullptr) : nullptr;
  Py_XDECREF(r);
  Py_XDECREF(mod);
  PyErr_Clear();
}
PyTypeObject* g_numpy_generic = nullptr;

void import_numpy_types() {
  static bool done = false;
  if (done) return;
  done = true;
  PyObject* np = PyImport_ImportModule("numpy");
  if (!np) {
    PyErr_Clear();
    return;
  }
  PyObject* nd = PyObject_GetAttrString(np, "ndarray");
  PyObject* gen = PyObject_GetAttrString(np, "generic");
  if (nd && PyType_Check(nd)) g_ndarray_type = reinterpret_cast<PyTypeObject*>(nd);  // reference kept
  if (gen && PyType_Check(gen)) g_numpy_generic = reinterpret_cast<PyTypeObject*>(gen);
  PyErr_Clear();
  Py_DECREF(np);
}

bool module_starts_with(PyTypeObject* type, const char* prefix) {
  PyObject* mod = PyObject_GetAttr(reinterpret_cast<PyObject*>(type), names().module);
  bool ok = mod && PyUnicode_Check(mod) && std::strncmp(PyUnicode_AsUTF8(mod), prefix, std::strlen(prefix)) == 0;
  Py_XDECREF(mod);
  PyErr_Clear();
  return ok;
}

bool is_torch_tensor_type(PyTypeObject* type) {
  if (!module_starts_with(type, "torch")) return false;
  PyObject* torch_name = PyUnicode_FromString("torch");
  PyObject* torch = PyImport_GetModule(torch_name);  // only if already imported
  Py_DECREF(torch_name);
  if (!torch) {
    PyErr_Clear();
    return false;
  }
  PyObject* tensor = PyObject_GetAttrString(torch, "Tensor");
  bool ok = tensor && PyType_Check(tensor) && PyType_IsSubtype(type, reinterpret_cast<PyTypeObject*>(tensor));
  Py_XDECREF(tensor);
  Py_DECREF(torch);
  PyErr_Clear();
  return ok;
}

bool type_has(PyTypeObject* type, PyObject* name) {
  PyObject* a = _PyType_Lookup(type, name);  // borrowed; no error set
  return a != nullptr;
}

// The same order as specialization.spec_of: torch before the generic protocols
// (a CUDA tensor also has __cuda_array_interface__ and __dlpack__), the CUDA array
// interface before DLPack (CuPy has both).
Reader classify_type(PyTypeObject* type) {
  import_numpy_types();
  if (type == g_ndarray_type) return Reader::kNdarray;
  if (g_numpy_generic && PyType_IsSubtype(type, g_numpy_generic)) return Reader::kNone;  // numpy scalars
  if (is_torch_tensor_type(type)) {
    load_torch_args_once();
    return Reader::kTorch;
  }
  if (std::strcmp(type->tp_name, "Array") == 0 && module_starts_with(type, "tessera.array"))
    return Reader::kTesseraArray;
  if (g_ndarray_type && PyType_IsSubtype(type, g_ndarray_type)) return Reader::kNone;  // subclasses: general path
  if (type_has(type, names().cai)) return Reader::kCudaInterface;
  if (type_has(type, names().dlpack) && type_has(type, names().dlpack_device)) return Reader::kDlpack;
  return Reader::kNone;
}

Reader reader_for(PyTypeObject* type) {
  // Types are kept alive (one reference each) so that an address is never reused
  // by another type while it is in this table.
  static std::unordered_map<PyTypeObject*, Reader> table;
  auto it = table.find(type);
  if (it != table.end()) return it->second;
  Reader r = classify_type(type);
  Py_INCREF(type);
  table.emplace(type, r);
  return r;
}

// Reads an int attribute or method result; false (no error set) if absent or not an int.
bool long_of(PyObject* o, long long* out) {
  if (!o || !PyLong_Check(o)) return false;
  *out = PyLong_AsLongLong(o);
  if (*out == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return true;
}

ArrayRead read_torch(PyObject* v, ArrayArg* out) {
  TorchTensorInfo info;
  if (g_torch_api && g_torch_api->read_tensor(v, &info) == 0) {
    ++g_torch_stats.native_tensors;
    out->data = info.data;
    out->family = DtypeFamily::kTorchDtype;
    out->dtype_id = reinterpret_cast<uint64_t>(info.dtype);  // the same singleton as tensor.dtype
    out->device = info.device;
    return ArrayRead::kOk;
  }
  ++g_torch_stats.attribute_tensors;
  Names& n = names();
  PyObject* is_cuda = PyObject_GetAttr(v, n.is_cuda);
  if (!is_cuda) return PyErr_Clear(), ArrayRead::kGeneralPath;
  bool cuda = is_cuda == Py_True;
  Py_DECREF(is_cuda);
  if (cuda) {
    PyObject* dev = PyObject_CallMethodNoArgs(v, n.get_device);
    long long d = -1;
    bool ok = long_of(dev, &d);
    Py_XDECREF(dev);
    if (!ok || d < 0) return PyErr_Clear(), ArrayRead::kGeneralPath;
    out->device = static_cast<int>(d);
  } else {
    PyObject* is_cpu = PyObject_GetAttr(v, n.is_cpu);  // meta, mps, xpu, ...: the general path
    bool cpu = is_cpu == Py_True;
    Py_XDECREF(is_cpu);
    if (!cpu) return PyErr_Clear(), ArrayRead::kGeneralPath;
    out->device = -1;
  }
  PyObject* dt = PyObject_GetAttr(v, n.dtype);  // a torch.dtype singleton
  if (!dt) return PyErr_Clear(), ArrayRead::kGeneralPath;
  out->family = DtypeFamily::kTorchDtype;
  out->dtype_id = reinterpret_cast<uint64_t>(dt);
  Py_DECREF(dt);  // still alive: torch.float32 etc. are attributes of the torch module
  PyObject* p = PyObject_CallMethodNoArgs(v, n.data_ptr);
  long long addr = 0;
  bool ok = p && PyLong_Check(p);
  if (ok) {
    addr = static_cast<long long>(PyLong_AsUnsignedLongLongMask(p));
    ok = !PyErr_Occurred();
  }
  Py_XDECREF(p);
  if (!ok) return PyErr_Clear(), ArrayRead::kGeneralPath;
  out->data = static_cast<uint64_t>(addr);
  return ArrayRead::kOk;
}

ArrayRead read_tessera_array(PyObject* v, ArrayArg* out) {
  Names& n = names();
  PyObject* index = PyObject_GetAttr(v, n.index);
  PyObject* dt = PyObject_GetAttr(v, n.dtype);
  ArrayRead r = ArrayRead::kGeneralPath;
  if (index && dt) {
    out->family = DtypeFamily::kNumpyDescr;
    out->dtype_id = reinterpret_cast<uint64_t>(dt);  // the array holds its dtype
    long long d = 0;
    if (index == Py_None) {
      PyObject* host = PyObject_GetAttr(v, n.host);
      if (host && Py_TYPE(host) == g_ndarray_type) {
        out->data = reinterpret_cast<uint64_t>(reinterpret_cast<NumpyArrayFields*>(host)->data);
        out->device = -1;
        r = ArrayRead::kOk;
      }
      Py_XDECREF(host);
    } else if (long_of(index, &d)) {
      PyObject* p = PyObject_GetAttr(v, n.ptr);
      long long addr = 0;
      if (long_of(p, &addr)) {
        out->data = static_cast<uint64_t>(addr);
        out->device = static_cast<int>(d);
        r = ArrayRead::kOk;
      }
      Py_XDECREF(p);
    }
  }
  Py_XDECREF(index);
  Py_XDECREF(dt);
  PyErr_Clear();
  return r;
}

// "<f4" -> its bytes in one integer (typestrs are 3 or 4 characters).
bool pack_typestr(PyObject* s, uint64_t* out) {
  Py_ssize_t len = 0;
  const char* c = s && PyUnicode_Check(s) ? PyUnicode_AsUTF8AndSize(s, &len) : nullptr;
  if (!c || len > 8) return false;
  uint64_t v = 0;
  std::memcpy(&v, c, static_cast<size_t>(len));
  *out = v;
  return true;
}

// The device of a __cuda_array_interface__ array, as specialization.spec_of finds
// it: `value.device.id` (CuPy), else the device the driver says owns the pointer.
bool cai_device(PyObject* v, uint64_t ptr, int* device) {
  Names& n = names();
  PyObject* dev = PyObject_GetAttr(v, n.device);
  if (!dev) PyErr_Clear();
  PyObject* id = dev ? PyObject_GetAttr(dev, n.id) : nullptr;
  if (dev && !id) PyErr_Clear();
  long long d = 0;
  bool ok = long_of(id, &d);
  Py_XDECREF(id);
  Py_XDECREF(dev);
  if (ok) {
    *device = static_cast<int>(d);
    return true;
  }
  if (!runtime::cuda::available()) return false;
  try {
    *device = runtime::cuda::pointer_device(ptr);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

ArrayRead read_cuda_interface(PyObject* v, ArrayArg* out) {
  Names& n = names();
  PyObject* cai = PyObject_GetAttr(v, n.cai);
  ArrayRead r = ArrayRead::kGeneralPath;
  if (cai && PyDict_Check(cai)) {
    PyObject* ts = PyDict_GetItemWithError(cai, n.typestr);  // borrowed
    PyObject* data = PyDict_GetItemWithError(cai, n.data);
    uint64_t code = 0;
    long long addr = 0;
    if (pack_typestr(ts, &code) && data && PyTuple_Check(data) && PyTuple_GET_SIZE(data) >= 1 &&
        long_of(PyTuple_GET_ITEM(data, 0), &addr)) {
      out->family = DtypeFamily::kTypestr;
      out->dtype_id = code;
      out->data = static_cast<uint64_t>(addr);
      if (cai_device(v, out->data, &out->device)) r = ArrayRead::kOk;
    }
  }
  Py_XDECREF(cai);
  PyErr_Clear();
  return r;
}

ArrayRead read_dlpack_arg(PyObject* v, ArrayArg* out) {
  DlpackInfo info;
  if (!read_dlpack(v, &info)) return PyErr_Clear(), ArrayRead::kGeneralPath;
  if (info.device_type == kDLCPU) {
    out->device = -1;
  } else if (info.device_type == kDLCUDA || info.device_type == kDLCUDAManaged) {
    out->device = info.device_id;
  } else {
    return ArrayRead::kGeneralPath;  // the Python path names the unsupported device
  }
  out->family = DtypeFamily::kDlpack;
  out->dtype_id = uint64_t(info.code) | uint64_t(info.bits) << 8 | uint64_t(info.lanes) << 16;
  out->data = info.data;
  return ArrayRead::kOk;
}

// DLPack's C ABI (dlpack.h, v0.8; the unversioned capsule every producer exports).
struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};

}  // namespace

bool install_torch_args(PyObject* capsule, PyObject* getter) {
  const TorchArgsApi* api = nullptr;
  if (capsule != Py_None) {
    api = static_cast<const TorchArgsApi*>(PyCapsule_GetPointer(capsule, kTorchArgsCapsule));
    if (!api) return false;
    if (api->abi != kTorchArgsAbi || !api->read_tensor) {
      PyErr_Format(PyExc_ImportError, "_C_torch speaks interface %u, this _C %u: rebuild tessera", api->abi,
                   kTorchArgsAbi);
      return false;
    }
  }
  Py_XDECREF(g_torch_capsule);
  Py_XDECREF(g_torch_stream_getter);
  g_torch_api = api;
  g_torch_capsule = api ? (Py_INCREF(capsule), capsule) : nullptr;
  g_torch_stream_getter = api && getter != Py_None ? (Py_INCREF(getter), getter) : nullptr;
  return true;
}

TorchStreamFn torch_stream_reader_for(PyObject* getter) {
  return g_torch_api && getter && getter == g_torch_stream_getter ? g_torch_api->current_stream : nullptr;
}

TorchArgsStats& torch_args_stats() { return g_torch_stats; }

bool is_numpy_scalar_type(PyTypeObject* type) {
  import_numpy_types();
  return g_numpy_generic && PyType_IsSubtype(type, g_numpy_generic);
}

ArrayRead read_array_arg(PyObject* v, ArrayArg* out) {
  switch (reader_for(Py_TYPE(v))) {
    case Reader::kNdarray: {
      auto* a = reinterpret_cast<NumpyArrayFields*>(v);
      // Read-only arrays go the Python way, which refuses them where the kernel stores.
      constexpr int kNpyArrayWriteable = 0x0400;
      if (!(a->flags & kNpyArrayWriteable)) return ArrayRead::kGeneralPath;
      out->data = reinterpret_cast<uint64_t>(a->data);
      out->family = DtypeFamily::kNumpyDescr;
      out->dtype_id = reinterpret_cast<uint64_t>(a->descr);
      out->device = -1;
      return ArrayRead::kOk;
    }
    case Reader::kTorch:
      return read_torch(v, out);
    case Reader::kTesseraArray:
      return read_tessera_array(v, out);
    case Reader::kCudaInterface:
      return read_cuda_interface(v, out);
    case Reader::kDlpack:
      return read_dlpack_arg(v, out);
    case Reader::kNone:
      break;
  }
  return ArrayRead::kNotAnArray;
}

bool read_dlpack(PyObject* value, DlpackInfo* out) {
  PyObject* capsule = PyObject_CallMethodNoArgs(value, names().dlpack);
  if (!capsule) return false;
  auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (!t) {
    Py_DECREF(capsule);
    return false;
  }
  const DLTensor& d = t->dl_tensor;
  out->data = reinterpret_cast<uint64_t>(d.data) + d.byte_offset;
  out->code = d.dtype.code;
  out->bits = d.dtype.bits;
  out->lanes = d.dtype.lanes;
  out->device_type = d.device.device_type;
  out->device_id = d.device.device_id;
  // Not renamed to "used_dltensor": the capsule is not consumed, so its destructor
  // calls the producer's deleter. The data stays alive through `value` itself.
  Py_DECREF(capsule);
  return true;
}

}  // namespace tessera::binding
