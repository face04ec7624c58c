// Blocked layouts (see blocked_layout.h): construction, lookup and slicing.
#include "codegen/nvptx/blocked_layout.h"

#include <algorithm>

namespace tessera::codegen::nvptx {

int log2_exact(int64_t v) {
  int r = 0;
  while ((int64_t(1) << r) < v) ++r;
  return r;
}

std::string sym_index_key(const SymIndex& s) {
  std::string k;
  for (auto& dim : s) {
    for (const IndexBit& b : dim)
      k += b.kind == IndexBit::Zero ? '0' : b.kind == IndexBit::One ? '1' : static_cast<char>('a' + b.thread_bit);
    k += '|';
  }
  return k;
}

std::vector<IndexBit> flat_bits(const SymIndex& s) {
  std::vector<IndexBit> f;
  for (size_t d = s.size(); d-- > 0;) f.insert(f.end(), s[d].begin(), s[d].end());
  return f;
}

SymIndex split_flat_bits(const std::vector<IndexBit>& flat, const std::vector<int64_t>& shape) {
  SymIndex s(shape.size());
  size_t pos = 0;
  for (size_t d = shape.size(); d-- > 0;) {
    int n = log2_exact(shape[d]);
    s[d].assign(flat.begin() + pos, flat.begin() + pos + n);
    pos += n;
  }
  return s;
}

BlockedLayout make_blocked_layout(const std::vector<int64_t>& shape, int vec, int num_threads) {
  BlockedLayout l;
  l.shape = shape;
  l.bits.resize(shape.size());
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  int nb = log2_exact(numel), vb = log2_exact(vec), tb = log2_exact(num_threads);
  int used_tb = std::min(tb, nb - vb);
  // Flat bit f (row-major, minor dim lowest) -> source.
  std::vector<BlockedLayout::Src> flat(nb);
  int reg = 0;
  for (int f = 0; f < nb; ++f) {
    if (f < vb) flat[f] = {true, reg++};
    else if (f < vb + used_tb) flat[f] = {false, f - vb};
    else flat[f] = {true, reg++};
  }
  l.reg_bits = reg;
  l.thread_mask = used_tb > 0 ? ((1u << used_tb) - 1) : 0;
  size_t pos = 0;
  for (size_t d = shape.size(); d-- > 0;) {
    int n = log2_exact(shape[d]);
    l.bits[d].assign(flat.begin() + pos, flat.begin() + pos + n);
    pos += n;
  }
  return l;
}

SymIndex BlockedLayout::index_of(int reg) const {
  SymIndex s(bits.size());
  for (size_t d = 0; d < bits.size(); ++d)
    for (const Src& src : bits[d]) {
      IndexBit b;
      if (src.reg) b.kind = (reg >> src.bit) & 1 ? IndexBit::One : IndexBit::Zero;
      else b.kind = IndexBit::Thread, b.thread_bit = src.bit;
      s[d].push_back(b);
    }
  return s;
}

std::optional<int> BlockedLayout::find(const SymIndex& s) const {
  if (s.size() != bits.size()) return std::nullopt;
  int reg = 0;
  for (size_t d = 0; d < bits.size(); ++d) {
    if (s[d].size() != bits[d].size()) return std::nullopt;
    for (size_t i = 0; i < bits[d].size(); ++i) {
      const Src& src = bits[d][i];
      const IndexBit& b = s[d][i];
      if (src.reg) {
        if (b.kind == IndexBit::Thread) return std::nullopt;  // varies by thread here, not there
        if (b.kind == IndexBit::One) reg |= 1 << src.bit;
      } else if (b.kind != IndexBit::Thread || b.thread_bit != src.bit) {
        return std::nullopt;  // another thread holds it
      }
    }
  }
  return reg;
}

int BlockedLayout::contiguous_regs() const {
  if (bits.empty()) return 1;
  const auto& minor = bits.back();
  int n = 0;
  while (n < static_cast<int>(minor.size()) && minor[n].reg && minor[n].bit == n) ++n;
  return 1 << n;
}

BlockedLayout BlockedLayout::slice(int axis) const {
  BlockedLayout r;
  r.shape = shape;
  r.shape.erase(r.shape.begin() + axis);
  r.bits = bits;
  r.bits.erase(r.bits.begin() + axis);
  // Renumber the surviving register bits in order.
  std::vector<int> renum(reg_bits, -1);
  for (size_t d = 0; d < r.bits.size(); ++d)
    for (const Src& s : r.bits[d])
      if (s.reg) renum[s.bit] = 0;
  int next = 0;
  for (int b = 0; b < reg_bits; ++b)
    if (renum[b] == 0) renum[b] = next++;
  r.reg_bits = next;
  r.thread_mask = 0;
  for (auto& dim : r.bits)
    for (Src& s : dim) {
      if (s.reg) s.bit = renum[s.bit];
      else r.thread_mask |= 1u << s.bit;
    }
  return r;
}

BlockedLayout BlockedLayout::collapse(int dim) const {
  BlockedLayout r = slice(dim);
  r.shape.insert(r.shape.begin() + dim, 1);
  r.bits.insert(r.bits.begin() + dim, std::vector<Src>{});
  return r;
}

std::string BlockedLayout::str() const {
  std::string out = "[";
  for (size_t d = 0; d < bits.size(); ++d) {
    out += d ? "; " : "";
    for (size_t i = 0; i < bits[d].size(); ++i)
      out += (i ? "," : "") + std::string(bits[d][i].reg ? "r" : "t") + std::to_string(bits[d][i].bit);
  }
  return out + "]";
}

}  // namespace tessera::codegen::nvptx
