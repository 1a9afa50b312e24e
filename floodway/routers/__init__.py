"""Routing: wire formats and admission; the pure dispatch decision lives here too."""
