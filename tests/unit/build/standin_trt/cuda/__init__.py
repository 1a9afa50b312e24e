"""A stand-in for cuda-python's ``cuda`` package: see ``cuda.bindings.runtime``."""
