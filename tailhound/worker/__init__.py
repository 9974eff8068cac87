"""The worker process: Faust app composition, its guard, web endpoints and metrics."""
