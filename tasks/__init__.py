"""Thin typed Flyte tasks, one module per stage; all numerics live in the ``posttrain`` library."""
