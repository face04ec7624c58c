"""pytest setup: import tessera from the source tree; each run gets a fresh cache."""
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "frontend"))
if "TESSERA_CACHE_DIR" not in os.environ:
    os.environ["TESSERA_CACHE_DIR"] = tempfile.mkdtemp(prefix="tessera-test-cache-")
