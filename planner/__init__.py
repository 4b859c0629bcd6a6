"""Headroom's planner: capacity arithmetic, queue simulation, placement and forecasting.

Pure Python, numpy and OR-Tools; it never imports Django.
"""
