"""The `gtmcluster` command."""
