"""The machinery that makes analyses fast without changing what they compute.

``threads``: hand-offs between threads that either side can abandon (bounded queues with
cancel, worker threads whose results are waited for with a bound, the stage bound
``NSYSDIAG_STAGE_TIMEOUT``). ``database``: connections and the database-wide settings.
``steps``: scratch steps of the analyses. ``workspace``: a report's scratch directory and
the hand-overs between analyses. ``schedule``: forked cursors and a thread beside the
main one. ``runner``: a plan of analyses ordered and overlapped from what each declares.
``accelerate``: the choice between an analysis' SQL method and its accelerated pass.
``protocols``: what an analysis uses of the export it runs on (``ReportLike``, which
``Report`` satisfies). Analysis modules say *what* is measured
(their ``.sql`` files state the method); this package owns *how* it is run fast. It sits
below the adapters: it imports nothing of nsysdiag but ``errors`` and ``config``.
"""

from . import threads

__all__ = ["threads"]
