"""The router's HTTP surface, shared by the local runtime and the Modal router."""
