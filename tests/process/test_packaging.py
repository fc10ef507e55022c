"""A plain (non-editable) install: the wheel holds the package and the twistd plugin, and an
interpreter that sees only that install finds `gtm` in ``twistd --help`` and runs the
`gtmcluster` command.

The wheel is built from a copy of the checkout, so the build never writes ``build/`` or
``*.egg-info`` into the working tree. The interpreter runs with ``-S`` (no site processing),
so neither the editable install of the checkout nor its ``twistd-plugins`` path file is
visible; PYTHONPATH holds the install target first, then the virtualenv's site-packages
for the dependencies.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.process, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
NOT_SOURCE = shutil.ignore_patterns(
    ".venv", ".git", "var", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "test-artifacts"
)
TWISTD = "from twisted.scripts.twistd import run; run()"


@dataclass
class Installed:
    wheel: Path
    target: Path

    def env(self, with_install: bool = True) -> dict[str, str]:
        """Environment for ``python -S``: the install target (or not), then the dependencies."""
        paths = [str(self.target)] if with_install else []
        paths.append(sysconfig.get_paths()["purelib"])
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["PYTHONPATH"] = os.pathsep.join(paths)
        return env

    def run(self, *args: str, with_install: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-S", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=self.env(with_install),
            cwd=self.target.parent,  # not the checkout: '' on sys.path must not find gtmcluster
        )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    work = tmp_path_factory.mktemp("packaging")
    source = work / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "--wheel-dir", str(work / "wheels"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, f"pip wheel failed:\n{built.stdout}\n{built.stderr}"
    (wheel,) = (work / "wheels").glob("gtmcluster-*.whl")
    target = work / "site"
    done = subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"pip install --target failed:\n{done.stdout}\n{done.stderr}"
    yield Installed(wheel, target)


def test_wheel_holds_the_package_and_the_plugin_outside_a_package(installed: Installed) -> None:
    """The wheel ships gtmcluster (with py.typed and the dashboard page) and
    twisted/plugins/gtm.py, and no
    twisted/__init__.py or twisted/plugins/__init__.py that would shadow Twisted's own."""
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    assert "twisted/plugins/gtm.py" in names
    assert {
        "gtmcluster/__init__.py",
        "gtmcluster/py.typed",
        "gtmcluster/tap.py",
        "gtmcluster/dns/responder.py",
        "gtmcluster/api/static/dashboard.html",
        "gtmcluster/rum/snippet.js",
        "gtmcluster/demo/resolver.py",
    } <= names
    assert "twisted/__init__.py" not in names
    assert "twisted/plugins/__init__.py" not in names
    assert not any(name.startswith("tests/") for name in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(installed.wheel).read(entry_points).decode()
    assert "gtmcluster = gtmcluster.cli.main:main" in text


def test_imports_come_from_the_install_not_the_checkout(installed: Installed) -> None:
    """In the test interpreter, gtmcluster and the plugin module load from the install target."""
    out = installed.run(
        "-c", "import gtmcluster, twisted.plugins.gtm as p; print(gtmcluster.__file__); print(p.__file__)"
    )
    assert out.returncode == 0, out.stderr
    package, plugin = out.stdout.split()
    assert Path(package).is_relative_to(installed.target)
    assert Path(plugin) == installed.target / "twisted" / "plugins" / "gtm.py"


def test_twistd_help_lists_gtm_from_the_install(installed: Installed) -> None:
    """``twistd --help`` lists the `gtm` plugin with the install on the path, and not without it."""
    out = installed.run("-c", TWISTD, "--help")
    assert out.returncode == 0, out.stderr
    commands = [line.split()[0] for line in out.stdout.splitlines() if line.startswith("    ") and line.split()]
    assert "gtm" in commands, out.stdout
    control = installed.run("-c", TWISTD, "--help", with_install=False)
    assert "gtm" not in [line.split()[0] for line in control.stdout.splitlines() if line.startswith("    ")]


def test_twistd_gtm_options_load_from_the_install(installed: Installed) -> None:
    """``twistd gtm --help`` loads the plugin's options (gtmcluster.tap) and shows --config/--node."""
    out = installed.run("-c", TWISTD, "gtm", "--help")
    assert out.returncode == 0, out.stderr
    assert "--config=" in out.stdout
    assert "--node=" in out.stdout


def test_console_script_lists_check_and_demo(installed: Installed) -> None:
    """The installed `gtmcluster` script runs and its help lists the check and demo commands."""
    script = installed.target / "bin" / "gtmcluster"
    assert script.is_file()
    out = installed.run(str(script), "--help")
    assert out.returncode == 0, out.stderr
    assert "check" in out.stdout.split()
    assert "demo" in out.stdout.split()
