"""Launch plans for a Flyte cluster: the nightly evaluation of ``champion`` on the regression set, the weekly admission
refresh, and the default RL run. Registered with everything else (``make package`` then ``flytectl register files``,
or ``pyflyte register workflows``); a schedule runs once its launch plan is activated
(``flytectl update launchplan -p posttrain -d development --activate --version <v> evaluate_champion_nightly``).

Defaults are references, not this machine's paths (``posttrain.locations``): the demo suite as a folder of the package,
the policy as ``demo`` or a registry alias; a suite in blob storage is named by its URI. The regression set is the
eval split of ``REGRESSION_SUITE`` (the demo suite unless ``POSTTRAIN_REGRESSION_SUITE`` -- a URI, say -- is set when
registering): the nightly run's results are tagged with champion's version and the suite's digest, so the
regression gate (``posttrain.tracking.registry.promote``) compares later candidates against them.

Example:
    >>> evaluate_champion_nightly.schedule.cron_schedule.schedule
    '0 2 * * *'
    >>> refresh_admission_weekly.schedule.cron_schedule.schedule
    '0 3 * * 0'
"""

from __future__ import annotations

import os

from flytekit import CronSchedule, LaunchPlan

from posttrain.config import DEMO_SUITE_REF, EvaluateConfig, LoopConfig
from workflows.admit import admit
from workflows.evaluate import evaluate
from workflows.rl_loop import rl_loop

REGRESSION_SUITE = os.environ.get("POSTTRAIN_REGRESSION_SUITE", DEMO_SUITE_REF)
NIGHTLY_CRON, WEEKLY_CRON = "0 2 * * *", "0 3 * * 0"  # UTC: 02:00 every day; 03:00 on Sundays

evaluate_champion_nightly = LaunchPlan.get_or_create(
    workflow=evaluate, name="evaluate_champion_nightly",
    default_inputs={"cfg": EvaluateConfig(policy="models:/posttrain-policy@champion", suite=REGRESSION_SUITE)},
    schedule=CronSchedule(schedule=NIGHTLY_CRON))

refresh_admission_weekly = LaunchPlan.get_or_create(
    workflow=admit, name="refresh_admission_weekly", default_inputs={"suite": DEMO_SUITE_REF},
    schedule=CronSchedule(schedule=WEEKLY_CRON))

rl_loop_default = LaunchPlan.get_or_create(workflow=rl_loop, name="rl_loop_default",
                                           default_inputs={"cfg": LoopConfig()})
