"""CountingLauncher: counts the launches the C++ fast path hands back to a kernel's
Python launcher (kernel._launch), for tests of which launches stay on the fast path."""


class CountingLauncher:
    """Wraps kernel._launch (the Python launcher) and counts the calls C++ hands it."""

    def __init__(self, kernel):
        self.kernel, self.inner, self.calls = kernel, kernel._launch, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.inner(*args, **kwargs)

    def __enter__(self):
        self.kernel._launch = self
        return self

    def __exit__(self, *exc):
        self.kernel._launch = self.inner
