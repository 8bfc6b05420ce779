"""What benches read from a running broker besides their own timings: its event-loop lag, from the
``floe_event_loop_lag_seconds`` histogram it serves when ``floe.event.loop.lag.sample.ms`` is set."""

from __future__ import annotations


def loop_lag(metrics_url: str) -> dict[str, float]:
    """The broker's floe_event_loop_lag_seconds histogram now: cumulative bucket counts by bound, and its sum."""
    from urllib.request import urlopen

    from prometheus_client.parser import text_string_to_metric_families

    with urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "floe_event_loop_lag_seconds":
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    found[sample.labels["le"]] = sample.value
                elif sample.name.endswith("_sum"):
                    found["sum"] = sample.value
    return found


def lag_between(before: dict[str, float], after: dict[str, float]) -> dict:
    """Event-loop lag during a phase: samples, total seconds late, and samples at least 10 / 25 / 50 ms late."""
    def delta(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    count = delta("+Inf")
    return {"loop_lag_samples": int(count), "loop_lag_total_s": round(delta("sum"), 3),
            **{f"loop_lag_over_{ms}ms": int(count - delta(bound))
               for ms, bound in ((10, "0.01"), (25, "0.025"), (50, "0.05"))}}
