"""Tiny models and scripted verifiers for the Lookahead Reasoning tests (no real weights)."""

from __future__ import annotations

import time

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from lookahead_reasoning.decoding.driver import CyclePolicy, Position
from lookahead_reasoning.runtime.lm import LM
from lookahead_reasoning.verifiers import Verdict

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def char_tokenizer(shift: int = 0) -> PreTrainedTokenizerFast:
    """One token per character over printable ASCII, newline and tab: every token decodes to a
    whole character, so equal text means equal tokens. ``shift`` rotates the ids (another vocabulary)."""
    chars = [chr(i) for i in range(32, 127)] + ["\n", "\t"]
    vocab = {c: (i + shift) % len(chars) for i, c in enumerate(chars)}
    for name in ("<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        vocab[name] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), "isolated")
    tok.decoder = decoders.Fuse()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                 unk_token="<unk>", additional_special_tokens=["<|im_start|>"])
    hf.chat_template = CHATML
    return hf


def tiny_lm(seed: int = 0, arch: str = "qwen2", tokenizer: PreTrainedTokenizerFast | None = None,
            eos_id: int | None = None) -> LM:
    """A random-weight 2-layer model (fp32) over the character tokenizer; weights fixed by ``seed``.

    ``eos_id`` adds an end-of-sequence id (in the generation config, which LM reads besides the
    tokenizer's), to make EOS likely in a test.
    """
    tok = tokenizer or char_tokenizer()
    eos = tok.eos_token_id if eos_id is None else eos_id
    common = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, initializer_range=0.5,
                  eos_token_id=eos, pad_token_id=tok.pad_token_id, max_position_embeddings=4096)
    torch.manual_seed(seed)
    model = (Qwen2ForCausalLM(Qwen2Config(**common)) if arch == "qwen2" else LlamaForCausalLM(LlamaConfig(**common)))
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = tok.pad_token_id
    model.eval().requires_grad_(False)
    return LM(model, tok, name=f"tiny-{arch}-{seed}")


class ScriptedVerifier:
    """Accepts a pair when ``rule(draft, target)`` says so; records every pair it saw."""

    def __init__(self, rule):
        self.rule = rule
        self.seen: list[tuple[str, str]] = []

    def verify(self, pairs):
        start = time.perf_counter()
        self.seen.extend(pairs)
        return [Verdict(bool(self.rule(d, t)), None, "scripted", time.perf_counter() - start, "scripted")
                for d, t in pairs]


def exact():
    """Text equality (with the character tokenizer, the same as token equality)."""
    return ScriptedVerifier(lambda d, t: d == t)


def frequent_char(lm: LM, prompt_ids: list[int], n: int = 80) -> str:
    """The most frequent character of the greedy continuation: a delimiter that makes short steps."""
    from collections import Counter

    from lookahead_reasoning.decoding import generate

    text = generate(lm, prompt_ids, max_new_tokens=n).text
    counts = Counter(text).most_common(1)
    return counts[0][0] if counts else "\n"


def at(generated: int, at_boundary: bool = True, remaining: int = 10_000) -> Position:
    """Where a policy plans from: ``generated`` tokens so far, on a step boundary or mid-step."""
    return Position(generated, remaining, at_boundary, 100 + generated)


class ScriptedPolicy(CyclePolicy):
    """A cycle policy whose plans a function of the position gives; every row runs, nothing is learned."""

    mode = "scripted"

    def __init__(self, plan_at):
        self.plan_at = plan_at

    def plan(self, position):
        return self.plan_at(position)


def request_table(cost, rows=(1, 2, 3, 4), lengths=(8, 40), draft=None, overlap: float = 1.0):
    """A request cost table (as :func:`~lookahead_reasoning.planning.endpoints.ameasure` measures one):
    ``cost(R, n)`` seconds at every (row count, length); ``draft(n)`` the draft's, when given."""
    from lookahead_reasoning.planning.costs import CostTable
    from lookahead_reasoning.planning.endpoints import request_grid

    target = request_grid({r: {n: cost(r, n) for n in lengths} for r in rows})
    drafts = request_grid({1: {n: draft(n) for n in lengths}}) if draft is not None else None
    return CostTable(target, drafts, overlap, per="request")


def engine_planner(table, accepted: float = 1.0, rejected: float = 1.0, max_k: int = 2, load=None):
    """Mode auto's planner over an engine of ``table``, with alpha1's posterior Beta(accepted, rejected)."""
    from lookahead_reasoning.planning import Beta, Book, Planner, PlannerConfig

    book = Book()
    book.step.alpha1 = Beta(accepted, rejected)
    return Planner(table, book, PlannerConfig.over_engine(max_k), load=load)


def engine_policy(planner):
    from lookahead_reasoning.planning import AutoPolicy

    return AutoPolicy(planner, ("\n\n",), mode="engine-auto")
