"""Circuits: fits on SAE features (``features``) and on model components (``components``), the
one circuit type and its scores (``circuit``), backward tracing (``trace``), what a feature stands
for (``interpret``), and a study that loads a model, its SAEs and data once (``study``)."""
