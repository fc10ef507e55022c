"""gtmcluster: a global traffic manager on Twisted."""
