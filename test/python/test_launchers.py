"""The tools as users run them, through priv/bin's launchers: the Python
they pick ($DTRACE_PYTHON, else python3 on PATH), the package found from
priv/python whatever the current directory holds, a symbolic link to a
launcher, and the optional packages found where users put them (Debian's
python3-bt2 for a Python without dist-packages on its path, as a venv's)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "priv" / "bin"
FIXTURE = ROOT / "test" / "python" / "fixtures" / "slow-spans.txt"
DEBIAN_BT2 = Path("/usr/lib/python3/dist-packages/bt2")


def run(cmd: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, DTRACE_PYTHON=sys.executable)
    full.pop("PYTHONPATH", None)
    full.update(env)
    return subprocess.run(cmd, cwd=cwd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=60)


def test_the_tools_answer_help(tmp_path: Path) -> None:
    for tool, usage in [("dtrace-slow-spans", "usage: dtrace-slow-spans "),
                        ("dtrace-recorder-report", "usage: dtrace-recorder-report ")]:
        p = run([str(BIN / tool), "--help"], tmp_path)
        assert (p.returncode, p.stdout.startswith(usage)) == (0, True), p.stderr
    p = run([str(BIN / "dtrace-doctor")], tmp_path)
    assert (p.returncode, p.stderr) == (2, "usage: dtrace-doctor PID\n")


def test_no_file_in_the_current_directory_stands_in_for_a_module(tmp_path: Path) -> None:
    for shadow in ["json.py", "dtrace_tools/__init__.py", "dtrace_tools/why.py"]:
        (tmp_path / shadow).parent.mkdir(exist_ok=True)
        (tmp_path / shadow).write_text("raise SystemExit('shadowed by ' + __file__)\n")
    p = run([str(BIN / "dtrace-slow-spans"), "--events", str(FIXTURE), "--threshold", "30", "--tag", "req-2"],
            tmp_path)
    assert p.returncode == 0, p.stderr
    assert 'tag "req-2"' in p.stdout


def test_a_symbolic_link_to_a_launcher(tmp_path: Path) -> None:
    (tmp_path / "why-slow").symlink_to(BIN / "dtrace-slow-spans")
    p = run([str(tmp_path / "why-slow"), "--events", str(FIXTURE), "--json"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("{")


def test_no_python_says_how_to_give_one(tmp_path: Path) -> None:
    p = run([str(BIN / "dtrace-slow-spans"), "--help"], tmp_path, DTRACE_PYTHON=str(tmp_path / "python9"))
    assert p.returncode == 127
    assert p.stderr == ("dtrace-slow-spans: no %s: install Python 3.11 or later, or set DTRACE_PYTHON to one\n"
                        % (tmp_path / "python9"))


def isolated(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """code run by this Python without site packages (-S: as a venv made
    without --system-site-packages sees none of Debian's)."""
    return run([sys.executable, "-S", "-c", code], cwd, PYTHONPATH=str(ROOT / "priv" / "python"))


def test_bt2_is_found_in_a_dist_directory_only_if_it_loads(tmp_path: Path) -> None:
    (tmp_path / "good" / "bt2").mkdir(parents=True)
    (tmp_path / "good" / "bt2" / "__init__.py").write_text("FAKE = 1\n")
    (tmp_path / "bad" / "bt2").mkdir(parents=True)
    (tmp_path / "bad" / "bt2" / "__init__.py").write_text("import no_such_native_part\n")
    bad, good = str(tmp_path / "bad"), str(tmp_path / "good")
    p = isolated("import sys\n"
                 "from dtrace_tools.report_read import import_bt2\n"
                 "print(import_bt2(%r), %r in sys.path, 'bt2' in sys.modules)\n"
                 "print(import_bt2(%r).FAKE)\n" % (bad, bad, good), tmp_path)
    assert p.stdout.splitlines() == ["None False False", "1"], p.stderr


@pytest.mark.skipif(not DEBIAN_BT2.is_dir(), reason="no Debian python3-bt2 here")
def test_debians_bt2_is_found_for_a_python_without_dist_packages(tmp_path: Path) -> None:
    p = isolated("from dtrace_tools import report_read\n"
                 "report_read.need_bt2()\n"
                 "print(report_read.bt2.__file__)\n", tmp_path)
    if p.returncode == 3:
        pytest.skip("Debian's bt2 is built for another Python than %s" % sys.version.split()[0])
    assert p.stdout == "%s\n" % (DEBIAN_BT2 / "__init__.py")


def test_without_bt2_the_report_says_how_to_get_it(tmp_path: Path) -> None:
    p = isolated("from dtrace_tools import report_read, recorder_report\n"
                 "report_read.DEBIAN_DIST = %r\n"
                 "recorder_report.main([%r])\n" % (str(tmp_path / "none"), str(tmp_path)), tmp_path)
    assert p.returncode == 3
    assert p.stderr.startswith("dtrace-recorder-report: babeltrace2's Python bindings (bt2) are missing for ")
    assert "apt-get install python3-bt2" in p.stderr
    assert "DTRACE_PYTHON=/usr/bin/python3 priv/bin/dtrace-recorder-report" in p.stderr
    assert "venv --system-site-packages" in p.stderr


@pytest.mark.skipif(not DEBIAN_BT2.is_dir(), reason="no Debian python3-bt2 here")
def test_a_directory_without_a_trace(tmp_path: Path) -> None:
    p = run([str(BIN / "dtrace-recorder-report"), "--no-svg", str(tmp_path)], tmp_path,
            DTRACE_PYTHON="/usr/bin/python3")
    assert p.returncode == 4, p.stderr
    assert p.stderr.startswith("dtrace-recorder-report: no LTTng trace in %s: " % tmp_path)
