// NVPTX lowering, part 7: device-side print (vprintf) and assert (__assertfail).
//
// print: one vprintf per element and operand, in the CPU's line format
//   pid (x, y, z) idx (flat) <prefix> (operand i)<value>
// vprintf(fmt, args) takes a pointer to the arguments laid out as a struct with
// natural alignment (CUDA's printf ABI): here {i32 x, i32 y, i32 z, i64 flat,
// i64|double value}. Floats print as %.9g of a double; hex shows the element's bits.
// Each element prints once, from its first replica; scalars print from thread 0.
// assert (only when debug): each thread checks its elements and, on a false one,
// calls __assertfail(msg, file, line, function, charSize = 1) as CUDA's assert()
// and Triton do; the driver prints the message and the launch fails with
// cudaErrorAssert.
#include "codegen/common/elementwise.h"
#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

namespace {

constexpr unsigned kGlobalAS = 1;

std::string escape_percent(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '%' ? std::string("%%") : std::string(1, c);
  return out;
}

}  // namespace

llvm::Value* GpuLowering::global_cstring(const std::string& text) {
  auto* init = llvm::ConstantDataArray::getString(ctx_, text, /*AddNull=*/true);
  auto* g = new llvm::GlobalVariable(m_, init->getType(), true, llvm::GlobalValue::PrivateLinkage, init, "str", nullptr,
                                     llvm::GlobalValue::NotThreadLocal, kGlobalAS);
  g->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
  return llvm::ConstantExpr::getAddrSpaceCast(g, llvm::PointerType::get(ctx_, 0));
}

void GpuLowering::lower_print(const Op& op) {
  auto* ptr = llvm::PointerType::get(ctx_, 0);
  llvm::FunctionCallee vprintf =
      m_.getOrInsertFunction("vprintf", llvm::FunctionType::get(b_.getInt32Ty(), {ptr, ptr}, false));
  const std::string prefix = escape_percent(op.str_attr("prefix"));
  const bool hex = op.bool_attr("hex");
  for (size_t oi = 0; oi < op.operands.size(); ++oi) {
    const Value* v = op.operands[oi];
    const ElemType& e = v->type.elem;
    const bool as_float = e.is_float() && !hex;
    const bool as_hex = hex || e.is_ptr();
    const bool tile = v->type.is_tile();
    std::string fmt = "pid (%d, %d, %d)";
    if (tile) fmt += " idx (%lld)";
    fmt += " " + prefix;
    if (oi > 0) fmt += " (operand " + std::to_string(oi) + ")";
    fmt += as_float ? "%.9g\n" : as_hex ? "0x%llx\n" : (e.is_unsigned() || e.is_bool()) ? "%llu\n" : "%lld\n";
    llvm::Value* fmt_ptr = global_cstring(fmt);
    std::vector<llvm::Type*> fields = {b_.getInt32Ty(), b_.getInt32Ty(), b_.getInt32Ty()};
    if (tile) fields.push_back(b_.getInt64Ty());
    fields.push_back(as_float ? b_.getDoubleTy() : b_.getInt64Ty());
    auto* sty = llvm::StructType::get(ctx_, fields);
    llvm::Value* args = alloca_in_entry(sty);

    auto emit_one = [&](llvm::Value* x, llvm::Value* flat) {
      llvm::Value* val;
      if (as_float) val = emit_cast(b_, x, e, ElemType{ScalarKind::F64, ScalarKind::I32});
      else if (e.is_ptr()) val = b_.CreatePtrToInt(x, b_.getInt64Ty());
      else if (hex) val = b_.CreateZExt(e.is_float() ? b_.CreateBitCast(x, b_.getIntNTy(e.bits())) : x, b_.getInt64Ty());
      else val = emit_cast(b_, x, e, ElemType{e.is_unsigned() || e.is_bool() ? ScalarKind::U64 : ScalarKind::I64,
                                             ScalarKind::I32});
      std::vector<llvm::Value*> vals = {pid_[0], pid_[1], pid_[2]};
      if (flat) vals.push_back(flat);
      vals.push_back(val);
      for (size_t f = 0; f < vals.size(); ++f) b_.CreateStore(vals[f], b_.CreateStructGEP(sty, args, f));
      b_.CreateCall(vprintf, {fmt_ptr, args});
    };
    auto guarded = [&](llvm::Value* pred, const std::function<void()>& body) {
      if (!pred) return body();
      auto* yes = llvm::BasicBlock::Create(ctx_, "print.on", fn_);
      auto* cont = llvm::BasicBlock::Create(ctx_, "print.end", fn_);
      b_.CreateCondBr(pred, yes, cont);
      b_.SetInsertPoint(yes);
      body();
      b_.CreateBr(cont);
      b_.SetInsertPoint(cont);
    };
    if (!tile) {
      guarded(b_.CreateICmpEQ(tid_, b_.getInt32(0)), [&] { emit_one(scalar(v), nullptr); });
      continue;
    }
    BlockedLayout l = preferred_layout(v);
    llvm::Value* first = is_first_replica(l);
    std::vector<std::pair<llvm::Value*, llvm::Value*>> elems;  // value, flat index
    for (int r = 0; r < l.num_regs(); ++r) {
      SymIndex s = l.index_of(r);
      elems.push_back({at(v, s), b_.CreateZExt(runtime_index(flat_bits(s)), b_.getInt64Ty())});
    }
    guarded(first, [&] {
      for (auto& [x, flat] : elems) emit_one(x, flat);
    });
  }
}

void GpuLowering::lower_assert(const Op& op) {
  if (!debug_) return;
  const Value* c = op.operands[0];
  llvm::Value* ok;
  if (c->type.is_scalar()) {
    ok = scalar(c);
  } else {
    BlockedLayout l = preferred_layout(c);
    ok = b_.getTrue();
    for (int r = 0; r < l.num_regs(); ++r) ok = b_.CreateAnd(ok, emit_cast(b_, at(c, l.index_of(r)), c->type.elem,
                                                                          ElemType{ScalarKind::I1, ScalarKind::I32}));
  }
  auto* fail = llvm::BasicBlock::Create(ctx_, "assert.fail", fn_);
  auto* cont = llvm::BasicBlock::Create(ctx_, "assert.ok", fn_);
  b_.CreateCondBr(ok, cont, fail);
  b_.SetInsertPoint(fail);
  auto* ptr = llvm::PointerType::get(ctx_, 0);
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, b_.getInt32Ty(), ptr, b_.getInt64Ty()}, false);
  llvm::FunctionCallee assertfail = m_.getOrInsertFunction("__assertfail", fty);
  std::string msg = op.str_attr("msg");
  b_.CreateCall(assertfail, {global_cstring(msg.empty() ? "assertion failed" : msg), global_cstring(k_.file()),
                             b_.getInt32(op.loc.line), global_cstring(k_.name), b_.getInt64(1)});
  b_.CreateBr(cont);
  b_.SetInsertPoint(cont);
}

}  // namespace tessera::codegen::nvptx
