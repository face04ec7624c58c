// The cached launch of a kernel in C++: `kernel[grid](*args, **kw)` binds the
// arguments, computes the specialization key, finds the compiled specialization in
// this kernel's table, packs the parameters and launches (CPU thread pool or
// cuLaunchKernel). Anything else (a first launch, interpreter mode, a callable
// grid, unusual options or arguments, any error) goes to the Python launcher in
// jit.py, unchanged, so behaviour and error messages are the Python path's; what
// that launch compiled is then registered here under the key computed here.
// `kernel.bind(grid, **values)` (BoundKernel) is the same launch with the grid, the
// options and some arguments fixed once: a call keys only the arguments it passes
// and first tries the specialization its previous call matched.
//
// The key computed here must be at least as fine as specialization.spec_of's: two
// calls with the same key here must have the same key there. Per runtime argument:
//   bool -> i1; int == 1 -> constant; other ints -> i32/i64/u64 and divisible by 16
//   or by 8 (specialization.divisibility_class);
//   float -> f32; None -> constant; numpy scalar -> its type;
//   array -> dtype identity (per array family), device, and on a GPU whether the
//   address is 16-byte aligned.
// Per constexpr argument: the value (same object, or same exact type and equal).
// Plus num_warps, num_stages, maxnreg (0: not given) and the resolved debug flag.
// Triton's launch_pdl= is accepted and changes nothing (a kernel that calls gdc_wait is
// launched with PDL whatever the launch says), so it is no part of the key.
#include "launch_fastpath.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "array_args.h"
#include "tessera/cpu_launcher.h"
#include "tessera/cuda_runtime.h"

namespace py = pybind11;

namespace tessera::binding {

namespace {

constexpr size_t kMaxParams = 64;
// More specializations than this are still launched, through the Python path.
constexpr size_t kMaxSpecializations = 256;

enum Tag : uint64_t { kBool = 1, kConstOne, kInt32, kInt64, kUInt64, kFloat, kNone, kNumpyScalar, kArray };

// One runtime argument's part of the key. No default member initializers: a
// CallKey holds kMaxParams of them on the stack, and zeroing those 2 KB on every
// launch was the largest single cost of this path (runtime_key fills what is used).
struct ArgKey {
  uint64_t tag;
  uint64_t value;
};

// One runtime argument as the launch needs it.
struct ArgValue {
  PyObject* object;  // borrowed from the call
  uint64_t data;     // arrays: the address of the first element
};

struct Specialization {
  std::vector<ArgKey> keys;          // one per runtime parameter
  std::vector<PyObject*> constexprs; // one per constexpr parameter (owned)
  std::vector<PyObject*> owned;      // dtype objects whose addresses are in `keys`
  long num_warps = 4, num_stages = 3, maxnreg = 0;
  bool debug = false;
  std::string kinds;                 // one per runtime parameter (see module.cpp)
  bool cuda = false;
  uintptr_t cpu_entry = 0;
  int device = 0;
  uintptr_t cuda_function = 0;
  int threads = 128, shared = 0;
  PyObject* stream_getter = nullptr; // owned; None-less: nullptr means stream 0
  PyObject* compiled = nullptr;      // owned: the CompiledKernel a launch returns

  ~Specialization() {
    for (PyObject* o : constexprs) Py_XDECREF(o);
    for (PyObject* o : owned) Py_XDECREF(o);
    Py_XDECREF(stream_getter);
    Py_XDECREF(compiled);
  }
};

struct FastPath {
  std::string kernel_name;
  std::vector<PyObject*> names;  // owned, interned
  std::vector<char> is_constexpr;
  std::vector<PyObject*> defaults;  // owned; nullptr: required
  int kernel_debug = -1;            // Kernel.debug: -1 None, else its truth value
  PyObject* jit_globals = nullptr;  // owned: jit.py's module dict (_INTERPRET, _DEBUG)
  PyObject* constexpr_type = nullptr;  // owned: tessera.language.constexpr
  bool enabled = false;
  size_t n_runtime = 0;
  std::vector<Specialization*> specs;
  uint64_t generation = 0;  // bumped when specs are freed: bound launches drop their cached one

  void clear_specs() {
    for (Specialization* s : specs) delete s;
    specs.clear();
    ++generation;
  }
  ~FastPath() {
    clear_specs();
    for (PyObject* o : names) Py_XDECREF(o);
    for (PyObject* o : defaults) Py_XDECREF(o);
    Py_XDECREF(jit_globals);
    Py_XDECREF(constexpr_type);
  }
};

struct KernelLauncherObject {
  PyObject_HEAD
  FastPath* fp;
};

struct BoundLaunchObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  KernelLauncherObject* kernel;  // owned
  PyObject* grid;                // owned
};

struct Interned {
  PyObject* num_warps = PyUnicode_InternFromString("num_warps");
  PyObject* num_stages = PyUnicode_InternFromString("num_stages");
  PyObject* maxnreg = PyUnicode_InternFromString("maxnreg");
  PyObject* debug = PyUnicode_InternFromString("debug");
  PyObject* stream = PyUnicode_InternFromString("stream");
  PyObject* launch_pdl = PyUnicode_InternFromString("launch_pdl");
  PyObject* grid = PyUnicode_InternFromString("grid");
  PyObject* launch = PyUnicode_InternFromString("_launch");
  PyObject* value = PyUnicode_InternFromString("value");
  PyObject* interpret_flag = PyUnicode_InternFromString("_INTERPRET");
  PyObject* debug_flag = PyUnicode_InternFromString("_DEBUG");
  PyObject* kinds = PyUnicode_InternFromString("kinds");
  PyObject* fast_target = PyUnicode_InternFromString("_fast_target");
};

Interned& S() {
  static Interned* s = new Interned();
  return *s;
}

PyObject* g_device_assert_type = nullptr;  // tessera._C.DeviceAssertError

bool same_name(PyObject* a, PyObject* b) {
  return a == b || (PyUnicode_Check(b) && PyUnicode_Compare(a, b) == 0);
}

// --- the key ------------------------------------------------------------------------

// An integer's divisibility class (specialization.divisibility_class: 16, 8 or 1) as
// two tag bits: divisible by 16, divisible by 8. (Two's complement: x % 2^k of a
// negative x is 0 exactly when its low k bits are, as for Python's %.)
inline uint64_t divisibility_bits(uint64_t x) {
  return uint64_t((x & 15) == 0) << 8 | uint64_t((x & 7) == 0) << 9;
}

// False: not a value this path knows (the Python path judges it).
bool runtime_key(PyObject* v, ArgKey* key, ArgValue* val) {
  *key = ArgKey{0, 0};
  *val = ArgValue{v, 0};
  if (v == Py_True || v == Py_False) {
    key->tag = kBool;
    return true;
  }
  PyTypeObject* t = Py_TYPE(v);
  if (t == &PyLong_Type) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow == 0) {
      if (x == -1 && PyErr_Occurred()) return PyErr_Clear(), false;
      if (x == 1) {
        key->tag = kConstOne;
        return true;
      }
      key->tag = (x >= -(1LL << 31) && x < (1LL << 31) ? kInt32 : kInt64) | divisibility_bits(uint64_t(x));
      return true;
    }
    if (overflow < 0) return false;
    unsigned long long u = PyLong_AsUnsignedLongLong(v);
    if (PyErr_Occurred()) return PyErr_Clear(), false;  // >= 2^64: the Python path raises
    key->tag = kUInt64 | divisibility_bits(u);
    return true;
  }
  if (t == &PyFloat_Type) {
    key->tag = kFloat;
    return true;
  }
  if (v == Py_None) {
    key->tag = kNone;
    return true;
  }
  ArrayArg a;
  switch (read_array_arg(v, &a)) {
    case ArrayRead::kOk:
      key->tag = kArray | uint64_t(a.family) << 8 | uint64_t(uint32_t(a.device + 1)) << 16 |
                 uint64_t(a.device >= 0 && a.data % 16 == 0) << 48;
      key->value = a.dtype_id;
      val->data = a.data;
      return true;
    case ArrayRead::kGeneralPath:
      return false;
    case ArrayRead::kNotAnArray:
      break;
  }
  if (is_numpy_scalar_type(t)) {
    key->tag = kNumpyScalar;
    key->value = reinterpret_cast<uint64_t>(t);
    return true;
  }
  return false;
}

// Constexpr values this path compares by value; others only by identity.
bool compared_by_value(PyTypeObject* t) {
  return t == &PyLong_Type || t == &PyFloat_Type || t == &PyUnicode_Type || t == &PyTuple_Type ||
         t == &PyBool_Type;
}

// 1: equal, 0: not, -1: error (cleared; treated as not equal).
bool constexpr_equal(PyObject* stored, PyObject* v) {
  if (stored == v) return true;
  if (Py_TYPE(stored) != Py_TYPE(v) || !compared_by_value(Py_TYPE(v))) return false;
  int r = PyObject_RichCompareBool(stored, v, Py_EQ);
  if (r < 0) PyErr_Clear();
  return r == 1;
}

struct CallKey {
  ArgKey keys[kMaxParams];
  ArgValue values[kMaxParams];
  PyObject* constexprs[kMaxParams];  // new references (unwrapped tl.constexpr values)
  size_t n_runtime = 0, n_constexpr = 0;
  long num_warps = 4, num_stages = 3, maxnreg = 0;
  bool debug = false;

  ~CallKey() {
    for (size_t i = 0; i < n_constexpr; ++i) Py_DECREF(constexprs[i]);
  }
  bool matches(const Specialization& s) const {
    if (s.num_warps != num_warps || s.num_stages != num_stages || s.maxnreg != maxnreg || s.debug != debug)
      return false;
    for (size_t i = 0; i < n_runtime; ++i)
      if (s.keys[i].tag != keys[i].tag || s.keys[i].value != keys[i].value) return false;
    for (size_t i = 0; i < n_constexpr; ++i)
      if (!constexpr_equal(s.constexprs[i], constexprs[i])) return false;
    return true;
  }
};

// --- packing and launching ---------------------------------------------------------

// The 8-byte slot of a scalar argument (as module.cpp's pack_arg). False with a
// Python error set.
bool pack_scalar(PyObject* o, char kind, uint64_t* slot) {
  *slot = 0;
  switch (kind) {
    case 'f': {
      float f = static_cast<float>(PyFloat_AsDouble(o));
      std::memcpy(slot, &f, 4);
      break;
    }
    case 'd': {
      double d = PyFloat_AsDouble(o);
      std::memcpy(slot, &d, 8);
      break;
    }
    case 'L':
    case 'I':
    case 'C':
    case 'S':
      *slot = PyLong_AsUnsignedLongLongMask(o);
      break;
    case 'b': {
      int t = PyObject_IsTrue(o);
      *slot = t > 0;
      break;
    }
    default:
      *slot = static_cast<uint64_t>(PyLong_AsLongLong(o));
      break;
  }
  return !PyErr_Occurred();
}

// CudaError("kernel NAME: <what>"), as Kernel.run raises for launches through Python.
void raise_cuda_error(const FastPath& fp, const runtime::cuda::CudaError& e) {
  set_cuda_error(e, "kernel " + fp.kernel_name + ": ");
}

// The current torch stream of the specialization's device (or 0 without torch).
bool current_stream(const Specialization& s, PyObject* explicit_stream, uintptr_t* stream) {
  PyObject* r = nullptr;
  if (explicit_stream && explicit_stream != Py_None) {
    r = explicit_stream;
    Py_INCREF(r);
  } else if (s.stream_getter) {
    if (TorchStreamFn read = torch_stream_reader_for(s.stream_getter); read && read(s.device, stream) == 0) {
      ++torch_args_stats().native_streams;
      return true;
    }
    PyObject* index = PyLong_FromLong(s.device);
    r = PyObject_CallOneArg(s.stream_getter, index);
    Py_DECREF(index);
    if (!r) return false;
  } else {
    *stream = 0;
    return true;
  }
  *stream = static_cast<uintptr_t>(PyLong_AsUnsignedLongLongMask(r));
  Py_DECREF(r);
  return !PyErr_Occurred();
}

// Packs and launches; nullptr with a Python error set on failure. On the CPU `s` is
// not used once the GIL is released: another thread may clear the table meanwhile.
PyObject* launch_unowned(const FastPath& fp, const Specialization& s, const CallKey& key, const long grid[3],
                         PyObject* explicit_stream) {
  uint64_t slots[kMaxParams];
  void* params[kMaxParams];
  size_t n = 0;
  for (size_t i = 0; i < key.n_runtime; ++i) {
    char kind = s.kinds[i];
    if (kind == 'x') continue;  // specialized into the code (== 1, None)
    if (kind == 'p') {
      slots[n] = key.values[i].data;
    } else if (!pack_scalar(key.values[i].object, kind, &slots[n])) {
      return nullptr;
    }
    params[n] = &slots[n];  // the driver reads sizeof(param) bytes: the low bytes
    ++n;
  }
  if (grid[0] != 0 && grid[1] != 0 && grid[2] != 0) {
    if (s.cuda) {
      uintptr_t stream = 0;
      if (!current_stream(s, explicit_stream, &stream)) return nullptr;
      // The GIL stays held: cuLaunchKernel only queues the launch (as torch's
      // launches, which also keep it), and releasing and taking it back cost more
      // than the rest of this path's bookkeeping.
      try {
        runtime::cuda::launch_kernel(s.cuda_function, int(grid[0]), int(grid[1]), int(grid[2]), s.threads, s.shared,
                                     stream, params);
      } catch (const runtime::cuda::CudaError& e) {
        return raise_cuda_error(fp, e), nullptr;
      }
    } else {
      std::string error;
      int failure = 0;  // 1: device assert, 2: other
      const auto entry = reinterpret_cast<runtime::CpuEntry>(s.cpu_entry);
      Py_BEGIN_ALLOW_THREADS
      try {
        runtime::launch_cpu(entry, slots, int32_t(grid[0]),
                            int32_t(grid[1]), int32_t(grid[2]));
      } catch (const runtime::DeviceAssertError& e) {
        failure = 1;
        error = e.what();
      } catch (const std::exception& e) {
        failure = 2;
        error = e.what();
      }
      Py_END_ALLOW_THREADS
      if (failure) {
        PyErr_SetString(failure == 1 ? g_device_assert_type : PyExc_RuntimeError, error.c_str());
        return nullptr;
      }
    }
  }
  return Py_None;  // borrowed: launch() returns the CompiledKernel it holds
}

// Launches a matched specialization; returns its CompiledKernel (new reference).
PyObject* launch(const FastPath& fp, const Specialization& s, const CallKey& key, const long grid[3],
                 PyObject* explicit_stream) {
  PyObject* compiled = s.compiled;
  Py_INCREF(compiled);
  if (!launch_unowned(fp, s, key, grid, explicit_stream)) {
    Py_DECREF(compiled);
    return nullptr;
  }
  return compiled;
}

// --- the Python path and registering what it compiled -----------------------------

// self._launch(*args, grid=grid, **kwargs): jit.py's generated launcher.
PyObject* call_python_path(KernelLauncherObject* k, PyObject* grid, PyObject* const* args, Py_ssize_t nargs,
                           PyObject* kwnames) {
  PyObject* launch = PyObject_GetAttr(reinterpret_cast<PyObject*>(k), S().launch);
  if (!launch) return nullptr;
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  std::vector<PyObject*> all(args, args + nargs + nkw);
  all.push_back(grid);
  PyObject* names = PyTuple_New(nkw + 1);
  if (!names) {
    Py_DECREF(launch);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < nkw; ++i) {
    PyObject* n = PyTuple_GET_ITEM(kwnames, i);
    Py_INCREF(n);
    PyTuple_SET_ITEM(names, i, n);
  }
  Py_INCREF(S().grid);
  PyTuple_SET_ITEM(names, nkw, S().grid);
  PyObject* r = PyObject_Vectorcall(launch, all.data(), nargs, names);
  Py_DECREF(names);
  Py_DECREF(launch);
  return r;
}

// Reads compiled._fast_target: ("cpu", entry) or
// ("cuda", device, function, threads, shared_bytes, stream_getter or None).
bool read_target(PyObject* compiled, Specialization* s) {
  PyObject* t = PyObject_GetAttr(compiled, S().fast_target);
  PyObject* kinds = t ? PyObject_GetAttr(compiled, S().kinds) : nullptr;
  bool ok = false;
  if (t && kinds && PyTuple_Check(t) && PyTuple_GET_SIZE(t) >= 2 && PyUnicode_Check(kinds)) {
    s->kinds = PyUnicode_AsUTF8(kinds);
    const char* what = PyUnicode_Check(PyTuple_GET_ITEM(t, 0)) ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(t, 0)) : "";
    if (std::strcmp(what, "cpu") == 0) {
      s->cpu_entry = static_cast<uintptr_t>(PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(t, 1)));
      ok = s->cpu_entry != 0;
    } else if (std::strcmp(what, "cuda") == 0 && PyTuple_GET_SIZE(t) == 6) {
      s->cuda = true;
      s->device = static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(t, 1)));
      s->cuda_function = static_cast<uintptr_t>(PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(t, 2)));
      s->threads = static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(t, 3)));
      s->shared = static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(t, 4)));
      PyObject* getter = PyTuple_GET_ITEM(t, 5);
      if (getter != Py_None) {
        Py_INCREF(getter);
        s->stream_getter = getter;
      }
      ok = s->cuda_function != 0;
    }
  }
  Py_XDECREF(t);
  Py_XDECREF(kinds);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    ok = false;
  }
  return ok;
}

void register_specialization(FastPath& fp, const CallKey& key, PyObject* compiled) {
  if (fp.specs.size() >= kMaxSpecializations) return;
  for (Specialization* s : fp.specs)
    if (key.matches(*s)) return;  // already here (the call missed for its grid or stream=)
  auto* s = new Specialization();
  if (!read_target(compiled, s) || s->kinds.size() != key.n_runtime) {
    delete s;
    return;
  }
  s->keys.assign(key.keys, key.keys + key.n_runtime);
  for (size_t i = 0; i < key.n_runtime; ++i) {
    uint64_t tag = s->keys[i].tag;
    auto family = static_cast<DtypeFamily>((tag >> 8) & 0xFF);
    bool object_id = (tag & 0xFF) == kArray && (family == DtypeFamily::kNumpyDescr ||
                                                 family == DtypeFamily::kTorchDtype);
    if (object_id || (tag & 0xFF) == kNumpyScalar) {  // keep the address from being reused
      auto* o = reinterpret_cast<PyObject*>(s->keys[i].value);
      Py_INCREF(o);
      s->owned.push_back(o);
    }
  }
  for (size_t i = 0; i < key.n_constexpr; ++i) {
    Py_INCREF(key.constexprs[i]);
    s->constexprs.push_back(key.constexprs[i]);
  }
  s->num_warps = key.num_warps;
  s->num_stages = key.num_stages;
  s->maxnreg = key.maxnreg;
  s->debug = key.debug;
  Py_INCREF(compiled);
  s->compiled = compiled;
  fp.specs.push_back(s);
}

// --- binding a call -----------------------------------------------------------------

bool exact_long(PyObject* o, long* out) {
  if (Py_TYPE(o) != &PyLong_Type) return false;
  int overflow = 0;
  *out = PyLong_AsLongAndOverflow(o, &overflow);
  if (PyErr_Occurred()) return PyErr_Clear(), false;
  return overflow == 0;
}

// grid: a tuple of 1 to 3 non-negative ints below 2^31 (else the Python path says why).
bool read_grid(PyObject* grid, long g[3]) {
  if (!PyTuple_CheckExact(grid)) return false;
  Py_ssize_t n = PyTuple_GET_SIZE(grid);
  if (n < 1 || n > 3) return false;
  g[0] = g[1] = g[2] = 1;
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!exact_long(PyTuple_GET_ITEM(grid, i), &g[i]) || g[i] < 0 || g[i] >= (1L << 31)) return false;
  return true;
}

bool flag_set(PyObject* globals, PyObject* name) {
  PyObject* v = PyDict_GetItemWithError(globals, name);  // borrowed
  if (!v) return PyErr_Clear(), false;
  int t = PyObject_IsTrue(v);
  if (t < 0) PyErr_Clear();
  return t > 0;
}

// Binds the call and computes its key. False: the Python path takes the call.
bool bind_and_key(const FastPath& fp, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, CallKey* key,
                  PyObject** stream) {
  size_t n = fp.names.size();
  if (static_cast<size_t>(nargs) > n) return false;
  PyObject* values[kMaxParams];
  for (size_t i = 0; i < n; ++i) values[i] = i < static_cast<size_t>(nargs) ? args[i] : nullptr;
  PyObject* debug = nullptr;
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  Interned& s = S();
  for (Py_ssize_t j = 0; j < nkw; ++j) {
    PyObject* name = PyTuple_GET_ITEM(kwnames, j);
    PyObject* v = args[nargs + j];
    size_t i = 0;
    while (i < n && fp.names[i] != name) ++i;
    if (i == n) {
      i = 0;
      while (i < n && !same_name(fp.names[i], name)) ++i;
    }
    if (i < n) {
      if (values[i]) return false;  // "multiple values": the Python path raises
      values[i] = v;
    } else if (same_name(s.num_warps, name)) {
      if (!exact_long(v, &key->num_warps)) return false;
    } else if (same_name(s.num_stages, name)) {
      if (!exact_long(v, &key->num_stages)) return false;
    } else if (same_name(s.maxnreg, name)) {
      if (v != Py_None && (!exact_long(v, &key->maxnreg) || key->maxnreg <= 0)) return false;
    } else if (same_name(s.debug, name)) {
      debug = v;
    } else if (same_name(s.stream, name)) {
      *stream = v;
    } else if (same_name(s.launch_pdl, name)) {
      // ignored, as jit.py's _LAUNCH_OPTIONS
    } else {
      return false;  // num_ctas, unknown names: the Python path
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (!values[i]) values[i] = fp.defaults[i];
    if (!values[i]) return false;  // missing argument
  }
  if (flag_set(fp.jit_globals, s.interpret_flag)) return false;
  if (debug && debug != Py_None) {
    int t = PyObject_IsTrue(debug);
    if (t < 0) return PyErr_Clear(), false;
    key->debug = t;
  } else if (fp.kernel_debug >= 0) {
    key->debug = fp.kernel_debug;
  } else {
    key->debug = flag_set(fp.jit_globals, s.debug_flag);
  }
  for (size_t i = 0; i < n; ++i) {
    PyObject* v = values[i];
    if (fp.is_constexpr[i]) {
      PyObject* c;
      if (Py_TYPE(v) == reinterpret_cast<PyTypeObject*>(fp.constexpr_type)) {
        c = PyObject_GetAttr(v, s.value);
        if (!c) return PyErr_Clear(), false;
      } else {
        Py_INCREF(v);
        c = v;
      }
      key->constexprs[key->n_constexpr++] = c;
    } else {
      if (!runtime_key(v, &key->keys[key->n_runtime], &key->values[key->n_runtime])) return false;
      ++key->n_runtime;
    }
  }
  return true;
}

// --- kernel.bind(grid, **values): a launch with its grid, options and some arguments fixed

// What Kernel.bind fixed, and the specialization its last fast call matched. The call
// gives the remaining ("free") parameters by position, in signature order, and may
// pass stream=. Its key is built as bind_and_key builds a full call's, from the fixed
// values and the call's (a fixed scalar's part of the key is computed once, at bind):
// the same specializations match, and the Python path (Kernel._bound_slow) compiles
// and registers them.
struct BoundState {
  long grid[3] = {1, 1, 1};
  std::vector<PyObject*> fixed;        // per parameter: owned value, or nullptr: from the call
  std::vector<char> keyed;             // per parameter: fixed runtime scalar whose key is below
  std::vector<ArgKey> keys;            // per parameter (where keyed)
  std::vector<ArgValue> values;        // per parameter (where keyed)
  long num_warps = 4, num_stages = 3, maxnreg = 0;
  int debug = -1;                      // -1: resolved per call (Kernel.debug, then TESSERA_DEBUG)
  bool fast = true;                    // false: options the C++ key lacks (the Python path each call)
  const FastPath* seen = nullptr;      // `last` is valid while the kernel's table is this one...
  uint64_t generation = 0;             // ...and has not been cleared since
  const Specialization* last = nullptr;

  ~BoundState() {
    for (PyObject* o : fixed) Py_XDECREF(o);
  }
};

struct BoundKernelObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  KernelLauncherObject* kernel;  // owned
  PyObject* slow;                // owned: the Python path, called with the call's own arguments
  BoundState* state;
};

// The bound call's key: fixed values and the call's free ones, in parameter order.
// False: the Python path takes the call (missing or unusual arguments, interpreter mode).
bool bound_key(const FastPath& fp, const BoundState& b, PyObject* const* args, Py_ssize_t nargs, CallKey* key) {
  Interned& s = S();
  if (flag_set(fp.jit_globals, s.interpret_flag)) return false;
  key->num_warps = b.num_warps;
  key->num_stages = b.num_stages;
  key->maxnreg = b.maxnreg;
  key->debug = b.debug >= 0 ? b.debug != 0 : fp.kernel_debug >= 0 ? fp.kernel_debug != 0
                                                                   : flag_set(fp.jit_globals, s.debug_flag);
  Py_ssize_t next = 0;  // the call's next free argument
  for (size_t i = 0; i < fp.names.size(); ++i) {
    PyObject* v = b.fixed[i];
    if (!v) {
      v = next < nargs ? args[next] : fp.defaults[i];
      ++next;
      if (!v) return false;  // missing: the Python path says which
    }
    if (fp.is_constexpr[i]) {
      PyObject* c;
      if (!b.fixed[i] && Py_TYPE(v) == reinterpret_cast<PyTypeObject*>(fp.constexpr_type)) {
        c = PyObject_GetAttr(v, s.value);
        if (!c) return PyErr_Clear(), false;
      } else {  // (a fixed tl.constexpr was unwrapped by Kernel.bind)
        Py_INCREF(v);
        c = v;
      }
      key->constexprs[key->n_constexpr++] = c;
    } else if (b.keyed[i]) {
      key->keys[key->n_runtime] = b.keys[i];
      key->values[key->n_runtime++] = b.values[i];
    } else {
      if (!runtime_key(v, &key->keys[key->n_runtime], &key->values[key->n_runtime])) return false;
      ++key->n_runtime;
    }
  }
  return next >= nargs;  // more arguments than free parameters: the Python path raises
}

PyObject* bound_kernel_call(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<BoundKernelObject*>(callable);
  BoundState& b = *self->state;
  const FastPath* fp = self->kernel->fp;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  PyObject* stream = nullptr;
  bool fast = fp && fp->enabled && b.fast;
  if (fast && kwnames) {
    fast = PyTuple_GET_SIZE(kwnames) == 1 && same_name(S().stream, PyTuple_GET_ITEM(kwnames, 0));
    if (fast) stream = args[nargs];
  }
  if (fast) {
    CallKey key;
    if (bound_key(*fp, b, args, nargs, &key)) {
      const Specialization* s = nullptr;
      if (b.last && b.seen == fp && b.generation == fp->generation && key.matches(*b.last)) {
        s = b.last;
      } else {
        for (const Specialization* c : fp->specs)
          if (key.matches(*c)) {
            s = c;
            break;
          }
        if (s) b.seen = fp, b.generation = fp->generation, b.last = s;
      }
      bool grid_ok = s && (!s->cuda || (b.grid[1] <= 65535 && b.grid[2] <= 65535));
      if (grid_ok && (s->cuda || !stream || stream == Py_None)) return launch(*fp, *s, key, b.grid, stream);
    }
  }
  return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

// --- the Python types ---------------------------------------------------------------

PyObject* bound_launch_call(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<BoundLaunchObject*>(callable);
  KernelLauncherObject* k = self->kernel;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  FastPath* fp = k->fp;
  if (!fp || !fp->enabled) return call_python_path(k, self->grid, args, nargs, kwnames);
  long grid[3];
  CallKey key;
  PyObject* stream = nullptr;
  bool keyed = bind_and_key(*fp, args, nargs, kwnames, &key, &stream);
  if (keyed && read_grid(self->grid, grid)) {
    for (Specialization* s : fp->specs) {
      if (!key.matches(*s)) continue;
      if (s->cuda && (grid[1] > 65535 || grid[2] > 65535)) break;  // the Python path says why
      if (!s->cuda && stream && stream != Py_None) break;  // stream= on the CPU: the Python path
      return launch(*fp, *s, key, grid, stream);
    }
  }
  PyObject* r = call_python_path(k, self->grid, args, nargs, kwnames);
  if (r && keyed && r != Py_None) register_specialization(*fp, key, r);
  return r;
}

void bound_launch_dealloc(PyObject* o) {
  auto* self = reinterpret_cast<BoundLaunchObject*>(o);
  Py_XDECREF(self->kernel);
  Py_XDECREF(self->grid);
  PyObject_Free(o);
}

// Static type objects: set field by field after PyVarObject_HEAD_INIT, as CPython's
// own extension types do before designated initializers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
PyTypeObject BoundLaunchType = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "tessera._C.BoundLaunch";
  t.tp_doc = "kernel[grid]: call it with the kernel's arguments to launch.";
  t.tp_basicsize = sizeof(BoundLaunchObject);
  t.tp_dealloc = bound_launch_dealloc;
  t.tp_vectorcall_offset = offsetof(BoundLaunchObject, vectorcall);
  t.tp_call = PyVectorcall_Call;
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  return t;
}();

PyObject* launcher_subscript(PyObject* self, PyObject* grid) {
  auto* b = PyObject_New(BoundLaunchObject, &BoundLaunchType);
  if (!b) return nullptr;
  b->vectorcall = bound_launch_call;
  Py_INCREF(self);
  b->kernel = reinterpret_cast<KernelLauncherObject*>(self);
  Py_INCREF(grid);
  b->grid = grid;
  return reinterpret_cast<PyObject*>(b);
}

void launcher_dealloc(PyObject* o) {
  auto* self = reinterpret_cast<KernelLauncherObject*>(o);
  delete self->fp;
  self->fp = nullptr;
  Py_TYPE(o)->tp_free(o);
}

// _init_fast_path(name, arg_names, constexpr_mask, defaults, debug, jit_globals,
//                 constexpr_type, enabled); defaults use `required` for none.
PyObject* launcher_init_fast_path(PyObject* o, PyObject* args) {
  auto* self = reinterpret_cast<KernelLauncherObject*>(o);
  const char* name;
  PyObject *names, *mask, *defaults, *debug, *globals, *ce_type, *required;
  int enabled;
  if (!PyArg_ParseTuple(args, "sO!O!O!OO!OOp", &name, &PyList_Type, &names, &PyList_Type, &mask, &PyList_Type,
                        &defaults, &debug, &PyDict_Type, &globals, &ce_type, &required, &enabled))
    return nullptr;
  Py_ssize_t n = PyList_GET_SIZE(names);
  if (PyList_GET_SIZE(mask) != n || PyList_GET_SIZE(defaults) != n) {
    PyErr_SetString(PyExc_ValueError, "_init_fast_path: lists of different lengths");
    return nullptr;
  }
  auto fp = std::make_unique<FastPath>();
  fp->kernel_name = name;
  fp->enabled = enabled && static_cast<size_t>(n) <= kMaxParams;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* nm = PyList_GET_ITEM(names, i);
    if (!PyUnicode_Check(nm)) {
      PyErr_SetString(PyExc_TypeError, "_init_fast_path: parameter names must be str");
      return nullptr;
    }
    Py_INCREF(nm);
    PyUnicode_InternInPlace(&nm);
    fp->names.push_back(nm);
    int ce = PyObject_IsTrue(PyList_GET_ITEM(mask, i));
    if (ce < 0) return nullptr;
    fp->is_constexpr.push_back(static_cast<char>(ce));
    fp->n_runtime += !ce;
    PyObject* d = PyList_GET_ITEM(defaults, i);
    if (d == required) {
      fp->defaults.push_back(nullptr);
    } else {
      Py_INCREF(d);
      fp->defaults.push_back(d);
    }
  }
  if (debug != Py_None) {
    int t = PyObject_IsTrue(debug);
    if (t < 0) return nullptr;
    fp->kernel_debug = t;
  }
  Py_INCREF(globals);
  fp->jit_globals = globals;
  Py_INCREF(ce_type);
  fp->constexpr_type = ce_type;
  delete self->fp;
  self->fp = fp.release();
  Py_RETURN_NONE;
}

PyObject* launcher_clear(PyObject* o, PyObject*) {
  auto* self = reinterpret_cast<KernelLauncherObject*>(o);
  if (self->fp) self->fp->clear_specs();
  Py_RETURN_NONE;
}

PyObject* launcher_size(PyObject* o, PyObject*) {
  auto* self = reinterpret_cast<KernelLauncherObject*>(o);
  return PyLong_FromSize_t(self->fp ? self->fp->specs.size() : 0);
}

PyMethodDef launcher_methods[] = {
    {"_init_fast_path", launcher_init_fast_path, METH_VARARGS,
     "Sets the kernel's signature for the C++ launch path (called by Kernel.__init__)."},
    {"_fast_path_clear", launcher_clear, METH_NOARGS, "Forgets every specialization registered in C++."},
    {"_fast_path_size", launcher_size, METH_NOARGS, "How many specializations the C++ launch path holds."},
    {nullptr, nullptr, 0, nullptr}};

PyMappingMethods launcher_mapping = {nullptr, launcher_subscript, nullptr};

PyTypeObject KernelLauncherType = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "tessera._C.KernelLauncher";
  t.tp_doc = "Base of tessera.jit.Kernel: kernel[grid](...) launches cached specializations from C++.";
  t.tp_basicsize = sizeof(KernelLauncherObject);
  t.tp_dealloc = launcher_dealloc;
  t.tp_as_mapping = &launcher_mapping;
  t.tp_methods = launcher_methods;
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE;
  t.tp_new = PyType_GenericNew;
  return t;
}();

void bound_kernel_dealloc(PyObject* o) {
  auto* self = reinterpret_cast<BoundKernelObject*>(o);
  Py_XDECREF(self->kernel);
  Py_XDECREF(self->slow);
  delete self->state;
  PyObject_Free(o);
}


// BoundKernel(kernel, grid, fixed, free, num_warps, num_stages, maxnreg, debug, fast, slow):
// made by Kernel.bind, which checked every value. fixed: one entry per parameter, the
// value or `free` (given by each call); grid: 3 ints; debug: None or a bool; fast false:
// every call takes `slow`.
PyObject* bound_kernel_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *kernel, *grid, *fixed, *free_marker, *debug, *slow;
  long num_warps, num_stages, maxnreg;
  int fast;
  if (kwargs && PyDict_GET_SIZE(kwargs)) {
    PyErr_SetString(PyExc_TypeError, "BoundKernel takes positional arguments only");
    return nullptr;
  }
  if (!PyArg_ParseTuple(args, "O!O!O!OlllOpO", &KernelLauncherType, &kernel, &PyTuple_Type, &grid, &PyList_Type,
                        &fixed, &free_marker, &num_warps, &num_stages, &maxnreg, &debug, &fast, &slow))
    return nullptr;
  auto* k = reinterpret_cast<KernelLauncherObject*>(kernel);
  long g[3];
  if (!k->fp || PyList_GET_SIZE(fixed) != static_cast<Py_ssize_t>(k->fp->names.size()) || !read_grid(grid, g) ||
      PyTuple_GET_SIZE(grid) != 3) {
    PyErr_SetString(PyExc_ValueError, "BoundKernel: one fixed entry per parameter and a grid of 3 ints");
    return nullptr;
  }
  auto state = std::make_unique<BoundState>();
  std::copy(g, g + 3, state->grid);
  size_t n = k->fp->names.size();
  state->fixed.assign(n, nullptr);
  state->keyed.assign(n, 0);
  state->keys.resize(n);
  state->values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    PyObject* v = PyList_GET_ITEM(fixed, i);
    if (v == free_marker) continue;
    Py_INCREF(v);
    state->fixed[i] = v;
    if (k->fp->is_constexpr[i]) continue;
    ArgKey key;
    ArgValue val;
    if (!runtime_key(v, &key, &val)) {
      state->fast = false;  // a value only the Python path takes
    } else if ((key.tag & 0xFF) != kArray) {  // an array's address may change: keyed per call
      state->keyed[i] = 1;
      state->keys[i] = key;
      state->values[i] = val;
    }
  }
  state->num_warps = num_warps;
  state->num_stages = num_stages;
  state->maxnreg = maxnreg;
  state->debug = debug == Py_None ? -1 : PyObject_IsTrue(debug);
  if (state->debug < -1 || PyErr_Occurred()) return nullptr;
  state->fast = state->fast && fast;
  auto* self = PyObject_New(BoundKernelObject, type);
  if (!self) return nullptr;
  self->vectorcall = bound_kernel_call;
  Py_INCREF(kernel);
  self->kernel = k;
  Py_INCREF(slow);
  self->slow = slow;
  self->state = state.release();
  return reinterpret_cast<PyObject*>(self);
}

PyTypeObject BoundKernelType = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "tessera._C.BoundKernel";
  t.tp_doc = "kernel.bind(grid, **values): call it with the remaining arguments to launch.";
  t.tp_basicsize = sizeof(BoundKernelObject);
  t.tp_dealloc = bound_kernel_dealloc;
  t.tp_vectorcall_offset = offsetof(BoundKernelObject, vectorcall);
  t.tp_call = PyVectorcall_Call;
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  t.tp_new = bound_kernel_new;
  return t;
}();
#pragma GCC diagnostic pop

}  // namespace

PyObject* cuda_error_type() {
  static PyObject* type = PyErr_NewExceptionWithDoc(
      "tessera._C.CudaError", "A CUDA driver error; `code` is the CUresult, `sticky` whether the context was reset.",
      PyExc_RuntimeError, nullptr);
  return type;
}

void set_cuda_error(const runtime::cuda::CudaError& e, const std::string& prefix) {
  std::string msg = prefix + e.what();
  PyObject* err = PyObject_CallFunction(cuda_error_type(), "s", msg.c_str());
  if (!err) return;
  PyObject* code = PyLong_FromLong(e.code);
  PyObject_SetAttrString(err, "code", code);
  Py_XDECREF(code);
  PyObject_SetAttrString(err, "sticky", e.sticky ? Py_True : Py_False);
  PyErr_SetObject(cuda_error_type(), err);
  Py_DECREF(err);
}

void register_launch_fastpath(py::module_& m) {
  g_device_assert_type = m.attr("DeviceAssertError").ptr();
  Py_INCREF(g_device_assert_type);
  if (PyType_Ready(&BoundLaunchType) < 0 || PyType_Ready(&KernelLauncherType) < 0 ||
      PyType_Ready(&BoundKernelType) < 0)
    throw py::error_already_set();
  Py_INCREF(&KernelLauncherType);
  m.add_object("KernelLauncher", reinterpret_cast<PyObject*>(&KernelLauncherType));
  Py_INCREF(&BoundLaunchType);
  m.add_object("BoundLaunch", reinterpret_cast<PyObject*>(&BoundLaunchType));
  Py_INCREF(&BoundKernelType);
  m.add_object("BoundKernel", reinterpret_cast<PyObject*>(&BoundKernelType));
}

}  // namespace tessera::binding
