"""A small HTTP client for the front ends' tests: JSON in and out over http.client, bearer token set."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass
class HttpAnswer:
    status: int
    body: Any
    headers: dict[str, str]


class HttpApi:
    def __init__(self, url: str, token: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.token = token

    def request(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                headers: dict[str, str] | None = None, token: str | None = None) -> HttpAnswer:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode("utf-8"))
        sent = {"Content-Type": "application/json"}
        if token is None:
            token = self.token
        if token:
            sent["Authorization"] = f"Bearer {token}"
        sent.update(headers or {})
        connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            connection.request(method, path, body=data, headers=sent)
            response = connection.getresponse()
            payload = response.read()
        finally:
            connection.close()
        parsed = json.loads(payload) if payload and response.getheader("Content-Type", "").startswith(
            "application/json") else payload
        return HttpAnswer(response.status, parsed, {k.lower(): v for k, v in response.getheaders()})

    def get(self, path: str, **kwargs: Any) -> HttpAnswer:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> HttpAnswer:
        return self.request("POST", path, body, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> HttpAnswer:
        return self.request("DELETE", path, **kwargs)
