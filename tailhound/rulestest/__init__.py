"""Rules as code: unit tests of rule files (``tailhound rules test``) and backtests over recordings
(``tailhound rules backtest``). See docs/rules-testing.md."""
