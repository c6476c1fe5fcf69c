"""Prompts for math word problems: ask for blank-line separated steps and a final \\boxed{} answer."""

from __future__ import annotations

INSTRUCTION = ("Solve the problem step by step. Separate the steps with a blank line, "
               "and put the final answer in \\boxed{}.")


def math_messages(question: str) -> list[dict[str, str]]:
    """Chat messages for one problem: the question, then the answer-format instruction."""
    return [{"role": "user", "content": f"{question.strip()}\n\n{INSTRUCTION}"}]
