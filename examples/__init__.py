"""Example apps: each file ``*_app.py`` is a complete floodway app (see README.md here)."""
