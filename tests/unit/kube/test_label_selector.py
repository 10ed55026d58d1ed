"""Label selectors in apimachinery's string form (the operator's
--managed-jobs-namespace-selector), including Kueue's default managedJobsNamespaceSelector."""

from __future__ import annotations

import pytest

from trainjobs.kube.selector import SelectorError, parse_selector

KUEUE_DEFAULT = "kubernetes.io/metadata.name notin (kube-system,kueue-system)"


@pytest.mark.parametrize(("selector", "labels", "matches"), [
    (KUEUE_DEFAULT, {"kubernetes.io/metadata.name": "team-a"}, True),
    (KUEUE_DEFAULT, {"kubernetes.io/metadata.name": "kube-system"}, False),
    (KUEUE_DEFAULT, {"kubernetes.io/metadata.name": "kueue-system"}, False),
    (KUEUE_DEFAULT, {}, True),  # notin holds for an absent key
    ("team in (a, b),tier=batch", {"team": "b", "tier": "batch"}, True),
    ("team in (a, b),tier=batch", {"team": "c", "tier": "batch"}, False),
    ("tier==batch", {"tier": "batch"}, True),
    ("tier!=batch", {"tier": "web"}, True),
    ("tier!=batch", {}, True),
    ("kueue-managed", {"kueue-managed": ""}, True),
    ("kueue-managed", {}, False),
    ("!legacy", {"legacy": "true"}, False),
    ("!legacy", {}, True),
    ("", {"anything": "x"}, True),
])
def test_matches(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert parse_selector(selector).matches(labels) is matches


@pytest.mark.parametrize("bad", ["team in a", "=x", "a b", "team in (a"])
def test_a_malformed_selector_is_a_typed_error_naming_the_part(bad: str) -> None:
    with pytest.raises(SelectorError, match="cannot parse"):
        parse_selector(bad)
