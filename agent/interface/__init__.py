"""How agents and scripts read and drive a night: JSON views, the proposal inbox, the agent's
working copy."""
