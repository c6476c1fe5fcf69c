"""Generation over serving engines: plain decoding and Lookahead Reasoning over an
:class:`~lookahead_reasoning.runtime.engine.pair.EnginePair` (:mod:`.runs`), and what
``LookaheadGenerator`` runs when its target is a URL (:mod:`.generator`). The HTTP client, the
step writer and the servers the project starts are the runtime's (:mod:`lookahead_reasoning.runtime.engine`)."""
