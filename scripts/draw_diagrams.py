"""Draw the two "How it works" diagrams (matplotlib only, no model):

* ``docs/img/sd_iteration.png``: one token-level speculative decoding iteration;
* ``docs/img/lr_cycle.png``: one Lookahead Reasoning cycle.

    .venv/bin/python scripts/draw_diagrams.py              # writes docs/img/
    .venv/bin/python scripts/draw_diagrams.py --out /tmp   # somewhere else

Both follow the library's loops: ``decoding/speculative.py`` (steps 1 to 4 of ``decode_rows_sd``) and
``decoding/lookahead.py`` (draft k steps, k + 1 target rows forked from the prefix's cache, verify,
accept up to the first mismatch).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DPI = 150

# one colour per role, the same in both pictures
PREFIX, DRAFT, TARGET, OK, BAD, EXTRA, DROPPED = ("#d9d9d9", "#f5a25d", "#6baed6", "#74c476", "#ef6f6c",
                                                 "#9e7bd0", "#f0f0f0")
INK, MUTED = "#222222", "#777777"


# ------------------------------------------------------------------------------------------ drawing verbs

def box(ax, x: float, y: float, w: float, h: float, text: str = "", color: str = PREFIX, *, dashed: bool = False,
        edge: str | None = None, size: float = 12, weight: str = "normal", text_color: str = INK) -> None:
    """A rounded box with its lower-left corner at (x, y) and centred text."""
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0,rounding_size=0.08", fc=color,
                                ec=edge or "#555555", lw=1.6 if dashed else 1.0, ls="--" if dashed else "-"))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, color=text_color,
                weight=weight)


def arrow(ax, start: tuple[float, float], end: tuple[float, float], color: str = MUTED, *, rad: float = 0.0,
          width: float = 1.4) -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, color=color, lw=width,
                                 connectionstyle=f"arc3,rad={rad}", shrinkA=2, shrinkB=2))


def lane_label(ax, y: float, number: int, title: str, detail: str) -> None:
    """The numbered step name on the left of a lane, with one line of detail under it."""
    ax.text(0.0, y + 0.22, f"{number}  {title}", ha="left", va="center", fontsize=13, weight="bold", color=INK)
    ax.text(0.0, y - 0.22, detail, ha="left", va="center", fontsize=10.5, color="#444444")


def mark(ax, x: float, y: float, ok: bool | None, size: float = 20) -> None:
    """A tick (accepted), a cross (rejected) or a dash (not looked at) centred at (x, y)."""
    symbol, color = {True: ("\u2713", "#238b45"), False: ("\u2717", "#cb181d"), None: ("\u2013", MUTED)}[ok]
    ax.text(x, y, symbol, ha="center", va="center", fontsize=size, color=color, weight="bold")


def canvas(width: float, height: float, xmax: float, ymax: float):
    fig, ax = plt.subplots(figsize=(width, height))
    ax.set_xlim(0, xmax)
    ax.set_ylim(0, ymax)
    ax.axis("off")
    fig.subplots_adjust(0.01, 0.01, 0.99, 0.99)
    return fig, ax


# ------------------------------------------------------------------------------------------ token-level SD

def draw_sd_iteration(path: Path) -> Path:
    """One SD iteration with gamma = 4: x_1, x_2 accepted, x_3 rejected, the correction y replaces it."""
    gamma, accepted = 4, 2
    fig, ax = canvas(13, 7.2, 13.4, 7.4)
    col0, w, h, gap = 5.3, 1.05, 0.62, 0.22                # token columns: the prefix box, then x_1 .. x_gamma

    def col(i: int) -> float:                             # left edge of drafted position i (1-based)
        return col0 + 1.4 + (i - 1) * (w + gap)

    ax.text(0.0, 7.15, "One speculative decoding iteration ($\\gamma = 4$)", fontsize=16, weight="bold", va="center")
    ax.text(0.0, 6.75, "$p$: the target's next-token distribution      $q$: the draft's      $u$: a uniform random number in [0, 1)",
            fontsize=10.5, color="#444444", va="center")

    # 1. draft
    y = 5.45
    lane_label(ax, y + h / 2, 1, "Draft proposes $\\gamma$ tokens", "$\\gamma$ cheap forwards of the draft, $x_i \\sim q_i$")
    box(ax, col0, y, 1.2, h, "prefix", PREFIX)
    for i in range(1, gamma + 1):
        box(ax, col(i), y, w, h, f"$x_{i}$", DRAFT, size=14)
        ax.text(col(i) + w / 2, y - 0.2, f"$q_{i}(x_{i})$", ha="center", va="center", fontsize=10, color="#8c4a12")
        start = (col0 + 1.2, y + h / 2) if i == 1 else (col(i - 1) + w, y + h / 2)
        arrow(ax, start, (col(i), y + h / 2))

    # 2. target: one forward over the newest token and all drafts
    y = 3.75
    lane_label(ax, y + h / 2, 2, "Target scores all of them", "ONE forward pass gives $p$ at $\\gamma + 1$ positions")
    ax.add_patch(FancyBboxPatch((col0 - 0.1, y - 0.12), col(gamma + 1) + w - col0 + 0.2, h + 0.24,
                                boxstyle="round,pad=0,rounding_size=0.12", fc="#eef5fb", ec=TARGET, lw=2))
    ax.text(col0 + 0.6, y + h / 2, "one\nforward", ha="center", va="center", fontsize=10.5, color="#2b6a99",
            weight="bold")
    for i in range(1, gamma + 2):
        box(ax, col(i), y, w, h, f"$p_{i}$", TARGET, size=14)
    ax.text(col(gamma + 1) + w / 2, y + h + 0.28, "bonus row", ha="center", fontsize=9.5, color="#2b6a99")
    for i in range(1, gamma + 1):
        arrow(ax, (col(i) + w / 2, 5.45 - 0.33), (col(i) + w / 2, y + h + 0.14), color="#bbbbbb", width=1.0)

    # 3. accept / reject from left to right
    y = 2.35
    lane_label(ax, y + 0.2, 3, "Accept or reject, left to right",
               "keep $x_i$ if $u_i < \\min(1,\\ p_i(x_i) / q_i(x_i))$, stop at the first failure")
    for i in range(1, gamma + 1):
        verdict = True if i <= accepted else False if i == accepted + 1 else None
        mark(ax, col(i) + w / 2, y + 0.32, verdict, size=24)
        note = "accept" if verdict else "reject" if verdict is False else "skipped"
        ax.text(col(i) + w / 2, y - 0.12, note, ha="center", fontsize=10,
                color={True: "#238b45", False: "#cb181d", None: MUTED}[verdict])
    ax.text(col(gamma + 1) + w / 2, y + 0.1, "bonus, only\nif all pass", ha="center", va="center", fontsize=9.5,
            color=MUTED)

    # 4. result
    y = 0.55
    lane_label(ax, y + h / 2, 4, "Keep the accepted prefix + 1 target token",
               "both KV caches drop $x_3, x_4$ (rollback)")
    box(ax, col0, y, 1.2, h, "prefix", PREFIX)
    for i in range(1, accepted + 1):
        box(ax, col(i), y, w, h, f"$x_{i}$", OK, size=14)
    box(ax, col(accepted + 1), y, w, h, "$y$", EXTRA, size=14, weight="bold")
    for i in range(accepted + 2, gamma + 1):
        box(ax, col(i), y, w, h, f"$x_{i}$", DROPPED, dashed=True, edge="#bbbbbb", text_color="#aaaaaa", size=14)
    ax.text(col(accepted + 1) + w / 2, y - 0.3, "correction $y \\sim \\mathrm{norm}(\\max(0,\\ p_3 - q_3))$",
            ha="center", fontsize=11, color="#5b3c88")
    ax.text(col(gamma + 1), y + h / 2, "had all $\\gamma$ passed:\nbonus $y \\sim p_5$", ha="left", va="center",
            fontsize=9.5, color=MUTED)
    arrow(ax, (col(accepted + 1) + w / 2, 2.0), (col(accepted + 1) + w / 2, y + h + 0.02), color="#5b3c88")

    fig.savefig(path, dpi=DPI, facecolor="white")
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------------------ Lookahead Reasoning

def draw_lr_cycle(path: Path) -> Path:
    """One synchronous LR cycle with k = 3: steps 1 and 2 pass the verifier, step 3 does not."""
    k, accepted = 3, 2
    fig, ax = canvas(13, 8.4, 13.4, 8.6)
    x0, xw, sw, h, gap = 5.3, 1.05, 1.3, 0.55, 0.15     # the prefix column, then one column per step

    def col(j: int) -> float:                           # left edge of step column j (1-based)
        return x0 + xw + gap + (j - 1) * (sw + gap)

    ax.text(0.0, 8.35, "One Lookahead Reasoning cycle ($k = 3$ drafted steps)", fontsize=16, weight="bold",
            va="center")
    ax.text(0.0, 7.95, "a step: reasoning text up to a blank line      $x$: the accepted text so far      "
            "$\\hat s_j$: the draft's step $j$      $s_j$: the target's step $j$", fontsize=10.5, color="#444444",
            va="center")

    # 1. the draft writes k steps, one after another
    y = 6.75
    lane_label(ax, y + h / 2, 1, "Draft writes $k$ steps", "one after another, each continuing the last")
    box(ax, x0, y, xw, h, "$x$", PREFIX, size=14)
    for j in range(1, k + 1):
        box(ax, col(j), y, sw, h, f"$\\hat s_{j}$", DRAFT, size=14)
        arrow(ax, (x0 + xw, y + h / 2) if j == 1 else (col(j - 1) + sw, y + h / 2), (col(j), y + h / 2))

    # 2. the target: k + 1 rows forked from x's cache, one batched pass
    rows_top = [5.45 - r * (h + 0.18) for r in range(k + 1)]
    middle = (rows_top[0] + h + rows_top[-1]) / 2
    lane_label(ax, middle + 0.25, 2, "Target writes its own step", "on $k + 1$ rows, in ONE batched pass")
    ax.text(0.0, middle - 0.3, "row $j$ continues $x, \\hat s_1 \\ldots \\hat s_j$; all rows share\n"
            "the KV cache of $x$ (forked, not recomputed)", ha="left", va="top", fontsize=10.5, color="#444444")
    ax.add_patch(FancyBboxPatch((x0 - 0.12, rows_top[-1] - 0.12), col(k + 1) + sw - x0 + 0.24,
                                rows_top[0] + h - rows_top[-1] + 0.24, boxstyle="round,pad=0,rounding_size=0.12",
                                fc="#eef5fb", ec=TARGET, lw=2))
    box(ax, x0, rows_top[-1], xw, rows_top[0] + h - rows_top[-1], "", PREFIX)
    ax.text(x0 + xw / 2, middle + 0.35, "$x$", ha="center", va="center", fontsize=14)
    ax.text(x0 + xw / 2, middle - 0.3, "one KV\ncache,\nforked", ha="center", va="center", fontsize=9.5,
            color="#444444")
    for r, y in enumerate(rows_top):
        j = r + 1
        for i in range(1, j):
            box(ax, col(i), y, sw, h, f"$\\hat s_{i}$", "#fbe3cf", edge="#d9b089", size=12, text_color="#8c6a4a")
        replaces = j == accepted + 1
        box(ax, col(j), y, sw, h, f"$s_{j}$", TARGET, size=14, weight="bold", edge="#5b3c88" if replaces else None)
        if replaces:
            ax.add_patch(FancyBboxPatch((col(j), y), sw, h, boxstyle="round,pad=0,rounding_size=0.08", fc="none",
                                        ec="#5b3c88", lw=2.5))
        ax.text(col(k + 1) + sw + 0.25, y + h / 2, f"row {r}" + ("\n(bonus)" if j == k + 1 else ""),
                va="center", fontsize=10, color="#2b6a99")

    # 3. verify each pair
    y = 1.95
    lane_label(ax, y + 0.15, 3, "Verifier compares each pair", "same meaning? (an LLM judge, embeddings, ...)")
    for j in range(1, k + 1):
        ok = j <= accepted
        mark(ax, col(j) + sw / 2, y + 0.35, ok, size=22)
        relation = "\u2248" if ok else "\u2260"
        ax.text(col(j) + sw / 2, y - 0.1, f"$\\hat s_{j}$ {relation} $s_{j}$", ha="center",
                fontsize=11, color="#238b45" if ok else "#cb181d")
    ax.text(col(k + 1) + sw / 2, y + 0.15, "used only if\nall $k$ pass", ha="center", va="center", fontsize=9.5,
            color=MUTED)

    # 4. the accepted text
    y = 0.4
    lane_label(ax, y + h / 2, 4, "Keep drafts up to the first mismatch",
               "the target's step replaces the mismatch")
    box(ax, x0, y, xw, h, "$x$", PREFIX, size=14)
    for j in range(1, accepted + 1):
        box(ax, col(j), y, sw, h, f"$\\hat s_{j}$", OK, size=14)
    box(ax, col(accepted + 1), y, sw, h, f"$s_{accepted + 1}$", EXTRA, size=14, weight="bold")
    ax.text(col(accepted + 1) + sw / 2, y - 0.22, f"from row {accepted}", ha="center", va="center",
            fontsize=9.5, color="#5b3c88")
    box(ax, col(k + 1), y, sw, h, "next cycle", "white", dashed=True, edge="#bbbbbb", text_color=MUTED, size=10.5)

    fig.savefig(path, dpi=DPI, facecolor="white")
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="folder to write the PNGs into")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for path in (draw_sd_iteration(args.out / "sd_iteration.png"), draw_lr_cycle(args.out / "lr_cycle.png")):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
