"""The morning after: the HTML report (and its charts), and replays of kept commits at full scale."""
