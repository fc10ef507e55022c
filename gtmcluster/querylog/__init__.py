"""The query log: every DNS query and its answer, in dnstap (docs/query-log.md)."""
