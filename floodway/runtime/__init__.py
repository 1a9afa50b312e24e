"""The local embedded runtime: worker-process containers, the pool, the HTTP router app."""
