"""Node state: the replicated record store and its values (records, their kinds and limits,
operators' admin states, persistence records) and its snapshot on disk."""
