"""template.yaml passes cfn-lint and `sam validate --lint`, offline (a dummy region, no credentials)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cfnlint.decode import cfn_yaml

from functions.app import openapi_json

ROOT = Path(__file__).resolve().parents[2]
TOOLS = Path(sys.executable).parent
OFFLINE = {"AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "SAM_CLI_TELEMETRY": "0",
           "AWS_ACCESS_KEY_ID": "offline", "AWS_SECRET_ACCESS_KEY": "offline"}


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, env={**os.environ, **OFFLINE}, capture_output=True, text=True,
                          timeout=300)


def test_cfn_lint_passes() -> None:
    result = run(str(TOOLS / "cfn-lint"), "template.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_sam_validate_lint_passes() -> None:
    result = run(str(TOOLS / "sam"), "validate", "--lint", "--template", "template.yaml", "--region", "us-east-1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is a valid SAM Template" in result.stdout + result.stderr


def routed(template: dict) -> list[tuple[str, str]]:
    """(method, path) of every HttpApi event of every function in the template."""
    routes = []
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        for event in resource["Properties"].get("Events", {}).values():
            if event["Type"] == "HttpApi":
                routes.append((event["Properties"]["Method"], event["Properties"]["Path"]))
    return routes


def reaches(route: tuple[str, str], method: str, path: str) -> bool:
    routed_method, routed_path = route
    if routed_method not in ("ANY", method.upper()):
        return False
    if routed_path.endswith("/{proxy+}"):
        return path.startswith(routed_path.removesuffix("{proxy+}"))
    return routed_path == path


def test_every_operation_of_the_openapi_document_is_routed_to_a_function() -> None:
    template = cfn_yaml.loads((ROOT / "template.yaml").read_text())
    routes = routed(template)
    operations = [(method, path) for path, item in json.loads(openapi_json())["paths"].items() for method in item]
    assert operations
    for method, path in operations + [("GET", "/v1/openapi.json")]:
        assert any(reaches(route, method, path) for route in routes), (method, path)
