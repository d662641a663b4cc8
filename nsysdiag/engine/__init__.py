"""How the analyses run: database connections and settings, scratch steps, hand-overs
between analyses, forked cursors, the schedule of the diagnosis and the choice between an
analysis' SQL method and its accelerated pass.

Analysis modules say *what* is measured (their ``.sql`` files state the method); this
package owns *how* it is run fast.
"""
