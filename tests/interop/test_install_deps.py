"""scripts/install-deps.sh --check: every program the suite starts must come
from a package the script installs, so a package installed by hand on the
developer's machine cannot hide a missing install step."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install-deps.sh"


def check(script: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(script), "--check"], capture_output=True, text=True, timeout=60
    )


@pytest.fixture(autouse=True)
def debian():
    if shutil.which("dpkg") is None:
        pytest.skip("not a Debian system (no dpkg)")


def test_check_passes_after_install():
    r = check(SCRIPT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "dpdk-testpmd" in r.stdout and "dpdk-dev" in r.stdout, r.stdout


def test_check_fails_when_the_owning_package_is_not_installed_by_the_script(tmp_path):
    # The script as it was before the fresh-machine fix: `dpdk` instead of
    # `dpdk-dev`, although dpdk-testpmd on this machine belongs to dpdk-dev.
    text = SCRIPT.read_text()
    assert "    dpdk-dev qemu-system-x86" in text
    text = text.replace("    dpdk-dev qemu-system-x86", "    dpdk qemu-system-x86", 1)
    text = text.replace("dpdk-testpmd=dpdk-dev", "dpdk-testpmd=dpdk", 1)
    broken = tmp_path / "install-deps.sh"
    broken.write_text(text)
    r = check(broken)
    assert r.returncode != 0, r.stdout + r.stderr
    line = next(x for x in (r.stdout + r.stderr).splitlines() if "dpdk-testpmd" in x)
    assert "dpdk-dev" in line and "does not install" in line, line


def test_check_fails_when_a_program_is_missing(tmp_path):
    text = SCRIPT.read_text().replace(
        "    git=git\n", "    git=git\n    vadapt-no-such-program=git\n", 1
    )
    broken = tmp_path / "install-deps.sh"
    broken.write_text(text)
    r = check(broken)
    assert r.returncode != 0
    assert "missing program vadapt-no-such-program: package git should have provided it" in (
        r.stdout + r.stderr
    )
