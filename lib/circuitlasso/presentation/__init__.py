"""Presentation: figures (``plots``), a circuit's interactive explorer (``explorer``), section
runs and their checked summaries (``reproduce``), the book's Sphinx extension (``book``) and the
``circuitlasso`` command (``cli``)."""
