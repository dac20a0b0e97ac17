"""Where suites and policies live, as configs name them: references, never one machine's paths.

A reference is one of
- a folder shipped in the package, ``posttrain:<path>`` (``posttrain:envs/suites/demo_python``): resolved where it
  runs, so a launch plan registered from a laptop works in a task pod whose package lives elsewhere;
- a URI of any filesystem Flyte reads through fsspec (``s3://bucket/suite``, ``gs://...``, ``abfs://...``): fetched
  by the task that needs it (a policy is handed on as a ``FlyteDirectory`` of that URI: referenced, not copied);
- a local directory (``file://`` or a plain path): used as it is.

A policy reference may also be ``demo`` / ``demo-agent`` (the demo policies, built on first use) or a registered
version or alias (``models:/posttrain-policy@champion``, ``models:/posttrain-policy/3``): resolving those needs the
trainer and the registry, so it lives above them (``posttrain.tracking.policies.policy_dir``).

Example:
    >>> local_copy("posttrain:envs/suites/demo_python").endswith("posttrain/envs/suites/demo_python")
    True
    >>> is_remote("s3://bucket/suite"), is_remote("file:///tmp/suite"), is_remote("suites/mine")
    (True, False, False)
    >>> reference_problem("posttrain:envs/suites/nope"), reference_problem("nosuchfs://bucket/x")
    ('no folder envs/suites/nope in the posttrain package', "unknown filesystem 'nosuchfs'")
    >>> display_name("s3://bucket/suites/mine/"), display_name("posttrain:envs/suites/demo_python")
    ('mine', 'demo_python')
"""

from __future__ import annotations

import tempfile
from pathlib import Path

PACKAGE = "posttrain:"
PACKAGE_ROOT = Path(__file__).resolve().parent


def is_remote(ref: str) -> bool:
    """A URI of a filesystem other than the local one."""
    return "://" in ref and not ref.startswith("file://")


def _packaged(ref: str) -> Path:
    return PACKAGE_ROOT / ref.removeprefix(PACKAGE)


def _local(ref: str) -> Path:
    return Path(ref.removeprefix("file://"))


def reference_problem(ref: str) -> str | None:
    """What is wrong with a folder reference, as far as this machine can tell (a remote one is checked where it is
    fetched: only its filesystem is known here); None when nothing is."""
    if not ref:
        return "empty"
    if ref.startswith(PACKAGE):
        return None if _packaged(ref).is_dir() else f"no folder {ref.removeprefix(PACKAGE)} in the posttrain package"
    if is_remote(ref):
        import fsspec

        protocol = ref.split("://", 1)[0]
        try:
            fsspec.get_filesystem_class(protocol)
        except (ValueError, ImportError) as err:
            return f"unknown filesystem {protocol!r}" if isinstance(err, ValueError) else f"{protocol}: {err}"
        return None
    return None if _local(ref).is_dir() else "no such directory"


def local_copy(ref: str) -> str:
    """A local directory holding the referenced folder: the package's or the local one itself; a remote one is
    downloaded (through Flyte's data layer, with its credentials) into a fresh temporary directory."""
    if ref.startswith(PACKAGE):
        return str(_packaged(ref))
    if not is_remote(ref):
        return str(_local(ref))
    from flytekit import FlyteContextManager

    local = Path(tempfile.mkdtemp(prefix="posttrain-fetched-")) / display_name(ref)
    FlyteContextManager.current_context().file_access.get_data(ref.rstrip("/") + "/", str(local), is_multipart=True)
    if not local.is_dir():
        raise FileNotFoundError(f"{ref}: nothing could be fetched from there")
    return str(local)


def display_name(ref: str) -> str:
    """The folder's own name (what MLflow shows for a suite)."""
    return ref.rstrip("/").rsplit("/", 1)[-1].removeprefix(PACKAGE)
