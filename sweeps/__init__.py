"""The driver: load a config, plan points, dispatch them to Ray, commit to the lake."""
