"""What a night leaves behind: typed ledger events, the ledger and its state, views, provenance.

`from agent.record import load` gives a tag's pandas frames (docs/ledger.md)."""
from agent.record.views import load

__all__ = ["load"]
