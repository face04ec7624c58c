// bf16 -> f32 of the lanes of a loaded vector from its 32-bit words (one ALU instruction a
// lane instead of an unpack and a shift): see widen_bf16_words_nvptx.cpp.
#pragma once

#include <llvm/IR/Module.h>

namespace tessera::codegen::nvptx {

// Rewrites each `shl (zext i16 (lane k of a <2n x i16> or <2n x bfloat> vector) to i32), 16`
// (bf16_to_f32's widening of a vector lane) into the same bits taken from the vector's word
// k / 2: `shl w, 16` for an even lane (the word's low half), `and w, 0xffff0000` for an odd
// one. Returns how many it rewrote.
int widen_bf16_words(llvm::Module& m);

}  // namespace tessera::codegen::nvptx
