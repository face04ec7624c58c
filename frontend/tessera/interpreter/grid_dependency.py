"""tl.extra.cuda.gdc_wait and gdc_launch_dependents: no-ops here, where launches run one
after the other, so a kernel never starts before the previous one has finished."""
from __future__ import annotations


class GridDependencyOps:

    def gdc_wait(self):
        pass

    def gdc_launch_dependents(self):
        pass
