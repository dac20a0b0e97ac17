"""``make package`` serializes every task, workflow and launch plan offline into a registration archive; read back
from the tgz of protobufs: the tasks with their images and resource requests, the workflows, the schedules."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from flyteidl.admin.launch_plan_pb2 import LaunchPlan
from flyteidl.admin.task_pb2 import TaskSpec
from flyteidl.admin.workflow_pb2 import WorkflowSpec
from google.protobuf.json_format import MessageToDict

from tests import ROOT, launch_env

pytestmark = pytest.mark.integration

# pyflyte package names each file <index>_<name>_<kind>.pb: 1 task, 2 workflow, 3 launch plan
KINDS = {"1": TaskSpec, "2": WorkflowSpec, "3": LaunchPlan}


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> dict[str, dict[str, object]]:
    """``make package`` with GPU stages on (``POSTTRAIN_GPUS=1``); kind -> entity name -> parsed protobuf."""
    out = tmp_path_factory.mktemp("package") / "posttrain-flyte.tgz"
    proc = subprocess.run(["make", "-o", ".venv/.installed", "package", f"BIN={Path(sys.executable).parent}",
                           f"PACKAGE={out}", "CPU_IMAGE=registry.example/posttrain-cpu:t1",
                           "GPU_IMAGE=registry.example/posttrain-gpu:t1"],
                          cwd=ROOT, env=launch_env(POSTTRAIN_GPUS="1", DS_ACCELERATOR="cpu"),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    found: dict[str, dict[str, object]] = {kind: {} for kind in KINDS}
    with tarfile.open(out) as tgz:
        for member in tgz.getmembers():
            kind = member.name.rsplit("_", 1)[-1].removesuffix(".pb")
            message = KINDS[kind]()
            message.ParseFromString(tgz.extractfile(member).read())
            name = (message.template.id.name if kind == "1" else message.template.id.name if kind == "2"
                    else message.id.name)
            found[kind][name] = message
    return found


def test_archive_holds_the_tasks_with_images_and_resource_requests(archive):
    tasks = archive["1"]
    assert {"tasks.evaluate.evaluate", "tasks.rollout.sample", "tasks.update.update", "tasks.reward.reward",
            "tasks.standalone_eval.resolve_policy", "tasks.standalone_eval.report_evaluation"} <= set(tasks)

    def requests(name: str) -> dict[str, str]:
        """A task's requests: on its container, or on the primary container of its pod template."""
        template = tasks[name].template
        if template.HasField("k8s_pod"):
            return MessageToDict(template.k8s_pod.pod_spec)["containers"][0]["resources"]["requests"]
        names = {1: "cpu", 2: "gpu", 3: "memory"}
        return {names.get(r.name, str(r.name)): r.value for r in template.container.resources.requests}

    assert requests("tasks.reward.reward") == {"cpu": "2", "memory": "4Gi"}
    assert requests("tasks.update.update") == {"cpu": "2", "memory": "16Gi", "gpu": "1"}
    assert tasks["tasks.admit.fingerprint_suite"].template.container.image == "registry.example/posttrain-cpu:t1"
    assert tasks["tasks.rollout.sample"].template.container.image == "registry.example/posttrain-gpu:t1"


def test_sandbox_tasks_carry_the_bwrap_pod_template_and_no_privileged_mode(archive):
    for name, sandboxed in (("tasks.reward.reward", True), ("tasks.admit.admit_suite", True),
                            ("tasks.evaluate.score_eval", True), ("tasks.update.update", False)):
        template = archive["1"][name].template
        assert template.HasField("k8s_pod") == sandboxed, name
        if sandboxed:
            spec = MessageToDict(template.k8s_pod.pod_spec)
            (container,) = spec["containers"]
            security = container["securityContext"]
            assert spec["hostUsers"] is False
            assert security["privileged"] is False
            assert security["procMount"] == "Unmasked"
            assert security["seccompProfile"] == {"type": "Unconfined"}
            assert security["capabilities"] == {"drop": ["ALL"], "add": ["SETUID", "SETGID"]}
            assert security["allowPrivilegeEscalation"] is False
            assert container["image"] == "registry.example/posttrain-cpu:t1"


def test_archive_holds_the_workflows_and_the_scheduled_launch_plans(archive):
    assert {"workflows.rl_loop.rl_loop", "workflows.evaluate.evaluate", "workflows.admit.admit"} <= set(archive["2"])
    plans = archive["3"]
    nightly, weekly, default = (plans[name] for name in ("evaluate_champion_nightly", "refresh_admission_weekly",
                                                         "rl_loop_default"))
    assert nightly.spec.workflow_id.name == "workflows.evaluate.evaluate"
    assert nightly.spec.entity_metadata.schedule.cron_schedule.schedule == "0 2 * * *"
    assert weekly.spec.workflow_id.name == "workflows.admit.admit"
    assert weekly.spec.entity_metadata.schedule.cron_schedule.schedule == "0 3 * * 0"
    assert default.spec.workflow_id.name == "workflows.rl_loop.rl_loop"
    assert not default.spec.entity_metadata.HasField("schedule")
    assert "models:/posttrain-policy@champion" in str(nightly.spec.default_inputs)
    assert "posttrain:envs/suites/demo_python" in str(weekly.spec.default_inputs)


def test_no_path_of_this_machine_is_baked_into_a_registered_default(archive):
    """Registered defaults are references resolved where they run (``posttrain.locations``): nothing in a launch
    plan's or workflow's default inputs names this checkout or the home directory."""
    for kind in ("2", "3"):
        for name, entity in archive[kind].items():
            text = str(entity)
            assert str(ROOT) not in text, (name, str(ROOT))
            assert str(Path.home()) + "/" not in text, (name, str(ROOT))


def test_launch_plan_and_pod_template_examples_run():
    import doctest

    import tasks.pods
    import workflows.launch_plans

    for module in (workflows.launch_plans, tasks.pods):
        assert doctest.testmod(module).failed == 0, module.__name__
