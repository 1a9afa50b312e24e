"""The local embedded runtime: worker-process containers, the pool of them per endpoint
(the local Backend), their health and rollouts, and `floodway serve`."""
