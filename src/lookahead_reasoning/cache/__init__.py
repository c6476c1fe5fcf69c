"""KV-cache state: a transformers ``DynamicCache`` plus the 2D mask that says which columns are real.

Everything that touches ``cache.layers[i].keys / values`` lives in :mod:`.kv`. The decoding loops only
clone, fork, select, crop and mask through :class:`KVState`. The compiled path keeps its keys and values
in preallocated tensors instead (:mod:`.static`: :class:`StaticKVState`), with the same verbs.
"""

from .kv import Columns, KVState
from .static import ArenaShape, StaticArena, StaticKVState

__all__ = ["ArenaShape", "Columns", "KVState", "StaticArena", "StaticKVState"]
