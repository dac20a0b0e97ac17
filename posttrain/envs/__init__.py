"""Environments: the env spec (``spec``) and the vocabularies it is written in (``tools``, ``assertions``, the
destructive-command judge in ``destructive``), suites of specs and their loader (``suite``; the suites themselves
are YAML data under ``suites/``), generators and importers that write suites, and one verifier module per kind
(``verifiers``), which scores a solution in a sandbox.
"""
