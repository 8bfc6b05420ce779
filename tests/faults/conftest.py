"""The fault matrix's two sizes: a reduced set without the `faults` marker runs in `make test`
(`-m "not faults"`), the rest carries the marker; an expression that selects `faults` tests (as
`make faults` does with `-m faults`) selects the reduced set as well, so it runs the whole matrix."""

from __future__ import annotations

import pytest
from _pytest.mark.expression import Expression


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    expression = config.getoption("markexpr")
    if not expression:
        return
    compiled = Expression.compile(expression)

    def selects(markers: set[str]) -> bool:
        return compiled.evaluate(lambda name, **kwargs: not kwargs and name in markers)

    for item in items:
        if item.path.parent != config.rootpath / "tests" / "faults":
            continue
        names = {mark.name for mark in item.iter_markers()}
        if "faults" not in names and selects(names | {"faults"}) and not selects(names):
            item.add_marker(pytest.mark.faults)
