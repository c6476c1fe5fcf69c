"""The decoding modes and their defaults, in one place: the Python API, ``lookahead-reasoning lr`` and
``lookahead-reasoning bench`` all read them from here.

=========  =================================================================================
mode       what runs
=========  =================================================================================
auto       every cycle, a planner picks the fastest of: the target alone, token SD with some
           gamma, or Lookahead Reasoning with k drafted steps (and SD inside its rows), from a
           measured cost table and acceptance rates learned as it goes
lr         Lookahead Reasoning: the draft writes k steps, the target checks them in one batch
lr-sd      LR with token-level SD inside every step (the draft model drafts for the target's rows)
ar         the target alone, one token per forward (the reference)
sd         token-level speculative decoding with the draft model
sd-ngram   token-level speculative decoding with prompt lookup (no draft model)
=========  =================================================================================

The fixed modes' defaults are the best measured settings on this project's CPUs (see
benchmarks/README.md); ``auto`` needs none, it measures. The rules of the settings a mode reads (``k``,
gamma, the draft's confidence stop) are here too, each written once: ``Settings``, every plan and the
command line check with them.
"""

from __future__ import annotations

from .errors import require, whole

MODES = ("auto", "lr", "lr-sd", "ar", "sd", "sd-ngram")
STEP_MODES = ("auto", "lr", "lr-sd")  # modes that use a verifier
DEFAULT_MODE = "auto"
DEFAULT_TARGET = "qwen2.5-coder-1.5b"
DEFAULT_DRAFT = "qwen2.5-coder-0.5b"
DEFAULT_VERIFIER = "exact"  # the only verifier that kept the target's answers in lr (GSM8K 200-229, float32)
DRAFT_STOP_BELOW = 0.4  # the draft model stops drafting after a token it gave less than this probability
MAX_STEP_TOKENS = 100
STEP_DELIMITERS = ("\n\n",)  # a reasoning step ends at a blank line
DEFAULT_MAX_NEW_TOKENS = 512
ALT_TEMPERATURE = 0.7  # width > 1 under greedy decoding: the alternative drafts are sampled at this temperature
TOKEN_GAMMA = 4  # drafted tokens per SD iteration where a mode has no gamma of its own
LR_SD_TOKEN_SD = {"target": "draft", "draft": "ngram"}  # lr-sd: q drafts tokens for p's rows, prompt lookup for q's steps
NGRAM_MAX, NGRAM_MIN = 3, 1  # prompt lookup matches the last 3 tokens down to the last 1
SCHEDULES = ("sync", "async")  # how a cycle orders its work (Settings.schedule, CyclePlan.schedule)
SCHEDULE = "sync"  # an LR cycle drafts every step, then runs the target's rows ("async": a row starts with its prefix)
ENGINE_TIMEOUT_S = 300.0  # one request to a serving engine may take this long (a long answer in one request)
ENGINE_RETRIES = 2  # a request an engine refused to connect is tried this many more times


# the modes' defaults: ``k`` drafted steps per cycle and ``gamma`` drafted tokens per SD iteration (a mode
# missing from a table has no such knob)
PRESET_K: dict[str, int] = {
    "auto": 2,  # the most drafted steps a plan may use (auto chooses gamma per cycle)
    "lr": 2,
    "lr-sd": 1,  # one drafted step: every extra row makes a CPU's batched step dearer
}
PRESET_GAMMA: dict[str, int] = {
    "lr-sd": 12,
    "sd": 12,  # with the draft stop, a large gamma costs little where the draft is unsure
    "sd-ngram": 6,
}
NGRAM_GAMMA = 6  # prompt lookup proposes runs of at most this many tokens


# What each mode reads of what a user may give beyond the target, the sampling, the budget and the seed (every
# mode reads those): "draft" a draft model, "steps" the step segmenter, "verifier" the verifier and its options,
# "planner" mode auto's PlannerConfig, the rest the Settings fields of those names. A setting given to a mode
# that does not read it is refused by name (settings.refuse_unread), never dropped; the same table answers
# over an engine, which runs ar, lr and auto.
MODE_READS: dict[str, frozenset[str]] = {
    "ar": frozenset(),
    "sd": frozenset({"draft", "gamma", "draft_stop_below"}),
    "sd-ngram": frozenset({"gamma"}),
    "lr": frozenset({"draft", "k", "width", "alt_temperature", "steps", "verifier", "schedule"}),
    "lr-sd": frozenset({"draft", "k", "width", "alt_temperature", "steps", "verifier", "gamma", "draft_stop_below",
                        "token_sd"}),
    "auto": frozenset({"draft", "k", "steps", "verifier", "draft_stop_below", "token_sd", "planner"}),
    # the benchmark's peers, transformers' own generate: plain, assisted by the draft, prompt lookup
    "hf-generate": frozenset(), "hf-assisted": frozenset({"draft", "gamma"}), "hf-lookup": frozenset({"gamma"}),
}
NO_MODEL = "none"  # as a model's name, in every entry: no model (a draft "none": the modes that draft are refused)


def no_model(name: object) -> bool:
    """Whether ``name`` says "no model" (:data:`NO_MODEL`, in any case)."""
    return isinstance(name, str) and name.strip().lower() == NO_MODEL


def read_by(setting: str, modes: tuple[str, ...] = MODES) -> str:
    """The modes of ``modes`` that read ``setting`` (:data:`MODE_READS`), for help texts: "auto, lr, lr-sd"."""
    return ", ".join(mode for mode in modes if setting in MODE_READS[mode]) or "no mode"


def check_mode(mode: str) -> str:
    require(mode in MODES, f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    return mode


def check_draft_stop_below(draft_stop_below: float | None) -> None:
    """Raise ConfigError unless ``draft_stop_below`` (the draft confidence to keep drafting) is None or in
    [0, 1) (0 and None never stop early): one rule for Settings and for every plan."""
    require(draft_stop_below is None or (isinstance(draft_stop_below, (int, float)) and not isinstance(draft_stop_below, bool)
                                         and 0.0 <= draft_stop_below < 1.0),
            f"draft_stop_below (draft confidence to keep drafting) must be in [0, 1) or None, got {draft_stop_below!r}")


def check_k(k: int | None, mode: str | None = None) -> int | None:
    """The one rule for ``k``, wherever it is given: None (the mode's preset) or an integer >= 0, the
    drafted steps per cycle; in mode ``auto`` the most a plan may use, so 0 there means token-level plans
    only, while a mode with a fixed k (``lr``, ``lr-sd``) needs at least one drafted step."""
    require(k is None or whole(k), f"k (drafted steps per cycle) must be an integer >= 0, got {k!r}")
    require(not (k == 0 and mode is not None and mode != "auto"), f"k=0 drafts no step: mode {mode} needs k >= 1 "
            "(k=0 is a cap for mode auto: its plans then use token SD or the target alone)")
    return k


def mode_k(mode: str, k: int | None = None) -> int:
    """Drafted steps per cycle for ``mode``: ``k`` when given, else the mode's preset (:func:`check_k`)."""
    check_mode(mode)
    return check_k(PRESET_K.get(mode) if k is None else k, mode)


def mode_gamma(mode: str, gamma: int | None = None, row_drafter: str | None = "draft") -> int:
    """Drafted tokens per SD iteration for ``mode``: ``gamma`` when given, else the preset (prompt
    lookup drafts fewer: ``lr-sd`` with n-gram rows uses :data:`NGRAM_GAMMA`)."""
    check_mode(mode)
    if gamma is None:
        gamma = NGRAM_GAMMA if mode == "lr-sd" and row_drafter == "ngram" else PRESET_GAMMA.get(mode)
    gamma = TOKEN_GAMMA if gamma is None else gamma  # modes without gamma: any valid value
    require(whole(gamma, 1), f"gamma (drafted tokens per iteration) must be an integer >= 1, got {gamma!r}")
    return gamma


__all__ = ["ALT_TEMPERATURE", "DEFAULT_DRAFT", "DEFAULT_MAX_NEW_TOKENS", "DEFAULT_MODE", "DEFAULT_TARGET",
           "DEFAULT_VERIFIER", "DRAFT_STOP_BELOW", "ENGINE_RETRIES", "ENGINE_TIMEOUT_S", "LR_SD_TOKEN_SD", "MAX_STEP_TOKENS", "MODES", "NGRAM_GAMMA",
           "NGRAM_MAX", "NGRAM_MIN", "MODE_READS", "NO_MODEL", "PRESET_GAMMA", "PRESET_K", "SCHEDULE", "SCHEDULES", "STEP_DELIMITERS", "STEP_MODES", "TOKEN_GAMMA",
           "check_draft_stop_below", "check_k", "check_mode",
           "mode_gamma", "mode_k", "no_model", "read_by"]
