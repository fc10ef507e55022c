"""The node's HTTP API (JSON), on the member's `api` address."""
