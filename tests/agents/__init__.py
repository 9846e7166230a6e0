"""The real coding-agent CLIs (Claude Code, Codex) driven headless against scripted fake models."""
