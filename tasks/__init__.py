"""Thin typed Flyte tasks, one module per stage; all numerics live in the ``posttrain`` library.

Importing them (a local ``pyflyte run``, or a task pod) turns off third-party progress bars when the log is not a
terminal (``posttrain.progress.quiet_library_bars``): posttrain's own progress is one line per interval there.
"""

from posttrain.progress import quiet_library_bars

quiet_library_bars()
