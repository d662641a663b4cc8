"""The command line (``main.py``).

The command line's process (and the batch workers it starts, which inherit its
environment) is nsysdiag's own, so it chooses settings that library callers keep for
themselves. They must be set before numpy and DuckDB are imported, which is why the
package's top level imports neither. The first two cut the system time of a big cold
``diagnose`` without changing its peak memory (``docs/performance.md``):

* ``NUMPY_MADVISE_HUGEPAGE=0``: numpy asks for transparent huge pages for arrays of 4 MB
  or more; where the kernel compacts memory to find them on demand (``defrag`` set to
  ``madvise``, a common default), each such fault stalls.
* ``DUCKDB_JE_MALLOC_CONF``: DuckDB's allocator keeps the pages it frees instead of
  returning them to the system after a second, so the next query does not fault them in
  again.
* ``OPENBLAS_NUM_THREADS=1``: the mixture fits multiply small matrices, for which BLAS
  threads only cost: after each call OpenBLAS's threads spin, waiting for more work, on
  the cores the next query needs (numpy and scipy each start their own).

A value already in the environment is left as it is.
"""

import os

os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
os.environ.setdefault("DUCKDB_JE_MALLOC_CONF", "dirty_decay_ms:-1,muzzy_decay_ms:-1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
