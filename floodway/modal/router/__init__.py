"""The router function's container: `ModalBackend` (the http `Backend` on Modal) and what it
keeps and calls."""
