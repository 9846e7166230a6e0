"""Researchers: who proposes the next experiment. See `base.Researcher` for the contract."""
from agent.researchers.base import (
    Outcome,
    Prediction,
    Proposal,
    ResearchContext,
    Researcher,
    ResearcherError,
)

__all__ = ["Outcome", "Prediction", "Proposal", "ResearchContext", "Researcher", "ResearcherError"]
