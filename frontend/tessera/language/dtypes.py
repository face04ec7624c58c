"""Element types of tessera.language (names and spellings mirror triton.language)."""
from __future__ import annotations


class dtype:
    """A scalar element type. `name` is the Triton spelling (float32, int8, ...);
    `ir` is the Tile IR spelling (f32, i8, u8, ...)."""

    KINDS = ("int", "uint", "float", "bool", "ptr")

    def __init__(self, name: str, ir: str, kind: str, bits: int):
        self.name, self.ir, self.kind, self.primitive_bitwidth = name, ir, kind, bits

    # --- predicates (same names as triton.language.dtype) -------------------
    def is_floating(self):
        return self.kind == "float"

    def is_int(self):
        return self.kind in ("int", "uint", "bool")

    def is_int_signed(self):
        return self.kind == "int"

    def is_int_unsigned(self):
        return self.kind == "uint"

    def is_bool(self):
        return self.kind == "bool"

    def is_ptr(self):
        return False

    def is_fp16(self):
        return self.ir == "f16"

    def is_bf16(self):
        return self.ir == "bf16"

    def is_fp32(self):
        return self.ir == "f32"

    def is_fp64(self):
        return self.ir == "f64"

    @property
    def itemsize(self):
        return max(1, self.primitive_bitwidth // 8)

    @property
    def scalar(self):
        return self

    def to_numpy(self):
        import numpy as np
        if self.ir == "bf16":
            raise TypeError("numpy has no bfloat16; use uint16 storage")
        return np.dtype(_NUMPY_NAMES[self.ir])

    def __eq__(self, other):
        return isinstance(other, dtype) and not isinstance(other, pointer_type) and self.ir == other.ir

    def __hash__(self):
        return hash(self.ir)

    def __repr__(self):
        return "tl." + _ATTR_NAMES.get(self.ir, self.name)

    def __str__(self):
        return self.name


_ATTR_NAMES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}


class pointer_type(dtype):
    """A pointer to elements of `element_ty` (Tile IR: ptr<f32>)."""

    def __init__(self, element_ty: dtype, address_space: int = 1):
        super().__init__(f"pointer<{element_ty.name}>", f"ptr<{element_ty.ir}>", "ptr", 64)
        self.element_ty = element_ty
        self.address_space = address_space

    def is_ptr(self):
        return True

    def is_int(self):
        return False

    def __eq__(self, other):
        return isinstance(other, pointer_type) and self.element_ty == other.element_ty

    def __hash__(self):
        return hash(("ptr", self.element_ty.ir))

    def __repr__(self):
        return f"pointer<{self.element_ty.name}>"

    __str__ = __repr__


int1 = dtype("int1", "i1", "bool", 1)
int8 = dtype("int8", "i8", "int", 8)
int16 = dtype("int16", "i16", "int", 16)
int32 = dtype("int32", "i32", "int", 32)
int64 = dtype("int64", "i64", "int", 64)
uint8 = dtype("uint8", "u8", "uint", 8)
uint16 = dtype("uint16", "u16", "uint", 16)
uint32 = dtype("uint32", "u32", "uint", 32)
uint64 = dtype("uint64", "u64", "uint", 64)
float16 = dtype("fp16", "f16", "float", 16)
bfloat16 = dtype("bf16", "bf16", "float", 16)
float32 = dtype("fp32", "f32", "float", 32)
float64 = dtype("fp64", "f64", "float", 64)

ALL_SCALAR_TYPES = [int1, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
                    float16, bfloat16, float32, float64]

BY_IR = {t.ir: t for t in ALL_SCALAR_TYPES}
# Triton's signature spellings ('*fp32', 'i32', 'fp16', 'u8', 'i1', 'bf16') and a few aliases.
BY_SIGNATURE = {
    "i1": int1, "i8": int8, "i16": int16, "i32": int32, "i64": int64,
    "u1": int1, "u8": uint8, "u16": uint16, "u32": uint32, "u64": uint64,
    "fp16": float16, "bf16": bfloat16, "fp32": float32, "fp64": float64,
    "f16": float16, "f32": float32, "f64": float64,
}

_NUMPY_NAMES = {"i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
                "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
                "f16": "float16", "f32": "float32", "f64": "float64"}

NUMPY_TO_DTYPE = {v: BY_IR[k] for k, v in _NUMPY_NAMES.items()}
# torch dtype names (str(torch.float32) == 'torch.float32')
TORCH_TO_DTYPE = {
    "torch.bool": int1, "torch.int8": int8, "torch.int16": int16, "torch.int32": int32,
    "torch.int64": int64, "torch.uint8": uint8, "torch.uint16": uint16, "torch.uint32": uint32,
    "torch.uint64": uint64, "torch.float16": float16, "torch.bfloat16": bfloat16,
    "torch.float32": float32, "torch.float64": float64,
}


def parse_signature_type(text: str) -> dtype:
    """'*fp32' -> pointer_type(float32); 'i32' -> int32."""
    text = text.strip()
    if text.startswith("*"):
        return pointer_type(parse_signature_type(text[1:]))
    if text in BY_SIGNATURE:
        return BY_SIGNATURE[text]
    raise ValueError(f"unknown type '{text}' in signature (expected e.g. '*fp32', 'i32', 'fp16')")


def signature_name(t: dtype) -> str:
    """Inverse of parse_signature_type."""
    if isinstance(t, pointer_type):
        return "*" + signature_name(t.element_ty)
    return {"f16": "fp16", "f32": "fp32", "f64": "fp64"}.get(t.ir, t.ir)
