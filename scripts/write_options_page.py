"""Write OPTIONS.md: every option of every command and which modes and targets read it, from the parsers and the
table the refusals use (``presets.MODE_READS``); ``tests/test_bad_inputs.py`` fails when the page is older than the
code.

    .venv/bin/python scripts/write_options_page.py
"""

import argparse
from pathlib import Path

from lookahead_reasoning.cli import build_parser
from lookahead_reasoning.integrations import harness
from lookahead_reasoning.presets import MODE_READS, read_by


def options_page() -> str:
    """OPTIONS.md: which modes read each setting (``presets.MODE_READS``, for every entry), and every option of
    every command with its help, which says which modes and targets read it."""
    settings = "\n".join(f"| `{name}` | {read_by(name, tuple(MODE_READS))} |" for name in
                          sorted({s for reads in MODE_READS.values() for s in reads}))
    parts = [OPTIONS_HEAD.format(settings=settings)]
    sub = build_parser()._subparsers._group_actions[0]
    commands, helps = {**sub.choices, "eval": harness.eval_parser()}, {a.dest: a.help for a in sub._choices_actions}
    for name, p in commands.items():
        rows = [f"| `{', '.join(a.option_strings) or a.dest}` | {' '.join((a.help or '').split()).replace('|', '/')} |"
                for a in p._actions if a.dest != "help" and a.help != argparse.SUPPRESS]
        parts.append(f"## `{name}`\n\n{helps[name]}.\n\n| option | what it sets; who reads it |\n|---|---|\n"
                     + "\n".join(rows) + "\n")
    return "\n".join(parts)


OPTIONS_HEAD = """# Options

Every option of every entry is read by the run it is given to or refused by name before a model loads or a request
goes out (`tests/test_bad_inputs.py` and `tests/test_bad_python_inputs.py` draw bad values of every kind for each).
A setting a mode does not read is refused, never dropped; the table below is the one the refusals use
(`presets.MODE_READS`), for the command line, `LookaheadGenerator(...)` and its `generate(...)`, transformers'
`custom_generate` and the lm-evaluation-harness `model_args` alike. Over an engine target the modes are `auto`,
`lr` and `ar`, with the same table. Every mode reads the target, the sampling, the budget and the seed. A setting
given to a `LookaheadGenerator` by keyword is held to its own mode; a `Settings` object and the models serve every
mode its `generate` may run. A draft named `none` is no draft model, in every entry: modes `ar` and `sd-ngram`
need none, the others refuse it.

| setting | read by |
|---|---|
{settings}

The help of each option of `generate`, `lr`, `bench` and `pairs` ends with the modes and the targets that read it
(`--help` prints the same). This page is written by `scripts/write_options_page.py`.
"""


if __name__ == "__main__":
    path = Path(__file__).resolve().parents[1] / "OPTIONS.md"
    path.write_text(options_page(), encoding="utf-8")
    print(f"wrote {path}")
