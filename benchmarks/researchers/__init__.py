"""Researchers: the LLM's prompt cost, and the search's progress."""
