"""The shipped benchmark results (``default.csv.gz``, gzip CSV, read by ``perfmodels.results_db``) and provenance."""
