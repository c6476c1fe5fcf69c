"""Readable renderings of a Lookahead Reasoning trace: terminal colours and HTML.

Accepted drafted steps are green, the target's own steps (corrections and bonus steps) yellow,
rejected drafts (shown only in the detailed view) red and struck through.
"""

from __future__ import annotations

import html

from .decoding.results import GenerationResult, CycleStats

GREEN, YELLOW, RED, DIM, RESET = "\033[32m", "\033[33m", "\033[31m", "\033[2m", "\033[0m"


def _cycles(result: GenerationResult) -> list:
    return result.stats.cycles if isinstance(result.stats, CycleStats) else []


def _accepted_pieces(result: GenerationResult) -> list[tuple[str, str]]:
    """(kind, text) for every piece of the final text: kind is "draft" or "target".

    A result without step cycles (modes ar, sd, sd-ngram: every token is the target's) is one
    target piece.
    """
    if not isinstance(result.stats, CycleStats):
        return [("target", result.text)]
    return [("draft" if step.author.startswith("draft") else "target", step.text)
            for cycle in result.stats.cycles for step in cycle.kept_steps]


def _cycle_line(i: int, cycle) -> str:
    """One cycle's summary: what it drafted and kept, what it cost, and (mode auto) its plan."""
    line = (f"-- cycle {i}: {len(cycle.drafted)} drafted, {cycle.accepted} accepted, {cycle.target_rows} target rows, "
            f"draft {cycle.draft_s:.2f}s, target {cycle.target_s:.2f}s, verify {cycle.verify_s:.3f}s")
    if cycle.plan is not None:
        realised = cycle.tokens / cycle.wall_s if cycle.wall_s > 0 else float("nan")
        line += (f"; plan {cycle.plan.plan}: predicted {cycle.plan.predicted_tok_s:.2f} tok/s, "
                 f"realised {realised:.2f} tok/s ({cycle.tokens} tokens)")
    return line


def render_terminal(result: GenerationResult, color: bool = True, details: bool = False) -> str:
    """The answer with each step coloured by who wrote it; ``details`` adds every cycle's verdicts
    (and, in mode auto, its plan with the predicted and the realised speed)."""
    paint = (lambda c, s: f"{c}{s}{RESET}") if color else (lambda c, s: s)
    out = [paint(GREEN if kind == "draft" else YELLOW, text) for kind, text in _accepted_pieces(result)]
    lines = ["".join(out), "", f"{paint(GREEN, 'drafted step, accepted')}  {paint(YELLOW, 'target step')}"]
    if details:
        for i, cycle in enumerate(_cycles(result)):
            lines.append(paint(DIM, _cycle_line(i, cycle)))
            for j, verdict in enumerate(cycle.verdicts):
                mark = paint(GREEN, "accept") if verdict.accepted else paint(RED, "reject")
                score = "-" if verdict.score is None else f"{verdict.score:.3f}"
                lines.append(f"   [{mark} {score}] draft : {cycle.drafted[j].text.strip()[:90]!r}")
                lines.append(f"   {' ' * 15}target: {cycle.target[j].text.strip()[:90]!r}")
    return "\n".join(lines)


def render_html(result: GenerationResult) -> str:
    """A standalone HTML page: the answer with accepted drafts and target steps highlighted, a table
    of every verdict, and (mode auto) every cycle's plan."""
    spans = [f'<span style="background:{"#c8f7c5" if kind == "draft" else "#fff3b0"}" title="{kind}">'
             f'{html.escape(text)}</span>' for kind, text in _accepted_pieces(result)]
    rows, plans = [], []
    for i, cycle in enumerate(_cycles(result)):
        if cycle.plan is not None:
            plans.append(f"<li>{html.escape(_cycle_line(i, cycle).lstrip('- '))}</li>")
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
        + (f"<h2>Plans</h2><ol start='0'>{''.join(plans)}</ol>" if plans else "")
    )
