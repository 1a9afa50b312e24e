"""The GPU class of an endpoint (or lane), as it runs in its container."""
