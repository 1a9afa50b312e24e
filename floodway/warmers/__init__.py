"""Warm-pool policies: pure functions of (clock, traffic history, WarmPool config) that say
how many containers to keep warm. The local runtime, the Modal warmers and the simulator all
call the same functions."""
