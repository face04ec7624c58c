"""@tessera.autotune: benchmark a kernel's candidate Configs on its first launch for each
tuning key, launch with the fastest, and remember the winner in memory and on disk."""
from __future__ import annotations

import json
import numbers
import os
import sys
import time
import warnings

from . import cache_key as CK
from ._core import _C
from .errors import CompilationError, InternalCompilerError
from .jit import Kernel, _cache_dir

__all__ = ["Config", "autotune", "Autotuner", "AutotuneError", "AutotuneConfigSkipped"]


class Config:
    """One candidate: constexpr values (`kwargs`) plus launch options. pre_hook, if given,
    is called with the full argument dict (config values included) before every launch
    with this config (benchmark runs and real launches). maxnreg (GPU): registers per
    thread at most (the launch option); num_ctas is accepted for Triton's signature and,
    as at a launch, ignored."""

    def __init__(self, kwargs, num_warps=4, num_stages=3, num_ctas=1, maxnreg=None, pre_hook=None):
        if not isinstance(kwargs, dict):
            raise TypeError(f"tessera.Config: kwargs must be a dict of constexpr values, got {kwargs!r}")
        self.kwargs = dict(kwargs)
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.num_ctas = num_ctas
        self.maxnreg = maxnreg
        self.pre_hook = pre_hook

    def all_kwargs(self):
        extra = {} if self.maxnreg is None else {"maxnreg": self.maxnreg}
        return {**self.kwargs, "num_warps": self.num_warps, "num_stages": self.num_stages, **extra}

    def _identity(self):
        return (tuple(sorted((k, repr(v)) for k, v in self.kwargs.items())), self.num_warps, self.num_stages,
                self.maxnreg)

    def __eq__(self, other):
        return isinstance(other, Config) and self._identity() == other._identity()

    def __hash__(self):
        return hash(self._identity())

    def __repr__(self):
        return ", ".join(f"{k}: {v}" for k, v in self.all_kwargs().items())


class AutotuneError(RuntimeError):
    """No config of an autotuned kernel could be compiled (each one's error is listed)."""


class AutotuneConfigSkipped(UserWarning):
    """A config failed to compile and was left out of the tuning."""


def _verbose_from_env():
    return os.environ.get("TESSERA_AUTOTUNE_VERBOSE", "") not in ("", "0")


def _key_value(v):
    """What a key argument contributes: numbers and strings by value (numpy scalars
    too), arrays and tensors by dtype."""
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, numbers.Number):       # numpy / torch scalars: their value
        return v.item() if hasattr(v, "item") else v
    if hasattr(v, "dtype"):
        return f"dtype:{v.dtype}"
    return repr(v)


def _device_of(values):
    """'cpu' or 'cuda:N', from the first array argument that lives on a GPU."""
    for v in values:
        dev = getattr(v, "device", None)
        if dev is None or isinstance(v, type):
            continue
        text = str(dev)
        if text.startswith("cuda"):
            return text if ":" in text else "cuda:0"
    return "cpu"


def _device_name(device):
    """The hardware a timing is valid for: CPU name and features, or GPU name and arch."""
    if device == "cpu":
        return CK.cpu_target()
    index = int(device.split(":")[1])
    return f"{_C.cuda_device_name(index)}:sm_{_C.cuda_capability(index)}"


def _gpu_array(v):
    """A tessera.Array on a GPU (torch tensors are handled through their own methods)."""
    return getattr(v, "_index", None) is not None and hasattr(v, "_ptr")


def _zero(v):
    if hasattr(v, "zero_"):                  # torch
        v.zero_()
    elif _gpu_array(v):
        _C.cuda_memset(v._index, v._ptr, 0, v.nbytes)
    else:                                    # numpy, tessera.Array on the CPU
        import numpy as np
        np.asarray(v).fill(0)


def _snapshot(v):
    if hasattr(v, "clone"):
        return v.clone()
    if _gpu_array(v):
        return v.numpy()
    import numpy as np
    return np.array(np.asarray(v), copy=True)


def _restore(v, saved):
    if hasattr(v, "copy_"):
        v.copy_(saved)
    elif _gpu_array(v):
        _C.cuda_copy_to_device(v._index, v._ptr, saved)
    else:
        import numpy as np
        np.copyto(np.asarray(v), saved)


class Autotuner:
    """The object @tessera.autotune returns: launch it like the kernel (`tuned[grid](...)`
    or `tuned.run(..., grid=...)`) without the tuned constexprs.

    Attributes after a launch: best_config (of the last key launched), configs_timings
    ({Config: [median, p20, p80] ms} of the last tuning run), bench_time (seconds that
    tuning run took), cache ({key tuple: Config}), skipped ({Config: reason})."""

    def __init__(self, kernel, configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None,
                 warmup=25, rep=100, print_autotune_stats=False, use_disk_cache=True, do_bench=None):
        if not isinstance(kernel, Kernel):
            raise TypeError("@tessera.autotune must decorate a @tessera.kernel function "
                            "(put @tessera.autotune(...) above @tessera.kernel)")
        self.fn = kernel
        self.__name__ = kernel.__name__
        self.__doc__ = kernel.__doc__
        name = kernel.__name__
        if not configs:
            raise ValueError(f"@tessera.autotune on kernel {name}: configs is empty")
        self.configs = list(configs)
        for c in self.configs:
            if not isinstance(c, Config):
                raise TypeError(f"@tessera.autotune on kernel {name}: configs must be tessera.Config, got {c!r}")
            for k in c.kwargs:
                if k not in kernel.arg_names:
                    raise ValueError(f"@tessera.autotune on kernel {name}: config {c} sets '{k}', which is not "
                                     f"a parameter of the kernel ({', '.join(kernel.arg_names)})")
        self.key = list(key)
        for group, names in (("key", self.key), ("reset_to_zero", reset_to_zero or []),
                             ("restore_value", restore_value or [])):
            for k in names:
                if k not in kernel.arg_names:
                    raise ValueError(f"@tessera.autotune on kernel {name}: {group} names '{k}', which is not a "
                                     f"parameter of the kernel ({', '.join(kernel.arg_names)})")
        prune = dict(prune_configs_by or {})
        unknown = set(prune) - {"perf_model", "top_k", "early_config_prune"}
        if unknown:
            raise ValueError(f"@tessera.autotune on kernel {name}: prune_configs_by takes perf_model, top_k and "
                             f"early_config_prune, not {', '.join(sorted(unknown))}")
        self.perf_model = prune.get("perf_model")
        self.top_k = prune.get("top_k")
        self.early_config_prune = prune.get("early_config_prune")
        self.reset_to_zero = list(reset_to_zero or [])
        self.restore_value = list(restore_value or [])
        self.warmup, self.rep = warmup, rep
        self.print_autotune_stats = print_autotune_stats
        self.use_disk_cache = use_disk_cache
        self._do_bench = do_bench
        self.cache = {}
        self.best_config = None
        self.configs_timings = {}
        self.bench_time = 0.0
        self.skipped = {}

    # ------------------------------------------------------------------ launching
    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def run(self, *args, grid, **kwargs):
        named = dict(zip(self.fn.arg_names, args))
        named.update(kwargs)
        tuned = {k for c in self.configs for k in c.kwargs}
        clash = tuned & set(kwargs)
        if clash:
            raise ValueError(f"kernel {self.__name__}: {', '.join(sorted(clash))} are chosen by the autotuner; "
                             f"do not pass them")
        missing = [k for k in self.key if k not in named]
        if missing:
            raise TypeError(f"kernel {self.__name__}: missing the tuning-key argument(s) {', '.join(missing)}")
        key = tuple(_key_value(named[k]) for k in self.key)
        device = _device_of(list(named.values()))
        cache_slot = key + (device,)
        config = self.cache.get(cache_slot)
        tuned_now = False
        if config is None:
            disk_key = self._disk_key(key, device) if self.use_disk_cache else None
            config = self._load(disk_key) if disk_key else None
            if config is not None:
                self._say(f"kernel {self.__name__}, key {key}: reusing {config} from the disk cache")
            else:
                config = self._tune(args, kwargs, named, grid, key, device)
                tuned_now = True
                if disk_key:
                    self._store(disk_key, key, config)
            self.cache[cache_slot] = config
        self.best_config = config
        if tuned_now:
            for k in self.reset_to_zero:
                _zero(named[k])
        return self._launch(config, args, kwargs, named, grid)

    def _launch(self, config, args, kwargs, named, grid):
        if config.pre_hook is not None:
            config.pre_hook({**named, **config.kwargs})
        extra = {} if config.maxnreg is None else {"maxnreg": config.maxnreg}
        return self.fn.run(*args, grid=grid, num_warps=config.num_warps, num_stages=config.num_stages,
                           **kwargs, **config.kwargs, **extra)

    # ------------------------------------------------------------------ tuning
    def prune_configs(self, named):
        configs = self.configs
        if self.early_config_prune is not None:
            configs = list(self.early_config_prune(configs, named))
        if self.perf_model is not None and self.top_k is not None:
            k = self.top_k
            if isinstance(k, float) and k <= 1.0:
                k = max(1, int(len(configs) * k))
            est = {c: self.perf_model(**named, **c.kwargs, num_warps=c.num_warps, num_stages=c.num_stages)
                   for c in configs}
            configs = sorted(configs, key=lambda c: est[c])[:k]
        if not configs:
            raise AutotuneError(f"kernel {self.__name__}: prune_configs_by left no configs to try")
        return configs

    def _tune(self, args, kwargs, named, grid, key, device):
        from .testing import do_bench
        bench = self._do_bench or (lambda fn: do_bench(fn, warmup=self.warmup, rep=self.rep,
                                                       quantiles=(0.5, 0.2, 0.8), device=device))
        configs = self.prune_configs(named)
        self._say(f"kernel {self.__name__}, key {key}: benchmarking {len(configs)} config(s)")
        saved = {k: _snapshot(named[k]) for k in self.restore_value}
        t0 = time.perf_counter()
        timings, failures = {}, {}
        try:
            for i, config in enumerate(configs):
                def call(config=config):
                    for k in self.reset_to_zero:
                        _zero(named[k])
                    self._launch(config, args, kwargs, named, grid)
                try:
                    t = bench(call)
                except (CompilationError, InternalCompilerError) as e:
                    reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                    failures[config] = reason
                    warnings.warn(f"tessera.autotune: kernel {self.__name__}: config {config} skipped "
                                  f"({reason})", AutotuneConfigSkipped, stacklevel=4)
                    self._say(f"  [{i + 1}/{len(configs)}] {config}: skipped ({reason})")
                    continue
                t = list(t) if isinstance(t, (list, tuple)) else [t, t, t]
                timings[config] = t
                self._say(f"  [{i + 1}/{len(configs)}] {config}: {t[0]:.4f} ms")
        finally:
            for k, v in saved.items():
                _restore(named[k], v)
        self.bench_time = time.perf_counter() - t0
        self.configs_timings = timings
        self.skipped = failures
        if not timings:
            lines = "\n".join(f"  {c}: {r}" for c, r in failures.items())
            raise AutotuneError(f"kernel {self.__name__}: none of the {len(configs)} autotune configs "
                                f"compiled:\n{lines}")
        best = min(timings, key=lambda c: timings[c][0])
        self._say(f"kernel {self.__name__}, key {key}: best {best} ({timings[best][0]:.4f} ms; "
                  f"tuning took {self.bench_time:.2f} s)")
        return best

    # ------------------------------------------------------------------ disk cache
    # The winner is stored in the compile cache (tessera cache list shows it as
    # 'autotune:<kernel>'), keyed by everything a timing depends on: the compiler build
    # id, tessera version and frontend hash, the kernel's sources (and its helpers'),
    # the candidate configs, the key values, and the device (CPU name + features, or
    # GPU name + arch).
    def _disk_key(self, key, device):
        fields = [
            ("kind", "autotune"),
            ("build_id", _C.build_id()),
            ("version", CK.VERSION),
            ("frontend", CK.frontend_hash()),
            ("sources", self.fn._dependency_sources()),
            ("configs", repr([c._identity() for c in self.configs])),
            ("key", repr(key)),
            ("device", _device_name(device)),
        ]
        return _C.hash_key(fields)

    def _load(self, disk_key):
        blobs = _C.cache_get(_cache_dir(), disk_key)
        if not blobs or "autotune" not in blobs:
            return None
        try:
            want = json.loads(blobs["autotune"].decode())
            for c in self.configs:
                if [list(x) for x in c._identity()[0]] == want["kwargs"] and \
                        c.num_warps == want["num_warps"] and c.num_stages == want["num_stages"] and \
                        c.maxnreg == want.get("maxnreg"):
                    return c
        except (ValueError, KeyError, TypeError):
            pass
        return None  # unreadable, or no longer among the configs: tune again

    def _store(self, disk_key, key, config):
        record = {"kernel": self.__name__, "key": repr(key),
                  "kwargs": [list(x) for x in config._identity()[0]],
                  "num_warps": config.num_warps, "num_stages": config.num_stages, "maxnreg": config.maxnreg,
                  "timings_ms": {repr(c): t for c, t in self.configs_timings.items()}}
        _C.cache_put(_cache_dir(), disk_key, {"name": f"autotune:{self.__name__}".encode(),
                                              "autotune": json.dumps(record).encode()})

    def _say(self, msg):
        if self.print_autotune_stats or _verbose_from_env():
            print(f"[tessera.autotune] {msg}", file=sys.stderr, flush=True)


def autotune(configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None, warmup=25, rep=100,
             print_autotune_stats=False, use_disk_cache=True, do_bench=None):
    """Decorator for a @tessera.kernel: on the first launch for each value of the `key`
    arguments (numbers by value, arrays by dtype), launch every config in `configs`
    (after `prune_configs_by`), time each with tessera.testing.do_bench (`warmup`/`rep`
    ms, the median wins; `do_bench=fn(call) -> ms` replaces it), and launch with the
    fastest. The winner is cached in memory and on disk, so a new process reuses it
    without benchmarking (use_disk_cache=False turns that off).

    prune_configs_by: {'early_config_prune': fn(configs, named_args) -> configs,
    'perf_model': fn(**named_args, **config_kwargs, num_warps, num_stages) -> estimate,
    'top_k': how many (an int, or a fraction <= 1.0) of the best estimates to time}.
    reset_to_zero: argument names zeroed before each benchmark run (and before the
    launch that follows tuning). restore_value: argument names copied before tuning and
    restored after it, so tuning leaves them as they were.
    Configs that fail to compile are skipped with an AutotuneConfigSkipped warning; if
    all fail, AutotuneError lists why. TESSERA_AUTOTUNE_VERBOSE=1 or
    print_autotune_stats=True report the progress on stderr."""
    def decorate(kernel):
        return Autotuner(kernel, configs, key, prune_configs_by=prune_configs_by, reset_to_zero=reset_to_zero,
                         restore_value=restore_value, warmup=warmup, rep=rep,
                         print_autotune_stats=print_autotune_stats, use_disk_cache=use_disk_cache,
                         do_bench=do_bench)
    return decorate
