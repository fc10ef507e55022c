"""Node state: persistence records now; the replicated record store with the sync issue."""
