"""Measuring: CPU configurations, executors, probes, the screen, the drill, statistics."""
