"""The machinery that makes analyses fast without changing what they compute.

``threads``: hand-offs between threads that either side can abandon (bounded queues with
cancel, worker threads whose results are waited for with a bound, the stage bound
``NSYSDIAG_STAGE_TIMEOUT``). This package sits below the adapters: it imports nothing of
nsysdiag but ``errors``.
"""

from . import threads

__all__ = ["threads"]
