"""The vadapt command line: help, and bad input rejected with one error line
that names the offending field (no panic, no hang, exit code != 0)."""

from __future__ import annotations

from pathlib import Path

import pytest

import harness


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "error" in line.lower()]


def assert_clean_error(r: harness.CliResult, *names: str) -> str:
    assert r.rc != 0, f"accepted bad input:\n{r.stdout}\n{r.stderr}"
    assert "panicked" not in r.stderr and "RUST_BACKTRACE" not in r.stderr, r.stderr
    errs = error_lines(r.stderr)
    assert len(errs) == 1, f"expected one error line, got:\n{r.stderr}"
    for n in names:
        assert n in errs[0], f"error line does not name {n!r}: {errs[0]}"
    return errs[0]


def test_help_lists_subcommands(vadapt_bin):
    r = harness.run_cli([str(vadapt_bin), "--help"])
    assert r.rc == 0, r.stderr
    for sub in ("serve", "stats", "set-policy"):
        assert harness.has_subcommand(vadapt_bin, sub), r.stdout


@pytest.mark.parametrize("sub", ["serve", "stats", "set-policy"])
def test_subcommand_help(vadapt_bin, sub):
    r = harness.run_cli([str(vadapt_bin), sub, "--help"])
    assert r.rc == 0, r.stderr
    assert "--control" in r.stdout


def serve(vadapt_bin, tmp_path, *args: str) -> harness.CliResult:
    # A control socket in the test's own directory: a `serve` that wrongly
    # starts must not touch /run/vadapt.
    return harness.run_cli([str(vadapt_bin), "serve", "--control", str(tmp_path / "c.sock"), *args])


def test_vm_zero_queues(vadapt_bin, tmp_path):
    r = serve(vadapt_bin, tmp_path, "--vm", f"name=vm1,socket={tmp_path}/vm1.sock,queues=0")
    assert_clean_error(r, "queues")
    assert not (tmp_path / "vm1.sock").exists()


def test_vm_unknown_key(vadapt_bin, tmp_path):
    r = serve(vadapt_bin, tmp_path, "--vm", f"name=vm1,socket={tmp_path}/v.sock,frobnicate=3")
    assert_clean_error(r, "frobnicate")


def test_vm_missing_socket(vadapt_bin, tmp_path):
    r = serve(vadapt_bin, tmp_path, "--vm", "name=vm1,queues=1")
    assert_clean_error(r, "socket")


def test_vm_bad_mac(vadapt_bin, tmp_path):
    r = serve(vadapt_bin, tmp_path, "--vm", f"name=vm1,socket={tmp_path}/v.sock,mac=52:54:zz")
    assert_clean_error(r, "mac")


def test_bad_policy_name(vadapt_bin, tmp_path):
    r = serve(vadapt_bin, tmp_path, "--sink", "s0", "--policy", "fastest-ever")
    assert_clean_error(r, "fastest-ever")


def test_config_unknown_key(vadapt_bin, tmp_path):
    cfg = tmp_path / "vadapt.toml"
    cfg.write_text(f'[[vm]]\nname = "vm1"\nsocket = "{tmp_path}/v.sock"\nqueuez = 2\n')
    r = serve(vadapt_bin, tmp_path, "--config", str(cfg))
    assert_clean_error(r, "queuez")


def test_config_missing_file(vadapt_bin, tmp_path):
    r = serve(vadapt_bin, tmp_path, "--config", str(tmp_path / "nope.toml"))
    assert_clean_error(r, "nope.toml")


PACKAGED_CONFIG = Path(__file__).resolve().parents[2] / "packaging" / "vadapt.toml"


def test_config_check_takes_the_packaged_file_and_names_a_bad_key(vadapt_bin, tmp_path):
    r = harness.run_cli([str(vadapt_bin), "config", "check", str(PACKAGED_CONFIG)])
    assert r.rc == 0 and "valid, 0 ports" in r.stdout, (r.stdout, r.stderr)
    bad = tmp_path / "bad.toml"
    bad.write_text('[[vm]]\nname = "vm1"\nsocket = "/run/v.sock"\nqueues = 99\n')
    assert_clean_error(harness.run_cli([str(vadapt_bin), "config", "check", str(bad)]), "queues")


def test_config_show_is_the_effective_configuration_and_reads_back(vadapt_bin, tmp_path):
    cfg = tmp_path / "vadapt.toml"
    cfg.write_text('backlog = 256\n[policy]\nkind = "eekbp"\n')
    argv = [str(vadapt_bin), "config", "show", "--config", str(cfg)]
    r = harness.run_cli([*argv, "--sink", "s0", "--control", str(tmp_path / "c.sock")])
    assert r.rc == 0, r.stderr
    shown = r.stdout
    # The file's, the command line's, and the defaults neither gave.
    for line in ("backlog = 256", 'kind = "eekbp"', 'name = "s0"', "mac_ageing_s = 300"):
        assert line in shown, f"no {line!r} in\n{shown}"
    assert f'control = "{tmp_path}/c.sock"' in shown, shown
    # What it prints is a config file that checks, and shows the same again.
    again = tmp_path / "shown.toml"
    again.write_text(shown)
    assert harness.run_cli([str(vadapt_bin), "config", "check", str(again)]).rc == 0
    shown_again = harness.run_cli([str(vadapt_bin), "config", "show", "--config", str(again)])
    assert shown_again.stdout == shown


def test_duplicate_port_names(vadapt_bin, tmp_path):
    r = serve(vadapt_bin, tmp_path, "--sink", "p0", "--echo", "p0")
    assert_clean_error(r, "p0")


def test_stats_without_daemon(vadapt_bin, tmp_path):
    r = harness.run_cli(
        [str(vadapt_bin), "stats", "--control", str(tmp_path / "absent.sock"), "--json"]
    )
    assert_clean_error(r, "absent.sock")


def assert_one_line_error(r: harness.CliResult, *names: str) -> None:
    """A failed start says one line on stderr, nothing before it."""
    assert_clean_error(r, *names)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, f"expected a single stderr line, got:\n{r.stderr}"


def test_cpu_the_machine_lacks_is_refused(vadapt_bin, tmp_path):
    r = serve(vadapt_bin, tmp_path, "--vm", f"name=vm1,socket={tmp_path}/v.sock", "--cpus", "99")
    assert_one_line_error(r, "cpus", "99")
    assert list(tmp_path.iterdir()) == []


def test_failed_start_removes_its_sockets(vadapt_bin, tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        host, port = taken.getsockname()
        addr = f"{host}:{port}"
        r = serve(
            vadapt_bin,
            tmp_path,
            "--vm",
            f"name=vm1,socket={tmp_path}/vm1.sock",
            "--vm",
            f"name=vm2,socket={tmp_path}/vm2.sock",
            "--metrics",
            addr,
        )
    assert_one_line_error(r, "metrics")
    assert list(tmp_path.iterdir()) == [], "a failed start left files behind"


def test_unknown_socket_group_is_one_line_and_leaves_nothing(vadapt_bin, tmp_path):
    r = serve(
        vadapt_bin,
        tmp_path,
        "--vm",
        f"name=vm1,socket={tmp_path}/vm1.sock",
        "--socket-group",
        "no-such-group-vadapt",
    )
    assert_one_line_error(r, "no-such-group-vadapt")
    assert list(tmp_path.iterdir()) == []


def test_missing_socket_folder_is_created_and_said(vadapt_bin, procs):
    sock = procs.workdir / "new" / "sub" / "vm1.sock"
    d = harness.Vadapt(vadapt_bin, procs.workdir, procs, ["--vm", f"name=vm1,socket={sock}"])
    d.start([sock])
    d.proc.wait_for(r"created the missing socket folder .*new/sub", 5)


def test_uncreatable_socket_folder_is_named(vadapt_bin, tmp_path):
    (tmp_path / "file").write_text("")
    r = serve(vadapt_bin, tmp_path, "--vm", f"name=vm1,socket={tmp_path}/file/sub/vm1.sock")
    assert_one_line_error(r, "socket folder", f"{tmp_path}/file/sub")


def test_sigterm_ends_the_daemon_whatever_its_clients_do(vadapt_bin, procs):
    """A frontend stuck mid-message, an idle control client and an idle
    scrape do not keep SIGTERM from ending the daemon, sockets removed."""
    import socket
    import struct
    import time

    sock = procs.workdir / "vm1.sock"
    d = harness.Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        ["--vm", f"name=vm1,socket={sock}", "--metrics", "127.0.0.1:0"],
    ).start([sock])
    m, _ = d.proc.wait_for(r"http://127\.0\.0\.1:(\d+)/metrics", 10)
    holders = []
    vm = socket.socket(socket.AF_UNIX)
    vm.connect(str(sock))
    # GET_FEATURES announcing 64 bytes of payload that never come.
    vm.sendall(struct.pack("<III", 1, 1, 64))
    holders.append(vm)
    ctl = socket.socket(socket.AF_UNIX)
    ctl.connect(str(d.control))
    holders.append(ctl)
    holders.append(socket.create_connection(("127.0.0.1", int(m.group(1)))))
    time.sleep(0.3)
    t0 = time.monotonic()
    rc = d.proc.stop(grace=5.0)
    took = time.monotonic() - t0
    for h in holders:
        h.close()
    assert rc == 0, f"exit {rc} after {took:.2f} s\n{d.proc.tail()}"
    assert took < 5.0, f"SIGTERM took {took:.2f} s"
    assert not sock.exists() and not d.control.exists()
