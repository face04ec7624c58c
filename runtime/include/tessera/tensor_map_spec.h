// The tensor maps (CUtensorMap, 128 bytes each) a kernel compiled for sm_90a takes
// after its own parameters, as the compiler describes them in the metadata's
// "tensor_maps" and the runtime builds them from the launch's parameter values.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace tessera::runtime {

// A dimension or stride of a tensor map: a constant, or a kernel parameter read
// from its packed slot as i32 ('i'), u32 ('u') or 64-bit ('l').
struct TensorMapExtent {
  char kind = 'c';
  int64_t value = 0;  // 'c': the value; else the parameter's slot index
  int64_t read(void* const* params) const {
    if (kind == 'c') return value;
    const void* p = params[value];
    if (kind == 'i') {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    if (kind == 'u') {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    int64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
};

// One 2-D tiled tensor map: elements [outer][inner] from the pointer parameter
// `base_param`, inner stride 1, outer stride `stride_outer` elements; boxes of
// box_outer x box_inner elements land in shared memory with the given swizzle.
struct TensorMapSpec {
  int base_param = 0;
  int elem_bytes = 2;
  int swizzle_bytes = 0;  // 0 (none), 32, 64 or 128
  int64_t box_inner = 0, box_outer = 0;
  TensorMapExtent dim_inner, dim_outer, stride_outer;
};

struct KernelTensorMaps {
  int num_params = 0;  // the kernel's own parameters; map k is parameter num_params + k
  std::vector<TensorMapSpec> maps;
};

// Text form (metadata "tensor_maps"): "<num_params>" then per map
// "|base:elem_bytes:swizzle:box_inner:box_outer:dim_inner:dim_outer:stride_outer",
// each extent "c<value>" or "<i|u|l><slot>". "" = no maps.
inline KernelTensorMaps parse_tensor_maps(const std::string& text) {
  KernelTensorMaps out;
  if (text.empty()) return out;
  auto bad = [&]() { return std::invalid_argument("malformed tensor map description '" + text + "'"); };
  auto extent = [&](const std::string& f) {
    if (f.size() < 2 || std::string("ciul").find(f[0]) == std::string::npos) throw bad();
    TensorMapExtent e;
    e.kind = f[0];
    e.value = std::stoll(f.substr(1));
    return e;
  };
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t bar = text.find('|'); ; bar = text.find('|', start)) {
    parts.push_back(text.substr(start, bar == std::string::npos ? std::string::npos : bar - start));
    if (bar == std::string::npos) break;
    start = bar + 1;
  }
  try {
    out.num_params = std::stoi(parts[0]);
    for (size_t i = 1; i < parts.size(); ++i) {
      std::vector<std::string> f;
      size_t s = 0;
      for (size_t c = parts[i].find(':'); ; c = parts[i].find(':', s)) {
        f.push_back(parts[i].substr(s, c == std::string::npos ? std::string::npos : c - s));
        if (c == std::string::npos) break;
        s = c + 1;
      }
      if (f.size() != 8) throw bad();
      TensorMapSpec m;
      m.base_param = std::stoi(f[0]);
      m.elem_bytes = std::stoi(f[1]);
      m.swizzle_bytes = std::stoi(f[2]);
      m.box_inner = std::stoll(f[3]);
      m.box_outer = std::stoll(f[4]);
      m.dim_inner = extent(f[5]);
      m.dim_outer = extent(f[6]);
      m.stride_outer = extent(f[7]);
      auto param_ok = [&](const TensorMapExtent& e) { return e.kind == 'c' || (e.value >= 0 && e.value < out.num_params); };
      if (m.base_param < 0 || m.base_param >= out.num_params || !param_ok(m.dim_inner) || !param_ok(m.dim_outer) ||
          !param_ok(m.stride_outer))
        throw bad();
      out.maps.push_back(m);
    }
  } catch (const std::logic_error&) {  // stoi/stoll failures and bad()
    throw bad();
  }
  return out;
}

}  // namespace tessera::runtime
