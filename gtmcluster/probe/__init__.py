"""Probes: health checks of virtual servers and links (and, later, LDNS path probers)."""
