"""Agent episodes on tiny Mistral and Llama 3 checkpoints with the real vLLM engine: the chat format, the call format
and the stops come from each family's template and tokenizer, and the token accounting is exact (every window is
exactly a prompt the engine received plus what it sampled).

A random model calls no tool, so each episode's first turn is scripted (a ``bash`` call written in the family's
format, with log-prob 0.0, as ``ScriptedPolicy`` writes it): the engine then continues from the family's own
closing, tool-result turn and generation prompt, and its turns are recorded as it produced them.
"""

from __future__ import annotations

import pytest

from posttrain.agent.runner import AgentTask, run_episodes
from posttrain.agent.scripted import ScriptedPolicy
from posttrain.agent.tier import chat_format
from posttrain.config import AgentConfig, RolloutConfig
from posttrain.sandbox import make_sandbox
from tests.agent.conftest import Recording, assert_exact_tokens

pytestmark = pytest.mark.integration
pytest.importorskip("vllm")

CONTEXT = 1024
CFG = AgentConfig(tools=["bash", "submit"], max_steps=3, max_new_tokens=64, temperature=1.0, seed=1)
CALL = {"name": "bash", "arguments": {"command": "echo hi"}}


class ScriptedFirstTurn:
    """The script's first turn for every episode, then the engine's turns."""

    def __init__(self, script: ScriptedPolicy, engine):
        self.script, self.engine, self.turns = script, engine, 0

    def generate_ids(self, prompts, n, temperature, max_tokens, top_p=1.0, seed=None, stop=()):
        source = self.script if self.turns == 0 else self.engine
        self.turns += 1
        return source.generate_ids(prompts, n, temperature, max_tokens, top_p, seed, stop)


@pytest.mark.parametrize("family, call_format, call_text", [
    ("llama3", "llama3_json", '{"name": "bash", "parameters": {"command": "echo hi"}}'),
    ("mistral", "mistral", '[TOOL_CALLS] [{"name": "bash", "arguments": {"command": "echo hi"}}]'),
])
def test_episodes_on_a_family_checkpoint_are_exactly_the_tokens_the_engine_saw(family, call_format, call_text,
                                                                               family_policy):
    from posttrain.rollout.engine import VLLMEngine

    path = str(family_policy(family))
    fmt = chat_format(path, CFG)
    assert (fmt.calls.name, fmt.stop) == (call_format, [fmt.tokenizer.eos_token])
    tasks = [AgentTask(env_id=f"t/{k}", group_id="g", sample_idx=k, prompt=f"Task {k}: say hi.") for k in range(3)]
    box = make_sandbox("bwrap-warm")
    sessions = [box.session(timeout_s=5) for _ in tasks]
    try:
        with VLLMEngine(path, RolloutConfig(replicas=1, max_model_len=CONTEXT, dtype="float32"), version=0) as engine:
            recording = Recording(ScriptedFirstTurn(ScriptedPolicy(fmt, {t.prompt: [CALL] for t in tasks}), engine))
            episodes = run_episodes(recording, fmt, tasks, sessions, CFG, max_context=CONTEXT)
            stops = engine.stop_token_ids
    finally:
        for s in sessions:
            s.close()
        box.close()

    for task, e in zip(tasks, episodes):
        first, *later = e.turns
        assert first.text == call_text + fmt.closing  # the call in the family's format, closed by its template
        assert [(s.tool, s.ok) for s in first.steps] == [("bash", True)]
        assert first.observations == ["hi\n"]
        # the context the engine continued from is the template's rendering of the structured conversation
        call = {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": CALL}]}
        rendered = fmt.render([*task.messages(), call, {"role": "tool", "content": "hi\n"}], add_generation_prompt=True)
        context = e.prefix_ids + first.model_ids + first.closing_ids + first.observation_ids
        assert fmt.tokenizer.decode(context, skip_special_tokens=False) == rendered
        assert later, "the episode ended after the scripted turn"
        for turn in later:  # the engine's turns: closed by the template, or stopped at an end-of-sequence id
            if turn.engine_finish == "stop":
                assert turn.model_ids[-1] in stops
            if turn.closing_ids:
                assert fmt.tokenizer.decode(turn.closing_ids, skip_special_tokens=False) == fmt.closing
        assert e.finish_reason in ("max_steps", "token_budget")
        assert_exact_tokens(e, recording)
