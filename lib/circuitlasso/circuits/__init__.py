"""Circuits: fits on SAE features (``features``) and on model components (``components``), the
circuit type and its scores (``circuit``), backward tracing (``trace``) and what a feature stands
for (``interpret``)."""
