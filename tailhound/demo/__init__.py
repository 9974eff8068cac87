"""`tailhound demo`: the whole path on one machine, on the embedded broker."""
