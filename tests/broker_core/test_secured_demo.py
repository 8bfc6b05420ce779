"""`floe local demo --security sasl_ssl`, the secured half of `make demo`, end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# the secured demo, which make demo runs, about 30 s: in `make faults`, outside CI's 20-minute budget
pytestmark = pytest.mark.faults


def test_the_secured_demo_round_trips_every_record_and_refuses_a_wrong_password(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "broker_core.cli", "local", "demo", "--security", "sasl_ssl",
                             "--data-dir", str(tmp_path / "secured")], capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "20,000 in" in output
    assert "Authentication failed: invalid" in output
    assert "came back whole" in output
