"""The node's own log: one JSON line per event in ``<log_dir>/<node>.jsonl`` (rotated by
size), streamed by ``GET /api/v1/logs``, and prefixed for the journal under systemd."""
