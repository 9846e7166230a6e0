"""`nightshift serve`: a read-only local web page over one or more tags that updates as their
ledgers grow. The parts: `tail` (following a ledger from a byte cursor, writing nothing),
`live` (the runs in flight, their curves and time left, the proposals being written),
`tagview` (one tag's page, cached per ledger version), `files` (the few files of a tag the
page links to), `app` (the Starlette routes and the token), `server` (uvicorn, binding and
the token printed at start)."""
