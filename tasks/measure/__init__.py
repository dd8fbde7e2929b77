"""Measurements on real devices with PyTorch: timing, kernels, collectives among ranks,
the profiled layer, and the region of interest. Nothing here imports Ray; torch is
imported when a measurement runs, not when a module is imported.
"""
