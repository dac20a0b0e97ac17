"""Tool-call formats per model family, with the families' real tokenizers and templates: each format parses model
output (valid, several, malformed), the format is read from the template (the one that parses back the call the
template renders for a past turn), a call round-trips through template and tokenizer, and the end-of-turn the
agent stops at is the template's own."""

from __future__ import annotations

import pytest

from posttrain.agent.parser import FORMATS, CallError, ToolCall, parse_calls
from posttrain.agent.template import AGENT_TEMPLATE, ChatFormat, TemplateError
from posttrain.envs.tools import TOOLS, tool_specs
from posttrain.rollout.prompts import stop_token_ids
from posttrain.training.families import FAMILIES

pytestmark = pytest.mark.unit

ALLOWED = {name: tool.arguments for name, tool in TOOLS.items()}
FORMAT_OF = {"mistral": "mistral", "qwen2": "hermes", "llama3": "llama3_json"}  # what each family's template writes
CALLS = [{"name": "write_file", "arguments": {"path": "a.json", "content": '{"k": ["]}"]}'}},
         {"name": "submit", "arguments": {}}]


@pytest.fixture(scope="module")
def family_fmt(family_policy):
    from transformers import AutoTokenizer

    made = {}

    def get(family: str) -> ChatFormat:
        if family not in made:
            made[family] = ChatFormat(AutoTokenizer.from_pretrained(family_policy(family)), tool_specs(list(TOOLS)))
        return made[family]

    return get


def test_the_formats_are_registered_by_name():
    assert sorted(FORMATS) == ["hermes", "llama3_json", "mistral"]


@pytest.mark.parametrize("text", [
    '[TOOL_CALLS] [{"name": "bash", "arguments": {"command": "ls"}}, {"name": "submit", "arguments": {}}]</s>',
    'Let me see. [TOOL_CALLS][{"name": "bash", "arguments": {"command": "ls"}}][TOOL_CALLS] [{"name": "submit"}]',
])
def test_mistral_calls_are_a_json_list_after_the_marker(text):
    assert parse_calls(text, ALLOWED, "mistral") == [ToolCall("bash", {"command": "ls"}), ToolCall("submit", {})]


@pytest.mark.parametrize("text", [
    '{"name": "bash", "parameters": {"command": "ls"}}; {"name": "submit", "parameters": {}}<|eot_id|>',
    '\n{"name": "bash", "parameters": {"command": "ls"}}\n{"name": "submit"}',
])
def test_llama3_calls_are_the_bare_json_of_the_turn(text):
    assert parse_calls(text, ALLOWED, "llama3_json") == [ToolCall("bash", {"command": "ls"}), ToolCall("submit", {})]


def test_a_turn_in_another_format_calls_nothing():
    hermes, mistral, llama = (FORMATS[n].render(CALLS[1]) for n in ("hermes", "mistral", "llama3_json"))
    assert parse_calls(mistral + llama, ALLOWED, "hermes") == []
    assert parse_calls(hermes + llama, ALLOWED, "mistral") == []
    assert parse_calls(hermes + mistral, ALLOWED, "llama3_json") == []
    assert parse_calls("I am done.<|eot_id|>", ALLOWED, "llama3_json") == []


@pytest.mark.parametrize("call_format, text, fragment", [
    ("mistral", "[TOOL_CALLS] [{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}", "not valid JSON"),
    ("mistral", '[TOOL_CALLS] {"name": "submit", "arguments": {}}', "followed by a JSON list"),
    ("mistral", '[TOOL_CALLS] ["submit"]', 'a tool call is a JSON object {"name": ..., "arguments": {...}}'),
    ("mistral", '[TOOL_CALLS] [{"name": "bash", "arguments": {}}]', "arguments missing ['command']"),
    ("mistral", "[TOOL_CALLS] [" + "[" * 5000, "nested too deeply"),
    ("llama3_json", '{"name": "bash", "parameters": {"command": "ls"}', "not valid JSON"),
    ("llama3_json", '{"name": "bash", "arguments": {"command": "ls"}}', "parameters missing ['command']"),
    ("llama3_json", '{"name": "bash", "parameters": "ls"}', "bash: parameters must be a JSON object"),
    ("llama3_json", '{"name": "rm", "parameters": {}}', "unknown tool 'rm'"),
    ("llama3_json", r'{"name": "bash", "parameters": {"command": "\udc80"}}', "not UTF-8 text"),
])
def test_malformed_calls_of_each_format_become_error_observations(call_format, text, fragment):
    [error] = parse_calls(text, ALLOWED, call_format)
    assert isinstance(error, CallError)
    assert error.message.startswith("error: ")
    assert fragment in error.message


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_format_end_of_turn_and_stops_come_from_the_familys_template(family, family_fmt, family_policy):
    fmt = family_fmt(family)
    eos = fmt.tokenizer.eos_token
    assert fmt.calls.name == FORMAT_OF[family]
    assert fmt.closing.strip() == eos
    assert fmt.stop == [eos]  # each family's template closes a turn with its EOS
    assert fmt.tokenizer.convert_tokens_to_ids(eos) in stop_token_ids(fmt.tokenizer, str(family_policy(family)))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_call_round_trips_through_the_template_and_the_tokenizer(family, family_fmt):
    """The template's rendering of past calls parses back to them; the format's own rendering (what a scripted
    policy writes), tokenized and decoded as the agent decodes a model's tokens, parses back too, and the closing
    adds nothing after the end-of-turn."""
    fmt = family_fmt(family)
    structured = [{"type": "function", "function": call} for call in CALLS]
    rendered = fmt.assistant_text({"role": "assistant", "content": "", "tool_calls": structured})
    expected = [ToolCall(c["name"], c["arguments"]) for c in CALLS]
    assert fmt.calls.parse(rendered, ALLOWED) == expected
    for call in CALLS:
        ids = fmt.encode(fmt.calls.render(call) + fmt.closing)
        text = fmt.tokenizer.decode(ids, skip_special_tokens=False)
        assert fmt.calls.parse(text, ALLOWED) == [ToolCall(call["name"], call["arguments"])]
        assert fmt.closing_ids(ids) == []


def test_mistral_puts_a_space_before_the_assistants_text(family_fmt):
    fmt = family_fmt("mistral")
    task = [{"role": "user", "content": "Fix calc.py."}]
    answer = fmt.render([*task, {"role": "assistant", "content": "Done."}])
    assert answer == fmt.render(task, add_generation_prompt=True) + " Done." + fmt.closing
    assert fmt.closing == "</s>"
    assert fmt.observation_text(["ok"]) == '[TOOL_RESULTS] {"content": "ok"}[/TOOL_RESULTS]'


def test_a_format_can_be_named_for_a_template_that_renders_no_calls(family_fmt):
    tokenizer = family_fmt("qwen2").tokenizer
    no_calls = ("{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
                "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
    with pytest.raises(TemplateError, match=r"parses back in no format of \['hermes', 'mistral', 'llama3_json'\]"):
        ChatFormat(tokenizer, [], chat_template=no_calls)
    assert ChatFormat(tokenizer, [], chat_template=no_calls, call_format="hermes").calls.name == "hermes"
    with pytest.raises(TemplateError, match="no tool-call format 'xml'"):
        ChatFormat(tokenizer, [], chat_template=AGENT_TEMPLATE, call_format="xml")


def test_the_tier_reads_the_policys_template_and_refuses_a_base_model(family_policy, tmp_path):
    import shutil

    from posttrain.agent.tier import chat_format
    from posttrain.config import AgentConfig

    assert chat_format(str(family_policy("llama3")), AgentConfig()).calls.name == "llama3_json"
    base = shutil.copytree(family_policy("llama3"), tmp_path / "base")
    (base / "chat_template.jinja").unlink()
    with pytest.raises(TemplateError, match=f"the tokenizer of '{base}' has no chat template .*a base model"):
        chat_format(str(base), AgentConfig())
    named = chat_format(str(base), AgentConfig(chat_template="chatml", tool_format="hermes"))
    assert (named.calls.name, named.closing) == ("hermes", "<|im_end|>\n")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_scripted_policy_follows_its_script_turn_by_turn_in_each_family(family, family_fmt):
    """Its turn is read from the prompt: generation prompts, or (Mistral's empty one) the closed turns."""
    from posttrain.agent.scripted import SUBMIT, ScriptedPolicy

    fmt = family_fmt(family)
    policy = ScriptedPolicy(fmt, {"Fix calc.py.": CALLS[:1]})
    context = fmt.prompt_ids([{"role": "user", "content": "Fix calc.py."}])
    for call in (CALLS[0], SUBMIT, SUBMIT):
        [[sample]] = policy.generate_ids([context], 1, 0.0, 256)
        assert fmt.calls.parse(sample.text, ALLOWED) == [ToolCall(call["name"], call["arguments"])]
        context += sample.token_ids + fmt.closing_ids(sample.token_ids) + fmt.observation_ids(["ok"])
