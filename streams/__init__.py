"""Stream processing: Faust wiring (app.py) around pure evaluation code (signals, ruleset, evaluator)."""

if __name__ != "tailhound.streams":  # the folder is mapped into the namespace (pyproject.toml, package-dir)
    raise ImportError(f"import tailhound.streams, not {__name__}: this folder is the tailhound.streams package")
