"""`gtmcluster replay`: what a config change would do to logged traffic (see docs/what-if.md)."""
