"""The peer baselines: transformers' own ``generate`` (plain, assisted, prompt lookup).

They are what a user would otherwise run, so every benchmark puts them beside this library's loops on
the same loaded models. They live here, with the benchmark, not in :mod:`lookahead_reasoning.runtime.lm`
(the one place the library's own loops call a model through).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..runtime.lm import LM


def _compact_input(module: torch.nn.Module, args: tuple) -> tuple:
    """Forward pre-hook: hand the module its input with compact strides (a view, no copy)."""
    x = args[0]
    if isinstance(x, torch.Tensor) and x.dim() >= 2:
        x = x.reshape(-1, x.shape[-1]).view(x.shape)
    return (x,) + tuple(args[1:])


@dataclass(frozen=True)
class Peer:
    """Which of transformers' generate runs: plain (the defaults), assisted by ``assistant`` (with
    ``assistant_tokens`` drafted tokens per iteration on a constant schedule, or None for
    transformers' own adaptive defaults), or prompt lookup (``prompt_lookup_num_tokens``)."""

    assistant: LM | None = None
    assistant_tokens: int | None = None
    prompt_lookup_num_tokens: int | None = None


def hf_generate(lm: LM, prompt_ids: Sequence[int], max_new_tokens: int, peer: Peer = Peer(), *,
                sampling: Any = None, seed: int = 0) -> list[int]:
    """The new token ids of transformers' own ``generate``: plain, assisted or prompt-lookup (``peer``), greedy
    unless ``sampling`` (a SamplingConfig) says otherwise."""
    assistant = peer.assistant
    kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": lm.pad_id}
    if sampling is not None and not sampling.greedy:
        kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p,
                      top_k=sampling.top_k or 0)
        torch.manual_seed(seed)
    else:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    if assistant is not None:
        kwargs["assistant_model"] = assistant.model
    if peer.prompt_lookup_num_tokens:
        kwargs["prompt_lookup_num_tokens"] = peer.prompt_lookup_num_tokens
    if lm.eos_ids:
        kwargs["eos_token_id"] = sorted(lm.eos_ids)
    ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=lm.device)
    saved = None
    if assistant is not None and peer.assistant_tokens:
        config = assistant.model.generation_config
        saved = (config.num_assistant_tokens, config.num_assistant_tokens_schedule)
        config.num_assistant_tokens, config.num_assistant_tokens_schedule = int(peer.assistant_tokens), "constant"
    # the peers get the same LM-head fix as LM.forward (see _keep_positions), so that the comparison
    # measures the decoding loops, not a strided-matmul slow path that only one side avoids
    hooks = [m.get_output_embeddings().register_forward_pre_hook(_compact_input)
             for m in ([lm.model] + ([assistant.model] if assistant is not None else []))]
    try:
        with torch.no_grad():
            out = lm.model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
    finally:
        for hook in hooks:
            hook.remove()
        if saved is not None:
            config.num_assistant_tokens, config.num_assistant_tokens_schedule = saved
    return out[0, len(prompt_ids):].tolist()
