"""Write OPTIONS.md: every option of every command and which modes and targets read it, from the parsers and the
table the refusals use (``lookahead_reasoning.cli.options_page``); ``tests/test_bad_inputs.py`` fails when the page
is older than the code."""

from pathlib import Path

from lookahead_reasoning.cli import options_page

if __name__ == "__main__":
    path = Path(__file__).resolve().parents[1] / "OPTIONS.md"
    path.write_text(options_page(), encoding="utf-8")
    print(f"wrote {path}")
