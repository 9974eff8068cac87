"""Roll-up: node incidents folded into one per fault, in event-time order behind watermarks."""
