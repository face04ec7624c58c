"""The Semantic layer: what each tessera.language operation means in Tile IR (one
class assembled from the elementwise, memory and tile parts)."""
from __future__ import annotations

from .ir_builder import IRBuilder
from .semantic_memory import MemoryOps
from .semantic_ops import ElementwiseOps
from .semantic_tiles import TileOps


class Semantic(ElementwiseOps, MemoryOps, TileOps):
    def __init__(self, builder: IRBuilder):
        self.builder = builder
