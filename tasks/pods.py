"""The pod template of the tasks that run sandboxes (admission, rewards, eval scoring): what bubblewrap needs in a
Kubernetes pod, and no privileged mode.

bwrap (both bwrap backends) makes an unprivileged user namespace and, inside it, mount/pid/net/ipc/uts namespaces and
a fresh ``/proc``. In a pod three defaults stand in its way, and each is lifted for this container only:

- ``seccompProfile: Unconfined``: the runtime's default profile (RuntimeDefault) refuses ``clone``/``unshare`` with
  namespace flags to a process without CAP_SYS_ADMIN. posttrain loads its own seccomp policy into every sandboxed
  program, so the programs stay filtered.
- ``appArmorProfile: Unconfined``: the runtime's default AppArmor profile denies the mounts bwrap makes inside its
  namespace (Kubernetes >= 1.30; older clusters: the ``container.apparmor.security.beta.kubernetes.io`` annotation).
- ``procMount: Unmasked`` with ``hostUsers: false``: the runtime masks parts of ``/proc`` (``/proc/kcore``, ...), and
  the kernel refuses a new procfs mount under masked paths; an unmasked ``/proc`` is only allowed to a pod in its own
  user namespace (Kubernetes' UserNamespacesSupport), so the pod's root is not the node's root either.

Capabilities: all dropped but SETUID and SETGID, with which posttrain (root in the image) starts each bwrap as an
unprivileged user when it has no cgroup to put it in (always, in a pod). Never ``privileged``, never privilege
escalation. Checked with Docker's equivalents on the task image (``make images``): ``--cap-drop ALL --cap-add SETUID
--cap-add SETGID --security-opt seccomp=unconfined --security-opt systempaths=unconfined --security-opt
no-new-privileges`` runs both bwrap backends (references pass, wrong answers fail); without ``seccomp=unconfined``
bwrap cannot create its namespaces, without ``systempaths=unconfined`` (the masked /proc) it cannot mount /proc,
without SETUID/SETGID posttrain cannot start it. (This host has no AppArmor: that field is not checked here, nor is
anything on a real Kubernetes node.)

The node must allow unprivileged user namespaces (``user.max_user_namespaces`` > 0; on Ubuntu >= 23.10 also
``kernel.apparmor_restrict_unprivileged_userns=0``). Per-execution cgroups need a writable cgroup tree, which a pod
does not have: there each sandboxed process is held by rlimits only (bwrap logs a warning saying so), and the pod as a
whole by its own limits. Clusters that refuse any of this run sandboxes with ``sandbox.backend: docker`` instead.

Example:
    >>> spec = sandbox_pod_template().pod_spec
    >>> spec.host_users, spec.containers[0].security_context.privileged
    (False, False)
    >>> spec.containers[0].security_context.seccomp_profile.type
    'Unconfined'
"""

from __future__ import annotations

from flytekit import PodTemplate
from kubernetes.client import (V1AppArmorProfile, V1Capabilities, V1Container, V1PodSpec, V1SeccompProfile,
                               V1SecurityContext)

PRIMARY = "primary"  # flytekit's name of the task's own container in a pod template


def sandbox_pod_template() -> PodTemplate:
    """The pod template of a sandbox task (see the module docstring for why each field is set)."""
    security = V1SecurityContext(privileged=False, allow_privilege_escalation=False,
                                 capabilities=V1Capabilities(drop=["ALL"], add=["SETUID", "SETGID"]),
                                 seccomp_profile=V1SeccompProfile(type="Unconfined"),
                                 app_armor_profile=V1AppArmorProfile(type="Unconfined"), proc_mount="Unmasked")
    spec = V1PodSpec(containers=[V1Container(name=PRIMARY, security_context=security)], host_users=False)
    return PodTemplate(pod_spec=spec, primary_container_name=PRIMARY)
