"""Probes: health checks of virtual servers and links, LDNS path probes (`paths`), and the
readers of a link's traffic counters and of servers' load figures (`linkrate`, `loadread`)."""
