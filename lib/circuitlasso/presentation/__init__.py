"""Presentation: figures (``plots``), section runs and their checked summaries (``reproduce``) and
the ``circuitlasso`` command (``cli``)."""
