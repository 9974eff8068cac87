"""Rules: the rule-file schema and loader, the `when:` language, its evaluation and compiled plans."""
