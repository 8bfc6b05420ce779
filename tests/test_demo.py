"""`floe local demo` end to end, as `make demo` runs it, at the small size CI can afford."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FLOE = Path(sys.executable).parent / "floe"


# In `make faults`, not `make test`: the whole demo, Spark included, takes about two minutes, a tenth of CI's budget; `make demo` runs it and every part of it has its own default-suite test.
@pytest.mark.faults
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_small_demo_writes_reads_tiers_and_spark_reads_back_every_record(tmp_path: Path) -> None:
    result = subprocess.run([str(FLOE), "local", "demo", "--size", "small", "--data-dir", str(tmp_path / "demo")],
                            capture_output=True, text=True, timeout=1100)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Spark result = consumed records" in output
    summary = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:-1]]
               for line in output.splitlines() if line.count("│") >= 4}
    assert summary["produced over HTTP (front end)"][0] == "10,000"
    assert summary["produced over Kafka (librdkafka)"][0] == "50,000"
    assert summary["consumed by group orders-demo"][0] == "60,000"
    assert summary["read by Spark from S3"][0] == "60,000"
    assert summary["Spark result = consumed records"][1] == "yes"
    assert summary["HTTP fetch of offset 0"][1] == "served from s3"


def test_the_demo_says_so_when_java_is_missing(tmp_path: Path) -> None:
    environment = {**os.environ, "PATH": str(FLOE.parent)}
    result = subprocess.run([str(FLOE), "local", "demo", "--size", "small", "--data-dir", str(tmp_path / "demo")],
                            capture_output=True, text=True, timeout=120, env=environment)
    assert result.returncode == 2
    assert "Java is missing" in result.stdout + result.stderr
    assert not (tmp_path / "demo").exists()
