"""Severity order lives on the vocabulary: one rank for streams, roll-up and notifier."""

from tailhound.vocabulary import Severity, highest_severity


def test_severities_rank_info_warning_critical_and_unknown_lowest():
    assert [Severity.rank(s) for s in ("info", "warning", "critical")] == [0, 1, 2]
    assert Severity.rank("page-me-now") == 0


def test_the_highest_severity_keeps_the_callers_values():
    assert highest_severity(["warning", "critical", "info"]) == "critical"
    assert highest_severity([Severity.INFO, Severity.WARNING]) is Severity.WARNING
    assert highest_severity([], default=Severity.INFO) is Severity.INFO
    assert highest_severity(["info", "bogus"]) == "info"  # equals: the first
