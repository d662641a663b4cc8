"""The numeric passes the analyses run, none an analysis itself.

``compiled``: loops compiled on first use (numba, through :mod:`nsysdiag.jit`): sweeps,
searches and placements over sorted batches. ``intervals``: unions, time covered twice,
peak concurrency and a queue's depth over sorted batches. ``sweep``: time covered per group
and class of intervals. ``cycles``: the period of a repeating sequence of events (a loop's
iterations). ``figures``: distribution figures in numpy equal to DuckDB's aggregates.
``fits``: rank correlation and a monotone fit in numpy. Each is the faster path of a
method stated in an analysis' SQL, tested equal to it; ``analyses/`` holds the analyses.
"""
