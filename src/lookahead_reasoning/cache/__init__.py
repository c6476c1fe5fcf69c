"""KV-cache state: a transformers ``DynamicCache`` plus the 2D mask that says which columns are real.

Everything that touches ``cache.layers[i].keys / values`` lives in :mod:`.kv`. The decoding loops only
clone, fork, select, crop and mask through :class:`KVState`.
"""

from .kv import KVState

__all__ = ["KVState"]
