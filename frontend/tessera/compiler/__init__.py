"""tessera.compiler: the Python half of the compiler — kernel source (Python AST) to
Tile IR text (docs/tile_ir.md), which the C++ compiler parses and lowers."""
from .codegen import generate_tile_ir, generate_tile_ir_module  # noqa: F401

__all__ = ["generate_tile_ir", "generate_tile_ir_module"]
