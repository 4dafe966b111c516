"""CircuitLasso: circuit discovery by sparse regression."""

__version__ = "0.1.0"
