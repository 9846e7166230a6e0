"""What a night leaves behind: typed ledger events, the ledger and its state, views, provenance."""
