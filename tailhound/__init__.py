"""tailhound: event-driven alert correlation for LLM inference fleets."""

__version__ = "0.1.0"
