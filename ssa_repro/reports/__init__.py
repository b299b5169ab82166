"""Reports across runs (layer above the evaluations): run discovery, seed aggregation, differences,
figures, tables, comparisons and the paper's tables 2 and 3. Everything is read from stored results."""
