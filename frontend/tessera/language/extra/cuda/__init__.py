"""tl.extra.cuda: NVIDIA-specific builtins, as triton.language.extra.cuda (those Tessera has)."""
from .gdc import gdc_launch_dependents, gdc_wait

__all__ = ["gdc_launch_dependents", "gdc_wait"]
