"""The tool vocabulary of the env spec: names, arguments and the function specs the chat template takes."""

from __future__ import annotations

import pytest

from posttrain.envs.tools import TOOLS, tool_specs

pytestmark = pytest.mark.unit


def test_specs_list_every_argument_as_a_required_string():
    [spec] = tool_specs(["edit_file"])
    params = spec["function"]["parameters"]
    assert params["required"] == ["path", "search", "replace"] == list(TOOLS["edit_file"].arguments)
    with pytest.raises(ValueError, match="AgentConfig.tools: unknown"):
        tool_specs(["bash", "curl"])
