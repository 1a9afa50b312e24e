"""Cold-start artifacts: fetch -> snapshot -> export -> verify -> publish, and the loader.

Import `floodway.build.pipeline` only where building: it pulls in torch. The loader does not.
"""
