// tessera._C: the binding between the Python frontend and the C++ core
// (compiler, CPU loader and launcher, cache). Only public headers are used.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "array_args.h"
#include "launch_fastpath.h"
#include "tessera/cache.h"
#include "tessera/compiler.h"
#include "tessera/cpu_launcher.h"
#include "tessera/cpu_loader.h"
#include "tessera/cuda_runtime.h"
#include "tessera/thread_pool.h"

namespace py = pybind11;
using namespace tessera;

namespace {

py::dict result_to_dict(const CompileResult& r) {
  py::dict d;
  d["name"] = r.kernel_name;
  d["entry"] = r.entry_symbol;
  d["stage_order"] = r.stage_order;
  py::dict stages;
  for (auto& [k, v] : r.stages) stages[py::str(k)] = py::str(v);
  d["stages"] = stages;
  d["binary"] = py::bytes(r.binary);
  d["binary_kind"] = r.binary_kind;
  d["metadata"] = r.metadata;
  return d;
}

py::dict compile(const std::string& ir, const std::string& target, int num_warps, int num_stages, bool debug,
                 const std::vector<std::string>& dump, const std::string& cpu_name, const std::string& cpu_features) {
  CompileOptions o;
  o.target = target;
  o.num_warps = num_warps;
  o.num_stages = num_stages;
  o.debug = debug;
  o.dump = dump;
  o.cpu_name = cpu_name;
  o.cpu_features = cpu_features;
  CompileResult r;
  {
    py::gil_scoped_release release;
    try {
      r = compile_tile_ir(ir, o);
    } catch (const CompileError& e) {
      py::gil_scoped_acquire acquire;
      py::dict d;
      d["error"] = std::string(e.what());
      d["user_error"] = e.user_error;
      d["line"] = e.line;
      d["col"] = e.col;
      return d;
    }
  }
  return result_to_dict(r);
}

// Argument kinds, one character per runtime argument:
//   p pointer (buffer-protocol object, object with data_ptr(), or int address)
//   b bool  i int32  I uint32  l int64  L uint64  c int8  C uint8  s int16  S uint16
//   f fp32  d fp64  x (skipped: the argument was specialized into the code)
uint64_t pack_arg(PyObject* o, char kind, size_t index) {
  uint64_t slot = 0;
  switch (kind) {
    case 'p': {
      if (PyLong_Check(o)) return PyLong_AsUnsignedLongLong(o);
      if (PyObject_CheckBuffer(o)) {
        Py_buffer view;
        if (PyObject_GetBuffer(o, &view, PyBUF_RECORDS_RO) == 0) {
          slot = reinterpret_cast<uint64_t>(view.buf);
          PyBuffer_Release(&view);
          return slot;
        }
        PyErr_Clear();
      }
      PyObject* p = PyObject_CallMethod(o, "data_ptr", nullptr);
      if (!p) {
        PyErr_Clear();
        // CuPy and other __cuda_array_interface__ producers: data = (pointer, read_only).
        PyObject* cai = PyObject_GetAttrString(o, "__cuda_array_interface__");
        if (cai) {
          PyObject* data = PyDict_Check(cai) ? PyDict_GetItemString(cai, "data") : nullptr;  // borrowed
          if (data && PyTuple_Check(data) && PyTuple_Size(data) >= 1) p = PyNumber_Long(PyTuple_GetItem(data, 0));
          Py_DECREF(cai);
        }
        if (!p) {
          PyErr_Clear();
          binding::DlpackInfo info;  // __dlpack__ producers (jax, paddle, ...)
          if (PyObject_HasAttrString(o, "__dlpack__") && binding::read_dlpack(o, &info))
            p = PyLong_FromUnsignedLongLong(info.data);
        }
        if (!p) {
          PyErr_Clear();
          throw py::type_error("argument " + std::to_string(index) + ": expected an array or tensor, got " +
                               std::string(Py_TYPE(o)->tp_name));
        }
      }
      slot = PyLong_AsUnsignedLongLong(p);
      Py_DECREF(p);
      return slot;
    }
    case 'f': {
      float f = static_cast<float>(PyFloat_AsDouble(o));
      std::memcpy(&slot, &f, 4);
      break;
    }
    case 'd': {
      double d = PyFloat_AsDouble(o);
      std::memcpy(&slot, &d, 8);
      break;
    }
    case 'L':
    case 'I':
    case 'C':
    case 'S':
      slot = PyLong_AsUnsignedLongLongMask(o);
      break;
    case 'b':
      slot = PyObject_IsTrue(o) ? 1 : 0;
      break;
    default:
      slot = static_cast<uint64_t>(PyLong_AsLongLong(o));
      break;
  }
  if (PyErr_Occurred()) throw py::error_already_set();
  return slot;
}

void launch_cpu(uintptr_t entry, int64_t g0, int64_t g1, int64_t g2, py::tuple args, const std::string& kinds,
                int cluster) {
  if (args.size() != kinds.size()) throw py::value_error("launch: argument count does not match the kernel");
  if (g0 < 0 || g1 < 0 || g2 < 0) throw py::value_error("grid dimensions must be >= 0");
  uint64_t argv_small[32];
  std::vector<uint64_t> argv_big;
  uint64_t* argv = argv_small;
  if (kinds.size() > 32) {
    argv_big.resize(kinds.size());
    argv = argv_big.data();
  }
  size_t slot = 0;
  for (size_t i = 0; i < kinds.size(); ++i)
    if (kinds[i] != 'x') argv[slot++] = pack_arg(args[i].ptr(), kinds[i], i);  // 'x': specialized away
  if (g0 == 0 || g1 == 0 || g2 == 0) return;  // empty grid: nothing to do
  if (g0 > INT32_MAX || g1 > INT32_MAX || g2 > INT32_MAX) throw py::value_error("grid dimension exceeds 2^31-1");
  py::gil_scoped_release release;
  runtime::launch_cpu(reinterpret_cast<runtime::CpuEntry>(entry), argv, static_cast<int32_t>(g0),
                      static_cast<int32_t>(g1), static_cast<int32_t>(g2), cluster);
}

void launch_cuda(int device, uintptr_t fn, int64_t g0, int64_t g1, int64_t g2, int threads, int shared,
                 uintptr_t stream, py::tuple args, const std::string& kinds) {
  if (args.size() != kinds.size()) throw py::value_error("launch: argument count does not match the kernel");
  if (g0 < 0 || g1 < 0 || g2 < 0) throw py::value_error("grid dimensions must be >= 0");
  if (g0 > INT32_MAX || g1 > 65535 || g2 > 65535)
    throw py::value_error("grid dimensions exceed the GPU's limits (2^31-1, 65535, 65535)");
  uint64_t slots[64];
  void* params[64];
  if (kinds.size() > 64) throw py::value_error("launch: more than 64 kernel arguments");
  size_t n = 0;
  for (size_t i = 0; i < kinds.size(); ++i)
    if (kinds[i] != 'x') {
      slots[n] = pack_arg(args[i].ptr(), kinds[i], i);
      params[n] = &slots[n];  // the driver reads sizeof(param) bytes: the low bytes
      ++n;
    }
  if (g0 == 0 || g1 == 0 || g2 == 0) return;
  py::gil_scoped_release release;
  (void)device;  // the kernel handle knows its device
  runtime::cuda::launch_kernel(fn, static_cast<int>(g0), static_cast<int>(g1), static_cast<int>(g2), threads, shared,
                               stream, params);
}

uintptr_t load_cpu(const py::bytes& object, const std::string& symbol) {
  std::string obj = object;
  py::gil_scoped_release release;
  return reinterpret_cast<uintptr_t>(load_cpu_object(obj, symbol, runtime::cpu_runtime_symbols()));
}

std::string hash_key(const std::vector<std::pair<std::string, std::string>>& fields) {
  cache::KeyBuilder kb;
  for (auto& [k, v] : fields) kb.add(k, v);
  return kb.finish().hex();
}

py::object cache_get(const std::string& dir, const std::string& key_hex) {
  auto key = cache::Key128::from_hex(key_hex);
  if (!key) throw py::value_error("bad cache key");
  std::optional<cache::Entry> e;
  {
    py::gil_scoped_release release;
    e = cache::DiskStore(dir).get(*key);
  }
  if (!e) return py::none();
  py::dict d;
  for (auto& [k, v] : e->blobs) d[py::str(k)] = py::bytes(v);
  return d;
}

bool cache_put(const std::string& dir, const std::string& key_hex, const std::map<std::string, py::bytes>& blobs) {
  auto key = cache::Key128::from_hex(key_hex);
  if (!key) throw py::value_error("bad cache key");
  cache::Entry e;
  for (auto& [k, v] : blobs) e.blobs[k] = std::string(v);
  py::gil_scoped_release release;
  return cache::DiskStore(dir).put(*key, e);
}

// (data address, dtype ir or None, device string) of a DLPack producer, for
// specialization.spec_of. dtype None: a type kernels do not take.
py::tuple dlpack_info(py::object value) {
  binding::DlpackInfo info;
  if (!binding::read_dlpack(value.ptr(), &info)) throw py::error_already_set();
  // DLPack type codes: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool.
  static const struct {
    uint8_t code, bits;
    const char* ir;
  } kTypes[] = {{0, 8, "i8"},   {0, 16, "i16"}, {0, 32, "i32"}, {0, 64, "i64"}, {1, 8, "u8"},
                {1, 16, "u16"}, {1, 32, "u32"}, {1, 64, "u64"}, {2, 16, "f16"}, {2, 32, "f32"},
                {2, 64, "f64"}, {4, 16, "bf16"}, {6, 8, "i1"}};
  const char* ir = nullptr;
  for (const auto& t : kTypes)
    if (info.lanes == 1 && info.code == t.code && info.bits == t.bits) ir = t.ir;
  std::string device;
  if (info.device_type == binding::kDLCPU) device = "cpu";
  else if (info.device_type == binding::kDLCUDA || info.device_type == binding::kDLCUDAManaged)
    device = "cuda:" + std::to_string(info.device_id);
  else device = "dlpack device type " + std::to_string(info.device_type);
  std::string dtype = "code " + std::to_string(info.code) + " bits " + std::to_string(info.bits) +
                      (info.lanes != 1 ? " lanes " + std::to_string(info.lanes) : "");
  return py::make_tuple(info.data, ir ? py::object(py::str(ir)) : py::object(py::none()), device, dtype);
}

py::list cache_list(const std::string& dir) {
  py::list out;
  for (auto& i : cache::DiskStore(dir).list()) {
    py::dict d;
    d["key"] = i.key_hex;
    d["path"] = i.path;
    d["size"] = i.size_bytes;
    d["mtime"] = i.mtime_unix;
    d["name"] = i.kernel_name;
    out.append(d);
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "Tessera's C++ core: compiler, CPU runtime and cache";
  py::register_exception<runtime::DeviceAssertError>(m, "DeviceAssertError", PyExc_AssertionError);
  py::register_exception<runtime::ClusterError>(m, "ClusterError", PyExc_RuntimeError);
  m.def("compile", &compile, py::arg("ir"), py::arg("target") = "cpu", py::arg("num_warps") = 4,
        py::arg("num_stages") = 3, py::arg("debug") = false, py::arg("dump") = std::vector<std::string>{},
        py::arg("cpu_name") = "", py::arg("cpu_features") = "");
  m.def("run_passes", &run_passes);
  m.def("load_cpu", &load_cpu);
  m.def("launch_cpu", &launch_cpu, py::arg("entry"), py::arg("g0"), py::arg("g1"), py::arg("g2"), py::arg("args"),
        py::arg("kinds"), py::arg("cluster") = 0);
  m.def("hash_key", &hash_key);
  m.def("cache_get", &cache_get);
  m.def("cache_put", &cache_put);
  m.def("cache_list", &cache_list);
  m.def("cache_clear", [](const std::string& dir) { return cache::DiskStore(dir).clear(); });
  m.def("cache_remove", [](const std::string& dir, const std::string& key_hex) {
    auto key = cache::Key128::from_hex(key_hex);
    return key ? cache::DiskStore(dir).remove(*key) : false;
  });
  m.def("default_cache_dir", &cache::DiskStore::default_dir);
  m.def("build_id", &compiler_build_id);
  m.def("host_cpu_name", &host_cpu_name);
  m.def("host_cpu_features", &host_cpu_features);
  // CudaError (a RuntimeError) carries `code` and `sticky` (the context was reset
  // after it; see cuda_runtime.h).
  m.add_object("CudaError", binding::cuda_error_type());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const runtime::cuda::CudaError& e) {
      binding::set_cuda_error(e, "");
    }
  });
  m.def("cuda_available", &runtime::cuda::available);
  m.def("cuda_unavailable_reason", &runtime::cuda::unavailable_reason);
  m.def("cuda_device_count", &runtime::cuda::device_count);
  m.def("cuda_capability", &runtime::cuda::compute_capability);
  m.def("cuda_device_name", &runtime::cuda::device_name);
  m.def(
      "cuda_load",
      [](int device, const py::bytes& image, const std::string& name, int shared, const std::string& tensor_maps,
         bool pdl, int cluster) {
        std::string img = image;
        py::gil_scoped_release release;
        return runtime::cuda::load_kernel(device, img, name, shared, tensor_maps, pdl, cluster);
      },
      py::arg("device"), py::arg("image"), py::arg("name"), py::arg("shared"), py::arg("tensor_maps") = "",
      py::arg("pdl") = false, py::arg("cluster") = 0);
  m.def("cuda_launch", &launch_cuda);
  m.def("cuda_kernel_attributes", [](uintptr_t kernel) {
    runtime::cuda::KernelAttributes a = runtime::cuda::kernel_attributes(kernel);
    py::dict d;
    d["num_regs"] = a.num_regs;
    d["local_bytes"] = a.local_bytes;
    d["max_threads"] = a.max_threads;
    d["static_shared_bytes"] = a.static_shared_bytes;
    return d;
  });
  m.def("cuda_synchronize", [](int device) {
    py::gil_scoped_release release;
    runtime::cuda::synchronize_checked(device);
  });
  m.def("cuda_context_generation", &runtime::cuda::context_generation);
  m.def("cuda_pointer_device", &runtime::cuda::pointer_device);
  m.def("dlpack_info", &dlpack_info);
  // The optional torch reader (_C_torch): see tessera/_torch_native.py.
  m.def("_install_torch_args", [](py::object capsule, py::object getter) {
    if (!binding::install_torch_args(capsule.ptr(), getter.ptr())) throw py::error_already_set();
  });
  m.def("_torch_args_stats", [] {
    const binding::TorchArgsStats& s = binding::torch_args_stats();
    py::dict d;
    d["native_tensors"] = s.native_tensors;
    d["attribute_tensors"] = s.attribute_tensors;
    d["native_streams"] = s.native_streams;
    return d;
  });
  binding::register_launch_fastpath(m);
  m.def("cuda_malloc", &runtime::cuda::mem_alloc);
  m.def("cuda_free", &runtime::cuda::mem_free);
  m.def("cuda_memset", &runtime::cuda::mem_set);
  m.def("cuda_copy_to_device", [](int device, uintptr_t dst, py::buffer src) {
    py::buffer_info info = src.request();
    size_t bytes = static_cast<size_t>(info.size) * static_cast<size_t>(info.itemsize);
    py::gil_scoped_release release;
    runtime::cuda::copy_to_device(device, dst, info.ptr, bytes);
  });
  m.def("cuda_copy_to_host", [](int device, py::buffer dst, uintptr_t src) {
    py::buffer_info info = dst.request(true);
    size_t bytes = static_cast<size_t>(info.size) * static_cast<size_t>(info.itemsize);
    py::gil_scoped_release release;
    runtime::cuda::copy_to_host(device, info.ptr, src, bytes);
  });
  m.def("num_threads", [] { return runtime::ThreadPool::global().num_threads(); });
  m.def("cuda_event_create", &runtime::cuda::event_create);
  m.def("cuda_event_record", &runtime::cuda::event_record);
  m.def("cuda_event_elapsed_ms", [](int device, uintptr_t start, uintptr_t end) {
    py::gil_scoped_release release;
    return runtime::cuda::event_elapsed_ms(device, start, end);
  });
  m.def("cuda_event_destroy", &runtime::cuda::event_destroy);
}
