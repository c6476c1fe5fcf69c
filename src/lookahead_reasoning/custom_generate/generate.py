"""Lookahead Reasoning as a ``custom_generate`` of transformers (the folder that holds this file is the path
to give: ``lookahead_reasoning.integrations.hf_generate.CUSTOM_GENERATE``, as its docstring shows).
transformers copies this file into its module cache and calls ``generate(model, **arguments)``; the work is
the installed package's (:mod:`lookahead_reasoning.integrations.hf_generate`).
"""

from lookahead_reasoning.integrations.hf_generate import generate

__all__ = ["generate"]
