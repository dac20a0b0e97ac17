"""posttrain: closed-loop RL post-training of language models (admit envs, roll out, score in sandboxes, update,
evaluate), as a library with no flytekit import; ``tasks/`` and ``workflows/`` wrap it for Flyte. Its packages form
layers and imports only go down, lowest first: the foundations (``declaration``, ``config``, ``locations``,
``precision``, ``generated``, ``progress``, ``schemas``, ``timing``, ``memory``); ``trusted`` (programs that run inside
sandboxes); ``sandbox``; ``envs`` (the env spec and its vocabularies: tools, assertions, the destructive-command judge;
suites, verifiers); ``reward``; ``rollout``; ``training``; ``agent``; ``admission`` and ``evaluation``; ``tracking``
(MLflow); ``cli`` and ``config_docs``. ``tests/test_layers.py`` holds the same order and fails on an upward import
or a circle.
"""
