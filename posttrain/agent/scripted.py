"""Scripted agent policies behind the engine protocol (``TokenRolloutEngine``): the oracle and the no-op.

A ``ScriptedPolicy`` answers each prompt with the next tool call of the script of the task it recognizes in the
prompt (the task's user message), as token ids with logprob 0.0; past the end of a script, or for a task without
one, it calls ``submit``. Calls are written in the chat format's call format (``fmt.calls``). ``noop_policy`` has
no scripts: it submits at once. The turn number is read from the prompt itself (how many generation prompts it
holds; with a template whose generation prompt is empty, as Mistral's, how many closed assistant turns), so the
policy is stateless like an engine and serves any number of episodes in one batch. Admission runs oracle episodes
(solvability) and no-op ones (anti-hacking); tests use both as doubles of a model.

Example:
    >>> from posttrain.agent.template import AGENT_TEMPLATE, ChatFormat
    >>> from posttrain.envs.tools import tool_specs
    >>> from posttrain.training.demo_policy import train_tokenizer
    >>> fmt = ChatFormat(train_tokenizer(["x = 1\\n"], 300), tool_specs(["bash", "submit"]), AGENT_TEMPLATE)
    >>> oracle = ScriptedPolicy(fmt, {"List files.": [{"name": "bash", "arguments": {"command": "ls"}}]})
    >>> [[s]] = oracle.generate_ids([fmt.prompt_ids([{"role": "user", "content": "List files."}])], n=1,
    ...                             temperature=0, max_tokens=128)
    >>> s.text, s.finish_reason, set(s.logprobs)
    ('<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call><|im_end|>', 'stop', {0.0})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from posttrain.agent.template import ChatFormat
from posttrain.rollout.engine import Sample

SUBMIT = {"name": "submit", "arguments": {}}


class ScriptedPolicy:
    """Follows ``scripts`` (task prompt -> list of calls ``{"name", "arguments"}``, written in the template's call
    format, or raw turn texts, sent as they are: malformed calls, probes), then submits."""

    def __init__(self, fmt: ChatFormat, scripts: Mapping[str, Sequence[Mapping | str]], version: int = 0):
        self.fmt, self.scripts, self.version = fmt, dict(scripts), version
        user = [{"role": "user", "content": "x"}]
        opened = fmt.render(user, add_generation_prompt=True)[len(fmt.render(user)):]
        # a prompt holds one generation prompt per turn; a template without one (Mistral) closes each earlier turn
        self.turn_marker, self.marked_before = (opened, 1) if opened else (fmt.closing, 0)

    def next_call(self, prompt_text: str) -> Mapping | str:
        tasks = [task for task in self.scripts if task in prompt_text]
        script = self.scripts[max(tasks, key=len)] if tasks else []
        turn = prompt_text.count(self.turn_marker) - self.marked_before
        return script[turn] if 0 <= turn < len(script) else SUBMIT

    def generate_ids(self, prompts: list[list[int]], n: int, temperature: float, max_tokens: int | list[int],
                     top_p: float = 1.0, seed: int | None = None, stop: Sequence[str] = ()) -> list[list[Sample]]:
        out = []
        for i, ids in enumerate(prompts):
            call = self.next_call(self.fmt.tokenizer.decode(ids, skip_special_tokens=False))
            text = call if isinstance(call, str) else self.fmt.calls.render(call)
            tokens = self.fmt.encode(text + self.fmt.closing)
            limit = max_tokens[i] if isinstance(max_tokens, list) else max_tokens
            tokens, finish = (tokens, "stop") if len(tokens) <= limit else (tokens[:limit], "length")
            sample = Sample(text=self.fmt.tokenizer.decode(tokens, skip_special_tokens=False),
                            prompt_token_ids=list(ids), token_ids=tokens, logprobs=[0.0] * len(tokens),
                            finish_reason=finish)
            out.append([sample] * n)
        return out

    def generate(self, prompts: list[str], n: int, temperature: float, max_tokens: int, top_p: float = 1.0,
                 seed: int | None = None) -> list[list[Sample]]:
        return self.generate_ids([self.fmt.encode(p) for p in prompts], n, temperature, max_tokens, top_p, seed)

    def close(self) -> None:
        """Nothing to release."""


def noop_policy(fmt: ChatFormat, version: int = 0) -> ScriptedPolicy:
    """Submits at once without touching the workspace."""
    return ScriptedPolicy(fmt, {}, version)
