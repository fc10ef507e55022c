"""Load balancing: methods as pure functions of (candidates, context), the
preferred/alternate/fallback chain, persistence, and the decision trace."""
