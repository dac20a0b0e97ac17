"""Progress in a log is a few lines, not a bar's redraws; on a terminal it is tqdm's live bar."""

from __future__ import annotations

import io
import itertools

import pytest
from tqdm.auto import tqdm

from posttrain.progress import LIBRARY_BAR_SWITCHES, LineProgress, progress, quiet_library_bars

pytestmark = pytest.mark.unit


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_not_a_terminal_writes_one_line_per_interval_and_a_last_one():
    out, ticks = io.StringIO(), itertools.count()  # 10 ms per update: 5000 updates take 50 s
    bar = progress(total=5000, desc="anti_hacking", unit="run", stream=out, clock=lambda: next(ticks) / 100)
    assert isinstance(bar, LineProgress)
    for _ in range(5000):
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 6
    assert "\r" not in out.getvalue()  # 10, 20, 30, 40, 50 s, and done
    assert lines[0].startswith("anti_hacking: 1000/5000 run (20%), 100.0 run/s, 10 s")
    assert lines[-1] == "anti_hacking: 5000/5000 run (100%), 100.0 run/s, 50 s, done"


def test_a_new_description_reports_the_last_phase_and_a_growing_total_is_shown():
    out, now = io.StringIO(), [0.0]
    bar = progress(desc="admission", unit="run", stream=out, clock=lambda: now[0])
    bar.set_description("solvability")  # nothing done yet: no line
    bar.total += 4
    bar.refresh()
    now[0] = 2.0
    bar.update(4)
    bar.set_description("coverage")
    bar.total += 6
    now[0] = 4.0
    bar.update(6)
    bar.close()
    assert out.getvalue().splitlines() == ["solvability: 4/4 run (100%), 2.0 run/s, 2 s",
                                           "coverage: 10/10 run (100%), 2.5 run/s, 4 s, done"]


def test_unknown_total_and_nothing_done():
    out = io.StringIO()
    bar = progress(desc="x", stream=out, interval_s=0.0, clock=itertools.count(1).__next__)
    bar.update(3)
    assert out.getvalue() == "x: 3 it, 3.0 it/s, 1 s\n"
    quiet = io.StringIO()
    progress(stream=quiet).close()
    assert quiet.getvalue() == ""


def test_a_terminal_gets_a_live_bar_and_disabled_writes_nothing():
    terminal = Terminal()
    bar = progress(total=3, desc="reward", unit="run", stream=terminal)
    assert isinstance(bar, tqdm)
    bar.update(3)
    bar.close()
    assert "3/3" in terminal.getvalue()
    assert "\r" in terminal.getvalue()
    for stream in (Terminal(), io.StringIO()):
        off = progress(total=3, stream=stream, enabled=False)
        off.update(3)
        off.close()
        assert stream.getvalue() == ""


def bars_after_importing_tasks(**env: str) -> dict:
    """In a fresh Python whose stderr is a pipe (a log), import ``tasks``; the library bar switches it then has."""
    import json
    import os
    import subprocess
    import sys

    from tests import ROOT

    probe = ("import json, os, tasks; from huggingface_hub.utils import are_progress_bars_disabled; "
             "from transformers.utils import logging; "
             "print(json.dumps({'transformers': logging.is_progress_bar_enabled(), "
             "'hub_disabled': are_progress_bars_disabled(), 'env': {k: os.environ.get(k) for k in %r}}))"
             % list(LIBRARY_BAR_SWITCHES))
    clean = {k: v for k, v in os.environ.items() if k not in LIBRARY_BAR_SWITCHES}
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env={**clean, **env}, capture_output=True,
                          text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_terminal_keeps_the_libraries_bars(monkeypatch):
    for name in LIBRARY_BAR_SWITCHES:
        monkeypatch.delenv(name, raising=False)
    assert not quiet_library_bars(Terminal())
    import os

    assert not any(name in os.environ for name in LIBRARY_BAR_SWITCHES)


def test_in_a_log_the_libraries_bars_are_off_unless_the_user_chose():
    quiet = bars_after_importing_tasks()
    assert quiet == {"transformers": False, "hub_disabled": True, "env": LIBRARY_BAR_SWITCHES}
    chosen = bars_after_importing_tasks(HF_HUB_DISABLE_PROGRESS_BARS="0")
    assert chosen["transformers"]
    assert not chosen["hub_disabled"]  # the user asked for the bars
