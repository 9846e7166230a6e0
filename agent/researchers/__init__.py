"""Researchers: who proposes the next experiment. See `base.Researcher` for the contract."""
from agent.researchers.base import (
    Outcome,
    Prediction,
    Proposal,
    ProposalRejected,
    ResearchContext,
    Researcher,
    ResearcherDone,
    ResearcherError,
)

__all__ = ["Outcome", "Prediction", "Proposal", "ProposalRejected", "ResearchContext", "Researcher", "ResearcherDone",
           "ResearcherError"]
