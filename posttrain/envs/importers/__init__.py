"""Importers that turn other benchmark formats into posttrain suites (folders of env spec YAML files).

- ``jsonl``: HumanEval- and MBPP-style JSONL (``posttrain import-jsonl FILE OUT``).
"""
