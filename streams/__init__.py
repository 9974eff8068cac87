"""Stream processing: Faust wiring (app.py) around pure evaluation code (signals, ruleset, evaluator)."""
