"""Shared fixtures. Process tests need `dig` (make test installs it); in CI a missing tool
is a failure, elsewhere a clear skip.

`make test` runs the suite in parallel (pytest-xdist, `-n`): most process tests wait on
timers of real twistd processes, so two run at once on two cores. The tests bind
fixed loopback addresses and ports (127.0.0.1:5353 and so on), so each worker, when root,
moves into a network namespace of its own first (`unshare(CLONE_NEWNET)`, loopback up):
each has its own 127.0.0.0/8 and ports, and namespaces the tests create are named by the
worker's pid (`wanem.run_prefix`). A worker that is not root cannot do that, so without
root the suite is run in one process (the Makefile checks). Tests that measure delays,
rates or lateness are marked `alone`: they run after the others, one at a time, as other
tests' load beside them would disturb what they measure.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
CLONE_NEWNET = 0x40000000


def pytest_configure(config: pytest.Config) -> None:
    """In an xdist worker: a network namespace of its own, with loopback up (see above)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if os.geteuid() != 0:
        raise pytest.UsageError("parallel workers need root for their own network namespaces; run without -n")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise pytest.UsageError(f"unshare(CLONE_NEWNET) in a test worker: {os.strerror(errno)}")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


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


@pytest.fixture
def openssl_tool() -> None:
    require_tool("openssl", "openssl")
