"""The terms every part of the model speaks, importing nothing of the model's other folders:

- ``specs``: the model and hardware dataclasses (also the YAML schemas) and their fingerprints;
- ``stack``: the software stack (attention kernel, GEMM precision, overlap switches);
- ``layout``: parallel layouts (names and codes) and their structural constraints;
- ``metrics``: the study's metrics, defined once;
- ``train_time``: time and cost to train a number of tokens.
"""

__all__ = ["specs", "stack", "layout", "metrics", "train_time"]
