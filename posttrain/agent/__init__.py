"""Agent episodes: multi-turn tool use in stateful sandbox sessions, with exact token accounting.

Modules: ``template`` (the chat format and its token pieces), ``parser`` (tool calls out of a model turn),
``tools`` (bash, python, read_file, write_file, edit_file, submit in a session), ``episode`` (segments of model
and masked template tokens, turns, steps, windows), ``budget`` (context budget: summaries of old observations, the
state file), ``scripted`` (oracle and no-op policies behind the engine protocol), ``runner`` (all episodes advance
together), ``envs`` (env specs to tasks, final workspaces to verifier solutions), ``rollout`` (scored groups with
shaping terms), ``table`` (the AgentTrajectories and Steps tables), ``warm_start`` (an agent policy from oracle
episodes). How they fit: ``docs/agent.md``.
"""
