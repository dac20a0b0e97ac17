"""One agent episode as token segments, its turns and its steps: exact token accounting.

The context the engine sees is a list of ``Segment``s whose concatenation is, token for token, the prompt of the
next model turn (and, once the episode ends, the prompt of the last turn plus the last model tokens):

- ``prompt``: the stable prefix (system, tools, task, generation prompt), ``[P]``, masked;
- ``model``: the tokens the engine sampled in a turn, with its behavior logprobs, ``[M_k]``, **trained**;
- ``template``: what closes the turn and the tool observations plus the next generation prompt, ``[C_k + O_k]``,
  masked;
- ``history``: after a context-budget compression (``budget.py``), all earlier turns re-sent as one masked segment
  (their model tokens were trained in the window where they were sampled).

A compression closes the current *window* (kept in ``windows``) and opens a new one; each window is one training
sequence, so every model token is trained exactly once, in the context it was sampled in.

Example:
    >>> segs = [Segment("prompt", [0, 5, 6]), Segment("model", [7, 8], [-0.5, -0.1]), Segment("template", [9])]
    >>> concat(segs), loss_mask(segs), behavior_logprobs(segs)
    ([0, 5, 6, 7, 8, 9], [0, 0, 0, 1, 1, 0], [0.0, 0.0, 0.0, -0.5, -0.1, 0.0])
    >>> split_prompt(segs)
    ([0, 5, 6], [7, 8, 9], [1, 1, 0], [-0.5, -0.1, 0.0])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from posttrain.config import AgentConfig

SEGMENT_KINDS = ("prompt", "model", "template", "history")
FINISH_REASONS = ("submit", "max_steps", "token_budget", "deadline", "infra")  # infra: the sandbox failed


@dataclass
class Segment:
    kind: str  # one of SEGMENT_KINDS
    token_ids: list[int]
    logprobs: list[float] | None = None  # model segments only: one behavior logprob per token

    def __post_init__(self):
        if self.kind not in SEGMENT_KINDS:
            raise ValueError(f"Segment.kind={self.kind!r}: expected one of {SEGMENT_KINDS}")
        if (self.kind == "model") != (self.logprobs is not None):
            raise ValueError("Segment.logprobs: required on model segments, absent on the others")
        if self.logprobs is not None and len(self.logprobs) != len(self.token_ids):
            raise ValueError(f"Segment.logprobs: {len(self.logprobs)} for {len(self.token_ids)} tokens")


def concat(segments: Sequence[Segment]) -> list[int]:
    """All token ids in order. ``[T]``"""
    return [t for s in segments for t in s.token_ids]


def loss_mask(segments: Sequence[Segment]) -> list[int]:
    """1 on model tokens, 0 elsewhere. ``[T]``"""
    return [int(s.kind == "model") for s in segments for _ in s.token_ids]


def behavior_logprobs(segments: Sequence[Segment]) -> list[float]:
    """The engine's logprob on model tokens, 0.0 on masked ones. ``[T]``"""
    return [lp for s in segments for lp in (s.logprobs or [0.0] * len(s.token_ids))]


def split_prompt(segments: Sequence[Segment]) -> tuple[list[int], list[int], list[int], list[float]]:
    """``(prompt, completion, mask, logprobs)``: the masked lead before the first model token, then the rest with
    its loss mask and behavior logprobs (``[T_p]``, ``[T_c]``, ``[T_c]``, ``[T_c]``)."""
    lead = next((i for i, s in enumerate(segments) if s.kind == "model"), len(segments))
    rest = segments[lead:]
    return concat(segments[:lead]), concat(rest), loss_mask(rest), behavior_logprobs(rest)


@dataclass
class StepRecord:
    """One tool call of a turn (or one rejected call: ``tool`` is then the name given, ``error`` why)."""

    turn: int
    tool: str
    arguments: str  # JSON
    ok: bool
    exit_code: int | None
    duration_ms: float
    observation_bytes: int
    error: str = ""  # the parse error, when the call was malformed or unknown
    infra_error: str = ""
    compressed_at_turn: int = -1  # the turn at which its observation became a summary; -1: never
    cpu_s: float | None = None  # what its sandbox steps used together: CPU seconds summed, the largest memory peak
    memory_peak_mb: float | None = None  # (None: no program ran for it, or the backend does not account it)


@dataclass
class Turn:
    """One model turn: what the engine got and gave, the calls run, and the template tokens that followed."""

    index: int
    prompt_tokens: int  # length of the prompt the engine received
    model_ids: list[int]
    logprobs: list[float]
    text: str
    engine_finish: str  # vLLM's reason: stop, length
    cached_tokens: int = 0  # prompt tokens served by the engine's prefix cache
    steps: list[StepRecord] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)  # what each call gave back, full text
    closing_ids: list[int] = field(default_factory=list)
    observation_ids: list[int] = field(default_factory=list)  # after compression: the summaries' tokens
    summaries: list[str] = field(default_factory=list)  # set when the turn's observations were compressed


@dataclass
class Compression:
    """A context-budget compression: at ``turn``, the observations of ``turns`` became one-line summaries."""

    turn: int
    turns: list[int]
    tokens_before: int
    tokens_after: int


@dataclass
class Episode:
    """An episode's state: the current window's segments, closed windows, turns, and how it ended."""

    env_id: str
    group_id: str
    sample_idx: int
    prefix_ids: list[int]
    config: AgentConfig = field(default_factory=AgentConfig)  # what it runs under: runner.episode_config
    segments: list[Segment] = field(default_factory=list)
    windows: list[list[Segment]] = field(default_factory=list)  # windows closed by a compression
    turns: list[Turn] = field(default_factory=list)
    compressions: list[Compression] = field(default_factory=list)
    finish_reason: str = ""  # "" while active, then one of FINISH_REASONS
    spent_s: float = 0.0  # the episode's own seconds: its turns' generate calls, its tool calls and state writes
    state_text: str = ""  # what the state file in the workspace holds
    infra_error: str = ""  # the sandbox failed the episode (flagged and excluded, never a reward of 0)
    snapshots: dict[int, bytes] = field(default_factory=dict)  # turn -> workspace tar after it (-1: before turn 0)

    def __post_init__(self):
        if not self.segments:
            self.segments = [Segment("prompt", list(self.prefix_ids))]

    @property
    def active(self) -> bool:
        return not self.finish_reason

    def context_ids(self) -> list[int]:
        """The current window's tokens: the next prompt (or, once finished, the final sequence)."""
        return concat(self.segments)

    @property
    def model_tokens(self) -> int:
        return sum(len(t.model_ids) for t in self.turns)

    @property
    def steps(self) -> list[StepRecord]:
        return [s for t in self.turns for s in t.steps]

    @property
    def sandbox_failure(self) -> str:
        """How the sandbox failed the episode: its own ``infra_error`` or the first tool call's; "" if it did not."""
        return self.infra_error or next((s.infra_error for s in self.steps if s.infra_error), "")

    def add_model_turn(self, turn: Turn) -> None:
        self.turns.append(turn)
        self.segments.append(Segment("model", list(turn.model_ids), list(turn.logprobs)))

    def add_template(self, turn: Turn) -> None:
        """Append what follows ``turn``'s model tokens (closing + observations + next generation prompt)."""
        self.segments.append(Segment("template", turn.closing_ids + turn.observation_ids))

    def reopened_length(self, observation_ids: dict[int, list[int]]) -> int:
        """Tokens of the window ``open_window`` would start now if turn ``k``'s observations were
        ``observation_ids[k]`` (the others as they are)."""
        return len(self.prefix_ids) + sum(len(t.model_ids) + len(t.closing_ids)
                                          + len(observation_ids.get(k, t.observation_ids))
                                          for k, t in enumerate(self.turns))

    def open_window(self) -> None:
        """Close the current window (at its last model tokens: what follows them was never sent) and start one that
        re-sends every turn so far (as rendered now) as history."""
        last = max(i for i, s in enumerate(self.segments) if s.kind == "model")
        self.windows.append(self.segments[:last + 1])
        history = [t for turn in self.turns for t in turn.model_ids + turn.closing_ids + turn.observation_ids]
        self.segments = [Segment("prompt", list(self.prefix_ids)), Segment("history", history)]

    def all_windows(self) -> list[list[Segment]]:
        return [*self.windows, self.segments]

    def finish(self, reason: str) -> None:
        if reason not in FINISH_REASONS:
            raise ValueError(f"finish_reason={reason!r}: expected one of {FINISH_REASONS}")
        self.finish_reason = reason
