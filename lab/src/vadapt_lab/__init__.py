"""vadapt lab: experiment runner, plots and NetAP-ML training (Python side)."""

from vadapt_lab.results import ResultsError, load_results

__all__ = ["ResultsError", "load_results"]
