"""The shipped benchmark results (``default.csv``, read by ``perfmodels.results_db``) and provenance."""
