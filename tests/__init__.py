"""posttrain's tests mirror the library: ``tests/<package>/test_<module>.py``; kinds are markers (see conftest)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository
FIXTURES = ROOT / "tests" / "fixtures"

# torch.distributed's rendezvous of *this* process (set when a test builds a DeepSpeed trainer in-process); a
# workflow launched from a test is a launch of its own and must not try to join it.
RENDEZVOUS_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def launch_env(**extra: str) -> dict[str, str]:
    """The environment for a subprocess launch (``pyflyte run``): ours without the rendezvous, plus ``extra``."""
    import os

    return {**{k: v for k, v in os.environ.items() if k not in RENDEZVOUS_VARS}, **extra}
