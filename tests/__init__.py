"""posttrain's tests mirror the library: ``tests/<package>/test_<module>.py``; kinds are markers (see conftest)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository
FIXTURES = ROOT / "tests" / "fixtures"
