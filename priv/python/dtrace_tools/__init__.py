"""dtrace_tools: the operators' tools written in Python, one package.

The tools, each run by its launcher in priv/bin (`main(argv) -> int`):

    slow_spans        dtrace-slow-spans: why was a span slow, live
    recorder_report   dtrace-recorder-report: flight-recorder snapshots
    doctor            dtrace-doctor: why is a probe silent

and what they share: `why` (the breakdown rules), `timeline` (trace files
and flame graphs), `report_read`, `report_model`, `report_triggers` and
`report_svg` (the report's parts).

A launcher runs `python -m dtrace_tools.NAME` with priv/python put first on
PYTHONPATH and PYTHONSAFEPATH=1 (Python 3.11+: the current directory is
not searched, so no file there stands in for a module of a tool run as
root). The Python is $DTRACE_PYTHON if set, else the python3 on PATH: an
activated venv's, where the optional packages are found (`perfetto`, for
--trace FILE in Perfetto's protobuf; babeltrace2's `bt2`, which the report
needs and also finds in Debian's /usr/lib/python3/dist-packages).
`python_hint` says how to give a tool a Python that has one of them.
"""

import os

# priv/, the directory above priv/python/dtrace_tools/.
PRIV = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def priv(*parts: str) -> str:
    """A path under priv/: priv("bin", "dtrace-attach")."""
    return os.path.join(PRIV, *parts)


def python_hint(package: str) -> str:
    """How to run a tool with a Python that has `package` (a pip name)."""
    return ("a venv that has it: /usr/bin/python3 -m venv --system-site-packages DIR && "
            "DIR/bin/pip install %s; then run the tool with DIR activated, or with "
            "DTRACE_PYTHON=DIR/bin/python before the command (dtrace_recorder_report:report/2: "
            "its python option)" % package)
