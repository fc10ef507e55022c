"""Proximity: the shared table of paths from each data center to each LDNS, the probe
requests that fill it, and the measurements the dynamic methods read."""
