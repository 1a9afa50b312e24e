"""Warm pools on Modal: which cron functions an app gets (`plan`) and what they apply
(`apply`)."""
