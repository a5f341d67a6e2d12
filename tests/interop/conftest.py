"""Fixtures for the interop tests (see harness.py for the process helpers).

Prerequisites (the vadapt binary with a `serve` subcommand, dpdk-testpmd,
qemu-system-x86_64, the guest image) make a test skip with the reason when
missing, except under scripts/test.sh or CI (VADAPT_INTEROP_STRICT=1 or
CI=true), where a missing prerequisite is a failure: CI installs all of them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import harness


def missing(reason: str) -> None:
    if harness.strict():
        pytest.fail(f"prerequisite missing (strict mode): {reason}", pytrace=False)
    pytest.skip(reason)


def pytest_addoption(parser):
    parser.addoption(
        "--migration-matrix",
        action="store_true",
        help="run test_migration.py for every policy and socket mode, not only its "
        "representative cell (scripts/migration_matrix.sh)",
    )
    parser.addoption(
        "--libvirt-matrix",
        action="store_true",
        help="run test_libvirt.py in both socket modes, not only its representative cell",
    )


def pytest_collection_modifyitems(config, items):
    """Cells marked `migration_matrix` run only with --migration-matrix (and
    `libvirt_matrix` only with --libvirt-matrix): the default run
    (scripts/test.sh) keeps one representative cell, as the full matrix of
    TCG guests takes several times as long."""
    skipped = [
        m
        for m, opt in (
            ("migration_matrix", "--migration-matrix"),
            ("libvirt_matrix", "--libvirt-matrix"),
        )
        if not config.getoption(opt)
    ]
    keep, drop = [], []
    for item in items:
        (drop if any(item.get_closest_marker(m) for m in skipped) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


@pytest.fixture(scope="session")
def vadapt_bin() -> Path:
    b = harness.find_vadapt()
    if b is None:
        missing("vadapt binary not built (set VADAPT_BIN or cargo build -p vadapt)")
    if not harness.has_subcommand(b, "serve"):
        missing(f"{b} has no `serve` subcommand yet")
    return b


@pytest.fixture(scope="session")
def testpmd() -> str:
    if not harness.which(harness.TESTPMD):
        missing("dpdk-testpmd not installed (scripts/install-deps.sh)")
    return harness.TESTPMD


@pytest.fixture(scope="session")
def qemu() -> str:
    if not harness.which(harness.QEMU):
        missing("qemu-system-x86_64 not installed (scripts/install-deps.sh)")
    if harness.guest_files() is None:
        missing("guest image not built (scripts/guest-image.sh)")
    return harness.QEMU


@pytest.fixture
def procs(request):
    """A fresh short work dir (sockets, logs) and the processes started in it.

    All processes are stopped (process group, SIGTERM then SIGKILL) whatever
    the test's outcome; the directory is removed when the test passed and kept
    (path printed) when it failed, for its logs.
    """
    workdir = harness.short_tmpdir("vadapt-it-")
    group = harness.ProcGroup(workdir)
    try:
        yield group
    finally:
        group.stop_all()
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.passed:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"\nlogs kept in {workdir}")
