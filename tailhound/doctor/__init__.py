"""`tailhound doctor`: which rules can fire with the signals a source carries."""
