"""Reading a broker's metrics endpoint: what `floe top`, `floe groups describe` and the tests scrape.

`scrape` GETs a metrics URL and parses the text with prometheus-client's parser into a `Scrape`:
samples by name (with their suffix, ``..._total``) and labels.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


class ScrapeError(RuntimeError):
    """A metrics endpoint did not answer, or not with the Prometheus text format; the message names the URL."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


class Scrape:
    """One endpoint's samples at one moment."""

    def __init__(self, url: str, samples: Iterable[Sample]) -> None:
        self.url = url
        self.samples = list(samples)

    def series(self, name: str, **labels: str) -> Iterator[Sample]:
        """The samples named ``name`` whose labels include ``labels``."""
        for sample in self.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                yield sample

    def value(self, name: str, **labels: str) -> float | None:
        """The one sample named ``name`` with exactly these labels, None if there is none."""
        for sample in self.series(name, **labels):
            if sample.labels == labels:
                return sample.value
        return None

    def total(self, name: str, **labels: str) -> float:
        """The sum of the samples named ``name`` whose labels include ``labels`` (0 if none)."""
        return sum(sample.value for sample in self.series(name, **labels))


def parse(url: str, text: str) -> Scrape:
    try:
        return Scrape(url, (Sample(s.name, dict(s.labels), s.value)
                            for family in text_string_to_metric_families(text) for s in family.samples))
    except ValueError as exc:
        raise ScrapeError(f"{url}: not the Prometheus text format: {exc}") from None


def scrape(url: str, timeout_s: float = 5.0) -> Scrape:
    """GET ``url`` and parse it; ScrapeError if the endpoint does not answer 200 with metrics."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - an operator's URL
            return parse(url, response.read().decode())
    except (urllib.error.URLError, OSError) as exc:
        raise ScrapeError(f"{url}: {exc}") from None
