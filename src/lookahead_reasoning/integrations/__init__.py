"""Where researchers already are: transformers' ``generate`` (:mod:`.hf_generate`) and
lm-evaluation-harness (:mod:`.harness`, with the ``eval`` extra)."""
