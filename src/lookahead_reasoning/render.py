"""Readable renderings of a Lookahead Reasoning trace: terminal colours and HTML.

Accepted drafted steps are green, the target's own steps (corrections and bonus steps) yellow,
rejected drafts (shown only in the detailed view) red and struck through.
"""

from __future__ import annotations

import html
from typing import Any

GREEN, YELLOW, RED, DIM, RESET = "\033[32m", "\033[33m", "\033[31m", "\033[2m", "\033[0m"


def _accepted_pieces(result: Any) -> list[tuple[str, str]]:
    """(kind, text) for every piece of the final text: kind is "draft" or "target".

    A result without step cycles (modes ar, sd, sd-ngram: every token is the target's) is one
    target piece.
    """
    stats = result.stats
    if not hasattr(stats, "cycles"):
        return [("target", result.text)]
    pieces = []
    for cycle in stats.cycles:
        for step in cycle.drafted[:cycle.accepted]:
            pieces.append(("draft", step.text))
        if cycle.appended_target_step:
            pieces.append(("target", cycle.target[cycle.accepted].text))
    return pieces


def render_terminal(result: Any, color: bool = True, details: bool = False) -> str:
    """The answer with each step coloured by who wrote it; ``details`` adds every cycle's verdicts."""
    stats = result.stats
    paint = (lambda c, s: f"{c}{s}{RESET}") if color else (lambda c, s: s)
    out = [paint(GREEN if kind == "draft" else YELLOW, text) for kind, text in _accepted_pieces(result)]
    lines = ["".join(out), ""]
    legend = f"{paint(GREEN, 'drafted step, accepted')}  {paint(YELLOW, 'target step')}"
    lines.append(legend)
    if details:
        for i, cycle in enumerate(getattr(stats, "cycles", [])):
            lines.append(paint(DIM, f"-- cycle {i}: {len(cycle.drafted)} drafted, {cycle.accepted} accepted, "
                                    f"{cycle.target_rows} target rows, draft {cycle.draft_s:.2f}s, "
                                    f"target {cycle.target_s:.2f}s, verify {cycle.verify_s:.3f}s"))
            for j, verdict in enumerate(cycle.verdicts):
                mark = paint(GREEN, "accept") if verdict.accepted else paint(RED, "reject")
                score = "-" if verdict.score is None else f"{verdict.score:.3f}"
                lines.append(f"   [{mark} {score}] draft : {cycle.drafted[j].text.strip()[:90]!r}")
                lines.append(f"   {' ' * 15}target: {cycle.target[j].text.strip()[:90]!r}")
    return "\n".join(lines)


def render_html(result: Any) -> str:
    """A standalone HTML page: the answer with accepted drafts and target steps highlighted, and a
    table of every verdict."""
    stats = result.stats
    spans = []
    for kind, text in _accepted_pieces(result):
        color = "#c8f7c5" if kind == "draft" else "#fff3b0"
        spans.append(f'<span style="background:{color}" title="{kind}">{html.escape(text)}</span>')
    rows = []
    for i, cycle in enumerate(getattr(stats, "cycles", [])):
        for j, v in enumerate(cycle.verdicts):
            rows.append(
                f"<tr><td>{i}</td><td>{j}</td><td>{'yes' if v.accepted else 'no'}</td>"
                f"<td>{'' if v.score is None else f'{v.score:.3f}'}</td>"
                f"<td>{html.escape(cycle.drafted[j].text)}</td><td>{html.escape(cycle.target[j].text)}</td></tr>")
    summary = "".join(f"<li>{html.escape(str(k))}: {html.escape(str(v))}</li>" for k, v in result.summary().items())
    return (
        "<!doctype html><meta charset='utf-8'><title>Lookahead Reasoning trace</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}pre{white-space:pre-wrap}"
        "td{vertical-align:top;border-top:1px solid #ddd;padding:4px;white-space:pre-wrap}</style>"
        "<h1>Lookahead Reasoning trace</h1><p><span style='background:#c8f7c5'>drafted step, accepted</span> "
        "<span style='background:#fff3b0'>target step</span></p>"
        f"<pre>{''.join(spans)}</pre><h2>Summary</h2><ul>{summary}</ul>"
        "<h2>Verdicts</h2><table><tr><th>cycle</th><th>step</th><th>accepted</th><th>score</th>"
        f"<th>draft</th><th>target</th></tr>{''.join(rows)}</table>"
    )
