"""The on-call console (`leasectl tui`), built with Textual on top of the core.

Nothing outside this package imports Textual: the core stays usable without it.
"""
