"""Shared fixtures. Process tests need `dig` (make test installs it); in CI a missing tool
is a failure, elsewhere a clear skip."""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_tool(name: str, package: str) -> None:
    """Fail in CI, skip elsewhere, when a system tool the test needs is missing."""
    if shutil.which(name) is None:
        message = f"{name} is not installed (Debian package {package}; make test installs it)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def dig_tool() -> None:
    require_tool("dig", "bind9-dnsutils")


@pytest.fixture
def dnsperf_tool() -> None:
    require_tool("dnsperf", "dnsperf")
