"""Turning logits into a next token: pure functions over float32 tensors.

Greedy decoding (temperature 0) is its own path: ``argmax``, no probabilities, no randomness.
Sampling applies temperature, then top-k, then top-p (nucleus), and draws with an explicit
``torch.Generator`` so a seed reproduces a run.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import require


@dataclass(frozen=True)
class SamplingConfig:
    """How to pick tokens. ``temperature == 0`` means greedy (top_k and top_p, which it would not read, are then
    refused); top_k 0/None means off; top_p in (0, 1]."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float = 1.0

    def __post_init__(self) -> None:
        require(isinstance(self.temperature, (int, float)) and self.temperature >= 0,
                f"temperature must be >= 0 (0 means greedy), got {self.temperature!r}")
        require(self.top_k is None or (isinstance(self.top_k, int) and self.top_k >= 0),
                f"top_k must be None or an integer >= 0, got {self.top_k!r}")
        require(isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1,
                f"top_p must be in (0, 1], got {self.top_p!r}")
        for name, value, off in (("top_k", self.top_k, (None, 0)), ("top_p", self.top_p, (1,))):
            require(self.temperature > 0 or value in off, f"{name} {value!r} shapes sampling, which temperature 0 "
                    "(greedy: the most likely token) does not do: give a temperature > 0 or leave it out")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def probs_from_logits(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """The distribution tokens are drawn from.

    Args:
        logits: (..., V) any float dtype; computed in float32.
    Returns:
        (..., V) float32 probabilities summing to 1. For greedy, the one-hot of the argmax
        (the distribution greedy decoding samples from, used by speculative acceptance).
    """
    logits = logits.float()
    if config.greedy:
        return torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).float()
    logits = logits / config.temperature
    if config.top_k:
        k = min(config.top_k, logits.shape[-1])
        kth = torch.topk(logits, k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if config.top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (the token that crosses it is kept)
        drop_sorted = (sorted_p.cumsum(dim=-1) - sorted_p) >= config.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def on_generator(tensor: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """``tensor`` on the device of ``generator`` (draws are made where the generator lives, the CPU for
    :func:`make_generator`'s: the same seed then draws the same tokens whatever device the model is on)."""
    return tensor if generator is None or tensor.device == generator.device else tensor.to(generator.device)


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row. probs: (..., V) -> (...) long, on probs' device."""
    flat = on_generator(probs.reshape(-1, probs.shape[-1]), generator)
    drawn = torch.multinomial(flat, 1, generator=generator).squeeze(-1)
    return drawn.reshape(probs.shape[:-1]).to(probs.device)


def next_token(logits: torch.Tensor, config: SamplingConfig, generator: torch.Generator | None = None) -> torch.Tensor:
    """Pick the next token from (..., V) logits: argmax when greedy, else a draw. Returns (...) long."""
    if config.greedy:
        return logits.argmax(dim=-1)
    return sample(probs_from_logits(logits, config), generator)


def token_scores(logits: torch.Tensor, ids: list[int]) -> tuple[list[float], list[int]]:
    """The model's probability of each of ``ids`` and its rank (0: the most likely token), from
    ``logits`` (n, V) where row i is the distribution that token ``ids[i]`` was written from.

    The model's own distribution (temperature 1, no top-k/top-p), in float32; used to judge a drafted
    step by how likely the target finds it (:mod:`~lookahead_reasoning.verifiers.likelihood`).
    """
    require(logits.dim() == 2 and logits.shape[0] == len(ids), f"need logits (n, V) for {len(ids)} ids, got "
            f"{tuple(logits.shape)}")
    if not ids:
        return [], []
    logp = torch.log_softmax(logits.float(), dim=-1)
    index = torch.tensor(ids, device=logits.device).unsqueeze(1)
    own = logp.gather(1, index)  # (n, 1)
    ranks = (logp > own).sum(dim=-1)
    return own.squeeze(1).exp().tolist(), ranks.tolist()


def make_generator(seed: int | None, device: torch.device | str = "cpu") -> torch.Generator:
    """An explicit generator; ``seed=None`` draws a seed from torch's global RNG (still recorded)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(int(torch.randint(0, 2**62, (1,)).item()) if seed is None else int(seed))
    return gen
