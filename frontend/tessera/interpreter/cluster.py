"""tl.cluster_reduce_scatter in the interpreter: the programs of a cluster run at the same
time, one Python thread each, and meet at barriers (the compiled CPU path does the same
with native threads, runtime/cpu/cluster.cpp).

Programs otherwise run one at a time (grid.py). When a program first calls
cluster_reduce_scatter, the cluster it belongs to (cluster_size consecutive programs along
x) is created, and its programs that have not run yet start on threads of their own; the
grid loop skips them. The programs of the cluster before the caller have already returned
without the call, which is an error, as is a program returning while the others wait
(every program of a cluster must make the same calls); the cluster is then broken, its
barriers stop waiting, and the launch raises InterpreterError."""
from __future__ import annotations

import threading

import numpy as np

from ..language import dtypes as D
from ..language.semantics import cluster_reduce_scatter_shape
from .errors import InterpreterError
from .values import Tensor, to_tensor, unwrap


class ClusterBroken(InterpreterError):
    """Raised in a program whose cluster another program broke (the error that broke it
    is the launch's)."""


class Cluster:
    def __init__(self, size: int, first: int, y: int, z: int):
        self.size, self.first, self.y, self.z = size, first, y, z
        self.cond = threading.Condition()
        self.arrived = self.phase = 0
        self.exited = 0
        self.broken: str | None = None
        self.slots = [None] * size
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def name(self, x: int) -> str:
        return f"({x}, {self.y}, {self.z})"

    def programs(self) -> str:
        return f"x {self.first} .. {self.first + self.size - 1}"

    def break_with(self, why: str) -> None:  # under self.cond
        if self.broken is None:
            self.broken = why
        self.cond.notify_all()

    def barrier(self, x: int) -> None:
        with self.cond:
            if self.broken is None and self.exited:
                self.break_with(f"program {self.name(x)} called tl.cluster_reduce_scatter after another program "
                                f"of its cluster ({self.programs()}) had returned: every program of a cluster "
                                f"must make the same calls")
            if self.broken is not None:
                raise ClusterBroken(self.broken)
            phase = self.phase
            self.arrived += 1
            if self.arrived == self.size:
                self.arrived = 0
                self.phase += 1
                self.cond.notify_all()
                return
            self.cond.wait_for(lambda: self.phase != phase or self.broken is not None)
            if self.phase == phase:
                raise ClusterBroken(self.broken)

    def exit(self, x: int) -> None:
        with self.cond:
            self.exited += 1
            if self.arrived:
                self.break_with(f"program {self.name(x)} returned while other programs of its cluster "
                                f"({self.programs()}) waited for it in tl.cluster_reduce_scatter: every program "
                                f"of a cluster must make the same calls")


class ClusterOps:
    """Mixed into Builtins; run_grid sets _clusters, _claimed, _run_program."""

    def cluster_reduce_scatter(self, x, cluster_size):
        x = to_tensor(x, "tl.cluster_reduce_scatter")
        c = unwrap(cluster_size)
        shown = f"a {x.dtype} tile of shape {list(x.shape)}" if x.shape else f"a {x.dtype} scalar"
        cluster_reduce_scatter_shape(tuple(x.shape), x.dtype, c, shown)
        px, py, pz = self.pid
        cluster = self._join_cluster(c, px, py, pz)
        rank = px - cluster.first
        cluster.slots[rank] = np.array(x.data, dtype=np.float32, copy=True)
        cluster.barrier(px)
        rows = x.shape[0] // c
        part = slice(rank * rows, (rank + 1) * rows)
        acc = cluster.slots[0][part].copy()
        for r in range(1, c):  # rank order, one f32 rounding per add: the compiled paths' bits
            acc += cluster.slots[r][part]
        cluster.barrier(px)
        return Tensor(acc, D.float32)

    def _join_cluster(self, c: int, px: int, py: int, pz: int) -> Cluster:
        if self.grid[0] % c:
            raise ValueError(f"kernel {self.kernel_name} runs its programs in clusters of {c} along grid axis 0 "
                             f"(tl.cluster_reduce_scatter(..., {c})), so the grid's first extent must be a multiple "
                             f"of {c}; it is {self.grid[0]}")
        first = px - px % c
        key = (first, py, pz)
        cluster = self._clusters.get(key)
        if cluster is not None:
            if cluster.size != c:
                raise InterpreterError(f"tl.cluster_reduce_scatter: cluster size {c} here, {cluster.size} in an "
                                       f"earlier call; a kernel has one cluster size")
            return cluster
        cluster = self._clusters[key] = Cluster(c, first, py, pz)
        if px != first:  # the programs before it ran to their end without the call
            cluster.exited = px - first
            with cluster.cond:
                cluster.break_with(f"program {cluster.name(first)} returned before calling "
                                   f"tl.cluster_reduce_scatter, which program {cluster.name(px)} of its cluster "
                                   f"({cluster.programs()}) calls: every program of a cluster must make the same "
                                   f"calls")
            raise ClusterBroken(cluster.broken)
        for mate in range(px + 1, first + c):
            self._claimed.add((mate, py, pz))
            t = threading.Thread(target=self._run_mate, args=(cluster, (mate, py, pz)), daemon=True)
            cluster.threads.append(t)
            t.start()
        return cluster

    def _run_mate(self, cluster: Cluster, pid: tuple) -> None:
        self.pid = pid
        try:
            with np.errstate(all="ignore"):
                self._run_program(pid)
        except BaseException as e:  # noqa: BLE001  (re-raised by finish_cluster)
            with cluster.cond:
                cluster.errors.append(e)
                cluster.break_with(f"program {cluster.name(pid[0])} raised {type(e).__name__}: {e}")
        finally:
            cluster.exit(pid[0])

    def finish_cluster(self, pid: tuple, error: BaseException | None) -> None:
        """After the main thread's program `pid` returned (or raised `error`): closes its
        cluster if it created one, waits for the other programs, and raises what broke it."""
        cluster = self._clusters.get(pid)  # keyed by the program that created it
        if cluster is None or not cluster.threads:
            return
        with cluster.cond:
            if error is not None:
                cluster.break_with(f"program {cluster.name(pid[0])} raised {type(error).__name__}: {error}")
        cluster.exit(pid[0])
        for t in cluster.threads:
            t.join()
        if error is not None:
            return  # the caller re-raises it
        root = [e for e in cluster.errors if not isinstance(e, ClusterBroken)]
        if root:
            raise root[0]
        if cluster.broken is not None:
            raise InterpreterError(cluster.broken)
