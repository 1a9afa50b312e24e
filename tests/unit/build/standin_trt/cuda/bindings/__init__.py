"""A stand-in for ``cuda.bindings``: see ``cuda.bindings.runtime``."""
