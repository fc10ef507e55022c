"""The sync group: certificates, TLS identity, the peer protocol and replication."""
