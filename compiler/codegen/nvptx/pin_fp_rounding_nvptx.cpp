// With FMA contraction on (fp_fusion), the NVPTX target machine allows fusion everywhere
// (TargetOptions::AllowFPOpFusion = Fast, Triton's enable_fp_fusion): LLVM then prints
// float +, -, * as add.f32 / mul.f32 without a rounding mode, which ptxas is free to
// fuse further (an fma.rn formed in LLVM, or a multiply folded into div.full's final
// multiply-add, or ranges ptxas proves for unrounded ops: bias+GELU fp16 went from
// 28.5 to 25.3 SASS instructions per element, Triton's figure is 24.5). But LLVM's
// choice is per function, not per operation, and only the kernel's own float ops may
// contract: the math library's compensated sequences (math_nvptx.cpp, the shared
// vector_math.cpp: Fast2Sum, Veltkamp splits) rely on each op being rounded. The
// elementwise lowering marks the kernel's f32/f64 +, -, * with the `contract`
// flag; this pass, run after LLVM's middle-end optimizations and before instruction
// selection, rewrites every other float fadd/fsub/fmul into ops that print as
// add.rn / sub.rn / mul.rn, which neither LLVM nor ptxas fuses.
//
// Worked example: a Veltkamp split inside a math routine, t = c * a; hi = t - (t - a),
// carries no flag. Left as plain ops, `t - a` would become fma(c, a, -a), so hi would
// no longer be the high half of a. Pinned: t = mul.rn(c, a), u = sub.rn(t, a),
// hi = sub.rn(t, u). A user's `y = a * b + c` (both ops flagged) stays an fmul and an
// fadd and becomes one fma.rn.
//
// fsub has no nvvm intrinsic: it becomes sub.rn in inline assembly (the PTX the
// default path prints).
// f16/bf16 +, -, * (native on the GPU, and fused by LLVM into fma.rn.f16 just the same)
// become one PTX instruction with .rn in inline assembly where the GPU has it (f16 from
// sm_53, bf16 from sm_90), else are computed in f32 (.rn) and rounded back: exact too,
// as f32's 24 bits are at least 2p + 2 for both (double rounding is then innocuous).
#include "codegen/nvptx/pin_fp_rounding_nvptx.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicsNVPTX.h>

#include <string>
#include <vector>

namespace tessera::codegen::nvptx {
namespace {

// One scalar f16/bf16 op rounded once: add.rn.f16 etc. where native, else in f32.
llvm::Value* emit_rn_half(llvm::IRBuilderBase& b, unsigned opcode, llvm::Value* x, llvm::Value* y, int cc);

// One scalar f32/f64 operation through the .rn intrinsics (f16/bf16: emit_rn_half).
llvm::Value* emit_rn(llvm::IRBuilderBase& b, unsigned opcode, llvm::Value* x, llvm::Value* y, int cc) {
  if (x->getType()->isHalfTy() || x->getType()->isBFloatTy()) return emit_rn_half(b, opcode, x, y, cc);
  const bool f64 = x->getType()->isDoubleTy();
  if (opcode == llvm::Instruction::FSub) {  // no nvvm sub.rn intrinsic: the instruction itself
    llvm::Type* ty = x->getType();
    auto* fty = llvm::FunctionType::get(ty, {ty, ty}, false);
    auto* sub = llvm::InlineAsm::get(fty, f64 ? "sub.rn.f64 $0, $1, $2;" : "sub.rn.f32 $0, $1, $2;",
                                     f64 ? "=d,d,d" : "=f,f,f", /*hasSideEffects=*/false);
    return b.CreateCall(sub, {x, y});
  }
  llvm::Intrinsic::ID id = opcode == llvm::Instruction::FAdd
                               ? (f64 ? llvm::Intrinsic::nvvm_add_rn_d : llvm::Intrinsic::nvvm_add_rn_f)
                               : (f64 ? llvm::Intrinsic::nvvm_mul_rn_d : llvm::Intrinsic::nvvm_mul_rn_f);
  return b.CreateIntrinsic(id, {}, {x, y});
}

llvm::Value* emit_rn_half(llvm::IRBuilderBase& b, unsigned opcode, llvm::Value* x, llvm::Value* y, int cc) {
  llvm::Type* ty = x->getType();
  const bool bf16 = ty->isBFloatTy();
  const char* name = opcode == llvm::Instruction::FAdd ? "add" : opcode == llvm::Instruction::FSub ? "sub" : "mul";
  if (bf16 ? cc >= 90 : cc >= 53) {
    llvm::Type* i16 = b.getInt16Ty();
    auto* fty = llvm::FunctionType::get(i16, {i16, i16}, false);
    std::string text = std::string(name) + ".rn." + (bf16 ? "bf16" : "f16") + " $0, $1, $2;";
    auto* asm_op = llvm::InlineAsm::get(fty, text, "=h,h,h", /*hasSideEffects=*/false);
    return b.CreateBitCast(b.CreateCall(asm_op, {b.CreateBitCast(x, i16), b.CreateBitCast(y, i16)}), ty);
  }
  llvm::Value* wide = emit_rn(b, opcode, b.CreateFPExt(x, b.getFloatTy()), b.CreateFPExt(y, b.getFloatTy()), cc);
  return b.CreateFPTrunc(wide, ty);
}

bool is_pinnable(const llvm::Instruction& inst) {
  unsigned op = inst.getOpcode();
  if (op != llvm::Instruction::FAdd && op != llvm::Instruction::FSub && op != llvm::Instruction::FMul) return false;
  if (inst.hasAllowContract()) return false;
  llvm::Type* elem = inst.getType()->getScalarType();
  return elem->isFloatTy() || elem->isDoubleTy() || elem->isHalfTy() || elem->isBFloatTy();
}

}  // namespace

int pin_uncontracted_fp_rounding(llvm::Module& m, int cc) {
  std::vector<llvm::Instruction*> work;
  for (llvm::Function& f : m)
    for (llvm::BasicBlock& bb : f)
      for (llvm::Instruction& inst : bb)
        if (is_pinnable(inst)) work.push_back(&inst);
  for (llvm::Instruction* inst : work) {
    llvm::IRBuilder<> b(inst);
    llvm::Value* x = inst->getOperand(0);
    llvm::Value* y = inst->getOperand(1);
    llvm::Value* r;
    if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(inst->getType())) {  // lane by lane
      r = llvm::PoisonValue::get(vt);
      for (unsigned i = 0; i < vt->getNumElements(); ++i)
        r = b.CreateInsertElement(
            r, emit_rn(b, inst->getOpcode(), b.CreateExtractElement(x, i), b.CreateExtractElement(y, i), cc), i);
    } else {
      r = emit_rn(b, inst->getOpcode(), x, y, cc);
    }
    r->takeName(inst);
    inst->replaceAllUsesWith(r);
    inst->eraseFromParent();
  }
  return static_cast<int>(work.size());
}

}  // namespace tessera::codegen::nvptx
