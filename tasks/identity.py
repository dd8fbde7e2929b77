"""The one content hash behind every key and fingerprint.

Equal content gives an equal hash on any machine: the content's canonical JSON (sorted
keys, no spaces, anything else as ``str``) hashed with sha256.
"""

from __future__ import annotations

import hashlib
import json

__all__ = ["content_hash"]


def content_hash(content: object, length: int = 16) -> str:
    """Hex sha256 of ``content``'s canonical JSON, cut to ``length`` characters."""
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]
